/*
 * mkpgs.c - make large .pgs datasets fast for benchmarks and memory tests:
 * random bytes of a given mean size, or the JPEGs of a folder repeated
 * until the dataset reaches the size asked (decode cost stays realistic).
 *   mkpgs OUT --size 4G [--sample-size 110K] [--page-size 4M] [--classes 100]
 *   mkpgs OUT --size 4G --jpeg-dir DIR
 */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pagestream.h"
#include "format/format.h"
#include "io/io.h"

struct blob {
    uint8_t *p;
    uint32_t len;
    uint16_t w, h;
};

static int jpeg_dims(const uint8_t *d, size_t n, uint16_t *w, uint16_t *h)
{
    /* walk the markers to the first SOFn */
    size_t i = 2;
    if (n < 4 || d[0] != 0xFF || d[1] != 0xD8)
        return -1;
    while (i + 9 < n) {
        uint8_t m;
        uint16_t len;
        if (d[i] != 0xFF) {
            i++;
            continue;
        }
        m = d[i + 1];
        if (m == 0xFF) {
            i++;
            continue;
        }
        len = (uint16_t)(d[i + 2] << 8 | d[i + 3]);
        if ((m >= 0xC0 && m <= 0xCF) && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            *h = (uint16_t)(d[i + 5] << 8 | d[i + 6]);
            *w = (uint16_t)(d[i + 7] << 8 | d[i + 8]);
            return 0;
        }
        i += 2 + len;
    }
    return -1;
}

static int load_dir(const char *dir, struct blob **out, size_t *n)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    size_t cap = 0;

    *out = NULL;
    *n = 0;
    if (!d)
        return -errno;
    while ((e = readdir(d))) {
        char path[4096];
        struct stat st;
        FILE *f;
        struct blob b;
        size_t len = strlen(e->d_name);
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (stat(path, &st) < 0)
            continue;
        if (S_ISDIR(st.st_mode)) {
            struct blob *sub;
            size_t ns;
            if (load_dir(path, &sub, &ns) == 0) {
                if (*n + ns > cap) {
                    cap = (*n + ns) * 2;
                    *out = realloc(*out, cap * sizeof **out);
                }
                memcpy(*out + *n, sub, ns * sizeof *sub);
                *n += ns;
                free(sub);
            }
            continue;
        }
        if (len < 4 || (strcasecmp(e->d_name + len - 4, ".jpg") && strcasecmp(e->d_name + len - 5, ".jpeg")))
            continue;
        f = fopen(path, "rb");
        if (!f)
            continue;
        b.len = (uint32_t)st.st_size;
        b.p = malloc(b.len);
        if (!b.p || fread(b.p, 1, b.len, f) != b.len || jpeg_dims(b.p, b.len, &b.w, &b.h) < 0) {
            free(b.p);
            fclose(f);
            continue;
        }
        fclose(f);
        if (*n == cap) {
            cap = cap ? cap * 2 : 256;
            *out = realloc(*out, cap * sizeof **out);
        }
        (*out)[(*n)++] = b;
    }
    closedir(d);
    return 0;
}

int main(int argc, char **argv)
{
    const char *out_path = NULL, *jdir = NULL;
    uint64_t size = 1ull << 30, ssize = 110 * 1024, page = 4 << 20, classes = 100, seed = 1;
    struct ps_writer_opts wo;
    struct ps_writer *w;
    struct ps_out *out;
    struct blob *blobs = NULL;
    size_t nblobs = 0;
    char err[PS_ERRLEN];
    uint8_t *buf;
    uint64_t written = 0, i;
    int rc;

    for (int a = 1; a < argc; a++) {
        if (!strcmp(argv[a], "--size") && a + 1 < argc)
            rc = ps_parse_size(argv[++a], &size);
        else if (!strcmp(argv[a], "--sample-size") && a + 1 < argc)
            rc = ps_parse_size(argv[++a], &ssize);
        else if (!strcmp(argv[a], "--page-size") && a + 1 < argc)
            rc = ps_parse_size(argv[++a], &page);
        else if (!strcmp(argv[a], "--classes") && a + 1 < argc)
            rc = ps_parse_size(argv[++a], &classes);
        else if (!strcmp(argv[a], "--seed") && a + 1 < argc)
            rc = ps_parse_size(argv[++a], &seed);
        else if (!strcmp(argv[a], "--jpeg-dir") && a + 1 < argc) {
            jdir = argv[++a];
            rc = 0;
        } else if (argv[a][0] != '-' && !out_path) {
            out_path = argv[a];
            rc = 0;
        } else {
            fprintf(stderr, "usage: mkpgs OUT --size SIZE [--sample-size S] [--page-size P] [--classes C] "
                            "[--jpeg-dir DIR] [--seed N]\n");
            return 2;
        }
        if (rc < 0) {
            fprintf(stderr, "mkpgs: bad value for %s\n", argv[a - 1]);
            return 2;
        }
    }
    if (!out_path || !classes || ssize < 1 || ssize > (64u << 20)) {
        fprintf(stderr, "usage: mkpgs OUT --size SIZE [--sample-size S] [--page-size P] [--classes C] [--jpeg-dir DIR]\n");
        return 2;
    }
    memset(&wo, 0, sizeof wo);
    wo.page_size = (uint32_t)page;
    wo.nfields = 2;
    wo.fields[0].type = jdir ? PS_F_JPEG : PS_F_BYTES;
    snprintf(wo.fields[0].name, sizeof wo.fields[0].name, jdir ? "image" : "data");
    wo.fields[1].type = PS_F_INT;
    snprintf(wo.fields[1].name, sizeof wo.fields[1].name, "label");
    if (jdir) {
        rc = load_dir(jdir, &blobs, &nblobs);
        if (rc < 0 || !nblobs) {
            fprintf(stderr, "mkpgs: %s: no JPEG files found\n", jdir);
            return 1;
        }
    }
    rc = ps_out_open(out_path, NULL, &out, err);
    if (rc < 0) {
        fprintf(stderr, "mkpgs: %s\n", err);
        return 1;
    }
    rc = ps_writer_open(out, &wo, &w, err);
    if (rc < 0) {
        fprintf(stderr, "mkpgs: %s\n", err);
        return 1;
    }
    buf = malloc(ssize * 2);
    for (i = 0; written < size; i++) {
        struct ps_wsample s;
        uint64_t x = (i + 1) * 0x9E3779B97F4A7C15ull ^ seed;
        memset(&s, 0, sizeof s);
        s.ival[1] = (int64_t)(i % classes);
        if (jdir) {
            struct blob *b = &blobs[i % nblobs];
            s.data[0] = b->p;
            s.len[0] = b->len;
            s.w[0] = b->w;
            s.h[0] = b->h;
        } else {
            uint32_t len = (uint32_t)(ssize / 2 + (x >> 11) % ssize);
            for (uint32_t k = 0; k + 8 <= len; k += 8) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                memcpy(buf + k, &x, 8);
            }
            s.data[0] = buf;
            s.len[0] = len;
        }
        rc = ps_writer_add(w, &s, err);
        if (rc < 0)
            break;
        written += s.len[0];
    }
    if (rc == 0)
        rc = ps_writer_finish(w, err);
    if (rc == 0)
        rc = ps_out_commit(out);
    if (rc < 0) {
        fprintf(stderr, "mkpgs: %s\n", err[0] ? err : ps_strerror(rc));
        ps_out_abort(out);
    } else {
        printf("mkpgs: %s: %llu samples, %llu payload bytes, %llu pages\n", out_path, (unsigned long long)i,
               (unsigned long long)written, (unsigned long long)ps_writer_pages(w));
    }
    ps_writer_free(w);
    ps_out_close(out);
    for (size_t k = 0; k < nblobs; k++)
        free(blobs[k].p);
    free(blobs);
    free(buf);
    return rc < 0;
}
