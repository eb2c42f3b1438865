/*
 * nfs.c - nfs://server/export/path through libnfs (4.0), without a mount:
 * parallel preads on one NFS connection, retries, fault injection.
 *
 * Why async and not a thread with the sync API: libnfs's async calls
 * (nfs_pread_async + poll + nfs_service) give the same shape as the curl
 * multi backend - one owner thread, N requests in flight on one connection,
 * no locks, no extra thread - and a libnfs context must not be used from
 * two threads at once anyway. The price is that an RPC cannot be cancelled:
 * a stuck one is ended by libnfs's own timeout (nfs_set_timeout), and a dead
 * connection by building a new context and sending what was in flight again.
 */
#include <sys/time.h>

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw-mount.h>

#include "io/io_int.h"

#define BACKOFF_BASE_MS 100
#define BACKOFF_CAP_MS 5000

enum { N_FREE = 0, N_WAIT, N_RUN };

struct nreq {
    struct ps_io_req r;
    struct nfs_be *be;
    int state, attempts, fault;
    uint64_t done;           /* bytes already in the buffer */
    uint64_t chunk;          /* bytes asked by the RPC in flight */
    uint64_t t_first, not_before;
};

struct nfs_be {
    struct nfs_context *nfs;
    struct nfsfh *fh;
    char server[256], export[2048], file[2048];
    int version;
    char name[200];
    int efd;
    int depth, retries, timeout_ms, deadline_ms;
    uint64_t size, readmax;
    struct nreq *rq;
    struct ps_io_cqe *cq;
    int cq_head, cq_n, outstanding;
    int destroying;
    atomic_int woken;
    uint64_t rng;
    struct ps_fault *fault;
    struct ps_io_stats st;
    char err[PS_ERRLEN];
};

static int pct_decode(const char *s, char *out, size_t n)
{
    size_t o = 0;
    for (; *s; s++) {
        char c = *s;
        if (c == '%' && isxdigit((unsigned char)s[1]) && isxdigit((unsigned char)s[2])) {
            char hx[3] = { s[1], s[2], 0 };
            c = (char)strtol(hx, NULL, 16);
            s += 2;
            if (c == 0)
                return -1;
        }
        if (o + 1 >= n)
            return -1;
        out[o++] = c;
    }
    out[o] = 0;
    return 0;
}

/* Make a context, mount the export, open the file. */
static int connect_ctx(struct nfs_be *be, char *err)
{
    struct nfs_stat_64 st;
    int rc;

    be->nfs = nfs_init_context();
    if (!be->nfs)
        return ps_seterr(err, -ENOMEM, "%s: cannot create an NFS context", be->name);
    if (be->version == 4 && nfs_set_version(be->nfs, 4 /* NFS_V4 */) < 0)
        return ps_seterr(err, PS_EUNSUP, "%s: this libnfs cannot speak NFSv4", be->name);
    /* whole seconds only (libnfs 4.0) */
    nfs_set_timeout(be->nfs, be->timeout_ms < 1000 ? 1000 : be->timeout_ms / 1000 * 1000);
    nfs_set_autoreconnect(be->nfs, 0);
    rc = nfs_mount(be->nfs, be->server, be->export);
    if (rc < 0)
        return ps_seterr(err, -EIO, "%s: cannot mount %s:%s: %s", be->name,
                         be->server, be->export, nfs_get_error(be->nfs));
    rc = nfs_open(be->nfs, be->file, O_RDONLY, &be->fh);
    if (rc < 0)
        return ps_seterr(err, rc, "%s: cannot open %s in export %s: %s", be->name, be->file, be->export,
                         nfs_get_error(be->nfs));
    rc = nfs_fstat64(be->nfs, be->fh, &st);
    if (rc < 0)
        return ps_seterr(err, rc, "%s: stat: %s", be->name, nfs_get_error(be->nfs));
    be->size = st.nfs_size;
    be->readmax = nfs_get_readmax(be->nfs);
    if (be->readmax == 0 || be->readmax > (4u << 20))
        be->readmax = 1u << 20;
    return 0;
}

static void drop_ctx(struct nfs_be *be)
{
    if (!be->nfs)
        return;
    /* pending callbacks fire (with errors) while the context goes: ignore them */
    be->destroying = 1;
    nfs_destroy_context(be->nfs);
    be->destroying = 0;
    be->nfs = NULL;
    be->fh = NULL;
}

/* Split server:/a/b/c/file into export and file: the longest exported
 * prefix the server lists, else the first prefix that mounts. */
static int find_export(struct nfs_be *be, const char *path, char *err)
{
    struct exportnode *ex = be->version == 4 ? NULL : mount_getexports(be->server);
    size_t best = 0;

    for (struct exportnode *e = ex; e; e = e->ex_next) {
        size_t l = strlen(e->ex_dir);
        while (l > 1 && e->ex_dir[l - 1] == '/')
            l--;
        if (l > best && strncmp(path, e->ex_dir, l) == 0 && path[l] == '/' && path[l + 1]) {
            best = l;
        }
    }
    if (ex)
        mount_free_export_list(ex);
    if (best) {
        snprintf(be->export, sizeof be->export, "%.*s", (int)best, path);
        snprintf(be->file, sizeof be->file, "%s", path + best);
        return connect_ctx(be, err);
    }
    /* no export list (NFSv4, or MOUNT refused): try /a, then /a/b, ... */
    for (const char *p = strchr(path + 1, '/'); p; p = strchr(p + 1, '/')) {
        char why[PS_ERRLEN];
        int rc;
        snprintf(be->export, sizeof be->export, "%.*s", (int)(p - path), path);
        snprintf(be->file, sizeof be->file, "%s", p);
        rc = connect_ctx(be, why);
        if (rc == 0)
            return 0;
        drop_ctx(be);
        if (rc != -EIO) /* the mount worked: the file is the problem */
            return ps_seterr(err, rc, "%s", why);
    }
    return ps_seterr(err, -ENOENT, "%s: no export of %s contains %s", be->name, be->server, path);
}

static void push_cqe(struct nfs_be *be, struct nreq *q, int64_t res)
{
    int slot = (be->cq_head + be->cq_n) % be->depth;
    be->cq[slot].cookie = q->r.cookie;
    be->cq[slot].res = res;
    be->cq_n++;
    be->st.requests++;
    if (res < 0) {
        be->st.errors++;
    } else {
        be->st.bytes += (uint64_t)res;
    }
    q->state = N_FREE;
}

static void schedule(struct nfs_be *be, struct nreq *q, uint64_t delay_ms)
{
    int lat;
    q->fault = ps_fault_roll(be->fault);
    lat = ps_fault_latency_ms(be->fault);
    /* an RPC cannot be held back half way here: a stall delays the attempt */
    if (q->fault == PS_FAULT_STALL)
        delay_ms += (uint64_t)ps_fault_stall_ms(be->fault);
    q->state = N_WAIT;
    q->not_before = ps_now_ns() + (delay_ms + (uint64_t)(lat > 0 ? lat : 0)) * 1000000ull;
}

static void attempt_failed(struct nfs_be *be, struct nreq *q, int code, const char *why)
{
    uint64_t now = ps_now_ns();
    uint64_t delay;

    if (q->attempts >= be->retries || now > q->t_first + (uint64_t)be->deadline_ms * 1000000ull) {
        snprintf(be->err, sizeof be->err, "%s: read of %" PRIu64 " bytes at %" PRIu64 ": %.150s (gave up after %d attempts)",
                 be->name, q->r.length, q->r.offset, why, q->attempts);
        push_cqe(be, q, code);
        return;
    }
    delay = (uint64_t)ps_backoff_ms(q->attempts, BACKOFF_BASE_MS, BACKOFF_CAP_MS, &be->rng);
    be->st.retries++;
    ps_log(PS_LOG_DEBUG, "%s: %s; retrying in %" PRIu64 " ms", be->name, why, delay);
    schedule(be, q, delay);
}

static void issue(struct nfs_be *be, struct nreq *q, int fresh);

static void on_read(int status, struct nfs_context *nfs, void *data, void *priv)
{
    struct nreq *q = priv;
    struct nfs_be *be = q->be;
    char why[200];

    (void)nfs;
    if (be->destroying || q->state != N_RUN)
        return;
    if (status < 0) {
        snprintf(why, sizeof why, "%.150s", data ? (const char *)data : strerror(-status));
        attempt_failed(be, q, status, why);
        return;
    }
    if (status == 0) {
        snprintf(be->err, sizeof be->err, "%s: file ends at %" PRIu64 ", before the %" PRIu64 " bytes asked at %" PRIu64,
                 be->name, q->r.offset + q->done, q->r.length, q->r.offset);
        push_cqe(be, q, -EIO);
        return;
    }
    if ((uint64_t)status > q->chunk) {
        snprintf(be->err, sizeof be->err, "%s: server returned %d bytes for a read of %" PRIu64, be->name, status,
                 q->chunk);
        push_cqe(be, q, -EIO);
        return;
    }
    if (q->fault == PS_FAULT_SHORT && status > 1) {
        status /= 2; /* a short read: the rest is asked for again below */
        q->fault = PS_FAULT_NONE;
    }
    memcpy((char *)q->r.buf + q->done, data, (size_t)status);
    q->done += (uint64_t)status;
    if (q->done < q->r.length) {
        issue(be, q, 0);
        return;
    }
    if (q->fault == PS_FAULT_CORRUPT)
        ps_fault_corrupt(be->fault, q->r.buf, (size_t)q->r.length);
    push_cqe(be, q, (int64_t)q->r.length);
}

/* fresh: a new attempt (after schedule); else the next chunk of this one */
static void issue(struct nfs_be *be, struct nreq *q, int fresh)
{
    uint64_t left = q->r.length - q->done;
    int rc;

    q->state = N_RUN;
    if (fresh)
        q->attempts++;
    if (fresh && (q->fault == PS_FAULT_ERROR || q->fault == PS_FAULT_429 || q->fault == PS_FAULT_RESET)) {
        /* an injected failure takes the path a real one takes */
        q->fault = PS_FAULT_NONE;
        attempt_failed(be, q, -EIO, "I/O error (injected)");
        return;
    }
    q->chunk = left < be->readmax ? left : be->readmax;
    rc = nfs_pread_async(be->nfs, be->fh, q->r.offset + q->done, q->chunk, on_read, q);
    if (rc < 0)
        attempt_failed(be, q, -EIO, nfs_get_error(be->nfs));
}

/* A broken connection: new context, and everything in flight asked again. */
static int reconnect(struct nfs_be *be)
{
    char err[PS_ERRLEN];
    int rc;

    drop_ctx(be);
    be->st.retries++;
    rc = connect_ctx(be, err);
    if (rc < 0) {
        drop_ctx(be);
        for (int i = 0; i < be->depth; i++)
            if (be->rq[i].state != N_FREE) {
                snprintf(be->err, sizeof be->err, "%s", err);
                push_cqe(be, &be->rq[i], rc);
            }
        return rc;
    }
    for (int i = 0; i < be->depth; i++)
        if (be->rq[i].state == N_RUN)
            schedule(be, &be->rq[i], 0);
    return 0;
}

static int timers(struct nfs_be *be)
{
    uint64_t now = ps_now_ns(), next = now + 100000000ull; /* nfs_service wants a tick for its timeouts */

    for (int i = 0; i < be->depth; i++) {
        struct nreq *q = &be->rq[i];
        if (q->state != N_WAIT)
            continue;
        if (q->not_before <= now) {
            if (!be->nfs) {
                snprintf(be->err, sizeof be->err, "%s: no connection to the server", be->name);
                push_cqe(be, q, -ENOTCONN);
            } else {
                issue(be, q, 1);
            }
        } else if (q->not_before < next) {
            next = q->not_before;
        }
    }
    return (int)((next - now + 999999) / 1000000);
}

static int nfs_be_open(const char *url, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err)
{
    struct nfs_be *be;
    struct ps_url u;
    char path[2048];
    int rc;

    *priv = NULL;
    rc = ps_url_parse(url, &u, err);
    if (rc < 0)
        return rc;
    if (strcmp(u.scheme, "nfs") != 0)
        return ps_seterr(err, PS_ECONFIG, "%s: not an nfs:// URL", ps_io_name_static(url));
    be = calloc(1, sizeof *be);
    if (!be)
        return ps_seterr(err, -ENOMEM, "out of memory");
    be->efd = -1;
    ps_url_redact(url, be->name, sizeof be->name);
    be->version = 3;
    if (u.query[0]) {
        if (strcmp(u.query, "version=4") == 0)
            be->version = 4;
        else if (strcmp(u.query, "version=3") != 0) {
            rc = ps_seterr(err, PS_ECONFIG, "%s: unknown option \"%s\" (only version=3 or version=4)", be->name,
                           u.query);
            goto fail;
        }
    }
    if (u.port) {
        rc = ps_seterr(err, PS_ECONFIG, "%s: a port in an nfs:// URL is not supported (the portmapper finds it)",
                       be->name);
        goto fail;
    }
    snprintf(be->server, sizeof be->server, "%s", u.host);
    if (pct_decode(u.path, path, sizeof path) < 0) {
        rc = ps_seterr(err, PS_ECONFIG, "%s: bad path", be->name);
        goto fail;
    }
    be->depth = o->queue_depth > 0 ? o->queue_depth : 8;
    if (be->depth > 256)
        be->depth = 256;
    be->retries = o->retries > 0 ? o->retries : 1;
    be->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    be->deadline_ms = o->deadline_ms > 0 ? o->deadline_ms : 120000;
    be->rng = ps_now_ns() ^ (uint64_t)(uintptr_t)be;
    rc = ps_fault_parse(ps_fault_spec(o), &be->fault, err);
    if (rc < 0)
        goto fail;
    be->rq = calloc((size_t)be->depth, sizeof *be->rq);
    be->cq = calloc((size_t)be->depth, sizeof *be->cq);
    be->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!be->rq || !be->cq || be->efd < 0) {
        rc = ps_seterr(err, -ENOMEM, "%s: out of memory", be->name);
        goto fail;
    }
    rc = find_export(be, path, err);
    if (rc < 0)
        goto fail;
    *size = be->size;
    *priv = be;
    return 0;
fail:
    drop_ctx(be);
    if (be->efd >= 0)
        close(be->efd);
    ps_fault_free(be->fault);
    free(be->rq);
    free(be->cq);
    free(be);
    return rc;
}

static int nfs_be_submit(void *priv, const struct ps_io_req *reqs, int n)
{
    struct nfs_be *be = priv;
    int accepted = 0;

    for (int i = 0; i < n && be->outstanding < be->depth; i++) {
        struct nreq *q = NULL;
        for (int j = 0; j < be->depth; j++)
            if (be->rq[j].state == N_FREE) {
                q = &be->rq[j];
                break;
            }
        if (!q)
            break;
        memset(q, 0, sizeof *q);
        q->be = be;
        q->r = reqs[i];
        q->t_first = ps_now_ns();
        be->outstanding++;
        accepted++;
        if (q->r.length == 0) {
            push_cqe(be, q, 0);
            continue;
        }
        if (q->r.offset > be->size || q->r.length > be->size - q->r.offset) {
            snprintf(be->err, sizeof be->err, "%s: read of %" PRIu64 " bytes at %" PRIu64 " is past the end (%" PRIu64 " bytes)",
                     be->name, q->r.length, q->r.offset, be->size);
            push_cqe(be, q, -EINVAL);
            continue;
        }
        schedule(be, q, 0);
        if (q->not_before <= ps_now_ns() && be->nfs)
            issue(be, q, 1);
    }
    return accepted;
}

static int nfs_be_reap(void *priv, struct ps_io_cqe *cqes, int max, int min, int timeout_ms)
{
    struct nfs_be *be = priv;
    uint64_t end = timeout_ms >= 0 ? ps_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    int got = 0;

    if (min > be->outstanding)
        min = be->outstanding;
    if (min > max)
        min = max;
    for (;;) {
        struct pollfd pfd[2];
        int wait = timers(be), np = 1, rc;

        if (be->cq_n >= min || be->cq_n >= max)
            break;
        if (timeout_ms >= 0) {
            uint64_t now = ps_now_ns();
            if (now >= end)
                break;
            if ((uint64_t)wait * 1000000ull > end - now)
                wait = (int)((end - now + 999999) / 1000000);
        }
        pfd[0].fd = be->efd;
        pfd[0].events = POLLIN;
        if (be->nfs) {
            pfd[1].fd = nfs_get_fd(be->nfs);
            pfd[1].events = (short)nfs_which_events(be->nfs);
            pfd[1].revents = 0;
            np = 2;
        }
        rc = poll(pfd, (nfds_t)np, wait);
        if (rc < 0 && errno != EINTR)
            return -errno;
        if (be->nfs && nfs_service(be->nfs, np == 2 && rc > 0 ? pfd[1].revents : 0) < 0) {
            ps_log(PS_LOG_NOTICE, "%s: connection lost (%s), reconnecting", be->name, nfs_get_error(be->nfs));
            reconnect(be);
        }
        if (rc > 0 && (pfd[0].revents & POLLIN)) {
            uint64_t v;
            if (read(be->efd, &v, sizeof v) < 0) {
                /* nothing to do: the counter is reset either way */
            }
        }
        if (atomic_exchange(&be->woken, 0))
            break;
    }
    while (got < max && be->cq_n) {
        cqes[got++] = be->cq[be->cq_head];
        be->cq_head = (be->cq_head + 1) % be->depth;
        be->cq_n--;
        be->outstanding--;
    }
    return got;
}

static void nfs_be_wakeup(void *priv)
{
    struct nfs_be *be = priv;
    uint64_t one = 1;
    atomic_store(&be->woken, 1);
    if (write(be->efd, &one, sizeof one) < 0) {
        /* the counter is full: a wakeup is pending anyway */
    }
}

static void nfs_be_stats(void *priv, struct ps_io_stats *s)
{
    struct nfs_be *be = priv;
    *s = be->st;
    s->faults = ps_fault_count(be->fault);
}

static const char *nfs_be_errmsg(void *priv)
{
    return ((struct nfs_be *)priv)->err;
}

static void nfs_be_close(void *priv)
{
    struct nfs_be *be = priv;
    if (!be)
        return;
    if (be->nfs && be->fh)
        nfs_close(be->nfs, be->fh);
    drop_ctx(be);
    if (be->efd >= 0)
        close(be->efd);
    ps_fault_free(be->fault);
    free(be->rq);
    free(be->cq);
    free(be);
}

const struct ps_io_ops ps_io_nfs_ops = {
    .name = "nfs",
    .open = nfs_be_open,
    .submit = nfs_be_submit,
    .reap = nfs_be_reap,
    .wakeup = nfs_be_wakeup,
    .stats = nfs_be_stats,
    .errmsg = nfs_be_errmsg,
    .close = nfs_be_close,
    .max_inflight = 8,
};
