/*
 * test_url.c - unit tests of the network side of io/: URL parsing and
 * redaction, credentials, answer parsers, backoff, and the http/s3 engine
 * against a scripted HTTP server in this process (misbehaving answers,
 * retries, hedging, S3 errors, SigV4 headers).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "io/creds.h"
#include "io/http_int.h"
#include "io/io.h"
#include "io/io_int.h"
#include "tests/test.h"

/* ------------------------------------------------------------------ */
/* URLs                                                                */

static int test_url_good(void)
{
    struct ps_url u;
    char err[PS_ERRLEN];

    CHECK_RC(ps_url_parse("http://example.com:8080/a/b.pgs?x=1&y=%20", &u, err));
    CHECK(!strcmp(u.scheme, "http") && !strcmp(u.host, "example.com") && u.port == 8080);
    CHECK(!strcmp(u.path, "/a/b.pgs") && !strcmp(u.query, "x=1&y=%20"));
    CHECK_RC(ps_url_parse("HTTPS://h", &u, err));
    CHECK(!strcmp(u.scheme, "https") && !strcmp(u.path, "/") && u.port == 0);
    CHECK_RC(ps_url_parse("http://[::1]:81/x#frag", &u, err));
    CHECK(!strcmp(u.host, "[::1]") && u.port == 81 && !strcmp(u.path, "/x"));
    CHECK_RC(ps_url_parse("http://user:p%40ss@h/x", &u, err));
    CHECK(!strcmp(u.host, "h"));
    CHECK_RC(ps_url_parse("s3://my-bucket/dir/key with spaces=1.pgs", &u, err));
    CHECK(!strcmp(u.host, "my-bucket") && !strcmp(u.path, "dir/key with spaces=1.pgs"));
    CHECK_RC(ps_url_parse("s3://b/k?versionId=3", &u, err));
    CHECK(!strcmp(u.path, "k?versionId=3")); /* '?' is a key character in S3 */
    CHECK_RC(ps_url_parse("nfs://server/export/sub/f.pgs?version=4", &u, err));
    CHECK(!strcmp(u.host, "server") && !strcmp(u.path, "/export/sub/f.pgs") && !strcmp(u.query, "version=4"));
    return 0;
}

static int expect_bad(const char *url, const char *why)
{
    struct ps_url u;
    char err[PS_ERRLEN] = "";
    int rc = ps_url_parse(url, &u, err);
    if (rc != PS_ECONFIG)
        return t_failf(__FILE__, __LINE__, "%s: rc %d, expected PS_ECONFIG", url, rc);
    if (!strstr(err, why))
        return t_failf(__FILE__, __LINE__, "%s: message \"%s\" lacks \"%s\"", url, err, why);
    if (!strstr(err, "invalid URL") && !strstr(err, "empty URL"))
        return t_failf(__FILE__, __LINE__, "%s: message \"%s\"", url, err);
    for (const char *p = err; *p; p++)
        if ((unsigned char)*p < 0x20)
            return t_failf(__FILE__, __LINE__, "control character in message for %s", url);
    return 0;
}

static int test_url_bad(void)
{
    char big[5000];

    if (expect_bad("", "empty URL") || expect_bad("example.com/x", "no scheme") ||
        expect_bad("ftp://h/x", "unknown scheme") || expect_bad("http://h\x01st/x", "control character") ||
        expect_bad("http://h/x\ny", "control character") || expect_bad("http://ho st/x", "space in host") ||
        expect_bad("http://h:0/x", "port out of range") || expect_bad("http://h:65536/x", "port out of range") ||
        expect_bad("http://h:123456/x", "port out of range") || expect_bad("http://h:8a/x", "port is not a number") ||
        expect_bad("http://h:/x", "empty port") || expect_bad("http:///x", "empty host") ||
        expect_bad("http://h/a b", "space in path") || expect_bad("http://h/a%2", "percent-escape") ||
        expect_bad("http://h/a%zz", "percent-escape") || expect_bad("http://h/a\"b", "bad character in path") ||
        expect_bad("http://[::1/x", "unterminated") || expect_bad("http://h_/x?a=<b>", "bad character in query") ||
        expect_bad("s3:///key", "empty bucket") || expect_bad("s3://bucket", "empty key") ||
        expect_bad("s3://bucket/", "empty key") || expect_bad("s3://bu cket/k", "bad character in bucket") ||
        expect_bad("s3://aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/k", "longer than 63") ||
        expect_bad("nfs://h", "no export path") || expect_bad("nfs://h/", "no export path") ||
        expect_bad("nfs://h/export/../etc/passwd", "'..'") || expect_bad("nfs://h/export/dir/", "folder") ||
        expect_bad("nfs://u:p@h/export/f", "credentials"))
        return 1;
    memset(big, 'a', sizeof big);
    memcpy(big, "s3://b/", 7);
    big[7 + 1025] = 0;
    if (expect_bad(big, "key longer than 1024"))
        return 1;
    memset(big, 'a', sizeof big);
    memcpy(big, "http://h/", 9);
    big[4500] = 0;
    if (expect_bad(big, "longer than 4096"))
        return 1;
    return 0;
}

static int test_url_message_redacted(void)
{
    struct ps_url u;
    char err[PS_ERRLEN];
    char out[256];

    CHECK(ps_url_parse("http://alice:s3cr3t@h:99999/x", &u, err) == PS_ECONFIG);
    CHECKF(!strstr(err, "s3cr3t") && strstr(err, "***@h:99999"), "message: %s", err);
    ps_url_redact("https://b.s3.amazonaws.com/k?X-Amz-Signature=abcd&X-Amz-Credential=AK", out, sizeof out);
    CHECKF(!strcmp(out, "https://b.s3.amazonaws.com/k?***"), "%s", out);
    ps_url_redact("http://u:pw@h/p", out, sizeof out);
    CHECKF(!strcmp(out, "http://***@h/p"), "%s", out);
    ps_url_redact("s3://b/k", out, sizeof out);
    CHECK(!strcmp(out, "s3://b/k"));
    return 0;
}

static int test_open_bad_url(void)
{
    struct ps_io *io;
    char err[PS_ERRLEN];

    CHECK(ps_io_open("http://h:70000/x", NULL, &io, err) == PS_ECONFIG);
    CHECKF(strstr(err, "port out of range"), "%s", err);
    CHECK(ps_io_open("s3://bucket/", NULL, &io, err) == PS_ECONFIG);
    CHECKF(strstr(err, "empty key"), "%s", err);
    return 0;
}

/* ------------------------------------------------------------------ */
/* credentials                                                         */

static int test_creds_parse(void)
{
    const char *ini =
        "# comment\n"
        "[default]\r\n"
        "aws_access_key_id = AKIDDEFAULT\n"
        "aws_secret_access_key=secretdefault\n"
        "\n"
        "; another comment\n"
        "[ prod ]\n"
        "  AWS_ACCESS_KEY_ID = test:tester  \n"
        "aws_secret_access_key = sec/ret+key=\n"
        "aws_session_token = tok==\n"
        "region = eu-west-1\n"
        "[other]\n"
        "aws_access_key_id = X\n";
    struct ps_creds c;
    char err[PS_ERRLEN];

    memset(&c, 0, sizeof c);
    CHECK(ps_creds_parse(ini, strlen(ini), "default", "f", &c, err) == 1);
    CHECK(!strcmp(c.access_key, "AKIDDEFAULT") && !strcmp(c.secret, "secretdefault") && !c.token[0]);
    memset(&c, 0, sizeof c);
    CHECK(ps_creds_parse(ini, strlen(ini), "prod", "f", &c, err) == 1);
    CHECK(!strcmp(c.access_key, "test:tester") && !strcmp(c.secret, "sec/ret+key=") && !strcmp(c.token, "tok=="));
    memset(&c, 0, sizeof c);
    CHECK(ps_creds_parse(ini, strlen(ini), "missing", "f", &c, err) == 0);
    CHECK(!c.access_key[0]);
    return 0;
}

static int creds_bad(const char *text, size_t len, const char *why, int line)
{
    struct ps_creds c;
    char err[PS_ERRLEN] = "";
    int rc;

    memset(&c, 0, sizeof c);
    rc = ps_creds_parse(text, len, "default", "creds.ini", &c, err);
    if (rc != PS_ECONFIG)
        return t_failf(__FILE__, line, "rc %d for bad file, message %s", rc, err);
    if (!strstr(err, why) || !strstr(err, "creds.ini"))
        return t_failf(__FILE__, line, "message \"%s\" lacks \"%s\"", err, why);
    if (strstr(err, "SENTINEL"))
        return t_failf(__FILE__, line, "message repeats the file's content: %s", err);
    return 0;
}

static int test_creds_parse_bad(void)
{
    char longv[10000];
    int n;

    if (creds_bad("[default\naws_secret_access_key = SENTINEL\n", 41, "line 1: section header without ']'", __LINE__) ||
        creds_bad("aws_secret_access_key = SENTINEL\n", 33, "line 1: key before any", __LINE__) ||
        creds_bad("[default]\nSENTINEL garbage\n", 26, "line 2: expected", __LINE__) ||
        creds_bad("[default]\n = SENTINEL\n", 21, "line 2: empty key", __LINE__) ||
        creds_bad("[]\n", 3, "empty section", __LINE__) ||
        creds_bad("[default]\nkey\x01 = SENTINEL\n", 24, "control character", __LINE__) ||
        creds_bad("[default]\naws_secret_access_key = SENT\0INEL\n", 43, "NUL", __LINE__))
        return 1;
    n = snprintf(longv, sizeof longv, "[default]\naws_secret_access_key = ");
    memset(longv + n, 'S', 300);
    n += 300;
    longv[n++] = '\n';
    if (creds_bad(longv, (size_t)n, "too long", __LINE__))
        return 1;
    n = snprintf(longv, sizeof longv, "[default]\nx = ");
    memset(longv + n, 'S', 9000);
    n += 9000;
    if (creds_bad(longv, (size_t)n, "longer than", __LINE__))
        return 1;
    return 0;
}

static char tdir[64];

static void write_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
    chmod(path, mode);
}

static void clear_aws_env(void)
{
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_SECURITY_TOKEN");
    unsetenv("AWS_PROFILE");
    unsetenv("AWS_SHARED_CREDENTIALS_FILE");
    unsetenv("AWS_ENDPOINT_URL");
    unsetenv("AWS_ENDPOINT_URL_S3");
    unsetenv("AWS_REGION");
    unsetenv("AWS_DEFAULT_REGION");
}

/* Run ps_creds_load with stderr captured into log (for the permission warning). */
static int load_capture(const char *profile, struct ps_creds *c, char *err, char *log, size_t logn)
{
    char path[128];
    int fd, saved, rc;
    ssize_t n;

    snprintf(path, sizeof path, "%s/stderr.txt", tdir);
    fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    fflush(stderr);
    saved = dup(2);
    dup2(fd, 2);
    rc = ps_creds_load(profile, c, err);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    lseek(fd, 0, SEEK_SET);
    n = read(fd, log, logn - 1);
    log[n > 0 ? n : 0] = 0;
    close(fd);
    return rc;
}

static int test_creds_load(void)
{
    struct ps_creds c;
    char err[PS_ERRLEN], log[2048], path[256], home[96];

    snprintf(tdir, sizeof tdir, "/tmp/ps_test_url.XXXXXX");
    CHECK(mkdtemp(tdir));
    clear_aws_env();
    snprintf(home, sizeof home, "%s/home", tdir);
    mkdir(home, 0700);
    setenv("HOME", home, 1);

    /* nothing anywhere: anonymous */
    CHECK_RC(load_capture(NULL, &c, err, log, sizeof log));
    CHECK(c.anonymous && !c.secret[0]);

    /* environment */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secretenv", 1);
    setenv("AWS_SESSION_TOKEN", "tokenenv", 1);
    CHECK_RC(load_capture(NULL, &c, err, log, sizeof log));
    CHECK(!strcmp(c.access_key, "AKIDENV") && !strcmp(c.secret, "secretenv") && !strcmp(c.token, "tokenenv"));
    CHECK(strstr(c.hint, "AWS_SECRET_ACCESS_KEY"));
    setenv("AWS_SESSION_TOKEN", "tok\r\nX-Evil: 1", 1);
    CHECK(load_capture(NULL, &c, err, log, sizeof log) == PS_ECONFIG);
    CHECKF(strstr(err, "control character") && !strstr(err, "Evil"), "%s", err);
    unsetenv("AWS_SESSION_TOKEN");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    CHECK(load_capture(NULL, &c, err, log, sizeof log) == PS_ECONFIG);
    CHECKF(strstr(err, "AWS_SECRET_ACCESS_KEY is not") && !strstr(err, "AKIDENV"), "%s", err);
    clear_aws_env();

    /* ~/.aws/credentials, readable by others: loaded, with a warning */
    snprintf(path, sizeof path, "%s/.aws", home);
    mkdir(path, 0700);
    snprintf(path, sizeof path, "%s/.aws/credentials", home);
    write_file(path, "[default]\naws_access_key_id=AKIDFILE\naws_secret_access_key=secretfile\n"
                     "[p2]\naws_access_key_id=AKID2\naws_secret_access_key=secret2\naws_session_token=tok2\n",
               0644);
    CHECK_RC(load_capture(NULL, &c, err, log, sizeof log));
    CHECK(!strcmp(c.access_key, "AKIDFILE") && !strcmp(c.secret, "secretfile"));
    CHECKF(strstr(log, "readable by group or others") && strstr(log, "chmod 600"), "log: %s", log);
    CHECK(!strstr(log, "secretfile"));
    chmod(path, 0600);
    CHECK_RC(load_capture(NULL, &c, err, log, sizeof log));
    CHECKF(!strstr(log, "readable"), "unexpected warning: %s", log);

    /* profile by argument, by $AWS_PROFILE; a missing profile named explicitly is an error */
    CHECK_RC(load_capture("p2", &c, err, log, sizeof log));
    CHECK(!strcmp(c.access_key, "AKID2") && !strcmp(c.token, "tok2"));
    CHECK(strstr(c.source, "profile p2"));
    setenv("AWS_PROFILE", "p2", 1);
    CHECK_RC(load_capture(NULL, &c, err, log, sizeof log));
    CHECK(!strcmp(c.access_key, "AKID2"));
    setenv("AWS_PROFILE", "nope", 1);
    CHECK(load_capture(NULL, &c, err, log, sizeof log) == PS_ECONFIG);
    CHECKF(strstr(err, "profile nope not found"), "%s", err);
    unsetenv("AWS_PROFILE");
    /* the environment keys beat the default profile, an explicit profile beats them */
    setenv("AWS_ACCESS_KEY_ID", "AKIDENV", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "secretenv", 1);
    CHECK_RC(load_capture(NULL, &c, err, log, sizeof log));
    CHECK(!strcmp(c.access_key, "AKIDENV"));
    CHECK_RC(load_capture("p2", &c, err, log, sizeof log));
    CHECK(!strcmp(c.access_key, "AKID2"));
    clear_aws_env();

    /* AWS_SHARED_CREDENTIALS_FILE; a profile without a secret */
    snprintf(path, sizeof path, "%s/other.ini", tdir);
    write_file(path, "[default]\naws_access_key_id=ONLYKEY\n", 0600);
    setenv("AWS_SHARED_CREDENTIALS_FILE", path, 1);
    CHECK(load_capture(NULL, &c, err, log, sizeof log) == PS_ECONFIG);
    CHECKF(strstr(err, "aws_secret_access_key is missing or empty") && strstr(err, "other.ini"), "%s", err);
    write_file(path, "[default]\nbroken line\n", 0600);
    CHECK(load_capture(NULL, &c, err, log, sizeof log) == PS_ECONFIG);
    CHECKF(strstr(err, "line 2"), "%s", err);
    clear_aws_env();
    {
        static const char *files[] = { "home/.aws/credentials", "home/.aws", "home", "other.ini", "stderr.txt" };
        for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
            snprintf(path, sizeof path, "%s/%s", tdir, files[i]);
            if (unlink(path) < 0)
                rmdir(path);
        }
        rmdir(tdir);
    }
    return 0;
}

static int test_creds_scrub(void)
{
    struct ps_creds c;
    char msg[200];

    memset(&c, 0, sizeof c);
    snprintf(c.secret, sizeof c.secret, "wJalrXUtnFEMI");
    snprintf(c.token, sizeof c.token, "**");
    snprintf(msg, sizeof msg, "a wJalrXUtnFEMI b wJalrXUtnFEMIwJalrXUtnFEMI c ** d");
    ps_creds_scrub(&c, msg);
    CHECKF(!strcmp(msg, "a *** b ****** c ** d"), "%s", msg);
    return 0;
}

/* ------------------------------------------------------------------ */
/* answer parsers, backoff                                             */

static int test_content_range(void)
{
    uint64_t a, b, t;
#define CR(s) ps_http_parse_content_range(s, strlen(s), &a, &b, &t)
    CHECK(CR("bytes 0-99/1000") == 0 && a == 0 && b == 99 && t == 1000);
    CHECK(CR("  bytes 5-5/6\r\n") == 0 && a == 5 && b == 5 && t == 6);
    CHECK(CR("BYTES 1-2/*") == 0 && t == UINT64_MAX);
    CHECK(CR("bytes */1000") == 1 && t == 1000 && a == UINT64_MAX);
    CHECK(CR("bytes 18446744073709551613-18446744073709551613/18446744073709551614") == 0);
    CHECK(CR("bytes 0-1/18446744073709551615") == -1); /* would read as '*' */
    CHECK(CR("bytes */18446744073709551615") == -1);
    CHECK(CR("bytes 0-99/100x") == -1);
    CHECK(CR("bytes 99-0/100") == -1);
    CHECK(CR("bytes 0-100/100") == -1);
    CHECK(CR("bytes 0-1/") == -1);
    CHECK(CR("bytes -1/100") == -1);
    CHECK(CR("items 0-1/2") == -1);
    CHECK(CR("bytes 0-99999999999999999999/1") == -1);
    CHECK(CR("bytes */*") == -1);
    CHECK(CR("bytes=0-1/2") == -1);
    CHECK(CR("") == -1);
#undef CR
    return 0;
}

static int test_retry_after(void)
{
    char date[64];
    time_t now = time(NULL), then = now + 7;
    struct tm tm;

#define RA(s) ps_http_parse_retry_after(s, strlen(s), (int64_t)now, 30000)
    CHECK(RA(" 3\r\n") == 3000);
    CHECK(RA("0") == 0);
    CHECK(RA("100000") == 30000);
    CHECK(RA("99999999999999999999999") == -1);
    CHECK(RA("-1") == -1);
    CHECK(RA("3s") == -1);
    CHECK(RA("") == -1);
    CHECK(RA("soon") == -1);
    gmtime_r(&then, &tm);
    strftime(date, sizeof date, "%a, %d %b %Y %H:%M:%S GMT", &tm);
    CHECKF(RA(date) >= 6000 && RA(date) <= 7000, "%s -> %lld", date, (long long)RA(date));
    CHECK(RA("Thu, 01 Jan 1970 00:00:00 GMT") == 0);
#undef RA
    return 0;
}

static int test_status_etag_xml(void)
{
    char r[64], e[64], x[64];
    const char *xml = "<?xml?><Error><Code>NoSuchKey</Code><Message>a &lt;b&gt; &amp; c\x01</Message></Error>";

    CHECK(ps_http_parse_status("HTTP/1.1 206 Partial Content\r\n", 30, r, sizeof r) == 206);
    CHECK(!strcmp(r, "Partial Content"));
    CHECK(ps_http_parse_status("HTTP/2 404 \r\n", 13, r, sizeof r) == 404 && !r[0]);
    CHECK(ps_http_parse_status("HTTP/1.1 20 OK", 14, r, sizeof r) == -1);
    CHECK(ps_http_parse_status("HTTP/1.1 2000 OK", 16, r, sizeof r) == -1);
    CHECK(ps_http_parse_status("HTTP/1.1 abc", 12, r, sizeof r) == -1);
    CHECK(ps_http_parse_status("HTTX/1.1 200 OK", 15, r, sizeof r) == -1);
    CHECK(ps_http_parse_status("HTTP/1.1 200 \x1b[31mred", 22, r, sizeof r) == 200 && !strchr(r, 0x1b));
    CHECK(ps_http_parse_etag(" \"abc-1\"\r\n", 10, e, sizeof e) == 0 && !strcmp(e, "\"abc-1\""));
    CHECK(ps_http_parse_etag("W/\"x\"", 5, e, sizeof e) == 1 && !strcmp(e, "\"x\""));
    CHECK(ps_http_parse_etag("abc", 3, e, sizeof e) == -1);
    CHECK(ps_http_parse_etag("\"a\"b\"", 5, e, sizeof e) == -1);
    CHECK(ps_http_parse_etag("\"", 1, e, sizeof e) == -1);
    CHECK(ps_http_parse_etag("\"aaaaaaaa\"", 10, e, 5) == -1);
    CHECK(ps_xml_text(xml, strlen(xml), "Code", x, sizeof x) == 0 && !strcmp(x, "NoSuchKey"));
    CHECK(ps_xml_text(xml, strlen(xml), "Message", x, sizeof x) == 0 && !strcmp(x, "a <b> & c"));
    CHECK(ps_xml_text(xml, strlen(xml), "Region", x, sizeof x) == -1);
    CHECK(ps_xml_text(xml, 30, "Code", x, sizeof x) == -1); /* cut before </Code> */
    CHECK(ps_xml_text(xml, strlen(xml), "Code", x, 4) == 0 && !strcmp(x, "NoS"));
    return 0;
}

static int test_backoff(void)
{
    uint64_t rng = 42;
    int seen_lo = 0, seen_hi = 0;

    for (int attempt = 1; attempt <= 40; attempt++) {
        int cap = 100 << (attempt - 1 > 20 ? 20 : attempt - 1);
        if (cap > 10000 || cap <= 0)
            cap = 10000;
        for (int i = 0; i < 200; i++) {
            int d = ps_backoff_ms(attempt, 100, 10000, &rng);
            CHECKF(d >= 0 && d <= cap, "attempt %d: %d ms (cap %d)", attempt, d, cap);
            if (attempt == 10) {
                seen_lo |= d < 2500;
                seen_hi |= d > 7500;
            }
        }
    }
    CHECK(seen_lo && seen_hi); /* full jitter spreads over [0, cap] */
    CHECK(ps_backoff_ms(0, 100, 1000, &rng) <= 100);
    return 0;
}

/* ------------------------------------------------------------------ */
/* a scripted HTTP server                                              */

#define OBJ (1u << 20)

static struct {
    int fd, port;
    pthread_t th;
    atomic_int stop;
    pthread_mutex_t mu;
    int hits[16];
    char last_path[512], last_host[128], last_token[256], last_auth[1024], last_sha[128], last_method[16];
} S = { .fd = -1, .mu = PTHREAD_MUTEX_INITIALIZER };

static unsigned char obj_byte(uint64_t i) { return (unsigned char)((i * 131u + 7u) ^ (i >> 9)); }

struct req {
    char method[16], path[512], host[128], token[256], auth[1024], sha[128];
    int has_range;
    uint64_t a, b;
};

static int send_all(int c, const void *p, size_t n)
{
    const char *s = p;
    while (n) {
        ssize_t w = send(c, s, n, MSG_NOSIGNAL);
        if (w <= 0)
            return -1;
        s += w;
        n -= (size_t)w;
    }
    return 0;
}

static int sendf(int c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int sendf(int c, const char *fmt, ...)
{
    char buf[4096];
    va_list ap;
    int n;
    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return send_all(c, buf, (size_t)n);
}

static void send_body(int c, uint64_t off, uint64_t len)
{
    unsigned char buf[65536];
    while (len) {
        size_t n = len < sizeof buf ? (size_t)len : sizeof buf;
        for (size_t i = 0; i < n; i++)
            buf[i] = obj_byte(off + i);
        if (send_all(c, buf, n) < 0)
            return;
        off += n;
        len -= n;
    }
}

static void header_value(const char *hdrs, const char *name, char *out, size_t n)
{
    const char *p = hdrs;
    size_t nl = strlen(name);
    out[0] = 0;
    while ((p = strchr(p, '\n'))) {
        p++;
        if (strncasecmp(p, name, nl) == 0 && p[nl] == ':') {
            const char *v = p + nl + 1, *e;
            while (*v == ' ')
                v++;
            e = strpbrk(v, "\r\n");
            snprintf(out, n, "%.*s", (int)(e ? e - v : (long)strlen(v)), v);
            return;
        }
    }
}

static void s3_error(int c, int status, const char *code, const char *msg, const char *extra, int head)
{
    char body[2048];
    int n = snprintf(body, sizeof body, "<?xml version=\"1.0\"?><Error><Code>%s</Code><Message>%s</Message>%s</Error>",
                     code, msg, extra);
    sendf(c, "HTTP/1.1 %d Error\r\nContent-Type: application/xml\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
          status, head ? 0 : n);
    if (!head)
        send_all(c, body, (size_t)n);
}

static void serve_object(int c, const struct req *q, const char *etag, int head)
{
    if (head || !q->has_range) {
        sendf(c, "HTTP/1.1 200 OK\r\nContent-Length: %u\r\nETag: %s\r\nAccept-Ranges: bytes\r\nConnection: close\r\n\r\n",
              OBJ, etag);
        if (!head)
            send_body(c, 0, OBJ);
        return;
    }
    sendf(c, "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\nContent-Range: bytes %llu-%llu/%u\r\n"
             "ETag: %s\r\nConnection: close\r\n\r\n",
          (unsigned long long)(q->b - q->a + 1), (unsigned long long)q->a, (unsigned long long)q->b, OBJ, etag);
    send_body(c, q->a, q->b - q->a + 1);
}

static int hit(int i)
{
    int n;
    pthread_mutex_lock(&S.mu);
    n = ++S.hits[i];
    pthread_mutex_unlock(&S.mu);
    return n;
}

static void *conn_main(void *arg)
{
    int c = (int)(intptr_t)arg;
    char buf[16384], range[64];
    size_t got = 0;
    struct req q;
    int head;
    const char *p;

    memset(&q, 0, sizeof q);
    while (got < sizeof buf - 1) {
        ssize_t r = recv(c, buf + got, sizeof buf - 1 - got, 0);
        if (r <= 0)
            goto out;
        got += (size_t)r;
        buf[got] = 0;
        if (strstr(buf, "\r\n\r\n"))
            break;
    }
    sscanf(buf, "%15s %511s", q.method, q.path);
    header_value(buf, "Host", q.host, sizeof q.host);
    header_value(buf, "x-amz-security-token", q.token, sizeof q.token);
    header_value(buf, "Authorization", q.auth, sizeof q.auth);
    header_value(buf, "x-amz-content-sha256", q.sha, sizeof q.sha);
    header_value(buf, "Range", range, sizeof range);
    if (sscanf(range, "bytes=%llu-%llu", (unsigned long long *)&q.a, (unsigned long long *)&q.b) == 2 &&
        q.b < OBJ && q.a <= q.b)
        q.has_range = 1;
    pthread_mutex_lock(&S.mu);
    snprintf(S.last_path, sizeof S.last_path, "%s", q.path);
    snprintf(S.last_host, sizeof S.last_host, "%s", q.host);
    snprintf(S.last_token, sizeof S.last_token, "%s", q.token);
    snprintf(S.last_auth, sizeof S.last_auth, "%s", q.auth);
    snprintf(S.last_sha, sizeof S.last_sha, "%s", q.sha);
    snprintf(S.last_method, sizeof S.last_method, "%s", q.method);
    pthread_mutex_unlock(&S.mu);
    head = strcmp(q.method, "HEAD") == 0;
    p = q.path;

    if ((!strncmp(p, "/s3ok/", 6) || !strncmp(q.host, "s3ok.", 5)) && strstr(q.auth, "AWS4-HMAC-SHA256 Credential=AKIDTEST/")) {
        serve_object(c, &q, "\"v1\"", head);
    } else if (head && (!strncmp(p, "/ok", 3) || !strncmp(p, "/flaky", 6) || !strncmp(p, "/r429", 5) ||
                        !strncmp(p, "/always503", 10) || !strncmp(p, "/short", 6) || !strncmp(p, "/stall", 6) ||
                        !strncmp(p, "/slowfirst", 10) || !strncmp(p, "/crwrong", 8) || !strncmp(p, "/overflow", 9))) {
        serve_object(c, &q, "\"v1\"", 1);
    } else if (!strncmp(p, "/ok", 3)) {
        serve_object(c, &q, "\"v1\"", head);
    } else if (!strncmp(p, "/norange", 8)) {
        serve_object(c, &(struct req){ .has_range = 0 }, "\"v1\"", head);
    } else if (!strncmp(p, "/crwrong", 8) && !head && q.has_range) {
        sendf(c, "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\nContent-Range: bytes %llu-%llu/%u\r\n"
                 "Connection: close\r\n\r\n",
              (unsigned long long)(q.b - q.a + 1), (unsigned long long)q.a + 1, (unsigned long long)q.b + 1, OBJ);
        send_body(c, q.a + 1, q.b - q.a + 1);
    } else if (!strncmp(p, "/overflow", 9) && !head && q.has_range) {
        sendf(c, "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\nContent-Range: bytes %llu-%llu/%u\r\n"
                 "Connection: close\r\n\r\n",
              (unsigned long long)(q.b - q.a + 1 + 16), (unsigned long long)q.a, (unsigned long long)q.b, OBJ);
        send_body(c, q.a, q.b - q.a + 1 + 16);
    } else if (!strncmp(p, "/flaky", 6) && !head && hit(0) <= 2) {
        sendf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    } else if (!strncmp(p, "/r429", 5) && !head && hit(1) == 1) {
        sendf(c, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    } else if (!strncmp(p, "/always503", 10) && !head) {
        hit(2);
        sendf(c, "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    } else if (!strncmp(p, "/etag", 5)) {
        serve_object(c, &q, head ? "\"v1\"" : "\"v2\"", head);
    } else if (!strncmp(p, "/short", 6) && !head && q.has_range && hit(3) == 1) {
        sendf(c, "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\nContent-Range: bytes %llu-%llu/%u\r\n"
                 "Connection: close\r\n\r\n",
              (unsigned long long)(q.b - q.a + 1), (unsigned long long)q.a, (unsigned long long)q.b, OBJ);
        send_body(c, q.a, (q.b - q.a + 1) / 2);
    } else if (!strncmp(p, "/stall", 6) && !head && q.has_range) {
        sendf(c, "HTTP/1.1 206 Partial Content\r\nContent-Length: %llu\r\nContent-Range: bytes %llu-%llu/%u\r\n"
                 "Connection: close\r\n\r\n",
              (unsigned long long)(q.b - q.a + 1), (unsigned long long)q.a, (unsigned long long)q.b, OBJ);
        send_body(c, q.a, 1000);
        for (int i = 0; i < 40 && !S.stop; i++)
            usleep(100000);
    } else if (!strncmp(p, "/slowfirst", 10) && !head && hit(4) == 1) {
        for (int i = 0; i < 30 && !S.stop; i++)
            usleep(100000);
        serve_object(c, &q, "\"v1\"", 0);
    } else if (!strncmp(p, "/sig/", 5)) {
        char m[600];
        /* a server that echoes request parts (as S3's CanonicalRequest does) */
        snprintf(m, sizeof m, "signature does not match; token was %s", q.token);
        s3_error(c, 403, "SignatureDoesNotMatch", m, "<StringToSign>AWS4-HMAC-SHA256</StringToSign>", head);
    } else if (!strncmp(p, "/tok/", 5)) {
        const char *sh = strstr(q.auth, "SignedHeaders=");
        if (!strcmp(q.token, "TOKEN-SENTINEL-123") && sh && strstr(sh, "x-amz-security-token") &&
            !strcmp(q.sha, "UNSIGNED-PAYLOAD"))
            s3_error(c, 403, "InvalidToken", "The provided token is malformed or otherwise invalid.", "", head);
        else
            s3_error(c, 400, "MissingSecurityHeader", "no token", "", head);
    } else if (!strncmp(p, "/reg/", 5)) {
        s3_error(c, 400, "AuthorizationHeaderMalformed", "the region 'us-east-1' is wrong; expecting 'eu-west-1'",
                 "<Region>eu-west-1</Region>", head);
    } else if (!strncmp(p, "/nob/", 5)) {
        s3_error(c, 404, "NoSuchBucket", "The specified bucket does not exist", "", head);
    } else if (!strncmp(p, "/s3ok/", 6)) {
        s3_error(c, 403, "AccessDenied", "Access Denied", "", head);
    } else if (!strncmp(p, "/flaky", 6) || !strncmp(p, "/r429", 5) || !strncmp(p, "/short", 6) ||
               !strncmp(p, "/slowfirst", 10)) {
        serve_object(c, &q, "\"v1\"", 0); /* once the scripted trouble is over */
    } else {
        sendf(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\n%s", head ? "" : "not found");
    }
out:
    close(c);
    return NULL;
}

static void *accept_main(void *arg)
{
    (void)arg;
    while (!S.stop) {
        int c = accept(S.fd, NULL, NULL);
        pthread_t t;
        if (c < 0)
            continue;
        if (pthread_create(&t, NULL, conn_main, (void *)(intptr_t)c) == 0)
            pthread_detach(t);
        else
            close(c);
    }
    return NULL;
}

static void server_down(void)
{
    if (S.fd < 0)
        return;
    S.stop = 1;
    pthread_join(S.th, NULL);
    close(S.fd);
    S.fd = -1;
    usleep(300000); /* let the connection threads see the flag */
}

static int server_up(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof a;
    struct timeval tv = { .tv_sec = 0, .tv_usec = 200000 };

    if (S.fd >= 0)
        return 0;
    S.fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (S.fd < 0 || bind(S.fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(S.fd, 64) < 0 ||
        getsockname(S.fd, (struct sockaddr *)&a, &al) < 0)
        return -1;
    /* accept() wakes up now and then to see the stop flag */
    setsockopt(S.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    S.port = ntohs(a.sin_port);
    atexit(server_down);
    return pthread_create(&S.th, NULL, accept_main, NULL) == 0 ? 0 : -1;
}

static void opts(struct ps_io_opts *o)
{
    ps_io_opts_init(o);
    o->retries = 3;
    o->timeout_ms = 1000;
    o->deadline_ms = 20000;
    o->fault = "";
}

static char url_buf[600];
static const char *U(const char *path)
{
    snprintf(url_buf, sizeof url_buf, "http://127.0.0.1:%d%s", S.port, path);
    return url_buf;
}

/* Read [off, off+len) through a fresh handle; the result code, message in err. */
static int64_t read_range(const char *url, const struct ps_io_opts *o, uint64_t off, uint64_t len,
                          unsigned char *buf, char *err, struct ps_io_stats *st)
{
    struct ps_io *io;
    int64_t rc;
    int orc = ps_io_open(url, o, &io, err);
    if (orc < 0)
        return orc;
    rc = ps_io_pread(io, buf, len, off);
    if (rc < 0)
        snprintf(err, PS_ERRLEN, "%s", ps_io_errmsg(io));
    if (st)
        ps_io_stats(io, st);
    ps_io_close(io);
    return rc;
}

static int check_bytes(const unsigned char *buf, uint64_t off, uint64_t len)
{
    for (uint64_t i = 0; i < len; i++)
        if (buf[i] != obj_byte(off + i))
            return 0;
    return 1;
}

static int test_http_ok(void)
{
    struct ps_io_opts o;
    struct ps_io *io;
    char err[PS_ERRLEN];
    unsigned char *buf = malloc(OBJ);
    struct ps_io_req r[8];
    struct ps_io_cqe c[8];
    int n = 0;

    if (server_up() < 0)
        SKIP("cannot listen on 127.0.0.1");
    opts(&o);
    o.queue_depth = 4;
    CHECK_RC(ps_io_open(U("/ok/a.bin"), &o, &io, err));
    CHECK(ps_io_size(io) == OBJ);
    /* more requests than the depth: submit takes what fits */
    for (int i = 0; i < 8; i++)
        r[i] = (struct ps_io_req){ .offset = (uint64_t)i * (OBJ / 8), .length = OBJ / 8,
                                   .buf = buf + (size_t)i * (OBJ / 8), .cookie = (uint64_t)i + 100 };
    CHECK(ps_io_submit(io, r, 8) == 4);
    while (n < 8) {
        int k = ps_io_reap(io, c, 8, 1, 5000);
        CHECK(k > 0);
        for (int i = 0; i < k; i++)
            CHECKF(c[i].res == OBJ / 8 && c[i].cookie >= 100 && c[i].cookie < 108, "res %lld",
                   (long long)c[i].res);
        n += k;
        if (n == 4)
            CHECK(ps_io_submit(io, r + 4, 4) == 4);
    }
    CHECK(check_bytes(buf, 0, OBJ));
    /* past the end */
    CHECK(ps_io_pread(io, buf, 10, OBJ - 5) == -EINVAL);
    CHECK(strstr(ps_io_errmsg(io), "past the end"));
    ps_io_close(io);
    free(buf);
    return 0;
}

static int test_http_norange(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char buf[5000];

    if (server_up() < 0)
        SKIP("cannot listen");
    opts(&o);
    CHECKF(read_range(U("/norange/x"), &o, 123456, sizeof buf, buf, err, NULL) == sizeof buf, "%s", err);
    CHECK(check_bytes(buf, 123456, sizeof buf));
    CHECKF(read_range(U("/norange/x"), &o, OBJ - 100, 100, buf, err, NULL) == 100, "%s", err);
    CHECK(check_bytes(buf, OBJ - 100, 100));
    return 0;
}

static int test_http_bad_answers(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char *buf = calloc(1, 65536);
    struct ps_io_stats st;
    int64_t rc;

    if (server_up() < 0)
        SKIP("cannot listen");
    opts(&o);
    rc = read_range(U("/crwrong/x"), &o, 1000, 8192, buf, err, NULL);
    CHECKF(rc == PS_ERANGE && strstr(err, "server answered 1001-"), "%lld %s", (long long)rc, err);
    memset(buf, 0, 8192 + 64);
    rc = read_range(U("/overflow/x"), &o, 1000, 8192, buf, err, NULL);
    CHECKF(rc == PS_ERANGE && strstr(err, "more than the 8192 bytes"), "%lld %s", (long long)rc, err);
    for (int i = 8192; i < 8192 + 64; i++)
        CHECKF(buf[i] == 0, "byte %d past the request written", i);
    rc = read_range(U("/etag/x"), &o, 0, 100, buf, err, NULL);
    CHECKF(rc == PS_EHTTP && strstr(err, "changed while reading"), "%lld %s", (long long)rc, err);
    rc = read_range(U("/missing"), &o, 0, 100, buf, err, NULL);
    CHECKF(rc == -ENOENT && strstr(err, ": HTTP 404 Not Found") && strstr(err, "/missing"), "%lld %s",
           (long long)rc, err);
    /* a short body is retried */
    rc = read_range(U("/short/x"), &o, 0, 65536, buf, err, &st);
    CHECKF(rc == 65536 && st.retries == 1, "%lld retries %llu %s", (long long)rc, (unsigned long long)st.retries, err);
    CHECK(check_bytes(buf, 0, 65536));
    free(buf);
    return 0;
}

static int test_http_retries(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char buf[4096];
    struct ps_io_stats st;
    uint64_t t0;
    int64_t rc;

    if (server_up() < 0)
        SKIP("cannot listen");
    opts(&o);
    rc = read_range(U("/flaky/x"), &o, 0, sizeof buf, buf, err, &st);
    CHECKF(rc == sizeof buf && st.retries == 2 && st.errors == 0, "%lld retries %llu %s", (long long)rc,
           (unsigned long long)st.retries, err);
    CHECK(check_bytes(buf, 0, sizeof buf));
    /* 429 with Retry-After: 1 is honoured */
    t0 = ps_now_ns();
    rc = read_range(U("/r429/x"), &o, 0, sizeof buf, buf, err, &st);
    CHECKF(rc == sizeof buf && st.retries == 1, "%lld %s", (long long)rc, err);
    CHECKF(ps_now_ns() - t0 >= 950000000ull, "retried after %.3f s", (ps_now_ns() - t0) / 1e9);
    /* bounded: 3 attempts, then a clear error */
    rc = read_range(U("/always503/x"), &o, 0, sizeof buf, buf, err, &st);
    CHECKF(rc == PS_EHTTP && strstr(err, "HTTP 503") && strstr(err, "gave up after 3 attempts"), "%lld %s",
           (long long)rc, err);
    CHECK(S.hits[2] == 3);
    return 0;
}

static int test_http_stall(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char *buf = malloc(65536);
    uint64_t t0 = ps_now_ns();
    int64_t rc;

    if (server_up() < 0)
        SKIP("cannot listen");
    opts(&o);
    o.retries = 2;
    rc = read_range(U("/stall/x"), &o, 0, 65536, buf, err, NULL);
    CHECKF(rc == -ETIMEDOUT && (strstr(err, "no data for") || strstr(err, "timed out")), "%lld %s", (long long)rc,
           err);
    /* 2 attempts of ~1-2 s each (low-speed window), never the server's 4 s stall each */
    CHECKF(ps_now_ns() - t0 < 7000000000ull, "took %.1f s", (ps_now_ns() - t0) / 1e9);
    free(buf);
    return 0;
}

static int test_http_hedge(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char buf[4096];
    struct ps_io_stats st;
    uint64_t t0 = ps_now_ns();
    int64_t rc;

    if (server_up() < 0)
        SKIP("cannot listen");
    opts(&o);
    o.timeout_ms = 10000;
    o.hedge_ms = 200;
    rc = read_range(U("/slowfirst/x"), &o, 0, sizeof buf, buf, err, &st);
    CHECKF(rc == sizeof buf && st.hedges == 1, "%lld hedges %llu %s", (long long)rc, (unsigned long long)st.hedges,
           err);
    CHECK(check_bytes(buf, 0, sizeof buf));
    CHECKF(ps_now_ns() - t0 < 2500000000ull, "hedged read took %.2f s", (ps_now_ns() - t0) / 1e9);
    return 0;
}

static int test_http_faults(void)
{
    struct ps_io_opts o;
    struct ps_io *io;
    char err[PS_ERRLEN];
    unsigned char *buf = malloc(OBJ);
    struct ps_io_stats st;
    int rc;

    if (server_up() < 0)
        SKIP("cannot listen");
    opts(&o);
    o.retries = 8;
    o.fault = "seed=7,error=0.2,reset=0.1,short=0.1";
    rc = ps_io_open(U("/ok/f"), &o, &io, err);
    if (rc == -ENOSYS)
        SKIP("fault injection not built");
    CHECK_RC(rc);
    for (int i = 0; i < 32; i++)
        CHECKF(ps_io_pread(io, buf + i * (OBJ / 32), OBJ / 32, (uint64_t)i * (OBJ / 32)) == OBJ / 32, "%s",
               ps_io_errmsg(io));
    ps_io_stats(io, &st);
    ps_io_close(io);
    CHECK(check_bytes(buf, 0, OBJ));
    /* each injected fault costs exactly one retry */
    CHECKF(st.faults > 5 && st.retries == st.faults && st.errors == 0, "faults %llu retries %llu",
           (unsigned long long)st.faults, (unsigned long long)st.retries);
    free(buf);
    return 0;
}

static int test_http_fault_stall(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char *buf = malloc(65536);
    struct ps_io_stats st;
    uint64_t t0;
    int64_t rc;

    if (server_up() < 0)
        SKIP("cannot listen");
    opts(&o);
    o.retries = 2;
    /* a stall shorter than the timeout only slows the read down */
    o.fault = "seed=1,stall=1,stall_ms=300";
    t0 = ps_now_ns();
    rc = read_range(U("/ok/s"), &o, 0, 65536, buf, err, &st);
    if (rc == -ENOSYS)
        SKIP("fault injection not built");
    CHECKF(rc == 65536 && st.retries == 0 && st.faults == 1, "%lld %s", (long long)rc, err);
    CHECK(check_bytes(buf, 0, 65536));
    CHECKF(ps_now_ns() - t0 >= 280000000ull, "%.3f s", (ps_now_ns() - t0) / 1e9);
    /* a longer one trips the timeout on every attempt: bounded failure */
    o.fault = "seed=1,stall=1,stall_ms=5000";
    t0 = ps_now_ns();
    rc = read_range(U("/ok/s"), &o, 0, 65536, buf, err, &st);
    CHECKF(rc == -ETIMEDOUT && strstr(err, "no data for 1.0 s") && strstr(err, "gave up after 2 attempts"), "%lld %s",
           (long long)rc, err);
    CHECKF(ps_now_ns() - t0 < 4000000000ull, "%.3f s", (ps_now_ns() - t0) / 1e9);
    free(buf);
    return 0;
}

/* ------------------------------------------------------------------ */
/* S3 against the scripted server                                      */

static void s3_env(const char *token)
{
    char ep[64];
    clear_aws_env();
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", S.port);
    setenv("AWS_ENDPOINT_URL", ep, 1);
    setenv("AWS_ACCESS_KEY_ID", "AKIDTEST", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "SECRET-SENTINEL-xyz", 1);
    if (token)
        setenv("AWS_SESSION_TOKEN", token, 1);
}

static int test_s3_signed_request(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char buf[1000];

    if (server_up() < 0)
        SKIP("cannot listen");
    s3_env(NULL);
    opts(&o);
    CHECKF(read_range("s3://s3ok/dir/a b=c+d.bin", &o, 10, sizeof buf, buf, err, NULL) == sizeof buf, "%s", err);
    CHECK(check_bytes(buf, 10, sizeof buf));
    /* path-style for a custom endpoint; the key encoded by us, '/' kept */
    CHECKF(!strcmp(S.last_path, "/s3ok/dir/a%20b%3Dc%2Bd.bin"), "%s", S.last_path);
    CHECKF(strstr(S.last_auth, "SignedHeaders=") && strstr(S.last_auth, "x-amz-content-sha256") &&
               !strcmp(S.last_sha, "UNSIGNED-PAYLOAD") && !strstr(S.last_auth, "SECRET-SENTINEL"),
           "%s", S.last_auth);
    CHECK(!S.last_token[0]);
    clear_aws_env();
    return 0;
}

static int test_s3_virtual_hosted(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN], ep[64], res[96], host[96];
    unsigned char buf[100];

    if (server_up() < 0)
        SKIP("cannot listen");
    s3_env(NULL);
    unsetenv("AWS_ENDPOINT_URL");
    opts(&o);
    snprintf(ep, sizeof ep, "http://s3.amazonaws.com:%d", S.port);
    snprintf(res, sizeof res, "s3ok.s3.amazonaws.com:%d:127.0.0.1", S.port);
    o.endpoint = ep;
    o.resolve = res;
    o.addressing = 2;
    CHECKF(read_range("s3://s3ok/k.bin", &o, 0, sizeof buf, buf, err, NULL) == sizeof buf, "%s", err);
    snprintf(host, sizeof host, "s3ok.s3.amazonaws.com:%d", S.port);
    CHECKF(!strcmp(S.last_host, host) && !strcmp(S.last_path, "/k.bin"), "%s %s", S.last_host, S.last_path);
    /* virtual-hosted with an IP endpoint cannot work: refused up front */
    snprintf(ep, sizeof ep, "http://127.0.0.1:%d", S.port);
    CHECK(read_range("s3://s3ok/k.bin", &o, 0, sizeof buf, buf, err, NULL) == PS_ECONFIG);
    CHECKF(strstr(err, "virtual-hosted"), "%s", err);
    clear_aws_env();
    return 0;
}

static int test_s3_errors(void)
{
    struct ps_io_opts o;
    char err[PS_ERRLEN];
    unsigned char buf[100];
    int64_t rc;

    if (server_up() < 0)
        SKIP("cannot listen");
    s3_env("TOKEN-SENTINEL-123");
    opts(&o);
    rc = read_range("s3://sig/key", &o, 0, sizeof buf, buf, err, NULL);
    CHECKF(rc == PS_EAUTH && strstr(err, "s3://sig/key (endpoint http://127.0.0.1:") &&
               strstr(err, "signature mismatch: check AWS_SECRET_ACCESS_KEY"),
           "%lld %s", (long long)rc, err);
    CHECKF(!strstr(err, "SECRET-SENTINEL") && !strstr(err, "TOKEN-SENTINEL"), "secret in: %s", err);
    /* the token is sent as x-amz-security-token, signed, with the payload header */
    rc = read_range("s3://tok/key", &o, 0, sizeof buf, buf, err, NULL);
    CHECKF(rc == PS_EAUTH && strstr(err, "session token refused (InvalidToken)") && !strstr(err, "TOKEN-SENTINEL"),
           "%lld %s", (long long)rc, err);
    rc = read_range("s3://reg/key", &o, 0, sizeof buf, buf, err, NULL);
    CHECKF(rc == PS_ECONFIG && strstr(err, "wrong region us-east-1") && strstr(err, "AWS_REGION=eu-west-1"),
           "%lld %s", (long long)rc, err);
    rc = read_range("s3://nob/key", &o, 0, sizeof buf, buf, err, NULL);
    CHECKF(rc == -ENOENT && strstr(err, "no such bucket \"nob\""), "%lld %s", (long long)rc, err);
    /* a wrong key id: AccessDenied here, named with where the credentials came from */
    setenv("AWS_ACCESS_KEY_ID", "OTHER", 1);
    rc = read_range("s3://s3ok/key", &o, 0, sizeof buf, buf, err, NULL);
    CHECKF(rc == PS_EAUTH && strstr(err, "access denied (credentials from environment)"), "%lld %s", (long long)rc,
           err);
    /* no credentials anywhere: an unsigned request, and a hint when it is refused */
    unsetenv("AWS_ACCESS_KEY_ID");
    unsetenv("AWS_SECRET_ACCESS_KEY");
    unsetenv("AWS_SESSION_TOKEN");
    setenv("HOME", "/nonexistent", 1);
    rc = read_range("s3://s3ok/key", &o, 0, sizeof buf, buf, err, NULL);
    CHECKF(rc == PS_EAUTH && strstr(err, "access denied to an anonymous request: set AWS_ACCESS_KEY_ID"), "%lld %s",
           (long long)rc, err);
    CHECK(!strstr(S.last_auth, "AWS4-HMAC-SHA256"));
    clear_aws_env();
    return 0;
}

static int test_s3_config_errors(void)
{
    struct ps_io_opts o;
    struct ps_io *io;
    char err[PS_ERRLEN];

    clear_aws_env();
    opts(&o);
    o.region = "us-east-1:evil";
    CHECK(ps_io_open("s3://b/k", &o, &io, err) == PS_ECONFIG);
    CHECKF(strstr(err, "region"), "%s", err);
    o.region = NULL;
    o.endpoint = "ftp://x";
    CHECK(ps_io_open("s3://b/k", &o, &io, err) == PS_ECONFIG);
    o.endpoint = "http://user:pw@h";
    CHECK(ps_io_open("s3://b/k", &o, &io, err) == PS_ECONFIG);
    CHECKF(!strstr(err, "pw"), "%s", err);
    return 0;
}

T_MAIN(T(test_url_good), T(test_url_bad), T(test_url_message_redacted), T(test_open_bad_url),
       T(test_creds_parse), T(test_creds_parse_bad), T(test_creds_load), T(test_creds_scrub),
       T(test_content_range), T(test_retry_after), T(test_status_etag_xml), T(test_backoff),
       T(test_http_ok), T(test_http_norange), T(test_http_bad_answers), T(test_http_retries), T(test_http_stall),
       T(test_http_hedge), T(test_http_faults), T(test_http_fault_stall), T(test_s3_signed_request), T(test_s3_virtual_hosted),
       T(test_s3_errors), T(test_s3_config_errors))
