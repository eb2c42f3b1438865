/*
 * cmd_bench.c - `pagestream bench URL`: run the loader for some epochs and
 * report per epoch images/s, MB/s, CPU per image, read amplification, cache
 * hits, where the time went, peak RSS and shuffle quality.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "sampler/sampler.h"

static const char bench_help[] =
    "usage: pagestream bench URL [options]\n"
    "Stream a dataset (.pgs or .beton; path, file://, http(s)://, s3://, nfs://) through the loader\n"
    "and report per epoch: images/s, MB/s of payload, CPU ms per image, read amplification\n"
    "(bytes read / payload delivered), cache hits, time waiting on storage versus decode,\n"
    "peak RSS against the cache size, and shuffle quality (distinct classes per batch\n"
    "against a full permutation).\n"
    "\n"
    "options:\n"
    "  --epochs N          epochs to run (default 2)\n"
    "  --cache-size SIZE   page cache, e.g. 512M, 2G (default: from the cgroup limit)\n"
    "  --order ORDER       sequential | random | quasi_random (default quasi_random)\n"
    "  --batch-size N      samples per batch (default 256)\n"
    "  --threads N         decode workers (default: all cores)\n"
    "  --ring-depth N      batches assembled ahead (default 4)\n"
    "  --transform T       rrc (random resized crop) | center | none (raw bytes) (default rrc)\n"
    "  --crop N            output side in pixels (default 224)\n"
    "  --layout L          nhwc | nchw (default nhwc)\n"
    "  --seed N            shuffle / augmentation seed (default 0)\n"
    "  --rank R --world-size W   read the share of rank R of W\n"
    "  --keep-last         deliver the last partial batch (default: drop it)\n"
    "  --on-error E        fail | skip undecodable samples (default fail)\n"
    "  --fault SPEC        fault injection, e.g. seed=1,error=0.05 (tests)\n"
    "  --retries N         attempts per read (default 6)\n"
    "  --timeout-ms N      a read without progress for this long fails (default 30000)\n"
    "  --max-batches N     stop each epoch after N batches (quick looks)\n"
    "  --start-epoch E --start-batch B   begin at this position\n"
    "  --ids-out FILE      append one line per consumed batch: \"EPOCH BATCH id id ...\"\n"
    "  --resume            with --ids-out: continue after the last complete line of FILE\n"
    "                      (a crashed run restarted this way delivers the rest of the epoch exactly)\n"
    "  --json              machine-readable output\n"
    CLI_READ_HELP;

enum {
    OPT_EPOCHS = CLI_OPT_FIRST_FREE, OPT_CACHE, OPT_ORDER, OPT_BATCH, OPT_THREADS, OPT_RING, OPT_TRANSFORM,
    OPT_CROP, OPT_LAYOUT, OPT_SEED, OPT_RANK, OPT_WORLD, OPT_KEEP_LAST, OPT_ON_ERROR, OPT_FAULT, OPT_RETRIES,
    OPT_TIMEOUT, OPT_MAX_BATCHES, OPT_JSON, OPT_HELP, OPT_START_EPOCH, OPT_START_BATCH, OPT_IDS_OUT, OPT_RESUME
};

static const struct option bench_opts[] = {
    { "epochs", required_argument, NULL, OPT_EPOCHS },
    { "cache-size", required_argument, NULL, OPT_CACHE },
    { "order", required_argument, NULL, OPT_ORDER },
    { "batch-size", required_argument, NULL, OPT_BATCH },
    { "threads", required_argument, NULL, OPT_THREADS },
    { "ring-depth", required_argument, NULL, OPT_RING },
    { "transform", required_argument, NULL, OPT_TRANSFORM },
    { "crop", required_argument, NULL, OPT_CROP },
    { "layout", required_argument, NULL, OPT_LAYOUT },
    { "seed", required_argument, NULL, OPT_SEED },
    { "rank", required_argument, NULL, OPT_RANK },
    { "world-size", required_argument, NULL, OPT_WORLD },
    { "keep-last", no_argument, NULL, OPT_KEEP_LAST },
    { "on-error", required_argument, NULL, OPT_ON_ERROR },
    { "fault", required_argument, NULL, OPT_FAULT },
    { "retries", required_argument, NULL, OPT_RETRIES },
    { "timeout-ms", required_argument, NULL, OPT_TIMEOUT },
    { "max-batches", required_argument, NULL, OPT_MAX_BATCHES },
    { "json", no_argument, NULL, OPT_JSON },
    { "start-epoch", required_argument, NULL, OPT_START_EPOCH },
    { "start-batch", required_argument, NULL, OPT_START_BATCH },
    { "ids-out", required_argument, NULL, OPT_IDS_OUT },
    { "resume", no_argument, NULL, OPT_RESUME },
    { "help", no_argument, NULL, OPT_HELP },
    CLI_READ_LONGOPTS,
    { NULL, 0, NULL, 0 }
};

struct epoch_rec {
    uint64_t epoch, images, batches;
    double secs, images_s, mb_s, cpu_ms, amp, hit_rate, wait_io_s, wait_batch_s, diversity, decode_s;
    uint64_t bytes_read, payload;
};

/* Mean distinct labels per batch of a full permutation of this rank's share: the reference. */
static double random_diversity(const struct ps_dataset *ds, const struct ps_options *o)
{
    struct ps_sampler_input in = { 0 };
    struct ps_plan p;
    int64_t *labels;
    double d = 0;

    if (ds->label_field < 0 || ds->nsamples == 0)
        return 0;
    labels = malloc(ds->nsamples * sizeof *labels);
    if (!labels)
        return 0;
    for (uint64_t i = 0; i < ds->nsamples; i++)
        labels[i] = ps_ds_label(ds, i);
    in.nsamples = ds->nsamples;
    in.npages = ds->npages;
    in.page_first = ds->page_first;
    in.page_samples = ds->page_samples;
    in.order = PS_ORDER_RANDOM;
    in.seed = o->seed + 1;
    in.rank = (uint32_t)o->rank;
    in.world_size = (uint32_t)o->world_size;
    in.batch_size = o->batch_size;
    in.drop_last = 1;
    in.window = 1;
    if (ps_plan_make(&in, 0, &p) == 0) {
        d = ps_plan_class_diversity(&p, labels);
        ps_plan_free(&p);
    }
    free(labels);
    return d;
}

static volatile sig_atomic_t stop_signal;

static void on_signal(int sig)
{
    stop_signal = sig;
}

/* The position after the last complete line of an ids file; a torn last
 * line (the process was killed while writing it) is cut off. */
static int ids_resume_position(const char *path, uint64_t *epoch, uint64_t *batch)
{
    FILE *f = fopen(path, "r+");
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long good_end = 0;
    int found = 0;

    if (!f)
        return errno == ENOENT ? 0 : -errno;
    while ((len = getline(&line, &cap, f)) > 0) {
        unsigned long long e, b;
        if (line[len - 1] != '\n')
            break;
        if (sscanf(line, "%llu %llu", &e, &b) == 2) {
            *epoch = e;
            *batch = b + 1;
            found = 1;
        }
        good_end = ftell(f);
    }
    free(line);
    if (ftruncate(fileno(f), good_end) < 0) {
        fclose(f);
        return -errno;
    }
    fclose(f);
    return found;
}

/* One line per batch, written with a single write() so a crash leaves at
 * most one torn line. */
static int ids_write(int fd, const struct ps_batch *b)
{
    size_t cap = 48 + (size_t)b->n * 21, n;
    char *buf = malloc(cap);
    int rc = 0;

    if (!buf)
        return -ENOMEM;
    n = (size_t)snprintf(buf, cap, "%llu %llu", (unsigned long long)b->epoch, (unsigned long long)b->index);
    for (uint32_t i = 0; i < b->n; i++)
        n += (size_t)snprintf(buf + n, cap - n, " %llu", (unsigned long long)b->ids[i]);
    buf[n++] = '\n';
    if (write(fd, buf, n) != (ssize_t)n)
        rc = -errno;
    free(buf);
    return rc;
}

int cmd_bench(int argc, char **argv)
{
    struct ps_options o;
    struct ps_io_opts io;
    struct ps_io *mio = NULL;
    struct ps_dataset *ds = NULL;
    ps_loader *l = NULL;
    char err[PS_ERRLEN], b1[32], b2[32];
    uint64_t epochs = 2, v, max_batches = 0, t_open = 0;
    int json = 0, c, rc = CLI_OK;
    struct epoch_rec *recs = NULL;
    double ref_div = 0;
    const char *url;
    int64_t *labels_seen = NULL;
    size_t labels_cap = 0;
    const char *ids_path = NULL;
    int resume = 0, ids_fd = -1;
    struct sigaction sa, old_int, old_term;

    ps_options_init(&o);
    ps_io_opts_init(&io);
    optind = 1;
    opterr = 0; /* cli_bad_option says it once, in our words */
    while ((c = getopt_long(argc, argv, "h", bench_opts, NULL)) != -1) {
        switch (c) {
        case OPT_EPOCHS:
            if (cli_uint("--epochs", optarg, 100000, &epochs))
                return CLI_USAGE;
            break;
        case OPT_CACHE:
            if (cli_size("--cache-size", optarg, &o.cache_size))
                return CLI_USAGE;
            break;
        case OPT_ORDER:
            if (cli_parse_order(optarg, &o.order) < 0)
                return cli_usage_error("--order %s: use sequential, random or quasi_random", optarg);
            break;
        case OPT_BATCH:
            if (cli_uint("--batch-size", optarg, 1 << 20, &v))
                return CLI_USAGE;
            if (!v)
                return cli_usage_error("--batch-size must be 1 .. 1048576");
            o.batch_size = (uint32_t)v;
            break;
        case OPT_THREADS:
            if (cli_uint("--threads", optarg, 1024, &v))
                return CLI_USAGE;
            o.threads = (int)v;
            break;
        case OPT_RING:
            if (cli_uint("--ring-depth", optarg, 64, &v))
                return CLI_USAGE;
            if (!v)
                return cli_usage_error("--ring-depth must be 1 .. 64");
            o.ring_depth = (int)v;
            break;
        case OPT_TRANSFORM:
            if (!strcmp(optarg, "rrc") || !strcmp(optarg, "random_resized_crop"))
                o.transform = PS_TRANSFORM_RANDOM_RESIZED_CROP;
            else if (!strcmp(optarg, "center") || !strcmp(optarg, "center_crop"))
                o.transform = PS_TRANSFORM_CENTER_CROP;
            else if (!strcmp(optarg, "none"))
                o.transform = PS_TRANSFORM_NONE;
            else
                return cli_usage_error("--transform %s: use rrc, center or none", optarg);
            break;
        case OPT_CROP:
            if (cli_uint("--crop", optarg, 4096, &v))
                return CLI_USAGE;
            if (v < 8)
                return cli_usage_error("--crop must be 8 .. 4096");
            o.crop = (uint32_t)v;
            break;
        case OPT_LAYOUT:
            if (!strcmp(optarg, "nhwc"))
                o.layout = PS_LAYOUT_NHWC;
            else if (!strcmp(optarg, "nchw"))
                o.layout = PS_LAYOUT_NCHW;
            else
                return cli_usage_error("--layout %s: use nhwc or nchw", optarg);
            break;
        case OPT_SEED:
            if (cli_uint("--seed", optarg, UINT64_MAX, &o.seed))
                return CLI_USAGE;
            break;
        case OPT_RANK:
            if (cli_uint("--rank", optarg, 65535, &v))
                return CLI_USAGE;
            o.rank = (int)v;
            break;
        case OPT_WORLD:
            if (cli_uint("--world-size", optarg, 65536, &v))
                return CLI_USAGE;
            if (!v)
                return cli_usage_error("--world-size must be 1 .. 65536");
            o.world_size = (int)v;
            break;
        case OPT_KEEP_LAST:
            o.drop_last = 0;
            break;
        case OPT_ON_ERROR:
            if (!strcmp(optarg, "fail"))
                o.on_error = PS_ON_ERROR_FAIL;
            else if (!strcmp(optarg, "skip"))
                o.on_error = PS_ON_ERROR_SKIP;
            else
                return cli_usage_error("--on-error %s: use fail or skip", optarg);
            break;
        case OPT_FAULT:
            o.fault = optarg;
            io.fault = optarg;
            break;
        case OPT_RETRIES:
            if (cli_uint("--retries", optarg, 100, &v))
                return CLI_USAGE;
            if (!v)
                return cli_usage_error("--retries must be 1 .. 100");
            o.retries = (int)v;
            break;
        case OPT_TIMEOUT:
            if (cli_uint("--timeout-ms", optarg, 3600000, &v))
                return CLI_USAGE;
            if (!v)
                return cli_usage_error("--timeout-ms must be 1 .. 3600000");
            o.timeout_ms = (int)v;
            break;
        case OPT_MAX_BATCHES:
            if (cli_uint("--max-batches", optarg, UINT64_MAX, &max_batches))
                return CLI_USAGE;
            break;
        case OPT_JSON:
            json = 1;
            break;
        case OPT_START_EPOCH:
            if (cli_uint("--start-epoch", optarg, UINT64_MAX, &o.start_epoch))
                return CLI_USAGE;
            break;
        case OPT_START_BATCH:
            if (cli_uint("--start-batch", optarg, UINT64_MAX, &o.start_batch))
                return CLI_USAGE;
            break;
        case OPT_IDS_OUT:
            ids_path = optarg;
            break;
        case OPT_RESUME:
            resume = 1;
            break;
        case 'h':
        case OPT_HELP:
            fputs(bench_help, stdout);
            return CLI_OK;
        default: {
            int r = cli_read_opt(c, optarg, &io);
            if (r == 1)
                break;
            if (r == CLI_USAGE)
                return CLI_USAGE;
            return cli_bad_option(argv);
        }
        }
    }
    if (optind != argc - 1)
        return cli_usage_error(optind >= argc ? "missing URL" : "one URL expected");
    url = argv[optind];
    if (o.rank >= o.world_size)
        return cli_usage_error("--rank %d must be below --world-size %d", o.rank, o.world_size);
    if (resume && !ids_path)
        return cli_usage_error("--resume needs --ids-out FILE");
    if (resume) {
        int r = ids_resume_position(ids_path, &o.start_epoch, &o.start_batch);
        if (r < 0) {
            cli_error("%s: %s", ids_path, strerror(-r));
            return CLI_FAIL;
        }
        if (!json && r > 0)
            printf("resuming at epoch %llu, batch %llu (after the last complete line of %s)\n",
                   (unsigned long long)o.start_epoch, (unsigned long long)o.start_batch, ids_path);
    }
    if (ids_path) {
        ids_fd = open(ids_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (ids_fd < 0) {
            cli_error("%s: %s", ids_path, strerror(errno));
            return CLI_FAIL;
        }
    }
    /* Ctrl-C / SIGTERM: finish the batch in hand, close the loader, report */
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    o.direct = io.direct;
    o.queue_depth = io.queue_depth;
    o.endpoint = io.endpoint;
    o.region = io.region;
    o.insecure = io.insecure;
    /* the metadata read below is bounded by the same flags as the loader's reads */
    io.retries = o.retries;
    io.timeout_ms = o.timeout_ms;

    /* metadata alone, for the shuffle-quality reference */
    if (cli_open_dataset(url, &io, &mio, &ds) != CLI_OK) {
        rc = CLI_FAIL;
        goto out;
    }
    ref_div = random_diversity(ds, &o);

    t_open = ps_now_ns();
    rc = ps_loader_open(url, &o, &l, err);
    if (rc < 0) {
        cli_error("%s", err);
        rc = CLI_FAIL;
        goto out;
    }
    rc = CLI_OK;
    recs = calloc(epochs ? epochs : 1, sizeof *recs);
    if (!recs) {
        cli_error("out of memory");
        rc = CLI_FAIL;
        goto out;
    }
    {
        struct ps_stats st0;
        ps_loader_stats(l, &st0);
        if (!json)
            printf("bench %s: %llu samples, %llu pages of %s, order %s, batch %u, cache %s (%llu slots%s), "
                   "%s\n",
                   ds->name, (unsigned long long)st0.nsamples, (unsigned long long)st0.npages,
                   cli_bytes(st0.page_size, b1), cli_order_name(o.order), o.batch_size, cli_bytes(st0.mem_arena, b2),
                   (unsigned long long)st0.cache_slots, st0.unit_mode ? ", single-sample reads" : "",
                   o.transform == PS_TRANSFORM_NONE ? "raw bytes" : "decode + crop");
    }
    for (uint64_t e = 0; e < epochs; e++) {
        struct ps_stats s0, s1;
        struct cli_progress pr;
        uint64_t t0, nb = 0, images = 0, div_sum = 0, div_batches = 0;
        uint64_t total_b = ps_loader_epoch_batches(l);
        int r;

        if (max_batches && total_b > max_batches)
            total_b = max_batches;
        ps_loader_stats(l, &s0);
        t0 = ps_now_ns();
        if (e == 0) {
            /* the loader prefetches from open on: those reads and that time belong to epoch 0 */
            memset(&s0, 0, sizeof s0);
            t0 = t_open;
        }
        cli_progress_start(&pr, "epoch", total_b);
        for (;;) {
            struct ps_batch *b;
            r = ps_loader_next(l, &b);
            if (r == PS_EPOCH_END)
                break;
            if (r < 0) {
                cli_progress_end(&pr);
                cli_error("%s", ps_loader_errmsg(l));
                rc = CLI_FAIL;
                goto out;
            }
            if (ids_fd >= 0 && ids_write(ids_fd, b) < 0) {
                cli_error("%s: %s", ids_path, strerror(errno));
                ps_batch_release(b);
                rc = CLI_FAIL;
                goto out;
            }
            nb++;
            images += b->n;
            /* distinct labels in this batch */
            if (labels_cap < b->n) {
                int64_t *nl = realloc(labels_seen, b->n * sizeof *labels_seen);
                if (nl) {
                    labels_seen = nl;
                    labels_cap = b->n;
                }
            }
            if (labels_cap >= b->n) {
                uint32_t distinct = 0;
                for (uint32_t i = 0; i < b->n; i++) {
                    int seen = 0;
                    for (uint32_t k = 0; k < distinct && !seen; k++)
                        seen = labels_seen[k] == b->labels[i];
                    if (!seen)
                        labels_seen[distinct++] = b->labels[i];
                }
                div_sum += distinct;
                div_batches++;
            }
            ps_batch_release(b);
            if (pr.on) {
                /* payload so far, for the bar's MB/s (only on a terminal: stats take the loader's lock) */
                struct ps_stats sx;
                ps_loader_stats(l, &sx);
                cli_progress(&pr, nb, sx.payload_bytes - s0.payload_bytes);
            }
            if (stop_signal)
                break;
            if (max_batches && nb >= max_batches) {
                /* skip the rest of the epoch */
                uint64_t ep, bb;
                ps_loader_position(l, &ep, &bb);
                if (ps_loader_seek(l, ep + 1, 0) < 0) {
                    cli_error("%s", ps_loader_errmsg(l));
                    rc = CLI_FAIL;
                    goto out;
                }
                break;
            }
        }
        cli_progress_end(&pr);
        ps_loader_stats(l, &s1);
        if (stop_signal) {
            cli_warn("stopped by signal %d in epoch %llu after %llu batches", (int)stop_signal,
                     (unsigned long long)e, (unsigned long long)nb);
            epochs = e + 1;
        }
        {
            struct epoch_rec *rec = &recs[e];
            double secs = (double)(ps_now_ns() - t0) / 1e9;
            rec->epoch = e;
            rec->images = images;
            rec->batches = nb;
            rec->secs = secs;
            rec->images_s = secs > 0 ? (double)images / secs : 0;
            rec->payload = s1.payload_bytes - s0.payload_bytes;
            rec->bytes_read = s1.bytes_read - s0.bytes_read;
            rec->mb_s = secs > 0 ? (double)rec->payload / secs / 1e6 : 0;
            rec->cpu_ms = images ? (s1.decode_cpu_s - s0.decode_cpu_s) * 1000.0 / (double)images : 0;
            rec->amp = rec->payload ? (double)rec->bytes_read / (double)rec->payload : 0;
            {
                uint64_t h = s1.cache_hits - s0.cache_hits, m = s1.cache_misses - s0.cache_misses;
                rec->hit_rate = h + m ? (double)h / (double)(h + m) : 0;
            }
            rec->wait_io_s = s1.wait_io_s - s0.wait_io_s;
            rec->decode_s = s1.decode_cpu_s - s0.decode_cpu_s;
            rec->wait_batch_s = s1.wait_batch_s - s0.wait_batch_s;
            rec->diversity = div_batches ? (double)div_sum / (double)div_batches : 0;
            if (!json) {
                printf("epoch %llu: %llu images in %.2f s: %.0f images/s, %.1f MB/s payload, %.2f CPU ms/image, "
                       "read amplification %.3f, cache hits %.1f%%, workers decoded %.2f s and waited %.2f s on "
                       "storage, caller waited %.2f s, peak RSS %s, classes/batch %.1f (full permutation %.1f)\n",
                       (unsigned long long)e, (unsigned long long)images, secs, rec->images_s, rec->mb_s,
                       rec->cpu_ms, rec->amp, rec->hit_rate * 100, rec->decode_s, rec->wait_io_s, rec->wait_batch_s,
                       cli_bytes(s1.peak_rss, b1), rec->diversity, ref_div);
                fflush(stdout);
            }
        }
    }
    {
        struct ps_stats st;
        double imgs = 0, secs = 0, pay = 0, rd = 0;
        ps_loader_stats(l, &st);
        for (uint64_t e = 0; e < epochs; e++) {
            imgs += (double)recs[e].images;
            secs += recs[e].secs;
            pay += (double)recs[e].payload;
            rd += (double)recs[e].bytes_read;
        }
        if (json) {
            struct cli_json j;
            json_begin(&j, stdout);
            json_str(&j, "url", ds->name);
            json_str(&j, "order", cli_order_name(o.order));
            json_uint(&j, "batch_size", o.batch_size);
            json_uint(&j, "samples", st.nsamples);
            json_uint(&j, "pages", st.npages);
            json_uint(&j, "page_size", st.page_size);
            json_uint(&j, "cache_bytes", st.mem_arena);
            json_uint(&j, "cache_slots", st.cache_slots);
            json_bool(&j, "sample_reads", st.unit_mode);
            json_uint(&j, "window_pages", st.window_pages);
            json_uint(&j, "fixed_bytes", st.mem_fixed);
            json_uint(&j, "peak_rss", st.peak_rss);
            json_uint(&j, "retries", st.retries);
            json_uint(&j, "refetches", st.refetches);
            json_uint(&j, "decode_errors", st.decode_errors);
            json_num(&j, "reference_classes_per_batch", ref_div);
            json_arr(&j, "epochs");
            for (uint64_t e = 0; e < epochs; e++) {
                struct epoch_rec *r = &recs[e];
                json_obj(&j, NULL);
                json_uint(&j, "epoch", r->epoch);
                json_uint(&j, "images", r->images);
                json_uint(&j, "batches", r->batches);
                json_num(&j, "seconds", r->secs);
                json_num(&j, "images_per_s", r->images_s);
                json_num(&j, "payload_mb_per_s", r->mb_s);
                json_num(&j, "cpu_ms_per_image", r->cpu_ms);
                json_uint(&j, "bytes_read", r->bytes_read);
                json_uint(&j, "payload_bytes", r->payload);
                json_num(&j, "read_amplification", r->amp);
                json_num(&j, "cache_hit_rate", r->hit_rate);
                json_num(&j, "workers_decode_s", r->decode_s);
                json_num(&j, "workers_wait_storage_s", r->wait_io_s);
                json_num(&j, "caller_wait_s", r->wait_batch_s);
                json_num(&j, "classes_per_batch", r->diversity);
                json_obj_end(&j);
            }
            json_arr_end(&j);
            json_end(&j);
        } else {
            printf("summary: %.0f images in %.2f s, %.0f images/s, %.1f MB/s payload, read amplification %.3f, "
                   "peak RSS %s (cache %s + fixed %s), %llu retries, %llu re-reads\n",
                   imgs, secs, secs > 0 ? imgs / secs : 0, secs > 0 ? pay / secs / 1e6 : 0, pay > 0 ? rd / pay : 0,
                   cli_bytes(st.peak_rss, b1), cli_bytes(st.mem_arena, b2),
                   cli_bytes(st.mem_fixed, (char[32]){ 0 }), (unsigned long long)st.retries,
                   (unsigned long long)st.refetches);
        }
    }
out:
    if (ids_fd >= 0)
        close(ids_fd);
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    if (stop_signal && rc == CLI_OK)
        rc = 128 + (int)stop_signal;
    free(recs);
    free(labels_seen);
    ps_loader_close(l);
    ps_ds_close(ds);
    ps_io_close(mio);
    return rc;
}
