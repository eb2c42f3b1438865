/*
 * creds.h - AWS credentials for s3.c (private to io/): environment, then the
 * shared credentials file, else anonymous.
 */
#ifndef PS_CREDS_H
#define PS_CREDS_H

#include <stddef.h>

struct ps_creds {
    char access_key[256];
    char secret[256];
    char token[4096];      /* session token; "" when none */
    int anonymous;         /* 1: no credentials found; requests are not signed */
    char source[600];      /* where they came from, for messages: "environment", "profile X in FILE" */
    char hint[160];        /* what to check when the signature is refused */
};

/**
 * Load credentials: $AWS_ACCESS_KEY_ID + $AWS_SECRET_ACCESS_KEY (+ $AWS_SESSION_TOKEN),
 * else the profile (@p profile if not NULL, else $AWS_PROFILE, else "default") of
 * $AWS_SHARED_CREDENTIALS_FILE or ~/.aws/credentials, else anonymous. A profile
 * named explicitly (argument or $AWS_PROFILE) wins over the environment keys and
 * must exist. Warns (ps_log) when the file is readable by group or others.
 * @return 0, or PS_ECONFIG / -errno with a message that never contains a secret.
 */
int ps_creds_load(const char *profile, struct ps_creds *c, char *err);

/**
 * Parse the INI text of a credentials file (@p fname only names it in messages)
 * and take the section @p profile into @p c.
 * @return 1 found, 0 profile absent, PS_ECONFIG malformed (line number in err,
 *         never the line's content).
 */
int ps_creds_parse(const char *text, size_t len, const char *profile, const char *fname,
                   struct ps_creds *c, char *err);

/** Overwrite the secrets in memory. */
void ps_creds_wipe(struct ps_creds *c);

/** Replace every occurrence of the secret and the session token in msg (NUL-terminated, edited in place) by "***". */
void ps_creds_scrub(const struct ps_creds *c, char *msg);

#endif
