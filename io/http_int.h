/*
 * http_int.h - the libcurl multi engine of http.c, which s3.c reuses with
 * its own signing, headers and error texts; private to io/. Also the pure
 * parsers of HTTP answers (fuzzed by tests/fuzz_http.c).
 */
#ifndef PS_HTTP_INT_H
#define PS_HTTP_INT_H

#include <stddef.h>
#include <stdint.h>

#include <curl/curl.h>

#include "io/io.h"

/* A failed answer, handed to cfg->describe to phrase the error. */
struct ps_http_resp {
    const char *method;    /* "GET", "HEAD", "PUT", ... */
    long status;
    const char *reason;    /* reason phrase of the status line ("" over HTTP/2) */
    const char *body;      /* start of the body, NUL-terminated (may be cut) */
    size_t body_len;
    const char *region;    /* x-amz-bucket-region header, or "" */
};

struct ps_http_cfg {
    const char *url;       /* what is requested; may carry user:password@ (only curl sees it) */
    const char *name;      /* how messages name the object (never a secret) */
    const char *sigv4;     /* CURLOPT_AWS_SIGV4 provider string, NULL: unsigned */
    const char *user, *pass; /* CURLOPT_USERNAME / CURLOPT_PASSWORD for sigv4 */
    struct curl_slist *headers; /* extra request headers; owned by the caller, outlives the engine */
    int s3;                /* S3 rules: no redirects, the path is sent exactly as given */
    /* Phrase a final non-2xx answer into err (PS_ERRLEN) and return the
     * code; NULL: "NAME: HTTP 404 Not Found". */
    int (*describe)(void *ctx, const struct ps_http_resp *r, char *err);
    /* Remove secrets from a message in place (NULL: nothing to remove). */
    void (*scrub)(void *ctx, char *msg);
    void *ctx;
};

struct ps_http;

/* The engine behind ps_io_http_ops (the priv pointer is the struct ps_http). */
int ps_http_open(const struct ps_http_cfg *c, const struct ps_io_opts *o, struct ps_http **out,
                 uint64_t *size, char *err);
int ps_http_submit(void *h, const struct ps_io_req *reqs, int n);
int ps_http_reap(void *h, struct ps_io_cqe *cqes, int max, int min, int timeout_ms);
void ps_http_wakeup(void *h);
void ps_http_stats(void *h, struct ps_io_stats *s);
const char *ps_http_errmsg(void *h);
void ps_http_close(void *h);

/* One blocking request with retries (S3 multipart calls). *easy is created
 * on first use and kept for its connection; free it with curl_easy_cleanup. */
struct ps_http_call {
    const char *method;    /* "GET", "PUT", "POST", "DELETE", "HEAD" */
    const char *url;
    const void *body;      /* request body (PUT, POST) */
    size_t body_len;
    long status;           /* out */
    char *resp;            /* out: response body, NUL-terminated, cut at resp_cap-1 */
    size_t resp_cap, resp_len;
    char etag[256];        /* out: ETag header as sent (quotes kept) */
};
/** @return 0 on a 2xx answer, else the code of cfg->describe (or -errno) with err set. */
int ps_http_call(const struct ps_http_cfg *c, const struct ps_io_opts *o, CURL **easy,
                 struct ps_http_call *call, char *err);

/* ---- parsers of answer fields (bounded; never read past n) ---- */

/* "bytes FIRST-LAST/TOTAL" (TOTAL may be '*': UINT64_MAX) -> 0; "bytes STAR/TOTAL"
 * (the 416 form) -> 1 with *first = *last = UINT64_MAX; anything else -> -1. */
int ps_http_parse_content_range(const char *v, size_t n, uint64_t *first, uint64_t *last,
                                uint64_t *total);
/* Retry-After: delay-seconds or an HTTP-date (relative to now_s); the delay in
 * ms capped at cap_ms, or -1 when unparsable. */
int64_t ps_http_parse_retry_after(const char *v, size_t n, int64_t now_s, int64_t cap_ms);
/* "HTTP/1.1 206 Partial Content" -> 206 and the reason phrase (printable
 * ASCII only, cut to rcap); -1 if it is not a status line. */
int ps_http_parse_status(const char *line, size_t n, char *reason, size_t rcap);
/* ETag: "\"abc\"" -> 0 (strong), "W/\"abc\"" -> 1 (weak), copied with its quotes
 * into out; -1 when malformed or too long. */
int ps_http_parse_etag(const char *v, size_t n, char *out, size_t cap);
/* The text of the first <tag>...</tag> in an XML document, with the five
 * predefined entities decoded and control characters dropped; -1 if absent. */
int ps_xml_text(const char *xml, size_t n, const char *tag, char *out, size_t cap);

#endif
