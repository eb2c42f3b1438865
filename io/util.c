/*
 * util.c - small things every layer uses: error text, logging, clocks,
 * size parsing, the cgroup memory limit, URL redaction.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "io/io.h"
#include "io/io_int.h"

const char *ps_strerror(int code)
{
    switch (code) {
    case 0: return "success";
    case PS_EFORMAT: return "malformed dataset file";
    case PS_ECHECKSUM: return "checksum mismatch";
    case PS_EHTTP: return "unexpected HTTP response";
    case PS_EAUTH: return "credentials refused";
    case PS_ECONFIG: return "invalid configuration";
    case PS_EDECODE: return "image could not be decoded";
    case PS_EUNSUP: return "not supported";
    case PS_EVERSION: return "unsupported file version";
    case PS_ESTOPPED: return "loader stopped";
    case PS_ENOGPU: return "no usable GPU";
    case PS_ERANGE: return "server did not honour the byte range";
    default: break;
    }
    if (code < 0 && code > -4096)
        return strerror(-code);
    return "unknown error";
}

static int log_level = -1;

void ps_log_set_level(int level) { log_level = level; }

void ps_log(int level, const char *fmt, ...)
{
    static const char *names[] = { "error", "warning", "notice", "debug" };
    va_list ap;
    char line[1024];

    if (log_level < 0) {
        const char *e = getenv("PAGESTREAM_LOG");
        log_level = e && *e ? atoi(e) : PS_LOG_NOTICE;
    }
    if (level > log_level || level < 0 || level > PS_LOG_DEBUG)
        return;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    /* one write so lines from threads do not interleave */
    fprintf(stderr, "pagestream: %s: %s\n", names[level], line);
}

uint64_t ps_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int ps_seterr(char *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, PS_ERRLEN, fmt, ap);
        va_end(ap);
    }
    return code;
}

int ps_parse_size(const char *s, uint64_t *out)
{
    char *end;
    double v;
    uint64_t mult = 1;

    if (!s)
        return PS_ECONFIG;
    while (isspace((unsigned char)*s))
        s++;
    if (!isdigit((unsigned char)*s) && *s != '.')
        return PS_ECONFIG;
    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || !isfinite(v) || v < 0)
        return PS_ECONFIG;
    switch (toupper((unsigned char)*end)) {
    case 0: break;
    case 'B': end--; break;
    case 'K': mult = 1ull << 10; break;
    case 'M': mult = 1ull << 20; break;
    case 'G': mult = 1ull << 30; break;
    case 'T': mult = 1ull << 40; break;
    default: return PS_ECONFIG;
    }
    if (*end) {
        end++;
        if (toupper((unsigned char)*end) == 'I')
            end++;
        if (toupper((unsigned char)*end) == 'B')
            end++;
        if (*end)
            return PS_ECONFIG;
    }
    v *= (double)mult;
    if (v >= 18446744073709551615.0)
        return PS_ECONFIG;
    *out = (uint64_t)v;
    return 0;
}

static uint64_t read_u64_file(const char *path)
{
    char buf[64];
    FILE *f = fopen(path, "r");
    uint64_t v = 0;

    if (!f)
        return 0;
    if (fgets(buf, sizeof buf, f) && isdigit((unsigned char)buf[0]))
        v = strtoull(buf, NULL, 10);
    fclose(f);
    return v;
}

uint64_t ps_cgroup_memory_limit(void)
{
    char line[512], path[600];
    FILE *f = fopen("/proc/self/cgroup", "r");
    uint64_t limit = 0, v;

    if (!f)
        return 0;
    while (fgets(line, sizeof line, f)) {
        char *nl = strchr(line, '\n'), *p;
        if (nl)
            *nl = 0;
        /* v1: "N:memory:/path"; v2: "0::/path" */
        if ((p = strstr(line, ":memory:"))) {
            snprintf(path, sizeof path, "/sys/fs/cgroup/memory%s/memory.limit_in_bytes", p + 8);
            v = read_u64_file(path);
            /* v1 reports "no limit" as a huge page-rounded number */
            if (v && v < (1ull << 60) && (!limit || v < limit))
                limit = v;
        } else if (strncmp(line, "0::", 3) == 0) {
            snprintf(path, sizeof path, "/sys/fs/cgroup%s/memory.max", line + 3);
            v = read_u64_file(path); /* "max" reads as 0 */
            if (v && (!limit || v < limit))
                limit = v;
        }
    }
    fclose(f);
    if (!limit) {
        /* in a container without its own cgroup namespace view the paths
         * above may not exist: the container's limit is then at the root */
        v = read_u64_file("/sys/fs/cgroup/memory.max");
        if (!v)
            v = read_u64_file("/sys/fs/cgroup/memory/memory.limit_in_bytes");
        if (v && v < (1ull << 60))
            limit = v;
    }
    return limit;
}

void ps_url_redact(const char *url, char *out, size_t n)
{
    const char *scheme_end, *at, *slash, *q;
    size_t len;

    if (!n)
        return;
    out[0] = 0;
    if (!url)
        return;
    scheme_end = strstr(url, "://");
    if (!scheme_end) {
        snprintf(out, n, "%s", url);
        return;
    }
    slash = strchr(scheme_end + 3, '/');
    at = strchr(scheme_end + 3, '@');
    if (at && (!slash || at < slash)) {
        /* "scheme://user:pass@host" becomes "scheme://" "***" "@host" */
        snprintf(out, n, "%.*s***%s", (int)(scheme_end + 3 - url), url, at);
    } else {
        snprintf(out, n, "%s", url);
    }
    /* presigned URLs carry their signature in the query string */
    q = strchr(out, '?');
    if (q && (strstr(q, "X-Amz-") || strstr(q, "Signature=") || strstr(q, "token"))) {
        len = (size_t)(q - out);
        snprintf(out + len, n - len, "?***");
    }
}

const char *ps_io_name_static(const char *url)
{
    static __thread char buf[512];
    ps_url_redact(url, buf, sizeof buf);
    return buf;
}

int ps_backoff_ms(int attempt, int base_ms, int cap_ms, uint64_t *rng)
{
    uint64_t x, ceil_ms;

    if (attempt < 1)
        attempt = 1;
    ceil_ms = (uint64_t)base_ms << (attempt - 1 > 20 ? 20 : attempt - 1);
    if (ceil_ms > (uint64_t)cap_ms)
        ceil_ms = (uint64_t)cap_ms;
    /* xorshift64*: full jitter in [0, ceil] */
    x = *rng ? *rng : 0x9e3779b97f4a7c15ull;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *rng = x;
    return (int)((x * 0x2545F4914F6CDD1Dull) % (ceil_ms + 1));
}
