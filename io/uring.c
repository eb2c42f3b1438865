/*
 * uring.c - local files (disks, EBS volumes, NFS mounts) read through one
 * io_uring per handle: queue depth, O_DIRECT, registered buffers, retries.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <poll.h>
#include <linux/fs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "io/io.h"
#include "io/io_int.h"

/* Valgrind knows nothing of what the kernel writes through the ring, and holds
 * its global lock through io_uring_enter (other threads stop): tell it. */
#if defined(__has_include) && __has_include(<valgrind/memcheck.h>)
#include <valgrind/memcheck.h>
#else
#define RUNNING_ON_VALGRIND 0
#define VALGRIND_MAKE_MEM_DEFINED(p, n) ((void)(p), (void)(n))
#endif

#define DIRECT_ALIGN 4096u
#define MAX_CHUNK (1ull << 30)       /* per read: the kernel caps one read below 2 GiB */
#define REG_CHUNK (1ull << 30)       /* io_uring caps one registered buffer at 1 GiB */
#define MAX_REG 16384                /* and their number (IORING_MAX_REG_BUFFERS) */
#define MAX_AGAIN 1000
#define UD_POLL 1ull                 /* user_data of the eventfd poll */
#define UD_IGNORE 2ull               /* cancellations issued by close */

enum { RQ_FREE, RQ_READ, RQ_TIMER, RQ_FAILED };
enum { NEXT_ATTEMPT, NEXT_READ };    /* what an expired timer leads to */

struct rq {
    struct ps_io_req req;
    uint64_t done;            /* bytes already in req.buf */
    uint64_t t0;              /* submission time, for the deadline */
    int attempts;             /* attempts that failed with an error */
    int again;                /* -EAGAIN/-EINTR resubmissions */
    int fault;                /* fault rolled for the read in flight */
    int state;
    int after_timer;
    int64_t res;              /* the result to deliver */
    struct __kernel_timespec ts;
    struct rq *next;          /* free list, or the failed FIFO */
};

struct uring {
    struct io_uring ring;
    int fd;                   /* O_DIRECT when asked */
    int tail_fd;              /* buffered fd for an unaligned tail under O_DIRECT (-1: not opened) */
    int efd;                  /* eventfd behind wakeup() */
    int poll_armed;
    int direct;
    int retries;
    int deadline_ms;
    uint64_t size;
    uint64_t rng;
    struct rq *rqs;
    int depth;
    int ops_inflight;         /* ring operations not yet completed (poll included) */
    int outstanding;          /* requests accepted and not yet delivered */
    struct rq *free;
    struct rq *failed_head, *failed_tail;
    struct iovec *reg;        /* registered buffers (NULL: plain reads) */
    int nreg;
    int reg_refused;          /* the kernel said no once: do not pin memory again to hear it twice */
    struct ps_fault *fault;
    uint64_t faults;
    struct ps_io_stats st;
    char path[4096];
    char err[PS_ERRLEN];
};

static struct io_uring_sqe *get_sqe(struct uring *u)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&u->ring);
    if (!sqe) {
        /* cannot stay full: the ring has a slot for every request plus the poll */
        io_uring_submit(&u->ring);
        sqe = io_uring_get_sqe(&u->ring);
    }
    return sqe;
}

static void arm_poll(struct uring *u)
{
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe)
        return;
    io_uring_prep_poll_add(sqe, u->efd, POLLIN);
    io_uring_sqe_set_data64(sqe, UD_POLL);
    u->poll_armed = 1;
    u->ops_inflight++;
}

static void fail_rq(struct uring *u, struct rq *r, int64_t res)
{
    r->state = RQ_FAILED;
    r->res = res;
    r->next = NULL;
    if (u->failed_tail)
        u->failed_tail->next = r;
    else
        u->failed_head = r;
    u->failed_tail = r;
}

static void arm_timer(struct uring *u, struct rq *r, int ms, int after)
{
    struct io_uring_sqe *sqe = get_sqe(u);
    if (!sqe) {
        fail_rq(u, r, -EBUSY);
        return;
    }
    r->ts.tv_sec = ms / 1000;
    r->ts.tv_nsec = (long long)(ms % 1000) * 1000000;
    r->state = RQ_TIMER;
    r->after_timer = after;
    io_uring_prep_timeout(sqe, &r->ts, 0, 0);
    io_uring_sqe_set_data(sqe, r);
    u->ops_inflight++;
}

static int reg_index(const struct uring *u, const void *buf, uint64_t len)
{
    uintptr_t b = (uintptr_t)buf;
    for (int i = 0; i < u->nreg; i++) {
        uintptr_t s = (uintptr_t)u->reg[i].iov_base;
        if (b >= s && b + len <= s + u->reg[i].iov_len)
            return i;
    }
    return -1;
}

static void send_read(struct uring *u, struct rq *r)
{
    struct io_uring_sqe *sqe = get_sqe(u);
    uint64_t left = r->req.length - r->done, n = left < MAX_CHUNK ? left : MAX_CHUNK;
    uint64_t off = r->req.offset + r->done;
    char *buf = (char *)r->req.buf + r->done;
    int fd = u->fd, idx;

    if (!sqe) {
        fail_rq(u, r, -EBUSY);
        return;
    }
    if (r->fault == PS_FAULT_SHORT) {
        /* ask the kernel for less, so the rest really is missing until the backend fetches it */
        uint64_t cut = n / 2;
        if (u->direct)
            cut -= cut % DIRECT_ALIGN;
        if (cut > 0) {
            u->faults++;
            n = cut;
        }
        r->fault = PS_FAULT_NONE;
    }
    /* O_DIRECT cannot end a read in the middle of a block: a file's tail goes through the page cache */
    if (u->direct && (n % DIRECT_ALIGN) && u->tail_fd >= 0)
        fd = u->tail_fd;
    idx = u->reg ? reg_index(u, buf, n) : -1;
    if (idx >= 0)
        io_uring_prep_read_fixed(sqe, fd, buf, (unsigned)n, off, idx);
    else
        io_uring_prep_read(sqe, fd, buf, (unsigned)n, off);
    io_uring_sqe_set_data(sqe, r);
    r->state = RQ_READ;
    u->ops_inflight++;
}

/* One attempt: roll its fault, then read (a stall delays the read, as a slow device would). */
static void attempt(struct uring *u, struct rq *r)
{
    r->fault = ps_fault_roll(u->fault);
    if (r->fault == PS_FAULT_STALL) {
        u->faults++;
        r->fault = PS_FAULT_NONE;
        arm_timer(u, r, ps_fault_stall_ms(u->fault), NEXT_READ);
        return;
    }
    send_read(u, r);
}

static void set_fail_msg(struct uring *u, struct rq *r, int64_t res)
{
    (void)ps_seterr(u->err, 0, "%s: read of %llu bytes at %llu failed: %s (after %d attempt%s)", u->path,
                    (unsigned long long)r->req.length, (unsigned long long)r->req.offset, ps_strerror((int)res),
                    r->attempts + 1, r->attempts ? "s" : "");
}

/* A read attempt finished: deliver, resubmit the rest, retry, or fail. Returns 1 when r is complete. */
static int read_done(struct uring *u, struct rq *r, int res)
{
    uint64_t left = r->req.length - r->done;

    if (r->fault == PS_FAULT_ERROR || r->fault == PS_FAULT_429 || r->fault == PS_FAULT_RESET) {
        u->faults++;
        res = -EIO;
    }
    if (res == -EAGAIN || res == -EINTR) {
        if (++r->again <= MAX_AGAIN) {
            u->st.retries++;
            attempt(u, r);
            return 0;
        }
    } else if (res == -EIO) {
        uint64_t age_ms = (ps_now_ns() - r->t0) / 1000000;
        if (r->attempts + 1 < u->retries && (u->deadline_ms <= 0 || age_ms < (uint64_t)u->deadline_ms)) {
            r->attempts++;
            u->st.retries++;
            arm_timer(u, r, ps_backoff_ms(r->attempts, 5, 1000, &u->rng), NEXT_ATTEMPT);
            return 0;
        }
    }
    if (res < 0) {
        set_fail_msg(u, r, res);
        r->res = res;
        return 1;
    }
    if (res == 0) {
        (void)ps_seterr(u->err, 0, "%s: read of %llu bytes at %llu past end of file (it ended at %llu)",
                        u->path, (unsigned long long)r->req.length, (unsigned long long)r->req.offset,
                        (unsigned long long)(r->req.offset + r->done));
        r->res = -EIO;
        return 1;
    }
    if ((uint64_t)res > left)
        res = (int)left;
    if (r->fault == PS_FAULT_CORRUPT) {
        u->faults++;
        ps_fault_corrupt(u->fault, (char *)r->req.buf + r->done, (size_t)res);
    }
    r->done += (uint64_t)res;
    if (r->done < r->req.length) {
        attempt(u, r);      /* short read: the rest is a new attempt */
        return 0;
    }
    r->res = (int64_t)r->req.length;
    return 1;
}

static void deliver(struct uring *u, struct rq *r, struct ps_io_cqe *c)
{
    c->cookie = r->req.cookie;
    c->res = r->res;
    if (r->res > 0)
        VALGRIND_MAKE_MEM_DEFINED(r->req.buf, r->req.length);
    u->st.requests++;
    if (r->res >= 0)
        u->st.bytes += (uint64_t)r->res;
    else
        u->st.errors++;
    r->state = RQ_FREE;
    r->next = u->free;
    u->free = r;
    u->outstanding--;
}

static void drain_efd(struct uring *u)
{
    uint64_t v;
    while (read(u->efd, &v, sizeof v) == (ssize_t)sizeof v)
        ;
}

/* Handle one CQE; returns 1 when it completed a request (written to *c), 0 otherwise. */
static int handle_cqe(struct uring *u, struct io_uring_cqe *cqe, struct ps_io_cqe *c, int *woken)
{
    uint64_t ud = io_uring_cqe_get_data64(cqe);
    int res = cqe->res;
    struct rq *r;

    if (ud == UD_IGNORE)
        return 0;
    u->ops_inflight--;
    if (ud == UD_POLL) {
        u->poll_armed = 0;
        drain_efd(u);
        *woken = 1;
        arm_poll(u);
        return 0;
    }
    r = (struct rq *)(uintptr_t)ud;
    if (r->state == RQ_TIMER) {
        if (r->after_timer == NEXT_READ)
            send_read(u, r);
        else
            attempt(u, r);
        return 0;
    }
    if (!read_done(u, r, res))
        return 0;
    deliver(u, r, c);
    return 1;
}

static int take_failed(struct uring *u, struct ps_io_cqe *c)
{
    struct rq *r = u->failed_head;
    if (!r)
        return 0;
    u->failed_head = r->next;
    if (!u->failed_head)
        u->failed_tail = NULL;
    deliver(u, r, c);
    return 1;
}

static int u_submit(void *priv, const struct ps_io_req *reqs, int n)
{
    struct uring *u = priv;
    int i, rc;

    for (i = 0; i < n && u->free; i++) {
        const struct ps_io_req *q = &reqs[i];
        struct rq *r = u->free;

        u->free = r->next;
        memset(r, 0, sizeof *r);
        r->req = *q;
        r->t0 = ps_now_ns();
        u->outstanding++;
        if (q->offset > u->size || q->length > u->size - q->offset) {
            (void)ps_seterr(u->err, 0, "%s: read of %llu bytes at %llu past end of file (size %llu)", u->path,
                            (unsigned long long)q->length, (unsigned long long)q->offset,
                            (unsigned long long)u->size);
            fail_rq(u, r, -EIO);
            continue;
        }
        if (u->direct && (((uintptr_t)q->buf | q->offset) % DIRECT_ALIGN ||
                          (q->length % DIRECT_ALIGN && q->offset + q->length != u->size))) {
            (void)ps_seterr(u->err, 0,
                            "%s: O_DIRECT read needs buffer, offset and length aligned to %u bytes "
                            "(buffer %p, offset %llu, length %llu)",
                            u->path, DIRECT_ALIGN, q->buf, (unsigned long long)q->offset,
                            (unsigned long long)q->length);
            fail_rq(u, r, -EINVAL);
            continue;
        }
        if (q->length == 0) {
            r->res = 0;
            fail_rq(u, r, 0); /* nothing to read: complete at once */
            continue;
        }
        if (u->direct && q->length % DIRECT_ALIGN && u->tail_fd < 0) {
            u->tail_fd = open(u->path, O_RDONLY | O_CLOEXEC);
            if (u->tail_fd < 0) {
                rc = -errno;
                (void)ps_seterr(u->err, 0, "%s: cannot open for the file's tail: %s", u->path,
                                ps_strerror(rc));
                fail_rq(u, r, rc);
                continue;
            }
        }
        if (ps_fault_latency_ms(u->fault) > 0)
            arm_timer(u, r, ps_fault_latency_ms(u->fault), NEXT_ATTEMPT);
        else
            attempt(u, r);
    }
    rc = io_uring_submit(&u->ring);
    if (rc < 0 && rc != -EBUSY && rc != -EAGAIN && rc != -EINTR) {
        (void)ps_seterr(u->err, 0, "%s: io_uring_submit failed: %s", u->path, ps_strerror(rc));
        return rc;
    }
    return i;
}

static int u_reap(void *priv, struct ps_io_cqe *cqes, int max, int min, int timeout_ms)
{
    struct uring *u = priv;
    uint64_t end = timeout_ms >= 0 ? ps_now_ns() + (uint64_t)timeout_ms * 1000000 : 0;
    int n = 0, woken = 0;

    if (max <= 0)
        return 0;
    if (min > max)
        min = max;
    /* waiting for more than is in flight would never end; with nothing in flight, wait for wakeup/timeout */
    if (u->outstanding > 0 && min > u->outstanding)
        min = u->outstanding;
    for (;;) {
        struct io_uring_cqe *cqe;
        struct __kernel_timespec ts, *tsp = NULL;
        int rc;

        while (n < max && take_failed(u, &cqes[n]))
            n++;
        while (n < max && io_uring_peek_cqe(&u->ring, &cqe) == 0) {
            n += handle_cqe(u, cqe, &cqes[n], &woken);
            io_uring_cqe_seen(&u->ring, cqe);
            while (n < max && take_failed(u, &cqes[n]))
                n++;
        }
        if (io_uring_sq_ready(&u->ring))
            io_uring_submit(&u->ring);
        if (n >= min || n >= max || woken)
            break;
        if (timeout_ms >= 0) {
            uint64_t now = ps_now_ns();
            if (now >= end)
                break;
            ts.tv_sec = (long long)((end - now) / 1000000000ull);
            ts.tv_nsec = (long long)((end - now) % 1000000000ull);
            tsp = &ts;
        }
        if (!u->poll_armed)
            arm_poll(u);
        if (RUNNING_ON_VALGRIND) {
            /* poll(2) is a syscall valgrind lets other threads run through; the ring fd is readable with a CQE */
            struct pollfd pfd = { .fd = u->ring.ring_fd, .events = POLLIN };
            io_uring_submit(&u->ring);
            poll(&pfd, 1, tsp ? (int)(ts.tv_sec * 1000 + ts.tv_nsec / 1000000 + 1) : -1);
            continue;
        }
        rc = io_uring_submit_and_wait_timeout(&u->ring, &cqe, 1, tsp, NULL);
        if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY) {
            (void)ps_seterr(u->err, 0, "%s: waiting for io_uring completions failed: %s", u->path,
                            ps_strerror(rc));
            return n ? n : rc;
        }
    }
    return n;
}

static void u_wakeup(void *priv)
{
    struct uring *u = priv;
    uint64_t one = 1;
    ssize_t w = write(u->efd, &one, sizeof one);
    (void)w; /* EAGAIN only when the counter is saturated: a wakeup is pending anyway */
}

static int u_register(void *priv, void *base, size_t len)
{
    struct uring *u = priv;
    uintptr_t start = (uintptr_t)base;
    size_t nreg = (len + REG_CHUNK - 1) / REG_CHUNK;
    struct iovec *iov;
    int rc;

    if (u->reg) {
        io_uring_unregister_buffers(&u->ring);
        free(u->reg);
        u->reg = NULL;
        u->nreg = 0;
    }
    if (!base || !len || u->reg_refused)
        return 0;
    if (nreg > MAX_REG) {
        ps_log(PS_LOG_DEBUG, "%s: %zu bytes of buffers are too many to register, using plain reads", u->path, len);
        return 0;
    }
    iov = calloc(nreg, sizeof *iov);
    if (!iov)
        return -ENOMEM;
    for (size_t i = 0; i < nreg; i++) {
        size_t off = i * REG_CHUNK;
        iov[i].iov_base = (void *)(start + off);
        iov[i].iov_len = len - off < REG_CHUNK ? len - off : REG_CHUNK;
    }
    rc = io_uring_register_buffers(&u->ring, iov, (unsigned)nreg);
    if (rc < 0) {
        free(iov);
        u->reg_refused = 1;
        /* ENOMEM/EPERM: RLIMIT_MEMLOCK too small to pin them; the reads work without, a little slower */
        ps_log(rc == -ENOMEM || rc == -EPERM ? PS_LOG_DEBUG : PS_LOG_NOTICE,
               "%s: cannot register %zu bytes of buffers with io_uring (%s), using plain reads", u->path, len,
               ps_strerror(rc));
        return 0;
    }
    u->reg = iov;
    u->nreg = (int)nreg;
    ps_log(PS_LOG_DEBUG, "%s: registered %zu bytes of buffers in %zu chunk(s)", u->path, len, nreg);
    return 0;
}

static void u_stats(void *priv, struct ps_io_stats *s)
{
    struct uring *u = priv;
    *s = u->st;
    s->faults = u->faults;
}

static const char *u_errmsg(void *priv)
{
    return ((struct uring *)priv)->err;
}

static void u_close(void *priv)
{
    struct uring *u = priv;
    struct io_uring_cqe *cqe;
    uint64_t give_up;

    if (!u)
        return;
    /* Reads in flight still write into the caller's buffers: cancel timers and the poll, wait for the rest. */
    for (int i = 0; i < u->depth; i++) {
        struct io_uring_sqe *sqe;
        if (u->rqs[i].state != RQ_TIMER || !(sqe = get_sqe(u)))
            continue;
        io_uring_prep_timeout_remove(sqe, (uint64_t)(uintptr_t)&u->rqs[i], 0);
        io_uring_sqe_set_data64(sqe, UD_IGNORE);
    }
    if (u->poll_armed) {
        struct io_uring_sqe *sqe = get_sqe(u);
        if (sqe) {
            io_uring_prep_poll_remove(sqe, UD_POLL);
            io_uring_sqe_set_data64(sqe, UD_IGNORE);
        }
    }
    io_uring_submit(&u->ring);
    give_up = ps_now_ns() + 30ull * 1000000000ull;
    while (u->ops_inflight > 0 && ps_now_ns() < give_up) {
        struct __kernel_timespec ts = { .tv_sec = 1 };
        if (io_uring_wait_cqe_timeout(&u->ring, &cqe, &ts) < 0)
            continue;
        if (io_uring_cqe_get_data64(cqe) != UD_IGNORE)
            u->ops_inflight--;
        io_uring_cqe_seen(&u->ring, cqe);
    }
    if (u->reg)
        io_uring_unregister_buffers(&u->ring);
    io_uring_queue_exit(&u->ring);
    close(u->fd);
    if (u->tail_fd >= 0)
        close(u->tail_fd);
    close(u->efd);
    ps_fault_free(u->fault);
    free(u->reg);
    free(u->rqs);
    free(u);
}

/* Size of a regular file or a block device (an EBS volume read raw). */
static int file_size(int fd, const char *path, uint64_t *size, char *err)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return ps_seterr(err, -errno, "%s: cannot stat: %s", path, ps_strerror(-errno));
    if (S_ISDIR(st.st_mode))
        return ps_seterr(err, -EISDIR, "%s: is a directory, not a file", path);
    if (S_ISBLK(st.st_mode)) {
        uint64_t b = 0;
        if (ioctl(fd, BLKGETSIZE64, &b) < 0)
            return ps_seterr(err, -errno, "%s: cannot get the device size: %s", path, ps_strerror(-errno));
        *size = b;
        return 0;
    }
    *size = (uint64_t)st.st_size;
    return 0;
}

/* Open (O_DIRECT when asked) and size the file; every failure names the path. */
static int open_file(const char *path, int direct, int *fdp, uint64_t *size, char *err)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC | (direct ? O_DIRECT : 0)), rc;

    if (fd < 0) {
        rc = -errno;
        if (direct && rc == -EINVAL)
            return ps_seterr(err, rc, "%s: the filesystem does not support O_DIRECT (--direct)", path);
        return ps_seterr(err, rc, "%s: cannot open: %s", path, ps_strerror(rc));
    }
    rc = file_size(fd, path, size, err);
    if (rc < 0) {
        close(fd);
        return rc;
    }
    *fdp = fd;
    return 0;
}

static int u_open(const char *path, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err)
{
    struct uring *u;
    int rc, depth = o->queue_depth > 0 ? o->queue_depth : 32;

    *priv = NULL;
    if (depth > 4096)
        depth = 4096;
    u = calloc(1, sizeof *u);
    if (!u)
        return ps_seterr(err, -ENOMEM, "out of memory");
    u->fd = u->efd = u->tail_fd = -1;
    snprintf(u->path, sizeof u->path, "%s", path);
    u->direct = o->direct;
    u->retries = o->retries > 0 ? o->retries : 6;
    u->deadline_ms = o->deadline_ms;
    u->depth = depth;
    u->rng = (uint64_t)(uintptr_t)u ^ ps_now_ns();

    rc = ps_fault_parse(ps_fault_spec(o), &u->fault, err);
    if (rc < 0)
        goto err;
    rc = io_uring_queue_init((unsigned)depth + 1, &u->ring, 0);
    if (rc < 0) {
        if (rc == -ENOSYS || rc == -EPERM || rc == -EOPNOTSUPP || rc == -EACCES)
            rc = ps_seterr(err, -ENOSYS, "io_uring_setup: %s", ps_strerror(rc));
        else
            rc = ps_seterr(err, rc, "%s: io_uring_queue_init(%d) failed: %s", path, depth + 1, ps_strerror(rc));
        goto err;
    }
    rc = open_file(path, o->direct, &u->fd, &u->size, err);
    if (rc < 0)
        goto err_ring;
    u->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    u->rqs = calloc((size_t)depth, sizeof *u->rqs);
    if (u->efd < 0 || !u->rqs) {
        rc = ps_seterr(err, u->efd < 0 ? -errno : -ENOMEM, "%s: cannot set up the reader: %s", path,
                       ps_strerror(u->efd < 0 ? -errno : -ENOMEM));
        goto err_fd;
    }
    for (int i = depth - 1; i >= 0; i--) {
        u->rqs[i].next = u->free;
        u->free = &u->rqs[i];
    }
    arm_poll(u);
    io_uring_submit(&u->ring);
    *size = u->size;
    *priv = u;
    return 0;
err_fd:
    free(u->rqs);
    if (u->efd >= 0)
        close(u->efd);
    close(u->fd);
err_ring:
    io_uring_queue_exit(&u->ring);
err:
    ps_fault_free(u->fault);
    free(u);
    return rc;
}

const struct ps_io_ops ps_io_uring_ops = {
    .name = "io_uring",
    .open = u_open,
    .submit = u_submit,
    .reap = u_reap,
    .wakeup = u_wakeup,
    .register_buffers = u_register,
    .stats = u_stats,
    .errmsg = u_errmsg,
    .close = u_close,
    .max_inflight = 32,
};
