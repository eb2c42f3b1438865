/*
 * nfs_none.c - the nfs:// backend of a build without libnfs: a clear
 * message instead of a missing symbol. (The Makefile picks this or nfs.c.)
 */
#include "io/io_int.h"

static int nfs_none_open(const char *url, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err)
{
    (void)o;
    (void)size;
    *priv = NULL;
    return ps_seterr(err, PS_EUNSUP, "%s: pagestream was built without libnfs; nfs:// is unavailable "
                     "(install libnfs-dev and rebuild)", ps_io_name_static(url));
}

const struct ps_io_ops ps_io_nfs_ops = { .name = "nfs", .open = nfs_none_open };
