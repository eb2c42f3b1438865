/*
 * loader_int.h - the loader's internal state, shared by loader.c (threads,
 * schedule, cache admission) and batch.c (batch buffers, delivery).
 */
#ifndef PS_LOADER_INT_H
#define PS_LOADER_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "pagestream.h"
#include "cache/cache.h"
#include "decode/decode.h"
#include "decode/xfer.h"
#include "format/format.h"
#include "io/io.h"
#include "sampler/sampler.h"

/* One epoch's plan with the index the cache needs: for each unit, the
 * sorted task positions that use it, and how many of those were admitted. */
struct plan_rt {
    struct ps_plan p;
    uint64_t epoch;
    uint64_t base;        /* global task number of task 0 */
    uint64_t gbatch0;     /* global batch number of batch 0 */
    uint64_t *use_first;  /* nunits + 1 */
    uint32_t *uses;       /* task positions within the plan */
    uint32_t *cursor;     /* nunits: uses admitted so far */
};

struct batch_buf {
    struct ps_batch pub;
    struct ps_loader *owner;
    struct batch_buf *next_free;
    int xfer_slot;        /* CUDA: device buffer of this host buffer */
    uint8_t *images;      /* transform: n x crop x crop x 3 (pinned with CUDA) */
    int64_t *labels;
    uint64_t *ids;
    uint8_t *failed;      /* per position: decode failed (on_error=skip) */
    /* transform NONE */
    uint8_t **data;
    uint32_t *sizes;
    uint8_t *arena;
    size_t arena_cap;
    uint64_t *arena_off;  /* per position */
    size_t bytes;         /* memory held by this buffer */
};

enum { ASM_IDLE = 0, ASM_FILLING, ASM_READY };

struct asm_slot {
    int64_t gb;           /* global batch assigned, -1 none */
    int state;
    uint32_t remaining;   /* tasks not yet done */
    uint32_t n;           /* tasks in the batch */
    struct batch_buf *buf;
};

struct worker {
    struct ps_loader *l;
    pthread_t th;
    int started;
    struct ps_decoder *dec;
    uint8_t *scratch;     /* spanning samples are assembled here */
    size_t scratch_cap;
    _Atomic uint64_t wait_ns, cpu_ns;
};

struct ps_loader {
    struct ps_options o;
    char *url, *endpoint, *region, *fault;
    char err[PS_ERRLEN];
    int error;                     /* first fatal error, 0 none */

    struct ps_io *io;
    struct ps_dataset *ds;
    struct ps_cache *cache;
    struct ps_sampler_input sin;
    struct ps_decode_params dp;
    struct ps_xfer *xfer;

    int sample_mode;               /* units are samples, not pages */
    uint64_t nunits;
    uint64_t slot_size;
    uint32_t window;
    uint32_t io_depth;
    uint32_t fetch_limit;          /* checksum re-reads per unit */
    uint8_t *unit_fetches;         /* nunits */

    pthread_mutex_t mu;
    pthread_cond_t cv_work;        /* workers: task admitted / slot free / stop */
    pthread_cond_t cv_ready;       /* workers: a unit became ready */
    pthread_cond_t cv_batch;       /* consumer: a batch became ready */
    pthread_cond_t cv_io;          /* I/O thread: a reference was dropped, a plan arrived, stop */
    int stop;

    /* schedule: at most 2 plans live */
    struct plan_rt *plans[2];
    int nplans;
    uint64_t admit_g;              /* next task to admit */
    uint64_t exec_g;               /* next task for a worker */
    uint64_t deliver_gb;           /* next batch to hand out */
    uint64_t cons_plan_epoch;      /* epoch the consumer is in */
    int epoch_end_pending;

    /* I/O thread */
    pthread_t io_th;
    int io_started;
    uint64_t *submitq;             /* units waiting to be submitted (ring) */
    uint64_t sq_head, sq_tail, sq_cap;
    uint32_t inflight;
    int io_blocked;                /* admission waits for a slot */

    /* workers and batches */
    struct worker *workers;
    int nworkers;
    int depth;
    struct asm_slot *asmq;
    struct batch_buf *free_bufs;
    void *all_bufs;                /* every buffer made (batch.c) */
    int nbufs;
    size_t buf_bytes;              /* one transform batch buffer */
    size_t held_bytes;             /* all batch buffers */

    /* counters */
    uint64_t samples, batches, payload, padded, decode_errors, refetches;
    uint64_t bytes_read, reads;
    uint64_t wait_batch_ns;
    uint64_t read_requests;
};

/* batch.c */
int ps_batches_init(struct ps_loader *l, char *err);
void ps_batches_free(struct ps_loader *l);
/* 1 when ps_batch_get can give a buffer now. */
int ps_batch_available(const struct ps_loader *l);
/* A buffer for a new batch (from the free list, or a new one). NULL: out of memory. */
struct batch_buf *ps_batch_get(struct ps_loader *l);
/* Prepare buf for the tasks [t0, t0+n) of plan pr (raw mode: lay out the arena). */
int ps_batch_layout(struct ps_loader *l, struct batch_buf *b, const struct plan_rt *pr, uint64_t t0, uint32_t n);
/* Remove failed positions (on_error=skip); returns the samples left. */
uint32_t ps_batch_compact(struct ps_loader *l, struct batch_buf *b, uint32_t n);

#endif
