/*
 * decode.h - turn one stored image (JPEG or raw RGB) into one output image
 * of the batch: crop-aware JPEG decode with libjpeg-turbo, resize, flip.
 * No I/O, no threads: each worker owns one ps_decoder.
 */
#ifndef PS_DECODE_H
#define PS_DECODE_H

#include <stddef.h>
#include <stdint.h>

struct ps_decode_params {
    int transform;          /* enum ps_transform (pagestream.h): RANDOM_RESIZED_CROP or CENTER_CROP */
    uint32_t out_h, out_w;  /* output size */
    uint32_t resize;        /* center crop: short side before the crop (e.g. 256 for 224) */
    float scale_min, scale_max, ratio_min, ratio_max;
    int flip;               /* random horizontal flip (p = 0.5) */
    int layout;             /* enum ps_layout: NHWC or NCHW (planar) */
    int use_restart;        /* 1: with restart markers, entropy-decode only the MCUs the crop needs */
};

void ps_decode_params_init(struct ps_decode_params *p);

/* The crop chosen for a sample, in source pixels. */
struct ps_crop {
    uint32_t x, y, w, h;
    int flip;
};

/**
 * torchvision's RandomResizedCrop box for an image of w x h, from @p seed
 * (10 tries, then the centre fallback). Pure function.
 */
void ps_rrc_box(const struct ps_decode_params *p, uint32_t w, uint32_t h, uint64_t seed, struct ps_crop *c);
/** CenterCrop box: resize short side to p->resize, take out_h x out_w from the centre. */
void ps_center_box(const struct ps_decode_params *p, uint32_t w, uint32_t h, struct ps_crop *c);

struct ps_decoder;

/** One per worker; scratch buffers grow to the largest image seen (then stay). */
int ps_decoder_create(const struct ps_decode_params *p, struct ps_decoder **out);
void ps_decoder_destroy(struct ps_decoder *d);

/**
 * Decode a JPEG and write its transformed image to @p out (out_h*out_w*3
 * bytes, in the layout asked). @p seed picks the crop and flip.
 * @param crop_out when not NULL receives the crop box used
 * @return 0, or PS_EDECODE with err (PS_ERRLEN) saying why. Never exits.
 */
int ps_decode_jpeg(struct ps_decoder *d, const uint8_t *jpeg, size_t len, uint64_t seed,
                   uint8_t *out, struct ps_crop *crop_out, char *err);

/** The same for raw RGB pixels (h x w x 3): crop and resize, no decoding. */
int ps_decode_raw(struct ps_decoder *d, const uint8_t *rgb, uint32_t h, uint32_t w, uint64_t seed,
                  uint8_t *out, struct ps_crop *crop_out, char *err);

/** Read width/height of a JPEG from its header. 0 or PS_EDECODE. */
int ps_jpeg_dims(const uint8_t *jpeg, size_t len, uint32_t *w, uint32_t *h);

/**
 * Full decode to RGB (reference and tools). *rgb is malloc'd; caller frees.
 * @param fast 1: TJFLAG_FASTDCT-like fast IDCT, 0: accurate (islow)
 */
int ps_jpeg_decode_full(const uint8_t *jpeg, size_t len, int fast, uint8_t **rgb, uint32_t *w, uint32_t *h, char *err);

/**
 * Encode RGB as JPEG (pack --max-side). *out malloc'd.
 * @param restart 1: a restart marker every MCU (lets ps_decode_jpeg skip
 *        the entropy decoding outside a crop; ~2-4% larger)
 */
int ps_jpeg_encode(const uint8_t *rgb, uint32_t w, uint32_t h, int quality, int restart,
                   uint8_t **out, size_t *outlen, char *err);

/**
 * Losslessly rewrite a JPEG as baseline with optimised Huffman tables and a
 * restart marker every MCU (as `jpegtran -optimize -restart 1B`), so that
 * ps_decode_jpeg can decode just the MCUs a crop needs. *out malloc'd.
 */
int ps_jpeg_add_restarts(const uint8_t *jpeg, size_t len, uint8_t **out, size_t *outlen, char *err);

/** Resize RGB (area when shrinking, bilinear when enlarging). */
void ps_resize_rgb(const uint8_t *src, uint32_t sw, uint32_t sh, size_t sstride,
                   uint8_t *dst, uint32_t dw, uint32_t dh, size_t dstride);

#endif
