/*
 * io.c - picks a backend by URL and forwards to its table; the output
 * side (pack) likewise; the synchronous read helper.
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "io/io.h"
#include "io/io_int.h"

struct ps_io {
    const struct ps_io_ops *ops;
    void *priv;
    uint64_t size;
    int depth;
    char name[256];
    uint64_t next_cookie;
};

void ps_io_opts_init(struct ps_io_opts *o)
{
    memset(o, 0, sizeof *o);
    o->uring = -1;
    o->retries = 6;
    o->timeout_ms = 30000;
    o->deadline_ms = 120000;
}

static const struct ps_io_ops *pick_backend(const char *url)
{
    if (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0)
        return &ps_io_http_ops;
    if (strncmp(url, "s3://", 5) == 0)
        return &ps_io_s3_ops;
    if (strncmp(url, "nfs://", 6) == 0)
        return &ps_io_nfs_ops;
    return NULL; /* local: decided in open */
}

int ps_io_open(const char *url, const struct ps_io_opts *opts, struct ps_io **out, char *err)
{
    struct ps_io_opts defaults;
    struct ps_io *io;
    const struct ps_io_ops *ops;
    int rc;

    *out = NULL;
    if (!opts) {
        ps_io_opts_init(&defaults);
        opts = &defaults;
    }
    if (!url || !*url)
        return ps_seterr(err, -EINVAL, "empty URL");
    io = calloc(1, sizeof *io);
    if (!io)
        return ps_seterr(err, -ENOMEM, "out of memory");
    ps_url_redact(url, io->name, sizeof io->name);

    ops = pick_backend(url);
    if (!ops) {
        const char *path = strncmp(url, "file://", 7) == 0 ? url + 7 : url;
        if (strstr(url, "://") && strncmp(url, "file://", 7) != 0) {
            free(io);
            return ps_seterr(err, -EPROTONOSUPPORT,
                             "%s: unknown URL scheme (use a path, file://, http://, https://, s3:// or nfs://)",
                             ps_io_name_static(url));
        }
        ops = &ps_io_uring_ops;
        if (opts->uring == 0)
            ops = &ps_io_posix_ops;
        rc = ops->open(path, opts, &io->priv, &io->size, err);
        if (rc == -ENOSYS && opts->uring < 0) {
            /* io_uring disabled (sysctl, seccomp, old kernel): fall back, loudly once per process */
            static atomic_int told;
            ps_log(atomic_exchange(&told, 1) ? PS_LOG_DEBUG : PS_LOG_NOTICE,
                   "io_uring unavailable (%s), reading %s with pread", err, io->name);
            ops = &ps_io_posix_ops;
            rc = ops->open(path, opts, &io->priv, &io->size, err);
        }
    } else {
        rc = ops->open(url, opts, &io->priv, &io->size, err);
    }
    if (rc < 0) {
        free(io);
        return rc;
    }
    io->ops = ops;
    io->depth = opts->queue_depth > 0 ? opts->queue_depth : ops->max_inflight;

    *out = io;
    return 0;
}

uint64_t ps_io_size(const struct ps_io *io) { return io->size; }
int ps_io_depth(const struct ps_io *io) { return io->depth; }
const char *ps_io_name(const struct ps_io *io) { return io->name; }
const char *ps_io_backend(const struct ps_io *io) { return io->ops->name; }

int ps_io_submit(struct ps_io *io, const struct ps_io_req *reqs, int n)
{
    return io->ops->submit(io->priv, reqs, n);
}

int ps_io_reap(struct ps_io *io, struct ps_io_cqe *cqes, int max, int min, int timeout_ms)
{
    return io->ops->reap(io->priv, cqes, max, min, timeout_ms);
}

void ps_io_wakeup(struct ps_io *io)
{
    if (io->ops->wakeup)
        io->ops->wakeup(io->priv);
}

int ps_io_register_buffers(struct ps_io *io, void *base, size_t len)
{
    if (!io->ops->register_buffers)
        return 0;
    return io->ops->register_buffers(io->priv, base, len);
}

void ps_io_stats(const struct ps_io *io, struct ps_io_stats *s)
{
    memset(s, 0, sizeof *s);
    if (io->ops->stats)
        io->ops->stats(io->priv, s);
}

const char *ps_io_errmsg(const struct ps_io *io)
{
    const char *m = io->ops->errmsg ? io->ops->errmsg(io->priv) : NULL;
    return m ? m : "";
}

void ps_io_close(struct ps_io *io)
{
    if (!io)
        return;
    io->ops->close(io->priv);
    free(io);
}

int64_t ps_io_pread(struct ps_io *io, void *buf, uint64_t len, uint64_t off)
{
    struct ps_io_req r = { .offset = off, .length = len, .buf = buf, .cookie = ++io->next_cookie };
    struct ps_io_cqe c;
    int n;

    if (len == 0)
        return 0;
    n = ps_io_submit(io, &r, 1);
    if (n < 0)
        return n;
    if (n == 0)
        return -EBUSY;
    for (;;) {
        n = ps_io_reap(io, &c, 1, 1, -1);
        if (n < 0)
            return n;
        if (n == 1 && c.cookie == r.cookie)
            return c.res;
    }
}

/* ---- output ---- */

struct ps_out {
    const struct ps_out_ops *ops;
    void *priv;
    uint64_t written;
    int done;
    struct ps_out *next;
};

static pthread_mutex_t outs_lock = PTHREAD_MUTEX_INITIALIZER;
static struct ps_out *outs;

int ps_out_open(const char *url, const struct ps_io_opts *o, struct ps_out **out, char *err)
{
    struct ps_io_opts defaults;
    struct ps_out *po;
    int rc;

    *out = NULL;
    if (!o) {
        ps_io_opts_init(&defaults);
        o = &defaults;
    }
    po = calloc(1, sizeof *po);
    if (!po)
        return ps_seterr(err, -ENOMEM, "out of memory");
    if (strncmp(url, "s3://", 5) == 0)
        po->ops = &ps_out_s3_ops;
    else if (strstr(url, "://") && strncmp(url, "file://", 7) != 0) {
        free(po);
        return ps_seterr(err, -EPROTONOSUPPORT, "%s: can only write to a path, \"-\" or s3://",
                         ps_io_name_static(url));
    } else {
        po->ops = &ps_out_file_ops;
        if (strncmp(url, "file://", 7) == 0)
            url += 7;
    }
    rc = po->ops->open(url, o, &po->priv, err);
    if (rc < 0) {
        free(po);
        return rc;
    }
    pthread_mutex_lock(&outs_lock);
    po->next = outs;
    outs = po;
    pthread_mutex_unlock(&outs_lock);
    *out = po;
    return 0;
}

int ps_out_write(struct ps_out *out, const void *buf, size_t len)
{
    int rc = out->ops->write(out->priv, buf, len);
    if (rc == 0)
        out->written += len;
    return rc;
}

uint64_t ps_out_tell(const struct ps_out *out) { return out->written; }

int ps_out_commit(struct ps_out *out)
{
    int rc = out->ops->commit(out->priv);
    /* a failed commit is not done: close will abort it, so nothing half
     * written stays under the name */
    if (rc == 0)
        out->done = 1;
    return rc;
}

void ps_out_abort(struct ps_out *out)
{
    if (!out->done)
        out->ops->abort(out->priv);
    out->done = 1;
}

const char *ps_out_errmsg(const struct ps_out *out)
{
    const char *m = out->ops->errmsg ? out->ops->errmsg(out->priv) : NULL;
    return m ? m : "";
}

void ps_out_close(struct ps_out *out)
{
    struct ps_out **pp;

    if (!out)
        return;
    ps_out_abort(out);
    pthread_mutex_lock(&outs_lock);
    for (pp = &outs; *pp; pp = &(*pp)->next)
        if (*pp == out) {
            *pp = out->next;
            break;
        }
    pthread_mutex_unlock(&outs_lock);
    out->ops->release(out->priv);
    free(out);
}

void ps_out_abort_all(void)
{
    /* called on the way out after a signal: no lock games, best effort */
    for (struct ps_out *o = outs; o; o = o->next)
        if (!o->done) {
            o->done = 1;
            o->ops->abort(o->priv);
        }
}
