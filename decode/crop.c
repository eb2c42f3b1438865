/* crop.c - where to crop: torchvision's RandomResizedCrop box (seeded, reproducible) and the
 * CenterCrop box for evaluation, both in source pixels. */
#include <math.h>
#include <stdint.h>

#include "pagestream.h"
#include "decode/decode.h"
#include "decode/decode_int.h"

void ps_decode_params_init(struct ps_decode_params *p)
{
    p->transform = PS_TRANSFORM_RANDOM_RESIZED_CROP;
    p->out_h = p->out_w = 224;
    p->resize = 256;
    p->scale_min = 0.08f;
    p->scale_max = 1.0f;
    p->ratio_min = 3.0f / 4.0f;
    p->ratio_max = 4.0f / 3.0f;
    p->flip = 1;
    p->layout = PS_LAYOUT_NHWC;
    p->use_restart = 1;
}

/* splitmix64: tiny, fast, and every seed (0 included) gives a well-mixed stream. */
static uint64_t sm64(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* [0, 1) with 53 random bits, like Python's random(). */
static double uni(uint64_t *s)
{
    return (double)(sm64(s) >> 11) * (1.0 / 9007199254740992.0);
}

/* Uniform integer in [0, n) (n >= 1); Lemire's multiply keeps it unbiased enough for n < 2^32. */
static uint32_t below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(((sm64(s) >> 32) * (uint64_t)n) >> 32);
}

int ps_crop_flip_bit(uint64_t seed)
{
    /* A stream of its own so the flip does not depend on how many crop tries were used. */
    uint64_t s = seed ^ 0x5eed0f11b0b5a1deULL;
    return (int)(sm64(&s) >> 63);
}

void ps_rrc_box(const struct ps_decode_params *p, uint32_t w, uint32_t h, uint64_t seed, struct ps_crop *c)
{
    uint64_t s = seed;
    double area = (double)w * (double)h;
    double smin = p->scale_min, smax = p->scale_max;
    double rmin = p->ratio_min, rmax = p->ratio_max;
    if (!(smin > 0) || !(smax >= smin)) { smin = 0.08; smax = 1.0; }
    if (!(rmin > 0) || !(rmax >= rmin)) { rmin = 3.0 / 4.0; rmax = 4.0 / 3.0; }
    double lr0 = log(rmin), lr1 = log(rmax);

    c->flip = p->flip ? ps_crop_flip_bit(seed) : 0;
    if (w == 0 || h == 0) {
        c->x = c->y = 0; c->w = w; c->h = h;
        return;
    }
    for (int i = 0; i < 10; i++) {
        double target = area * (smin + (smax - smin) * uni(&s));
        double ar = exp(lr0 + (lr1 - lr0) * uni(&s));
        double fw = nearbyint(sqrt(target * ar)), fh = nearbyint(sqrt(target / ar));
        if (fw > 0 && fw <= w && fh > 0 && fh <= h) {
            c->w = (uint32_t)fw;
            c->h = (uint32_t)fh;
            c->y = below(&s, h - c->h + 1);
            c->x = below(&s, w - c->w + 1);
            return;
        }
    }
    /* Fallback: the whole image, narrowed to the ratio range, centred. */
    double in_ratio = (double)w / (double)h;
    uint32_t cw = w, ch = h;
    if (in_ratio < rmin) {
        double v = nearbyint((double)w / rmin);
        ch = v < 1 ? 1 : v > h ? h : (uint32_t)v;
    } else if (in_ratio > rmax) {
        double v = nearbyint((double)h * rmax);
        cw = v < 1 ? 1 : v > w ? w : (uint32_t)v;
    }
    c->w = cw;
    c->h = ch;
    c->x = (w - cw) / 2;
    c->y = (h - ch) / 2;
}

void ps_center_box(const struct ps_decode_params *p, uint32_t w, uint32_t h, struct ps_crop *c)
{
    /* Resize(short side -> resize) then CenterCrop(out), mapped back to source pixels. */
    uint32_t sh = w < h ? w : h;
    double resize = p->resize ? (double)p->resize : (double)(p->out_w < p->out_h ? p->out_w : p->out_h);
    double f = (double)sh / resize;
    double cw = round(p->out_w * f), ch = round(p->out_h * f);
    c->w = cw < 1 ? 1 : cw > w ? w : (uint32_t)cw;
    c->h = ch < 1 ? 1 : ch > h ? h : (uint32_t)ch;
    if (w == 0 || h == 0) {
        c->w = w; c->h = h;
    }
    /* torchvision rounds the offset: int(round((H - h) / 2.0)). */
    c->x = (uint32_t)nearbyint((w - c->w) / 2.0);
    c->y = (uint32_t)nearbyint((h - c->h) / 2.0);
    c->flip = 0;
}
