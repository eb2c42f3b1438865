/* PLACEHOLDER (being written by a helper): .beton reader not built yet. */
#include "format/format_int.h"
int ps_beton_is(const uint8_t *head, size_t headlen, uint64_t file_size)
{
    (void)head; (void)headlen; (void)file_size;
    return 0;
}
int ps_beton_open(struct ps_io *io, const char *name, struct ps_dataset **out, char *err)
{
    (void)io; *out = NULL;
    return ps_seterr(err, PS_EUNSUP, "%s: .beton reader not built yet", name);
}
int ps_beton_parse(const void *buf, size_t size, const char *name, struct ps_dataset **out, char *err)
{
    (void)buf; (void)size; *out = NULL;
    return ps_seterr(err, PS_EUNSUP, "%s: .beton reader not built yet", name);
}
