/*
 * http.c - http(s):// reads: one libcurl multi handle per ps_io running N
 * range GETs on reused connections, with answer checks, retries, hedging
 * and fault injection per attempt. s3.c runs the same engine (http_int.h).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/http_int.h"
#include "io/io_int.h"

#define BACKOFF_BASE_MS 100
#define BACKOFF_CAP_MS 10000
#define RETRY_AFTER_CAP_MS 30000
#define ERRBODY_MAX 4096
#define NDUR 32

/* ------------------------------------------------------------------ */
/* parsers                                                             */

static int parse_u64(const char **p, const char *end, uint64_t *out)
{
    uint64_t v = 0;
    const char *s = *p;

    if (s >= end || !isdigit((unsigned char)*s))
        return -1;
    for (; s < end && isdigit((unsigned char)*s); s++) {
        uint64_t d = (uint64_t)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return -1;
        v = v * 10 + d;
    }
    *p = s;
    *out = v;
    return 0;
}

static void skip_ws(const char **p, const char *end)
{
    while (*p < end && (**p == ' ' || **p == '\t'))
        (*p)++;
}

int ps_http_parse_content_range(const char *v, size_t n, uint64_t *first, uint64_t *last,
                                uint64_t *total)
{
    const char *p = v, *end = v + n;
    int unsat = 0;

    skip_ws(&p, end);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        end--;
    if (end - p < 6 || strncasecmp(p, "bytes", 5) != 0 || (p[5] != ' ' && p[5] != '\t'))
        return -1;
    p += 5;
    skip_ws(&p, end);
    if (p < end && *p == '*') {
        unsat = 1;
        p++;
        *first = *last = UINT64_MAX;
    } else {
        if (parse_u64(&p, end, first) || p >= end || *p != '-')
            return -1;
        p++;
        if (parse_u64(&p, end, last) || *last < *first)
            return -1;
    }
    if (p >= end || *p != '/')
        return -1;
    p++;
    if (p < end && *p == '*' && !unsat) {
        p++;
        *total = UINT64_MAX;
    } else {
        /* UINT64_MAX stands for '*': a number that large is refused, not confused with it */
        if (parse_u64(&p, end, total) || *total == UINT64_MAX)
            return -1;
        if (!unsat && *last >= *total)
            return -1;
    }
    return p == end ? unsat : -1;
}

int64_t ps_http_parse_retry_after(const char *v, size_t n, int64_t now_s, int64_t cap_ms)
{
    const char *p = v, *end = v + n;
    char date[64];
    uint64_t secs;
    time_t t;

    skip_ws(&p, end);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        end--;
    if (p == end)
        return -1;
    if (isdigit((unsigned char)*p)) {
        const char *q = p;
        if (parse_u64(&q, end, &secs) || q != end)
            return -1;
        if (secs > (uint64_t)cap_ms / 1000)
            return cap_ms;
        return (int64_t)secs * 1000;
    }
    if ((size_t)(end - p) >= sizeof date)
        return -1;
    memcpy(date, p, (size_t)(end - p));
    date[end - p] = 0;
    t = curl_getdate(date, NULL);
    if (t == (time_t)-1)
        return -1;
    if ((int64_t)t <= now_s)
        return 0;
    if ((int64_t)t - now_s > cap_ms / 1000)
        return cap_ms;
    return ((int64_t)t - now_s) * 1000;
}

int ps_http_parse_status(const char *line, size_t n, char *reason, size_t rcap)
{
    const char *p = line, *end = line + n;
    int code = 0;
    size_t r = 0;

    if (rcap)
        reason[0] = 0;
    if (n < 5 || memcmp(p, "HTTP/", 5) != 0)
        return -1;
    p += 5;
    while (p < end && (isdigit((unsigned char)*p) || *p == '.'))
        p++;
    if (p >= end || *p != ' ')
        return -1;
    p++;
    for (int i = 0; i < 3; i++, p++) {
        if (p >= end || !isdigit((unsigned char)*p))
            return -1;
        code = code * 10 + (*p - '0');
    }
    if (p < end && *p != ' ' && *p != '\r' && *p != '\n')
        return -1;
    if (code < 100)
        return -1;
    skip_ws(&p, end);
    while (p < end && *p != '\r' && *p != '\n' && r + 1 < rcap) {
        if ((unsigned char)*p >= 0x20 && (unsigned char)*p < 0x7f)
            reason[r++] = *p;
        p++;
    }
    if (rcap)
        reason[r] = 0;
    return code;
}

int ps_http_parse_etag(const char *v, size_t n, char *out, size_t cap)
{
    const char *p = v, *end = v + n;
    int weak = 0;

    skip_ws(&p, end);
    while (end > p && (end[-1] == ' ' || end[-1] == '\t' || end[-1] == '\r' || end[-1] == '\n'))
        end--;
    if (end - p >= 2 && p[0] == 'W' && p[1] == '/') {
        weak = 1;
        p += 2;
    }
    if (end - p < 2 || *p != '"' || end[-1] != '"')
        return -1;
    for (const char *q = p + 1; q < end - 1; q++)
        if (*q == '"' || (unsigned char)*q < 0x21 || (unsigned char)*q == 0x7f)
            return -1;
    if ((size_t)(end - p) >= cap)
        return -1;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = 0;
    return weak;
}

int ps_xml_text(const char *xml, size_t n, const char *tag, char *out, size_t cap)
{
    char open[80], close[80];
    const char *s, *e, *end = xml + n;
    size_t o = 0;
    int ol, cl;

    if (!cap)
        return -1;
    out[0] = 0;
    ol = snprintf(open, sizeof open, "<%s>", tag);
    cl = snprintf(close, sizeof close, "</%s>", tag);
    if (ol <= 0 || cl <= 0 || (size_t)ol >= sizeof open || (size_t)cl >= sizeof close)
        return -1;
    s = memmem(xml, n, open, (size_t)ol);
    if (!s)
        return -1;
    s += ol;
    e = memmem(s, (size_t)(end - s), close, (size_t)cl);
    if (!e)
        return -1;
    while (s < e && o + 1 < cap) {
        static const struct { const char *ent; char c; } ents[] = {
            { "&lt;", '<' }, { "&gt;", '>' }, { "&amp;", '&' }, { "&quot;", '"' }, { "&apos;", '\'' },
        };
        char c = *s;
        size_t adv = 1;
        if (c == '&') {
            for (size_t i = 0; i < sizeof ents / sizeof ents[0]; i++) {
                size_t el = strlen(ents[i].ent);
                if ((size_t)(e - s) >= el && memcmp(s, ents[i].ent, el) == 0) {
                    c = ents[i].c;
                    adv = el;
                    break;
                }
            }
        }
        s += adv;
        if ((unsigned char)c < 0x20 || c == 0x7f)
            continue;
        out[o++] = c;
    }
    out[o] = 0;
    return 0;
}

/* ------------------------------------------------------------------ */
/* engine state                                                        */

enum { M_UNSET = 0, M_RANGE, M_FULL, M_ERRBODY, M_DISCARD };
enum { STOP_NONE = 0, STOP_DONE, STOP_OVERFLOW, STOP_RANGE, STOP_SIZE, STOP_ETAG,
       STOP_RESET, STOP_SHORT, STOP_TIMEOUT };
enum { R_FREE = 0, R_WAIT, R_RUN };

struct hreq;

struct xfer {
    CURL *e;
    struct ps_http *h;
    struct hreq *rq;        /* NULL for a meta request (HEAD, size probe) */
    int busy, hedge, fault, meta_done;
    CURLcode result;
    /* from the answer's headers */
    long status;
    char reason[64];
    int have_cr;
    uint64_t cr_first, cr_last, cr_total;
    int64_t clen;
    int64_t retry_after_ms;
    char etag[128];
    int etag_weak;
    char region[32];
    /* body */
    int mode, stop;
    uint64_t got;           /* bytes stored (range) or stream position (full body) */
    char body[ERRBODY_MAX];
    size_t blen;
    uint64_t t_start, t_progress, stall_until, win_bytes;
    int paused, stalled;
    char range[48];
    char cerr[CURL_ERROR_SIZE];
};

struct hreq {
    struct ps_io_req r;
    int state, attempts, fault, nx, hedged;
    uint64_t t_first, not_before;
    struct xfer *x[2];
    int code;
    char msg[PS_ERRLEN];
};

struct ps_http {
    struct ps_http_cfg cfg;
    char *url, *name;
    CURLM *m;
    struct curl_slist *resolve;
    struct ps_fault *fault;
    int depth, retries, timeout_ms, deadline_ms, hedge_ms, insecure;
    uint64_t size;
    char etag[128];         /* strong ETag at open ("" none): a changed object is detected */
    struct hreq *rq;
    struct xfer *xs;
    int nxs;
    int outstanding;        /* accepted by submit, not yet returned by reap */
    struct ps_io_cqe *cq;
    int cq_head, cq_n;
    uint64_t rng;
    uint64_t dur[NDUR];
    int ndur, dpos;
    uint64_t median_ns;
    int warned_norange;
    atomic_int woken;
    struct ps_io_stats st;
    char err[PS_ERRLEN];
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static const char *reason_of(long status, const char *given)
{
    if (given && *given)
        return given;
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 410: return "Gone";
    case 416: return "Range Not Satisfiable";
    case 429: return "Too Many Requests";
    case 500: return "Internal Server Error";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    default: return "";
    }
}

static int status_code(long status)
{
    if (status == 404 || status == 410)
        return -ENOENT;
    if (status == 401 || status == 403)
        return PS_EAUTH;
    if (status == 416)
        return PS_ERANGE;
    return PS_EHTTP;
}

static int describe(struct ps_http *h, const char *method, struct xfer *x, char *msg)
{
    struct ps_http_resp r = {
        .method = method, .status = x->status, .reason = reason_of(x->status, x->reason),
        .body = x->body, .body_len = x->blen, .region = x->region,
    };
    int code;

    if (h->cfg.describe)
        code = h->cfg.describe(h->cfg.ctx, &r, msg);
    else
        code = ps_seterr(msg, status_code(x->status), "%s: HTTP %ld %s", h->name, x->status, r.reason);
    if (h->cfg.scrub)
        h->cfg.scrub(h->cfg.ctx, msg);
    return code;
}

static int retryable_status(long s)
{
    return s == 408 || s == 429 || (s >= 500 && s <= 599);
}

/* ------------------------------------------------------------------ */
/* curl callbacks                                                      */

static size_t on_header(char *data, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    const char *colon, *v;
    size_t nl, vl;
    int st;

    x->t_progress = ps_now_ns();
    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        st = ps_http_parse_status(data, n, x->reason, sizeof x->reason);
        /* a new answer (after 100 Continue or a redirect): forget the last one's fields */
        x->status = st;
        x->have_cr = 0;
        x->clen = -1;
        x->retry_after_ms = -1;
        x->etag[0] = 0;
        x->region[0] = 0;
        return n;
    }
    colon = memchr(data, ':', n);
    if (!colon)
        return n;
    nl = (size_t)(colon - data);
    v = colon + 1;
    vl = n - nl - 1;
    if (nl == 13 && strncasecmp(data, "content-range", 13) == 0) {
        int r = ps_http_parse_content_range(v, vl, &x->cr_first, &x->cr_last, &x->cr_total);
        x->have_cr = r == 0 ? 1 : r == 1 ? 2 : 0;
    } else if (nl == 14 && strncasecmp(data, "content-length", 14) == 0) {
        const char *p = v, *end = v + vl;
        uint64_t cl;
        skip_ws(&p, end);
        if (parse_u64(&p, end, &cl) == 0 && cl <= INT64_MAX)
            x->clen = (int64_t)cl;
    } else if (nl == 11 && strncasecmp(data, "retry-after", 11) == 0) {
        x->retry_after_ms = ps_http_parse_retry_after(v, vl, (int64_t)time(NULL), RETRY_AFTER_CAP_MS);
    } else if (nl == 4 && strncasecmp(data, "etag", 4) == 0) {
        int w = ps_http_parse_etag(v, vl, x->etag, sizeof x->etag);
        if (w < 0)
            x->etag[0] = 0;
        x->etag_weak = w == 1;
    } else if (nl == 19 && strncasecmp(data, "x-amz-bucket-region", 19) == 0) {
        size_t o = 0;
        for (const char *p = v; p < v + vl && o + 1 < sizeof x->region; p++)
            if (isalnum((unsigned char)*p) || *p == '-')
                x->region[o++] = *p;
        x->region[o] = 0;
    }
    return n;
}

static void keep_body(struct xfer *x, const char *data, size_t n)
{
    size_t room = sizeof x->body - 1 - x->blen;
    if (n > room)
        n = room;
    memcpy(x->body + x->blen, data, n);
    x->blen += n;
    x->body[x->blen] = 0;
}

/* Decide, at the first byte of a body, what the answer is and whether it
 * may be written into the caller's buffer: nothing is written before the
 * status, Content-Range, size and ETag are checked. */
static int first_bytes(struct xfer *x)
{
    struct ps_http *h = x->h;
    const struct ps_io_req *r = &x->rq->r;

    if (x->status == 206) {
        if (x->have_cr != 1 || x->cr_first != r->offset || x->cr_last != r->offset + r->length - 1) {
            x->stop = STOP_RANGE;
            return -1;
        }
        if (x->cr_total != UINT64_MAX && x->cr_total != h->size) {
            x->stop = STOP_SIZE;
            return -1;
        }
        x->mode = M_RANGE;
    } else if (x->status == 200) {
        /* the server ignored Range and sends the whole object */
        if (x->clen >= 0 && (uint64_t)x->clen != h->size) {
            x->stop = STOP_SIZE;
            return -1;
        }
        if (!h->warned_norange && (r->offset != 0 || r->length != h->size)) {
            h->warned_norange = 1;
            ps_log(PS_LOG_WARN, "%s: the server ignores byte ranges and sends the whole object "
                   "(%" PRIu64 " bytes) for every read; reads discard what precedes each range",
                   h->name, h->size);
        }
        x->mode = M_FULL;
    } else if (x->status >= 200 && x->status < 300) {
        x->mode = M_DISCARD;
        return 0;
    } else {
        x->mode = M_ERRBODY;
        return 0;
    }
    if (h->etag[0] && x->etag[0] && !x->etag_weak && strcmp(h->etag, x->etag) != 0) {
        x->stop = STOP_ETAG;
        return -1;
    }
    return 0;
}

static size_t on_data(char *data, size_t size, size_t nmemb, void *ud)
{
    struct xfer *x = ud;
    size_t n = size * nmemb;
    const struct ps_io_req *r;

    /* progress means at least 1 KiB since the last mark: a stream dripping a
     * byte a second is as stuck as a silent one (same rule as LOW_SPEED_LIMIT) */
    x->win_bytes += n;
    if (x->win_bytes >= 1024) {
        x->win_bytes = 0;
        x->t_progress = ps_now_ns();
    }
    if (!x->rq) {
        /* meta request: keep an error body; a size probe needs no data */
        if (x->status >= 300)
            keep_body(x, data, n);
        else if (x->status == 200) {
            x->stop = STOP_DONE;
            return 0;
        }
        return n;
    }
    r = &x->rq->r;
    if (x->mode == M_UNSET) {
        if (x->fault == PS_FAULT_STALL && !x->stalled && x->status == 206) {
            /* the stream stops: curl keeps this chunk and hands it again after the pause */
            x->paused = x->stalled = 1;
            x->stall_until = ps_now_ns() + (uint64_t)ps_fault_stall_ms(x->h->fault) * 1000000ull;
            return CURL_WRITEFUNC_PAUSE;
        }
        if (first_bytes(x) < 0)
            return 0;
    }
    switch (x->mode) {
    case M_RANGE:
        if (x->got + n > r->length) {
            x->stop = STOP_OVERFLOW;
            return 0;
        }
        if ((x->fault == PS_FAULT_SHORT || x->fault == PS_FAULT_RESET) && x->got + n >= r->length / 2) {
            /* the body stops half way: cut short, or the connection dropped */
            size_t keep = (size_t)(r->length / 2 - x->got);
            memcpy((char *)r->buf + x->got, data, keep);
            x->got += keep;
            x->stop = x->fault == PS_FAULT_SHORT ? STOP_SHORT : STOP_RESET;
            return 0;
        }
        memcpy((char *)r->buf + x->got, data, n);
        x->got += n;
        return n;
    case M_FULL: {
        /* stream position x->got .. x->got+n; keep what overlaps the range */
        uint64_t s = x->got, e = x->got + n, a = r->offset, b = r->offset + r->length;
        uint64_t lo = s > a ? s : a, hi = e < b ? e : b;
        if (hi > lo)
            memcpy((char *)r->buf + (lo - a), data + (lo - s), (size_t)(hi - lo));
        x->got = e;
        if (e >= b) {
            x->stop = STOP_DONE; /* the rest of the stream is not needed */
            return 0;
        }
        return n;
    }
    case M_ERRBODY:
        keep_body(x, data, n);
        return n;
    default:
        return n;
    }
}

/* ------------------------------------------------------------------ */
/* easy handles                                                        */

static struct curl_slist *make_resolve(const char *spec)
{
    struct curl_slist *l = NULL, *t;
    char buf[512];
    const char *p = spec;

    while (p && *p) {
        size_t n = strcspn(p, ",");
        if (n && n < sizeof buf) {
            memcpy(buf, p, n);
            buf[n] = 0;
            t = curl_slist_append(l, buf);
            if (!t) {
                curl_slist_free_all(l);
                return NULL;
            }
            l = t;
        }
        p += n;
        if (*p == ',')
            p++;
    }
    return l;
}

static int setup_common(CURL *e, const struct ps_http_cfg *c, const char *url, struct curl_slist *resolve,
                        int timeout_ms, int insecure, char *cerr)
{
    long lst = timeout_ms >= 1000 ? (timeout_ms + 999) / 1000 : 1;
    int rc = 0;

    /* never CURLOPT_VERBOSE: its trace would show the Authorization header */
    rc |= curl_easy_setopt(e, CURLOPT_VERBOSE, 0L);
    rc |= curl_easy_setopt(e, CURLOPT_URL, url);
    rc |= curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    rc |= curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_2TLS);
    rc |= curl_easy_setopt(e, CURLOPT_TCP_KEEPALIVE, 1L);
    rc |= curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)timeout_ms);
    rc |= curl_easy_setopt(e, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    rc |= curl_easy_setopt(e, CURLOPT_LOW_SPEED_TIME, lst);
    rc |= curl_easy_setopt(e, CURLOPT_USERAGENT, "pagestream/" PS_VERSION_STRING);
    rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, insecure ? 0L : 1L);
    rc |= curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, insecure ? 0L : 2L);
    rc |= curl_easy_setopt(e, CURLOPT_ERRORBUFFER, cerr);
    {
        /* libcurl reads none of these itself (the curl tool does): a private CA */
        const char *ca = getenv("CURL_CA_BUNDLE");
        if (!ca || !*ca)
            ca = getenv("SSL_CERT_FILE");
        if ((!ca || !*ca) && c->s3)
            ca = getenv("AWS_CA_BUNDLE");
        if (ca && *ca)
            rc |= curl_easy_setopt(e, CURLOPT_CAINFO, ca);
    }
    if (c->headers)
        rc |= curl_easy_setopt(e, CURLOPT_HTTPHEADER, c->headers);
    if (resolve)
        rc |= curl_easy_setopt(e, CURLOPT_RESOLVE, resolve);
    if (c->sigv4) {
        rc |= curl_easy_setopt(e, CURLOPT_AWS_SIGV4, c->sigv4);
        /* USERNAME/PASSWORD, not USERPWD: an access key may contain ':' */
        rc |= curl_easy_setopt(e, CURLOPT_USERNAME, c->user);
        rc |= curl_easy_setopt(e, CURLOPT_PASSWORD, c->pass);
    }
    if (c->s3) {
        rc |= curl_easy_setopt(e, CURLOPT_PATH_AS_IS, 1L);
        rc |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    } else {
        rc |= curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 1L);
        rc |= curl_easy_setopt(e, CURLOPT_MAXREDIRS, 5L);
        /* a redirect must not downgrade https to http */
        rc |= curl_easy_setopt(e, CURLOPT_REDIR_PROTOCOLS_STR,
                               strncmp(url, "https:", 6) == 0 ? "https" : "http,https");
    }
    return rc ? -1 : 0;
}

static int xfer_init(struct ps_http *h, struct xfer *x)
{
    x->h = h;
    x->e = curl_easy_init();
    if (!x->e)
        return -1;
    if (setup_common(x->e, &h->cfg, h->url, h->resolve, h->timeout_ms, h->insecure, x->cerr) < 0)
        return -1;
    curl_easy_setopt(x->e, CURLOPT_BUFFERSIZE, 512L * 1024);
    curl_easy_setopt(x->e, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(x->e, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(x->e, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(x->e, CURLOPT_PRIVATE, (char *)x);
    return 0;
}

static void xfer_reset(struct xfer *x)
{
    x->status = 0;
    x->reason[0] = 0;
    x->have_cr = 0;
    x->clen = -1;
    x->retry_after_ms = -1;
    x->etag[0] = 0;
    x->etag_weak = 0;
    x->region[0] = 0;
    x->mode = M_UNSET;
    x->stop = STOP_NONE;
    x->got = 0;
    x->blen = 0;
    x->body[0] = 0;
    x->paused = x->stalled = 0;
    x->win_bytes = 0;
    x->meta_done = 0;
    x->cerr[0] = 0;
    x->t_start = x->t_progress = ps_now_ns();
}

static void xfer_release(struct ps_http *h, struct xfer *x)
{
    struct hreq *rq = x->rq;

    curl_multi_remove_handle(h->m, x->e);
    x->busy = 0;
    if (rq) {
        for (int i = 0; i < rq->nx; i++)
            if (rq->x[i] == x) {
                rq->x[i] = rq->x[--rq->nx];
                break;
            }
        x->rq = NULL;
    }
}

/* ------------------------------------------------------------------ */
/* requests                                                            */

static void push_cqe(struct ps_http *h, uint64_t cookie, int64_t res)
{
    int slot = (h->cq_head + h->cq_n) % h->depth;
    h->cq[slot].cookie = cookie;
    h->cq[slot].res = res;
    h->cq_n++;
}

static void finish(struct ps_http *h, struct hreq *rq, int64_t res)
{
    while (rq->nx)
        xfer_release(h, rq->x[0]);
    h->st.requests++;
    if (res < 0) {
        h->st.errors++;
        snprintf(h->err, sizeof h->err, "%s", rq->msg);
    } else {
        h->st.bytes += (uint64_t)res;
    }
    push_cqe(h, rq->r.cookie, res);
    rq->state = R_FREE;
}

static void schedule(struct ps_http *h, struct hreq *rq, uint64_t delay_ms)
{
    int lat;

    rq->fault = ps_fault_roll(h->fault);
    lat = ps_fault_latency_ms(h->fault);
    rq->state = R_WAIT;
    rq->not_before = ps_now_ns() + (delay_ms + (uint64_t)(lat > 0 ? lat : 0)) * 1000000ull;
}

static void attempt_failed(struct ps_http *h, struct hreq *rq, struct xfer *x, int retryable, int code,
                           int64_t retry_after_ms)
{
    uint64_t now, delay;
    double secs;

    if (x)
        xfer_release(h, x);
    rq->code = code;
    if (h->cfg.scrub)
        h->cfg.scrub(h->cfg.ctx, rq->msg);
    if (rq->nx > 0)
        return; /* its hedge twin is still running */
    if (rq->state != R_RUN && rq->state != R_WAIT)
        return;
    now = ps_now_ns();
    secs = (double)(now - rq->t_first) / 1e9;
    if (!retryable) {
        finish(h, rq, code);
        return;
    }
    if (rq->attempts >= h->retries) {
        size_t l = strlen(rq->msg);
        snprintf(rq->msg + l, sizeof rq->msg - l, " (gave up after %d attempt%s in %.1f s)", rq->attempts,
                 rq->attempts == 1 ? "" : "s", secs);
        finish(h, rq, code);
        return;
    }
    delay = (uint64_t)ps_backoff_ms(rq->attempts, BACKOFF_BASE_MS, BACKOFF_CAP_MS, &h->rng);
    if (retry_after_ms >= 0 && (uint64_t)retry_after_ms > delay)
        delay = (uint64_t)retry_after_ms;
    if (now + delay * 1000000ull > rq->t_first + (uint64_t)h->deadline_ms * 1000000ull) {
        size_t l = strlen(rq->msg);
        snprintf(rq->msg + l, sizeof rq->msg - l, " (gave up after %d attempt%s: deadline of %.1f s)",
                 rq->attempts, rq->attempts == 1 ? "" : "s", h->deadline_ms / 1000.0);
        finish(h, rq, code);
        return;
    }
    h->st.retries++;
    schedule(h, rq, delay);
}

static struct xfer *free_xfer(struct ps_http *h)
{
    for (int i = 0; i < h->nxs; i++)
        if (!h->xs[i].busy && h->xs[i].e)
            return &h->xs[i];
    return NULL;
}

static void start_attempt(struct ps_http *h, struct hreq *rq, int hedge)
{
    int fault = hedge ? ps_fault_roll(h->fault) : rq->fault;
    struct xfer *x;

    if (!hedge)
        rq->attempts++;
    rq->state = R_RUN;
    if (fault == PS_FAULT_ERROR || fault == PS_FAULT_429) {
        /* an injected error answer takes the path a real one takes */
        long st = fault == PS_FAULT_ERROR ? 503 : 429;
        if (hedge)
            return;
        snprintf(rq->msg, sizeof rq->msg, "%s: HTTP %ld %s (injected)", h->name, st, reason_of(st, NULL));
        attempt_failed(h, rq, NULL, 1, PS_EHTTP, st == 429 ? 1000 : -1);
        return;
    }
    x = free_xfer(h);
    if (!x) {
        if (!hedge) { /* cannot happen: 2 transfers per request slot */
            snprintf(rq->msg, sizeof rq->msg, "%s: internal error: no transfer slot", h->name);
            finish(h, rq, -ENOMEM);
        }
        return;
    }
    xfer_reset(x);
    x->rq = rq;
    x->hedge = hedge;
    x->fault = fault;
    x->busy = 1;
    snprintf(x->range, sizeof x->range, "%" PRIu64 "-%" PRIu64, rq->r.offset, rq->r.offset + rq->r.length - 1);
    curl_easy_setopt(x->e, CURLOPT_RANGE, x->range);
    rq->x[rq->nx++] = x;
    if (hedge) {
        rq->hedged = 1;
        h->st.hedges++;
    }
    if (curl_multi_add_handle(h->m, x->e) != CURLM_OK) {
        snprintf(rq->msg, sizeof rq->msg, "%s: curl_multi_add_handle failed", h->name);
        attempt_failed(h, rq, x, 0, -EIO, -1);
    }
}

static void note_duration(struct ps_http *h, uint64_t ns)
{
    uint64_t tmp[NDUR];
    int n;

    h->dur[h->dpos] = ns;
    h->dpos = (h->dpos + 1) % NDUR;
    if (h->ndur < NDUR)
        h->ndur++;
    n = h->ndur;
    memcpy(tmp, h->dur, sizeof tmp);
    /* insertion sort of at most 32 values */
    for (int i = 1; i < n; i++) {
        uint64_t v = tmp[i];
        int j = i - 1;
        while (j >= 0 && tmp[j] > v) {
            tmp[j + 1] = tmp[j];
            j--;
        }
        tmp[j + 1] = v;
    }
    h->median_ns = tmp[n / 2];
}

static int curl_code_to_errno(CURLcode rc, int *retryable)
{
    *retryable = 1;
    switch (rc) {
    case CURLE_OPERATION_TIMEDOUT: return -ETIMEDOUT;
    case CURLE_COULDNT_CONNECT: return -ECONNREFUSED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: return -EHOSTUNREACH;
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR: return -ECONNRESET;
    case CURLE_PARTIAL_FILE: return -EIO;
    default: break;
    }
    *retryable = 0;
    return -EIO;
}

static const char *curl_why(struct xfer *x, CURLcode rc)
{
    return x->cerr[0] ? x->cerr : curl_easy_strerror(rc);
}

/* A transfer that failed below HTTP: message into msg, code returned. */
static int curl_failure(struct ps_http *h, struct xfer *x, CURLcode rc, char *msg, int *retry)
{
    int code = curl_code_to_errno(rc, retry);
    if (rc == CURLE_PEER_FAILED_VERIFICATION || rc == CURLE_SSL_CACERT_BADFILE)
        ps_seterr(msg, code, "%s: TLS certificate verification failed: %s (--insecure skips the check; "
                  "CURL_CA_BUNDLE names a CA file)", h->name, curl_why(x, rc));
    else if (rc == CURLE_SSL_CONNECT_ERROR && strstr(curl_why(x, rc), "wrong version number")) {
        /* a plain-HTTP server on the other end: retrying cannot help */
        *retry = 0;
        ps_seterr(msg, code, "%s: TLS handshake failed (%s): is the server plain HTTP? use http://", h->name,
                  curl_why(x, rc));
    } else if (rc == CURLE_OPERATION_TIMEDOUT && strstr(curl_why(x, rc), "too slow") && x->range[0])
        /* curl's low-speed limit and our own watchdog catch the same stall:
         * say it the same way whichever fires first */
        ps_seterr(msg, code, "%s: no data for %.1f s (range %s)", h->name, h->timeout_ms / 1000.0, x->range);
    else if (rc == CURLE_OPERATION_TIMEDOUT)
        ps_seterr(msg, code, "%s: timed out: %s", h->name, curl_why(x, rc));
    else
        ps_seterr(msg, code, "%s: %s", h->name, curl_why(x, rc));
    return code;
}

static void read_done(struct ps_http *h, struct xfer *x, CURLcode rc)
{
    struct hreq *rq = x->rq;
    const struct ps_io_req *r = &rq->r;
    int retry;
    int code;

    switch (x->stop) {
    case STOP_DONE:
        goto success;
    case STOP_OVERFLOW:
        snprintf(rq->msg, sizeof rq->msg, "%s: server sent more than the %" PRIu64 " bytes asked for (range %s)",
                 h->name, r->length, x->range);
        attempt_failed(h, rq, x, 0, PS_ERANGE, -1);
        return;
    case STOP_RANGE:
        if (x->have_cr == 1)
            snprintf(rq->msg, sizeof rq->msg, "%s: asked for bytes %s, server answered %" PRIu64 "-%" PRIu64,
                     h->name, x->range, x->cr_first, x->cr_last);
        else
            snprintf(rq->msg, sizeof rq->msg, "%s: 206 answer without a valid Content-Range (asked for bytes %s)",
                     h->name, x->range);
        attempt_failed(h, rq, x, 0, PS_ERANGE, -1);
        return;
    case STOP_SIZE:
        snprintf(rq->msg, sizeof rq->msg, "%s: object size changed while reading (now %" PRIu64 " bytes, was %" PRIu64 ")",
                 h->name, x->status == 206 ? x->cr_total : (uint64_t)x->clen, h->size);
        attempt_failed(h, rq, x, 0, PS_ERANGE, -1);
        return;
    case STOP_ETAG:
        snprintf(rq->msg, sizeof rq->msg, "%s: object changed while reading (ETag %s, was %s)", h->name, x->etag,
                 h->etag);
        attempt_failed(h, rq, x, 0, PS_EHTTP, -1);
        return;
    case STOP_RESET:
        snprintf(rq->msg, sizeof rq->msg, "%s: connection reset after %" PRIu64 " of %" PRIu64 " bytes (injected)",
                 h->name, x->got, r->length);
        attempt_failed(h, rq, x, 1, -ECONNRESET, -1);
        return;
    case STOP_SHORT:
        snprintf(rq->msg, sizeof rq->msg, "%s: body ended after %" PRIu64 " of %" PRIu64 " bytes (injected)",
                 h->name, x->got, r->length);
        attempt_failed(h, rq, x, 1, -EIO, -1);
        return;
    case STOP_TIMEOUT:
        snprintf(rq->msg, sizeof rq->msg, "%s: no data for %.1f s (range %s)", h->name, h->timeout_ms / 1000.0,
                 x->range);
        attempt_failed(h, rq, x, 1, -ETIMEDOUT, -1);
        return;
    default:
        break;
    }
    if (rc != CURLE_OK) {
        code = curl_failure(h, x, rc, rq->msg, &retry);
        attempt_failed(h, rq, x, retry, code, -1);
        return;
    }
    if (x->status == 206 || x->status == 200) {
        uint64_t want = x->status == 206 ? r->length : r->offset + r->length;
        if (x->got >= want && (x->status == 200 || x->mode == M_RANGE))
            goto success;
        snprintf(rq->msg, sizeof rq->msg, "%s: body ended after %" PRIu64 " of %" PRIu64 " bytes (range %s)",
                 h->name, x->status == 206 ? x->got : (x->got > r->offset ? x->got - r->offset : 0), r->length,
                 x->range);
        attempt_failed(h, rq, x, 1, -EIO, -1);
        return;
    }
    if (retryable_status(x->status)) {
        code = describe(h, "GET", x, rq->msg);
        attempt_failed(h, rq, x, 1, code, x->retry_after_ms);
        return;
    }
    if (x->status == 416) {
        snprintf(rq->msg, sizeof rq->msg, "%s: HTTP 416: range %s not satisfiable (object is %" PRIu64 " bytes?)",
                 h->name, x->range, h->size);
        attempt_failed(h, rq, x, 0, PS_ERANGE, -1);
        return;
    }
    code = describe(h, "GET", x, rq->msg);
    attempt_failed(h, rq, x, 0, code, -1);
    return;

success:
    note_duration(h, ps_now_ns() - x->t_start);
    if (x->fault == PS_FAULT_CORRUPT)
        ps_fault_corrupt(h->fault, r->buf, (size_t)r->length);
    finish(h, rq, (int64_t)r->length);
}

static void drain(struct ps_http *h)
{
    CURLMsg *msg;
    int left;

    while ((msg = curl_multi_info_read(h->m, &left))) {
        struct xfer *x;
        char *pv = NULL;
        if (msg->msg != CURLMSG_DONE)
            continue;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, &pv);
        x = (struct xfer *)pv;
        if (!x || !x->busy)
            continue;
        if (!x->rq) {
            x->result = msg->data.result;
            x->meta_done = 1;
            curl_multi_remove_handle(h->m, x->e);
            continue;
        }
        read_done(h, x, msg->data.result);
    }
}

/* Timers: backoff ends, stalls end, watchdog, deadline, hedges. Returns the
 * ms until the next one is due. */
static int timers(struct ps_http *h)
{
    uint64_t now = ps_now_ns(), next = now + 1000000000ull;
    uint64_t tmo = (uint64_t)h->timeout_ms * 1000000ull;
    uint64_t hedge_after = 0;
    int running_hedges = 0;

    if (h->hedge_ms > 0) {
        hedge_after = (uint64_t)h->hedge_ms * 1000000ull;
        if (h->ndur >= 8 && 3 * h->median_ns > hedge_after)
            hedge_after = 3 * h->median_ns;
        for (int i = 0; i < h->nxs; i++)
            running_hedges += h->xs[i].busy && h->xs[i].hedge;
    }
    for (int i = 0; i < h->depth; i++) {
        struct hreq *rq = &h->rq[i];
        if (rq->state == R_WAIT && rq->not_before <= now)
            start_attempt(h, rq, 0);
        /* (an injected error answer puts it straight back to waiting) */
        if (rq->state == R_WAIT && rq->not_before < next)
            next = rq->not_before;
        if (rq->state != R_RUN)
            continue;
        if (now > rq->t_first + (uint64_t)h->deadline_ms * 1000000ull && rq->nx) {
            snprintf(rq->msg, sizeof rq->msg, "%s: no answer within the deadline of %.1f s (range %" PRIu64 "+%" PRIu64 ")",
                     h->name, h->deadline_ms / 1000.0, rq->r.offset, rq->r.length);
            finish(h, rq, -ETIMEDOUT);
            continue;
        }
        for (int j = 0; j < rq->nx; j++) {
            struct xfer *x = rq->x[j];
            if (x->paused && now >= x->stall_until) {
                x->paused = 0;
                curl_easy_pause(x->e, CURLPAUSE_CONT);
            } else if (x->paused && x->stall_until < next) {
                next = x->stall_until;
            }
            if (x->t_progress + tmo < now) {
                x->stop = STOP_TIMEOUT;
                read_done(h, x, CURLE_OK);
                break; /* rq->x changed */
            }
            if (x->t_progress + tmo < next)
                next = x->t_progress + tmo;
        }
        if (rq->state == R_RUN && h->hedge_ms > 0 && rq->nx == 1 && !rq->hedged && running_hedges < h->depth) {
            uint64_t due = rq->x[0]->t_start + hedge_after;
            if (now >= due) {
                start_attempt(h, rq, 1);
                running_hedges++;
            } else if (due < next) {
                next = due;
            }
        }
        /* a failure above may have scheduled a retry */
        if (rq->state == R_WAIT && rq->not_before < next)
            next = rq->not_before;
    }
    now = ps_now_ns();
    return next <= now ? 0 : (int)((next - now + 999999) / 1000000);
}

/* ------------------------------------------------------------------ */
/* meta requests (size)                                                */

/* Run one meta transfer to its end, with the watchdog. */
static void meta_run(struct ps_http *h, struct xfer *x)
{
    int running;
    uint64_t tmo = (uint64_t)h->timeout_ms * 1000000ull;

    xfer_reset(x);
    x->busy = 1;
    x->rq = NULL;
    if (curl_multi_add_handle(h->m, x->e) != CURLM_OK) {
        x->result = CURLE_FAILED_INIT;
        x->busy = 0;
        return;
    }
    while (!x->meta_done) {
        curl_multi_perform(h->m, &running);
        drain(h);
        if (x->meta_done)
            break;
        if (x->t_progress + tmo < ps_now_ns()) {
            curl_multi_remove_handle(h->m, x->e);
            x->result = CURLE_OPERATION_TIMEDOUT;
            snprintf(x->cerr, sizeof x->cerr, "no answer for %.1f s", h->timeout_ms / 1000.0);
            break;
        }
        curl_multi_poll(h->m, NULL, 0, 100, NULL);
    }
    x->busy = 0;
}

/* Learn the object's size: HEAD (Content-Length), else a 0-0 range GET
 * (Content-Range total), which also brings the error body a HEAD lacks. */
static int find_size(struct ps_http *h, struct xfer *x, uint64_t *size, char *err)
{
    for (int attempt = 1;; attempt++) {
        int probe, retry = 0, code = 0;
        for (probe = 0; probe < 2; probe++) {
            if (probe) {
                curl_easy_setopt(x->e, CURLOPT_NOBODY, 0L);
                curl_easy_setopt(x->e, CURLOPT_HTTPGET, 1L);
                curl_easy_setopt(x->e, CURLOPT_RANGE, "0-0");
            } else {
                curl_easy_setopt(x->e, CURLOPT_NOBODY, 1L);
            }
            meta_run(h, x);
            if (x->result != CURLE_OK && x->stop != STOP_DONE) {
                code = curl_failure(h, x, x->result, err, &retry);
                break;
            }
            if (!probe && x->status >= 200 && x->status < 300 && x->clen >= 0) {
                *size = (uint64_t)x->clen;
                snprintf(h->etag, sizeof h->etag, "%s", x->etag_weak ? "" : x->etag);
                return 0;
            }
            if (probe && x->status == 206 && x->have_cr == 1 && x->cr_total != UINT64_MAX) {
                *size = x->cr_total;
                snprintf(h->etag, sizeof h->etag, "%s", x->etag_weak ? "" : x->etag);
                return 0;
            }
            if (probe && x->status == 416 && x->have_cr == 2 && x->cr_total != UINT64_MAX) {
                *size = x->cr_total; /* an empty object */
                return 0;
            }
            if (probe && x->status == 200 && x->clen >= 0) {
                *size = (uint64_t)x->clen;
                return 0;
            }
            if (retryable_status(x->status)) {
                retry = 1;
                code = describe(h, probe ? "GET" : "HEAD", x, err);
                break;
            }
            if (probe || (x->status >= 200 && x->status < 300)) {
                if (x->status >= 200 && x->status < 300) {
                    code = ps_seterr(err, PS_EHTTP, "%s: the server gives no size (no Content-Length or Content-Range)",
                                     h->name);
                } else {
                    code = describe(h, "GET", x, err);
                }
                break;
            }
            /* HEAD refused (405, or 403 for a URL signed for GET only, or an S3
             * error whose reason is in a body HEAD cannot carry): probe with GET */
        }
        curl_easy_setopt(x->e, CURLOPT_RANGE, NULL);
        if (h->cfg.scrub)
            h->cfg.scrub(h->cfg.ctx, err);
        if (!retry || attempt >= h->retries) {
            if (retry) {
                size_t l = strlen(err);
                snprintf(err + l, PS_ERRLEN - l, " (gave up after %d attempt%s)", attempt, attempt == 1 ? "" : "s");
            }
            return code ? code : -EIO;
        }
        ps_log(PS_LOG_DEBUG, "%s (retrying)", err);
        {
            struct timespec ts;
            int ms = ps_backoff_ms(attempt, BACKOFF_BASE_MS, BACKOFF_CAP_MS, &h->rng);
            if (x->retry_after_ms > ms)
                ms = (int)x->retry_after_ms;
            ts.tv_sec = ms / 1000;
            ts.tv_nsec = (long)(ms % 1000) * 1000000L;
            nanosleep(&ts, NULL);
        }
        h->st.retries++;
    }
}

/* ------------------------------------------------------------------ */
/* the engine API                                                      */

int ps_http_open(const struct ps_http_cfg *c, const struct ps_io_opts *o, struct ps_http **out,
                 uint64_t *size, char *err)
{
    struct ps_http *h;
    struct xfer meta;
    int rc;

    *out = NULL;
    pthread_once(&curl_once, curl_init_once);
    h = calloc(1, sizeof *h);
    if (!h)
        return ps_seterr(err, -ENOMEM, "out of memory");
    h->cfg = *c;
    h->url = strdup(c->url);
    h->name = strdup(c->name);
    if (!h->url || !h->name) {
        rc = ps_seterr(err, -ENOMEM, "out of memory");
        goto err;
    }
    h->cfg.url = h->url;
    h->cfg.name = h->name;
    h->depth = o->queue_depth > 0 ? o->queue_depth : 8;
    if (h->depth > 256)
        h->depth = 256;
    h->retries = o->retries > 0 ? o->retries : 1;
    h->timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    h->deadline_ms = o->deadline_ms > 0 ? o->deadline_ms : 120000;
    h->hedge_ms = o->hedge_ms > 0 ? o->hedge_ms : 0;
    h->insecure = o->insecure;
    h->rng = ps_now_ns() ^ (uint64_t)(uintptr_t)h;
    if (h->insecure)
        ps_log(PS_LOG_WARN, "%s: TLS certificate verification is off (--insecure)", h->name);
    rc = ps_fault_parse(ps_fault_spec(o), &h->fault, err);
    if (rc < 0)
        goto err;
    if (o->resolve && *o->resolve) {
        h->resolve = make_resolve(o->resolve);
        if (!h->resolve) {
            rc = ps_seterr(err, PS_ECONFIG, "%s: bad resolve entry (want host:port:address)", h->name);
            goto err;
        }
    }
    h->rq = calloc((size_t)h->depth, sizeof *h->rq);
    h->nxs = 2 * h->depth;
    h->xs = calloc((size_t)h->nxs, sizeof *h->xs);
    h->cq = calloc((size_t)h->depth, sizeof *h->cq);
    h->m = curl_multi_init();
    if (!h->rq || !h->xs || !h->cq || !h->m) {
        rc = ps_seterr(err, -ENOMEM, "out of memory");
        goto err;
    }
    curl_multi_setopt(h->m, CURLMOPT_MAX_HOST_CONNECTIONS, (long)(h->hedge_ms ? 2 * h->depth : h->depth));
    curl_multi_setopt(h->m, CURLMOPT_MAXCONNECTS, (long)(2 * h->depth + 2));
    for (int i = 0; i < h->nxs; i++)
        if (xfer_init(h, &h->xs[i]) < 0) {
            rc = ps_seterr(err, -ENOMEM, "%s: cannot set up a libcurl handle", h->name);
            goto err;
        }

    memset(&meta, 0, sizeof meta);
    if (xfer_init(h, &meta) < 0) {
        if (meta.e)
            curl_easy_cleanup(meta.e);
        rc = ps_seterr(err, -ENOMEM, "%s: cannot set up a libcurl handle", h->name);
        goto err;
    }
    rc = find_size(h, &meta, &h->size, err);
    curl_easy_cleanup(meta.e);
    if (rc < 0)
        goto err;
    *size = h->size;
    *out = h;
    return 0;
err:
    ps_http_close(h);
    return rc;
}

int ps_http_submit(void *priv, const struct ps_io_req *reqs, int n)
{
    struct ps_http *h = priv;
    int accepted = 0;

    for (int i = 0; i < n && h->outstanding < h->depth; i++) {
        struct hreq *rq = NULL;
        for (int j = 0; j < h->depth; j++)
            if (h->rq[j].state == R_FREE) {
                rq = &h->rq[j];
                break;
            }
        if (!rq)
            break;
        memset(rq, 0, sizeof *rq);
        rq->r = reqs[i];
        rq->t_first = ps_now_ns();
        h->outstanding++;
        accepted++;
        if (rq->r.length == 0) {
            finish(h, rq, 0);
            continue;
        }
        if (rq->r.offset > h->size || rq->r.length > h->size - rq->r.offset) {
            snprintf(rq->msg, sizeof rq->msg, "%s: read of %" PRIu64 " bytes at %" PRIu64 " is past the end (%" PRIu64 " bytes)",
                     h->name, rq->r.length, rq->r.offset, h->size);
            finish(h, rq, -EINVAL);
            continue;
        }
        schedule(h, rq, 0);
        if (rq->not_before <= ps_now_ns())
            start_attempt(h, rq, 0);
    }
    return accepted;
}

int ps_http_reap(void *priv, struct ps_io_cqe *cqes, int max, int min, int timeout_ms)
{
    struct ps_http *h = priv;
    uint64_t end = timeout_ms >= 0 ? ps_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    int got = 0;

    if (min > h->outstanding)
        min = h->outstanding;
    if (min > max)
        min = max;
    for (;;) {
        int wait, running;
        curl_multi_perform(h->m, &running);
        drain(h);
        wait = timers(h);
        if (h->cq_n >= min || h->cq_n >= max)
            break;
        if (atomic_exchange(&h->woken, 0))
            break;
        if (timeout_ms >= 0) {
            uint64_t now = ps_now_ns();
            if (now >= end)
                break;
            if ((uint64_t)wait * 1000000ull > end - now)
                wait = (int)((end - now + 999999) / 1000000);
        }
        curl_multi_poll(h->m, NULL, 0, wait, NULL);
    }
    while (got < max && h->cq_n) {
        cqes[got++] = h->cq[h->cq_head];
        h->cq_head = (h->cq_head + 1) % h->depth;
        h->cq_n--;
        h->outstanding--;
    }
    return got;
}

void ps_http_wakeup(void *priv)
{
    struct ps_http *h = priv;
    atomic_store(&h->woken, 1);
    curl_multi_wakeup(h->m);
}

void ps_http_stats(void *priv, struct ps_io_stats *s)
{
    struct ps_http *h = priv;
    *s = h->st;
    s->faults = ps_fault_count(h->fault);
}

const char *ps_http_errmsg(void *priv)
{
    struct ps_http *h = priv;
    return h->err;
}

void ps_http_close(void *priv)
{
    struct ps_http *h = priv;

    if (!h)
        return;
    if (h->xs) {
        for (int i = 0; i < h->nxs; i++) {
            if (!h->xs[i].e)
                continue;
            if (h->xs[i].busy && h->m)
                curl_multi_remove_handle(h->m, h->xs[i].e);
            curl_easy_cleanup(h->xs[i].e);
        }
        free(h->xs);
    }
    if (h->m)
        curl_multi_cleanup(h->m);
    curl_slist_free_all(h->resolve);
    ps_fault_free(h->fault);
    free(h->rq);
    free(h->cq);
    free(h->url);
    free(h->name);
    free(h);
}

/* ------------------------------------------------------------------ */
/* blocking calls (S3 multipart)                                       */

struct call_state {
    struct ps_http_call *call;
    size_t sent;
    long status;
    char reason[64];
    char region[32];
    char etag[256];
    int64_t retry_after_ms;
};

static size_t call_read(char *buf, size_t size, size_t nitems, void *ud)
{
    struct call_state *s = ud;
    size_t n = size * nitems, left = s->call->body_len - s->sent;
    if (n > left)
        n = left;
    memcpy(buf, (const char *)s->call->body + s->sent, n);
    s->sent += n;
    return n;
}

static size_t call_write(char *data, size_t size, size_t nmemb, void *ud)
{
    struct call_state *s = ud;
    struct ps_http_call *c = s->call;
    size_t n = size * nmemb, room;

    if (c->resp && c->resp_cap) {
        room = c->resp_cap - 1 - c->resp_len;
        memcpy(c->resp + c->resp_len, data, n < room ? n : room);
        c->resp_len += n < room ? n : room;
        c->resp[c->resp_len] = 0;
    }
    return n;
}

static size_t call_header(char *data, size_t size, size_t nmemb, void *ud)
{
    struct call_state *s = ud;
    size_t n = size * nmemb;

    if (n >= 5 && memcmp(data, "HTTP/", 5) == 0) {
        s->status = ps_http_parse_status(data, n, s->reason, sizeof s->reason);
        s->etag[0] = 0;
        s->region[0] = 0;
        s->retry_after_ms = -1;
    } else if (n > 5 && strncasecmp(data, "etag:", 5) == 0) {
        if (ps_http_parse_etag(data + 5, n - 5, s->etag, sizeof s->etag) < 0)
            s->etag[0] = 0;
    } else if (n > 12 && strncasecmp(data, "retry-after:", 12) == 0) {
        s->retry_after_ms = ps_http_parse_retry_after(data + 12, n - 12, (int64_t)time(NULL), RETRY_AFTER_CAP_MS);
    } else if (n > 20 && strncasecmp(data, "x-amz-bucket-region:", 20) == 0) {
        size_t o = 0;
        for (const char *p = data + 20; p < data + n && o + 1 < sizeof s->region; p++)
            if (isalnum((unsigned char)*p) || *p == '-')
                s->region[o++] = *p;
        s->region[o] = 0;
    }
    return n;
}

int ps_http_call(const struct ps_http_cfg *c, const struct ps_io_opts *o, CURL **easy,
                 struct ps_http_call *call, char *err)
{
    int retries = o->retries > 0 ? o->retries : 1;
    int timeout_ms = o->timeout_ms > 0 ? o->timeout_ms : 30000;
    uint64_t rng = ps_now_ns(), t0 = ps_now_ns();
    uint64_t deadline = t0 + (uint64_t)(o->deadline_ms > 0 ? o->deadline_ms : 120000) * 1000000ull;
    struct curl_slist *resolve = NULL;
    char cerr[CURL_ERROR_SIZE];
    int code = -EIO;

    pthread_once(&curl_once, curl_init_once);
    if (!*easy && !(*easy = curl_easy_init()))
        return ps_seterr(err, -ENOMEM, "out of memory");
    if (o->resolve && *o->resolve && !(resolve = make_resolve(o->resolve)))
        return ps_seterr(err, PS_ECONFIG, "%s: bad resolve entry (want host:port:address)", c->name);
    for (int attempt = 1;; attempt++) {
        struct call_state s = { .call = call, .retry_after_ms = -1 };
        CURLcode rc;
        int retry = 0;

        call->resp_len = 0;
        if (call->resp && call->resp_cap)
            call->resp[0] = 0;
        call->etag[0] = 0;
        cerr[0] = 0;
        curl_easy_reset(*easy);
        if (setup_common(*easy, c, call->url, resolve, timeout_ms, o->insecure, cerr) < 0) {
            code = ps_seterr(err, -EINVAL, "%s: cannot set up a libcurl handle", c->name);
            break;
        }
        curl_easy_setopt(*easy, CURLOPT_WRITEFUNCTION, call_write);
        curl_easy_setopt(*easy, CURLOPT_WRITEDATA, &s);
        curl_easy_setopt(*easy, CURLOPT_HEADERFUNCTION, call_header);
        curl_easy_setopt(*easy, CURLOPT_HEADERDATA, &s);
        if (strcmp(call->method, "PUT") == 0) {
            curl_easy_setopt(*easy, CURLOPT_UPLOAD, 1L);
            curl_easy_setopt(*easy, CURLOPT_READFUNCTION, call_read);
            curl_easy_setopt(*easy, CURLOPT_READDATA, &s);
            curl_easy_setopt(*easy, CURLOPT_INFILESIZE_LARGE, (curl_off_t)call->body_len);
        } else if (strcmp(call->method, "POST") == 0) {
            curl_easy_setopt(*easy, CURLOPT_POST, 1L);
            curl_easy_setopt(*easy, CURLOPT_POSTFIELDS, call->body ? (const char *)call->body : "");
            curl_easy_setopt(*easy, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)call->body_len);
        } else if (strcmp(call->method, "HEAD") == 0) {
            curl_easy_setopt(*easy, CURLOPT_NOBODY, 1L);
        } else if (strcmp(call->method, "GET") != 0) {
            curl_easy_setopt(*easy, CURLOPT_CUSTOMREQUEST, call->method);
        }
        rc = curl_easy_perform(*easy);
        call->status = s.status;
        if (rc != CURLE_OK) {
            code = curl_code_to_errno(rc, &retry);
            ps_seterr(err, code, "%s: %s %s", c->name, call->method, cerr[0] ? cerr : curl_easy_strerror(rc));
        } else if (s.status >= 200 && s.status < 300) {
            snprintf(call->etag, sizeof call->etag, "%s", s.etag);
            code = 0;
            break;
        } else {
            struct ps_http_resp r = {
                .method = call->method, .status = s.status, .reason = reason_of(s.status, s.reason),
                .body = call->resp ? call->resp : "", .body_len = call->resp_len, .region = s.region,
            };
            retry = retryable_status(s.status);
            if (c->describe)
                code = c->describe(c->ctx, &r, err);
            else
                code = ps_seterr(err, status_code(s.status), "%s: %s: HTTP %ld %s", c->name, call->method,
                                 s.status, r.reason);
        }
        if (c->scrub)
            c->scrub(c->ctx, err);
        if (!retry || attempt >= retries || ps_now_ns() > deadline) {
            if (retry) {
                size_t l = strlen(err);
                snprintf(err + l, PS_ERRLEN - l, " (gave up after %d attempt%s)", attempt, attempt == 1 ? "" : "s");
            }
            break;
        }
        {
            int ms = ps_backoff_ms(attempt, BACKOFF_BASE_MS, BACKOFF_CAP_MS, &rng);
            struct timespec ts;
            if (s.retry_after_ms > ms)
                ms = (int)s.retry_after_ms;
            ts.tv_sec = ms / 1000;
            ts.tv_nsec = (long)(ms % 1000) * 1000000L;
            nanosleep(&ts, NULL);
        }
    }
    curl_slist_free_all(resolve);
    return code;
}

/* ------------------------------------------------------------------ */
/* http:// and https://                                                */

static int http_open(const char *url, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err)
{
    struct ps_url u;
    struct ps_http_cfg c;
    char name[512];
    int rc;

    rc = ps_url_parse(url, &u, err);
    if (rc < 0)
        return rc;
    if (strcmp(u.scheme, "http") && strcmp(u.scheme, "https"))
        return ps_seterr(err, PS_ECONFIG, "%s: not an http(s) URL", ps_io_name_static(url));
    ps_url_redact(url, name, sizeof name);
    memset(&c, 0, sizeof c);
    c.url = url;
    c.name = name;
    return ps_http_open(&c, o, (struct ps_http **)priv, size, err);
}

const struct ps_io_ops ps_io_http_ops = {
    .name = "http",
    .open = http_open,
    .submit = ps_http_submit,
    .reap = ps_http_reap,
    .wakeup = ps_http_wakeup,
    .stats = ps_http_stats,
    .errmsg = ps_http_errmsg,
    .close = ps_http_close,
    .max_inflight = 8,
};
