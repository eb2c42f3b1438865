/*
 * posix.c - local files read by a small pool of threads doing pread: the
 * fallback where io_uring is disabled (sysctl, seccomp), or asked for.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/fs.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/io.h"
#include "io/io_int.h"

#define DIRECT_ALIGN 4096u
#define MAX_CHUNK (1ull << 30)
#define MAX_THREADS 64
#define MAX_AGAIN 1000

struct preq {
    struct ps_io_req req;
    int64_t res;
    uint64_t t0;
    struct preq *next;
};

struct pfifo {
    struct preq *head, *tail;
};

struct posix {
    int fd;
    int tail_fd;              /* buffered fd for an unaligned tail under O_DIRECT */
    int direct;
    int retries;
    int deadline_ms;
    uint64_t size;
    struct ps_fault *fault;

    pthread_mutex_t mu;
    pthread_cond_t work_cv;   /* workers: a request is pending, or stop */
    pthread_cond_t done_cv;   /* reap: a completion, or a wakeup */
    pthread_cond_t stop_cv;   /* delays end early when closing */
    struct preq *slots;
    struct preq *free;
    struct pfifo pending, done;
    int depth;
    int outstanding;
    int woken;
    int stop;
    pthread_t *threads;
    int nthreads;
    struct ps_io_stats st;
    char err[PS_ERRLEN];
    char path[4096];
};

static void push(struct pfifo *q, struct preq *r)
{
    r->next = NULL;
    if (q->tail)
        q->tail->next = r;
    else
        q->head = r;
    q->tail = r;
}

static struct preq *pop(struct pfifo *q)
{
    struct preq *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head)
            q->tail = NULL;
    }
    return r;
}

static struct timespec abs_after_ns(uint64_t ns)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ns += (uint64_t)ts.tv_nsec;
    ts.tv_sec += (time_t)(ns / 1000000000ull);
    ts.tv_nsec = (long)(ns % 1000000000ull);
    return ts;
}

/* Sleep ms unless the handle is closing; returns -1 when it is. */
static int delay_ms(struct posix *p, int ms)
{
    struct timespec until = abs_after_ns((uint64_t)ms * 1000000);
    int stop;

    pthread_mutex_lock(&p->mu);
    while (!p->stop && pthread_cond_timedwait(&p->stop_cv, &p->mu, &until) != ETIMEDOUT)
        ;
    stop = p->stop;
    pthread_mutex_unlock(&p->mu);
    return stop ? -1 : 0;
}

static void set_err(struct posix *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void set_err(struct posix *p, const char *fmt, ...)
{
    char msg[PS_ERRLEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    pthread_mutex_lock(&p->mu);
    memcpy(p->err, msg, sizeof msg);
    pthread_mutex_unlock(&p->mu);
}

/* One request, start to end, with the same attempt semantics as uring.c. */
static int64_t do_read(struct posix *p, struct preq *r, uint64_t *rng, struct ps_io_stats *st)
{
    uint64_t done = 0, len = r->req.length;
    int attempts = 0, again = 0;

    if (ps_fault_latency_ms(p->fault) > 0 && delay_ms(p, ps_fault_latency_ms(p->fault)) < 0)
        return PS_ESTOPPED;
    while (done < len) {
        uint64_t left = len - done, n = left < MAX_CHUNK ? left : MAX_CHUNK;
        int fault = ps_fault_roll(p->fault);
        int fd = p->fd;
        ssize_t got;
        int64_t res;

        if (fault == PS_FAULT_STALL) {
            st->faults++;
            if (delay_ms(p, ps_fault_stall_ms(p->fault)) < 0)
                return PS_ESTOPPED;
        }
        if (fault == PS_FAULT_SHORT) {
            /* read less, so the rest really is missing until the loop fetches it */
            uint64_t cut = n / 2;
            if (p->direct)
                cut -= cut % DIRECT_ALIGN;
            if (cut > 0) {
                st->faults++;
                n = cut;
            }
        }
        if (p->direct && n % DIRECT_ALIGN && p->tail_fd >= 0)
            fd = p->tail_fd;
        got = pread(fd, (char *)r->req.buf + done, n, (off_t)(r->req.offset + done));
        res = got < 0 ? -errno : got;
        if (fault == PS_FAULT_ERROR || fault == PS_FAULT_429 || fault == PS_FAULT_RESET) {
            st->faults++;
            res = -EIO;
        }
        if ((res == -EINTR || res == -EAGAIN) && ++again <= MAX_AGAIN) {
            st->retries++;
            continue;
        }
        if (res == -EIO) {
            uint64_t age_ms = (ps_now_ns() - r->t0) / 1000000;
            if (attempts + 1 < p->retries && (p->deadline_ms <= 0 || age_ms < (uint64_t)p->deadline_ms)) {
                attempts++;
                st->retries++;
                if (delay_ms(p, ps_backoff_ms(attempts, 5, 1000, rng)) < 0)
                    return PS_ESTOPPED;
                continue;
            }
        }
        if (res < 0) {
            set_err(p, "%s: read of %llu bytes at %llu failed: %s (after %d attempt%s)", p->path,
                    (unsigned long long)len, (unsigned long long)r->req.offset, ps_strerror((int)res), attempts + 1,
                    attempts ? "s" : "");
            return res;
        }
        if (res == 0) {
            set_err(p, "%s: read of %llu bytes at %llu past end of file (it ended at %llu)", p->path,
                    (unsigned long long)len, (unsigned long long)r->req.offset,
                    (unsigned long long)(r->req.offset + done));
            return -EIO;
        }
        if ((uint64_t)res > left)
            res = (int64_t)left;
        if (fault == PS_FAULT_CORRUPT) {
            st->faults++;
            ps_fault_corrupt(p->fault, (char *)r->req.buf + done, (size_t)res);
        }
        done += (uint64_t)res;
    }
    return (int64_t)len;
}

static void *worker(void *arg)
{
    struct posix *p = arg;
    uint64_t rng = (uint64_t)(uintptr_t)&rng ^ ps_now_ns();

    pthread_mutex_lock(&p->mu);
    for (;;) {
        struct ps_io_stats st = { 0 };
        struct preq *r;

        while (!p->stop && !p->pending.head)
            pthread_cond_wait(&p->work_cv, &p->mu);
        if (p->stop)
            break;
        r = pop(&p->pending);
        pthread_mutex_unlock(&p->mu);
        r->res = do_read(p, r, &rng, &st);
        pthread_mutex_lock(&p->mu);
        p->st.retries += st.retries;
        p->st.faults += st.faults;
        push(&p->done, r);
        pthread_cond_signal(&p->done_cv);
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

static int p_submit(void *priv, const struct ps_io_req *reqs, int n)
{
    struct posix *p = priv;
    int i, queued = 0;

    pthread_mutex_lock(&p->mu);
    for (i = 0; i < n && p->free; i++) {
        const struct ps_io_req *q = &reqs[i];
        struct preq *r = p->free;

        p->free = r->next;
        r->req = *q;
        r->res = 0;
        r->t0 = ps_now_ns();
        p->outstanding++;
        if (q->offset > p->size || q->length > p->size - q->offset) {
            (void)ps_seterr(p->err, 0, "%s: read of %llu bytes at %llu past end of file (size %llu)", p->path,
                            (unsigned long long)q->length, (unsigned long long)q->offset,
                            (unsigned long long)p->size);
            r->res = -EIO;
        } else if (p->direct && (((uintptr_t)q->buf | q->offset) % DIRECT_ALIGN ||
                                 (q->length % DIRECT_ALIGN && q->offset + q->length != p->size))) {
            (void)ps_seterr(p->err, 0,
                            "%s: O_DIRECT read needs buffer, offset and length aligned to %u bytes "
                            "(buffer %p, offset %llu, length %llu)",
                            p->path, DIRECT_ALIGN, q->buf, (unsigned long long)q->offset,
                            (unsigned long long)q->length);
            r->res = -EINVAL;
        } else if (p->direct && q->length % DIRECT_ALIGN && p->tail_fd < 0 &&
                   (p->tail_fd = open(p->path, O_RDONLY | O_CLOEXEC)) < 0) {
            r->res = -errno;
            (void)ps_seterr(p->err, 0, "%s: cannot open for the file's tail: %s", p->path,
                            ps_strerror((int)r->res));
        }
        if (r->res < 0 || q->length == 0) {
            push(&p->done, r);
            continue;
        }
        push(&p->pending, r);
        queued++;
    }
    if (queued)
        pthread_cond_broadcast(&p->work_cv);
    if (i > queued)
        pthread_cond_signal(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
    return i;
}

static int p_reap(void *priv, struct ps_io_cqe *cqes, int max, int min, int timeout_ms)
{
    struct posix *p = priv;
    struct timespec until;
    int n = 0;

    if (max <= 0)
        return 0;
    if (timeout_ms > 0)
        until = abs_after_ns((uint64_t)timeout_ms * 1000000);
    pthread_mutex_lock(&p->mu);
    if (min > max)
        min = max;
    /* as in uring.c: never wait for more than is in flight; with nothing in flight, for a wakeup */
    if (p->outstanding > 0 && min > p->outstanding)
        min = p->outstanding;
    for (;;) {
        struct preq *r;
        while (n < max && (r = pop(&p->done))) {
            cqes[n].cookie = r->req.cookie;
            cqes[n].res = r->res;
            p->st.requests++;
            if (r->res >= 0)
                p->st.bytes += (uint64_t)r->res;
            else
                p->st.errors++;
            r->next = p->free;
            p->free = r;
            p->outstanding--;
            n++;
        }
        if (n >= min || n >= max || p->woken || timeout_ms == 0)
            break;
        if (timeout_ms < 0)
            pthread_cond_wait(&p->done_cv, &p->mu);
        else if (pthread_cond_timedwait(&p->done_cv, &p->mu, &until) == ETIMEDOUT) {
            timeout_ms = 0; /* one last look at the queue */
        }
    }
    p->woken = 0;
    pthread_mutex_unlock(&p->mu);
    return n;
}

static void p_wakeup(void *priv)
{
    struct posix *p = priv;
    pthread_mutex_lock(&p->mu);
    p->woken = 1;
    pthread_cond_broadcast(&p->done_cv);
    pthread_mutex_unlock(&p->mu);
}

static void p_stats(void *priv, struct ps_io_stats *s)
{
    struct posix *p = priv;
    pthread_mutex_lock(&p->mu);
    *s = p->st;
    pthread_mutex_unlock(&p->mu);
}

static const char *p_errmsg(void *priv)
{
    return ((struct posix *)priv)->err;
}

static void p_close(void *priv)
{
    struct posix *p = priv;

    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stop = 1;
    pthread_cond_broadcast(&p->work_cv);
    pthread_cond_broadcast(&p->stop_cv);
    pthread_mutex_unlock(&p->mu);
    /* a worker finishes the pread it is in, so no buffer is written after close returns */
    for (int i = 0; i < p->nthreads; i++)
        pthread_join(p->threads[i], NULL);
    close(p->fd);
    if (p->tail_fd >= 0)
        close(p->tail_fd);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->work_cv);
    pthread_cond_destroy(&p->done_cv);
    pthread_cond_destroy(&p->stop_cv);
    ps_fault_free(p->fault);
    free(p->threads);
    free(p->slots);
    free(p);
}

static int p_open(const char *path, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err)
{
    struct posix *p;
    pthread_condattr_t ca;
    struct stat st;
    int rc, depth = o->queue_depth > 0 ? o->queue_depth : 8;

    *priv = NULL;
    if (depth > 4096)
        depth = 4096;
    p = calloc(1, sizeof *p);
    if (!p)
        return ps_seterr(err, -ENOMEM, "out of memory");
    p->tail_fd = -1;
    snprintf(p->path, sizeof p->path, "%s", path);
    p->direct = o->direct;
    p->retries = o->retries > 0 ? o->retries : 6;
    p->deadline_ms = o->deadline_ms;
    p->depth = depth;
    rc = ps_fault_parse(ps_fault_spec(o), &p->fault, err);
    if (rc < 0) {
        free(p);
        return rc;
    }
    p->fd = open(path, O_RDONLY | O_CLOEXEC | (o->direct ? O_DIRECT : 0));
    if (p->fd < 0) {
        rc = -errno;
        if (o->direct && rc == -EINVAL)
            ps_seterr(err, rc, "%s: the filesystem does not support O_DIRECT (--direct)", path);
        else
            ps_seterr(err, rc, "%s: cannot open: %s", path, ps_strerror(rc));
        goto err;
    }
    if (fstat(p->fd, &st) < 0) {
        rc = ps_seterr(err, -errno, "%s: cannot stat: %s", path, ps_strerror(-errno));
        goto err_fd;
    }
    if (S_ISDIR(st.st_mode)) {
        rc = ps_seterr(err, -EISDIR, "%s: is a directory, not a file", path);
        goto err_fd;
    }
    p->size = (uint64_t)st.st_size;
    if (S_ISBLK(st.st_mode) && ioctl(p->fd, BLKGETSIZE64, &p->size) < 0) {
        rc = ps_seterr(err, -errno, "%s: cannot get the device size: %s", path, ps_strerror(-errno));
        goto err_fd;
    }
    p->slots = calloc((size_t)depth, sizeof *p->slots);
    p->nthreads = depth < MAX_THREADS ? depth : MAX_THREADS;
    p->threads = calloc((size_t)p->nthreads, sizeof *p->threads);
    if (!p->slots || !p->threads) {
        rc = ps_seterr(err, -ENOMEM, "out of memory");
        goto err_fd;
    }
    for (int i = depth - 1; i >= 0; i--) {
        p->slots[i].next = p->free;
        p->free = &p->slots[i];
    }
    pthread_mutex_init(&p->mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->work_cv, &ca);
    pthread_cond_init(&p->done_cv, &ca);
    pthread_cond_init(&p->stop_cv, &ca);
    pthread_condattr_destroy(&ca);
    for (int i = 0; i < p->nthreads; i++) {
        rc = pthread_create(&p->threads[i], NULL, worker, p);
        if (rc) {
            p->nthreads = i;
            p_close(p);
            return ps_seterr(err, -rc, "%s: cannot start reader threads: %s", path, ps_strerror(-rc));
        }
    }
    *size = p->size;
    *priv = p;
    return 0;
err_fd:
    close(p->fd);
err:
    free(p->slots);
    free(p->threads);
    ps_fault_free(p->fault);
    free(p);
    return rc;
}

const struct ps_io_ops ps_io_posix_ops = {
    .name = "pread",
    .open = p_open,
    .submit = p_submit,
    .reap = p_reap,
    .wakeup = p_wakeup,
    .register_buffers = NULL,
    .stats = p_stats,
    .errmsg = p_errmsg,
    .close = p_close,
    .max_inflight = 8,
};
