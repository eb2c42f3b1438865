/*
 * util.c - what the CLI commands share: messages, argument parsing, opening
 * a dataset for reading, the terminal progress bar, the JSON printer.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"

const char *cli_cmd = NULL;

static void vmsg(const char *kind, const char *fmt, va_list ap)
{
    char line[2048];
    vsnprintf(line, sizeof line, fmt, ap);
    /* one fprintf per line so messages from threads do not interleave */
    if (cli_cmd)
        fprintf(stderr, "pagestream %s: %s%s\n", cli_cmd, kind, line);
    else
        fprintf(stderr, "pagestream: %s%s\n", kind, line);
}

void cli_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
}

void cli_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("warning: ", fmt, ap);
    va_end(ap);
}

int cli_usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg("", fmt, ap);
    va_end(ap);
    fprintf(stderr, "Try 'pagestream %s --help'.\n", cli_cmd ? cli_cmd : "");
    return CLI_USAGE;
}

int cli_uint(const char *name, const char *arg, uint64_t max, uint64_t *out)
{
    char *end;
    unsigned long long v;

    errno = 0;
    if (!arg || !*arg || *arg == '-' || *arg == '+')
        return cli_usage_error("%s: '%s' is not a number", name, arg ? arg : "");
    v = strtoull(arg, &end, 0);
    if (errno || *end)
        return cli_usage_error("%s: '%s' is not a number", name, arg);
    if (v > max)
        return cli_usage_error("%s: %llu is too large (at most %llu)", name, v, (unsigned long long)max);
    *out = v;
    return 0;
}

int cli_size(const char *name, const char *arg, uint64_t *out)
{
    if (ps_parse_size(arg, out) < 0)
        return cli_usage_error("%s: '%s' is not a size (examples: 4M, 512k, 1.5G, 65536)", name, arg);
    return 0;
}

const char *cli_bytes(uint64_t n, char *buf)
{
    static const char *units[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
    double v = (double)n;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    if (u == 0)
        snprintf(buf, 32, "%" PRIu64 " B", n);
    else if (v == floor(v))
        snprintf(buf, 32, "%.0f %s", v, units[u]);
    else
        snprintf(buf, 32, "%.1f %s", v, units[u]);
    return buf;
}

double cli_seconds(uint64_t t0_ns)
{
    return (double)(ps_now_ns() - t0_ns) / 1e9;
}

int cli_read_opt(int id, const char *arg, struct ps_io_opts *o)
{
    uint64_t v;
    switch (id) {
    case CLI_OPT_DIRECT:
        o->direct = 1;
        return 1;
    case CLI_OPT_QD:
        if (cli_uint("--queue-depth", arg, 4096, &v))
            return CLI_USAGE;
        if (v == 0)
            return cli_usage_error("--queue-depth: must be at least 1");
        o->queue_depth = (int)v;
        return 1;
    case CLI_OPT_ENDPOINT:
        o->endpoint = arg;
        return 1;
    case CLI_OPT_REGION:
        o->region = arg;
        return 1;
    case CLI_OPT_INSECURE:
        o->insecure = 1;
        return 1;
    default:
        return 0;
    }
}

int cli_bad_option(char **argv)
{
    const char *opt = argv[optind - 1];
    if (optopt && optopt < 256 && !(opt && opt[0] == '-' && opt[1] == '-'))
        return cli_usage_error("unknown option -%c or missing argument", optopt);
    return cli_usage_error("unknown option '%s' or missing argument", opt ? opt : "?");
}

int cli_open_dataset(const char *url, const struct ps_io_opts *o, struct ps_io **io, struct ps_dataset **ds)
{
    char err[PS_ERRLEN] = "";
    int rc;

    *ds = NULL;
    rc = ps_io_open(url, o, io, err);
    if (rc < 0) {
        cli_error("%s", *err ? err : ps_strerror(rc));
        return CLI_FAIL;
    }
    rc = ps_ds_open(*io, ps_io_name(*io), ds, err);
    if (rc < 0) {
        cli_error("%s", *err ? err : ps_strerror(rc));
        ps_io_close(*io);
        *io = NULL;
        return CLI_FAIL;
    }
    return 0;
}

/* ---- progress ---- */

void cli_progress_start(struct cli_progress *p, const char *what, uint64_t total)
{
    memset(p, 0, sizeof *p);
    p->on = isatty(STDERR_FILENO);
    p->what = what;
    p->total = total;
    p->t0 = ps_now_ns();
}

void cli_progress(struct cli_progress *p, uint64_t done, uint64_t bytes)
{
    char b[32], bar[41];
    uint64_t now;
    double s, frac;
    int fillw;

    if (!p->on)
        return;
    now = ps_now_ns();
    if (now - p->last < 125000000ull && done != p->total)
        return;
    p->last = now;
    s = (double)(now - p->t0) / 1e9;
    frac = p->total ? (double)done / (double)p->total : 0;
    if (frac > 1)
        frac = 1;
    fillw = (int)(frac * 40);
    memset(bar, '#', (size_t)fillw);
    memset(bar + fillw, '.', (size_t)(40 - fillw));
    bar[40] = 0;
    fprintf(stderr, "\r%s [%s] %" PRIu64 "/%" PRIu64 " %s %.0f MB/s", p->what, bar, done, p->total,
            cli_bytes(bytes, b), s > 0 ? (double)bytes / 1e6 / s : 0.0);
    if (frac > 0 && frac < 1)
        fprintf(stderr, " ETA %.0fs  ", s / frac - s);
    else
        fprintf(stderr, "        ");
    fflush(stderr);
}

void cli_progress_end(struct cli_progress *p)
{
    if (p->on && p->last)
        fprintf(stderr, "\r\033[K");
    p->on = 0;
}

/* ---- JSON ---- */

static void json_escape(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *c = (const unsigned char *)s; *c; c++) {
        switch (*c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default:
            if (*c < 0x20 || *c == 0x7f)
                fprintf(f, "\\u%04x", *c);
            else
                fputc(*c, f); /* UTF-8 passes through */
        }
    }
    fputc('"', f);
}

static void json_key(struct cli_json *j, const char *key)
{
    if (j->need_comma[j->depth])
        fputc(',', j->f);
    j->need_comma[j->depth] = 1;
    fputc('\n', j->f);
    for (int i = 0; i < j->depth; i++)
        fputs("  ", j->f);
    if (key) {
        json_escape(j->f, key);
        fputs(": ", j->f);
    }
}

static void json_open(struct cli_json *j, const char *key, char c)
{
    json_key(j, key);
    fputc(c, j->f);
    if (j->depth < 31)
        j->depth++;
    j->need_comma[j->depth] = 0;
}

static void json_close(struct cli_json *j, char c)
{
    int had = j->need_comma[j->depth];
    if (j->depth > 0)
        j->depth--;
    if (had) {
        fputc('\n', j->f);
        for (int i = 0; i < j->depth; i++)
            fputs("  ", j->f);
    }
    fputc(c, j->f);
}

void json_begin(struct cli_json *j, FILE *f)
{
    memset(j, 0, sizeof *j);
    j->f = f;
    fputc('{', f);
    j->depth = 1;
}

void json_end(struct cli_json *j)
{
    json_close(j, '}');
    fputc('\n', j->f);
    fflush(j->f);
}

void json_obj(struct cli_json *j, const char *key) { json_open(j, key, '{'); }
void json_obj_end(struct cli_json *j) { json_close(j, '}'); }
void json_arr(struct cli_json *j, const char *key) { json_open(j, key, '['); }
void json_arr_end(struct cli_json *j) { json_close(j, ']'); }

void json_str(struct cli_json *j, const char *key, const char *v)
{
    json_key(j, key);
    if (v)
        json_escape(j->f, v);
    else
        fputs("null", j->f);
}

void json_int(struct cli_json *j, const char *key, int64_t v)
{
    json_key(j, key);
    fprintf(j->f, "%" PRId64, v);
}

void json_uint(struct cli_json *j, const char *key, uint64_t v)
{
    json_key(j, key);
    fprintf(j->f, "%" PRIu64, v);
}

void json_num(struct cli_json *j, const char *key, double v)
{
    json_key(j, key);
    if (isfinite(v))
        fprintf(j->f, "%.6g", v);
    else
        fputs("null", j->f);
}

void json_bool(struct cli_json *j, const char *key, int v)
{
    json_key(j, key);
    fputs(v ? "true" : "false", j->f);
}

/* ---- signals for commands that write an output ---- */

static void abort_outputs_and_exit(int sig)
{
    ps_out_abort_all();
    _exit(128 + sig);
}

void cli_outputs_abort_on_signal(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = abort_outputs_and_exit;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

int cli_parse_order(const char *s, int *out)
{
    if (!strcmp(s, "sequential"))
        *out = PS_ORDER_SEQUENTIAL;
    else if (!strcmp(s, "random"))
        *out = PS_ORDER_RANDOM;
    else if (!strcmp(s, "quasi_random") || !strcmp(s, "quasi-random") || !strcmp(s, "quasi"))
        *out = PS_ORDER_QUASI_RANDOM;
    else
        return -1;
    return 0;
}

const char *cli_order_name(int order)
{
    return order == PS_ORDER_SEQUENTIAL ? "sequential" : order == PS_ORDER_RANDOM ? "random" : "quasi_random";
}

int cli_finish_output(struct ps_writer *w, struct ps_out *out, const char *out_url)
{
    char err[PS_ERRLEN];
    int rc;

    if ((rc = ps_writer_finish(w, err)) < 0) {
        cli_error("%s: %s", out_url, err);
        return CLI_FAIL;
    }
    if ((rc = ps_out_commit(out)) < 0) {
        const char *m = ps_out_errmsg(out);
        cli_error("%s: %s", out_url, *m ? m : ps_strerror(rc));
        return CLI_FAIL;
    }
    return CLI_OK;
}
