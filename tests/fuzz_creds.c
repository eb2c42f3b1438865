/*
 * fuzz_creds.c - libFuzzer target for the AWS credentials-file parser
 * (ps_creds_parse) and the scrubbing of secrets from messages.
 * The first line of the input names the profile to look up.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "io/creds.h"
#include "io/io_int.h"

static volatile size_t sink;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *nl = memchr(data, '\n', size);
    char profile[64] = "default", err[PS_ERRLEN], msg[PS_ERRLEN];
    struct ps_creds c;
    int rc;

    if (nl && (size_t)(nl - data) < sizeof profile && nl > data && !memchr(data, 0, (size_t)(nl - data))) {
        memcpy(profile, data, (size_t)(nl - data));
        profile[nl - data] = 0;
        size -= (size_t)(nl - data) + 1;
        data = nl + 1;
    }
    memset(&c, 0, sizeof c);
    err[0] = 0;
    rc = ps_creds_parse((const char *)data, size, profile, "fuzz.ini", &c, err);
    if (rc < 0 && !strstr(err, "fuzz.ini"))
        abort();
    if (strnlen(c.access_key, sizeof c.access_key) >= sizeof c.access_key ||
        strnlen(c.secret, sizeof c.secret) >= sizeof c.secret || strnlen(c.token, sizeof c.token) >= sizeof c.token)
        abort();
    /* no control characters reach a credential (they would corrupt a header) */
    for (const char *p = c.secret; *p; p++)
        if ((unsigned char)*p < 0x20 && *p != '\t')
            abort();
    if (c.secret[0] && rc >= 0) {
        snprintf(msg, sizeof msg, "x%sy%s", c.secret, c.token);
        ps_creds_scrub(&c, msg);
        if (strlen(c.secret) >= 3 && strstr(msg, c.secret))
            abort();
    }
    sink += strlen(c.access_key) + strlen(err) + (size_t)rc;
    ps_creds_wipe(&c);
    return 0;
}
