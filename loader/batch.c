/*
 * batch.c - batch buffers: preallocated for the ring, more made only when
 * the caller keeps batches (tensors) alive past the ring depth, so a kept
 * batch is never overwritten; handed back by ps_batch_release.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "loader/loader_int.h"

#define MAX_BUFS 4096

static void buf_free(struct ps_loader *l, struct batch_buf *b)
{
    if (!b)
        return;
    ps_xfer_host_free(b->images, l->xfer != NULL);
    free(b->labels);
    free(b->ids);
    free(b->failed);
    free(b->data);
    free(b->sizes);
    free(b->arena);
    free(b->arena_off);
    free(b);
}

static struct batch_buf *buf_new(struct ps_loader *l)
{
    const uint32_t B = l->o.batch_size;
    struct batch_buf *b = calloc(1, sizeof *b);

    if (!b)
        return NULL;
    b->owner = l;
    b->labels = malloc(B * sizeof *b->labels);
    b->ids = malloc(B * sizeof *b->ids);
    b->failed = calloc(B, 1);
    b->bytes = B * (sizeof *b->labels + sizeof *b->ids + 1);
    if (!b->labels || !b->ids || !b->failed)
        goto err;
    if (l->o.transform == PS_TRANSFORM_NONE) {
        b->data = malloc(B * sizeof *b->data);
        b->sizes = malloc(B * sizeof *b->sizes);
        b->arena_off = malloc(B * sizeof *b->arena_off);
        if (!b->data || !b->sizes || !b->arena_off)
            goto err;
        b->bytes += B * (sizeof *b->data + sizeof *b->sizes + sizeof *b->arena_off);
    } else {
        b->images = ps_xfer_host_alloc(l->buf_bytes, l->xfer != NULL);
        if (!b->images)
            goto err;
        b->bytes += l->buf_bytes;
    }
    b->xfer_slot = l->nbufs;
    b->pub.height = b->pub.width = l->o.transform == PS_TRANSFORM_NONE ? 0 : l->o.crop;
    b->pub.channels = l->o.transform == PS_TRANSFORM_NONE ? 0 : 3;
    b->pub.layout = l->o.layout;
    b->pub.dtype = l->o.dtype;
    b->pub.device = l->o.device;
    b->pub.ids = b->ids;
    b->pub.labels = b->labels;
    b->pub.images = b->images;
    b->pub.image_bytes = l->buf_bytes;
    b->pub.data = (const uint8_t *const *)b->data;
    b->pub.sizes = b->sizes;
    l->nbufs++;
    l->held_bytes += b->bytes;
    return b;
err:
    buf_free(l, b);
    return NULL;
}

/* Every buffer ever made, so close can free those the caller still holds. */
struct buf_list {
    struct batch_buf *v[MAX_BUFS];
};

int ps_batches_init(struct ps_loader *l, char *err)
{
    l->buf_bytes = l->o.transform == PS_TRANSFORM_NONE ? 0 : (size_t)l->o.batch_size * l->o.crop * l->o.crop * 3;
    l->all_bufs = calloc(1, sizeof(struct buf_list));
    if (!l->all_bufs)
        return ps_seterr(err, -ENOMEM, "out of memory");
    /* the ring, allocated up front so the hot path does not allocate */
    for (int i = 0; i < l->depth + 1; i++) {
        struct batch_buf *b = buf_new(l);
        if (!b)
            return ps_seterr(err, -ENOMEM, "out of memory for %d batch buffers of %zu bytes", l->depth + 1,
                             l->buf_bytes);
        ((struct buf_list *)l->all_bufs)->v[i] = b;
        b->next_free = l->free_bufs;
        l->free_bufs = b;
    }
    return 0;
}

void ps_batches_free(struct ps_loader *l)
{
    struct buf_list *all = l->all_bufs;
    if (!all)
        return;
    for (int i = 0; i < l->nbufs && i < MAX_BUFS; i++)
        buf_free(l, all->v[i]);
    free(all);
    l->all_bufs = NULL;
    l->free_bufs = NULL;
}

int ps_batch_available(const struct ps_loader *l)
{
    if (l->free_bufs)
        return 1;
    /* device buffers are fixed in number; host ones may grow */
    if (l->xfer)
        return 0;
    return l->nbufs < MAX_BUFS;
}

struct batch_buf *ps_batch_get(struct ps_loader *l)
{
    struct batch_buf *b = l->free_bufs;
    if (b) {
        l->free_bufs = b->next_free;
        b->next_free = NULL;
        return b;
    }
    if (l->xfer || l->nbufs >= MAX_BUFS)
        return NULL;
    /* the caller keeps more batches than the ring holds: make another */
    b = buf_new(l);
    if (b)
        ((struct buf_list *)l->all_bufs)->v[l->nbufs - 1] = b;
    return b;
}

int ps_batch_layout(struct ps_loader *l, struct batch_buf *b, const struct plan_rt *pr, uint64_t t0, uint32_t n)
{
    memset(b->failed, 0, n);
    b->pub.n = n;
    b->pub.skipped = 0;
    if (l->o.transform == PS_TRANSFORM_NONE) {
        const struct ps_dataset *ds = l->ds;
        size_t total = 0;
        for (uint32_t i = 0; i < n; i++) {
            uint32_t s = pr->p.samples[t0 + i];
            uint32_t len = ds->image_field >= 0 ? ds->values[(uint64_t)s * ds->nfields + (uint32_t)ds->image_field].len
                                                : 0;
            b->arena_off[i] = total;
            total += (len + 63) & ~(size_t)63;
        }
        if (total > b->arena_cap) {
            /* grows to the largest batch seen, then stays */
            uint8_t *a = realloc(b->arena, total);
            if (!a)
                return -ENOMEM;
            l->held_bytes += total - b->arena_cap;
            b->bytes += total - b->arena_cap;
            b->arena = a;
            b->arena_cap = total;
        }
    }
    return 0;
}

uint32_t ps_batch_compact(struct ps_loader *l, struct batch_buf *b, uint32_t n)
{
    size_t isz = (size_t)l->o.crop * l->o.crop * 3;
    uint32_t k = 0;

    for (uint32_t i = 0; i < n; i++) {
        if (b->failed[i])
            continue;
        if (k != i) {
            b->ids[k] = b->ids[i];
            b->labels[k] = b->labels[i];
            if (l->o.transform == PS_TRANSFORM_NONE) {
                b->data[k] = b->data[i];
                b->sizes[k] = b->sizes[i];
            } else {
                memmove(b->images + k * isz, b->images + i * isz, isz);
            }
        }
        k++;
    }
    return k;
}

void ps_batch_release(struct ps_batch *pub)
{
    struct batch_buf *b = (struct batch_buf *)pub;
    struct ps_loader *l;

    if (!pub)
        return;
    l = b->owner;
    if (l->o.transform != PS_TRANSFORM_NONE)
        b->pub.images = b->images; /* the device pointer was lent for this delivery only */
    pthread_mutex_lock(&l->mu);
    b->next_free = l->free_bufs;
    l->free_bufs = b;
    pthread_cond_broadcast(&l->cv_work);
    pthread_cond_broadcast(&l->cv_batch);
    pthread_mutex_unlock(&l->mu);
}
