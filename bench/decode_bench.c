/* decode_bench.c - CPU cost of turning JPEGs into 224x224 training crops: FFCV's way (full decode,
 * then crop and resize) against crop-aware decode, with and without restart markers.
 *   decode_bench DIR_OR_LISTFILE [--threads N] [--crop 224] [--restart] [--rounds R] [--max N] */
#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>

#include <jpeglib.h>

#include "pagestream.h"
#include "decode/decode.h"
#include "decode/decode_int.h"

struct img {
    uint8_t *data;
    size_t len;
};

static struct img *imgs, *rst, *rst1;
static size_t nimg, capimg;
static uint32_t crop = 224;
static int threads = 2, passes = 0;

static int load_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return -errno;
    struct stat st;
    if (fstat(fileno(f), &st) || st.st_size < 4) {
        fclose(f);
        return -EINVAL;
    }
    uint8_t *b = malloc(st.st_size);
    if (!b || fread(b, 1, st.st_size, f) != (size_t)st.st_size) {
        free(b);
        fclose(f);
        return -EIO;
    }
    fclose(f);
    if (b[0] != 0xFF || b[1] != 0xD8) {
        free(b);
        return -EINVAL;
    }
    if (nimg == capimg) {
        capimg = capimg ? capimg * 2 : 256;
        imgs = realloc(imgs, capimg * sizeof *imgs);
    }
    imgs[nimg].data = b;
    imgs[nimg].len = st.st_size;
    nimg++;
    return 0;
}

static int cmpstr(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

static void load(const char *arg, size_t max)
{
    struct stat st;
    if (stat(arg, &st)) {
        fprintf(stderr, "decode_bench: %s: %s\n", arg, strerror(errno));
        exit(2);
    }
    char **names = NULL;
    size_t nn = 0, cap = 0;
    char line[4096];
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(arg);
        struct dirent *de;
        while (d && (de = readdir(d))) {
            size_t l = strlen(de->d_name);
            if (l < 5 || (strcasecmp(de->d_name + l - 4, ".jpg") && strcasecmp(de->d_name + l - 5, ".jpeg")))
                continue;
            snprintf(line, sizeof line, "%s/%s", arg, de->d_name);
            if (nn == cap) names = realloc(names, (cap = cap ? cap * 2 : 256) * sizeof *names);
            names[nn++] = strdup(line);
        }
        if (d) closedir(d);
    } else {
        FILE *f = fopen(arg, "r");
        while (f && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = 0;
            if (!line[0]) continue;
            if (nn == cap) names = realloc(names, (cap = cap ? cap * 2 : 256) * sizeof *names);
            names[nn++] = strdup(line);
        }
        if (f) fclose(f);
    }
    qsort(names, nn, sizeof *names, cmpstr);
    for (size_t i = 0; i < nn && nimg < max; i++)
        load_file(names[i]);
    for (size_t i = 0; i < nn; i++) free(names[i]);
    free(names);
    if (!nimg) {
        fprintf(stderr, "decode_bench: no JPEG in %s\n", arg);
        exit(2);
    }
}

/* ---- FFCV's way: full decode at scale 1 (as tjDecompress2 does), then crop + resize ---- */

struct full_err { struct jpeg_error_mgr pub; jmp_buf jb; };
static void full_exit(j_common_ptr ci) { longjmp(((struct full_err *)ci->err)->jb, 1); }

struct worker {
    int id, mode;
    struct ps_decoder *dec;
    struct jpeg_decompress_struct ci;
    struct full_err fe;
    uint8_t *buf;
    size_t cap;
    JSAMPROW *rows;
    size_t rowcap;
    struct ps_resizer rs;
    uint8_t *out;
    uint64_t done, errors;
    size_t n;               /* images to run over */
    int pass;
    double cpu_s;
};

enum { M_FULL_CROP, M_OURS, M_OURS_RST, M_OURS_RST1, M_OURS_RST_NOFAST, M_OURS_NOSCALE, M_FULL_ONLY, M_COUNT };
static const char *mode_name[M_COUNT] = {
    "(a) full decode + crop + resize (FFCV's way)",
    "(b) crop-aware decode + resize (ours)",
    "(c) (b) + restart every MCU row, fast path",
    "(e) (b) + restart every MCU, fast path",
    "(c') restart every MCU row, fast path off",
    "(b') crop-aware, DCT scaling off",
    "(d) full decode only (ceiling)",
};

static int full_decode(struct worker *w, const struct img *im, uint32_t *ow, uint32_t *oh)
{
    struct jpeg_decompress_struct *ci = &w->ci;
    if (setjmp(w->fe.jb)) {
        jpeg_abort_decompress(ci);
        return -1;
    }
    jpeg_mem_src(ci, im->data, im->len);
    jpeg_read_header(ci, TRUE);
    ci->out_color_space = JCS_RGB;
    ci->dct_method = JDCT_ISLOW;
    jpeg_start_decompress(ci);
    size_t stride = (size_t)ci->output_width * 3, need = stride * ci->output_height;
    if (need > w->cap) {
        w->buf = realloc(w->buf, need);
        w->cap = need;
    }
    if (ci->output_height > w->rowcap) {
        w->rows = realloc(w->rows, ci->output_height * sizeof *w->rows);
        w->rowcap = ci->output_height;
    }
    for (uint32_t y = 0; y < ci->output_height; y++)
        w->rows[y] = w->buf + y * stride;
    while (ci->output_scanline < ci->output_height)
        jpeg_read_scanlines(ci, w->rows + ci->output_scanline, ci->output_height - ci->output_scanline);
    *ow = ci->output_width;
    *oh = ci->output_height;
    jpeg_finish_decompress(ci);
    return 0;
}

static double thread_cpu(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *run(void *arg)
{
    struct worker *w = arg;
    struct ps_decode_params p;
    ps_decode_params_init(&p);
    p.out_h = p.out_w = crop;
    char err[PS_ERRLEN];
    double c0 = thread_cpu();
    for (size_t i = (size_t)w->id; i < w->n; i += (size_t)threads) {
        uint64_t seed = i * 1000003ULL + (uint64_t)w->pass;
        const struct img *im = (w->mode == M_OURS_RST || w->mode == M_OURS_RST_NOFAST) ? &rst[i] :
                               w->mode == M_OURS_RST1 ? &rst1[i] : &imgs[i];
        int rc = 0;
        if (w->mode == M_FULL_CROP || w->mode == M_FULL_ONLY) {
            uint32_t W, H;
            rc = full_decode(w, im, &W, &H);
            if (!rc && w->mode == M_FULL_CROP) {
                struct ps_crop c;
                ps_rrc_box(&p, W, H, seed, &c);
                rc = ps_resizer_run(&w->rs, w->buf, W, H, (size_t)W * 3, c.x, c.y, c.w, c.h,
                                    w->out, crop, crop, c.flip, PS_LAYOUT_NHWC);
            }
        } else {
            rc = ps_decode_jpeg(w->dec, im->data, im->len, seed, w->out, NULL, err);
        }
        if (rc)
            w->errors++;
        w->done++;
    }
    w->cpu_s = thread_cpu() - c0;
    return NULL;
}

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct mode_run {
    struct worker *ws;
    double best_ms, best_ips;
    uint64_t done, fast, errors;
};

static void mode_setup(struct mode_run *mr, int mode)
{
    memset(mr, 0, sizeof *mr);
    mr->ws = calloc((size_t)threads, sizeof *mr->ws);
    mr->best_ms = 1e30;
    mr->best_ips = 0;
    for (int t = 0; t < threads; t++) {
        struct worker *w = &mr->ws[t];
        w->id = t;
        w->mode = mode;
        w->out = malloc((size_t)crop * crop * 3);
        struct ps_decode_params p;
        ps_decode_params_init(&p);
        p.out_h = p.out_w = crop;
        p.use_restart = mode == M_OURS_RST || mode == M_OURS_RST1;
        ps_decoder_create(&p, &w->dec);
        if (mode == M_OURS_NOSCALE)
            ps_decoder_set_scales(w->dec, 0x80);
        else if (getenv("PS_SCALES"))   /* experiments: which M/8 scales may be used (bit M-1) */
            ps_decoder_set_scales(w->dec, (unsigned)strtoul(getenv("PS_SCALES"), NULL, 0));
        w->ci.err = jpeg_std_error(&w->fe.pub);
        w->fe.pub.error_exit = full_exit;
        jpeg_create_decompress(&w->ci);
        /* warm-up on a few images so buffers reach their size */
        w->n = nimg < 64 ? nimg : 64;
        run(w);
        w->n = nimg;
    }
}

/* One pass over all images on all threads; keeps the best round (least disturbed by other load). */
static void mode_round(struct mode_run *mr, int pass)
{
    pthread_t th[256];
    uint64_t f0 = 0, done = 0, errors = 0;
    double cpu = 0;
    for (int t = 0; t < threads; t++) {
        f0 += ps_decoder_fastpath_count(mr->ws[t].dec);
        mr->ws[t].pass = pass;
        mr->ws[t].done = mr->ws[t].errors = 0;
    }
    double t0 = now();
    for (int t = 0; t < threads; t++)
        pthread_create(&th[t], NULL, run, &mr->ws[t]);
    for (int t = 0; t < threads; t++)
        pthread_join(th[t], NULL);
    double wall = now() - t0;
    for (int t = 0; t < threads; t++) {
        cpu += mr->ws[t].cpu_s;
        done += mr->ws[t].done;
        errors += mr->ws[t].errors;
        mr->fast += ps_decoder_fastpath_count(mr->ws[t].dec);
    }
    mr->fast -= f0;
    mr->done += done;
    mr->errors += errors;
    if (cpu * 1000 / done < mr->best_ms)
        mr->best_ms = cpu * 1000 / done;
    if (done / wall > mr->best_ips)
        mr->best_ips = done / wall;
}

static void mode_free(struct mode_run *mr)
{
    for (int t = 0; t < threads; t++) {
        struct worker *w = &mr->ws[t];
        ps_decoder_destroy(w->dec);
        jpeg_destroy_decompress(&w->ci);
        ps_resizer_free(&w->rs);
        free(w->buf);
        free(w->rows);
        free(w->out);
    }
    free(mr->ws);
}

int main(int argc, char **argv)
{
    const char *src = NULL;
    int restart = 0;
    const char *only = NULL;
    size_t max = (size_t)-1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--threads") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--crop") && i + 1 < argc) crop = (uint32_t)atoi(argv[++i]);
        else if (!strcmp(argv[i], "--rounds") && i + 1 < argc) passes = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--max") && i + 1 < argc) max = (size_t)atol(argv[++i]);
        else if (!strcmp(argv[i], "--restart")) restart = 1;
        else if (!strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || argv[i][0] == '-') {
            fprintf(stderr, "usage: decode_bench DIR_OR_LISTFILE [--threads N] [--crop 224] [--restart] [--rounds R] [--max N] [--only abcde]\n"
                            "  --restart  also measure restart-marker copies (made here, losslessly)\n"
                            "  --only     run only the paths with these letters\n");
            return argv[i][1] == 'h' || argv[i][2] == 'h' ? 0 : 2;
        } else src = argv[i];
    }
    if (!src || threads < 1 || crop < 1) {
        fprintf(stderr, "usage: decode_bench DIR_OR_LISTFILE [--threads N] [--crop 224] [--restart]\n");
        return 2;
    }
    load(src, max);
    size_t bytes = 0;
    for (size_t i = 0; i < nimg; i++) bytes += imgs[i].len;
    uint64_t px = 0;
    for (size_t i = 0; i < nimg; i++) {
        uint32_t w, h;
        if (!ps_jpeg_dims(imgs[i].data, imgs[i].len, &w, &h)) px += (uint64_t)w * h;
    }
    if (!passes)
        passes = 5;
    printf("%zu JPEGs, mean %.1f KB, %.3f MP, %.2f bits/pixel; %d threads, crop %u\n", nimg,
           bytes / 1024.0 / nimg, px / 1e6 / nimg, bytes * 8.0 / px, threads, crop);
    if (restart) {
        for (int g = 0; g < 2; g++) {
            struct img *r = calloc(nimg, sizeof *r);
            size_t rbytes = 0;
            double t0 = now();
            char err[PS_ERRLEN];
            for (size_t i = 0; i < nimg; i++) {
                if (ps_jpeg_add_restarts_n(imgs[i].data, imgs[i].len, g ? 1 : 0, &r[i].data, &r[i].len, err)) {
                    fprintf(stderr, "decode_bench: image %zu: %s (kept as is)\n", i, err);
                    r[i].data = malloc(imgs[i].len);
                    memcpy(r[i].data, imgs[i].data, imgs[i].len);
                    r[i].len = imgs[i].len;
                }
                rbytes += r[i].len;
            }
            printf("copies with a restart marker every MCU%s: %.1f KB mean (%+.1f%%), %.2f ms per image to make\n",
                   g ? "" : " row", rbytes / 1024.0 / nimg, 100.0 * ((double)rbytes / bytes - 1), (now() - t0) * 1000 / nimg);
            if (g) rst1 = r; else rst = r;
        }
    }
    double ms[M_COUNT] = { 0 }, ips[M_COUNT] = { 0 };
    struct mode_run mr[M_COUNT];
    int on[M_COUNT];
    for (int m = 0; m < M_COUNT; m++) {
        on[m] = !((m == M_OURS_RST || m == M_OURS_RST1 || m == M_OURS_RST_NOFAST) && !restart) &&
                !(only && !strchr(only, mode_name[m][1]));
        if (on[m])
            mode_setup(&mr[m], m);
    }
    /* Rounds interleave the paths, so that load from elsewhere hits them alike. */
    for (int r = 0; r < passes; r++)
        for (int m = 0; m < M_COUNT; m++)
            if (on[m])
                mode_round(&mr[m], r);
    printf("%-46s %10s %14s   (best of %d rounds)\n", "path", "images/s", "CPU ms/image", passes);
    for (int m = 0; m < M_COUNT; m++) {
        if (!on[m])
            continue;
        ms[m] = mr[m].best_ms;
        ips[m] = mr[m].best_ips;
        printf("%-46s %10.0f %14.3f", mode_name[m], ips[m], ms[m]);
        if (m == M_OURS_RST || m == M_OURS_RST1)
            printf("   (fast path %.0f%% of decodes)", 100.0 * mr[m].fast / mr[m].done);
        if (mr[m].errors)
            printf("   %llu errors", (unsigned long long)mr[m].errors);
        printf("\n");
        mode_free(&mr[m]);
    }
    printf("ratio (b)/(a) CPU ms: %.2f", ms[M_OURS] / ms[M_FULL_CROP]);
    if (restart)
        printf("   (c)/(a): %.2f   (e)/(a): %.2f", ms[M_OURS_RST] / ms[M_FULL_CROP], ms[M_OURS_RST1] / ms[M_FULL_CROP]);
    printf("\n");
    return 0;
}
