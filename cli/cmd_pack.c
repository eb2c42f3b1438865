/*
 * cmd_pack.c - `pagestream pack SRC -o OUT`: images of an ImageFolder tree
 * or a list file into a .pgs dataset. Worker threads read, check and resize
 * images; this thread appends them to the writer in (shuffled) order.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>
#include <setjmp.h>

#include <jpeglib.h>
#include <jerror.h>

#include "cli/cli.h"
#include "decode/decode.h"

/*
 * 4 MiB: see FORMAT.md "Choosing the page size". In short: at 4 MiB one
 * request moves enough bytes that per-request latency (S3/HTTP first byte,
 * NFS round trips) costs little, while a page still holds ~40 ImageNet-size
 * images, so page-level shuffling stays fine-grained and a cache of a few
 * hundred MiB holds a wide shuffle window.
 */
#define DEFAULT_PAGE_SIZE (4u << 20)
#define MAX_WARNINGS 30

static const char usage_text[] =
    "usage: pagestream pack SRC -o OUT [options]\n\n"
    "Packs images into a .pgs dataset (fields: image, label).\n"
    "SRC is an ImageFolder directory (one subfolder per class; labels are the classes'\n"
    "positions in sorted name order, as torchvision assigns them; names starting with\n"
    "'.' are skipped, e.g. .ipynb_checkpoints, which torchvision would count) or a list file of\n"
    "PATH<TAB>LABEL lines (LABEL an integer, or a class name; relative paths are taken\n"
    "from the list file's folder; empty lines and lines starting with # are skipped).\n"
    "Input must be JPEG: PNG and other formats are refused (counted as skipped).\n"
    "Corrupt images are skipped with a warning, or stop the run with --strict.\n\n"
    "  -o, --output OUT        the dataset to write: a path (written under a temporary\n"
    "                          name, renamed when complete), - for stdout, or s3://\n"
    "  --page-size SIZE        page size, 64K..64M, a multiple of 4K (default 4M)\n"
    "  --max-side N            shrink images whose longer side exceeds N pixels (aspect\n"
    "                          kept) and re-encode them; others keep their original bytes\n"
    "  --quality Q             JPEG quality when re-encoding, 1-100 (default 90)\n"
    "  --mode jpeg|raw         store JPEG bytes (default) or decoded RGB pixels\n"
    "  --shuffle, --no-shuffle shuffle the samples (default on: pages must not be\n"
    "                          sorted by class for page-level shuffling to work)\n"
    "  --seed N                seed of the shuffle (default 0)\n"
    "  --threads N             worker threads (default: the cores available)\n"
    "  --strict                fail on the first image that cannot be packed\n"
    "  --no-validate           do not fully decode JPEGs kept as they are (faster; a\n"
    "                          corrupt JPEG is then found only when it is read)\n"
    "  --no-restart-markers    store JPEGs as they are. By default each JPEG is rewritten\n"
    "                          losslessly with a restart marker every MCU (Huffman tables\n"
    "                          optimised, so files stay about the same size): crops then\n"
    "                          skip the rows and columns they do not need, ~35% less CPU\n"
    "                          per image when training, for ~5 ms per image when packing\n"
    "  -q, --quiet             no summary\n"
    "  --endpoint URL, --region NAME, --insecure   for s3:// output\n"
    "  -h, --help              this text\n";

static const char *const img_ext[] = { ".jpg", ".jpeg", ".png", ".ppm", ".bmp", ".pgm",
                                       ".tif", ".tiff", ".webp", NULL };

struct item {
    char *path;
    int64_t label;
};

struct source {
    struct item *items;
    size_t n, cap;
    char **classes;
    uint32_t nclasses;
    uint64_t ignored;     /* files without an image extension */
};

struct cfg {
    uint32_t max_side;
    int quality;
    int raw;
    int restart;
    int validate;
};

struct result {
    uint8_t *data;
    size_t len;
    uint32_t w, h;
    uint64_t in_bytes;
    char *why;            /* skipped: the reason */
    int ready;
};

struct pool {
    const struct cfg *cfg;
    const struct item *items;
    size_t n;
    struct result *slots;
    size_t window;
    pthread_mutex_t lock;
    pthread_cond_t space, ready;
    size_t next_claim, written;
    int stop;
};

/* ---- sources ---- */

static int add_item(struct source *s, const char *path, int64_t label)
{
    if (s->n == s->cap) {
        size_t c = s->cap ? s->cap * 2 : 1024;
        struct item *p = realloc(s->items, c * sizeof *p);
        if (!p)
            return -ENOMEM;
        s->items = p;
        s->cap = c;
    }
    s->items[s->n].path = strdup(path);
    if (!s->items[s->n].path)
        return -ENOMEM;
    s->items[s->n++].label = label;
    return 0;
}

static void free_source(struct source *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->items[i].path);
    free(s->items);
    for (uint32_t c = 0; c < s->nclasses; c++)
        free(s->classes[c]);
    free(s->classes);
}

static int has_img_ext(const char *name)
{
    const char *dot = strrchr(name, '.');
    if (!dot)
        return 0;
    for (int i = 0; img_ext[i]; i++)
        if (strcasecmp(dot, img_ext[i]) == 0)
            return 1;
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Sorted names of the entries of dir (dirs or files, following symlinks). */
static int list_dir(const char *dir, int want_dirs, char ***out, size_t *n, uint64_t *ignored)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    char **v = NULL;
    size_t cap = 0;

    *n = 0;
    *out = NULL;
    if (!d)
        return -errno;
    while ((e = readdir(d))) {
        char p[PATH_MAX];
        struct stat st;
        /* hidden entries too: a stray .ipynb_checkpoints must not become a class */
        if (e->d_name[0] == '.')
            continue;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p || stat(p, &st) < 0)
            continue;
        if (want_dirs ? !S_ISDIR(st.st_mode) : !S_ISREG(st.st_mode))
            continue;
        if (!want_dirs && !has_img_ext(e->d_name)) {
            (*ignored)++;
            continue;
        }
        if (*n == cap) {
            cap = cap ? cap * 2 : 64;
            char **nv = realloc(v, cap * sizeof *nv);
            if (!nv)
                goto nomem;
            v = nv;
        }
        if (!(v[*n] = strdup(e->d_name)))
            goto nomem;
        (*n)++;
    }
    closedir(d);
    if (*n)
        qsort(v, *n, sizeof *v, cmp_str);
    *out = v;
    return 0;
nomem:
    closedir(d);
    for (size_t i = 0; i < *n; i++)
        free(v[i]);
    free(v);
    return -ENOMEM;
}

static void free_names(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* Files of a class folder, subfolders included (files first, then each subfolder in order). */
static int walk_class(struct source *s, const char *dir, int64_t label, int depth)
{
    char **names;
    size_t n;
    int rc;

    if (depth > 16)
        return 0; /* symlink loop or absurd depth */
    if ((rc = list_dir(dir, 0, &names, &n, &s->ignored)))
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        rc = add_item(s, p, label);
    }
    free_names(names, n);
    if (rc || (rc = list_dir(dir, 1, &names, &n, &s->ignored)))
        return rc;
    for (size_t i = 0; i < n && !rc; i++) {
        char p[PATH_MAX];
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        rc = walk_class(s, p, label, depth + 1);
    }
    free_names(names, n);
    return rc;
}

static int scan_imagefolder(const char *root, struct source *s)
{
    char **cls;
    size_t n;
    int rc = list_dir(root, 1, &cls, &n, &s->ignored);

    if (rc) {
        cli_error("%s: %s", root, ps_strerror(rc));
        return CLI_FAIL;
    }
    if (n == 0) {
        cli_error("%s: no class subfolders (an ImageFolder holds one folder of images per class)", root);
        free(cls);
        return CLI_FAIL;
    }
    if (n > UINT32_MAX - 1) {
        free_names(cls, n);
        cli_error("%s: too many classes", root);
        return CLI_FAIL;
    }
    s->classes = cls;
    s->nclasses = (uint32_t)n;
    for (size_t c = 0; c < n; c++) {
        char p[PATH_MAX];
        size_t before = s->n;
        if (strlen(cls[c]) > 1024) {
            cli_error("%s: class folder name longer than 1024 bytes", root);
            return CLI_FAIL;
        }
        snprintf(p, sizeof p, "%s/%s", root, cls[c]);
        if ((rc = walk_class(s, p, (int64_t)c, 0))) {
            cli_error("%s: %s", p, ps_strerror(rc));
            return CLI_FAIL;
        }
        if (s->n == before)
            cli_warn("%s: class '%s' has no images (it keeps its label %zu)", root, cls[c], c);
    }
    return 0;
}

static int parse_int64(const char *s, int64_t *v)
{
    char *end;
    long long x;
    errno = 0;
    if (!*s)
        return 0;
    x = strtoll(s, &end, 10);
    if (errno || *end)
        return 0;
    *v = x;
    return 1;
}

static int read_listfile(const char *path, struct source *s)
{
    FILE *f = fopen(path, "r");
    char *line = NULL, **labels = NULL, dir[PATH_MAX];
    size_t cap = 0, lineno = 0;
    ssize_t len;
    int all_int = 1, rc = CLI_FAIL;

    if (!f) {
        cli_error("%s: %s", path, strerror(errno));
        return CLI_FAIL;
    }
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash)
        slash[1] = 0;
    else
        dir[0] = 0;
    while ((len = getline(&line, &cap, f)) >= 0) {
        char *tab, full[PATH_MAX];
        lineno++;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r'))
            line[--len] = 0;
        if (len == 0 || line[0] == '#')
            continue;
        tab = strrchr(line, '\t');
        if (!tab || tab == line || !tab[1]) {
            cli_error("%s:%zu: expected PATH<TAB>LABEL", path, lineno);
            goto out;
        }
        *tab = 0;
        if (strlen(tab + 1) > 1024) {
            cli_error("%s:%zu: label longer than 1024 bytes", path, lineno);
            goto out;
        }
        if (line[0] == '/' || !dir[0])
            snprintf(full, sizeof full, "%s", line);
        else if (snprintf(full, sizeof full, "%s%s", dir, line) >= (int)sizeof full) {
            cli_error("%s:%zu: path too long", path, lineno);
            goto out;
        }
        int64_t v;
        if (!parse_int64(tab + 1, &v))
            all_int = 0;
        if (add_item(s, full, 0) < 0) {
            cli_error("out of memory");
            goto out;
        }
        char **nl = realloc(labels, s->n * sizeof *nl);
        if (!nl || !(nl[s->n - 1] = strdup(tab + 1))) {
            labels = nl ? nl : labels;
            cli_error("out of memory");
            goto out;
        }
        labels = nl;
    }
    if (ferror(f)) {
        cli_error("%s: read error", path);
        goto out;
    }
    if (all_int) {
        /* integer labels are used as they are; no class names */
        for (size_t i = 0; i < s->n; i++)
            parse_int64(labels[i], &s->items[i].label);
    } else {
        /* class names: sorted, numbered like ImageFolder's folders */
        char **sorted = malloc((s->n ? s->n : 1) * sizeof *sorted);
        size_t k = 0;
        if (!sorted) {
            cli_error("out of memory");
            goto out;
        }
        memcpy(sorted, labels, s->n * sizeof *sorted);
        qsort(sorted, s->n, sizeof *sorted, cmp_str);
        s->classes = malloc((s->n ? s->n : 1) * sizeof *s->classes);
        if (!s->classes) {
            free(sorted);
            cli_error("out of memory");
            goto out;
        }
        for (size_t i = 0; i < s->n; i++)
            if (!k || strcmp(sorted[i], s->classes[k - 1]) != 0) {
                s->classes[k] = strdup(sorted[i]);
                if (!s->classes[k]) {
                    free(sorted);
                    cli_error("out of memory");
                    goto out;
                }
                s->nclasses = (uint32_t)++k;
            }
        free(sorted);
        for (size_t i = 0; i < s->n; i++) {
            char **hit = bsearch(&labels[i], s->classes, s->nclasses, sizeof *s->classes, cmp_str);
            s->items[i].label = hit - s->classes;
        }
    }
    rc = 0;
out:
    if (labels)
        for (size_t i = 0; i < s->n; i++)
            free(labels[i]);
    free(labels);
    free(line);
    fclose(f);
    return rc;
}

/* ---- one image ---- */

static char *fmt_why(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static char *fmt_why(const char *fmt, ...)
{
    char buf[PS_ERRLEN + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    return strdup(buf);
}

static int read_file(const char *path, uint8_t **buf, size_t *len)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    size_t got = 0;

    *buf = NULL;
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        int e = S_ISREG(st.st_mode) ? -errno : -EISDIR;
        close(fd);
        return e;
    }
    if ((uint64_t)st.st_size > ((uint64_t)1 << 31)) {
        close(fd);
        return -EFBIG;
    }
    *buf = malloc((size_t)st.st_size + 1);
    if (!*buf) {
        close(fd);
        return -ENOMEM;
    }
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, *buf + got, (size_t)st.st_size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? -errno : -EIO;
            close(fd);
            free(*buf);
            *buf = NULL;
            return e;
        }
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return 0;
}

static const char *sniff(const uint8_t *b, size_t n)
{
    if (n >= 3 && b[0] == 0xff && b[1] == 0xd8 && b[2] == 0xff)
        return "jpeg";
    if (n >= 8 && memcmp(b, "\x89PNG\r\n\x1a\n", 8) == 0)
        return "PNG";
    if (n >= 4 && memcmp(b, "GIF8", 4) == 0)
        return "GIF";
    if (n >= 12 && memcmp(b, "RIFF", 4) == 0 && memcmp(b + 8, "WEBP", 4) == 0)
        return "WebP";
    if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0))
        return "TIFF";
    if (n >= 2 && b[0] == 'B' && b[1] == 'M')
        return "BMP";
    if (n >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6')
        return "PNM";
    return NULL;
}

/*
 * Validation of a JPEG kept as it is: a decode at 1/8 scale. The entropy
 * decoder still walks every coefficient (so truncated or corrupt data is
 * found, and warnings are errors as in decode/), but the IDCT, upsampling
 * and colour conversion run on 1/64 of the pixels: ~2x faster than a full
 * decode. The colour spaces accepted are those decode/ accepts.
 */
struct vjerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    char msg[JMSG_LENGTH_MAX];
};

static void v_error_exit(j_common_ptr ci)
{
    struct vjerr *e = (struct vjerr *)ci->err;
    e->pub.format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

static void v_emit(j_common_ptr ci, int level)
{
    struct vjerr *e = (struct vjerr *)ci->err;
    int c = e->pub.msg_code;
    if (level >= 0 || c == JWRN_ADOBE_XFORM || c == JWRN_JFIF_MAJOR || c == JWRN_BOGUS_ICC)
        return;
    e->pub.format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

static int validate_jpeg(const uint8_t *buf, size_t len, char *why, size_t n)
{
    struct jpeg_decompress_struct ci;
    struct vjerr e;
    JSAMPLE *volatile row = NULL;

    ci.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = v_error_exit;
    e.pub.emit_message = v_emit;
    if (setjmp(e.jb)) {
        snprintf(why, n, "%s", e.msg);
        jpeg_destroy_decompress(&ci);
        free(row);
        return -1;
    }
    jpeg_create_decompress(&ci);
    ci.mem->max_memory_to_use = 512L << 20;
    jpeg_mem_src(&ci, buf, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    switch (ci.jpeg_color_space) {
    case JCS_GRAYSCALE: case JCS_YCbCr: case JCS_RGB:
        ci.out_color_space = JCS_RGB;
        break;
    case JCS_CMYK: case JCS_YCCK:
        ci.out_color_space = JCS_CMYK;
        break;
    default:
        snprintf(why, n, "unsupported colour space");
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    ci.scale_num = 1;
    ci.scale_denom = 8;
    ci.dct_method = JDCT_IFAST;
    jpeg_start_decompress(&ci);
    row = malloc((size_t)ci.output_width * ci.output_components + 1);
    if (!row) {
        snprintf(why, n, "out of memory");
        jpeg_destroy_decompress(&ci);
        return -1;
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW r = row;
        if (jpeg_read_scanlines(&ci, &r, 1) != 1)
            ERREXIT(&ci, JERR_INPUT_EMPTY);
    }
    jpeg_finish_decompress(&ci);
    jpeg_destroy_decompress(&ci);
    free(row);
    return 0;
}

static void process(const struct cfg *cfg, const struct item *it, struct result *r)
{
    uint8_t *buf = NULL, *rgb = NULL, *small = NULL;
    size_t len = 0;
    uint32_t w, h;
    char err[PS_ERRLEN] = "";
    const char *kind;
    int rc;

    memset(r, 0, sizeof *r);
    if ((rc = read_file(it->path, &buf, &len)) < 0) {
        r->why = fmt_why("cannot read: %s", ps_strerror(rc));
        return;
    }
    r->in_bytes = len;
    kind = sniff(buf, len);
    if (!kind) {
        r->why = fmt_why(len ? "not a JPEG file (unknown content)" : "empty file");
        goto out;
    }
    if (strcmp(kind, "jpeg") != 0) {
        r->why = fmt_why("%s input is not supported (only JPEG; convert first, e.g. mogrify -format jpg)", kind);
        goto out;
    }
    if (ps_jpeg_dims(buf, len, &w, &h) < 0) {
        r->why = fmt_why("corrupt JPEG (unreadable header)");
        goto out;
    }
    int resize = cfg->max_side && (w > cfg->max_side || h > cfg->max_side);
    if (!cfg->raw && !resize) {
        /* the original bytes are kept; make sure they decode (restart rewriting decodes them too) */
        if (cfg->restart) {
            uint8_t *out;
            size_t olen;
            if (ps_jpeg_add_restarts(buf, len, &out, &olen, err) < 0) {
                r->why = fmt_why("corrupt JPEG: %s", err);
                goto out;
            }
            free(buf);
            buf = out;
            len = olen;
        } else if (cfg->validate && validate_jpeg(buf, len, err, sizeof err) < 0) {
            r->why = fmt_why("corrupt JPEG: %s", err);
            goto out;
        }
        if (w > UINT16_MAX || h > UINT16_MAX) {
            r->why = fmt_why("%ux%u pixels: too large for the format (65535 at most; use --max-side)", w, h);
            goto out;
        }
        r->data = buf;
        r->len = len;
        r->w = w;
        r->h = h;
        buf = NULL;
        goto out;
    }
    if (ps_jpeg_decode_full(buf, len, 0, &rgb, &w, &h, err) < 0) {
        r->why = fmt_why("corrupt JPEG: %s", err);
        goto out;
    }
    if (resize) {
        double s = (double)cfg->max_side / (double)(w > h ? w : h);
        uint32_t nw = (uint32_t)(w * s + 0.5), nh = (uint32_t)(h * s + 0.5);
        if (nw < 1)
            nw = 1;
        if (nh < 1)
            nh = 1;
        if (nw > cfg->max_side)
            nw = cfg->max_side;
        if (nh > cfg->max_side)
            nh = cfg->max_side;
        small = malloc((size_t)nw * nh * 3);
        if (!small) {
            r->why = fmt_why("out of memory");
            goto out;
        }
        ps_resize_rgb(rgb, w, h, (size_t)w * 3, small, nw, nh, (size_t)nw * 3);
        free(rgb);
        rgb = small;
        small = NULL;
        w = nw;
        h = nh;
    }
    if (w > UINT16_MAX || h > UINT16_MAX) {
        r->why = fmt_why("%ux%u pixels: too large for the format (65535 at most; use --max-side)", w, h);
        goto out;
    }
    if (cfg->raw) {
        r->data = rgb;
        r->len = (size_t)w * h * 3;
        rgb = NULL;
    } else {
        uint8_t *out;
        size_t olen;
        if (ps_jpeg_encode(rgb, w, h, cfg->quality, cfg->restart, &out, &olen, err) < 0) {
            r->why = fmt_why("re-encoding: %s", err);
            goto out;
        }
        r->data = out;
        r->len = olen;
    }
    r->w = w;
    r->h = h;
out:
    free(buf);
    free(rgb);
    free(small);
}

/* ---- the pool: workers fill a window of result slots; the writer drains them in order ---- */

static void *worker(void *arg)
{
    struct pool *p = arg;
    for (;;) {
        size_t i;
        struct result r;
        pthread_mutex_lock(&p->lock);
        while (!p->stop && p->next_claim < p->n && p->next_claim >= p->written + p->window)
            pthread_cond_wait(&p->space, &p->lock);
        if (p->stop || p->next_claim >= p->n) {
            pthread_mutex_unlock(&p->lock);
            return NULL;
        }
        i = p->next_claim++;
        pthread_mutex_unlock(&p->lock);
        process(p->cfg, &p->items[i], &r);
        r.ready = 1;
        pthread_mutex_lock(&p->lock);
        p->slots[i % p->window] = r;
        pthread_cond_broadcast(&p->ready);
        pthread_mutex_unlock(&p->lock);
    }
}

static void pool_stop(struct pool *p, pthread_t *th, int nth)
{
    pthread_mutex_lock(&p->lock);
    p->stop = 1;
    pthread_cond_broadcast(&p->space);
    pthread_mutex_unlock(&p->lock);
    for (int t = 0; t < nth; t++)
        pthread_join(th[t], NULL);
    for (size_t k = 0; k < p->window; k++)
        if (p->slots[k].ready) {
            free(p->slots[k].data);
            free(p->slots[k].why);
            p->slots[k].ready = 0;
        }
}


static int cores(void)
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0)
        return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void shuffle(struct item *v, size_t n, uint64_t seed)
{
    uint64_t st = seed;
    for (size_t i = n; i > 1; i--) {
        /* unbiased draw in [0, i) by rejection */
        uint64_t lim = UINT64_MAX - UINT64_MAX % i, x;
        do
            x = splitmix(&st);
        while (x >= lim);
        size_t j = (size_t)(x % i);
        struct item t = v[i - 1];
        v[i - 1] = v[j];
        v[j] = t;
    }
}

enum { OPT_PAGE = CLI_OPT_FIRST_FREE, OPT_MAXSIDE, OPT_QUALITY, OPT_MODE, OPT_SHUFFLE, OPT_NOSHUFFLE, OPT_SEED,
       OPT_THREADS, OPT_STRICT, OPT_RESTART, OPT_NORESTART, OPT_NOVALIDATE };

int cmd_pack(int argc, char **argv)
{
    static const struct option lo[] = {
        { "output", required_argument, NULL, 'o' },     { "page-size", required_argument, NULL, OPT_PAGE },
        { "max-side", required_argument, NULL, OPT_MAXSIDE }, { "quality", required_argument, NULL, OPT_QUALITY },
        { "mode", required_argument, NULL, OPT_MODE },   { "shuffle", no_argument, NULL, OPT_SHUFFLE },
        { "no-shuffle", no_argument, NULL, OPT_NOSHUFFLE }, { "seed", required_argument, NULL, OPT_SEED },
        { "threads", required_argument, NULL, OPT_THREADS }, { "strict", no_argument, NULL, OPT_STRICT },
        { "restart-markers", no_argument, NULL, OPT_RESTART },
        { "no-restart-markers", no_argument, NULL, OPT_NORESTART },
        { "no-validate", no_argument, NULL, OPT_NOVALIDATE }, { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { "endpoint", required_argument, NULL, CLI_OPT_ENDPOINT }, { "region", required_argument, NULL, CLI_OPT_REGION },
        { "insecure", no_argument, NULL, CLI_OPT_INSECURE }, { NULL, 0, NULL, 0 } };
    struct cfg cfg = { .quality = 90, .validate = 1, .restart = 1 };
    int restart_asked = 0;
    struct ps_io_opts io_opts;
    struct source src;
    struct stat st;
    const char *out_url = NULL, *src_path;
    uint64_t page_size = DEFAULT_PAGE_SIZE, seed = 0, v;
    int shuffle_on = 1, strict = 0, quiet = 0, nthreads = 0, c, rc;

    memset(&src, 0, sizeof src);
    ps_io_opts_init(&io_opts);
    opterr = 0;
    while ((c = getopt_long(argc, argv, ":ho:q", lo, NULL)) != -1) {
        switch (c) {
        case 'o': out_url = optarg; break;
        case 'q': quiet = 1; break;
        case 'h': fputs(usage_text, stdout); return CLI_OK;
        case OPT_PAGE:
            if (cli_size("--page-size", optarg, &page_size))
                return CLI_USAGE;
            if (page_size % 4096 || page_size < (64u << 10) || page_size > (64u << 20))
                return cli_usage_error("--page-size: %s: must be a multiple of 4K from 64K to 64M", optarg);
            break;
        case OPT_MAXSIDE:
            if (cli_uint("--max-side", optarg, 65535, &v))
                return CLI_USAGE;
            cfg.max_side = (uint32_t)v;
            break;
        case OPT_QUALITY:
            if (cli_uint("--quality", optarg, 100, &v))
                return CLI_USAGE;
            if (v < 1)
                return cli_usage_error("--quality: from 1 to 100");
            cfg.quality = (int)v;
            break;
        case OPT_MODE:
            if (strcmp(optarg, "jpeg") == 0)
                cfg.raw = 0;
            else if (strcmp(optarg, "raw") == 0)
                cfg.raw = 1;
            else
                return cli_usage_error("--mode: '%s': jpeg or raw", optarg);
            break;
        case OPT_SHUFFLE: shuffle_on = 1; break;
        case OPT_NOSHUFFLE: shuffle_on = 0; break;
        case OPT_SEED:
            if (cli_uint("--seed", optarg, UINT64_MAX, &seed))
                return CLI_USAGE;
            break;
        case OPT_THREADS:
            if (cli_uint("--threads", optarg, 1024, &v))
                return CLI_USAGE;
            if (v < 1)
                return cli_usage_error("--threads: at least 1");
            nthreads = (int)v;
            break;
        case OPT_STRICT: strict = 1; break;
        case OPT_RESTART: cfg.restart = 1; restart_asked = 1; break;
        case OPT_NORESTART: cfg.restart = 0; break;
        case OPT_NOVALIDATE: cfg.validate = 0; break;
        default:
            rc = cli_read_opt(c, optarg, &io_opts);
            if (rc == 1)
                break;
            return rc == CLI_USAGE ? rc : cli_bad_option(argv);
        }
    }
    if (argc - optind != 1)
        return cli_usage_error(argc - optind < 1 ? "which images? (an ImageFolder directory or a list file)"
                                                 : "one source at a time");
    if (!out_url)
        return cli_usage_error("where to? (-o OUT.pgs, or -o - for stdout)");
    if (cfg.raw && restart_asked)
        return cli_usage_error("--restart-markers applies to --mode jpeg only");
    if (cfg.raw)
        cfg.restart = 0;
    if (strcmp(out_url, "-") == 0 && isatty(STDOUT_FILENO))
        return cli_usage_error("refusing to write a dataset to a terminal (redirect stdout, or use -o FILE)");
    if (nthreads == 0)
        nthreads = cores();
    src_path = argv[optind];

    /* the source */
    if (stat(src_path, &st) < 0) {
        cli_error("%s: %s", src_path, strerror(errno));
        return CLI_FAIL;
    }
    if (S_ISDIR(st.st_mode)) {
        char root[PATH_MAX];
        size_t l;
        snprintf(root, sizeof root, "%s", src_path);
        l = strlen(root);
        while (l > 1 && root[l - 1] == '/')
            root[--l] = 0;
        rc = scan_imagefolder(root, &src);
    } else {
        rc = read_listfile(src_path, &src);
    }
    if (rc) {
        free_source(&src);
        return rc;
    }
    if (src.n == 0) {
        cli_error("%s: no images found%s", src_path,
                  S_ISDIR(st.st_mode) ? " (looked for .jpg .jpeg .png .ppm .bmp .pgm .tif .tiff .webp in the class "
                                        "subfolders)" : "");
        free_source(&src);
        return CLI_FAIL;
    }
    if (shuffle_on)
        shuffle(src.items, src.n, seed);

    /* the output */
    struct ps_writer_opts wo;
    struct ps_out *out = NULL;
    struct ps_writer *w = NULL;
    char err[PS_ERRLEN] = "";
    memset(&wo, 0, sizeof wo);
    wo.page_size = (uint32_t)page_size;
    wo.nfields = 2;
    wo.fields[0].type = cfg.raw ? PS_F_RAW : PS_F_JPEG;
    snprintf(wo.fields[0].name, PS_FIELD_NAME, "image");
    wo.fields[1].type = PS_F_INT;
    snprintf(wo.fields[1].name, PS_FIELD_NAME, "label");
    wo.nclasses = src.nclasses;
    wo.classes = (const char *const *)src.classes;
    wo.flags = (shuffle_on ? PS_PGS_FLAG_SHUFFLED : 0) | (cfg.restart ? PS_PGS_FLAG_RESTART : 0);
    wo.seed = seed;

    cli_outputs_abort_on_signal();
    if ((rc = ps_out_open(out_url, &io_opts, &out, err)) < 0) {
        cli_error("%s", *err ? err : ps_strerror(rc));
        free_source(&src);
        return CLI_FAIL;
    }
    if ((rc = ps_writer_open(out, &wo, &w, err)) < 0) {
        cli_error("%s: %s", out_url, err);
        ps_out_close(out);
        free_source(&src);
        return CLI_FAIL;
    }

    struct pool pool = { .cfg = &cfg, .items = src.items, .n = src.n };
    pthread_t *th = calloc((size_t)nthreads, sizeof *th);
    int started = 0;
    pool.window = (size_t)nthreads * 4 + 4;
    pool.slots = calloc(pool.window, sizeof *pool.slots);
    pthread_mutex_init(&pool.lock, NULL);
    pthread_cond_init(&pool.space, NULL);
    pthread_cond_init(&pool.ready, NULL);
    rc = CLI_FAIL;
    if (!th || !pool.slots) {
        cli_error("out of memory");
        goto done;
    }
    for (; started < nthreads; started++)
        if (pthread_create(&th[started], NULL, worker, &pool) != 0) {
            if (!started) {
                cli_error("cannot start worker threads");
                goto done;
            }
            break;
        }

    struct cli_progress prog;
    uint64_t in_bytes = 0, packed = 0, skipped = 0, t0 = ps_now_ns();
    cli_progress_start(&prog, "pack", src.n);
    for (size_t i = 0; i < src.n; i++) {
        struct result r;
        pthread_mutex_lock(&pool.lock);
        while (!pool.slots[i % pool.window].ready)
            pthread_cond_wait(&pool.ready, &pool.lock);
        r = pool.slots[i % pool.window];
        pool.slots[i % pool.window].ready = 0;
        pool.written = i + 1;
        pthread_cond_broadcast(&pool.space);
        pthread_mutex_unlock(&pool.lock);

        in_bytes += r.in_bytes;
        if (r.why) {
            skipped++;
            if (strict) {
                cli_progress_end(&prog);
                cli_error("%s: %s (--strict: stopping; nothing written)", src.items[i].path, r.why);
                free(r.why);
                free(r.data);
                rc = CLI_FAIL;
                goto done;
            }
            if (skipped <= MAX_WARNINGS) {
                cli_progress_end(&prog);
                cli_warn("%s: skipped: %s", src.items[i].path, r.why);
                prog.on = isatty(STDERR_FILENO);
            }
            free(r.why);
        } else {
            struct ps_wsample s;
            memset(&s, 0, sizeof s);
            s.data[0] = r.data;
            s.len[0] = (uint32_t)r.len;
            s.h[0] = (uint16_t)r.h;
            s.w[0] = (uint16_t)r.w;
            s.ival[1] = src.items[i].label;
            if (r.len > UINT32_MAX)
                rc = ps_seterr(err, -EFBIG, "%s: %zu bytes: too large for one sample", src.items[i].path, r.len);
            else
                rc = ps_writer_add(w, &s, err);
            free(r.data);
            if (rc < 0) {
                cli_progress_end(&prog);
                cli_error("%s: %s", out_url, err);
                rc = CLI_FAIL;
                goto done;
            }
            packed++;
        }
        cli_progress(&prog, i + 1, in_bytes);
    }
    cli_progress_end(&prog);
    if (skipped > MAX_WARNINGS)
        cli_warn("%" PRIu64 " more images skipped (warnings after the first %d not shown)", skipped - MAX_WARNINGS,
                 MAX_WARNINGS);
    if (packed == 0) {
        cli_error("%s: none of the %zu images could be packed; nothing written", src_path, src.n);
        rc = CLI_FAIL;
        goto done;
    }
    if ((rc = cli_finish_output(w, out, out_url)) != CLI_OK)
        goto done;
    if (!quiet) {
        double secs = cli_seconds(t0);
        uint64_t out_bytes = ps_out_tell(out);
        char b1[32], b2[32];
        FILE *f = strcmp(out_url, "-") == 0 ? stderr : stdout;
        fprintf(f,
                "%s: %" PRIu64 " images, %" PRIu64 " skipped, %u classes, %" PRIu64 " pages of %s, %s (%" PRIu64
                " bytes)\n",
                strcmp(out_url, "-") == 0 ? "stdout" : out_url, packed, skipped, src.nclasses, ps_writer_pages(w),
                cli_bytes(page_size, b1), cli_bytes(out_bytes, b2), out_bytes);
        fprintf(f, "packed in %.2f s with %d threads: %.1f MB/s read, %.1f MB/s written, %.0f images/s\n", secs,
                started, secs > 0 ? (double)in_bytes / 1e6 / secs : 0, secs > 0 ? (double)out_bytes / 1e6 / secs : 0,
                secs > 0 ? (double)(packed + skipped) / secs : 0);
        if (src.ignored)
            fprintf(f, "(%" PRIu64 " files without an image extension were ignored)\n", src.ignored);
    }
done:
    if (started)
        pool_stop(&pool, th, started);
    ps_writer_free(w);
    ps_out_close(out); /* aborts (removes the temporary file) unless committed */
    free(th);
    free(pool.slots);
    pthread_mutex_destroy(&pool.lock);
    pthread_cond_destroy(&pool.space);
    pthread_cond_destroy(&pool.ready);
    free_source(&src);
    return rc;
}
