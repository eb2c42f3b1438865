/* restart.c - restart markers: rewrite a JPEG losslessly with one every MCU (or MCU row), and cut
 * from such a JPEG a smaller valid one holding only the segments a crop needs (jpeg.c's fast path). */
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

int ps_jpeg_layout(const uint8_t *j, size_t len, struct ps_jpeg_layout *l)
{
    size_t pos = 2;
    int have_sof = 0;

    memset(l, 0, sizeof *l);
    if (len < 4 || j[0] != 0xFF || j[1] != 0xD8)
        return -1;
    while (pos + 4 <= len) {
        if (j[pos] != 0xFF)
            return -1;
        while (pos < len && j[pos] == 0xFF)
            pos++;
        if (pos + 3 > len)
            return -1;
        int m = j[pos++];
        if (m == 0xD8 || (m >= 0xD0 && m <= 0xD7) || m == 0x01)
            continue;
        if (m == 0xD9 || m == 0x00)
            return -1;
        size_t seglen = (size_t)j[pos] << 8 | j[pos + 1];
        if (seglen < 2 || pos + seglen > len)
            return -1;
        if (m >= 0xC0 && m <= 0xCF && m != 0xC4 && m != 0xC8 && m != 0xCC) {
            if (seglen < 8 || have_sof)
                return -1;
            have_sof = 1;
            l->sof = pos - 2;
            l->sof_type = m - 0xC0;
            l->h = (uint32_t)j[pos + 3] << 8 | j[pos + 4];
            l->w = (uint32_t)j[pos + 5] << 8 | j[pos + 6];
        } else if (m == 0xDD) {
            if (seglen < 4)
                return -1;
            l->restart = (uint32_t)j[pos + 2] << 8 | j[pos + 3];
        } else if (m == 0xDA) {
            l->sos_end = pos + seglen;
            return have_sof ? 0 : -1;
        }
        pos += seglen;
    }
    return -1;
}

size_t ps_rst_extract(const uint8_t *j, size_t len, const struct ps_jpeg_layout *l, uint32_t cols,
                      uint32_t t0, uint32_t t1, uint32_t s0, uint32_t s1, uint32_t new_w, uint32_t new_h,
                      uint8_t **buf, size_t *cap)
{
    if (t1 <= t0 || s1 <= s0 || t1 > cols || l->sos_end > len || !new_w || !new_h || new_w > 65535 || new_h > 65535)
        return 0;
    /* Header + at most the whole scan + one marker per kept segment + EOI. */
    size_t kept = (size_t)(t1 - t0) * (s1 - s0);
    size_t need = len + 2 * kept + 4;
    if (need > *cap) {
        uint8_t *nb = realloc(*buf, need + need / 4);
        if (!nb)
            return 0;
        *buf = nb;
        *cap = need + need / 4;
    }
    uint8_t *o = *buf;
    memcpy(o, j, l->sos_end);
    o[l->sof + 5] = (uint8_t)(new_h >> 8);
    o[l->sof + 6] = (uint8_t)new_h;
    o[l->sof + 7] = (uint8_t)(new_w >> 8);
    o[l->sof + 8] = (uint8_t)new_w;
    size_t n = l->sos_end;

    uint64_t last = (uint64_t)(s1 - 1) * cols + t1 - 1;   /* index of the last segment we need */
    size_t p = l->sos_end, segstart = p;
    uint64_t k = 0, outk = 0;
    uint32_t t = 0, srow = 0;                              /* (column, row) of segment k */
    for (;;) {
        size_t segend;
        int rst = 0, more = 1;
        const uint8_t *q = p < len ? memchr(j + p, 0xFF, len - p) : NULL;
        if (!q || (size_t)(q - j) + 1 >= len) {
            segend = len;
            more = 0;
        } else {
            p = (size_t)(q - j);
            int m = j[p + 1];
            if (m == 0x00) {            /* stuffed 0xFF data byte */
                p += 2;
                continue;
            }
            if (m == 0xFF) {            /* fill byte before a marker */
                p += 1;
                continue;
            }
            segend = p;
            if (m >= 0xD0 && m <= 0xD7) {
                if ((uint64_t)(m - 0xD0) != (k & 7))
                    return 0;           /* markers out of sequence: not the stream we expect */
                rst = 1;
            } else {
                more = 0;               /* EOI, DNL or a next scan: the scan ends here */
            }
        }
        if (srow >= s0 && t >= t0 && t < t1) {
            if (outk > 0) {
                o[n++] = 0xFF;
                o[n++] = (uint8_t)(0xD0 + ((outk - 1) & 7));
            }
            memcpy(o + n, j + segstart, segend - segstart);
            n += segend - segstart;
            outk++;
        }
        if (k == last)
            break;
        if (!rst || !more)
            return 0;   /* the scan ends before the segments we need: let the full decode report it */
        k++;
        if (++t == cols) {
            t = 0;
            srow++;
        }
        p = segend + 2;
        segstart = p;
    }
    o[n++] = 0xFF;
    o[n++] = 0xD9;
    return n;
}

/* ---- lossless rewrite with restart markers ---- */

struct rst_err {
    struct jpeg_error_mgr pub;
    jmp_buf jb;
};

static void rst_error_exit(j_common_ptr ci)
{
    struct rst_err *e = (struct rst_err *)ci->err;
    longjmp(e->jb, 1);
}

static void rst_emit(j_common_ptr ci, int level)
{
    /* A corrupt input must not be re-encoded into a "valid" file that hides the damage. */
    if (level < 0) {
        int c = ci->err->msg_code;
        if (c != JWRN_ADOBE_XFORM && c != JWRN_JFIF_MAJOR && c != JWRN_BOGUS_ICC)
            longjmp(((struct rst_err *)ci->err)->jb, 1);
    }
}

int ps_jpeg_add_restarts(const uint8_t *jpeg, size_t len, uint8_t **out, size_t *outlen, char *err)
{
    /* Every MCU, not every MCU row: the decoder can then skip columns as well as rows (see
     * restart_slice in jpeg.c); measured on ImageNet-like JPEGs it costs ~2% in size over markers
     * per row, and the optimised Huffman tables written here more than pay for that. */
    return ps_jpeg_add_restarts_n(jpeg, len, 1, out, outlen, err);
}

int ps_jpeg_add_restarts_n(const uint8_t *jpeg, size_t len, int mcus, uint8_t **out, size_t *outlen, char *err)
{
    struct jpeg_decompress_struct src;
    struct jpeg_compress_struct dst;
    struct rst_err se, de;
    unsigned char *volatile obuf = NULL;
    unsigned long olen = 0;
    volatile int have_src = 0, have_dst = 0;
    char msg[JMSG_LENGTH_MAX];

    *out = NULL;
    *outlen = 0;
    src.err = jpeg_std_error(&se.pub);
    se.pub.error_exit = rst_error_exit;
    se.pub.emit_message = rst_emit;
    dst.err = jpeg_std_error(&de.pub);
    de.pub.error_exit = rst_error_exit;
    de.pub.emit_message = rst_emit;
    if (setjmp(se.jb)) {
        se.pub.format_message((j_common_ptr)&src, msg);
        goto fail;
    }
    if (setjmp(de.jb)) {
        de.pub.format_message((j_common_ptr)&dst, msg);
        goto fail;
    }
    jpeg_create_decompress(&src);
    have_src = 1;
    jpeg_create_compress(&dst);
    have_dst = 1;
    if (len == 0 || len > (unsigned long)-1)
        ERREXIT(&src, JERR_INPUT_EMPTY);
    jpeg_mem_src(&src, jpeg, (unsigned long)len);
    /* Keep application markers (EXIF, ICC) except those libjpeg writes itself. */
    jpeg_save_markers(&src, JPEG_COM, 0xFFFF);
    for (int m = 0; m < 16; m++)
        jpeg_save_markers(&src, JPEG_APP0 + m, 0xFFFF);
    jpeg_read_header(&src, TRUE);
    jvirt_barray_ptr *coefs = jpeg_read_coefficients(&src);
    jpeg_copy_critical_parameters(&src, &dst);
    if (mcus > 0) {
        dst.restart_interval = (unsigned)mcus;
        dst.restart_in_rows = 0;
    } else {
        dst.restart_interval = 0;
        dst.restart_in_rows = 1;
    }
    dst.optimize_coding = TRUE;
    if (src.jpeg_color_space == JCS_CMYK || src.jpeg_color_space == JCS_YCCK)
        dst.write_Adobe_marker = src.saw_Adobe_marker;
    jpeg_mem_dest(&dst, (unsigned char **)&obuf, &olen);
    jpeg_write_coefficients(&dst, coefs);
    for (jpeg_saved_marker_ptr m = src.marker_list; m; m = m->next) {
        if (dst.write_JFIF_header && m->marker == JPEG_APP0 && m->data_length >= 5 &&
            !memcmp(m->data, "JFIF", 5))
            continue;
        if (dst.write_Adobe_marker && m->marker == JPEG_APP0 + 14 && m->data_length >= 5 &&
            !memcmp(m->data, "Adobe", 5))
            continue;
        jpeg_write_marker(&dst, m->marker, m->data, m->data_length);
    }
    jpeg_finish_compress(&dst);
    jpeg_finish_decompress(&src);
    jpeg_destroy_compress(&dst);
    jpeg_destroy_decompress(&src);
    *out = obuf;
    *outlen = olen;
    return 0;

fail:
    if (have_dst)
        jpeg_destroy_compress(&dst);
    if (have_src)
        jpeg_destroy_decompress(&src);
    free(obuf);
    return ps_seterr(err, PS_EDECODE, "cannot add restart markers: %s", msg);
}
