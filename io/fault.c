/*
 * fault.c - fault injection per attempt of a read: parses the spec
 * ("seed=1,error=0.05,short=0.01,...") and rolls a thread-safe RNG.
 */
#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "io/io_int.h"

struct ps_fault {
    /* cumulative thresholds, one per kind, so one draw picks at most one fault */
    double p[PS_FAULT_STALL + 1];
    int stall_ms;
    int latency_ms;
    _Atomic uint64_t state;   /* splitmix64 counter: fetch_add makes draws thread-safe */
    _Atomic uint64_t count;
};

static const struct {
    const char *key;
    int kind;
} prob_keys[] = {
    { "error", PS_FAULT_ERROR },   { "http429", PS_FAULT_429 },     { "reset", PS_FAULT_RESET },
    { "short", PS_FAULT_SHORT },   { "corrupt", PS_FAULT_CORRUPT }, { "stall", PS_FAULT_STALL },
};

#define MAX_DELAY_MS 3600000

static uint64_t next_u64(struct ps_fault *f)
{
    uint64_t z = atomic_fetch_add_explicit(&f->state, 0x9e3779b97f4a7c15ull, memory_order_relaxed);
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int parse_number(const char *v, double *out)
{
    char *end;
    if (!*v)
        return -1;
    errno = 0;
    *out = strtod(v, &end);
    if (errno || *end || end == v || *out != *out)
        return -1;
    return 0;
}

int ps_fault_parse(const char *spec, struct ps_fault **out, char *err)
{
    struct ps_fault *f;
    double prob[PS_FAULT_STALL + 1] = { 0 };
    double sum = 0;
    char *copy, *item, *next;
    int rc = 0;

    *out = NULL;
    if (!spec || !*spec)
        return 0;
    f = calloc(1, sizeof *f);
    copy = strdup(spec);
    if (!f || !copy) {
        free(f);
        free(copy);
        return ps_seterr(err, -ENOMEM, "out of memory");
    }
    atomic_init(&f->state, 1);
    atomic_init(&f->count, 0);
    f->stall_ms = 5000;
    for (item = copy; item; item = next) {
        char *eq, *key = item, *val;
        double v;
        size_t i;
        int known = 0;

        next = strchr(item, ',');
        if (next)
            *next++ = 0;
        while (*key == ' ' || *key == '\t')
            key++;
        if (!*key)
            continue; /* "a=1,,b=2" or a trailing comma */
        eq = strchr(key, '=');
        if (!eq) {
            rc = ps_seterr(err, PS_ECONFIG, "fault spec: \"%s\" is not key=value", key);
            goto err;
        }
        *eq = 0;
        val = eq + 1;
        for (char *t = eq - 1; t >= key && (*t == ' ' || *t == '\t'); t--)
            *t = 0;
        while (*val == ' ' || *val == '\t')
            val++;
        for (char *t = val + strlen(val); t > val && (t[-1] == ' ' || t[-1] == '\t'); t--)
            t[-1] = 0;

        if (strcasecmp(key, "seed") == 0) {
            char *end;
            unsigned long long s;
            errno = 0;
            s = strtoull(val, &end, 0);
            if (errno || !*val || *end || *val == '-') {
                rc = ps_seterr(err, PS_ECONFIG, "fault spec: seed=%s is not an unsigned integer", val);
                goto err;
            }
            atomic_store(&f->state, (uint64_t)s);
            continue;
        }
        if (strcasecmp(key, "stall_ms") == 0 || strcasecmp(key, "latency_ms") == 0) {
            if (parse_number(val, &v) < 0 || v < 0 || v > MAX_DELAY_MS || v != (double)(int)v) {
                rc = ps_seterr(err, PS_ECONFIG, "fault spec: %s=%s must be a whole number of ms in [0, %d]",
                               key, val, MAX_DELAY_MS);
                goto err;
            }
            if (strcasecmp(key, "stall_ms") == 0)
                f->stall_ms = (int)v;
            else
                f->latency_ms = (int)v;
            continue;
        }
        for (i = 0; i < sizeof prob_keys / sizeof prob_keys[0]; i++) {
            if (strcasecmp(key, prob_keys[i].key) != 0)
                continue;
            known = 1;
            if (parse_number(val, &v) < 0 || v < 0 || v > 1) {
                rc = ps_seterr(err, PS_ECONFIG, "fault spec: %s=%s is not a probability in [0, 1]", key, val);
                goto err;
            }
            prob[prob_keys[i].kind] = v;
        }
        if (!known) {
            rc = ps_seterr(err, PS_ECONFIG,
                           "fault spec: unknown key \"%s\" (known: seed, error, http429, reset, short, corrupt, "
                           "stall, stall_ms, latency_ms)", key);
            goto err;
        }
    }
    for (int k = PS_FAULT_ERROR; k <= PS_FAULT_STALL; k++) {
        sum += prob[k];
        f->p[k] = sum;
    }
    if (sum > 1.0 + 1e-9) {
        rc = ps_seterr(err, PS_ECONFIG, "fault spec: the probabilities add up to %.3g, more than 1", sum);
        goto err;
    }
    free(copy);
    *out = f;
    return 0;
err:
    free(copy);
    free(f);
    return rc;
}

int ps_fault_roll(struct ps_fault *f)
{
    double u;

    if (!f)
        return PS_FAULT_NONE;
    u = (double)(next_u64(f) >> 11) * (1.0 / 9007199254740992.0);
    for (int k = PS_FAULT_ERROR; k <= PS_FAULT_STALL; k++)
        if (u < f->p[k]) {
            atomic_fetch_add_explicit(&f->count, 1, memory_order_relaxed);
            return k;
        }
    return PS_FAULT_NONE;
}

int ps_fault_stall_ms(const struct ps_fault *f) { return f ? f->stall_ms : 0; }
int ps_fault_latency_ms(const struct ps_fault *f) { return f ? f->latency_ms : 0; }

void ps_fault_corrupt(struct ps_fault *f, void *buf, size_t len)
{
    uint64_t r;

    if (!f || !buf || !len)
        return;
    r = next_u64(f);
    /* xor with a non-zero value, so the byte always changes */
    ((unsigned char *)buf)[r % len] ^= (unsigned char)(1 + (r >> 56) % 255);
}

uint64_t ps_fault_count(const struct ps_fault *f)
{
    return f ? atomic_load_explicit(&((struct ps_fault *)f)->count, memory_order_relaxed) : 0;
}

void ps_fault_free(struct ps_fault *f) { free(f); }

const char *ps_fault_spec(const struct ps_io_opts *o)
{
    if (o && o->fault)
        return o->fault;
    return getenv("PAGESTREAM_FAULT");
}
