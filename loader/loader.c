/*
 * loader.c - the loader: one I/O thread admits scheduled tasks into the
 * bounded cache (prefetching their pages in the order the epoch needs them,
 * evicting by farthest next use), worker threads turn admitted samples into
 * batch entries, and ps_loader_next hands batches out in order.
 */
#include <errno.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "loader/loader_int.h"

#define MIN(a, b) ((a) < (b) ? (a) : (b))
#define MAX(a, b) ((a) > (b) ? (a) : (b))

void ps_options_init(struct ps_options *o)
{
    memset(o, 0, sizeof *o);
    o->batch_size = 256;
    o->order = PS_ORDER_QUASI_RANDOM;
    o->world_size = 1;
    o->drop_last = 1;
    o->ring_depth = 4;
    o->retries = 6;
    o->timeout_ms = 30000;
    o->transform = PS_TRANSFORM_RANDOM_RESIZED_CROP;
    o->crop = 224;
    o->scale_min = 0.08f;
    o->scale_max = 1.0f;
    o->ratio_min = 3.0f / 4.0f;
    o->ratio_max = 4.0f / 3.0f;
    o->flip = 1;
    o->layout = PS_LAYOUT_NHWC;
    o->device = PS_DEVICE_CPU;
    o->dtype = PS_DTYPE_UINT8;
    o->mean[0] = 123.675f; o->mean[1] = 116.28f; o->mean[2] = 103.53f;
    o->std[0] = 58.395f; o->std[1] = 57.12f; o->std[2] = 57.375f;
    o->on_error = PS_ON_ERROR_FAIL;
}

/* ---------------- errors ---------------- */

static void fail_locked(struct ps_loader *l, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void fail_locked(struct ps_loader *l, int code, const char *fmt, ...)
{
    va_list ap;
    if (l->error)
        return;
    l->error = code;
    va_start(ap, fmt);
    vsnprintf(l->err, sizeof l->err, fmt, ap);
    va_end(ap);
    pthread_cond_broadcast(&l->cv_work);
    pthread_cond_broadcast(&l->cv_ready);
    pthread_cond_broadcast(&l->cv_batch);
    pthread_cond_broadcast(&l->cv_io);
}

/* ---------------- units ---------------- */

/* Units a sample needs: pages [first, first+count) or the sample itself. */
static inline void task_units(const struct ps_loader *l, uint32_t sample, uint64_t *first, uint32_t *count)
{
    if (l->sample_mode) {
        *first = sample;
        *count = 1;
    } else {
        *first = l->ds->samples[sample].page;
        *count = l->ds->samples[sample].span;
    }
}

/* File range read for a unit, and where the unit's data starts in it. */
static void unit_range(const struct ps_loader *l, uint64_t unit, uint64_t *off, uint64_t *len)
{
    const struct ps_dataset *ds = l->ds;
    if (l->sample_mode) {
        /* O_DIRECT wants 4 KiB-aligned ranges; buffered reads take the sample alone */
        const struct ps_ds_sample *s = &ds->samples[unit];
        uint64_t a = l->o.direct ? s->off & ~4095ull : s->off;
        uint64_t e = l->o.direct ? (s->off + s->len + 4095) & ~4095ull : s->off + s->len;
        *off = a;
        *len = e - a;
    } else {
        uint64_t a = ps_ds_page_offset(ds, unit);
        uint64_t e = a + ds->page_size;
        if (e > ds->file_size)
            e = ds->file_size;
        *off = a;
        *len = e - a;
    }
}

/* ---------------- plans ---------------- */

static void plan_free(struct plan_rt *pr)
{
    if (!pr)
        return;
    ps_plan_free(&pr->p);
    free(pr->use_first);
    free(pr->uses);
    free(pr->cursor);
    free(pr);
}

/* Build the plan of @p epoch and its unit-use index. start_task: tasks
 * before it count as admitted already (resume). */
static int plan_build(struct ps_loader *l, uint64_t epoch, uint64_t start_task, struct plan_rt **out)
{
    struct plan_rt *pr = calloc(1, sizeof *pr);
    uint64_t nuses = 0;
    int rc;

    *out = NULL;
    if (!pr)
        return -ENOMEM;
    rc = ps_plan_make(&l->sin, epoch, &pr->p);
    if (rc < 0) {
        free(pr);
        return rc;
    }
    pr->epoch = epoch;
    pr->use_first = calloc(l->nunits + 1, sizeof *pr->use_first);
    pr->cursor = calloc(l->nunits ? l->nunits : 1, sizeof *pr->cursor);
    if (!pr->use_first || !pr->cursor)
        goto nomem;
    for (uint64_t t = 0; t < pr->p.ntasks; t++) {
        uint64_t f;
        uint32_t c;
        task_units(l, pr->p.samples[t], &f, &c);
        for (uint32_t k = 0; k < c; k++)
            pr->use_first[f + k + 1]++;
        nuses += c;
    }
    for (uint64_t u = 0; u < l->nunits; u++)
        pr->use_first[u + 1] += pr->use_first[u];
    pr->uses = malloc((nuses ? nuses : 1) * sizeof *pr->uses);
    if (!pr->uses)
        goto nomem;
    /* fill in task order, so each unit's list is sorted */
    for (uint64_t t = 0; t < pr->p.ntasks; t++) {
        uint64_t f;
        uint32_t c;
        task_units(l, pr->p.samples[t], &f, &c);
        for (uint32_t k = 0; k < c; k++)
            pr->uses[pr->use_first[f + k] + pr->cursor[f + k]++] = (uint32_t)t;
    }
    memset(pr->cursor, 0, l->nunits * sizeof *pr->cursor);
    for (uint64_t t = 0; t < start_task && t < pr->p.ntasks; t++) {
        uint64_t f;
        uint32_t c;
        task_units(l, pr->p.samples[t], &f, &c);
        for (uint32_t k = 0; k < c; k++)
            pr->cursor[f + k]++;
    }
    *out = pr;
    return 0;
nomem:
    plan_free(pr);
    return -ENOMEM;
}

/* The live plan holding global task g, or NULL. Lock held. */
static struct plan_rt *plan_of_task(struct ps_loader *l, uint64_t g)
{
    for (int i = 0; i < l->nplans; i++) {
        struct plan_rt *pr = l->plans[i];
        if (g >= pr->base && g < pr->base + pr->p.ntasks)
            return pr;
    }
    return NULL;
}

/* Append the plan after the last live one. Lock held. */
static void plan_append(struct ps_loader *l, struct plan_rt *pr)
{
    struct plan_rt *last = l->plans[l->nplans - 1];
    pr->base = last->base + last->p.ntasks;
    pr->gbatch0 = last->gbatch0 + last->p.nbatches;
    l->plans[l->nplans++] = pr;
}

/* Admission position context for next-use queries. */
struct nu_ctx {
    struct ps_loader *l;
    int plan_idx;   /* plan in which admission is */
};

static uint64_t next_use(void *ctx, uint64_t u)
{
    struct nu_ctx *c = ctx;
    struct ps_loader *l = c->l;
    for (int i = c->plan_idx; i < l->nplans; i++) {
        struct plan_rt *pr = l->plans[i];
        uint64_t n = pr->use_first[u + 1] - pr->use_first[u];
        if (pr->cursor[u] < n)
            return pr->base + pr->uses[pr->use_first[u] + pr->cursor[u]];
    }
    return PS_NO_USE;
}

/* ---------------- the I/O thread ---------------- */

static void sq_push(struct ps_loader *l, uint64_t unit)
{
    l->submitq[l->sq_tail++ % l->sq_cap] = unit;
}

/* Admit as many tasks as slots and read depth allow. Lock held.
 * Returns 1 when it stopped only because of its per-call budget. */
static int admit(struct ps_loader *l)
{
    const uint64_t B = l->o.batch_size;
    /* bounded per call: with everything cached, admission would otherwise
     * walk a whole epoch while holding the lock the workers need */
    uint32_t budget = 4096;

    while (!l->stop && !l->error && budget--) {
        uint64_t g = l->admit_g, f, end_of_plan;
        uint32_t cnt, sample, need = 0;
        struct plan_rt *pr = plan_of_task(l, g);
        struct nu_ctx ctx = { l, 0 };
        int i;

        if (!pr)
            break;  /* next plan not built yet */
        for (i = 0; i < l->nplans; i++)
            if (l->plans[i] == pr)
                ctx.plan_idx = i;
        /* admission may run one plan ahead of the consumer, not more */
        if (ctx.plan_idx > 1)
            break;
        sample = pr->p.samples[g - pr->base];
        task_units(l, sample, &f, &cnt);
        for (uint32_t k = 0; k < cnt; k++)
            if (ps_cache_state(l->cache, f + k) == PS_UNIT_ABSENT)
                need++;
        {
            /* keep at most io_depth reads queued or in flight (a sample
             * spanning more pages than that goes alone) */
            uint32_t pending = l->inflight + (uint32_t)(l->sq_tail - l->sq_head);
            if (need && pending && pending + need > l->io_depth)
                break;
        }
        /* Slots: prefer victims not needed again this epoch; evict something
         * needed sooner only when the workers would otherwise starve. */
        end_of_plan = pr->base + pr->p.ntasks;
        {
            uint32_t got = 0;
            int starving = l->admit_g - l->exec_g < MAX(B / 2, 2u) && l->exec_g == l->admit_g;
            for (uint32_t k = 0; k < cnt; k++) {
                uint64_t u = f + k;
                if (ps_cache_state(l->cache, u) != PS_UNIT_ABSENT)
                    continue;
                if (ps_cache_acquire(l->cache, u, next_use, &ctx, end_of_plan) < 0 &&
                    (!starving || ps_cache_acquire(l->cache, u, next_use, &ctx, g + 1) < 0))
                    break;
                got++;
            }
            if (got < need) {
                /* all or nothing: a unit QUEUED without references was taken just now */
                for (uint32_t k = 0; k < cnt; k++)
                    if (ps_cache_state(l->cache, f + k) == PS_UNIT_QUEUED && ps_cache_refs(l->cache, f + k) == 0)
                        ps_cache_drop(l->cache, f + k);
                l->io_blocked = 1;
                break;
            }
        }
        for (uint32_t k = 0; k < cnt; k++) {
            uint64_t u = f + k;
            int st = ps_cache_state(l->cache, u);
            if (st == PS_UNIT_QUEUED && ps_cache_refs(l->cache, u) == 0)
                sq_push(l, u); /* acquired just now */
            ps_cache_count(l->cache, st == PS_UNIT_READY);
            ps_cache_ref(l->cache, u);
            pr->cursor[u]++;
        }
        l->admit_g++;
        pthread_cond_broadcast(&l->cv_work);
    }
    return budget == UINT32_MAX;
}

/* One completed read: verify, publish, re-read on a bad checksum. Lock held. */
static void complete_locked(struct ps_loader *l, uint64_t u, int64_t res, int bad)
{
    uint64_t off, len;
    const char *what = l->sample_mode ? "sample" : "page";

    unit_range(l, u, &off, &len);
    l->inflight--;
    l->reads++;
    if (res == (int64_t)len)
        l->bytes_read += len;
    if (l->stop && !l->error) {
        /* shutting down (seek/close): keep what arrived intact, drop the rest */
        if (res == (int64_t)len && !bad)
            ps_cache_set_state(l->cache, u, PS_UNIT_READY);
        else
            ps_cache_drop(l->cache, u);
        return;
    }
    if (res == (int64_t)len && !bad) {
        ps_cache_set_state(l->cache, u, PS_UNIT_READY);
        pthread_cond_broadcast(&l->cv_ready);
    } else if (res == (int64_t)len && l->unit_fetches[u] < l->fetch_limit) {
        l->unit_fetches[u]++;
        l->refetches++;
        ps_log(PS_LOG_WARN, "%s: %s %llu: checksum mismatch, reading it again", l->ds->name, what,
               (unsigned long long)u);
        ps_cache_set_state(l->cache, u, PS_UNIT_QUEUED);
        sq_push(l, u);
    } else if (res == (int64_t)len) {
        fail_locked(l, PS_ECHECKSUM, "%s: %s %llu: checksum mismatch after %u re-reads", l->ds->name, what,
                    (unsigned long long)u, l->fetch_limit);
    } else {
        int code = res < 0 ? (int)res : -EIO;
        const char *m = ps_io_errmsg(l->io);
        if (res >= 0)
            fail_locked(l, code, "%s: reading %s %llu: %lld bytes instead of %llu", l->ds->name, what,
                        (unsigned long long)u, (long long)res, (unsigned long long)len);
        else
            fail_locked(l, code, "%s: reading %s %llu: %s", l->ds->name, what, (unsigned long long)u,
                        m[0] ? m : ps_strerror(code));
    }
}

/* Verify (outside the lock: CRC of a page is real work) and publish. */
static void handle_cqes(struct ps_loader *l, const struct ps_io_cqe *cqes, int n)
{
    for (int i = 0; i < n; i++) {
        uint64_t u = cqes[i].cookie, off, len;
        int bad = 0;
        unit_range(l, u, &off, &len);
        if (cqes[i].res == (int64_t)len) {
            const uint8_t *d = ps_cache_data(l->cache, u);
            if (l->sample_mode)
                bad = ps_ds_check_sample(l->ds, u, d + (l->ds->samples[u].off - off)) < 0;
            else
                bad = ps_ds_check_page(l->ds, u, d) < 0;
        }
        pthread_mutex_lock(&l->mu);
        complete_locked(l, u, cqes[i].res, bad);
        pthread_mutex_unlock(&l->mu);
    }
}

static void *io_main(void *arg)
{
    struct ps_loader *l = arg;
    struct ps_io_req reqs[64];
    struct ps_io_cqe cqes[64];

    pthread_mutex_lock(&l->mu);
    for (;;) {
        int nreq = 0, done = 0, n, more = 0;

        if ((l->stop || l->error) && l->inflight == 0)
            break;
        if (!l->stop && !l->error)
            more = admit(l);
        while (!l->stop && !l->error && l->sq_head < l->sq_tail && nreq < 64) {
            uint64_t u = l->submitq[l->sq_head++ % l->sq_cap], off, len;
            unit_range(l, u, &off, &len);
            reqs[nreq] = (struct ps_io_req){ .offset = off, .length = len, .buf = ps_cache_data(l->cache, u),
                                             .cookie = u };
            ps_cache_set_state(l->cache, u, PS_UNIT_LOADING);
            nreq++;
        }
        /* count them in flight before any completion can be handled */
        l->inflight += (uint32_t)nreq;
        l->read_requests += (uint64_t)nreq;
        if (nreq == 0 && l->inflight == 0 && more) {
            /* let the workers have the lock, then admit more */
            pthread_mutex_unlock(&l->mu);
            sched_yield();
            pthread_mutex_lock(&l->mu);
            continue;
        }
        if (nreq == 0 && l->inflight == 0) {
            /* nothing to read: wait until a worker frees a reference or a plan arrives */
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000000L;
            if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
            }
            if (!l->stop && !l->error)
                pthread_cond_timedwait(&l->cv_io, &l->mu, &ts);
            continue;
        }
        pthread_mutex_unlock(&l->mu);

        while (done < nreq) {
            n = ps_io_submit(l->io, reqs + done, nreq - done);
            if (n < 0) {
                const char *m = ps_io_errmsg(l->io);
                pthread_mutex_lock(&l->mu);
                l->inflight -= (uint32_t)(nreq - done);
                for (int i = done; i < nreq; i++)
                    ps_cache_drop(l->cache, reqs[i].cookie);
                fail_locked(l, n, "%s: %s", l->ds->name, m[0] ? m : ps_strerror(n));
                pthread_mutex_unlock(&l->mu);
                break;
            }
            done += n;
            if (n == 0) {
                /* the backend is full: take completions to make room */
                n = ps_io_reap(l->io, cqes, 64, 1, 1000);
                if (n > 0)
                    handle_cqes(l, cqes, n);
            }
        }
        /* Wait for a completion. Workers freeing slots call ps_io_wakeup;
         * the timeout bounds the wait where a backend cannot be woken. */
        n = ps_io_reap(l->io, cqes, 64, nreq ? 0 : 1, nreq ? 0 : 20);
        if (n > 0)
            handle_cqes(l, cqes, n);
        else if (n < 0 && n != -EINTR && n != -ETIME && n != -ETIMEDOUT && n != -EAGAIN) {
            const char *m = ps_io_errmsg(l->io);
            pthread_mutex_lock(&l->mu);
            fail_locked(l, n, "%s: %s", l->ds->name, m[0] ? m : ps_strerror(n));
            pthread_mutex_unlock(&l->mu);
        }
        pthread_mutex_lock(&l->mu);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------------- workers ---------------- */

static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Pointer to a sample's stored bytes: in its slot, or assembled in the
 * worker's scratch when it spans pages. Units are READY and referenced. */
static const uint8_t *sample_bytes(struct worker *w, uint32_t sample, char *err)
{
    struct ps_loader *l = w->l;
    const struct ps_ds_sample *s = &l->ds->samples[sample];

    if (l->sample_mode) {
        uint64_t off, len;
        unit_range(l, sample, &off, &len);
        return (const uint8_t *)ps_cache_data(l->cache, sample) + (s->off - off);
    }
    {
        uint64_t pstart = ps_ds_page_offset(l->ds, s->page);
        uint64_t in = s->off - pstart;
        if (s->span == 1)
            return (const uint8_t *)ps_cache_data(l->cache, s->page) + in;
        if (w->scratch_cap < s->len) {
            uint8_t *n = realloc(w->scratch, s->len);
            if (!n) {
                ps_seterr(err, -ENOMEM, "out of memory assembling sample %u", sample);
                return NULL;
            }
            w->scratch = n;
            w->scratch_cap = s->len;
        }
        for (uint64_t done = 0, p = s->page; done < s->len; p++) {
            uint64_t take = MIN((uint64_t)l->ds->page_size - in, s->len - done);
            memcpy(w->scratch + done, (const uint8_t *)ps_cache_data(l->cache, p) + in, take);
            done += take;
            in = 0;
        }
        return w->scratch;
    }
}

/* Produce batch entry @p pos of @p b from @p sample. 0, or an error (err set). */
static int do_task(struct worker *w, struct batch_buf *b, uint32_t pos, uint32_t sample, uint64_t epoch, char *err)
{
    struct ps_loader *l = w->l;
    const struct ps_dataset *ds = l->ds;
    const uint8_t *bytes = sample_bytes(w, sample, err);
    const struct ps_ds_value *v;
    int rc = 0;

    if (!bytes)
        return -ENOMEM;
    b->ids[pos] = sample;
    b->labels[pos] = ps_ds_label(ds, sample);
    if (ds->image_field < 0)
        v = NULL;
    else
        v = &ds->values[(uint64_t)sample * ds->nfields + (uint32_t)ds->image_field];
    if (l->o.transform == PS_TRANSFORM_NONE) {
        if (v) {
            memcpy(b->arena + b->arena_off[pos], bytes + v->off, v->len);
            b->sizes[pos] = v->len;
        } else {
            b->sizes[pos] = 0;
        }
        b->data[pos] = b->arena + b->arena_off[pos];
        return 0;
    }
    {
        uint64_t seed = ps_mix64(l->o.seed ^ ps_mix64(epoch * 0x9E3779B97F4A7C15ull + sample + 1));
        size_t isz = (size_t)l->o.crop * l->o.crop * 3;
        uint8_t *out = b->images + (size_t)pos * isz;
        if (v->kind == PS_F_JPEG)
            rc = ps_decode_jpeg(w->dec, bytes + v->off, v->len, seed, out, NULL, err);
        else if (v->kind == PS_F_RAW) {
            if ((uint64_t)v->h * v->w * 3 != v->len)
                rc = ps_seterr(err, PS_EFORMAT, "raw image of %ux%u but %u bytes", v->h, v->w, v->len);
            else
                rc = ps_decode_raw(w->dec, bytes + v->off, v->h, v->w, seed, out, NULL, err);
        } else
            rc = ps_seterr(err, PS_EUNSUP, "field is not an image");
    }
    return rc;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct ps_loader *l = w->l;
    const uint64_t B = l->o.batch_size;
    char err[PS_ERRLEN];

    pthread_mutex_lock(&l->mu);
    while (!l->stop && !l->error) {
        uint64_t g = l->exec_g, gb, f, t0, wait0;
        uint32_t cnt, sample, pos, ready;
        struct plan_rt *pr;
        struct asm_slot *a;
        struct batch_buf *b;
        int rc;

        pr = g < l->admit_g ? plan_of_task(l, g) : NULL;
        if (!pr) {
            pthread_cond_wait(&l->cv_work, &l->mu);
            continue;
        }
        gb = pr->gbatch0 + (g - pr->base) / B;
        a = &l->asmq[gb % (uint64_t)l->depth];
        if (a->gb != (int64_t)gb) {
            if (a->state != ASM_IDLE || gb >= l->deliver_gb + (uint64_t)l->depth || !ps_batch_available(l)) {
                pthread_cond_wait(&l->cv_work, &l->mu);
                continue;
            }
            /* first task of this batch: give it a buffer */
            t0 = (gb - pr->gbatch0) * B;
            b = ps_batch_get(l);
            if (!b || ps_batch_layout(l, b, pr, t0, (uint32_t)MIN(B, pr->p.ntasks - t0)) < 0) {
                fail_locked(l, -ENOMEM, "out of memory for a batch buffer");
                break;
            }
            a->gb = (int64_t)gb;
            a->state = ASM_FILLING;
            a->n = (uint32_t)MIN(B, pr->p.ntasks - t0);
            a->remaining = a->n;
            a->buf = b;
            b->pub.epoch = pr->epoch;
            b->pub.index = gb - pr->gbatch0;
        }
        b = a->buf;
        l->exec_g++;
        sample = pr->p.samples[g - pr->base];
        pos = (uint32_t)((g - pr->base) % B);
        task_units(l, sample, &f, &cnt);
        /* wait until its pages are in */
        wait0 = ps_now_ns();
        for (;;) {
            ready = 1;
            for (uint32_t k = 0; k < cnt; k++)
                if (ps_cache_state(l->cache, f + k) != PS_UNIT_READY)
                    ready = 0;
            if (ready || l->stop || l->error)
                break;
            pthread_cond_wait(&l->cv_ready, &l->mu);
        }
        atomic_fetch_add_explicit(&w->wait_ns, ps_now_ns() - wait0, memory_order_relaxed);
        if (!ready)
            break;
        {
            uint64_t epoch = pr->epoch, c0;
            pthread_mutex_unlock(&l->mu);
            c0 = thread_cpu_ns();
            err[0] = 0;
            rc = do_task(w, b, pos, sample, epoch, err);
            atomic_fetch_add_explicit(&w->cpu_ns, thread_cpu_ns() - c0, memory_order_relaxed);
            pthread_mutex_lock(&l->mu);
        }
        for (uint32_t k = 0; k < cnt; k++)
            if (ps_cache_unref(l->cache, f + k) == 0 && l->io_blocked) {
                l->io_blocked = 0;
                pthread_cond_signal(&l->cv_io);
                ps_io_wakeup(l->io);
            }
        if (rc < 0) {
            l->decode_errors++;
            if (l->o.on_error == PS_ON_ERROR_SKIP && rc != -ENOMEM) {
                b->failed[pos] = 1;
                ps_log(PS_LOG_WARN, "%s: sample %u skipped: %s", l->ds->name, sample, err);
            } else {
                fail_locked(l, rc, "%s: sample %u: %s", l->ds->name, sample, err[0] ? err : ps_strerror(rc));
                break;
            }
        }
        if (--a->remaining == 0) {
            uint32_t n = ps_batch_compact(l, b, a->n);
            b->pub.n = n;
            b->pub.skipped = a->n - n;
            if (l->xfer) {
                /* start the copy to the GPU now; ps_loader_next waits for it */
                rc = ps_xfer_submit(l->xfer, b->xfer_slot, b->images, n);
                if (rc < 0) {
                    fail_locked(l, rc, "copy to the GPU failed: %s", ps_strerror(rc));
                    break;
                }
            }
            a->state = ASM_READY;
            pthread_cond_broadcast(&l->cv_batch);
        }
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

/* ---------------- start / stop ---------------- */

static void stop_threads(struct ps_loader *l)
{
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_work);
    pthread_cond_broadcast(&l->cv_ready);
    pthread_cond_broadcast(&l->cv_io);
    pthread_cond_broadcast(&l->cv_batch);
    pthread_mutex_unlock(&l->mu);
    if (l->io)
        ps_io_wakeup(l->io);
    for (int i = 0; i < l->nworkers; i++)
        if (l->workers[i].started) {
            pthread_join(l->workers[i].th, NULL);
            l->workers[i].started = 0;
        }
    if (l->io_started) {
        pthread_join(l->io_th, NULL);
        l->io_started = 0;
    }
}

/* Forget the schedule (threads stopped): units keep their data when READY. */
static void reset_schedule(struct ps_loader *l)
{
    for (int i = 0; i < l->nplans; i++)
        plan_free(l->plans[i]);
    l->nplans = 0;
    for (uint64_t u = 0; u < l->nunits; u++) {
        int st = ps_cache_state(l->cache, u);
        while (ps_cache_refs(l->cache, u))
            ps_cache_unref(l->cache, u);
        if (st == PS_UNIT_QUEUED || st == PS_UNIT_LOADING)
            ps_cache_drop(l->cache, u);
    }
    l->sq_head = l->sq_tail = 0;
    for (int i = 0; i < l->depth; i++) {
        struct asm_slot *a = &l->asmq[i];
        if (a->buf && a->state != ASM_IDLE) {
            a->buf->next_free = l->free_bufs;
            l->free_bufs = a->buf;
        }
        a->buf = NULL;
        a->gb = -1;
        a->state = ASM_IDLE;
    }
}

static int start_at(struct ps_loader *l, uint64_t epoch, uint64_t batch)
{
    struct plan_rt *p0 = NULL, *p1 = NULL;
    uint64_t start_task;
    int rc;

    start_task = batch * l->o.batch_size;
    rc = plan_build(l, epoch, start_task, &p0);
    if (rc < 0)
        return ps_seterr(l->err, rc, "cannot build the schedule of epoch %llu: %s", (unsigned long long)epoch,
                         ps_strerror(rc));
    if (batch > p0->p.nbatches) {
        uint64_t nb = p0->p.nbatches;
        plan_free(p0);
        return ps_seterr(l->err, PS_ECONFIG, "resume position batch %llu is past the end of epoch %llu (%llu batches)",
                         (unsigned long long)batch, (unsigned long long)epoch, (unsigned long long)nb);
    }
    rc = plan_build(l, epoch + 1, 0, &p1);
    if (rc < 0) {
        plan_free(p0);
        return ps_seterr(l->err, rc, "cannot build the schedule of epoch %llu: %s", (unsigned long long)epoch + 1,
                         ps_strerror(rc));
    }
    p0->base = 0;
    p0->gbatch0 = 0;
    l->plans[0] = p0;
    l->nplans = 1;
    plan_append(l, p1);
    l->admit_g = l->exec_g = start_task < p0->p.ntasks ? start_task : p0->p.ntasks;
    l->deliver_gb = batch;
    l->cons_plan_epoch = epoch;
    l->epoch_end_pending = 0;
    l->stop = 0;
    l->io_blocked = 0;

    for (int i = 0; i < l->nworkers; i++) {
        rc = pthread_create(&l->workers[i].th, NULL, worker_main, &l->workers[i]);
        if (rc)
            return ps_seterr(l->err, -rc, "cannot start a worker thread: %s", strerror(rc));
        l->workers[i].started = 1;
    }
    rc = pthread_create(&l->io_th, NULL, io_main, l);
    if (rc)
        return ps_seterr(l->err, -rc, "cannot start the I/O thread: %s", strerror(rc));
    l->io_started = 1;
    return 0;
}

/* ---------------- open ---------------- */

static int cores_available(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return CPU_COUNT(&set) > 0 ? CPU_COUNT(&set) : 1;
    return 1;
}

static uint64_t mem_total(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), psz = sysconf(_SC_PAGESIZE);
    return pages > 0 && psz > 0 ? (uint64_t)pages * (uint64_t)psz : 0;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static int validate_options(const struct ps_options *o, char *err)
{
    if (o->batch_size == 0 || o->batch_size > (1u << 20))
        return ps_seterr(err, PS_ECONFIG, "batch size %u: must be 1 .. 1048576", o->batch_size);
    if (o->order < PS_ORDER_SEQUENTIAL || o->order > PS_ORDER_QUASI_RANDOM)
        return ps_seterr(err, PS_ECONFIG, "unknown order %d", o->order);
    if (o->world_size < 1 || o->rank < 0 || o->rank >= o->world_size)
        return ps_seterr(err, PS_ECONFIG, "rank %d of world size %d: need 0 <= rank < world size", o->rank,
                         o->world_size);
    if (o->threads < 0 || o->threads > 1024)
        return ps_seterr(err, PS_ECONFIG, "threads %d: must be 0 (all cores) .. 1024", o->threads);
    if (o->ring_depth < 1 || o->ring_depth > 64)
        return ps_seterr(err, PS_ECONFIG, "ring depth %d: must be 1 .. 64", o->ring_depth);
    if (o->queue_depth < 0 || o->queue_depth > 1024)
        return ps_seterr(err, PS_ECONFIG, "queue depth %d: must be 0 (default) .. 1024", o->queue_depth);
    if (o->transform < PS_TRANSFORM_NONE || o->transform > PS_TRANSFORM_CENTER_CROP)
        return ps_seterr(err, PS_ECONFIG, "unknown transform %d", o->transform);
    if (o->transform != PS_TRANSFORM_NONE) {
        if (o->crop < 8 || o->crop > 4096)
            return ps_seterr(err, PS_ECONFIG, "crop %u: must be 8 .. 4096", o->crop);
        if (!(o->scale_min > 0 && o->scale_min <= o->scale_max && o->scale_max <= 1))
            return ps_seterr(err, PS_ECONFIG, "scale range (%g, %g): need 0 < min <= max <= 1", o->scale_min,
                             o->scale_max);
        if (!(o->ratio_min > 0 && o->ratio_min <= o->ratio_max))
            return ps_seterr(err, PS_ECONFIG, "ratio range (%g, %g): need 0 < min <= max", o->ratio_min,
                             o->ratio_max);
    }
    if (o->dtype != PS_DTYPE_UINT8 && o->device != PS_DEVICE_CUDA)
        return ps_seterr(err, PS_ECONFIG, "float16/float32 batches are made on the GPU: use device=cuda or uint8");
    if (o->device == PS_DEVICE_CUDA && o->transform == PS_TRANSFORM_NONE)
        return ps_seterr(err, PS_ECONFIG, "device=cuda needs an image transform (raw bytes stay on the CPU)");
    return 0;
}

int ps_loader_open(const char *url, const struct ps_options *opts, ps_loader **out, char *err)
{
    struct ps_options defaults;
    struct ps_loader *l;
    struct ps_io_opts io;
    char ebuf[PS_ERRLEN];
    uint64_t data_bytes, cache, min_cache;
    uint32_t nslots;
    int rc;

    if (!err)
        err = ebuf;
    err[0] = 0;
    *out = NULL;
    if (!opts) {
        ps_options_init(&defaults);
        opts = &defaults;
    }
    rc = validate_options(opts, err);
    if (rc < 0)
        return rc;
    l = calloc(1, sizeof *l);
    if (!l)
        return ps_seterr(err, -ENOMEM, "out of memory");
    l->o = *opts;
    l->url = strdup(url);
    l->endpoint = dup_or_null(opts->endpoint);
    l->region = dup_or_null(opts->region);
    l->fault = dup_or_null(opts->fault);
    l->o.endpoint = l->endpoint;
    l->o.region = l->region;
    l->o.fault = l->fault;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_work, NULL);
    pthread_cond_init(&l->cv_ready, NULL);
    pthread_cond_init(&l->cv_batch, NULL);
    pthread_cond_init(&l->cv_io, NULL);

    ps_io_opts_init(&io);
    io.queue_depth = opts->queue_depth;
    io.direct = opts->direct;
    io.endpoint = l->endpoint;
    io.region = l->region;
    io.insecure = opts->insecure;
    io.retries = opts->retries > 0 ? opts->retries : 6;
    io.timeout_ms = opts->timeout_ms > 0 ? opts->timeout_ms : 30000;
    io.fault = l->fault;
    rc = ps_io_open(url, &io, &l->io, err);
    if (rc < 0)
        goto fail;
    rc = ps_ds_open(l->io, ps_io_name(l->io), &l->ds, err);
    if (rc < 0)
        goto fail;
    if (opts->transform != PS_TRANSFORM_NONE) {
        const struct ps_field *f = l->ds->image_field >= 0 ? &l->ds->fields[l->ds->image_field] : NULL;
        if (!f || (f->type != PS_F_JPEG && f->type != PS_F_RAW && f->type != PS_F_IMAGE)) {
            rc = ps_seterr(err, PS_ECONFIG, "%s: has no image field to crop (use transform none for raw bytes)",
                           l->ds->name);
            goto fail;
        }
    }

    /* cache size: asked for, else from the cgroup limit, else a share of RAM */
    data_bytes = l->ds->npages * (uint64_t)l->ds->page_size;
    cache = opts->cache_size;
    if (!cache) {
        uint64_t lim = ps_cgroup_memory_limit(), ram = mem_total();
        const char *lws = getenv("LOCAL_WORLD_SIZE");
        long local = lws ? strtol(lws, NULL, 10) : 1;
        if (lim && (!ram || lim < ram))
            cache = lim / 2;
        else
            cache = ram ? ram / 4 : (1ull << 30);
        /* torchrun starts LOCAL_WORLD_SIZE loaders in one container: share */
        if (local > 1 && local < 4096)
            cache /= (uint64_t)local;
        if (cache > data_bytes + l->ds->page_size)
            cache = data_bytes + l->ds->page_size;
    }
    l->io_depth = (uint32_t)ps_io_depth(l->io);
    if (l->io_depth < 1)
        l->io_depth = 1;
    /* random order with a cache smaller than the data: read single samples */
    /* a rank reads only its share (plus up to two boundary pages), never more than the whole file */
    {
        uint64_t share = data_bytes;
        if (opts->world_size > 1 && data_bytes / (uint64_t)opts->world_size + 2 * (uint64_t)l->ds->page_size < share)
            share = data_bytes / (uint64_t)opts->world_size + 2 * (uint64_t)l->ds->page_size;
        l->sample_mode = opts->order == PS_ORDER_RANDOM && cache < share && l->ds->max_span <= 1 &&
                         l->ds->nsamples > 0;
    }
    if (l->sample_mode) {
        l->nunits = l->ds->nsamples;
        l->slot_size = ((uint64_t)l->ds->max_sample_len + 2 * 4096 + 4095) & ~4095ull;
        min_cache = 2 * l->slot_size;
    } else {
        l->nunits = l->ds->npages;
        l->slot_size = l->ds->page_size;
        min_cache = (uint64_t)MAX(l->ds->max_span, 1u) * l->slot_size;
        if (opts->order == PS_ORDER_QUASI_RANDOM)
            min_cache += l->slot_size; /* one page of read-ahead besides the window */
    }
    if (cache < min_cache) {
        rc = ps_seterr(err, PS_ECONFIG,
                       "%s: cache size %llu bytes is too small: this dataset and order need at least %llu bytes "
                       "(%s of %llu bytes)", l->ds->name, (unsigned long long)cache,
                       (unsigned long long)min_cache, l->sample_mode ? "two sample slots" : "pages",
                       (unsigned long long)l->slot_size);
        goto fail;
    }
    nslots = (uint32_t)MIN(cache / l->slot_size, (uint64_t)UINT32_MAX / 2);
    if (!l->sample_mode && nslots > l->ds->npages + 1)
        nslots = (uint32_t)l->ds->npages + 1;
    if (nslots < 2)
        nslots = 2;
    if (l->nunits == 0)
        nslots = 2;
    rc = ps_cache_create(l->nunits, l->slot_size, nslots, &l->cache);
    if (rc < 0) {
        ps_seterr(err, rc, "cannot allocate a cache of %u slots of %llu bytes: %s", nslots,
                  (unsigned long long)l->slot_size, ps_strerror(rc));
        goto fail;
    }
    ps_io_register_buffers(l->io, ps_cache_arena(l->cache), ps_cache_arena_bytes(l->cache));
    l->unit_fetches = calloc(l->nunits ? l->nunits : 1, 1);
    l->fetch_limit = 3;
    l->sq_cap = l->io_depth + MAX(l->ds->max_span, 1u) + 2;
    l->submitq = malloc(l->sq_cap * sizeof *l->submitq);
    if (!l->unit_fetches || !l->submitq) {
        rc = ps_seterr(err, -ENOMEM, "out of memory");
        goto fail;
    }
    /* quasi-random window: what the cache holds, less read-ahead room */
    {
        uint32_t ahead = MIN(MAX(nslots / 4, 1u), 2 * l->io_depth);
        l->window = nslots > ahead + 1 ? nslots - ahead : 1;
    }
    l->sin.nsamples = l->ds->nsamples;
    l->sin.npages = l->ds->npages;
    l->sin.page_first = l->ds->page_first;
    l->sin.page_samples = l->ds->page_samples;
    l->sin.order = opts->order;
    l->sin.seed = opts->seed;
    l->sin.rank = (uint32_t)opts->rank;
    l->sin.world_size = (uint32_t)opts->world_size;
    l->sin.batch_size = opts->batch_size;
    l->sin.drop_last = opts->drop_last;
    l->sin.window = l->window;

    /* decode */
    ps_decode_params_init(&l->dp);
    l->dp.transform = opts->transform;
    l->dp.out_h = l->dp.out_w = opts->crop;
    l->dp.resize = opts->resize ? opts->resize : (uint32_t)((opts->crop * 256u + 111u) / 224u);
    l->dp.scale_min = opts->scale_min;
    l->dp.scale_max = opts->scale_max;
    l->dp.ratio_min = opts->ratio_min;
    l->dp.ratio_max = opts->ratio_max;
    l->dp.flip = opts->transform == PS_TRANSFORM_RANDOM_RESIZED_CROP ? opts->flip : 0;
    l->dp.layout = opts->layout;
    l->dp.use_restart = 1;
    if (opts->device == PS_DEVICE_CUDA) {
        struct ps_xfer_params xp = { 0 };
        char why[PS_ERRLEN] = "";
        if (!ps_xfer_available(why)) {
            rc = ps_seterr(err, PS_ENOGPU, "device=cuda: %s", why);
            goto fail;
        }
        xp.slots = opts->ring_depth * 2;
        xp.max_n = opts->batch_size;
        xp.h = xp.w = opts->crop;
        xp.dtype = opts->dtype;
        xp.layout = opts->layout;
        memcpy(xp.mean, opts->mean, sizeof xp.mean);
        memcpy(xp.std, opts->std, sizeof xp.std);
        l->dp.layout = PS_LAYOUT_NHWC; /* the GPU kernel converts the layout */
        rc = ps_xfer_create(&xp, &l->xfer, err);
        if (rc < 0)
            goto fail;
    }

    l->nworkers = opts->threads ? opts->threads : cores_available();
    l->depth = opts->ring_depth;
    l->workers = calloc((size_t)l->nworkers, sizeof *l->workers);
    l->asmq = calloc((size_t)l->depth, sizeof *l->asmq);
    if (!l->workers || !l->asmq) {
        rc = ps_seterr(err, -ENOMEM, "out of memory");
        goto fail;
    }
    for (int i = 0; i < l->depth; i++)
        l->asmq[i].gb = -1;
    for (int i = 0; i < l->nworkers; i++) {
        l->workers[i].l = l;
        if (opts->transform != PS_TRANSFORM_NONE) {
            rc = ps_decoder_create(&l->dp, &l->workers[i].dec);
            if (rc < 0) {
                ps_seterr(err, rc, "cannot create a decoder: %s", ps_strerror(rc));
                goto fail;
            }
        }
    }
    rc = ps_batches_init(l, err);
    if (rc < 0)
        goto fail;
    rc = start_at(l, opts->start_epoch, opts->start_batch);
    if (rc < 0) {
        snprintf(err, PS_ERRLEN, "%s", l->err);
        goto fail;
    }
    *out = l;
    return 0;
fail:
    ps_loader_close(l);
    return rc;
}

/* ---------------- consumer ---------------- */

/* The consumer leaves the plan it finished: drop it, build the one after next. Lock held. */
static int advance_plan(struct ps_loader *l)
{
    struct plan_rt *old = l->plans[0], *np = NULL;
    uint64_t next_epoch = l->plans[l->nplans - 1]->epoch + 1;
    int rc;

    pthread_mutex_unlock(&l->mu);
    rc = plan_build(l, next_epoch, 0, &np);
    pthread_mutex_lock(&l->mu);
    if (rc < 0) {
        fail_locked(l, rc, "cannot build the schedule of epoch %llu: %s", (unsigned long long)next_epoch,
                    ps_strerror(rc));
        return rc;
    }
    l->plans[0] = l->plans[1];
    l->nplans = 1;
    plan_append(l, np);
    l->cons_plan_epoch = l->plans[0]->epoch;
    plan_free(old);
    pthread_cond_broadcast(&l->cv_io);
    pthread_cond_broadcast(&l->cv_work);
    return 0;
}

int ps_loader_next(ps_loader *l, struct ps_batch **out)
{
    struct plan_rt *pr;
    struct asm_slot *a;
    struct batch_buf *b;
    uint64_t gb, t0 = ps_now_ns();
    int rc = 0;

    *out = NULL;
    pthread_mutex_lock(&l->mu);
    if (l->error) {
        rc = l->error;
        goto out;
    }
    pr = l->plans[0];
    if (l->epoch_end_pending) {
        l->epoch_end_pending = 0;
        rc = advance_plan(l);
        if (rc < 0)
            goto out;
        pr = l->plans[0];
    }
    gb = l->deliver_gb;
    if (gb >= pr->gbatch0 + pr->p.nbatches) {
        l->epoch_end_pending = 1;
        rc = PS_EPOCH_END;
        goto out;
    }
    a = &l->asmq[gb % (uint64_t)l->depth];
    {
        uint64_t stuck_since = 0;
        while (!l->error && !(a->gb == (int64_t)gb && a->state == ASM_READY)) {
            /* Every buffer there can be is held by the caller: nothing can be
             * filled until one comes back. Another thread may release one
             * (tensors freed elsewhere), so wait a while before calling it a
             * deadlock. */
            int stuck = a->gb != (int64_t)gb && !ps_batch_available(l);
            for (int i = 0; stuck && i < l->depth; i++)
                stuck = l->asmq[i].buf == NULL;
            if (stuck) {
                struct timespec ts;
                if (!stuck_since)
                    stuck_since = ps_now_ns();
                else if (ps_now_ns() - stuck_since > 10ull * 1000000000ull) {
                    fail_locked(l, -EDEADLK, "all %d batch buffers are held by the caller: release batches "
                                "(ps_batch_release) before asking for more", l->nbufs);
                    break;
                }
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1;
                pthread_cond_timedwait(&l->cv_batch, &l->mu, &ts);
                continue;
            }
            stuck_since = 0;
            pthread_cond_wait(&l->cv_batch, &l->mu);
        }
    }
    if (l->error) {
        rc = l->error;
        goto out;
    }
    b = a->buf;
    a->buf = NULL;
    a->state = ASM_IDLE;
    a->gb = -1;
    l->deliver_gb++;
    l->batches++;
    l->samples += b->pub.n;
    l->padded += 0;
    for (uint32_t i = 0; i < b->pub.n; i++)
        l->payload += l->ds->samples[b->ids[i]].len;
    pthread_cond_broadcast(&l->cv_work);
    pthread_mutex_unlock(&l->mu);
    if (l->xfer) {
        void *dev;
        size_t bytes;
        rc = ps_xfer_wait(l->xfer, b->xfer_slot, &dev, &bytes);
        if (rc < 0) {
            ps_batch_release(&b->pub);
            pthread_mutex_lock(&l->mu);
            fail_locked(l, rc, "copy to the GPU failed: %s", ps_strerror(rc));
            goto out;
        }
        b->pub.images = dev;
        b->pub.image_bytes = bytes;
    }
    *out = &b->pub;
    pthread_mutex_lock(&l->mu);
out:
    l->wait_batch_ns += ps_now_ns() - t0;
    pthread_mutex_unlock(&l->mu);
    return rc;
}

int ps_loader_seek(ps_loader *l, uint64_t epoch, uint64_t batch)
{
    int rc;

    if (l->error)
        return l->error;
    stop_threads(l);
    pthread_mutex_lock(&l->mu);
    reset_schedule(l);
    pthread_mutex_unlock(&l->mu);
    rc = start_at(l, epoch, batch);
    if (rc < 0) {
        pthread_mutex_lock(&l->mu);
        if (!l->error)
            l->error = rc;
        pthread_mutex_unlock(&l->mu);
    }
    return rc;
}

void ps_loader_position(const ps_loader *l, uint64_t *epoch, uint64_t *batch)
{
    struct ps_loader *m = (struct ps_loader *)l;
    pthread_mutex_lock(&m->mu);
    if (m->nplans == 0) {
        *epoch = m->o.start_epoch;
        *batch = m->o.start_batch;
    } else if (m->epoch_end_pending || m->deliver_gb >= m->plans[0]->gbatch0 + m->plans[0]->p.nbatches) {
        *epoch = m->plans[0]->epoch + 1;
        *batch = 0;
    } else {
        *epoch = m->plans[0]->epoch;
        *batch = m->deliver_gb - m->plans[0]->gbatch0;
    }
    pthread_mutex_unlock(&m->mu);
}

uint64_t ps_loader_epoch_batches(const ps_loader *l)
{
    return ps_plan_nbatches(&l->sin);
}

const char *ps_loader_errmsg(const ps_loader *l)
{
    return l->err;
}

const char *ps_loader_class_name(const ps_loader *l, int64_t label)
{
    if (!l->ds->classes || label < 0 || (uint64_t)label >= l->ds->nclasses)
        return NULL;
    return l->ds->classes[label];
}

static uint64_t peak_rss(void)
{
    char line[256];
    uint64_t kb = 0;
    FILE *f = fopen("/proc/self/status", "r");
    if (!f)
        return 0;
    while (fgets(line, sizeof line, f))
        if (strncmp(line, "VmHWM:", 6) == 0) {
            kb = strtoull(line + 6, NULL, 10);
            break;
        }
    fclose(f);
    return kb * 1024;
}

void ps_loader_stats(const ps_loader *l, struct ps_stats *s)
{
    struct ps_loader *m = (struct ps_loader *)l;
    struct ps_cache_stats cs;
    struct ps_io_stats is;
    uint64_t wait = 0, cpu = 0, tables;

    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&m->mu);
    ps_cache_stats(m->cache, &cs);
    s->samples = m->samples;
    s->batches = m->batches;
    s->payload_bytes = m->payload;
    s->bytes_read = m->bytes_read;
    s->reads = m->reads;
    s->cache_hits = cs.hits;
    s->cache_misses = cs.misses;
    s->evictions = cs.evictions;
    s->refetches = m->refetches;
    s->decode_errors = m->decode_errors;
    s->padded = m->nplans ? m->plans[0]->p.padded : 0;
    s->wait_batch_s = (double)m->wait_batch_ns / 1e9;
    for (int i = 0; i < m->nworkers; i++) {
        wait += atomic_load(&m->workers[i].wait_ns);
        cpu += atomic_load(&m->workers[i].cpu_ns);
    }
    s->wait_io_s = (double)wait / 1e9;
    s->decode_cpu_s = (double)cpu / 1e9;
    s->mem_arena = ps_cache_arena_bytes(m->cache);
    tables = m->ds->nsamples * (sizeof(struct ps_ds_sample) + m->ds->nfields * sizeof(struct ps_ds_value) +
                                sizeof(uint32_t)) +
             m->ds->npages * (sizeof(struct ps_ds_page) + sizeof(uint64_t)) + ps_cache_table_bytes(m->cache);
    for (int i = 0; i < m->nplans; i++)
        tables += m->plans[i]->p.ntasks * 8 + (m->nunits + 1) * 12;
    s->mem_fixed = m->held_bytes + tables;
    s->nsamples = m->ds->nsamples;
    s->npages = m->ds->npages;
    s->page_size = m->ds->page_size;
    s->cache_slots = ps_cache_nslots(m->cache);
    s->window_pages = m->sample_mode || m->o.order != PS_ORDER_QUASI_RANDOM ? 0 : m->window;
    s->epoch_batches = ps_plan_nbatches(&m->sin);
    s->nclasses = m->ds->nclasses;
    s->unit_mode = m->sample_mode;
    pthread_mutex_unlock(&m->mu);
    ps_io_stats(m->io, &is);
    s->retries = is.retries;
    s->peak_rss = peak_rss();
}

void ps_loader_close(ps_loader *l)
{
    if (!l)
        return;
    stop_threads(l);
    for (int i = 0; i < l->nplans; i++)
        plan_free(l->plans[i]);
    if (l->workers)
        for (int i = 0; i < l->nworkers; i++) {
            ps_decoder_destroy(l->workers[i].dec);
            free(l->workers[i].scratch);
        }
    ps_batches_free(l);
    ps_xfer_destroy(l->xfer);
    free(l->workers);
    free(l->asmq);
    free(l->submitq);
    free(l->unit_fetches);
    ps_cache_destroy(l->cache);
    ps_ds_close(l->ds);
    ps_io_close(l->io);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_work);
    pthread_cond_destroy(&l->cv_ready);
    pthread_cond_destroy(&l->cv_batch);
    pthread_cond_destroy(&l->cv_io);
    free(l->url);
    free(l->endpoint);
    free(l->region);
    free(l->fault);
    free(l);
}
