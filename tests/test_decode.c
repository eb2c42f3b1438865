/* test_decode.c - decode/: crop boxes, crop-aware JPEG decode against a plain reference (PSNR per
 * DCT scale), reproducibility, odd and broken JPEGs, restart markers, layouts, raw images, CUDA. */
#include <dirent.h>
#include <math.h>
#include <setjmp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <jpeglib.h>

#include "pagestream.h"
#include "decode/decode.h"
#include "decode/decode_int.h"
#include "decode/xfer.h"
#include "tests/test.h"
#ifdef PS_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* ---------- test images ---------- */

static uint64_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rng_state >> 33);
}
static double rndu(void) { return rnd() / 2147483648.0; }

/* Photo-like content: smooth gradients and waves, a few hard-edged shapes, grain. */
static uint8_t *synth(uint32_t w, uint32_t h, uint64_t seed)
{
    uint8_t *p = malloc((size_t)w * h * 3);
    rng_state = seed * 2654435761u + 7;
    double g[3][3], wave[3];
    for (int c = 0; c < 3; c++) {
        g[c][0] = 40 + rndu() * 150;
        g[c][1] = (rndu() - 0.5) * 120 / w;
        g[c][2] = (rndu() - 0.5) * 120 / h;
        wave[c] = 10 + rndu() * 30;
    }
    struct { double x, y, r; uint8_t col[3]; int rect; } sh[6];
    for (int i = 0; i < 6; i++) {
        sh[i].x = rndu() * w; sh[i].y = rndu() * h; sh[i].r = (0.05 + rndu() * 0.2) * (w < h ? w : h);
        for (int c = 0; c < 3; c++)
            sh[i].col[c] = (uint8_t)(rnd() & 255);
        sh[i].rect = rnd() & 1;
    }
    double fx = 2 * M_PI * (1 + rndu() * 3) / w, fy = 2 * M_PI * (1 + rndu() * 3) / h;
    for (uint32_t y = 0; y < h; y++)
        for (uint32_t x = 0; x < w; x++) {
            double v[3];
            for (int c = 0; c < 3; c++)
                v[c] = g[c][0] + g[c][1] * x + g[c][2] * y + wave[c] * sin(fx * x + c) * cos(fy * y);
            for (int i = 0; i < 6; i++) {
                double dx = x - sh[i].x, dy = y - sh[i].y;
                int in = sh[i].rect ? (fabs(dx) < sh[i].r && fabs(dy) < sh[i].r * 0.6) : (dx * dx + dy * dy < sh[i].r * sh[i].r);
                if (in)
                    for (int c = 0; c < 3; c++)
                        v[c] = 0.3 * v[c] + 0.7 * sh[i].col[c] + 15 * sin(0.3 * x + 0.2 * y);
            }
            double n = (rndu() + rndu() + rndu() - 1.5) * 10;
            for (int c = 0; c < 3; c++) {
                double t = v[c] + n + (rndu() - 0.5) * 4;
                p[((size_t)y * w + x) * 3 + c] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
            }
        }
    return p;
}

static uint8_t *enc(const uint8_t *rgb, uint32_t w, uint32_t h, int q, int restart, size_t *len)
{
    uint8_t *out = NULL;
    char err[PS_ERRLEN];
    if (ps_jpeg_encode(rgb, w, h, q, restart, &out, len, err) != 0) {
        fprintf(stderr, "encode: %s\n", err);
        return NULL;
    }
    return out;
}

/* Our own libjpeg encoder for the odd kinds: 0 gray, 1 CMYK (Adobe), 2 YCCK, 3 progressive RGB. */
struct tj_err { struct jpeg_error_mgr pub; jmp_buf jb; };
static void tj_exit(j_common_ptr ci) { longjmp(((struct tj_err *)ci->err)->jb, 1); }

static uint8_t *enc_kind(const uint8_t *rgb, uint32_t w, uint32_t h, int kind, size_t *len)
{
    struct jpeg_compress_struct ci;
    struct tj_err e;
    unsigned char *out = NULL;
    unsigned long olen = 0;
    int comps = kind == 0 ? 1 : (kind == 1 || kind == 2) ? 4 : 3;
    uint8_t *row = malloc((size_t)w * 4);
    ci.err = jpeg_std_error(&e.pub);
    e.pub.error_exit = tj_exit;
    if (setjmp(e.jb)) {
        jpeg_destroy_compress(&ci);
        free(row);
        return NULL;
    }
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, &out, &olen);
    ci.image_width = w;
    ci.image_height = h;
    ci.input_components = comps;
    ci.in_color_space = comps == 1 ? JCS_GRAYSCALE : comps == 4 ? JCS_CMYK : JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, 92, TRUE);
    if (kind == 2)
        jpeg_set_colorspace(&ci, JCS_YCCK);
    if (kind == 3)
        jpeg_simple_progression(&ci);
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < h) {
        const uint8_t *s = rgb + (size_t)ci.next_scanline * w * 3;
        for (uint32_t x = 0; x < w; x++) {
            int r = s[3 * x], g = s[3 * x + 1], b = s[3 * x + 2];
            if (comps == 1) {
                row[x] = (uint8_t)((r * 77 + g * 150 + b * 29 + 128) >> 8);
            } else if (comps == 3) {
                memcpy(row + 3 * x, s + 3 * x, 3);
            } else {
                /* Inks, stored inverted as Adobe does: stored c = 255 - C, k = 255 - K. */
                int mx = r > g ? (r > b ? r : b) : (g > b ? g : b);
                int K = 255 - mx;
                int C = mx ? (255 - r - K) * 255 / (255 - K) : 0;
                int M = mx ? (255 - g - K) * 255 / (255 - K) : 0;
                int Y = mx ? (255 - b - K) * 255 / (255 - K) : 0;
                row[4 * x] = (uint8_t)(255 - C);
                row[4 * x + 1] = (uint8_t)(255 - M);
                row[4 * x + 2] = (uint8_t)(255 - Y);
                row[4 * x + 3] = (uint8_t)(255 - K);
            }
        }
        JSAMPROW rp = row;
        jpeg_write_scanlines(&ci, &rp, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    free(row);
    *len = olen;
    return out;
}

/* ---------- the reference: plain float resampling, written independently of resize.c ---------- */

/* Weight of source pixel k for output i along one axis (box b0..b0+bl, n outputs, len source). */
static void ref_weights(double b0, double bl, uint32_t n, uint32_t len, uint32_t i, double *wts /* len */)
{
    double s = bl / n;
    for (uint32_t k = 0; k < len; k++)
        wts[k] = 0;
    if (s > 1) {
        double lo = b0 + i * s, hi = lo + s;
        for (uint32_t k = 0; k < len; k++) {
            double a = k > lo ? k : lo, b = k + 1 < hi ? k + 1 : hi;
            if (b > a)
                wts[k] += (b - a) / s;
        }
    } else {
        double c = b0 + (i + 0.5) * s - 0.5;
        double lo = floor(b0), hi = ceil(b0 + bl) - 1;
        double k0 = floor(c), f = c - k0;
        double a = k0 < lo ? lo : k0 > hi ? hi : k0;
        double b = k0 + 1 < lo ? lo : k0 + 1 > hi ? hi : k0 + 1;
        wts[(uint32_t)a] += 1 - f;
        wts[(uint32_t)b] += f;
    }
}

/* Crop (integer box) of an RGB image, resized to dw x dh, flipped, NHWC. */
static uint8_t *ref_resize(const uint8_t *img, uint32_t w, uint32_t h, const struct ps_crop *c, uint32_t dw, uint32_t dh)
{
    uint8_t *out = malloc((size_t)dw * dh * 3);
    double *wy = malloc(sizeof(double) * h), *wx = malloc(sizeof(double) * w * dw);
    double *row = malloc(sizeof(double) * w * 3);
    for (uint32_t x = 0; x < dw; x++)
        ref_weights(c->x, c->w, dw, w, x, wx + (size_t)x * w);
    for (uint32_t y = 0; y < dh; y++) {
        ref_weights(c->y, c->h, dh, h, y, wy);
        for (uint32_t k = 0; k < w * 3; k++)
            row[k] = 0;
        for (uint32_t sy = 0; sy < h; sy++)
            if (wy[sy] != 0)
                for (uint32_t k = 0; k < w * 3; k++)
                    row[k] += wy[sy] * img[(size_t)sy * w * 3 + k];
        for (uint32_t x = 0; x < dw; x++) {
            double v[3] = { 0, 0, 0 };
            const double *wr = wx + (size_t)x * w;
            for (uint32_t sx = 0; sx < w; sx++)
                if (wr[sx] != 0)
                    for (int ch = 0; ch < 3; ch++)
                        v[ch] += wr[sx] * row[sx * 3 + ch];
            uint32_t ox = c->flip ? dw - 1 - x : x;
            for (int ch = 0; ch < 3; ch++) {
                double t = floor(v[ch] + 0.5);
                out[((size_t)y * dw + ox) * 3 + ch] = (uint8_t)(t < 0 ? 0 : t > 255 ? 255 : t);
            }
        }
    }
    free(wy); free(wx); free(row);
    return out;
}

static double psnr(const uint8_t *a, const uint8_t *b, size_t n)
{
    double se = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        se += d * d;
    }
    if (se == 0)
        return 99;
    return 10 * log10(255.0 * 255.0 / (se / n));
}

/* The scale the decoder must pick: smallest allowed M with crop * M/8 >= out on both axes. */
static int expect_scale(const struct ps_crop *c, uint32_t ow, uint32_t oh, unsigned mask)
{
    for (int m = 1; m <= 8; m++)
        if ((mask >> (m - 1) & 1) && c->w * m >= ow * 8 && c->h * m >= oh * 8)
            return m;
    return 8;
}

static struct ps_decode_params params(int transform, uint32_t out)
{
    struct ps_decode_params p;
    ps_decode_params_init(&p);
    p.transform = transform;
    p.out_h = p.out_w = out;
    p.resize = out * 256 / 224;
    return p;
}

/* Decode with the crop-aware path and compare with the reference; returns PSNR, -1 on decode error. */
static double check_one(struct ps_decoder *d, const struct ps_decode_params *p, const uint8_t *jpg, size_t len,
                        const uint8_t *full, uint32_t w, uint32_t h, uint64_t seed, struct ps_crop *used)
{
    size_t n = (size_t)p->out_w * p->out_h * 3;
    uint8_t *out = malloc(n);
    char err[PS_ERRLEN];
    if (ps_decode_jpeg(d, jpg, len, seed, out, used, err) != 0) {
        fprintf(stderr, "decode: %s\n", err);
        free(out);
        return -1;
    }
    uint8_t *ref = ref_resize(full, w, h, used, p->out_w, p->out_h);
    double v = psnr(out, ref, n);
    free(out);
    free(ref);
    return v;
}

/* ---------- tests ---------- */

static int test_crop_box(void)
{
    struct ps_decode_params p = params(PS_TRANSFORM_RANDOM_RESIZED_CROP, 224);
    double sum_frac = 0, sum_lr = 0;
    int n = 0, flips = 0, fallbacks = 0, same = 0;
    for (uint32_t i = 0; i < 20000; i++) {
        uint32_t w = 16 + (i * 37) % 900, h = 16 + (i * 53) % 700;
        if (i % 50 == 0) { w = 1000; h = 90; }          /* extreme aspect: fallbacks */
        struct ps_crop c, c2, c3;
        ps_rrc_box(&p, w, h, i * 7919ULL + 3, &c);
        ps_rrc_box(&p, w, h, i * 7919ULL + 3, &c2);
        CHECKF(!memcmp(&c, &c2, sizeof c), "seed %u: not deterministic", i);
        ps_rrc_box(&p, w, h, i * 7919ULL + 4, &c3);
        CHECKF(c.w >= 1 && c.h >= 1 && c.x + c.w <= w && c.y + c.h <= h,
               "seed %u: box %u,%u %ux%u outside %ux%u", i, c.x, c.y, c.w, c.h, w, h);
        double frac = (double)c.w * c.h / ((double)w * h);
        double ratio = (double)c.w / c.h;
        /* rounding each side to whole pixels moves area and ratio by up to ~1 px per side */
        double tol_a = (c.w + c.h + 1.0) / ((double)w * h), tol_r = ratio * (0.5 / c.w + 0.5 / c.h) * 1.01;
        int in_range = frac >= 0.08 - tol_a && frac <= 1 + 1e-9 && ratio >= 0.75 - tol_r && ratio <= 4.0 / 3 + tol_r;
        if (in_range && w >= 200 && h >= 200) /* the next seed should (almost always) draw another box */
            same += c.x == c3.x && c.y == c3.y && c.w == c3.w && c.h == c3.h;
        if (!in_range) {
            /* Must be the fallback: centred, one full side, ratio clamped. */
            fallbacks++;
            double r = (double)w / h;
            uint32_t ew = w, eh = h;
            if (r < 0.75) eh = (uint32_t)nearbyint(w / 0.75);
            else if (r > 4.0 / 3) ew = (uint32_t)nearbyint(h * 4.0 / 3);
            CHECKF(c.w == ew && c.h == eh && c.x == (w - ew) / 2 && c.y == (h - eh) / 2,
                   "seed %u image %ux%u: box %u,%u %ux%u is neither a valid draw nor the fallback",
                   i, w, h, c.x, c.y, c.w, c.h);
        }
        flips += c.flip;
    }
    /* Square 500x500: torchvision's algorithm gives a mean area fraction of 0.478 (not 0.54: large draws
     * overflow one side and are redrawn) and a mean log ratio of 0 (Monte Carlo, 200k draws). */
    for (uint64_t i = 0; i < 20000; i++) {
        struct ps_crop c;
        ps_rrc_box(&p, 500, 500, i ^ 0xabcdef, &c);
        sum_frac += c.w * (double)c.h / 250000.0;
        sum_lr += log((double)c.w / c.h);
        n++;
    }
    CHECKF(fabs(sum_frac / n - 0.478) < 0.01, "mean area fraction %.3f on a square image, expected 0.478", sum_frac / n);
    CHECKF(fabs(sum_lr / n) < 0.01, "mean log ratio %.3f", sum_lr / n);
    CHECKF(flips > 9000 && flips < 11000, "%d flips of 20000", flips);
    CHECKF(fallbacks >= 400, "only %d fallbacks (400 extreme images)", fallbacks);
    CHECKF(same < 20, "%d neighbouring seeds gave the same box", same);

    /* Center crop: 224 of a 256 short side. */
    struct ps_crop c;
    ps_center_box(&p, 512, 384, &c);
    CHECKF(c.w == 336 && c.h == 336 && c.x == 88 && c.y == 24, "center box %u,%u %ux%u", c.x, c.y, c.w, c.h);
    return 0;
}

static int test_psnr_scales(void)
{
    /* Per DCT scale M/8: count, sum and min of PSNR against the reference. */
    /* every scale M/8 (mask 0xff), and the default set (1/8 to 4/8, and 8/8) */
    for (int pass = 0; pass < 2; pass++) {
    unsigned mask = pass ? 0x8F : 0xFF;
    int cnt[9] = { 0 };
    double sum[9] = { 0 }, mn[9];
    for (int m = 0; m < 9; m++) mn[m] = 99;
    const uint32_t sizes[][2] = { { 100, 80 }, { 213, 160 }, { 400, 350 }, { 500, 375 }, { 640, 480 }, { 800, 600 }, { 333, 500 } };
    const uint32_t outs[] = { 224, 160, 112, 64, 32 };
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        uint32_t w = sizes[si][0], h = sizes[si][1];
        uint8_t *img = synth(w, h, si + 1);
        size_t len;
        uint8_t *jpg = enc(img, w, h, 90, 0, &len);
        CHECK(jpg);
        uint8_t *full; uint32_t fw, fh; char err[PS_ERRLEN];
        CHECKF(ps_jpeg_decode_full(jpg, len, 0, &full, &fw, &fh, err) == 0, "%s", err);
        CHECK(fw == w && fh == h);
        for (size_t oi = 0; oi < sizeof outs / sizeof outs[0]; oi++) {
            for (int t = 0; t < 2; t++) {
                struct ps_decode_params p = params(t ? PS_TRANSFORM_CENTER_CROP : PS_TRANSFORM_RANDOM_RESIZED_CROP, outs[oi]);
                struct ps_decoder *d;
                CHECK(ps_decoder_create(&p, &d) == 0);
                if (pass == 0)
                    ps_decoder_set_scales(d, mask);
                for (uint64_t seed = 0; seed < (t ? 2 : 12); seed++) {
                    struct ps_crop used, want;
                    double v = check_one(d, &p, jpg, len, full, w, h, seed * 1000003 + si, &used);
                    CHECKF(v >= 0, "decode failed");
                    if (t == 0) {
                        ps_rrc_box(&p, w, h, seed * 1000003 + si, &want);
                        CHECKF(!memcmp(&used, &want, sizeof used), "crop_out differs from ps_rrc_box");
                    }
                    int m = expect_scale(&used, p.out_w, p.out_h, mask);
                    cnt[m]++;
                    sum[m] += v;
                    if (v < mn[m]) mn[m] = v;
                    CHECKF(v >= 24, "%ux%u out %u seed %llu scale %d/8: PSNR %.1f dB", w, h, outs[oi],
                           (unsigned long long)seed, m, v);
                }
                ps_decoder_destroy(d);
            }
        }
        free(full); free(jpg); free(img);
    }
    printf("# PSNR vs reference (full islow decode, crop, float area/bilinear resize), synthetic q90 set,\n"
           "# %s\n", pass ? "default scales (1/8 to 4/8, 8/8)" : "every scale allowed");
    printf("# scale  samples  mean_dB  min_dB\n");
    for (int m = 1; m <= 8; m++)
        if (cnt[m])
            printf("#  %d/8   %5d    %5.1f   %5.1f\n", m, cnt[m], sum[m] / cnt[m], mn[m]);
    for (int m = 1; m <= 8; m++) {
        if (!(mask >> (m - 1) & 1))
            continue;
        CHECKF(cnt[m] > 0, "scale %d/8 never exercised", m);
        CHECKF(sum[m] / cnt[m] >= 30, "scale %d/8: mean PSNR %.1f dB < 30", m, sum[m] / cnt[m]);
    }
    for (int m = 1; m <= 8; m++)
        if (cnt[m])
            CHECKF(sum[m] / cnt[m] >= 30, "scale %d/8: mean PSNR %.1f dB < 30", m, sum[m] / cnt[m]);
    }
    return 0;
}

/* Real photographs, when a set is there (build/photos or $PS_PHOTOS). */
static int test_psnr_photos(void)
{
    const char *dir = getenv("PS_PHOTOS");
    if (!dir)
        dir = "build/photos";
    DIR *dp = opendir(dir);
    if (!dp)
        SKIP("no photo set at %s (set PS_PHOTOS to a folder of JPEGs)", dir);
    int cnt[9] = { 0 }, files = 0;
    double sum[9] = { 0 };
    struct dirent *de;
    while ((de = readdir(dp)) && files < 60) {
        size_t nl = strlen(de->d_name);
        if (nl < 5 || (strcasecmp(de->d_name + nl - 4, ".jpg") && strcasecmp(de->d_name + nl - 5, ".jpeg")))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        if (!f)
            continue;
        fseek(f, 0, SEEK_END);
        long len = ftell(f);
        fseek(f, 0, SEEK_SET);
        uint8_t *jpg = malloc(len > 0 ? len : 1);
        size_t got = fread(jpg, 1, len, f);
        fclose(f);
        uint8_t *full; uint32_t w, h; char err[PS_ERRLEN];
        if (got != (size_t)len || ps_jpeg_decode_full(jpg, len, 0, &full, &w, &h, err)) {
            free(jpg);
            continue;
        }
        files++;
        const uint32_t outs[] = { 224, 64 };
        for (int oi = 0; oi < 2; oi++) {
            struct ps_decode_params p = params(PS_TRANSFORM_RANDOM_RESIZED_CROP, outs[oi]);
            struct ps_decoder *d;
            CHECK(ps_decoder_create(&p, &d) == 0);
            for (uint64_t seed = 0; seed < 3; seed++) {
                struct ps_crop used;
                double v = check_one(d, &p, jpg, len, full, w, h, seed + files * 7, &used);
                CHECKF(v >= 0, "%s: decode failed", path);
                int m = expect_scale(&used, p.out_w, p.out_h, 0x8F);
                cnt[m]++;
                sum[m] += v;
            }
            ps_decoder_destroy(d);
        }
        free(full);
        free(jpg);
    }
    closedir(dp);
    if (!files)
        SKIP("no decodable JPEG in %s", dir);
    printf("# PSNR on %d photos from %s\n# scale  samples  mean_dB\n", files, dir);
    for (int m = 1; m <= 8; m++)
        if (cnt[m]) {
            printf("#  %d/8   %5d    %5.1f\n", m, cnt[m], sum[m] / cnt[m]);
            CHECKF(sum[m] / cnt[m] >= 30, "photos, scale %d/8: mean PSNR %.1f dB", m, sum[m] / cnt[m]);
        }
    return 0;
}

static int test_reproducible(void)
{
    uint32_t w = 480, h = 360;
    uint8_t *img = synth(w, h, 99);
    size_t len;
    uint8_t *jpg = enc(img, w, h, 90, 0, &len);
    CHECK(jpg);
    struct ps_decode_params p = params(PS_TRANSFORM_RANDOM_RESIZED_CROP, 224);
    struct ps_decoder *d1, *d2;
    CHECK(ps_decoder_create(&p, &d1) == 0);
    CHECK(ps_decoder_create(&p, &d2) == 0);
    size_t n = 224 * 224 * 3;
    uint8_t *a = malloc(n), *b = malloc(n), *c = malloc(n);
    char err[PS_ERRLEN];
    int differ = 0;
    for (uint64_t s = 0; s < 20; s++) {
        struct ps_crop ca, cb, cc;
        CHECK(ps_decode_jpeg(d1, jpg, len, s, a, &ca, err) == 0);
        CHECK(ps_decode_jpeg(d2, jpg, len, s, b, &cb, err) == 0);
        CHECKF(!memcmp(a, b, n) && !memcmp(&ca, &cb, sizeof ca), "seed %llu: two decoders differ", (unsigned long long)s);
        /* decoding other images in between must not change anything */
        CHECK(ps_decode_jpeg(d1, jpg, len, s + 1000, c, &cc, err) == 0);
        CHECK(ps_decode_jpeg(d1, jpg, len, s, c, &cc, err) == 0);
        CHECKF(!memcmp(a, c, n), "seed %llu: decoder state leaked between images", (unsigned long long)s);
        CHECK(ps_decode_jpeg(d1, jpg, len, s + 1, c, &cc, err) == 0);
        differ += memcmp(a, c, n) != 0 && memcmp(&ca, &cc, sizeof ca) != 0;
    }
    CHECKF(differ >= 19, "only %d of 20 seed pairs gave different crops", differ);
    ps_decoder_destroy(d1);
    ps_decoder_destroy(d2);
    free(a); free(b); free(c); free(jpg); free(img);
    return 0;
}

static int test_odd_jpegs(void)
{
    uint32_t w = 301, h = 217;
    uint8_t *img = synth(w, h, 5);
    const char *names[] = { "grayscale", "CMYK (Adobe)", "YCCK", "progressive" };
    struct ps_decode_params p = params(PS_TRANSFORM_CENTER_CROP, 128);
    p.flip = 0;
    struct ps_decoder *d;
    CHECK(ps_decoder_create(&p, &d) == 0);
    uint8_t *out = malloc(128 * 128 * 3);
    char err[PS_ERRLEN];
    for (int k = 0; k < 4; k++) {
        size_t len;
        uint8_t *jpg = enc_kind(img, w, h, k, &len);
        CHECKF(jpg, "encoding %s failed", names[k]);
        struct ps_crop c;
        CHECKF(ps_decode_jpeg(d, jpg, len, 1, out, &c, err) == 0, "%s: %s", names[k], err);
        /* compare with the original pixels (gray: its luma) through the reference resize */
        uint8_t *src = img;
        uint8_t *gray = NULL;
        if (k == 0) {
            gray = malloc((size_t)w * h * 3);
            for (size_t i = 0; i < (size_t)w * h; i++) {
                uint8_t y = (uint8_t)((img[3 * i] * 77 + img[3 * i + 1] * 150 + img[3 * i + 2] * 29 + 128) >> 8);
                gray[3 * i] = gray[3 * i + 1] = gray[3 * i + 2] = y;
            }
            src = gray;
        }
        uint8_t *ref = ref_resize(src, w, h, &c, 128, 128);
        double v = psnr(out, ref, 128 * 128 * 3);
        printf("# %s: PSNR %.1f dB vs the original pixels\n", names[k], v);
        CHECKF(v >= 30, "%s: PSNR %.1f dB vs the original", names[k], v);
        for (uint64_t s = 0; s < 5; s++) {     /* scaled paths and crops too */
            struct ps_decode_params q = params(PS_TRANSFORM_RANDOM_RESIZED_CROP, 40);
            struct ps_decoder *dq;
            CHECK(ps_decoder_create(&q, &dq) == 0);
            uint8_t o2[40 * 40 * 3];
            CHECKF(ps_decode_jpeg(dq, jpg, len, s, o2, &c, err) == 0, "%s: %s", names[k], err);
            uint8_t *r2 = ref_resize(src, w, h, &c, 40, 40);
            double v2 = psnr(o2, r2, sizeof o2);
            CHECKF(v2 >= 28, "%s seed %llu out 40: PSNR %.1f", names[k], (unsigned long long)s, v2);
            free(r2);
            ps_decoder_destroy(dq);
        }
        free(ref); free(gray); free(jpg);
    }

    /* Truncated: any cut must give PS_EDECODE or a picture, never a crash; cuts the crop needs must fail. */
    size_t len;
    uint8_t *jpg = enc(img, w, h, 90, 0, &len);
    CHECK(jpg);
    for (size_t cut = 0; cut < len; cut += 1 + cut / 7) {
        int rc = ps_decode_jpeg(d, jpg, cut, 3, out, NULL, err);
        CHECKF(rc == 0 || rc == PS_EDECODE, "cut at %zu: rc %d", cut, rc);
        if (cut > 0 && cut < len * 6 / 10)    /* the centre crop reaches the bottom third */
            CHECKF(rc == PS_EDECODE && err[0], "cut at %zu of %zu decoded", cut, len);
    }
    CHECK(ps_decode_jpeg(d, jpg, len / 2, 3, out, NULL, err) == PS_EDECODE);
    printf("# truncated at half: %s\n", err);
    CHECK(strstr(err, "Premature end") || strstr(err, "premature end") || strstr(err, "Corrupt"));
    CHECK(ps_decode_jpeg(d, jpg, len, 3, out, NULL, err) == 0);   /* still usable after errors */

    /* Garbage: random bytes, random bytes after a JPEG header, bit flips in the scan. */
    uint8_t *g = malloc(len);
    for (int t = 0; t < 300; t++) {
        rng_state = t + 1;
        memcpy(g, jpg, len);
        if (t < 50) {
            for (size_t i = 0; i < len; i++) g[i] = (uint8_t)rnd();
        } else if (t < 100) {
            for (size_t i = 600; i < len; i++) g[i] = (uint8_t)rnd();
        } else {
            for (int f = 0; f < 1 + t % 20; f++) g[rnd() % len] ^= (uint8_t)(1u << (rnd() % 8));
        }
        int rc = ps_decode_jpeg(d, g, len, t, out, NULL, err);
        CHECKF(rc == 0 || rc == PS_EDECODE, "garbage %d: rc %d", t, rc);
        if (t < 50)
            CHECKF(rc == PS_EDECODE, "random bytes decoded");
        if (rc == 0) { /* nothing to check: a flipped bit can still be a valid JPEG */ }
    }
    CHECK(ps_decode_jpeg(d, (const uint8_t *)"\xff\xd8\xff", 3, 0, out, NULL, err) == PS_EDECODE);
    CHECK(ps_decode_jpeg(d, NULL, 0, 0, out, NULL, err) == PS_EDECODE);
    uint32_t dw, dh;
    CHECK(ps_jpeg_dims(jpg, len, &dw, &dh) == 0 && dw == w && dh == h);
    CHECK(ps_jpeg_dims(g, 10, &dw, &dh) == PS_EDECODE);
    free(g); free(jpg); free(out); free(img);
    ps_decoder_destroy(d);
    return 0;
}

static int test_corpus(void)
{
    const char *dir = "tests/corpus/jpeg";
    DIR *dp = opendir(dir);
    if (!dp)
        SKIP("no %s (run from the repository root)", dir);
    /* RRC crops, and the whole image (so a truncation anywhere must show) */
    struct ps_decode_params p = params(PS_TRANSFORM_RANDOM_RESIZED_CROP, 32), pw = params(PS_TRANSFORM_NONE, 32);
    struct ps_decoder *d, *dw;
    CHECK(ps_decoder_create(&p, &d) == 0 && ps_decoder_create(&pw, &dw) == 0);
    int n = 0;
    struct dirent *de;
    while ((de = readdir(dp))) {
        if (!strstr(de->d_name, ".jpg"))
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        FILE *f = fopen(path, "rb");
        CHECK(f);
        uint8_t buf[65536];
        size_t len = fread(buf, 1, sizeof buf, f);
        fclose(f);
        uint8_t out[32 * 32 * 3];
        char err[PS_ERRLEN];
        int rc = ps_decode_jpeg(dw, buf, len, 1, out, NULL, err);
        if (strstr(de->d_name, "bad")) {
            CHECKF(rc == PS_EDECODE, "%s decoded", path);
        } else {
            CHECKF(rc == 0, "%s: %s", path, err);
            for (uint64_t s = 0; s < 8; s++)
                CHECKF(ps_decode_jpeg(d, buf, len, s, out, NULL, err) == 0, "%s: %s", path, err);
        }
        n++;
    }
    closedir(dp);
    ps_decoder_destroy(d);
    ps_decoder_destroy(dw);
    CHECKF(n >= 5, "only %d corpus files", n);
    return 0;
}

static int test_restart(void)
{
    const uint32_t sizes[][2] = { { 400, 350 }, { 333, 500 }, { 803, 611 }, { 120, 90 } };
    char err[PS_ERRLEN];
    uint64_t total = 0, fast = 0;
    for (size_t si = 0; si < 4; si++) {
        uint32_t w = sizes[si][0], h = sizes[si][1];
        uint8_t *img = synth(w, h, si + 40);
        size_t len, len2, len3, len4;
        uint8_t *plain = enc(img, w, h, 92, 0, &len);
        uint8_t *rst = enc(img, w, h, 92, 1, &len2);
        uint8_t *added = NULL, *gray_added = NULL;
        CHECK(plain && rst);
        CHECKF(ps_jpeg_add_restarts(plain, len, &added, &len3, err) == 0, "%s", err);
        /* lossless: same pixels as the original */
        uint8_t *f1, *f2; uint32_t w1, h1, w2, h2;
        CHECK(ps_jpeg_decode_full(plain, len, 0, &f1, &w1, &h1, err) == 0);
        CHECK(ps_jpeg_decode_full(added, len3, 0, &f2, &w2, &h2, err) == 0);
        CHECKF(w1 == w2 && h1 == h2 && !memcmp(f1, f2, (size_t)w1 * h1 * 3), "add_restarts changed pixels");
        struct ps_jpeg_layout lay;
        CHECK(ps_jpeg_layout(added, len3, &lay) == 0 && lay.restart > 0);
        size_t glen;
        uint8_t *gray = enc_kind(img, w, h, 0, &glen), *prog = enc_kind(img, w, h, 3, &len4);
        CHECK(gray && prog);
        size_t galen, palen;
        uint8_t *prog_added = NULL;
        CHECK(ps_jpeg_add_restarts(gray, glen, &gray_added, &galen, err) == 0);
        CHECK(ps_jpeg_add_restarts(prog, len4, &prog_added, &palen, err) == 0);
        free(f1);
        free(f2);
        CHECK(ps_jpeg_decode_full(prog, len4, 0, &f1, &w1, &h1, err) == 0);
        CHECK(ps_jpeg_decode_full(prog_added, palen, 0, &f2, &w2, &h2, err) == 0);
        CHECKF(!memcmp(f1, f2, (size_t)w1 * h1 * 3), "progressive -> restart baseline changed pixels");
        free(f1); free(f2);
        printf("# %ux%u: %zu bytes, encoded with restart markers %zu (%+.1f%%), added losslessly %zu\n", w, h, len,
               len2, 100.0 * ((double)len2 / len - 1), len3);

        /* Restart markers every MCU row, every 2 and 4 MCUs (a 2D grid of segments when they divide
         * a row; otherwise no fast path), and every MCU row of a grayscale image. */
        uint8_t *mcu1, *mcu2, *mcu4, *gray1;
        size_t l1, l2, l4, lg1;
        CHECK(ps_jpeg_add_restarts_n(plain, len, 0, &mcu1, &l1, err) == 0);
        CHECK(ps_jpeg_add_restarts_n(plain, len, 2, &mcu2, &l2, err) == 0);
        CHECK(ps_jpeg_add_restarts_n(plain, len, 4, &mcu4, &l4, err) == 0);
        CHECK(ps_jpeg_add_restarts_n(gray, glen, 0, &gray1, &lg1, err) == 0);
        printf("#   every MCU row: %zu bytes, every 2 MCUs: %zu, every 4: %zu\n", l1, l2, l4);
        const uint8_t *cases[] = { rst, added, gray_added, prog_added, mcu1, mcu2, mcu4, gray1 };
        const size_t lens[] = { len2, len3, galen, palen, l1, l2, l4, lg1 };
        for (int ci = 0; ci < 8; ci++) {
            for (int o = 0; o < 3; o++) {
                uint32_t out = o == 0 ? 224 : o == 1 ? 64 : 24;
                struct ps_decode_params pa = params(PS_TRANSFORM_RANDOM_RESIZED_CROP, out), pb;
                pa.use_restart = 1;
                pb = pa;
                pb.use_restart = 0;
                struct ps_decoder *da, *db;
                CHECK(ps_decoder_create(&pa, &da) == 0 && ps_decoder_create(&pb, &db) == 0);
                size_t n = (size_t)out * out * 3;
                uint8_t *a = malloc(n), *b = malloc(n);
                for (uint64_t s = 0; s < 25; s++) {
                    CHECKF(ps_decode_jpeg(da, cases[ci], lens[ci], s, a, NULL, err) == 0, "%s", err);
                    CHECKF(ps_decode_jpeg(db, cases[ci], lens[ci], s, b, NULL, err) == 0, "%s", err);
                    CHECKF(!memcmp(a, b, n), "%ux%u case %d out %u seed %llu: fast path differs (PSNR %.1f)",
                           w, h, ci, out, (unsigned long long)s, psnr(a, b, n));
                    total++;
                }
                fast += ps_decoder_fastpath_count(da);
                CHECK(ps_decoder_fastpath_count(db) == 0);
                /* A JPEG without markers never takes the fast path. */
                uint64_t before = ps_decoder_fastpath_count(da);
                CHECK(ps_decode_jpeg(da, plain, len, 1, a, NULL, err) == 0);
                CHECK(ps_decoder_fastpath_count(da) == before);
                free(a); free(b);
                ps_decoder_destroy(da);
                ps_decoder_destroy(db);
            }
        }
        /* A truncated restart JPEG still fails cleanly through the fast path. */
        struct ps_decode_params pc = params(PS_TRANSFORM_CENTER_CROP, 64);
        struct ps_decoder *dc;
        CHECK(ps_decoder_create(&pc, &dc) == 0);
        uint8_t o3[64 * 64 * 3];
        for (size_t cut = 10; cut < len2; cut += 97) {
            int rc = ps_decode_jpeg(dc, rst, cut, 0, o3, NULL, err);
            CHECKF(rc == 0 || rc == PS_EDECODE, "rc %d", rc);
        }
        CHECK(ps_decode_jpeg(dc, rst, len2 / 2, 0, o3, NULL, err) == PS_EDECODE);
        ps_decoder_destroy(dc);
        free(plain); free(rst); free(added); free(gray); free(prog); free(gray_added); free(prog_added); free(img);
        free(mcu1); free(mcu2); free(mcu4); free(gray1);
    }
    printf("# restart fast path taken in %llu of %llu decodes, all identical to the normal path\n",
           (unsigned long long)fast, (unsigned long long)total);
    CHECKF(fast > total / 2, "fast path taken only %llu of %llu times", (unsigned long long)fast, (unsigned long long)total);
    return 0;
}

static int test_nchw(void)
{
    uint32_t w = 350, h = 260;
    uint8_t *img = synth(w, h, 8);
    size_t len;
    uint8_t *jpg = enc(img, w, h, 90, 0, &len);
    struct ps_decode_params a = params(PS_TRANSFORM_RANDOM_RESIZED_CROP, 96), b;
    b = a;
    b.layout = PS_LAYOUT_NCHW;
    a.out_h = b.out_h = 80;    /* not square */
    struct ps_decoder *da, *db;
    CHECK(ps_decoder_create(&a, &da) == 0 && ps_decoder_create(&b, &db) == 0);
    size_t n = 96 * 80 * 3;
    uint8_t *x = malloc(n), *y = malloc(n), *r = malloc(n);
    char err[PS_ERRLEN];
    int flips = 0;
    for (uint64_t s = 0; s < 16; s++) {
        struct ps_crop c;
        CHECK(ps_decode_jpeg(da, jpg, len, s, x, &c, err) == 0);
        CHECK(ps_decode_jpeg(db, jpg, len, s, y, NULL, err) == 0);
        flips += c.flip;
        for (uint32_t yy = 0; yy < 80; yy++)
            for (uint32_t xx = 0; xx < 96; xx++)
                for (int ch = 0; ch < 3; ch++)
                    CHECKF(y[(size_t)ch * 80 * 96 + yy * 96 + xx] == x[((size_t)yy * 96 + xx) * 3 + ch],
                           "seed %llu: NCHW != transposed NHWC at %u,%u,%d", (unsigned long long)s, yy, xx, ch);
        /* flip: the same crop without flip is the mirror image */
        struct ps_decode_params nf = a;
        nf.flip = 0;
        struct ps_decoder *dn;
        CHECK(ps_decoder_create(&nf, &dn) == 0);
        struct ps_crop c2;
        CHECK(ps_decode_jpeg(dn, jpg, len, s, r, &c2, err) == 0);
        CHECK(c2.x == c.x && c2.y == c.y && c2.w == c.w && c2.h == c.h && c2.flip == 0);
        for (uint32_t yy = 0; yy < 80; yy++)
            for (uint32_t xx = 0; xx < 96; xx++)
                CHECKF(!memcmp(r + ((size_t)yy * 96 + xx) * 3,
                               x + ((size_t)yy * 96 + (c.flip ? 95 - xx : xx)) * 3, 3), "flip mismatch");
        ps_decoder_destroy(dn);
    }
    CHECKF(flips > 0 && flips < 16, "%d of 16 flipped", flips);
    ps_decoder_destroy(da); ps_decoder_destroy(db);
    free(x); free(y); free(r); free(jpg); free(img);
    return 0;
}

static int test_raw(void)
{
    uint32_t w = 517, h = 389;
    uint8_t *img = synth(w, h, 11);
    const uint32_t outs[] = { 224, 64, 600 };
    char err[PS_ERRLEN];
    for (int oi = 0; oi < 3; oi++) {
        for (int t = 0; t < 2; t++) {
            struct ps_decode_params p = params(t ? PS_TRANSFORM_CENTER_CROP : PS_TRANSFORM_RANDOM_RESIZED_CROP, outs[oi]);
            struct ps_decoder *d;
            CHECK(ps_decoder_create(&p, &d) == 0);
            size_t n = (size_t)outs[oi] * outs[oi] * 3;
            uint8_t *o = malloc(n);
            for (uint64_t s = 0; s < 6; s++) {
                struct ps_crop c, want;
                CHECKF(ps_decode_raw(d, img, h, w, s, o, &c, err) == 0, "%s", err);
                if (!t) {
                    ps_rrc_box(&p, w, h, s, &want);
                    CHECK(!memcmp(&c, &want, sizeof c));
                }
                uint8_t *ref = ref_resize(img, w, h, &c, outs[oi], outs[oi]);
                double v = psnr(o, ref, n);
                CHECKF(v >= 45, "raw out %u seed %llu: PSNR %.1f vs float reference", outs[oi], (unsigned long long)s, v);
                free(ref);
            }
            free(o);
            ps_decoder_destroy(d);
        }
    }
    free(img);
    return 0;
}

static int test_resize(void)
{
    /* identity, a constant image, and exact 2x2 averages */
    uint32_t w = 64, h = 48;
    uint8_t *img = synth(w, h, 3), *o = malloc(w * h * 3);
    ps_resize_rgb(img, w, h, w * 3, o, w, h, w * 3);
    CHECK(!memcmp(img, o, w * h * 3));
    uint8_t *half = malloc(32 * 24 * 3);
    ps_resize_rgb(img, w, h, w * 3, half, 32, 24, 32 * 3);
    for (uint32_t y = 0; y < 24; y++)
        for (uint32_t x = 0; x < 32; x++)
            for (int c = 0; c < 3; c++) {
                double m = (img[((2 * y) * w + 2 * x) * 3 + c] + img[((2 * y) * w + 2 * x + 1) * 3 + c] +
                            img[((2 * y + 1) * w + 2 * x) * 3 + c] + img[((2 * y + 1) * w + 2 * x + 1) * 3 + c]) / 4.0;
                CHECKF(fabs(half[(y * 32 + x) * 3 + c] - m) <= 0.51, "2x2 mean %.2f got %d", m, half[(y * 32 + x) * 3 + c]);
            }
    memset(img, 77, w * h * 3);
    uint8_t *big = malloc(173 * 101 * 3);
    ps_resize_rgb(img, w, h, w * 3, big, 173, 101, 173 * 3);
    for (size_t i = 0; i < 173 * 101 * 3; i++)
        CHECKF(big[i] == 77, "constant image changed at %zu: %d", i, big[i]);
    ps_resize_rgb(img, w, h, w * 3, o, 7, 5, 7 * 3);
    for (size_t i = 0; i < 7 * 5 * 3; i++)
        CHECK(o[i] == 77);
    free(img); free(o); free(half); free(big);
    return 0;
}

#ifdef PS_HAVE_CUDA
static float half_to_float(uint16_t h)
{
    int e = (h >> 10) & 31, m = h & 1023;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m | 1024), e - 25);
    return (h & 0x8000) ? -v : v;
}
#endif

static int test_xfer(void)
{
    char why[PS_ERRLEN];
    if (!ps_xfer_available(why))
        SKIP("%s", why);
#ifndef PS_HAVE_CUDA
    SKIP("built without CUDA");
#else
    const uint32_t N = 3, H = 5, W = 7;
    size_t n = (size_t)N * H * W * 3;
    uint8_t *host = ps_xfer_host_alloc(n, 1);
    CHECK(host);
    for (size_t i = 0; i < n; i++)
        host[i] = (uint8_t)(i * 7 + 3);
    const int dtypes[] = { PS_DTYPE_UINT8, PS_DTYPE_FLOAT16, PS_DTYPE_FLOAT32 };
    for (int di = 0; di < 3; di++)
        for (int layout = 0; layout < 2; layout++) {
            struct ps_xfer_params xp = { .slots = 2, .max_n = N, .h = H, .w = W, .dtype = dtypes[di],
                                         .layout = layout, .mean = { 10, 20, 30 }, .std = { 2, 4, 8 } };
            struct ps_xfer *x;
            char err[PS_ERRLEN];
            CHECKF(ps_xfer_create(&xp, &x, err) == 0, "%s", err);
            CHECK(ps_xfer_submit(x, 1, host, N) == 0);
            void *dev;
            size_t bytes, esz = dtypes[di] == PS_DTYPE_UINT8 ? 1 : dtypes[di] == PS_DTYPE_FLOAT16 ? 2 : 4;
            CHECK(ps_xfer_wait(x, 1, &dev, &bytes) == 0);
            CHECK(bytes == n * esz);
            uint8_t *back = malloc(bytes);
            CHECK(cudaMemcpy(back, dev, bytes, cudaMemcpyDeviceToHost) == cudaSuccess);
            for (uint32_t b = 0; b < N; b++)
                for (uint32_t c = 0; c < 3; c++)
                    for (uint32_t p = 0; p < H * W; p++) {
                        uint8_t in = host[((size_t)b * H * W + p) * 3 + c];
                        size_t o = layout == PS_LAYOUT_NCHW ? ((size_t)b * 3 + c) * H * W + p : ((size_t)b * H * W + p) * 3 + c;
                        double want = dtypes[di] == PS_DTYPE_UINT8 ? in : (in - xp.mean[c]) / xp.std[c];
                        double got = esz == 1 ? back[o] : esz == 2 ? half_to_float(((uint16_t *)back)[o]) : ((float *)back)[o];
                        CHECKF(fabs(got - want) <= (esz == 2 ? 0.01 * fabs(want) + 1e-3 : 1e-4),
                               "dtype %d layout %d: [%u,%u,%u] %f != %f", dtypes[di], layout, b, c, p, got, want);
                    }
            free(back);
            ps_xfer_destroy(x);
        }
    ps_xfer_host_free(host, 1);
    return 0;
#endif
}

T_MAIN(T(test_crop_box), T(test_resize), T(test_raw), T(test_psnr_scales), T(test_psnr_photos),
       T(test_reproducible), T(test_odd_jpegs), T(test_corpus), T(test_restart), T(test_nchw), T(test_xfer))
