/*
 * test_io.c - unit tests of the local side of io/: io_uring and pread
 * backends on temporary files, fault injection, file output.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "io/io.h"
#include "io/io_int.h"
#include "tests/test.h"

#define ALIGN 4096

static char tdir[64];
static uint64_t trng = 0x1234567;

static uint64_t rnd(void)
{
    trng ^= trng << 13;
    trng ^= trng >> 7;
    trng ^= trng << 17;
    return trng;
}

static void rm_tdir(void);

/* One scratch folder at a time; a test that returned early leaves its folder to the next one or to exit. */
static int mk_tdir(void)
{
    static int registered;
    if (!registered) {
        atexit(rm_tdir);
        registered = 1;
    }
    rm_tdir();
    snprintf(tdir, sizeof tdir, "/tmp/ps_test_io.XXXXXX");
    return mkdtemp(tdir) ? 0 : -1;
}

static void rm_tdir(void)
{
    DIR *d = opendir(tdir);
    struct dirent *e;
    char p[512];
    if (!d)
        return;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(p, sizeof p, "%s/%s", tdir, e->d_name);
            unlink(p);
        }
    closedir(d);
    rmdir(tdir);
    tdir[0] = 0;
}

/* A file of size bytes of random data; returns the data (caller frees). */
static unsigned char *mk_file(const char *name, size_t size, char *path, size_t pn)
{
    unsigned char *ref = malloc(size ? size : 1);
    int fd;
    snprintf(path, pn, "%s/%s", tdir, name);
    for (size_t i = 0; i < size; i++)
        ref[i] = (unsigned char)(rnd() >> 24);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, ref, size) != (ssize_t)size) {
        free(ref);
        if (fd >= 0)
            close(fd);
        return NULL;
    }
    close(fd);
    return ref;
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int n = 0;
    if (!d)
        return -1;
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            n++;
    closedir(d);
    return n;
}

/* Open with the backend asked for (uring: 1 io_uring, 0 pread); 77 when io_uring is unavailable. */
static int open_backend(const char *path, int uring, struct ps_io_opts *o, struct ps_io **io, char *err)
{
    int rc;
    o->uring = uring;
    rc = ps_io_open(path, o, io, err);
    if (rc == -ENOSYS && uring == 1)
        return T_SKIP;
    return rc;
}

/*
 * Random reads with qd in flight, each checked against ref. align != 0:
 * offsets/lengths multiples of it (O_DIRECT). Returns 0 or a failure.
 */
static int read_many(struct ps_io *io, const unsigned char *ref, uint64_t size, int nreq, int qd, uint64_t maxlen,
                     uint64_t align, int expect_corrupt)
{
    unsigned char *arena;
    struct ps_io_req *slot;
    struct ps_io_cqe cq[64];
    int *busy, issued = 0, done = 0, inflight = 0;

    if (posix_memalign((void **)&arena, ALIGN, (size_t)qd * maxlen))
        return t_failf(__FILE__, __LINE__, "posix_memalign");
    slot = calloc((size_t)qd, sizeof *slot);
    busy = calloc((size_t)qd, sizeof *busy);
    while (done < nreq) {
        while (issued < nreq && inflight < qd) {
            int s = 0;
            struct ps_io_req r;
            while (busy[s])
                s++;
            r.length = 1 + rnd() % maxlen;
            if (r.length > size)
                r.length = size;
            r.offset = rnd() % (size - r.length + 1);
            if (align) {
                r.offset -= r.offset % align;
                r.length -= r.length % align;
                if (!r.length)
                    r.length = align;
                if (r.offset + r.length > size) {
                    /* the tail of an unaligned file: allowed to end exactly at EOF */
                    r.length = size - r.offset;
                }
            }
            r.buf = arena + (size_t)s * maxlen;
            r.cookie = (uint64_t)s;
            memset(r.buf, 0xEE, r.length);
            int n = ps_io_submit(io, &r, 1);
            if (n < 0)
                return t_failf(__FILE__, __LINE__, "submit: %d %s", n, ps_io_errmsg(io));
            if (n == 0)
                break;
            slot[s] = r;
            busy[s] = 1;
            inflight++;
            issued++;
        }
        int n = ps_io_reap(io, cq, 64, 1, 10000);
        if (n <= 0)
            return t_failf(__FILE__, __LINE__, "reap returned %d with %d in flight", n, inflight);
        for (int i = 0; i < n; i++) {
            struct ps_io_req *r = &slot[cq[i].cookie];
            if (cq[i].res != (int64_t)r->length)
                return t_failf(__FILE__, __LINE__, "read %llu at %llu: res %lld (%s)",
                               (unsigned long long)r->length, (unsigned long long)r->offset, (long long)cq[i].res,
                               ps_io_errmsg(io));
            int same = memcmp(r->buf, ref + r->offset, r->length) == 0;
            if (expect_corrupt ? same : !same)
                return t_failf(__FILE__, __LINE__, "read %llu at %llu: data %s", (unsigned long long)r->length,
                               (unsigned long long)r->offset, same ? "not corrupted" : "differs");
            busy[cq[i].cookie] = 0;
            inflight--;
            done++;
        }
    }
    free(arena);
    free(slot);
    free(busy);
    return 0;
}

static int random_reads(int uring)
{
    char path[256], err[PS_ERRLEN];
    uint64_t size = 8 * 1024 * 1024 + 777;
    unsigned char *ref;
    static const int qds[] = { 1, 4, 32 };
    int rc = 0;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("data", size, path, sizeof path)));
    for (size_t i = 0; i < sizeof qds / sizeof qds[0] && !rc; i++) {
        struct ps_io_opts o;
        struct ps_io *io;
        ps_io_opts_init(&o);
        o.queue_depth = qds[i];
        rc = open_backend(path, uring, &o, &io, err);
        if (rc == T_SKIP) {
            snprintf(t_why, sizeof t_why, "io_uring unavailable: %s", err);
            break;
        }
        CHECKF(rc == 0, "open: %s", err);
        CHECK(strcmp(ps_io_backend(io), uring ? "io_uring" : "pread") == 0);
        CHECK(ps_io_size(io) == size);
        CHECK(ps_io_depth(io) == qds[i]);
        rc = read_many(io, ref, size, 400, qds[i], 300000, 0, 0);
        if (!rc) {
            struct ps_io_stats st;
            ps_io_stats(io, &st);
            if (st.requests != 400 || st.errors != 0 || st.bytes == 0)
                rc = t_failf(__FILE__, __LINE__, "stats: requests %llu errors %llu",
                             (unsigned long long)st.requests, (unsigned long long)st.errors);
        }
        ps_io_close(io);
    }
    free(ref);
    rm_tdir();
    return rc;
}

static int test_uring_random_reads(void) { return random_reads(1); }
static int test_posix_random_reads(void) { return random_reads(0); }

static int direct_reads(int uring)
{
    char path[256], err[PS_ERRLEN];
    uint64_t size = 4 * 1024 * 1024 + 1000; /* an unaligned tail */
    unsigned char *ref;
    struct ps_io_opts o;
    struct ps_io *io;
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("direct", size, path, sizeof path)));
    ps_io_opts_init(&o);
    o.direct = 1;
    o.queue_depth = 8;
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP) {
        free(ref);
        rm_tdir();
        SKIP("io_uring unavailable: %s", err);
    }
    if (rc == -EINVAL && strstr(err, "O_DIRECT")) {
        free(ref);
        rm_tdir();
        SKIP("%s", err);
    }
    CHECKF(rc == 0, "open: %s", err);
    rc = read_many(io, ref, size, 200, 8, 256 * 1024, ALIGN, 0);
    if (!rc) {
        /* the whole tail block, ending at EOF */
        unsigned char *b;
        uint64_t off = size - size % ALIGN;
        CHECK(posix_memalign((void **)&b, ALIGN, ALIGN) == 0);
        int64_t r = ps_io_pread(io, b, size - off, off);
        if (r != (int64_t)(size - off) || memcmp(b, ref + off, size - off))
            rc = t_failf(__FILE__, __LINE__, "tail read: %lld %s", (long long)r, ps_io_errmsg(io));
        free(b);
    }
    ps_io_close(io);
    free(ref);
    rm_tdir();
    return rc;
}

static int test_uring_direct_aligned(void) { return direct_reads(1); }
static int test_posix_direct_aligned(void) { return direct_reads(0); }

static int direct_unaligned(int uring)
{
    char path[256], err[PS_ERRLEN];
    unsigned char *ref, *b;
    struct ps_io_opts o;
    struct ps_io *io;
    int64_t r;
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("direct", 1 << 20, path, sizeof path)));
    ps_io_opts_init(&o);
    o.direct = 1;
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    CHECK(posix_memalign((void **)&b, ALIGN, 3 * ALIGN) == 0);
    r = ps_io_pread(io, b + 1, ALIGN, 0);             /* buffer */
    CHECKF(r == -EINVAL, "misaligned buffer: %lld", (long long)r);
    CHECKF(strstr(ps_io_errmsg(io), "O_DIRECT") && strstr(ps_io_errmsg(io), "aligned") &&
               strstr(ps_io_errmsg(io), path), "message: %s", ps_io_errmsg(io));
    r = ps_io_pread(io, b, ALIGN, 512);               /* offset */
    CHECKF(r == -EINVAL, "misaligned offset: %lld", (long long)r);
    r = ps_io_pread(io, b, 1000, 0);                  /* length, not at EOF */
    CHECKF(r == -EINVAL, "misaligned length: %lld", (long long)r);
    r = ps_io_pread(io, b, 2 * ALIGN, ALIGN);         /* and an aligned one still works */
    CHECKF(r == 2 * ALIGN && memcmp(b, ref + ALIGN, 2 * ALIGN) == 0, "aligned read: %lld", (long long)r);
    ps_io_close(io);
    free(b);
    free(ref);
    rm_tdir();
    return 0;
}

static int test_uring_direct_unaligned_rejected(void) { return direct_unaligned(1); }
static int test_posix_direct_unaligned_rejected(void) { return direct_unaligned(0); }

static int past_eof(int uring)
{
    char path[256], err[PS_ERRLEN], buf[8192];
    unsigned char *ref;
    struct ps_io_opts o;
    struct ps_io *io;
    int64_t r;
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("small", 5000, path, sizeof path)));
    ps_io_opts_init(&o);
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    r = ps_io_pread(io, buf, 1000, 4500);
    CHECKF(r == -EIO, "straddling EOF: %lld", (long long)r);
    CHECKF(strstr(ps_io_errmsg(io), path) && strstr(ps_io_errmsg(io), "past end of file") &&
               strstr(ps_io_errmsg(io), "size 5000"), "message: %s", ps_io_errmsg(io));
    r = ps_io_pread(io, buf, 10, 9000);
    CHECKF(r == -EIO, "beyond EOF: %lld", (long long)r);
    r = ps_io_pread(io, buf, 500, 4500);               /* up to EOF exactly is fine */
    CHECKF(r == 500 && memcmp(buf, ref + 4500, 500) == 0, "to EOF: %lld", (long long)r);
    ps_io_close(io);
    free(ref);
    rm_tdir();
    return 0;
}

static int test_uring_read_past_eof(void) { return past_eof(1); }
static int test_posix_read_past_eof(void) { return past_eof(0); }

static int test_open_missing(void)
{
    char err[PS_ERRLEN];
    struct ps_io_opts o;
    struct ps_io *io = (struct ps_io *)1;
    const char *path = "/tmp/ps_test_io_no_such_dir/missing.pgs";

    for (int uring = 0; uring <= 1; uring++) {
        ps_io_opts_init(&o);
        o.uring = uring ? -1 : 0;
        err[0] = 0;
        int rc = ps_io_open(path, &o, &io, err);
        CHECKF(rc == -ENOENT, "rc %d: %s", rc, err);
        CHECK(io == NULL);
        CHECKF(strstr(err, path) && strstr(err, "No such file"), "message: %s", err);
    }
    /* file:// names the same file */
    int rc = ps_io_open("file:///tmp/ps_test_io_no_such_dir/missing.pgs", NULL, &io, err);
    CHECKF(rc == -ENOENT && strstr(err, path), "file:// rc %d: %s", rc, err);
    return 0;
}

static int test_open_directory(void)
{
    char err[PS_ERRLEN];
    struct ps_io *io;
    int rc = ps_io_open("/tmp", NULL, &io, err);
    CHECKF(rc == -EISDIR && strstr(err, "/tmp"), "rc %d: %s", rc, err);
    return 0;
}

struct waker {
    struct ps_io *io;
    int ms;
};

static void *wake_later(void *arg)
{
    struct waker *w = arg;
    usleep((useconds_t)w->ms * 1000);
    ps_io_wakeup(w->io);
    return NULL;
}

static int wakeup_case(int uring)
{
    char path[256], err[PS_ERRLEN];
    unsigned char *ref, buf[100];
    struct ps_io_opts o;
    struct ps_io *io;
    struct ps_io_cqe c;
    struct waker w;
    pthread_t th;
    uint64_t t0, ms;
    int rc, n;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("w", 4096, path, sizeof path)));
    ps_io_opts_init(&o);
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    /* nothing in flight: reap blocks until the wakeup (the long timeout only keeps a bug from hanging) */
    w.io = io;
    w.ms = 200;
    t0 = ps_now_ns();
    CHECK(pthread_create(&th, NULL, wake_later, &w) == 0);
    n = ps_io_reap(io, &c, 1, 1, 20000);
    ms = (ps_now_ns() - t0) / 1000000;
    pthread_join(th, NULL);
    CHECKF(n == 0, "reap returned %d", n);
    CHECKF(ms >= 150 && ms < 5000, "woke after %llu ms", (unsigned long long)ms);
    /* a wakeup that comes before the wait is not lost (the owner may be about to sleep) */
    ps_io_wakeup(io);
    t0 = ps_now_ns();
    n = ps_io_reap(io, &c, 1, 1, 5000);
    ms = (ps_now_ns() - t0) / 1000000;
    CHECKF(n == 0 && ms < 2000, "early wakeup: %d after %llu ms", n, (unsigned long long)ms);
    /* a timeout with nothing to wake it */
    t0 = ps_now_ns();
    n = ps_io_reap(io, &c, 1, 1, 100);
    ms = (ps_now_ns() - t0) / 1000000;
    CHECKF(n == 0 && ms >= 90 && ms < 3000, "timeout reap: %d after %llu ms", n, (unsigned long long)ms);
    /* the handle still reads after being woken */
    CHECK(ps_io_pread(io, buf, sizeof buf, 100) == (int64_t)sizeof buf);
    CHECK(memcmp(buf, ref + 100, sizeof buf) == 0);
    ps_io_close(io);
    free(ref);
    rm_tdir();
    return 0;
}

static int test_uring_wakeup(void) { return wakeup_case(1); }
static int test_posix_wakeup(void) { return wakeup_case(0); }

static int test_forced_posix(void)
{
    char path[256], err[PS_ERRLEN];
    unsigned char *ref;
    struct ps_io_opts o;
    struct ps_io *io;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("p", 100000, path, sizeof path)));
    ps_io_opts_init(&o);
    o.uring = 0;
    CHECKF(ps_io_open(path, &o, &io, err) == 0, "open: %s", err);
    CHECK(strcmp(ps_io_backend(io), "pread") == 0);
    CHECK(ps_io_depth(io) == 8);
    CHECK(read_many(io, ref, 100000, 50, 8, 20000, 0, 0) == 0);
    ps_io_close(io);
    free(ref);
    rm_tdir();
    return 0;
}

/* Run stderr into a file around f(); returns what was written (static). */
static const char *capture_stderr_begin(int *saved)
{
    static char p[300];
    int fd;
    snprintf(p, sizeof p, "%s/stderr.txt", tdir);
    fflush(stderr);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    *saved = dup(2);
    dup2(fd, 2);
    close(fd);
    return p;
}

static char *capture_stderr_end(int saved, const char *p)
{
    static char text[8192];
    int fd;
    ssize_t n;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    fd = open(p, O_RDONLY);
    n = fd >= 0 ? read(fd, text, sizeof text - 1) : 0;
    text[n > 0 ? n : 0] = 0;
    if (fd >= 0)
        close(fd);
    unlink(p);
    return text;
}

/* Reads into a registered arena (READ_FIXED), and into memory outside it. */
static int register_and_read(const char *path, const unsigned char *ref, uint64_t size, size_t arena_len,
                             const char **log)
{
    char err[PS_ERRLEN];
    struct ps_io_opts o;
    struct ps_io *io;
    unsigned char *arena, *outside;
    const char *cap;
    int saved, rc;

    ps_io_opts_init(&o);
    o.uring = 1;
    o.queue_depth = 16;
    rc = ps_io_open(path, &o, &io, err);
    if (rc == -ENOSYS)
        return T_SKIP;
    CHECKF(rc == 0, "open: %s", err);
    CHECK(posix_memalign((void **)&arena, ALIGN, arena_len) == 0);
    memset(arena, 0, arena_len);
    cap = capture_stderr_begin(&saved);
    ps_log_set_level(PS_LOG_DEBUG);
    rc = ps_io_register_buffers(io, arena, arena_len);
    ps_log_set_level(PS_LOG_NOTICE);
    *log = capture_stderr_end(saved, cap);
    CHECKF(rc == 0, "register_buffers: %d", rc);
    for (int i = 0; i < 200; i++) {
        uint64_t len = 1 + rnd() % 65536, off = rnd() % (size - len);
        uint64_t at = rnd() % (arena_len - len);
        CHECK(ps_io_pread(io, arena + at, len, off) == (int64_t)len);
        CHECKF(memcmp(arena + at, ref + off, len) == 0, "data at %llu", (unsigned long long)off);
    }
    /* a buffer outside the registered region still reads (plain READ) */
    outside = malloc(5000);
    CHECK(ps_io_pread(io, outside, 5000, 123) == 5000 && memcmp(outside, ref + 123, 5000) == 0);
    free(outside);
    ps_io_close(io);
    free(arena);
    return 0;
}

static int test_uring_register_buffers(void)
{
    char path[256];
    unsigned char *ref;
    const char *log = "";
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("reg", 2 << 20, path, sizeof path)));
    rc = register_and_read(path, ref, 2 << 20, 8 << 20, &log);
    free(ref);
    rm_tdir();
    if (rc == T_SKIP)
        SKIP("io_uring unavailable");
    if (rc)
        return rc;
    /* as root (CAP_IPC_LOCK) or with a large enough RLIMIT_MEMLOCK this registers */
    CHECKF(strstr(log, "registered") || strstr(log, "cannot register"), "no log line: %s", log);
    return 0;
}

static void child_exit(void *ref, int code)
{
    free(ref); /* keeps valgrind's leak report of the child quiet */
    _exit(code);
}

/* In a child without CAP_IPC_LOCK and with a tiny RLIMIT_MEMLOCK, registration must fall back. */
static int test_uring_register_fallback(void)
{
    char path[256];
    unsigned char *ref;
    pid_t pid;
    int status;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("reg", 2 << 20, path, sizeof path)));
    fflush(stdout);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct __user_cap_header_struct h = { _LINUX_CAPABILITY_VERSION_3, 0 };
        struct __user_cap_data_struct d[2];
        struct rlimit rl = { 64 * 1024, 64 * 1024 };
        const char *log = "";
        int rc;
        if (syscall(SYS_capget, &h, d) == 0) {
            d[0].effective &= ~(1u << CAP_IPC_LOCK);
            if (syscall(SYS_capset, &h, d) != 0)
                child_exit(ref, 3);
        }
        if (setrlimit(RLIMIT_MEMLOCK, &rl) != 0)
            child_exit(ref, 3);
        rc = register_and_read(path, ref, 2 << 20, 64 << 20, &log);
        if (rc == T_SKIP)
            child_exit(ref, 77);
        if (rc) {
            fprintf(stderr, "child: %s\n", t_why);
            child_exit(ref, 1);
        }
        if (!strstr(log, "cannot register")) {
            fprintf(stderr, "child: no fallback line in: %s\n", log);
            child_exit(ref, 2);
        }
        child_exit(ref, 0);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    free(ref);
    rm_tdir();
    CHECK(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        SKIP("io_uring unavailable");
    CHECKF(WEXITSTATUS(status) != 3, "could not drop CAP_IPC_LOCK / set RLIMIT_MEMLOCK in the child");
    CHECKF(WEXITSTATUS(status) == 0, "child exited %d", WEXITSTATUS(status));
    return 0;
}

/* io_uring refused by seccomp (as in many containers): auto mode reads with pread, forced mode fails. */
static int test_uring_seccomp_fallback(void)
{
    char path[256];
    unsigned char *ref;
    pid_t pid;
    int status;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("sec", 300000, path, sizeof path)));
    fflush(stdout);
    pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        struct sock_filter f[] = {
            BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
            BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 0, 1),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
            BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        };
        struct sock_fprog prog = { sizeof f / sizeof f[0], f };
        char err[PS_ERRLEN];
        struct ps_io_opts o;
        struct ps_io *io;
        const char *cap, *log;
        int saved, rc;
        if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) || prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog))
            child_exit(ref, 77);
        ps_io_opts_init(&o);
        o.uring = 1;
        rc = ps_io_open(path, &o, &io, err);
        if (rc != -ENOSYS) {
            fprintf(stderr, "child: forced io_uring: rc %d %s\n", rc, err);
            child_exit(ref, 1);
        }
        o.uring = -1;
        cap = capture_stderr_begin(&saved);
        ps_log_set_level(PS_LOG_DEBUG); /* the notice is said once per process, then at debug level */
        rc = ps_io_open(path, &o, &io, err);
        ps_log_set_level(PS_LOG_NOTICE);
        log = capture_stderr_end(saved, cap);
        if (rc != 0 || strcmp(ps_io_backend(io), "pread") != 0) {
            fprintf(stderr, "child: auto: rc %d %s\n", rc, err);
            child_exit(ref, 1);
        }
        if (!strstr(log, "io_uring unavailable") || !strstr(log, path)) {
            fprintf(stderr, "child: no notice: %s\n", log);
            child_exit(ref, 2);
        }
        if (read_many(io, ref, 300000, 100, 8, 30000, 0, 0)) {
            fprintf(stderr, "child: %s\n", t_why);
            child_exit(ref, 1);
        }
        ps_io_close(io);
        child_exit(ref, 0);
    }
    CHECK(waitpid(pid, &status, 0) == pid);
    free(ref);
    rm_tdir();
    CHECK(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77)
        SKIP("cannot install a seccomp filter here");
    CHECKF(WEXITSTATUS(status) == 0, "child exited %d", WEXITSTATUS(status));
    return 0;
}

static int test_fault_parse(void)
{
    struct ps_fault *f = (struct ps_fault *)1;
    char err[PS_ERRLEN];
    int rc;

    CHECK(ps_fault_parse(NULL, &f, err) == 0 && f == NULL);
    CHECK(ps_fault_parse("", &f, err) == 0 && f == NULL);
    CHECK(ps_fault_roll(NULL) == PS_FAULT_NONE);
    rc = ps_fault_parse("seed=7,error=0.05,http429=0.01,reset=0.01,short=0.01,corrupt=0.01,stall=0.001,"
                        "stall_ms=250,latency_ms=3", &f, err);
    CHECKF(rc == 0 && f, "full spec: %d %s", rc, err);
    CHECK(ps_fault_stall_ms(f) == 250 && ps_fault_latency_ms(f) == 3);
    ps_fault_free(f);
    CHECK(ps_fault_parse(" error = 0.5 , ", &f, err) == 0 && f);
    CHECK(ps_fault_stall_ms(f) > 0); /* a default */
    ps_fault_free(f);

    rc = ps_fault_parse("error=0.1,bogus=1", &f, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "bogus") && f == NULL, "unknown key: %d %s", rc, err);
    rc = ps_fault_parse("short=1.5", &f, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "short"), "out of range: %d %s", rc, err);
    rc = ps_fault_parse("corrupt=-0.1", &f, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "corrupt"), "negative: %d %s", rc, err);
    rc = ps_fault_parse("reset=abc", &f, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "reset"), "not a number: %d %s", rc, err);
    rc = ps_fault_parse("error", &f, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "error"), "no value: %d %s", rc, err);
    rc = ps_fault_parse("stall_ms=-5", &f, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "stall_ms"), "negative ms: %d %s", rc, err);
    rc = ps_fault_parse("seed=x", &f, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "seed"), "bad seed: %d %s", rc, err);
    rc = ps_fault_parse("error=0.7,short=0.7", &f, err);
    CHECKF(rc == PS_ECONFIG, "sum over 1: %d %s", rc, err);

    /* opts win over the environment */
    struct ps_io_opts o;
    ps_io_opts_init(&o);
    setenv("PAGESTREAM_FAULT", "error=0.1", 1);
    CHECK(strcmp(ps_fault_spec(&o), "error=0.1") == 0);
    o.fault = "";
    CHECK(strcmp(ps_fault_spec(&o), "") == 0);
    unsetenv("PAGESTREAM_FAULT");
    o.fault = NULL;
    CHECK(ps_fault_spec(&o) == NULL);

    /* a bad spec fails the open, naming the key */
    o.fault = "error=2";
    struct ps_io *io;
    rc = ps_io_open("/etc/hostname", &o, &io, err);
    CHECKF(rc == PS_ECONFIG && strstr(err, "error"), "open with a bad spec: %d %s", rc, err);
    return 0;
}

static int test_fault_roll(void)
{
    struct ps_fault *a, *b;
    char err[PS_ERRLEN];
    int counts[PS_FAULT_STALL + 1] = { 0 }, n = 200000;
    unsigned char buf[64] = { 0 };

    CHECK(ps_fault_parse("seed=42,error=0.1,short=0.2,corrupt=0.05", &a, err) == 0);
    CHECK(ps_fault_parse("seed=42,error=0.1,short=0.2,corrupt=0.05", &b, err) == 0);
    for (int i = 0; i < n; i++) {
        int k = ps_fault_roll(a);
        CHECK(k == ps_fault_roll(b)); /* same seed, same sequence */
        counts[k]++;
    }
    CHECKF(counts[PS_FAULT_ERROR] > n * 0.09 && counts[PS_FAULT_ERROR] < n * 0.11, "error %d", counts[1]);
    CHECKF(counts[PS_FAULT_SHORT] > n * 0.19 && counts[PS_FAULT_SHORT] < n * 0.21, "short %d", counts[4]);
    CHECKF(counts[PS_FAULT_CORRUPT] > n * 0.04 && counts[PS_FAULT_CORRUPT] < n * 0.06, "corrupt %d", counts[5]);
    CHECK(counts[PS_FAULT_429] == 0 && counts[PS_FAULT_RESET] == 0 && counts[PS_FAULT_STALL] == 0);
    CHECK(ps_fault_count(a) == (uint64_t)(n - counts[PS_FAULT_NONE]));
    ps_fault_corrupt(a, buf, sizeof buf);
    int changed = 0;
    for (size_t i = 0; i < sizeof buf; i++)
        changed += buf[i] != 0;
    CHECK(changed == 1);
    ps_fault_free(a);
    ps_fault_free(b);
    return 0;
}

static int fault_reads(int uring)
{
    char path[256], err[PS_ERRLEN];
    uint64_t size = 4 << 20;
    unsigned char *ref;
    struct ps_io_opts o;
    struct ps_io_stats st;
    struct ps_io *io;
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("f", size, path, sizeof path)));
    ps_io_opts_init(&o);
    o.fault = "seed=3,error=0.2,short=0.2";
    o.retries = 30; /* 0.2^30: a request never runs out of attempts */
    o.queue_depth = 8;
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    rc = read_many(io, ref, size, 500, 8, 100000, 0, 0);
    ps_io_stats(io, &st);
    ps_io_close(io);
    if (rc)
        return rc;
    CHECKF(st.requests == 500 && st.errors == 0, "requests %llu errors %llu", (unsigned long long)st.requests,
           (unsigned long long)st.errors);
    /* ~0.25 retries and ~0.25 short reads per request */
    CHECKF(st.retries > 50 && st.faults > st.retries, "retries %llu faults %llu", (unsigned long long)st.retries,
           (unsigned long long)st.faults);

    /* O_DIRECT: short reads are cut to whole blocks */
    o.direct = 1;
    rc = open_backend(path, uring, &o, &io, err);
    CHECKF(rc == 0, "open direct: %s", err);
    rc = read_many(io, ref, size, 200, 8, 256 * 1024, ALIGN, 0);
    ps_io_stats(io, &st);
    ps_io_close(io);
    if (rc)
        return rc;
    CHECK(st.errors == 0 && st.retries > 0 && st.faults > st.retries);
    free(ref);
    rm_tdir();
    return 0;
}

static int test_uring_fault_retries(void) { return fault_reads(1); }
static int test_posix_fault_retries(void) { return fault_reads(0); }

static int fault_corrupt(int uring)
{
    char path[256], err[PS_ERRLEN];
    unsigned char *ref;
    struct ps_io_opts o;
    struct ps_io *io;
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("c", 1 << 20, path, sizeof path)));
    ps_io_opts_init(&o);
    o.fault = "corrupt=1.0";
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    rc = read_many(io, ref, 1 << 20, 100, 4, 50000, 0, 1);
    ps_io_close(io);
    free(ref);
    rm_tdir();
    return rc;
}

static int test_uring_fault_corrupt(void) { return fault_corrupt(1); }
static int test_posix_fault_corrupt(void) { return fault_corrupt(0); }

/* Every attempt fails: the request fails for good after opts.retries attempts. */
static int fault_exhaust(int uring)
{
    char path[256], err[PS_ERRLEN], buf[1000];
    unsigned char *ref;
    struct ps_io_opts o;
    struct ps_io_stats st;
    struct ps_io *io;
    int64_t r;
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("e", 10000, path, sizeof path)));
    ps_io_opts_init(&o);
    o.fault = "error=1";
    o.retries = 3;
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    r = ps_io_pread(io, buf, sizeof buf, 0);
    ps_io_stats(io, &st);
    CHECKF(r == -EIO, "res %lld", (long long)r);
    CHECKF(strstr(ps_io_errmsg(io), path) && strstr(ps_io_errmsg(io), "after 3 attempts"), "message: %s",
           ps_io_errmsg(io));
    CHECKF(st.retries == 2 && st.errors == 1 && st.faults == 3, "retries %llu errors %llu faults %llu",
           (unsigned long long)st.retries, (unsigned long long)st.errors, (unsigned long long)st.faults);
    ps_io_close(io);
    free(ref);
    rm_tdir();
    return 0;
}

static int test_uring_fault_exhaust(void) { return fault_exhaust(1); }
static int test_posix_fault_exhaust(void) { return fault_exhaust(0); }

static int fault_delays(int uring)
{
    char path[256], err[PS_ERRLEN], buf[1000];
    unsigned char *ref;
    struct ps_io_opts o;
    struct ps_io_stats st;
    struct ps_io *io;
    uint64_t t0, ms;
    int rc;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("d", 10000, path, sizeof path)));
    ps_io_opts_init(&o);
    o.fault = "latency_ms=60";
    rc = open_backend(path, uring, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    t0 = ps_now_ns();
    CHECK(ps_io_pread(io, buf, sizeof buf, 10) == (int64_t)sizeof buf);
    ms = (ps_now_ns() - t0) / 1000000;
    CHECKF(ms >= 55 && ms < 3000, "latency: %llu ms", (unsigned long long)ms);
    CHECK(memcmp(buf, ref + 10, sizeof buf) == 0);
    ps_io_close(io);

    o.fault = "stall=1,stall_ms=120";
    CHECKF(open_backend(path, uring, &o, &io, err) == 0, "open: %s", err);
    t0 = ps_now_ns();
    CHECK(ps_io_pread(io, buf, sizeof buf, 10) == (int64_t)sizeof buf);
    ms = (ps_now_ns() - t0) / 1000000;
    ps_io_stats(io, &st);
    CHECKF(ms >= 110 && ms < 3000 && st.faults == 1, "stall: %llu ms, %llu faults", (unsigned long long)ms,
           (unsigned long long)st.faults);
    CHECK(memcmp(buf, ref + 10, sizeof buf) == 0);

    /* close with a request stalled in flight returns promptly */
    o.fault = "stall=1,stall_ms=60000";
    ps_io_close(io);
    CHECKF(open_backend(path, uring, &o, &io, err) == 0, "open: %s", err);
    struct ps_io_req rq = { .offset = 0, .length = 100, .buf = buf, .cookie = 1 };
    CHECK(ps_io_submit(io, &rq, 1) == 1);
    t0 = ps_now_ns();
    ps_io_close(io);
    ms = (ps_now_ns() - t0) / 1000000;
    CHECKF(ms < 5000, "close took %llu ms", (unsigned long long)ms);
    free(ref);
    rm_tdir();
    return 0;
}

static int test_uring_fault_delays(void) { return fault_delays(1); }
static int test_posix_fault_delays(void) { return fault_delays(0); }

/* More requests than the queue depth: submit accepts what fits. */
static int test_uring_queue_full(void)
{
    char path[256], err[PS_ERRLEN];
    unsigned char *ref, *bufs;
    struct ps_io_opts o;
    struct ps_io *io;
    struct ps_io_req rq[10];
    struct ps_io_cqe cq[10];
    int rc, n, got = 0;

    CHECK(mk_tdir() == 0);
    CHECK((ref = mk_file("q", 100000, path, sizeof path)));
    ps_io_opts_init(&o);
    o.queue_depth = 4;
    rc = open_backend(path, 1, &o, &io, err);
    if (rc == T_SKIP)
        SKIP("io_uring unavailable: %s", err);
    CHECKF(rc == 0, "open: %s", err);
    bufs = malloc(10 * 1000);
    for (int i = 0; i < 10; i++)
        rq[i] = (struct ps_io_req){ .offset = (uint64_t)i * 5000, .length = 1000, .buf = bufs + i * 1000,
                                    .cookie = (uint64_t)i };
    n = ps_io_submit(io, rq, 10);
    CHECKF(n == 4, "accepted %d", n);
    /* asking for more than is in flight does not hang */
    while (got < 4) {
        int r = ps_io_reap(io, cq, 10, 10, 5000);
        CHECK(r > 0);
        got += r;
    }
    CHECK(ps_io_submit(io, rq + 4, 6) == 4);
    ps_io_close(io); /* with reads in flight */
    for (int i = 0; i < 4; i++)
        CHECK(memcmp(bufs + i * 1000, ref + i * 5000, 1000) == 0);
    free(bufs);
    free(ref);
    rm_tdir();
    return 0;
}

/* ---- output ---- */

static int read_whole(const char *path, unsigned char **data, size_t *len)
{
    struct stat st;
    int fd = open(path, O_RDONLY);
    if (fd < 0 || fstat(fd, &st) < 0)
        return -1;
    *len = (size_t)st.st_size;
    *data = malloc(*len + 1);
    if (read(fd, *data, *len) != (ssize_t)*len) {
        close(fd);
        return -1;
    }
    close(fd);
    return 0;
}

static int test_out_commit(void)
{
    char path[256], err[PS_ERRLEN];
    struct ps_out *out;
    unsigned char *data = malloc(3 << 20), *back;
    size_t len, pos = 0;
    struct stat st;

    CHECK(mk_tdir() == 0);
    for (size_t i = 0; i < (3u << 20); i++)
        data[i] = (unsigned char)(rnd() >> 16);
    snprintf(path, sizeof path, "%s/out.pgs", tdir);
    CHECKF(ps_out_open(path, NULL, &out, err) == 0, "open: %s", err);
    /* small writes, one larger than the buffer, then small again */
    while (pos < 500000) {
        size_t n = 1 + rnd() % 9000;
        CHECK(ps_out_write(out, data + pos, n) == 0);
        pos += n;
    }
    CHECK(ps_out_write(out, data + pos, 1500000) == 0);
    pos += 1500000;
    CHECK(ps_out_write(out, data + pos, (3u << 20) - pos) == 0);
    CHECK(ps_out_tell(out) == 3u << 20);
    CHECK(access(path, F_OK) != 0);          /* not visible before commit */
    CHECK(count_files(tdir) == 1);           /* only the temporary file */
    CHECKF(ps_out_commit(out) == 0, "commit: %s", ps_out_errmsg(out));
    ps_out_close(out);
    CHECK(count_files(tdir) == 1);           /* renamed, nothing left over */
    CHECK(read_whole(path, &back, &len) == 0);
    CHECK(len == 3u << 20 && memcmp(back, data, len) == 0);
    CHECK(stat(path, &st) == 0 && (st.st_mode & 0777) != 0600); /* a normal mode, not mkstemp's */
    free(back);
    free(data);
    rm_tdir();
    return 0;
}

static int test_out_abort(void)
{
    char path[256], err[PS_ERRLEN];
    struct ps_out *out;

    CHECK(mk_tdir() == 0);
    snprintf(path, sizeof path, "%s/out.pgs", tdir);
    CHECKF(ps_out_open(path, NULL, &out, err) == 0, "open: %s", err);
    CHECK(ps_out_write(out, "hello", 5) == 0);
    ps_out_abort(out);
    ps_out_close(out);
    CHECK(count_files(tdir) == 0);
    /* close without commit aborts too */
    CHECKF(ps_out_open(path, NULL, &out, err) == 0, "open: %s", err);
    CHECK(ps_out_write(out, "hello", 5) == 0);
    ps_out_close(out);
    CHECK(count_files(tdir) == 0);
    /* an existing file is left alone by an aborted rewrite */
    int fd = open(path, O_WRONLY | O_CREAT, 0644);
    CHECK(fd >= 0 && write(fd, "old", 3) == 3);
    close(fd);
    CHECKF(ps_out_open(path, NULL, &out, err) == 0, "open: %s", err);
    CHECK(ps_out_write(out, "new data", 8) == 0);
    ps_out_close(out);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_size == 3 && count_files(tdir) == 1);
    rm_tdir();
    return 0;
}

static int test_out_errors(void)
{
    char err[PS_ERRLEN];
    struct ps_out *out;
    int rc = ps_out_open("/tmp/ps_test_io_no_such_dir/x.pgs", NULL, &out, err);
    CHECKF(rc == -ENOENT && strstr(err, "/tmp/ps_test_io_no_such_dir/x.pgs"), "missing dir: %d %s", rc, err);
    rc = ps_out_open("/tmp", NULL, &out, err);
    CHECKF(rc == -EISDIR && strstr(err, "/tmp"), "directory: %d %s", rc, err);
    return 0;
}

static int test_out_stdout(void)
{
    char p[256], err[PS_ERRLEN];
    struct ps_out *out;
    unsigned char *data = malloc(2 << 20), *back;
    size_t len;
    int fd, saved, rc;

    CHECK(mk_tdir() == 0);
    for (size_t i = 0; i < (2u << 20); i++)
        data[i] = (unsigned char)(rnd() >> 16);
    snprintf(p, sizeof p, "%s/stdout.bin", tdir);
    fflush(stdout);
    fd = open(p, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CHECK(fd >= 0);
    saved = dup(1);
    dup2(fd, 1);
    close(fd);
    rc = ps_out_open("-", NULL, &out, err);
    if (rc == 0) {
        rc = ps_out_write(out, data, 1000);
        if (!rc)
            rc = ps_out_write(out, data + 1000, (2u << 20) - 1000);
        if (!rc)
            rc = ps_out_commit(out);
        ps_out_close(out);
    }
    dup2(saved, 1);
    close(saved);
    CHECKF(rc == 0, "stdout output: %d %s", rc, err);
    CHECK(read_whole(p, &back, &len) == 0);
    CHECK(len == 2u << 20 && memcmp(back, data, len) == 0);
    free(back);
    free(data);
    rm_tdir();
    return 0;
}

static int test_out_abort_all(void)
{
    char p1[256], p2[256], err[PS_ERRLEN];
    struct ps_out *a, *b;

    CHECK(mk_tdir() == 0);
    snprintf(p1, sizeof p1, "%s/a.pgs", tdir);
    snprintf(p2, sizeof p2, "%s/b.pgs", tdir);
    CHECKF(ps_out_open(p1, NULL, &a, err) == 0, "open: %s", err);
    CHECKF(ps_out_open(p2, NULL, &b, err) == 0, "open: %s", err);
    CHECK(ps_out_write(a, "aaaa", 4) == 0 && ps_out_write(b, "bbbb", 4) == 0);
    CHECK(count_files(tdir) == 2);
    ps_out_abort_all();
    CHECK(count_files(tdir) == 0);
    ps_out_close(a);
    ps_out_close(b);
    CHECK(count_files(tdir) == 0);
    rm_tdir();
    return 0;
}

T_MAIN(T(test_uring_random_reads), T(test_posix_random_reads), T(test_uring_direct_aligned),
       T(test_posix_direct_aligned), T(test_uring_direct_unaligned_rejected),
       T(test_posix_direct_unaligned_rejected), T(test_uring_read_past_eof), T(test_posix_read_past_eof),
       T(test_open_missing), T(test_open_directory), T(test_uring_wakeup), T(test_posix_wakeup),
       T(test_forced_posix), T(test_uring_register_buffers), T(test_uring_register_fallback),
       T(test_uring_seccomp_fallback), T(test_uring_queue_full), T(test_fault_parse), T(test_fault_roll),
       T(test_uring_fault_retries), T(test_posix_fault_retries), T(test_uring_fault_corrupt),
       T(test_posix_fault_corrupt), T(test_uring_fault_exhaust), T(test_posix_fault_exhaust),
       T(test_uring_fault_delays), T(test_posix_fault_delays), T(test_out_commit), T(test_out_abort),
       T(test_out_errors), T(test_out_stdout), T(test_out_abort_all))
