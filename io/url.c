/*
 * url.c - strict parsing of the URLs io/ reaches over the network
 * (http(s)://, s3://bucket/key, nfs://server/export/path).
 */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "io/io_int.h"

#define URL_MAX 4096

/* A display form of a URL for messages: credentials redacted, then
 * anything unprintable replaced so that a hostile URL cannot put escape
 * sequences on a terminal, and cut to a readable length. */
static const char *display(const char *url, char *buf, size_t n)
{
    size_t i;

    ps_url_redact(url, buf, n);
    for (i = 0; buf[i]; i++)
        if ((unsigned char)buf[i] < 0x20 || (unsigned char)buf[i] >= 0x7f)
            buf[i] = '?';
    if (i > 200)
        snprintf(buf + 197, n - 197, "...");
    return buf;
}

static int bad(const char *url, char *err, const char *why)
{
    char d[256];
    return ps_seterr(err, PS_ECONFIG, "%s: invalid URL: %s", display(url, d, sizeof d), why);
}

static int is_host_char(int c)
{
    return isalnum(c) || c == '.' || c == '-' || c == '_';
}

/* RFC 3986 characters allowed in a path or query of an http URL (already
 * percent-encoded by the user): unreserved, sub-delims, ':', '@', '/', '?', '%'. */
static int is_url_char(int c)
{
    return isalnum(c) || strchr("-._~!$&'()*+,;=:@/?%", c) != NULL;
}

static int valid_pct(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%')
            continue;
        if (i + 2 >= n || !isxdigit((unsigned char)s[i + 1]) || !isxdigit((unsigned char)s[i + 2]))
            return 0;
    }
    return 1;
}

/* host[:port] of an authority (userinfo already removed) */
static int parse_hostport(const char *url, const char *a, size_t n, struct ps_url *u, char *err, int ip6_ok)
{
    const char *colon = NULL;
    size_t hl;

    if (n == 0)
        return bad(url, err, "empty host");
    if (a[0] == '[') {
        const char *close = memchr(a, ']', n);
        if (!ip6_ok)
            return bad(url, err, "IPv6 literal not allowed here");
        if (!close)
            return bad(url, err, "unterminated '[' in host");
        for (const char *p = a + 1; p < close; p++)
            if (!isxdigit((unsigned char)*p) && *p != ':' && *p != '.')
                return bad(url, err, "bad character in IPv6 address");
        if (close == a + 1)
            return bad(url, err, "empty IPv6 address");
        hl = (size_t)(close - a) + 1;
        if (hl < n) {
            if (a[hl] != ':')
                return bad(url, err, "junk after IPv6 address");
            colon = a + hl;
        }
    } else {
        colon = memchr(a, ':', n);
        hl = colon ? (size_t)(colon - a) : n;
        if (hl == 0)
            return bad(url, err, "empty host");
        for (size_t i = 0; i < hl; i++) {
            int c = (unsigned char)a[i];
            if (c == ' ')
                return bad(url, err, "space in host");
            if (!is_host_char(c))
                return bad(url, err, "bad character in host");
        }
        if (a[0] == '.' || a[0] == '-')
            return bad(url, err, "host starts with '.' or '-'");
    }
    if (hl >= sizeof u->host)
        return bad(url, err, "host too long");
    memcpy(u->host, a, hl);
    u->host[hl] = 0;
    u->port = 0;
    if (colon) {
        const char *p = colon + 1, *end = a + n;
        long v = 0;
        if (p == end)
            return bad(url, err, "empty port");
        if (end - p > 5)
            return bad(url, err, "port out of range (1-65535)");
        for (; p < end; p++) {
            if (!isdigit((unsigned char)*p))
                return bad(url, err, "port is not a number");
            v = v * 10 + (*p - '0');
        }
        if (v < 1 || v > 65535)
            return bad(url, err, "port out of range (1-65535)");
        u->port = (int)v;
    }
    return 0;
}

static int parse_s3(const char *url, const char *rest, struct ps_url *u, char *err)
{
    const char *slash = strchr(rest, '/');
    size_t bl = slash ? (size_t)(slash - rest) : strlen(rest);
    size_t kl;

    if (bl == 0)
        return bad(url, err, "empty bucket name (use s3://bucket/key)");
    if (bl > 63)
        return bad(url, err, "bucket name longer than 63 characters");
    for (size_t i = 0; i < bl; i++) {
        int c = (unsigned char)rest[i];
        if (!isalnum(c) && c != '.' && c != '-' && c != '_')
            return bad(url, err, "bad character in bucket name");
    }
    if (!slash || !slash[1])
        return bad(url, err, "empty key (use s3://bucket/key)");
    kl = strlen(slash + 1);
    if (kl > 1024)
        return bad(url, err, "key longer than 1024 bytes");
    /* S3 keys are taken literally (no percent-decoding), as the AWS CLI does;
     * s3.c encodes them for the request. */
    memcpy(u->host, rest, bl);
    u->host[bl] = 0;
    memcpy(u->path, slash + 1, kl + 1);
    return 0;
}

int ps_url_parse(const char *url, struct ps_url *u, char *err)
{
    const char *sep, *auth, *auth_end, *at, *p;
    size_t len, sl, pl, ql;
    int rc;

    memset(u, 0, sizeof *u);
    if (!url || !*url)
        return ps_seterr(err, PS_ECONFIG, "empty URL");
    len = strnlen(url, URL_MAX + 1);
    if (len > URL_MAX)
        return bad(url, err, "longer than 4096 bytes");
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)url[i] < 0x20 || url[i] == 0x7f)
            return bad(url, err, "control character");
    sep = strstr(url, "://");
    if (!sep)
        return bad(url, err, "no scheme (expected http://, https://, s3:// or nfs://)");
    sl = (size_t)(sep - url);
    if (sl == 0 || sl >= sizeof u->scheme)
        return bad(url, err, "unknown scheme");
    for (size_t i = 0; i < sl; i++)
        u->scheme[i] = (char)tolower((unsigned char)url[i]);
    u->scheme[sl] = 0;
    if (strcmp(u->scheme, "http") && strcmp(u->scheme, "https") && strcmp(u->scheme, "s3") &&
        strcmp(u->scheme, "nfs"))
        return bad(url, err, "unknown scheme (expected http://, https://, s3:// or nfs://)");

    auth = sep + 3;
    if (strcmp(u->scheme, "s3") == 0)
        return parse_s3(url, auth, u, err);

    /* the authority ends at the first '/', '?' or '#' */
    auth_end = auth + strcspn(auth, "/?#");
    at = NULL;
    for (p = auth; p < auth_end; p++)
        if (*p == '@')
            at = p;
    if (at) {
        /* user:password@ is left in the URL for libcurl; only checked here */
        if (strcmp(u->scheme, "nfs") == 0)
            return bad(url, err, "credentials in an nfs:// URL");
        for (p = auth; p < at; p++)
            if (!isalnum((unsigned char)*p) && !strchr("-._~!$&'()*+,;=:%", *p))
                return bad(url, err, "bad character in user name or password");
        auth = at + 1;
    }
    rc = parse_hostport(url, auth, (size_t)(auth_end - auth), u, err, strcmp(u->scheme, "nfs") != 0);
    if (rc)
        return rc;

    p = auth_end;
    pl = strcspn(p, "?#");
    if (pl == 0) {
        if (strcmp(u->scheme, "nfs") == 0)
            return bad(url, err, "no export path (use nfs://server/export/path)");
        u->path[0] = '/';
    } else {
        if (pl >= sizeof u->path)
            return bad(url, err, "path longer than 2047 bytes");
        for (size_t i = 0; i < pl; i++) {
            if (p[i] == ' ')
                return bad(url, err, "space in path (write it as %20)");
            if (!is_url_char((unsigned char)p[i]))
                return bad(url, err, "bad character in path");
        }
        if (!valid_pct(p, pl))
            return bad(url, err, "bad percent-escape in path");
        memcpy(u->path, p, pl);
        u->path[pl] = 0;
    }
    p += pl;
    if (*p == '?') {
        p++;
        ql = strcspn(p, "#");
        if (ql >= sizeof u->query)
            return bad(url, err, "query longer than 1023 bytes");
        for (size_t i = 0; i < ql; i++) {
            if (p[i] == ' ')
                return bad(url, err, "space in query (write it as %20)");
            if (!is_url_char((unsigned char)p[i]))
                return bad(url, err, "bad character in query");
        }
        if (!valid_pct(p, ql))
            return bad(url, err, "bad percent-escape in query");
        memcpy(u->query, p, ql);
        u->query[ql] = 0;
        p += ql;
    }
    /* a fragment is never sent to a server; accept and drop it */
    if (strcmp(u->scheme, "nfs") == 0) {
        const char *s = u->path;
        if (strlen(s) < 2)
            return bad(url, err, "no export path (use nfs://server/export/path)");
        /* ".." would let a URL walk out of the export on some servers */
        for (const char *q = s; (q = strstr(q, "..")); q += 2)
            if (q[-1] == '/' && (q[2] == '/' || q[2] == 0))
                return bad(url, err, "'..' in path");
        if (s[strlen(s) - 1] == '/')
            return bad(url, err, "path names a folder, not a file");
    }
    return 0;
}
