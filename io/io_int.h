/*
 * io_int.h - what the backends of io/ share; not seen outside io/.
 */
#ifndef PS_IO_INT_H
#define PS_IO_INT_H

#include <stddef.h>
#include <stdint.h>

#include "io/io.h"

/* Copy url to out without credentials: user:password@ and query-string
 * signatures (X-Amz-*) are replaced by "***". */
void ps_url_redact(const char *url, char *out, size_t n);
/* ps_url_redact into a thread-local buffer, for one message. */
const char *ps_io_name_static(const char *url);

/* A parsed URL (http, https, s3, nfs). */
struct ps_url {
    char scheme[8];        /* "http", "https", "s3", "nfs" */
    char host[256];        /* host, or bucket for s3 */
    int port;              /* 0: scheme default */
    char path[2048];       /* for s3 the key (no leading '/'); else starts with '/' */
    char query[1024];      /* after '?', without it */
};
/* Parse and validate; PS_ECONFIG / -EINVAL with a message naming the URL (redacted). */
int ps_url_parse(const char *url, struct ps_url *u, char *err);

/* fault.c: fault injection at the level of one attempt of one request.
 * Every backend parses opts->fault (or $PAGESTREAM_FAULT) with
 * ps_fault_parse and, per attempt, asks ps_fault_roll what to inject, then
 * makes that fault happen as the real thing would (an HTTP backend treats
 * PS_FAULT_ERROR as a 503 answer, PS_FAULT_RESET as a dropped connection,
 * PS_FAULT_SHORT as a body cut short, PS_FAULT_STALL as a stream that stops
 * sending; a local backend as -EIO, a short read, a slow read), so that the
 * retry paths that run are the real ones. PS_FAULT_CORRUPT flips a byte of
 * the delivered data: only checksums above io/ can catch it.
 * Spec: "seed=1,error=0.05,http429=0.01,reset=0.01,short=0.01,corrupt=0.01,
 *        stall=0.001,stall_ms=5000,latency_ms=0" (probabilities per attempt). */
enum ps_fault_kind {
    PS_FAULT_NONE = 0, PS_FAULT_ERROR, PS_FAULT_429, PS_FAULT_RESET,
    PS_FAULT_SHORT, PS_FAULT_CORRUPT, PS_FAULT_STALL
};
struct ps_fault;
/* NULL or "" spec: *out = NULL (no faults), returns 0. */
int ps_fault_parse(const char *spec, struct ps_fault **out, char *err);
/* Thread-safe. The fault for the next attempt (NONE when f is NULL). */
int ps_fault_roll(struct ps_fault *f);
int ps_fault_stall_ms(const struct ps_fault *f);
int ps_fault_latency_ms(const struct ps_fault *f);
/* Flip one byte of buf (position from the fault RNG). */
void ps_fault_corrupt(struct ps_fault *f, void *buf, size_t len);
uint64_t ps_fault_count(const struct ps_fault *f);
void ps_fault_free(struct ps_fault *f);
/* The spec in effect: opts->fault if set, else $PAGESTREAM_FAULT. */
const char *ps_fault_spec(const struct ps_io_opts *o);

/* Retry delays: exponential backoff with full jitter, capped. attempt >= 1. */
int ps_backoff_ms(int attempt, int base_ms, int cap_ms, uint64_t *rng);

#endif
