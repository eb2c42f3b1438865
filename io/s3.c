/*
 * s3.c - s3://bucket/key: endpoint, region, addressing, credentials and SigV4
 * (libcurl) over the http.c engine; S3 error bodies turned into clear
 * messages; writing through a multipart upload (pack -o s3://...).
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/creds.h"
#include "io/http_int.h"
#include "io/io_int.h"

#define PART_MIN (8u << 20)
#define MAX_PARTS 10000

struct s3_target {
    char bucket[256];
    char key[2048];
    char endpoint[1024];   /* scheme://host[:port][/prefix], no trailing '/' */
    char region[64];
    int path_style;
    char url[4200];        /* the object's URL (key percent-encoded) */
    char name[1400];       /* "s3://bucket/key (endpoint E)" */
    char sigv4[100];
    struct ps_creds creds;
    struct curl_slist *headers;
    struct ps_http_cfg cfg;
};

/* printable form of a user string for messages */
static void printable(char *dst, size_t n, const char *src, size_t max)
{
    size_t i;
    for (i = 0; src[i] && i + 1 < n && i < max; i++)
        dst[i] = (unsigned char)src[i] < 0x20 || (unsigned char)src[i] >= 0x7f ? '?' : src[i];
    dst[i] = 0;
    if (src[i] && i >= max && i > 3)
        memcpy(dst + i - 3, "...", 3);
}

/* Keep A-Za-z0-9-_.~ (and '/' when keep_slash), %XX the rest: what SigV4 and
 * S3 expect of a key in the path and of a value in the query. */
static int pct_encode(char *dst, size_t n, const char *src, int keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;

    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        if (isalnum(*p) || *p == '-' || *p == '_' || *p == '.' || *p == '~' || (keep_slash && *p == '/')) {
            if (o + 1 >= n)
                return -1;
            dst[o++] = (char)*p;
        } else {
            if (o + 3 >= n)
                return -1;
            dst[o++] = '%';
            dst[o++] = hex[*p >> 4];
            dst[o++] = hex[*p & 15];
        }
    }
    dst[o] = 0;
    return 0;
}

static int is_ip_or_localhost(const char *host)
{
    int dots = 0;
    if (host[0] == '[' || strcmp(host, "localhost") == 0)
        return 1;
    for (const char *p = host; *p; p++) {
        if (*p == '.')
            dots++;
        else if (!isdigit((unsigned char)*p))
            return 0;
    }
    return dots == 3;
}

static int dns_compatible(const char *b, int https)
{
    size_t n = strlen(b);
    if (n < 3 || n > 63 || !isalnum((unsigned char)b[0]) || !isalnum((unsigned char)b[n - 1]))
        return 0;
    for (const char *p = b; *p; p++) {
        if (isupper((unsigned char)*p) || *p == '_')
            return 0;
        /* a dotted bucket name does not match the *.s3 certificate */
        if (*p == '.' && https)
            return 0;
    }
    return 1;
}

static int s3_describe(void *ctx, const struct ps_http_resp *r, char *err);
static void s3_scrub(void *ctx, char *msg)
{
    struct s3_target *t = ctx;
    ps_creds_scrub(&t->creds, msg);
}

static void target_free(struct s3_target *t)
{
    curl_slist_free_all(t->headers);
    t->headers = NULL;
    ps_creds_wipe(&t->creds);
}

static int target_init(struct s3_target *t, const char *url, const struct ps_io_opts *o, char *err)
{
    struct ps_url u, eu;
    const char *ep, *region;
    char enc[3200], host[300], pk[200];
    int custom, rc, https, w;

    memset(t, 0, sizeof *t);
    rc = ps_url_parse(url, &u, err);
    if (rc < 0)
        return rc;
    if (strcmp(u.scheme, "s3") != 0)
        return ps_seterr(err, PS_ECONFIG, "%s: not an s3:// URL", ps_io_name_static(url));
    snprintf(t->bucket, sizeof t->bucket, "%s", u.host);
    snprintf(t->key, sizeof t->key, "%s", u.path);

    region = o->region && *o->region ? o->region : getenv("AWS_REGION");
    if (!region || !*region)
        region = getenv("AWS_DEFAULT_REGION");
    if (!region || !*region)
        region = "us-east-1";
    if (strlen(region) >= sizeof t->region)
        return ps_seterr(err, PS_ECONFIG, "S3 region name too long");
    for (const char *p = region; *p; p++)
        if (!islower((unsigned char)*p) && !isdigit((unsigned char)*p) && *p != '-')
            return ps_seterr(err, PS_ECONFIG, "S3 region \"%.63s\": only a-z, 0-9 and '-' are allowed",
                             region);
    snprintf(t->region, sizeof t->region, "%s", region);

    ep = o->endpoint && *o->endpoint ? o->endpoint : getenv("AWS_ENDPOINT_URL_S3");
    if (!ep || !*ep)
        ep = getenv("AWS_ENDPOINT_URL");
    custom = ep && *ep;
    if (!custom) {
        snprintf(t->endpoint, sizeof t->endpoint, "https://s3.%s.amazonaws.com", t->region);
        ep = t->endpoint;
    }
    rc = ps_url_parse(ep, &eu, err);
    if (rc < 0)
        return rc;
    if (strcmp(eu.scheme, "http") && strcmp(eu.scheme, "https"))
        return ps_seterr(err, PS_ECONFIG, "S3 endpoint %s: must be http:// or https://", ps_io_name_static(ep));
    if (strchr(ep + strlen(eu.scheme) + 3, '@'))
        return ps_seterr(err, PS_ECONFIG, "S3 endpoint %s: credentials do not belong in the endpoint URL",
                         ps_io_name_static(ep));
    if (eu.query[0])
        return ps_seterr(err, PS_ECONFIG, "S3 endpoint %s: no query string allowed", ps_io_name_static(ep));
    https = strcmp(eu.scheme, "https") == 0;
    {
        size_t pl = strlen(eu.path);
        while (pl > 0 && eu.path[pl - 1] == '/')
            eu.path[--pl] = 0;
    }
    if (eu.port)
        snprintf(host, sizeof host, "%s:%d", eu.host, eu.port);
    else
        snprintf(host, sizeof host, "%s", eu.host);
    snprintf(t->endpoint, sizeof t->endpoint, "%s://%s%s", eu.scheme, host, eu.path);

    if (o->addressing == 1)
        t->path_style = 1;
    else if (o->addressing == 2)
        t->path_style = 0;
    else
        t->path_style = custom || is_ip_or_localhost(eu.host) || !dns_compatible(t->bucket, https);
    if (!t->path_style && (is_ip_or_localhost(eu.host) || !dns_compatible(t->bucket, 0)))
        return ps_seterr(err, PS_ECONFIG,
                         "s3://%s: virtual-hosted addressing needs a DNS name as endpoint and a DNS-compatible bucket "
                         "(use path-style addressing)", t->bucket);

    if (pct_encode(enc, sizeof enc, t->key, 1) < 0)
        return ps_seterr(err, PS_ECONFIG, "s3://%s: key too long once encoded", t->bucket);
    if (t->path_style)
        w = snprintf(t->url, sizeof t->url, "%s/%s/%s", t->endpoint, t->bucket, enc);
    else
        w = snprintf(t->url, sizeof t->url, "%s://%s.%s%s/%s", eu.scheme, t->bucket, host, eu.path, enc);
    if (w < 0 || (size_t)w >= sizeof t->url)
        return ps_seterr(err, PS_ECONFIG, "s3://%s: URL too long", t->bucket);
    printable(pk, sizeof pk, t->key, 150);
    snprintf(t->name, sizeof t->name, "s3://%s/%s (endpoint %s)", t->bucket, pk, t->endpoint);

    rc = ps_creds_load(o->profile, &t->creds, err);
    if (rc < 0)
        return rc;
    {
        struct curl_slist *l = curl_slist_append(NULL, "x-amz-content-sha256: UNSIGNED-PAYLOAD");
        if (!l)
            return ps_seterr(err, -ENOMEM, "out of memory");
        t->headers = l;
        if (t->creds.token[0]) {
            char *hdr = malloc(strlen(t->creds.token) + 32);
            if (!hdr)
                return ps_seterr(err, -ENOMEM, "out of memory");
            snprintf(hdr, strlen(t->creds.token) + 32, "x-amz-security-token: %s", t->creds.token);
            l = curl_slist_append(t->headers, hdr);
            explicit_bzero(hdr, strlen(hdr));
            free(hdr);
            if (!l)
                return ps_seterr(err, -ENOMEM, "out of memory");
        }
    }
    snprintf(t->sigv4, sizeof t->sigv4, "aws:amz:%s:s3", t->region);
    t->cfg.url = t->url;
    t->cfg.name = t->name;
    t->cfg.sigv4 = t->creds.anonymous ? NULL : t->sigv4;
    t->cfg.user = t->creds.access_key;
    t->cfg.pass = t->creds.secret;
    t->cfg.headers = t->headers;
    t->cfg.s3 = 1;
    t->cfg.describe = s3_describe;
    t->cfg.scrub = s3_scrub;
    t->cfg.ctx = t;
    return 0;
}

static int s3_describe(void *ctx, const struct ps_http_resp *r, char *err)
{
    struct s3_target *t = ctx;
    char code[64] = "", msg[256] = "", region[64] = "", ep[256] = "", m[300];
    const char *reg;

    if (r->body_len) {
        ps_xml_text(r->body, r->body_len, "Code", code, sizeof code);
        ps_xml_text(r->body, r->body_len, "Message", msg, sizeof msg);
        ps_xml_text(r->body, r->body_len, "Region", region, sizeof region);
        ps_xml_text(r->body, r->body_len, "Endpoint", ep, sizeof ep);
    }
    printable(m, sizeof m, msg, 200);
    reg = region[0] ? region : r->region;
    if (!strcmp(code, "SignatureDoesNotMatch"))
        return ps_seterr(err, PS_EAUTH, "%s: signature mismatch: %s", t->name, t->creds.hint);
    if (!strcmp(code, "InvalidAccessKeyId"))
        return ps_seterr(err, PS_EAUTH, "%s: the access key id is not known to the server (credentials from %s)",
                         t->name, t->creds.source);
    if (!strcmp(code, "InvalidToken") || !strcmp(code, "ExpiredToken") || !strcmp(code, "TokenRefreshRequired"))
        return ps_seterr(err, PS_EAUTH, "%s: session token refused (%s): check AWS_SESSION_TOKEN", t->name, code);
    if (!strcmp(code, "RequestTimeTooSkewed"))
        return ps_seterr(err, PS_EAUTH, "%s: this machine's clock differs from the server's by more than 15 minutes",
                         t->name);
    if (!strcmp(code, "AccessDenied") || (!code[0] && r->status == 403)) {
        if (t->creds.anonymous)
            return ps_seterr(err, PS_EAUTH, "%s: access denied to an anonymous request: %s", t->name,
                             t->creds.hint);
        return ps_seterr(err, PS_EAUTH, "%s: access denied (credentials from %s)", t->name, t->creds.source);
    }
    if (!strcmp(code, "NoSuchKey") || (!code[0] && r->status == 404))
        return ps_seterr(err, -ENOENT, "%s: no such key", t->name);
    if (!strcmp(code, "NoSuchBucket"))
        return ps_seterr(err, -ENOENT, "%s: no such bucket \"%s\"", t->name, t->bucket);
    if (!strcmp(code, "AuthorizationHeaderMalformed") || !strcmp(code, "PermanentRedirect") ||
        !strcmp(code, "IllegalLocationConstraintException") || r->status == 301) {
        if (reg[0])
            return ps_seterr(err, PS_ECONFIG, "%s: wrong region %s: the bucket is in %s (set AWS_REGION=%s)",
                             t->name, t->region, reg, reg);
        return ps_seterr(err, PS_ECONFIG, "%s: wrong region or endpoint (%s%s%s): set AWS_REGION or the endpoint",
                         t->name, code[0] ? code : "HTTP 301", ep[0] ? ", server suggests " : "", ep);
    }
    if (t->creds.anonymous && (r->status == 400 || r->status == 401 || r->status == 403))
        return ps_seterr(err, PS_EAUTH, "%s: a request without credentials was refused (HTTP %ld%s%s): %s", t->name,
                         r->status, code[0] ? " " : "", code, t->creds.hint);
    if (code[0])
        return ps_seterr(err, PS_EHTTP, "%s: %s HTTP %ld %s: %s", t->name, r->method,
                         r->status, code, m);
    return ps_seterr(err, PS_EHTTP, "%s: %s HTTP %ld %s", t->name, r->method, r->status, r->reason);
}

/* ------------------------------------------------------------------ */
/* reading                                                             */

struct s3_reader {
    struct s3_target t;
    struct ps_http *h;
};

static void s3_close(void *priv)
{
    struct s3_reader *s = priv;
    if (!s)
        return;
    ps_http_close(s->h);
    target_free(&s->t);
    free(s);
}

static int s3_open(const char *url, const struct ps_io_opts *o, void **priv, uint64_t *size, char *err)
{
    struct s3_reader *s = calloc(1, sizeof *s);
    int rc;

    *priv = NULL;
    if (!s)
        return ps_seterr(err, -ENOMEM, "out of memory");
    rc = target_init(&s->t, url, o, err);
    if (rc == 0)
        rc = ps_http_open(&s->t.cfg, o, &s->h, size, err);
    if (rc < 0) {
        s3_close(s);
        return rc;
    }
    *priv = s;
    return 0;
}

static int s3_submit(void *priv, const struct ps_io_req *reqs, int n)
{
    return ps_http_submit(((struct s3_reader *)priv)->h, reqs, n);
}

static int s3_reap(void *priv, struct ps_io_cqe *cqes, int max, int min, int timeout_ms)
{
    return ps_http_reap(((struct s3_reader *)priv)->h, cqes, max, min, timeout_ms);
}

static void s3_wakeup(void *priv) { ps_http_wakeup(((struct s3_reader *)priv)->h); }
static void s3_stats(void *priv, struct ps_io_stats *st) { ps_http_stats(((struct s3_reader *)priv)->h, st); }
static const char *s3_errmsg(void *priv) { return ps_http_errmsg(((struct s3_reader *)priv)->h); }

const struct ps_io_ops ps_io_s3_ops = {
    .name = "s3",
    .open = s3_open,
    .submit = s3_submit,
    .reap = s3_reap,
    .wakeup = s3_wakeup,
    .stats = s3_stats,
    .errmsg = s3_errmsg,
    .close = s3_close,
    .max_inflight = 8,
};

/* ------------------------------------------------------------------ */
/* writing: multipart upload                                           */

struct s3_writer {
    struct s3_target t;
    struct ps_io_opts o;
    char *resolve;
    CURL *easy;
    char upload_id[512];     /* percent-encoded for the query */
    char *part;
    size_t part_len, part_cap;
    int nparts;
    char (*etags)[130];
    int failed, done;
    volatile sig_atomic_t in_call;
    char err[PS_ERRLEN];
};

/* url + "?" + query (already canonical: sorted keys, encoded values) */
static int call(struct s3_writer *w, const char *method, const char *query, const void *body, size_t len,
                char *resp, size_t resp_cap, char *etag_out)
{
    char url[4800];
    struct ps_http_call c = { .method = method, .url = url, .body = body, .body_len = len,
                              .resp = resp, .resp_cap = resp_cap };
    int rc;

    snprintf(url, sizeof url, "%s?%s", w->t.url, query);
    if (w->in_call) {
        /* abort from a signal handler that interrupted a call: the handle in
         * use cannot be entered again, so the abort gets one of its own */
        CURL *e = NULL;
        rc = ps_http_call(&w->t.cfg, &w->o, &e, &c, w->err);
        if (e)
            curl_easy_cleanup(e);
    } else {
        w->in_call = 1;
        rc = ps_http_call(&w->t.cfg, &w->o, &w->easy, &c, w->err);
        w->in_call = 0;
    }
    if (rc == 0 && etag_out)
        snprintf(etag_out, 130, "%.129s", c.etag);
    return rc;
}

static int upload_part(struct s3_writer *w)
{
    char q[700], etag[130];
    int rc;

    if (w->nparts >= MAX_PARTS)
        return ps_seterr(w->err, -EFBIG, "%s: more than %d parts: object too large", w->t.name, MAX_PARTS);
    snprintf(q, sizeof q, "partNumber=%d&uploadId=%s", w->nparts + 1, w->upload_id);
    rc = call(w, "PUT", q, w->part, w->part_len, NULL, 0, etag);
    if (rc < 0)
        return rc;
    if (!etag[0])
        return ps_seterr(w->err, PS_EHTTP, "%s: part %d uploaded but the answer has no ETag", w->t.name,
                         w->nparts + 1);
    memcpy(w->etags[w->nparts], etag, sizeof etag);
    w->nparts++;
    w->part_len = 0;
    /* parts grow by 8 MiB every 1000 so that 10000 parts reach 440 GB */
    if ((size_t)PART_MIN * (size_t)(1 + w->nparts / 1000) > w->part_cap) {
        size_t cap = (size_t)PART_MIN * (size_t)(1 + w->nparts / 1000);
        char *p = realloc(w->part, cap);
        if (!p)
            return ps_seterr(w->err, -ENOMEM, "out of memory");
        w->part = p;
        w->part_cap = cap;
    }
    return 0;
}

static void s3w_release(void *priv)
{
    struct s3_writer *w = priv;
    if (!w)
        return;
    if (w->easy)
        curl_easy_cleanup(w->easy);
    target_free(&w->t);
    free(w->resolve);
    free(w->part);
    free(w->etags);
    free(w);
}

static int s3w_open(const char *url, const struct ps_io_opts *o, void **priv, char *err)
{
    struct s3_writer *w = calloc(1, sizeof *w);
    char resp[4096], id[400];
    int rc;

    *priv = NULL;
    if (!w)
        return ps_seterr(err, -ENOMEM, "out of memory");
    rc = target_init(&w->t, url, o, err);
    if (rc < 0)
        goto fail;
    w->o = *o;
    /* only the fields ps_http_call reads; the strings it keeps are ours */
    w->o.endpoint = w->o.region = w->o.profile = w->o.fault = NULL;
    if (o->resolve && !(w->o.resolve = w->resolve = strdup(o->resolve))) {
        rc = ps_seterr(err, -ENOMEM, "out of memory");
        goto fail;
    }
    w->part_cap = PART_MIN;
    w->part = malloc(w->part_cap);
    w->etags = calloc(MAX_PARTS, sizeof *w->etags);
    if (!w->part || !w->etags) {
        rc = ps_seterr(err, -ENOMEM, "out of memory");
        goto fail;
    }
    rc = call(w, "POST", "uploads=", "", 0, resp, sizeof resp, NULL);
    if (rc < 0) {
        snprintf(err, PS_ERRLEN, "%s", w->err);
        goto fail;
    }
    if (ps_xml_text(resp, strlen(resp), "UploadId", id, sizeof id) < 0 || !id[0] ||
        pct_encode(w->upload_id, sizeof w->upload_id, id, 0) < 0) {
        rc = ps_seterr(err, PS_EHTTP, "%s: CreateMultipartUpload answer has no usable UploadId", w->t.name);
        goto fail;
    }
    *priv = w;
    return 0;
fail:
    s3w_release(w);
    return rc;
}

static int s3w_write(void *priv, const void *buf, size_t len)
{
    struct s3_writer *w = priv;
    const char *p = buf;

    if (w->failed)
        return w->failed;
    while (len) {
        size_t n = w->part_cap - w->part_len;
        if (n > len)
            n = len;
        memcpy(w->part + w->part_len, p, n);
        w->part_len += n;
        p += n;
        len -= n;
        if (w->part_len == w->part_cap) {
            int rc = upload_part(w);
            if (rc < 0)
                return w->failed = rc;
        }
    }
    return 0;
}

static void s3w_abort(void *priv)
{
    struct s3_writer *w = priv;
    char q[600], saved[PS_ERRLEN];

    if (w->done || !w->upload_id[0])
        return;
    w->done = 1;
    memcpy(saved, w->err, sizeof saved);
    snprintf(q, sizeof q, "uploadId=%s", w->upload_id);
    if (call(w, "DELETE", q, NULL, 0, NULL, 0, NULL) < 0)
        ps_log(PS_LOG_WARN, "could not abort the multipart upload: %s (parts may stay billed until a "
               "lifecycle rule removes them)", w->err);
    memcpy(w->err, saved, sizeof saved);
}

static int s3w_commit(void *priv)
{
    struct s3_writer *w = priv;
    char q[600], resp[4096];
    char *xml;
    size_t cap, o = 0;
    int rc;

    if (w->failed)
        return w->failed;
    if (w->part_len || w->nparts == 0) {
        rc = upload_part(w);
        if (rc < 0) {
            w->failed = rc;
            s3w_abort(w);
            return rc;
        }
    }
    cap = 64 + (size_t)w->nparts * 200;
    xml = malloc(cap);
    if (!xml)
        return w->failed = ps_seterr(w->err, -ENOMEM, "out of memory");
    o += (size_t)snprintf(xml + o, cap - o, "<CompleteMultipartUpload>");
    for (int i = 0; i < w->nparts; i++) {
        /* ETags are quoted printable text without '"' (ps_http_parse_etag); escape the rest */
        o += (size_t)snprintf(xml + o, cap - o, "<Part><PartNumber>%d</PartNumber><ETag>", i + 1);
        for (const char *e = w->etags[i]; *e && o + 8 < cap; e++) {
            if (*e == '&')
                o += (size_t)snprintf(xml + o, cap - o, "&amp;");
            else if (*e == '<')
                o += (size_t)snprintf(xml + o, cap - o, "&lt;");
            else if (*e == '"')
                o += (size_t)snprintf(xml + o, cap - o, "&quot;");
            else
                xml[o++] = *e;
        }
        o += (size_t)snprintf(xml + o, cap - o, "</ETag></Part>");
    }
    o += (size_t)snprintf(xml + o, cap - o, "</CompleteMultipartUpload>");
    snprintf(q, sizeof q, "uploadId=%s", w->upload_id);
    rc = call(w, "POST", q, xml, o, resp, sizeof resp, NULL);
    free(xml);
    if (rc == 0 && strstr(resp, "<Error>")) {
        /* S3 may answer 200 and still fail the completion in the body */
        char code[64] = "", msg[200] = "";
        ps_xml_text(resp, strlen(resp), "Code", code, sizeof code);
        ps_xml_text(resp, strlen(resp), "Message", msg, sizeof msg);
        printable(msg, sizeof msg, msg, 150);
        rc = ps_seterr(w->err, PS_EHTTP, "%s: CompleteMultipartUpload failed: %s %s", w->t.name, code, msg);
    }
    if (rc < 0) {
        /* io.c counts a failed commit as finished: abort here so no parts stay behind */
        w->failed = rc;
        s3w_abort(w);
        return rc;
    }
    w->done = 1;
    return 0;
}

static const char *s3w_errmsg(void *priv)
{
    struct s3_writer *w = priv;
    return w->err;
}

const struct ps_out_ops ps_out_s3_ops = {
    .name = "s3",
    .open = s3w_open,
    .write = s3w_write,
    .commit = s3w_commit,
    .abort = s3w_abort,
    .errmsg = s3w_errmsg,
    .release = s3w_release,
};
