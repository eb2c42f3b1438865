/*
 * pagestream.h - the public C API of libpagestream.
 *
 * pagestream feeds training jobs from paged dataset files (.pgs, and FFCV
 * .beton) on local disks, NFS, HTTP(S) and S3, through a bounded page cache.
 *
 * Threads: a ps_loader owns an I/O thread and a pool of worker threads.
 * The functions of one loader may be called from one thread at a time
 * (ps_batch_release may be called from any thread). Different loaders are
 * independent.
 *
 * fork(): do not fork a process with an open loader and use it in the child;
 * open loaders after fork (as PyTorch workers or torchrun ranks do).
 *
 * Errors: every function returns 0 (or a count) on success and a negative
 * value on failure: -errno for system errors, or one of the PS_E* codes
 * below. ps_strerror() turns either into text; ps_loader_errmsg() gives the
 * last detailed message (it names the file or URL and the cause, never a
 * credential).
 */
#ifndef PAGESTREAM_H
#define PAGESTREAM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define PS_VERSION_MAJOR 0
#define PS_VERSION_MINOR 1
#define PS_VERSION_STRING "0.1.0"

/* Length of the buffers that receive detailed error messages. */
#define PS_ERRLEN 512

/* Our own error codes, all below -1000. */
#define PS_EFORMAT    (-1001) /* dataset file is malformed or truncated */
#define PS_ECHECKSUM  (-1002) /* a page or sample failed its CRC32C */
#define PS_EHTTP      (-1003) /* unexpected HTTP status or response */
#define PS_EAUTH      (-1004) /* credentials refused (signature, access) */
#define PS_ECONFIG    (-1005) /* invalid option or combination */
#define PS_EDECODE    (-1006) /* an image could not be decoded */
#define PS_EUNSUP     (-1007) /* not supported by this build or file */
#define PS_EVERSION   (-1008) /* file version not understood */
#define PS_ESTOPPED   (-1009) /* the loader was closed or stopped */
#define PS_ENOGPU     (-1010) /* CUDA asked for but no usable GPU */
#define PS_ERANGE     (-1011) /* server ignored or mangled a byte range */

/* Positive return of ps_loader_next(): the epoch is over, no batch. */
#define PS_EPOCH_END 1

/**
 * Text for a return code (-errno or PS_E*).
 * @return a static string; never NULL.
 */
const char *ps_strerror(int code);

enum ps_order {
    PS_ORDER_SEQUENTIAL = 0,
    PS_ORDER_RANDOM = 1,       /* a full permutation of the samples */
    PS_ORDER_QUASI_RANDOM = 2  /* shuffled pages, samples from a window */
};

enum ps_transform {
    PS_TRANSFORM_NONE = 0,     /* deliver each sample's raw field bytes */
    PS_TRANSFORM_RANDOM_RESIZED_CROP = 1,
    PS_TRANSFORM_CENTER_CROP = 2
};

enum ps_layout { PS_LAYOUT_NHWC = 0, PS_LAYOUT_NCHW = 1 };
enum ps_dtype { PS_DTYPE_UINT8 = 0, PS_DTYPE_FLOAT16 = 1, PS_DTYPE_FLOAT32 = 2 };
enum ps_device { PS_DEVICE_CPU = 0, PS_DEVICE_CUDA = 1 };
enum ps_on_error { PS_ON_ERROR_FAIL = 0, PS_ON_ERROR_SKIP = 1 };

/*
 * Loader options. Always start from ps_options_init(): it fills defaults,
 * and fields added in later versions keep working for old callers.
 * Strings are copied by ps_loader_open().
 */
struct ps_options {
    /* cache and schedule */
    uint64_t cache_size;   /* bytes of page cache; 0: derived from the cgroup memory limit (or 1 GiB) */
    uint32_t batch_size;   /* samples per batch (default 256) */
    int order;             /* enum ps_order (default quasi-random) */
    uint64_t seed;         /* shuffles, crops and flips derive from it */
    int rank, world_size;  /* share of the data (default 0 of 1) */
    int drop_last;         /* 1: only full batches (default 1) */
    uint64_t start_epoch;  /* resume position: first epoch to deliver */
    uint64_t start_batch;  /*   and first batch within it */
    /* threads */
    int threads;           /* decode workers; 0: the cores available */
    int ring_depth;        /* batches assembled ahead (default 4) */
    /* storage */
    int queue_depth;       /* reads in flight (io_uring) / connections (HTTP, S3); 0: backend default */
    int direct;            /* O_DIRECT for local files */
    int insecure;          /* skip TLS verification (https, s3) */
    int retries;           /* attempts per read before failing (default 6) */
    int timeout_ms;        /* a read that makes no progress for this long fails (default 30000) */
    const char *endpoint;  /* S3 endpoint URL; NULL: $AWS_ENDPOINT_URL or AWS */
    const char *region;    /* S3 region; NULL: $AWS_REGION / $AWS_DEFAULT_REGION / us-east-1 */
    const char *fault;     /* fault injection spec (tests); NULL: $PAGESTREAM_FAULT */
    /* samples */
    int transform;         /* enum ps_transform (default RANDOM_RESIZED_CROP) */
    uint32_t crop;         /* output side in pixels (default 224) */
    uint32_t resize;       /* center crop: short side before cropping (default crop*256/224) */
    float scale_min, scale_max; /* random-resized-crop area range (0.08, 1) */
    float ratio_min, ratio_max; /* aspect range (3/4, 4/3) */
    int flip;              /* random horizontal flip (default 1 with RRC) */
    int layout;            /* enum ps_layout of images */
    int device;            /* enum ps_device: where batches are delivered */
    int dtype;             /* enum ps_dtype; float types need device CUDA */
    float mean[3], std[3]; /* normalisation for float dtypes (0..255 scale) */
    int on_error;          /* enum ps_on_error for undecodable samples */
};

/**
 * Fill @p o with the defaults.
 */
void ps_options_init(struct ps_options *o);

/*
 * A batch. Owned by the loader; valid until ps_batch_release(). At most
 * ring_depth batches can be held at once: holding more makes
 * ps_loader_next() wait.
 */
struct ps_batch {
    uint64_t epoch;         /* epoch this batch belongs to */
    uint64_t index;         /* batch number within the epoch (0-based) */
    uint32_t n;             /* samples in this batch */
    uint32_t skipped;       /* samples dropped for decode errors (on_error=skip) */
    const uint64_t *ids;    /* n sample indices in the dataset */
    const int64_t *labels;  /* n labels (-1 where the dataset has none) */
    /* transform != NONE: images of n x crop x crop x 3 (layout, dtype, device as asked) */
    void *images;
    uint32_t height, width, channels;
    int layout, dtype, device;
    size_t image_bytes;     /* bytes of the whole images array */
    /* transform == NONE: each sample's primary field bytes */
    const uint8_t *const *data; /* n pointers */
    const uint32_t *sizes;      /* n sizes */
};

typedef struct ps_loader ps_loader;

/**
 * Open a loader on a dataset.
 * @param url a path, file://, http(s)://, s3://bucket/key or nfs://server/export/path,
 *            of a .pgs or .beton file
 * @param opts options (NULL: defaults)
 * @param out receives the loader on success
 * @return 0, or -errno / PS_E*; on failure *out receives NULL, and when
 *         @p err is not NULL it receives a message of at most PS_ERRLEN bytes.
 * @note the loader starts prefetching at once.
 */
int ps_loader_open(const char *url, const struct ps_options *opts, ps_loader **out, char *err);

/**
 * Get the next batch, waiting until it is ready.
 * @return 0 and *out set; PS_EPOCH_END (positive) once at the end of each
 *         epoch (the next call starts the next epoch); or a negative error,
 *         after which ps_loader_errmsg() explains and the loader is stopped.
 * @note the batch stays valid until ps_batch_release().
 */
int ps_loader_next(ps_loader *l, struct ps_batch **out);

/**
 * Give a batch back to the loader. Any thread; NULL is ignored.
 */
void ps_batch_release(struct ps_batch *b);

/**
 * Restart delivery at (epoch, batch): the batches that follow are those an
 * uninterrupted run would have produced from there. Waits for batches in
 * flight; batches held by the caller stay valid until released.
 */
int ps_loader_seek(ps_loader *l, uint64_t epoch, uint64_t batch);

/**
 * The position of the next batch ps_loader_next() would return.
 */
void ps_loader_position(const ps_loader *l, uint64_t *epoch, uint64_t *batch);

struct ps_stats {
    uint64_t samples;          /* delivered */
    uint64_t batches;
    uint64_t payload_bytes;    /* bytes of the delivered samples as stored */
    uint64_t bytes_read;       /* bytes read from storage */
    uint64_t reads;            /* read requests completed */
    uint64_t cache_hits;       /* page (or sample) uses found resident */
    uint64_t cache_misses;
    uint64_t evictions;
    uint64_t retries;          /* storage requests retried */
    uint64_t refetches;        /* pages read again after a checksum failure */
    uint64_t decode_errors;
    uint64_t padded;           /* samples repeated to give every rank equal batches */
    double wait_io_s;          /* worker time spent waiting for pages */
    double wait_batch_s;       /* caller time spent in ps_loader_next */
    double decode_cpu_s;       /* worker CPU time in decode/transform */
    uint64_t peak_rss;         /* process peak resident set (bytes) */
    uint64_t mem_arena;        /* cache arena bytes */
    uint64_t mem_fixed;        /* batch ring + scratch + tables bytes */
    uint64_t nsamples;         /* dataset samples */
    uint64_t npages;           /* dataset pages */
    uint64_t page_size;
    uint64_t cache_slots;
    uint64_t window_pages;     /* quasi-random window */
    uint64_t epoch_batches;    /* batches per epoch for this rank */
    uint32_t nclasses;
    int unit_mode;             /* 0: whole pages, 1: single samples (random order, small cache) */
};

/**
 * Copy the counters (cumulative since open) into @p s.
 */
void ps_loader_stats(const ps_loader *l, struct ps_stats *s);

/**
 * Number of batches in one epoch for this loader's rank.
 */
uint64_t ps_loader_epoch_batches(const ps_loader *l);

/**
 * The last detailed error message; "" when none. Valid until the next call
 * on the loader.
 */
const char *ps_loader_errmsg(const ps_loader *l);

/**
 * Class name of a label, or NULL when the dataset has no class table.
 * @note valid until ps_loader_close().
 */
const char *ps_loader_class_name(const ps_loader *l, int64_t label);

/**
 * Stop the threads and free everything. Batches still held become
 * invalid. NULL is ignored.
 */
void ps_loader_close(ps_loader *l);

/**
 * Parse a size with an optional unit: "4M", "1.5G", "512k", "4096".
 * K/M/G/T are powers of 1024 (KiB...); a trailing "B" or "iB" is accepted.
 * @return 0 and *out, or PS_ECONFIG.
 */
int ps_parse_size(const char *s, uint64_t *out);

/**
 * Memory limit of the cgroup this process is in (v1 or v2), or 0 if none.
 */
uint64_t ps_cgroup_memory_limit(void);

#ifdef __cplusplus
}
#endif
#endif
