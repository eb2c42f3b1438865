/*
 * io.h - asynchronous positional reads from any storage pagestream knows,
 * behind one backend table (fio's ioengines shape), plus streaming writes.
 *
 * A ps_io handle is used by ONE thread (its owner submits and reaps);
 * only ps_io_wakeup() may be called from other threads.
 * io/ knows nothing of datasets.
 */
#ifndef PS_IO_H
#define PS_IO_H

#include <stddef.h>
#include <stdint.h>

#include "pagestream.h"

struct ps_io_opts {
    int queue_depth;       /* local: ring entries; http/s3/nfs: parallel requests. 0: backend default */
    int direct;            /* O_DIRECT (local files); buffers, offsets, lengths must be 4096-aligned */
    int uring;             /* -1 auto (io_uring, else pread with a notice), 0 pread only, 1 io_uring only */
    const char *endpoint;  /* S3 endpoint; NULL: $AWS_ENDPOINT_URL, else AWS */
    const char *region;    /* S3 region; NULL: $AWS_REGION, $AWS_DEFAULT_REGION, us-east-1 */
    int addressing;        /* S3: 0 auto, 1 path-style, 2 virtual-hosted */
    const char *profile;   /* S3 credentials profile; NULL: $AWS_PROFILE or "default" */
    const char *resolve;   /* curl CURLOPT_RESOLVE entry "host:port:addr" (tests), NULL none */
    int insecure;          /* https: do not verify TLS */
    int retries;           /* attempts per request (default 6) */
    int timeout_ms;        /* no progress for this long: the attempt fails (default 30000) */
    int deadline_ms;       /* a request failing for this long in total fails for good (default 120000) */
    int hedge_ms;          /* http: duplicate a request this much slower than usual (0 off) */
    const char *fault;     /* fault spec (see fault.c); NULL: $PAGESTREAM_FAULT; "" none */
};

void ps_io_opts_init(struct ps_io_opts *o);

struct ps_io_req {
    uint64_t offset;
    uint64_t length;       /* bytes wanted: exactly this many arrive unless res < 0 */
    void *buf;
    uint64_t cookie;       /* returned with the completion */
};

struct ps_io_cqe {
    uint64_t cookie;
    int64_t res;           /* bytes (== length) or -errno / PS_E* */
};

struct ps_io_stats {
    uint64_t requests;     /* completed */
    uint64_t bytes;        /* delivered into buffers */
    uint64_t retries;      /* attempts repeated after an error */
    uint64_t errors;       /* requests that failed for good */
    uint64_t hedges;       /* duplicate requests sent */
    uint64_t faults;       /* faults injected */
};

struct ps_io;

/* The backend table. Each backend file fills one in. */
struct ps_io_ops {
    const char *name;
    /* open url; *priv receives backend state; size of the object in *size */
    int (*open)(const char *url, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err);
    /* queue n requests; returns how many were accepted (>= 0) or -errno */
    int (*submit)(void *priv, const struct ps_io_req *reqs, int n);
    /* collect up to max completions; wait (up to timeout_ms, -1 forever) for at least min */
    int (*reap)(void *priv, struct ps_io_cqe *cqes, int max, int min, int timeout_ms);
    /* interrupt a reap() waiting in another thread (may be NULL) */
    void (*wakeup)(void *priv);
    /* optional: the buffers will all lie inside [base, base+len) */
    int (*register_buffers)(void *priv, void *base, size_t len);
    void (*stats)(void *priv, struct ps_io_stats *s);
    const char *(*errmsg)(void *priv);
    void (*close)(void *priv);
    int max_inflight;      /* default parallelism */
};

extern const struct ps_io_ops ps_io_uring_ops;
extern const struct ps_io_ops ps_io_posix_ops;
extern const struct ps_io_ops ps_io_http_ops;
extern const struct ps_io_ops ps_io_s3_ops;
extern const struct ps_io_ops ps_io_nfs_ops;

/**
 * Open a reader on a URL: a path or file://, http(s)://, s3://bucket/key,
 * nfs://server/export/path. Wrapped in fault injection when asked.
 * @return 0 or -errno/PS_E*; err (PS_ERRLEN) names the URL (without
 *         credentials) and the cause.
 */
int ps_io_open(const char *url, const struct ps_io_opts *o, struct ps_io **out, char *err);
uint64_t ps_io_size(const struct ps_io *io);
/** Accepts up to n requests; returns the count accepted (may be < n when full). */
int ps_io_submit(struct ps_io *io, const struct ps_io_req *reqs, int n);
/** Up to max completions, waiting up to timeout_ms (-1: forever) for at least min. */
int ps_io_reap(struct ps_io *io, struct ps_io_cqe *cqes, int max, int min, int timeout_ms);
/** Thread-safe: make a blocked ps_io_reap() return early. */
void ps_io_wakeup(struct ps_io *io);
int ps_io_register_buffers(struct ps_io *io, void *base, size_t len);
/** Requests the backend keeps in flight by default. */
int ps_io_depth(const struct ps_io *io);
void ps_io_stats(const struct ps_io *io, struct ps_io_stats *s);
/** Last detailed error (URL + cause, no secrets); "" if none. */
const char *ps_io_errmsg(const struct ps_io *io);
/** The URL with any credentials removed, for messages. */
const char *ps_io_name(const struct ps_io *io);
const char *ps_io_backend(const struct ps_io *io);
void ps_io_close(struct ps_io *io);

/**
 * Synchronous read of [off, off+len) (submit + reap one request). Only when
 * the caller has no other request in flight on this handle.
 * @return len, or -errno/PS_E*.
 */
int64_t ps_io_pread(struct ps_io *io, void *buf, uint64_t len, uint64_t off);

/* ---- streaming output (pack) ---- */

struct ps_out;

/* What a backend that can write provides. */
struct ps_out_ops {
    const char *name;
    int (*open)(const char *url, const struct ps_io_opts *o, void **priv, char *err);
    int (*write)(void *priv, const void *buf, size_t len);  /* 0 or -errno */
    int (*commit)(void *priv);                              /* make it visible under its name */
    void (*abort)(void *priv);                              /* nothing left under the name */
    const char *(*errmsg)(void *priv);
    void (*release)(void *priv);                            /* free the state (after commit or abort) */
};

extern const struct ps_out_ops ps_out_file_ops;  /* path: temp name + rename; "-": stdout */
extern const struct ps_out_ops ps_out_s3_ops;    /* s3://: multipart upload */

/**
 * Open an output: a path (written to a temporary name in the same folder,
 * renamed on commit), "-" (stdout), or s3://bucket/key (multipart upload,
 * aborted on failure).
 */
int ps_out_open(const char *url, const struct ps_io_opts *o, struct ps_out **out, char *err);
int ps_out_write(struct ps_out *out, const void *buf, size_t len);
uint64_t ps_out_tell(const struct ps_out *out);
int ps_out_commit(struct ps_out *out);   /* then ps_out_close */
void ps_out_abort(struct ps_out *out);   /* then ps_out_close */
const char *ps_out_errmsg(const struct ps_out *out);
void ps_out_close(struct ps_out *out);   /* aborts if neither commit nor abort was called */

/**
 * Abort every output still open (from a SIGINT/SIGTERM handler path: the
 * CLI calls it before exiting so no partial file stays behind).
 */
void ps_out_abort_all(void);

/* ---- logging (notices such as "io_uring unavailable, using pread") ---- */
enum { PS_LOG_ERROR = 0, PS_LOG_WARN = 1, PS_LOG_NOTICE = 2, PS_LOG_DEBUG = 3 };
void ps_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Messages above this level are dropped (default NOTICE; $PAGESTREAM_LOG=0..3). */
void ps_log_set_level(int level);

/* ---- helpers shared by backends ---- */
/* Monotonic clock in nanoseconds. */
uint64_t ps_now_ns(void);
/* Fill-in a message: snprintf into err (PS_ERRLEN), returns code. */
int ps_seterr(char *err, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#endif
