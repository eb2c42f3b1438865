/* resize.c - separable fixed-point resampling of an RGB box to the output size (area when
 * shrinking, bilinear when growing), with flip and NHWC/NCHW output folded into the last pass. */
#if defined(__GNUC__) && !defined(__clang__)
/* gcc's -O2 vectorises only loops without a remainder; the row loops here need O3's cost model. */
#pragma GCC optimize("O3")
#endif
#include <errno.h>
#include <math.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <stdlib.h>
#include <string.h>

#include "pagestream.h"
#include "decode/decode.h"
#include "decode/decode_int.h"

#define QW 14                    /* weight precision */
#define MAXT 64                  /* taps cap: a shrink of > 60x is clamped (never met with DCT scaling) */

static int grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return 0;
    size_t n = need + need / 4 + 16;
    void *q = realloc(*p, n * elem);
    if (!q)
        return -ENOMEM;
    *p = q;
    *cap = n;
    return 0;
}

/* floor/ceil without a libm call (x86-64 has no SSE4.1 roundsd by default); |x| < 2^31 */
static inline int ifloor(double x)
{
    int k = (int)x;
    return k - (k > x);
}

static inline int iceil(double x)
{
    int k = (int)x;
    return k + (k < x);
}

/*
 * Tables for one axis: output i reads taps [s_i, s_i + T) of the source (len
 * entries, valid 0..len-1) with Q14 weights. b0/bl is the fractional box.
 */
static int axis_plan(int32_t **starts, size_t *scap, int16_t **wts, size_t *wcap, int *tout,
                     uint32_t len, double b0, double bl, uint32_t n)
{
    double scale = bl / n;
    int T;
    int lo_clamp, hi_clamp;           /* taps are clamped to this index range */

    if (scale > 1.0)
        T = scale > MAXT ? MAXT : iceil(scale) + 1;
    else
        T = 2;
    if (T > MAXT)
        T = MAXT;
    if ((uint32_t)T > len)
        T = (int)len;
    lo_clamp = ifloor(b0 + 1e-9);
    hi_clamp = iceil(b0 + bl - 1e-9) - 1;
    if (lo_clamp < 0)
        lo_clamp = 0;
    if (hi_clamp > (int)len - 1)
        hi_clamp = (int)len - 1;
    if (hi_clamp < lo_clamp)
        hi_clamp = lo_clamp;

    if (grow((void **)starts, scap, n, sizeof **starts) || grow((void **)wts, wcap, (size_t)n * T, sizeof **wts))
        return -ENOMEM;

    for (uint32_t i = 0; i < n; i++) {
        double fw[MAXT + 2];
        int idx0;                      /* source index of fw[0] */
        int cnt;
        if (scale > 1.0) {
            double lo = b0 + i * scale, hi = lo + scale;
            if (hi > b0 + bl)
                hi = b0 + bl;
            int k0 = ifloor(lo), k1 = iceil(hi) - 1;
            if (k1 - k0 + 1 > MAXT) {  /* over the cap: keep the centre taps */
                int mid = (k0 + k1) / 2;
                k0 = mid - MAXT / 2;
                k1 = k0 + MAXT - 1;
                lo = k0; hi = k1 + 1;
            }
            idx0 = k0;
            cnt = k1 - k0 + 1;
            for (int k = 0; k < cnt; k++) {
                double a = k0 + k, b = a + 1;
                double o = (b < hi ? b : hi) - (a > lo ? a : lo);
                fw[k] = o > 0 ? o : 0;
            }
        } else {
            double c = b0 + (i + 0.5) * scale - 0.5;
            int k0 = ifloor(c);
            double f = c - k0;
            idx0 = k0;
            cnt = 2;
            fw[0] = 1 - f;
            fw[1] = f;
        }
        /* Clamp taps into the allowed range, merging weights that fall outside. */
        int iw[MAXT + 2];
        iw[0] = lo_clamp;
        int lo_i = INT32_MAX, hi_i = INT32_MIN;
        double sum = 0;
        for (int k = 0; k < cnt; k++) {
            int s = idx0 + k;
            if (s < lo_clamp) s = lo_clamp;
            if (s > hi_clamp) s = hi_clamp;
            iw[k] = s;
            if (fw[k] > 0) {
                if (s < lo_i) lo_i = s;
                if (s > hi_i) hi_i = s;
            }
            sum += fw[k];
        }
        if (lo_i > hi_i) {             /* degenerate: all weight zero */
            lo_i = hi_i = iw[0];
            fw[0] = 1;
            sum = 1;
            for (int k = 1; k < cnt; k++)
                fw[k] = 0;
        }
        int start = lo_i;
        if (start > (int)len - T)
            start = (int)len - T;
        if (start < 0)
            start = 0;
        int16_t *w = *wts + (size_t)i * T;
        for (int k = 0; k < T; k++)
            w[k] = 0;
        double accf = 0, scale_q = (1 << QW) / sum;
        int32_t before = 0;
        for (int k = 0; k < cnt; k++) {
            if (fw[k] <= 0)
                continue;
            int pos = iw[k] - start;
            if (pos < 0) pos = 0;
            if (pos >= T) pos = T - 1;
            accf += fw[k];
            /* Cumulative rounding keeps the sum exactly 1 << QW without a fix-up pass. */
            int32_t upto = (int32_t)(accf * scale_q + 0.5);
            w[pos] = (int16_t)(w[pos] + upto - before);
            before = upto;
        }
        (*starts)[i] = start;
    }
    *tout = T;
    return 0;
}

/*
 * Fixed point: weights are Q14 (sum 1 << 14); the vertical pass leaves Q7
 * values (< 2^15) in int32 slots, so that SSE2's pmaddwd - a signed 16x16
 * multiply-add - does both passes: in the vertical one on pairs of rows, in
 * the horizontal one on an RGB(+1) pixel with the weight in the low half of
 * each lane. The scalar fallback computes the same integers.
 */
#define VSH 7                       /* Q14 * u8 -> Q7 */
#define HSH (QW + VSH)              /* Q14 * Q7 -> u8 */

/* One row of Q7 values from T source rows, over nb bytes. */
static void vpass(const uint8_t *const *rows, const int16_t *w, int T, size_t nb, int32_t *tmp)
{
    size_t j = 0;
#ifdef __SSE2__
    __m128i wp[MAXT / 2 + 1];
    const uint8_t *rp[MAXT + 1];
    int np = (T + 1) / 2;
    for (int k = 0; k < np; k++) {
        uint16_t w0 = (uint16_t)w[2 * k], w1 = 2 * k + 1 < T ? (uint16_t)w[2 * k + 1] : 0;
        wp[k] = _mm_set1_epi32((int)((uint32_t)w0 | (uint32_t)w1 << 16));
        rp[2 * k] = rows[2 * k];
        rp[2 * k + 1] = 2 * k + 1 < T ? rows[2 * k + 1] : rows[2 * k];
    }
    const __m128i z = _mm_setzero_si128(), rnd = _mm_set1_epi32(1 << (VSH - 1));
    for (; j + 16 <= nb; j += 16) {
        __m128i a0 = rnd, a1 = rnd, a2 = rnd, a3 = rnd;
        for (int k = 0; k < np; k++) {
            __m128i r0 = _mm_loadu_si128((const __m128i *)(rp[2 * k] + j));
            __m128i r1 = _mm_loadu_si128((const __m128i *)(rp[2 * k + 1] + j));
            __m128i l0 = _mm_unpacklo_epi8(r0, z), h0 = _mm_unpackhi_epi8(r0, z);
            __m128i l1 = _mm_unpacklo_epi8(r1, z), h1 = _mm_unpackhi_epi8(r1, z);
            a0 = _mm_add_epi32(a0, _mm_madd_epi16(_mm_unpacklo_epi16(l0, l1), wp[k]));
            a1 = _mm_add_epi32(a1, _mm_madd_epi16(_mm_unpackhi_epi16(l0, l1), wp[k]));
            a2 = _mm_add_epi32(a2, _mm_madd_epi16(_mm_unpacklo_epi16(h0, h1), wp[k]));
            a3 = _mm_add_epi32(a3, _mm_madd_epi16(_mm_unpackhi_epi16(h0, h1), wp[k]));
        }
        _mm_storeu_si128((__m128i *)(tmp + j), _mm_srai_epi32(a0, VSH));
        _mm_storeu_si128((__m128i *)(tmp + j + 4), _mm_srai_epi32(a1, VSH));
        _mm_storeu_si128((__m128i *)(tmp + j + 8), _mm_srai_epi32(a2, VSH));
        _mm_storeu_si128((__m128i *)(tmp + j + 12), _mm_srai_epi32(a3, VSH));
    }
#endif
    for (; j < nb; j++) {
        int32_t a = 1 << (VSH - 1);
        for (int k = 0; k < T; k++)
            a += w[k] * rows[k][j];
        tmp[j] = a >> VSH;
    }
}

static inline void put_px(uint32_t v, uint32_t o, uint32_t dw, uint8_t *o0, uint8_t *o1, uint8_t *o2, int planar)
{
    if (planar) {
        o0[o] = (uint8_t)v;
        o1[o] = (uint8_t)(v >> 8);
        o2[o] = (uint8_t)(v >> 16);
    } else if (o + 1 < dw) {
        memcpy(o0 + 3 * (size_t)o, &v, 4);   /* the 4th byte is overwritten by the next pixel */
    } else {
        o0[3 * (size_t)o] = (uint8_t)v;
        o0[3 * (size_t)o + 1] = (uint8_t)(v >> 8);
        o0[3 * (size_t)o + 2] = (uint8_t)(v >> 16);
    }
}

#ifdef __SSE2__
/* T is a literal at each call site, so the tap loop unrolls; wv holds each weight in every lane's low half. */
static inline __attribute__((always_inline)) void hpass_t(const int32_t *tmp, const int32_t *xs, const __m128i *wv,
                                                          int T, uint32_t dw, uint8_t *o0, uint8_t *o1,
                                                          uint8_t *o2, int planar)
{
    const __m128i rnd = _mm_set1_epi32(1 << (HSH - 1));
    for (uint32_t o = 0; o < dw; o++) {
        const int32_t *t = tmp + (size_t)xs[o] * 3;
        const __m128i *w = wv + (size_t)o * T;
        __m128i a = rnd;
        for (int k = 0; k < T; k++)
            a = _mm_add_epi32(a, _mm_madd_epi16(_mm_loadu_si128((const __m128i *)(t + 3 * k)), w[k]));
        a = _mm_srai_epi32(a, HSH);
        a = _mm_packs_epi32(a, a);
        put_px((uint32_t)_mm_cvtsi128_si32(_mm_packus_epi16(a, a)), o, dw, o0, o1, o2, planar);
    }
}

static void hpass(const int32_t *tmp, const int32_t *xs, const __m128i *wv, int T, uint32_t dw,
                  uint8_t *o0, uint8_t *o1, uint8_t *o2, int planar)
{
    switch (T) {
    case 2: hpass_t(tmp, xs, wv, 2, dw, o0, o1, o2, planar); break;
    case 3: hpass_t(tmp, xs, wv, 3, dw, o0, o1, o2, planar); break;
    case 4: hpass_t(tmp, xs, wv, 4, dw, o0, o1, o2, planar); break;
    default: hpass_t(tmp, xs, wv, T, dw, o0, o1, o2, planar); break;
    }
}
#else
static void hpass(const int32_t *tmp, const int32_t *xs, const int16_t *xw, int T, uint32_t dw,
                  uint8_t *o0, uint8_t *o1, uint8_t *o2, int planar)
{
    for (uint32_t o = 0; o < dw; o++) {
        const int32_t *t = tmp + (size_t)xs[o] * 3;
        const int16_t *w = xw + (size_t)o * T;
        int32_t a0 = 1 << (HSH - 1), a1 = a0, a2 = a0;
        for (int k = 0; k < T; k++) {
            a0 += w[k] * t[3 * k];
            a1 += w[k] * t[3 * k + 1];
            a2 += w[k] * t[3 * k + 2];
        }
        a0 >>= HSH; a1 >>= HSH; a2 >>= HSH;
        put_px((uint32_t)(a0 < 0 ? 0 : a0 > 255 ? 255 : a0) | (uint32_t)(a1 < 0 ? 0 : a1 > 255 ? 255 : a1) << 8 |
               (uint32_t)(a2 < 0 ? 0 : a2 > 255 ? 255 : a2) << 16, o, dw, o0, o1, o2, planar);
    }
}
#endif

int ps_resizer_run(struct ps_resizer *r, const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride,
                   double bx, double by, double bw, double bh,
                   uint8_t *dst, uint32_t dw, uint32_t dh, int flip, int layout)
{
    if (!dw || !dh || !sw || !sh)
        return 0;
    if (bw <= 0) bw = 1;
    if (bh <= 0) bh = 1;
    if (axis_plan(&r->xs, &r->xcap, &r->xw, &r->xwcap, &r->xt, sw, bx, bw, dw) ||
        axis_plan(&r->ys, &r->ycap, &r->yw, &r->ywcap, &r->yt, sh, by, bh, dh))
        return -ENOMEM;
    /* Only the source columns some tap reads go through the vertical pass. */
    int32_t c0 = r->xs[0], c1 = r->xs[0] + r->xt;
    for (uint32_t x = 1; x < dw; x++) {
        if (r->xs[x] < c0) c0 = r->xs[x];
        if (r->xs[x] + r->xt > c1) c1 = r->xs[x] + r->xt;
    }
    size_t nb = (size_t)(c1 - c0) * 3;
    /* +4: the horizontal pass loads 4 lanes at the last pixel */
    if (grow((void **)&r->tmp, &r->tmpcap, nb + 4, sizeof(int32_t)))
        return -ENOMEM;
    int32_t *tmp = r->tmp;
    tmp[nb] = tmp[nb + 1] = tmp[nb + 2] = tmp[nb + 3] = 0;

    int32_t *xs = r->xs;
    int T = r->xt;
    /* The horizontal pass indexes tmp relative to column c0, and walks the output left to right:
     * for a flip, mirror the tables instead of the writes. */
    for (uint32_t x = 0; x < dw; x++)
        xs[x] -= c0;
    if (flip)
        for (uint32_t a = 0, b = dw - 1; a < b; a++, b--) {
            int32_t t = xs[a]; xs[a] = xs[b]; xs[b] = t;
            for (int k = 0; k < T; k++) {
                int16_t u = r->xw[(size_t)a * T + k];
                r->xw[(size_t)a * T + k] = r->xw[(size_t)b * T + k];
                r->xw[(size_t)b * T + k] = u;
            }
        }
#ifdef __SSE2__
    size_t nwv = (size_t)dw * T;
    if (r->wvcap < nwv) {
        free(r->wv);
        r->wvcap = 0;
        size_t n = nwv + nwv / 4;
        if (posix_memalign(&r->wv, 16, n * sizeof(__m128i)))
            return r->wv = NULL, -ENOMEM;
        r->wvcap = n;
    }
    __m128i *wv = r->wv;
    for (size_t k = 0; k < (size_t)dw * T; k++)
        wv[k] = _mm_set1_epi32((uint16_t)r->xw[k]);
#endif

    const uint8_t *rows[MAXT];
    size_t plane = (size_t)dw * dh;
    int planar = layout == PS_LAYOUT_NCHW;
    for (uint32_t y = 0; y < dh; y++) {
        /* Most rows need fewer taps than the widest one: skip zero weights at either end. */
        const int16_t *w = r->yw + (size_t)y * r->yt;
        int k0 = 0, k1 = r->yt - 1;
        while (k1 > 0 && w[k1] == 0)
            k1--;
        while (k0 < k1 && w[k0] == 0)
            k0++;
        for (int k = k0; k <= k1; k++)
            rows[k - k0] = src + (size_t)(r->ys[y] + k) * sstride + (size_t)c0 * 3;
        uint8_t *d0 = planar ? dst + (size_t)y * dw : dst + (size_t)y * dw * 3;
        uint8_t *d1 = planar ? d0 + plane : NULL, *d2 = planar ? d0 + 2 * plane : NULL;
        vpass(rows, w + k0, k1 - k0 + 1, nb, tmp);
#ifdef __SSE2__
        hpass(tmp, xs, wv, T, dw, d0, d1, d2, planar);
#else
        hpass(tmp, xs, r->xw, T, dw, d0, d1, d2, planar);
#endif
    }
    return 0;
}

void ps_resizer_free(struct ps_resizer *r)
{
    if (!r)
        return;
    free(r->xs); free(r->ys); free(r->xw); free(r->yw); free(r->tmp); free(r->wv);
    memset(r, 0, sizeof *r);
}

void ps_resize_rgb(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride,
                   uint8_t *dst, uint32_t dw, uint32_t dh, size_t dstride)
{
    struct ps_resizer r;
    memset(&r, 0, sizeof r);
    if (dstride == (size_t)dw * 3) {
        ps_resizer_run(&r, src, sw, sh, sstride, 0, 0, sw, sh, dst, dw, dh, 0, PS_LAYOUT_NHWC);
    } else {
        /* A strided destination: resize into a packed buffer, then copy rows. */
        uint8_t *tmp = malloc((size_t)dw * dh * 3);
        if (tmp && ps_resizer_run(&r, src, sw, sh, sstride, 0, 0, sw, sh, tmp, dw, dh, 0, PS_LAYOUT_NHWC) == 0)
            for (uint32_t y = 0; y < dh; y++)
                memcpy(dst + y * dstride, tmp + (size_t)y * dw * 3, (size_t)dw * 3);
        free(tmp);
    }
    ps_resizer_free(&r);
}
