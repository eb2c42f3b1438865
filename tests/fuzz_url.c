/*
 * fuzz_url.c - libFuzzer target for the URL parser and the redaction of
 * URLs in messages (ps_url_parse, ps_url_redact).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/io_int.h"

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *url = malloc(size + 1), err[PS_ERRLEN], red[512];
    struct ps_url u;

    if (!url)
        return 0;
    memcpy(url, data, size);
    url[size] = 0;
    err[0] = 0;
    if (ps_url_parse(url, &u, err) == 0) {
        /* what the parser accepts is bounded and printable */
        if (strnlen(u.host, sizeof u.host) >= sizeof u.host || strnlen(u.path, sizeof u.path) >= sizeof u.path ||
            strnlen(u.query, sizeof u.query) >= sizeof u.query || u.port < 0 || u.port > 65535)
            abort();
        for (const char *p = u.host; *p; p++)
            if ((unsigned char)*p <= 0x20 || *p == 0x7f)
                abort();
        if (!u.host[0] || (strcmp(u.scheme, "s3") && u.path[0] != '/'))
            abort();
        sink += strlen(u.path) + strlen(u.query);
    } else {
        /* a message always names the URL without control characters */
        for (const char *p = err; *p; p++)
            if ((unsigned char)*p < 0x20)
                abort();
        sink += strlen(err);
    }
    ps_url_redact(url, red, sizeof red);
    if (strnlen(red, sizeof red) >= sizeof red)
        abort();
    {
        /* the password of scheme://user:pass@host never survives redaction
         * (checked when it is long enough to be told apart and occurs once) */
        const char *s = strstr(url, "://"), *at, *sl, *colon;
        if (s && (at = strchr(s + 3, '@')) && (!(sl = strchr(s + 3, '/')) || at < sl) &&
            (colon = memchr(s + 3, ':', (size_t)(at - s - 3)))) {
            char pw[64];
            size_t pl = (size_t)(at - colon - 1);
            if (pl >= 4 && pl < sizeof pw) {
                memcpy(pw, colon + 1, pl);
                pw[pl] = 0;
                if (strstr(url, pw) == colon + 1 && !strstr(colon + 1 + pl, pw) && strstr(red, pw))
                    abort();
            }
        }
    }
    free(url);
    return 0;
}
