/*
 * decode_int.h - private to decode/: the resizer shared by the JPEG and raw
 * paths, the flip draw, and the restart-marker scan used by jpeg.c.
 */
#ifndef PS_DECODE_INT_H
#define PS_DECODE_INT_H

#include <stddef.h>
#include <stdint.h>

struct ps_decoder;

/* Coefficient tables and row buffers; they grow to the largest job and stay. */
struct ps_resizer {
    int32_t *xs, *ys;       /* first source index of each output column / row */
    int16_t *xw, *yw;       /* xt (yt) Q14 weights per output, summing to 1 << 14 */
    int xt, yt;             /* taps per output, fixed per job */
    size_t xcap, ycap;      /* entries allocated in xs/ys */
    size_t xwcap, ywcap;    /* entries allocated in xw/yw */
    int32_t *tmp;           /* one vertically resampled row, Q7 */
    size_t tmpcap;          /* entries allocated in tmp */
    void *wv;               /* SSE2: xw as 16-byte vectors (weight in each lane's low half) */
    size_t wvcap;
};

/**
 * Resample the box (bx, by, bw, bh) - fractional, in pixels of the RGB buffer
 * src (sw x sh, stride sstride) - to dw x dh: area averaging along an axis
 * that shrinks, bilinear along one that grows. Writes NHWC (flip: mirrored)
 * or planar NCHW (layout = enum ps_layout) to dst.
 * @return 0 or -ENOMEM (the tables could not grow).
 */
int ps_resizer_run(struct ps_resizer *r, const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride,
                   double bx, double by, double bw, double bh,
                   uint8_t *dst, uint32_t dw, uint32_t dh, int flip, int layout);
void ps_resizer_free(struct ps_resizer *r);

/* The seed's flip bit (independent of the crop draws). */
int ps_crop_flip_bit(uint64_t seed);

/* Where things are in a JPEG, from walking its marker segments (no decoding). */
struct ps_jpeg_layout {
    size_t sof;             /* offset of the SOFn marker */
    size_t sos_end;         /* offset of the first entropy-coded byte of the first scan */
    uint32_t w, h;          /* from the SOF; h may be 0 (height in a DNL marker) */
    int sof_type;           /* n of SOFn: 0 baseline, 1 extended, 2 progressive, ... */
    uint32_t restart;       /* restart interval in MCUs from a DRI before the first SOS; 0: none */
};
/** 0, or -1 when the markers up to the first SOS do not parse. */
int ps_jpeg_layout(const uint8_t *jpeg, size_t len, struct ps_jpeg_layout *l);

/**
 * Build in *buf (grown as needed, *cap its size) a JPEG made of the header of
 * @p jpeg, its size set to @p new_w x @p new_h, followed by the restart
 * segments of its (single) scan that lie in columns [t0, t1) and rows
 * [s0, s1) of the segment grid (@p cols segments per row), renumbered from
 * RST0, then EOI. Every restart resets the DC predictions, so the segments
 * decode on their own.
 * @return the length built, or 0 when the stream does not have those
 *         segments (the caller decodes the whole JPEG instead).
 */
size_t ps_rst_extract(const uint8_t *jpeg, size_t len, const struct ps_jpeg_layout *l, uint32_t cols,
                      uint32_t t0, uint32_t t1, uint32_t s0, uint32_t s1, uint32_t new_w, uint32_t new_h,
                      uint8_t **buf, size_t *cap);

/* ps_jpeg_add_restarts with a marker every @p mcus MCUs (0: every MCU row). */
int ps_jpeg_add_restarts_n(const uint8_t *jpeg, size_t len, int mcus, uint8_t **out, size_t *outlen, char *err);

/* Decodes that took the restart-marker fast path (tests, benchmarks). */
uint64_t ps_decoder_fastpath_count(const struct ps_decoder *d);
/* Which DCT scales M/8 (bit M-1 of @p mask, M = 1..8) the decoder may pick; 0: default set. */
void ps_decoder_set_scales(struct ps_decoder *d, unsigned mask);

#endif
