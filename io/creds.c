/*
 * creds.c - AWS credentials: environment, the shared credentials file
 * (strict INI parser with bounds), else anonymous. Secrets never reach a message.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "io/creds.h"
#include "io/io_int.h"

#define CREDS_FILE_MAX (1 << 20)
#define LINE_MAX_LEN 8192

static void trim(const char **s, const char **e)
{
    while (*s < *e && (**s == ' ' || **s == '\t'))
        (*s)++;
    while (*e > *s && ((*e)[-1] == ' ' || (*e)[-1] == '\t' || (*e)[-1] == '\r'))
        (*e)--;
}

static int key_is(const char *k, size_t kl, const char *name)
{
    return kl == strlen(name) && strncasecmp(k, name, kl) == 0;
}

static int store(char *dst, size_t cap, const char *v, size_t vl, const char *fname, int line,
                 const char *key, char *err)
{
    if (vl >= cap)
        return ps_seterr(err, PS_ECONFIG, "%s: line %d: value of %s too long", fname, line, key);
    memcpy(dst, v, vl);
    dst[vl] = 0;
    return 0;
}

int ps_creds_parse(const char *text, size_t len, const char *profile, const char *fname,
                   struct ps_creds *c, char *err)
{
    const char *p = text, *end = text + len;
    int line = 0, in_section = 0, found = 0, seen_any_section = 0;
    size_t plen = strlen(profile);

    if (memchr(text, 0, len))
        return ps_seterr(err, PS_ECONFIG, "%s: contains a NUL byte (not a text file?)", fname);
    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *s = p, *e = nl ? nl : end, *eq;
        line++;
        p = nl ? nl + 1 : end;
        if (e - s > LINE_MAX_LEN)
            return ps_seterr(err, PS_ECONFIG, "%s: line %d: longer than %d bytes", fname, line, LINE_MAX_LEN);
        trim(&s, &e);
        if (s == e || *s == '#' || *s == ';')
            continue;
        for (const char *q = s; q < e; q++)
            if ((unsigned char)*q < 0x20 && *q != '\t')
                return ps_seterr(err, PS_ECONFIG, "%s: line %d: control character", fname, line);
        if (*s == '[') {
            const char *ns = s + 1, *ne = e - 1;
            if (e - s < 2 || *ne != ']')
                return ps_seterr(err, PS_ECONFIG, "%s: line %d: section header without ']'", fname, line);
            trim(&ns, &ne);
            if (ns == ne)
                return ps_seterr(err, PS_ECONFIG, "%s: line %d: empty section name", fname, line);
            if (memchr(ns, '[', (size_t)(ne - ns)) || memchr(ns, ']', (size_t)(ne - ns)))
                return ps_seterr(err, PS_ECONFIG, "%s: line %d: bad section name", fname, line);
            seen_any_section = 1;
            in_section = (size_t)(ne - ns) == plen && memcmp(ns, profile, plen) == 0;
            if (in_section)
                found = 1;
            continue;
        }
        eq = memchr(s, '=', (size_t)(e - s));
        if (!eq)
            return ps_seterr(err, PS_ECONFIG, "%s: line %d: expected \"[profile]\" or \"key = value\"", fname, line);
        if (!seen_any_section)
            return ps_seterr(err, PS_ECONFIG, "%s: line %d: key before any [profile] section", fname, line);
        {
            const char *ks = s, *ke = eq, *vs = eq + 1, *ve = e;
            int rc = 0;
            trim(&ks, &ke);
            trim(&vs, &ve);
            if (ks == ke)
                return ps_seterr(err, PS_ECONFIG, "%s: line %d: empty key", fname, line);
            for (const char *q = ks; q < ke; q++)
                if (!isalnum((unsigned char)*q) && *q != '_' && *q != '-' && *q != '.')
                    return ps_seterr(err, PS_ECONFIG, "%s: line %d: bad key name", fname, line);
            if (!in_section)
                continue;
            if (memchr(vs, '\t', (size_t)(ve - vs)))
                return ps_seterr(err, PS_ECONFIG, "%s: line %d: tab inside a value", fname, line);
            if (key_is(ks, (size_t)(ke - ks), "aws_access_key_id"))
                rc = store(c->access_key, sizeof c->access_key, vs, (size_t)(ve - vs), fname, line,
                           "aws_access_key_id", err);
            else if (key_is(ks, (size_t)(ke - ks), "aws_secret_access_key"))
                rc = store(c->secret, sizeof c->secret, vs, (size_t)(ve - vs), fname, line,
                           "aws_secret_access_key", err);
            else if (key_is(ks, (size_t)(ke - ks), "aws_session_token") ||
                     key_is(ks, (size_t)(ke - ks), "aws_security_token"))
                rc = store(c->token, sizeof c->token, vs, (size_t)(ve - vs), fname, line,
                           "aws_session_token", err);
            if (rc)
                return rc;
        }
    }
    return found;
}

static int has_ctl(const char *s)
{
    for (; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            return 1;
    return 0;
}

static int from_env(struct ps_creds *c, int *have, char *err)
{
    const char *k = getenv("AWS_ACCESS_KEY_ID"), *s = getenv("AWS_SECRET_ACCESS_KEY");
    const char *t = getenv("AWS_SESSION_TOKEN");

    *have = 0;
    if (!t || !*t)
        t = getenv("AWS_SECURITY_TOKEN");
    if ((!k || !*k) && (!s || !*s))
        return 0;
    if (!k || !*k)
        return ps_seterr(err, PS_ECONFIG, "AWS_SECRET_ACCESS_KEY is set but AWS_ACCESS_KEY_ID is not");
    if (!s || !*s)
        return ps_seterr(err, PS_ECONFIG, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
    /* they go into request headers: a CR or LF would forge headers */
    if (has_ctl(k) || has_ctl(s) || (t && has_ctl(t)))
        return ps_seterr(err, PS_ECONFIG, "AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY or AWS_SESSION_TOKEN "
                                          "contains a control character");
    if (strlen(k) >= sizeof c->access_key)
        return ps_seterr(err, PS_ECONFIG, "AWS_ACCESS_KEY_ID is too long");
    if (strlen(s) >= sizeof c->secret)
        return ps_seterr(err, PS_ECONFIG, "AWS_SECRET_ACCESS_KEY is too long");
    if (t && strlen(t) >= sizeof c->token)
        return ps_seterr(err, PS_ECONFIG, "AWS_SESSION_TOKEN is too long");
    snprintf(c->access_key, sizeof c->access_key, "%s", k);
    snprintf(c->secret, sizeof c->secret, "%s", s);
    snprintf(c->token, sizeof c->token, "%s", t ? t : "");
    snprintf(c->source, sizeof c->source, "environment");
    snprintf(c->hint, sizeof c->hint, "check AWS_SECRET_ACCESS_KEY");
    *have = 1;
    return 0;
}

static int creds_path(char *out, size_t n, char *err)
{
    const char *f = getenv("AWS_SHARED_CREDENTIALS_FILE"), *home;
    int w;

    if (f && *f)
        w = snprintf(out, n, "%s", f);
    else {
        home = getenv("HOME");
        if (!home || !*home) {
            struct passwd *pw = getpwuid(getuid());
            home = pw ? pw->pw_dir : NULL;
        }
        if (!home)
            return 0;
        w = snprintf(out, n, "%s/.aws/credentials", home);
    }
    if (w < 0 || (size_t)w >= n)
        return ps_seterr(err, PS_ECONFIG, "credentials file path too long");
    return 1;
}

/* 1 loaded, 0 file or profile absent (message in err when "must"), <0 error */
static int from_file(const char *profile, int must, struct ps_creds *c, char *err)
{
    char path[512], *buf;
    struct stat st;
    ssize_t got;
    size_t off = 0;
    int fd, rc;

    rc = creds_path(path, sizeof path, err);
    if (rc <= 0)
        return must && rc == 0 ? ps_seterr(err, PS_ECONFIG, "profile %s: no home folder to find ~/.aws/credentials in", profile) : rc;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno == ENOENT && !must)
            return 0;
        return ps_seterr(err, -errno, "%s: %s%s%s%s", path, strerror(errno),
                         must ? " (needed for profile " : "", must ? profile : "", must ? ")" : "");
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > CREDS_FILE_MAX) {
        close(fd);
        return ps_seterr(err, PS_ECONFIG, "%s: not a regular file of at most 1 MiB", path);
    }
    if (st.st_mode & (S_IRGRP | S_IROTH))
        ps_log(PS_LOG_WARN, "%s is readable by group or others (mode %03o): run chmod 600 %s",
               path, (unsigned)(st.st_mode & 0777), path);
    buf = malloc((size_t)st.st_size + 1);
    if (!buf) {
        close(fd);
        return ps_seterr(err, -ENOMEM, "out of memory");
    }
    while (off < (size_t)st.st_size && (got = read(fd, buf + off, (size_t)st.st_size - off)) > 0)
        off += (size_t)got;
    close(fd);
    rc = ps_creds_parse(buf, off, profile, path, c, err);
    explicit_bzero(buf, off);
    free(buf);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        if (must)
            return ps_seterr(err, PS_ECONFIG, "profile %s not found in %s", profile, path);
        return 0;
    }
    if (!c->access_key[0] || !c->secret[0]) {
        const char *missing = !c->access_key[0] ? "aws_access_key_id" : "aws_secret_access_key";
        ps_creds_wipe(c);
        return ps_seterr(err, PS_ECONFIG, "profile %s in %s: %s is missing or empty", profile, path, missing);
    }
    snprintf(c->source, sizeof c->source, "profile %s in %s", profile, path);
    snprintf(c->hint, sizeof c->hint, "check aws_secret_access_key of profile %.40s in the credentials file",
             profile);
    return 1;
}

int ps_creds_load(const char *profile, struct ps_creds *c, char *err)
{
    const char *envp = getenv("AWS_PROFILE");
    int have, rc;

    memset(c, 0, sizeof *c);
    /* like the AWS CLI: an explicit --profile beats the environment keys,
     * which beat $AWS_PROFILE and the default profile */
    if (profile && *profile) {
        rc = from_file(profile, 1, c, err);
        return rc < 0 ? rc : 0;
    }
    rc = from_env(c, &have, err);
    if (rc < 0 || have)
        return rc;
    if (envp && *envp) {
        rc = from_file(envp, 1, c, err);
        return rc < 0 ? rc : 0;
    }
    rc = from_file("default", 0, c, err);
    if (rc < 0)
        return rc;
    if (rc == 0) {
        memset(c, 0, sizeof *c);
        c->anonymous = 1;
        snprintf(c->source, sizeof c->source, "anonymous (no AWS_ACCESS_KEY_ID, no ~/.aws/credentials)");
        snprintf(c->hint, sizeof c->hint, "set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY");
    }
    return 0;
}

void ps_creds_wipe(struct ps_creds *c)
{
    explicit_bzero(c->access_key, sizeof c->access_key);
    explicit_bzero(c->secret, sizeof c->secret);
    explicit_bzero(c->token, sizeof c->token);
}

static void scrub_one(char *msg, const char *s)
{
    size_t sl = strlen(s);
    char *p, *from = msg;

    if (!sl)
        return;
    /* the replacement never grows the text; searching on after it ends the loop
     * even for a secret made of '*' */
    while ((p = strstr(from, s))) {
        if (sl >= 3) {
            memcpy(p, "***", 3);
            memmove(p + 3, p + sl, strlen(p + sl) + 1);
            from = p + 3;
        } else {
            memset(p, '*', sl);
            from = p + sl;
        }
    }
}

void ps_creds_scrub(const struct ps_creds *c, char *msg)
{
    scrub_one(msg, c->secret);
    scrub_one(msg, c->token);
}
