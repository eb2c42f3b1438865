/* PLACEHOLDER (being written by a helper): file output not built yet. */
#include <errno.h>
#include "io/io.h"
static int ph_oopen(const char *url, const struct ps_io_opts *o, void **priv, char *err)
{
    (void)o; (void)priv;
    return ps_seterr(err, -ENOSYS, "%s: file output not built yet", url);
}
const struct ps_out_ops ps_out_file_ops = { .name = "file", .open = ph_oopen };
