/* jpeg.c - crop-aware JPEG decoding with the libjpeg API of libjpeg-turbo: decode only the rows,
 * columns (and, with restart markers, entropy-coded segments) the crop needs, at the smallest DCT
 * scale that keeps it at least the output size; plus full decode and encode for tools and tests. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jpeglib.h>
#include <jerror.h>

#include "pagestream.h"
#include "decode/decode.h"
#include "decode/decode_int.h"
#include "io/io.h"

/* libjpeg's virtual arrays (progressive coefficients) beyond this fail instead of growing. */
#define PS_JPEG_MAX_MEM (512L << 20)
/* Our own row buffer for one crop. */
#define PS_JPEG_MAX_BUF ((size_t)512 << 20)
/*
 * DCT scales used by default: 1/8 to 4/8, and 8/8. At 5/8..7/8 libjpeg-turbo runs plain C inverse
 * DCTs (and for 4:2:0 chroma scaled twice as large: 10x10, 12x12, 14x14) that are slower than
 * decoding at 8/8 and resizing. Full decodes of the ImageNet-like set, ms per image, 1/8..8/8:
 * 0.95 1.19 1.24 1.27 | 1.48 1.52 1.70 | 1.36 (Huffman decoding is the ~0.9 ms floor).
 */
#define PS_SCALES_DEFAULT 0x8Fu

struct ps_jerr {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
    int warn_fatal;
    char msg[JMSG_LENGTH_MAX];
};

struct ps_decoder {
    struct ps_decode_params p;
    struct jpeg_decompress_struct ci;
    struct ps_jerr jerr;
    unsigned scales;            /* bit M-1: scale M/8 allowed */
    uint8_t *buf;               /* decoded crop rows (RGB, or CMYK before conversion) */
    size_t bufcap;
    JSAMPROW *rows;
    size_t rowscap;
    uint8_t *rst;               /* the JPEG cut out for the restart fast path */
    size_t rstcap;
    struct ps_resizer rs;
    uint64_t fastpath;
};

static void ps_jpeg_error_exit(j_common_ptr ci)
{
    struct ps_jerr *e = (struct ps_jerr *)ci->err;
    e->pub.format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

/*
 * Warnings (level -1) are how libjpeg reports truncated or corrupt data while
 * still producing pixels (grey fill). We refuse such samples rather than feed
 * garbage to training; only harmless metadata warnings pass.
 */
static void ps_jpeg_emit(j_common_ptr ci, int level)
{
    struct ps_jerr *e = (struct ps_jerr *)ci->err;
    if (level >= 0)
        return;
    e->pub.num_warnings++;
    int c = e->pub.msg_code;
    if (!e->warn_fatal || c == JWRN_ADOBE_XFORM || c == JWRN_JFIF_MAJOR || c == JWRN_BOGUS_ICC)
        return;
    e->pub.format_message(ci, e->msg);
    longjmp(e->jb, 1);
}

static void jerr_init(struct ps_jerr *e)
{
    jpeg_std_error(&e->pub);
    e->pub.error_exit = ps_jpeg_error_exit;
    e->pub.emit_message = ps_jpeg_emit;
    e->warn_fatal = 1;
    e->msg[0] = 0;
}

static int grow(void **p, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t n = need + need / 4;
    void *q = realloc(*p, n);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

int ps_decoder_create(const struct ps_decode_params *p, struct ps_decoder **out)
{
    *out = NULL;
    if (!p || p->out_h == 0 || p->out_w == 0 || p->out_h > 16384 || p->out_w > 16384)
        return PS_ECONFIG;
    struct ps_decoder *d = calloc(1, sizeof *d);
    if (!d)
        return -ENOMEM;
    d->p = *p;
    d->scales = PS_SCALES_DEFAULT;
    jerr_init(&d->jerr);
    d->ci.err = &d->jerr.pub;
    if (setjmp(d->jerr.jb)) {   /* only out of memory can fail here */
        free(d);
        return -ENOMEM;
    }
    jpeg_create_decompress(&d->ci);
    d->ci.mem->max_memory_to_use = PS_JPEG_MAX_MEM;
    *out = d;
    return 0;
}

void ps_decoder_destroy(struct ps_decoder *d)
{
    if (!d)
        return;
    jpeg_destroy_decompress(&d->ci);
    ps_resizer_free(&d->rs);
    free(d->buf);
    free(d->rows);
    free(d->rst);
    free(d);
}

uint64_t ps_decoder_fastpath_count(const struct ps_decoder *d)
{
    return d->fastpath;
}

void ps_decoder_set_scales(struct ps_decoder *d, unsigned mask)
{
    d->scales = (mask & 0xFFu) ? (mask & 0xFFu) : PS_SCALES_DEFAULT;
}

/* Box and flip for this sample, in source pixels. */
static void pick_box(const struct ps_decode_params *p, uint32_t w, uint32_t h, uint64_t seed, struct ps_crop *c)
{
    if (p->transform == PS_TRANSFORM_RANDOM_RESIZED_CROP) {
        ps_rrc_box(p, w, h, seed, c);
        return;
    }
    if (p->transform == PS_TRANSFORM_CENTER_CROP) {
        ps_center_box(p, w, h, c);
    } else {
        c->x = c->y = 0;
        c->w = w;
        c->h = h;
    }
    c->flip = p->flip ? ps_crop_flip_bit(seed) : 0;
}

/* Smallest M (allowed by mask) with the crop scaled by M/8 still >= the output. */
static int pick_scale(unsigned mask, const struct ps_crop *c, uint32_t ow, uint32_t oh)
{
    for (int m = 1; m <= 8; m++) {
        if (!(mask & (1u << (m - 1))))
            continue;
        if ((uint64_t)c->w * m >= (uint64_t)ow * 8 && (uint64_t)c->h * m >= (uint64_t)oh * 8)
            return m;
    }
    return 8;
}

/* Adobe CMYK is stored inverted (most CMYK JPEGs come from Photoshop); plain CMYK is not. */
static void cmyk_to_rgb(uint8_t *row, uint32_t n, int inverted)
{
    const uint8_t *s = row;
    uint8_t *d = row;
    for (uint32_t i = 0; i < n; i++, s += 4, d += 3) {
        uint32_t c = s[0], m = s[1], y = s[2], k = s[3];
        if (!inverted) {
            c = 255 - c; m = 255 - m; y = 255 - y; k = 255 - k;
        }
        d[0] = (uint8_t)((c * k + 127) / 255);
        d[1] = (uint8_t)((m * k + 127) / 255);
        d[2] = (uint8_t)((y * k + 127) / 255);
    }
}

/* Output colour space for the source's, or -1 when we cannot make RGB of it. */
static int set_out_space(j_decompress_ptr ci, int *cmyk)
{
    *cmyk = 0;
    switch (ci->jpeg_color_space) {
    case JCS_GRAYSCALE:
    case JCS_YCbCr:
    case JCS_RGB:
        ci->out_color_space = JCS_RGB;
        return 0;
    case JCS_CMYK:
    case JCS_YCCK:
        ci->out_color_space = JCS_CMYK;
        *cmyk = 1;
        return 0;
    default:
        return -1;
    }
}

/*
 * MCU geometry of the first scan, for the restart fast path: MCU size in
 * source pixels and MCUs per row, as libjpeg's per_scan_setup computes them
 * (not yet done after jpeg_read_header).
 */
static int mcu_geometry(j_decompress_ptr ci, uint32_t *mcu_w, uint32_t *mcu_h, uint32_t *mcus_per_row)
{
    if (ci->comps_in_scan == 1) {
        jpeg_component_info *cp = ci->cur_comp_info[0];
        uint32_t cw = (uint32_t)(((uint64_t)ci->image_width * cp->h_samp_factor + ci->max_h_samp_factor - 1) /
                                 ci->max_h_samp_factor);
        if ((8u * ci->max_v_samp_factor) % cp->v_samp_factor || (8u * ci->max_h_samp_factor) % cp->h_samp_factor)
            return -1;
        *mcus_per_row = (cw + 7) / 8;
        *mcu_w = 8u * ci->max_h_samp_factor / cp->h_samp_factor;
        *mcu_h = 8u * ci->max_v_samp_factor / cp->v_samp_factor;
        return 0;
    }
    *mcu_w = 8u * ci->max_h_samp_factor;
    *mcu_h = 8u * ci->max_v_samp_factor;
    *mcus_per_row = (ci->image_width + *mcu_w - 1) / *mcu_w;
    return 0;
}

/*
 * The restart fast path. When the scan has a restart marker every k MCU rows
 * or every k MCUs within a row, its segments form a grid, and each decodes
 * on its own. Replace the source by a JPEG made of just the segments that
 * hold output pixels [cx0, cx1) x [ry0, ry1) at scale m/8, plus a pixel of
 * margin on every side (the context of fancy chroma upsampling), so the
 * entropy decoding of everything else is skipped. Sets the output pixel
 * where the cut image starts, or returns -1 to decode the whole JPEG.
 */
static int restart_slice(struct ps_decoder *d, const uint8_t *jpeg, size_t len, int m, uint32_t cx0, uint32_t cx1,
                         uint32_t ry0, uint32_t ry1, uint32_t *col0, uint32_t *row0)
{
    j_decompress_ptr ci = &d->ci;
    struct ps_jpeg_layout lay;
    uint32_t mcu_w, mcu_h, mpr, cols, seg_w, seg_h;   /* seg_w/seg_h: segment size in MCUs */
    uint32_t R = ci->restart_interval;

    if (ci->progressive_mode || ci->arith_code || R == 0 || ci->comps_in_scan != ci->num_components)
        return -1;
    if (mcu_geometry(ci, &mcu_w, &mcu_h, &mpr) || mpr == 0)
        return -1;
    if (R % mpr == 0) {
        cols = 1; seg_w = mpr; seg_h = R / mpr;
    } else if (mpr % R == 0) {
        cols = mpr / R; seg_w = R; seg_h = 1;
    } else {
        return -1;                  /* segments straddle MCU rows */
    }
    uint32_t segw_px = seg_w * mcu_w, segh_px = seg_h * mcu_h;
    if ((uint64_t)segw_px * m % 8 || (uint64_t)segh_px * m % 8)
        return -1;
    uint32_t segw_s = segw_px * m / 8, segh_s = segh_px * m / 8;
    uint32_t W = ci->image_width, H = ci->image_height;
    uint32_t srows = (H + segh_px - 1) / segh_px;
    uint32_t a0 = ry0 ? ry0 - 1 : 0, a1 = ry1 + 1, b0 = cx0 ? cx0 - 1 : 0, b1 = cx1 + 1;
    uint32_t s0 = a0 / segh_s, s1 = (a1 + segh_s - 1) / segh_s;
    uint32_t t0 = b0 / segw_s, t1 = (b1 + segw_s - 1) / segw_s;
    if (s1 > srows) s1 = srows;
    if (t1 > cols) t1 = cols;
    if (s0 == 0 && s1 == srows && t0 == 0 && t1 == cols)
        return -1;                  /* nothing to skip */
    if (ps_jpeg_layout(jpeg, len, &lay) || lay.h != H || lay.w != W)
        return -1;
    uint32_t new_w = (t1 - t0) * segw_px, new_h = (s1 - s0) * segh_px;
    if (new_w > W - t0 * segw_px) new_w = W - t0 * segw_px;
    if (new_h > H - s0 * segh_px) new_h = H - s0 * segh_px;
    size_t n = ps_rst_extract(jpeg, len, &lay, cols, t0, t1, s0, s1, new_w, new_h, &d->rst, &d->rstcap);
    if (!n)
        return -1;
    jpeg_abort_decompress(ci);
    jpeg_mem_src(ci, d->rst, (unsigned long)n);
    jpeg_read_header(ci, TRUE);
    *col0 = t0 * segw_s;
    *row0 = s0 * segh_s;
    return 0;
}

/* The decode proper; libjpeg errors longjmp out of it to ps_decode_jpeg. */
static __attribute__((noinline)) int decode_body(struct ps_decoder *d, const uint8_t *jpeg, size_t len,
                                                 uint64_t seed, uint8_t *out, struct ps_crop *crop_out, char *err)
{
    j_decompress_ptr ci = &d->ci;
    struct ps_crop c;
    int cmyk, m;
    uint32_t row0 = 0, col0 = 0;

    jpeg_mem_src(ci, jpeg, (unsigned long)len);
    jpeg_read_header(ci, TRUE);
    uint32_t W = ci->image_width, H = ci->image_height;
    pick_box(&d->p, W, H, seed, &c);
    if (crop_out)
        *crop_out = c;
    m = pick_scale(d->scales, &c, d->p.out_w, d->p.out_h);

    /* The crop in output pixels at scale m/8 (libjpeg's scaled pixel k covers source [8k/m, 8(k+1)/m)). */
    double s = m / 8.0;
    double fx = c.x * s, fy = c.y * s, fw = c.w * s, fh = c.h * s;
    uint32_t oh_full = (uint32_t)(((uint64_t)H * m + 7) / 8), ow_full = (uint32_t)(((uint64_t)W * m + 7) / 8);
    uint32_t ry0 = (uint32_t)floor(fy), ry1 = (uint32_t)ceil(fy + fh - 1e-9);
    uint32_t cx0 = (uint32_t)floor(fx), cx1 = (uint32_t)ceil(fx + fw - 1e-9);
    if (ry1 > oh_full) ry1 = oh_full;
    if (cx1 > ow_full) cx1 = ow_full;
    if (ry1 <= ry0) ry1 = ry0 + 1;
    if (cx1 <= cx0) cx1 = cx0 + 1;

    if (d->p.use_restart && restart_slice(d, jpeg, len, m, cx0, cx1, ry0, ry1, &col0, &row0) == 0)
        d->fastpath++;

    if (set_out_space(ci, &cmyk)) {
        jpeg_abort_decompress(ci);
        return ps_seterr(err, PS_EDECODE, "bad JPEG: unsupported colour space (%d components)", ci->num_components);
    }
    ci->scale_num = (unsigned)m;
    ci->scale_denom = 8;
    ci->dct_method = JDCT_ISLOW;
    jpeg_start_decompress(ci);

    /* Rows and columns relative to the (possibly cut) image. */
    uint32_t y0 = ry0 - row0, y1 = ry1 - row0;
    cx0 -= col0;
    cx1 -= col0;
    if (y1 > ci->output_height)
        y1 = ci->output_height;
    if (cx1 > ci->output_width)
        cx1 = ci->output_width;
    if (y0 >= y1 || cx0 >= cx1) {
        jpeg_abort_decompress(ci);
        return ps_seterr(err, PS_EDECODE, "bad JPEG: crop outside the decoded image");
    }
    JDIMENSION xoff = cx0, cw = cx1 - cx0;
    if (cx0 > 0 || cx1 < ci->output_width)
        jpeg_crop_scanline(ci, &xoff, &cw);
    uint32_t comps = (uint32_t)ci->output_components;
    size_t stride = (size_t)ci->output_width * comps;
    uint32_t nrows = y1 - y0;
    if (stride * nrows > PS_JPEG_MAX_BUF) {
        jpeg_abort_decompress(ci);
        return ps_seterr(err, PS_EDECODE, "JPEG too large: %ux%u crop of %ux%u", c.w, c.h, W, H);
    }
    if (grow((void **)&d->buf, &d->bufcap, stride * nrows) ||
        grow((void **)&d->rows, &d->rowscap, nrows * sizeof(JSAMPROW))) {
        jpeg_abort_decompress(ci);
        return ps_seterr(err, -ENOMEM, "out of memory for a %ux%u crop", c.w, c.h);
    }
    for (uint32_t i = 0; i < nrows; i++)
        d->rows[i] = d->buf + i * stride;
    if (y0)
        jpeg_skip_scanlines(ci, y0);
    while (ci->output_scanline < y1) {
        JDIMENSION got = jpeg_read_scanlines(ci, d->rows + (ci->output_scanline - y0), y1 - ci->output_scanline);
        if (got == 0)
            ERREXIT(ci, JERR_INPUT_EMPTY);
    }
    int inverted = ci->saw_Adobe_marker;
    jpeg_abort_decompress(ci);
    if (cmyk)
        for (uint32_t i = 0; i < nrows; i++)
            cmyk_to_rgb(d->rows[i], cw, inverted);

    int rc = ps_resizer_run(&d->rs, d->buf, cw, nrows, stride, fx - col0 - xoff, fy - row0 - y0, fw, fh,
                            out, d->p.out_w, d->p.out_h, c.flip, d->p.layout);
    if (rc)
        return ps_seterr(err, rc, "out of memory for resize tables");
    return 0;
}

int ps_decode_jpeg(struct ps_decoder *d, const uint8_t *jpeg, size_t len, uint64_t seed,
                   uint8_t *out, struct ps_crop *crop_out, char *err)
{
    if (!jpeg || len < 4 || len > (unsigned long)-1)
        return ps_seterr(err, PS_EDECODE, "not a JPEG: %zu bytes", len);
    if (setjmp(d->jerr.jb)) {
        jpeg_abort_decompress(&d->ci);
        return ps_seterr(err, PS_EDECODE, "bad JPEG: %s", d->jerr.msg);
    }
    return decode_body(d, jpeg, len, seed, out, crop_out, err);
}

int ps_decode_raw(struct ps_decoder *d, const uint8_t *rgb, uint32_t h, uint32_t w, uint64_t seed,
                  uint8_t *out, struct ps_crop *crop_out, char *err)
{
    struct ps_crop c;
    if (!rgb || !w || !h)
        return ps_seterr(err, PS_EDECODE, "raw image %ux%u is empty", w, h);
    pick_box(&d->p, w, h, seed, &c);
    if (crop_out)
        *crop_out = c;
    int rc = ps_resizer_run(&d->rs, rgb, w, h, (size_t)w * 3, c.x, c.y, c.w, c.h,
                            out, d->p.out_w, d->p.out_h, c.flip, d->p.layout);
    if (rc)
        return ps_seterr(err, rc, "out of memory for resize tables");
    return 0;
}

int ps_jpeg_dims(const uint8_t *jpeg, size_t len, uint32_t *w, uint32_t *h)
{
    struct ps_jpeg_layout l;
    if (!jpeg || ps_jpeg_layout(jpeg, len, &l) || l.w == 0 || l.h == 0)
        return PS_EDECODE;
    *w = l.w;
    *h = l.h;
    return 0;
}

int ps_jpeg_decode_full(const uint8_t *jpeg, size_t len, int fast, uint8_t **rgb, uint32_t *w, uint32_t *h, char *err)
{
    struct jpeg_decompress_struct ci;
    struct ps_jerr e;
    uint8_t *volatile buf = NULL;
    int cmyk;

    *rgb = NULL;
    if (!jpeg || len < 4 || len > (unsigned long)-1)
        return ps_seterr(err, PS_EDECODE, "not a JPEG: %zu bytes", len);
    jerr_init(&e);
    ci.err = &e.pub;
    if (setjmp(e.jb)) {
        jpeg_destroy_decompress(&ci);
        free(buf);
        return ps_seterr(err, PS_EDECODE, "bad JPEG: %s", e.msg);
    }
    jpeg_create_decompress(&ci);
    ci.mem->max_memory_to_use = PS_JPEG_MAX_MEM;
    jpeg_mem_src(&ci, jpeg, (unsigned long)len);
    jpeg_read_header(&ci, TRUE);
    if (set_out_space(&ci, &cmyk)) {
        jpeg_destroy_decompress(&ci);
        return ps_seterr(err, PS_EDECODE, "bad JPEG: unsupported colour space");
    }
    ci.dct_method = fast ? JDCT_IFAST : JDCT_ISLOW;
    jpeg_start_decompress(&ci);
    size_t stride = (size_t)ci.output_width * ci.output_components;
    if (stride * ci.output_height > ((size_t)2 << 30)) {
        jpeg_destroy_decompress(&ci);
        return ps_seterr(err, PS_EDECODE, "JPEG too large: %ux%u", ci.output_width, ci.output_height);
    }
    buf = malloc(stride * ci.output_height + 1);
    if (!buf) {
        jpeg_destroy_decompress(&ci);
        return ps_seterr(err, -ENOMEM, "out of memory for a %ux%u image", ci.output_width, ci.output_height);
    }
    while (ci.output_scanline < ci.output_height) {
        JSAMPROW r = buf + ci.output_scanline * stride;
        if (jpeg_read_scanlines(&ci, &r, 1) != 1)
            ERREXIT(&ci, JERR_INPUT_EMPTY);
    }
    if (cmyk) {
        int inv = ci.saw_Adobe_marker;
        for (uint32_t y = 0; y < ci.output_height; y++)
            cmyk_to_rgb(buf + y * stride, ci.output_width, inv);
        /* Pack the rows (3 bytes per pixel now). */
        for (uint32_t y = 1; y < ci.output_height; y++)
            memmove(buf + (size_t)y * ci.output_width * 3, buf + y * stride, (size_t)ci.output_width * 3);
    }
    jpeg_finish_decompress(&ci);
    *w = ci.output_width;
    *h = ci.output_height;
    jpeg_destroy_decompress(&ci);
    *rgb = buf;
    return 0;
}

int ps_jpeg_encode(const uint8_t *rgb, uint32_t w, uint32_t h, int quality, int restart,
                   uint8_t **out, size_t *outlen, char *err)
{
    struct jpeg_compress_struct ci;
    struct ps_jerr e;
    unsigned char *volatile obuf = NULL;
    unsigned long olen = 0;

    *out = NULL;
    *outlen = 0;
    if (!rgb || w == 0 || h == 0 || w > 65500 || h > 65500)
        return ps_seterr(err, PS_EDECODE, "cannot encode a %ux%u image as JPEG", w, h);
    jerr_init(&e);
    ci.err = &e.pub;
    if (setjmp(e.jb)) {
        jpeg_destroy_compress(&ci);
        free(obuf);
        return ps_seterr(err, PS_EDECODE, "JPEG encode: %s", e.msg);
    }
    jpeg_create_compress(&ci);
    jpeg_mem_dest(&ci, (unsigned char **)&obuf, &olen);
    ci.image_width = w;
    ci.image_height = h;
    ci.input_components = 3;
    ci.in_color_space = JCS_RGB;
    jpeg_set_defaults(&ci);
    jpeg_set_quality(&ci, quality < 1 ? 1 : quality > 100 ? 100 : quality, TRUE);
    ci.optimize_coding = TRUE;      /* a second pass at pack time for ~5% smaller files */
    if (restart)
        ci.restart_interval = 1;    /* every MCU: lets the decoder skip columns too (restart.c) */
    jpeg_start_compress(&ci, TRUE);
    while (ci.next_scanline < h) {
        JSAMPROW r = (JSAMPROW)(rgb + (size_t)ci.next_scanline * w * 3);
        jpeg_write_scanlines(&ci, &r, 1);
    }
    jpeg_finish_compress(&ci);
    jpeg_destroy_compress(&ci);
    *out = obuf;
    *outlen = olen;
    return 0;
}
