/*
 * fuzz_http.c - libFuzzer target for the parsers of server answers: status
 * line, Content-Range, Retry-After, ETag and the S3 XML error/UploadId body.
 * The first byte picks the parser; the rest is the field as received.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "io/http_int.h"

static volatile uint64_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const char *v = (const char *)data + 1;
    size_t n;
    char out[256];
    uint64_t a, b, t;
    int rc;

    if (size < 1)
        return 0;
    n = size - 1;
    switch (data[0] % 5) {
    case 0:
        rc = ps_http_parse_content_range(v, n, &a, &b, &t);
        /* an accepted range is one the engine may check a request against */
        if (rc == 0 && (a > b || (t != UINT64_MAX && b >= t)))
            abort();
        if (rc == 1 && (t == UINT64_MAX))
            abort();
        sink += (uint64_t)rc + a + b + t;
        break;
    case 1: {
        int64_t ms = ps_http_parse_retry_after(v, n, 1700000000, 30000);
        if (ms < -1 || ms > 30000)
            abort();
        sink += (uint64_t)ms;
        break;
    }
    case 2:
        rc = ps_http_parse_status(v, n, out, sizeof out);
        if (rc != -1 && (rc < 100 || rc > 999))
            abort();
        for (const char *p = out; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                abort();
        sink += (uint64_t)rc;
        break;
    case 3:
        rc = ps_http_parse_etag(v, n, out, sizeof out);
        if (rc >= 0 && (out[0] != '"' || out[strlen(out) - 1] != '"' || strlen(out) < 2))
            abort();
        sink += (uint64_t)rc;
        break;
    default:
        for (int i = 0; i < 4; i++) {
            static const char *tags[] = { "Code", "Message", "UploadId", "Region" };
            rc = ps_xml_text(v, n, tags[i], out, sizeof out);
            if (rc == 0 && strnlen(out, sizeof out) >= sizeof out)
                abort();
            for (const char *p = out; *p; p++)
                if ((unsigned char)*p < 0x20)
                    abort();
            sink += (uint64_t)rc;
        }
        break;
    }
    return 0;
}
