/* fuzz_jpeg.c - libFuzzer target: ps_decode_jpeg (and the restart-marker paths) on arbitrary bytes
 * with parameters taken from its last 8 bytes (so plain JPEGs, e.g. tests/corpus/jpeg, are good
 * seeds: bytes after EOI are ignored); it must never crash, hang or leak. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "pagestream.h"
#include "decode/decode.h"
#include "decode/decode_int.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 8)
        return 0;
    struct ps_decode_params p;
    ps_decode_params_init(&p);
    /* the last 8 bytes choose the parameters; the whole input is the JPEG */
    const uint8_t *q = data + size - 8;
    p.transform = q[0] & 1 ? PS_TRANSFORM_CENTER_CROP : PS_TRANSFORM_RANDOM_RESIZED_CROP;
    p.out_w = 1 + q[1] % 96;
    p.out_h = 1 + q[2] % 96;
    p.resize = p.out_w + q[3] % 64;
    p.flip = q[0] >> 1 & 1;
    p.layout = q[0] >> 2 & 1 ? PS_LAYOUT_NCHW : PS_LAYOUT_NHWC;
    p.use_restart = (q[0] >> 3 & 3) != 0;
    uint64_t seed = (uint64_t)q[4] << 16 | (uint64_t)q[5] << 8 | q[6];
    unsigned scales = q[7];

    struct ps_decoder *d;
    if (ps_decoder_create(&p, &d))
        return 0;
    ps_decoder_set_scales(d, scales);
    uint8_t *out = malloc((size_t)p.out_w * p.out_h * 3);
    char err[PS_ERRLEN];
    struct ps_crop c;
    int rc = ps_decode_jpeg(d, data, size, seed, out, &c, err);
    if (rc != 0 && rc != PS_EDECODE)
        abort();
    /* A second decode on the same decoder: state left by a failure must not matter. */
    rc = ps_decode_jpeg(d, data, size, seed + 1, out, NULL, err);
    if (rc != 0 && rc != PS_EDECODE)
        abort();
    uint32_t w, h;
    ps_jpeg_dims(data, size, &w, &h);
    if (size < 65536) {
        uint8_t *r = NULL;
        size_t rl = 0;
        if (ps_jpeg_add_restarts_n(data, size, seed & 1, &r, &rl, err) == 0) {
            rc = ps_decode_jpeg(d, r, rl, seed, out, NULL, err);
            if (rc != 0 && rc != PS_EDECODE)
                abort();
        }
        free(r);
    }
    free(out);
    ps_decoder_destroy(d);
    return 0;
}
