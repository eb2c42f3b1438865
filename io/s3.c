/* PLACEHOLDER (being written by a helper): s3 backend not built yet. */
#include <errno.h>
#include "io/io.h"
static int ph_open(const char *url, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err)
{
    (void)o; (void)priv; (void)size;
    return ps_seterr(err, -ENOSYS, "%s: s3 backend not built yet", url);
}
const struct ps_io_ops ps_io_s3_ops = { .name = "s3", .open = ph_open };
static int ph_oopen(const char *url, const struct ps_io_opts *o, void **priv, char *err)
{
    (void)o; (void)priv;
    return ps_seterr(err, -ENOSYS, "%s: s3 output not built yet", url);
}
const struct ps_out_ops ps_out_s3_ops = { .name = "s3", .open = ph_oopen };
