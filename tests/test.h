/*
 * test.h - the unit-test harness: one function per behaviour, returning
 * 0 (pass), 1 (fail) or 77 (skip). main() runs them and prints
 * "ok NAME", "FAIL NAME: file:line: what" or "skip NAME: why" per test;
 * tests/run.sh counts those lines. ./test_x NAME runs one test.
 */
#ifndef PS_TEST_H
#define PS_TEST_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define T_SKIP 77

static const char *t_current;
static char t_why[1024];

static inline int t_failf(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static inline int t_failf(const char *file, int line, const char *fmt, ...)
{
    char msg[900];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(t_why, sizeof t_why, "%s:%d: %s", file, line, msg);
    return 1;
}

/* CHECK(cond) / CHECKF(cond, fmt, ...): fail the test with file and line. */
#define CHECK(c) do { if (!(c)) return t_failf(__FILE__, __LINE__, "%s", #c); } while (0)
#define CHECKF(c, ...) do { if (!(c)) return t_failf(__FILE__, __LINE__, __VA_ARGS__); } while (0)
/* CHECK_RC(expr): expr must return >= 0 */
#define CHECK_RC(e) do { long long t_rc_ = (long long)(e); \
    if (t_rc_ < 0) return t_failf(__FILE__, __LINE__, "%s returned %lld", #e, t_rc_); } while (0)
#define SKIP(...) do { snprintf(t_why, sizeof t_why, __VA_ARGS__); return T_SKIP; } while (0)

struct t_case { const char *name; int (*fn)(void); };
#define T(fn) { #fn, fn }

static inline int t_main(int argc, char **argv, const struct t_case *cases, size_t n)
{
    int failed = 0;
    for (size_t i = 0; i < n; i++) {
        if (argc > 1 && strcmp(argv[1], cases[i].name) != 0)
            continue;
        t_current = cases[i].name;
        t_why[0] = 0;
        fflush(stdout);
        int rc = cases[i].fn();
        if (rc == 0)
            printf("ok %s\n", cases[i].name);
        else if (rc == T_SKIP)
            printf("skip %s: %s\n", cases[i].name, t_why);
        else {
            printf("FAIL %s: %s\n", cases[i].name, t_why);
            failed++;
        }
        fflush(stdout);
    }
    return failed ? 1 : 0;
}
#define T_MAIN(...) int main(int argc, char **argv) { \
    static const struct t_case cases[] = { __VA_ARGS__ }; \
    return t_main(argc, argv, cases, sizeof cases / sizeof cases[0]); }

#endif
