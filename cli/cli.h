/*
 * cli.h - what the commands of the `pagestream` program share: the command
 * table entry points, messages and exit codes, option helpers for commands
 * that read a dataset, the progress bar and a small JSON printer.
 * Only cli/ prints or exits.
 */
#ifndef PS_CLI_H
#define PS_CLI_H

#include <stdint.h>
#include <stdio.h>

#include "pagestream.h"
#include "format/format.h"
#include "io/io.h"

/* exit codes */
#define CLI_OK 0
#define CLI_FAIL 1     /* the command ran and failed (bad file, I/O error, checksum mismatch) */
#define CLI_USAGE 2    /* wrong arguments */

/* Each command: argv[0] is the command name, options follow (GNU getopt_long order). */
int cmd_pack(int argc, char **argv);
int cmd_inspect(int argc, char **argv);
int cmd_verify(int argc, char **argv);
int cmd_cat(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_doctor(int argc, char **argv);
int cmd_convert(int argc, char **argv);

/* ---- messages (util.c) ---- */
/* The running command ("pack"), set by main; used in every message prefix. */
extern const char *cli_cmd;
/* "pagestream CMD: ..." on stderr */
void cli_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void cli_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prints the message and a pointer to --help; returns CLI_USAGE. */
int cli_usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Parse an unsigned integer / size argument of option NAME; 0 or CLI_USAGE (message printed). */
int cli_uint(const char *name, const char *arg, uint64_t max, uint64_t *out);
int cli_size(const char *name, const char *arg, uint64_t *out);
/* "4 MiB", "123.4 MB"-style sizes into buf (at least 32 bytes) */
const char *cli_bytes(uint64_t n, char *buf);
double cli_seconds(uint64_t t0_ns);

/* "sequential", "random", "quasi_random" (also "quasi-random", "quasi") <-> enum ps_order; -1 if unknown */
int cli_parse_order(const char *s, int *out);
const char *cli_order_name(int order);

/* ---- options of commands that read a dataset ---- */
/* long option ids; include CLI_READ_LONGOPTS in a getopt_long table and pass
 * unknown ids to cli_read_opt */
enum { CLI_OPT_DIRECT = 1000, CLI_OPT_QD, CLI_OPT_ENDPOINT, CLI_OPT_REGION, CLI_OPT_INSECURE, CLI_OPT_FIRST_FREE };
#define CLI_READ_LONGOPTS                                                    \
    { "direct", no_argument, NULL, CLI_OPT_DIRECT },                         \
    { "queue-depth", required_argument, NULL, CLI_OPT_QD },                  \
    { "endpoint", required_argument, NULL, CLI_OPT_ENDPOINT },               \
    { "region", required_argument, NULL, CLI_OPT_REGION },                   \
    { "insecure", no_argument, NULL, CLI_OPT_INSECURE }
#define CLI_READ_HELP                                                                        \
    "storage options:\n"                                                                     \
    "  --direct            O_DIRECT reads of local files (bypass the page cache)\n"          \
    "  --queue-depth N     reads in flight (io_uring) or parallel requests (HTTP, S3)\n"      \
    "  --endpoint URL      S3 endpoint (default $AWS_ENDPOINT_URL, else AWS)\n"              \
    "  --region NAME       S3 region (default $AWS_REGION, else us-east-1)\n"                \
    "  --insecure          do not verify TLS certificates (https, s3)\n"
/* 1: handled; 0: not a read option; CLI_USAGE: bad value (message printed) */
int cli_read_opt(int id, const char *arg, struct ps_io_opts *o);
/* Unknown option or missing argument after getopt_long returned '?' or ':'. */
int cli_bad_option(char **argv);

/* Open URL and its dataset; on failure prints the error and returns CLI_FAIL. */
int cli_open_dataset(const char *url, const struct ps_io_opts *o, struct ps_io **io, struct ps_dataset **ds);

/* SIGINT/SIGTERM/SIGHUP abort every open output (nothing stays under the
 * final name) and exit 128+signal; SIGPIPE is ignored so a closed "-o -"
 * pipe becomes a write error that is reported. */
void cli_outputs_abort_on_signal(void);

/* Write the dataset's tables and footer, then commit the output under its
 * name; prints the error. CLI_OK or CLI_FAIL (the caller closes both). */
int cli_finish_output(struct ps_writer *w, struct ps_out *out, const char *out_url);

/* ---- progress bar on stderr, only when stderr is a terminal ---- */
struct cli_progress {
    int on;
    const char *what;
    uint64_t total, t0, last;
};
void cli_progress_start(struct cli_progress *p, const char *what, uint64_t total);
/* cheap when called often: redraws at most ~8 times a second */
void cli_progress(struct cli_progress *p, uint64_t done, uint64_t bytes);
void cli_progress_end(struct cli_progress *p);

/* ---- a tiny JSON printer (no library): commas and escaping handled ---- */
struct cli_json {
    FILE *f;
    int depth;
    int need_comma[32];
};
void json_begin(struct cli_json *j, FILE *f);               /* opens the top object */
void json_end(struct cli_json *j);                          /* closes it, newline */
void json_obj(struct cli_json *j, const char *key);         /* key NULL inside arrays */
void json_obj_end(struct cli_json *j);
void json_arr(struct cli_json *j, const char *key);
void json_arr_end(struct cli_json *j);
void json_str(struct cli_json *j, const char *key, const char *v);
void json_int(struct cli_json *j, const char *key, int64_t v);
void json_uint(struct cli_json *j, const char *key, uint64_t v);
void json_num(struct cli_json *j, const char *key, double v);
void json_bool(struct cli_json *j, const char *key, int v);

#endif
