/* xfer_cuda.c - the CUDA build: pinned batch buffers, an async copy per batch slot on one stream,
 * the normalise/layout kernel (xfer_kernels.cu), and an event per slot to hand the batch over. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime_api.h>

#include "pagestream.h"
#include "decode/xfer.h"
#include "io/io.h"

/* In xfer_kernels.cu. Returns a cudaError_t. */
int ps_xfer_launch(const void *in, void *out, uint32_t n, uint32_t h, uint32_t w, int dtype,
                   int layout, const float *mean, const float *std, void *stream);

struct xslot {
    void *din, *dout;       /* dout == din when the output is uint8 NHWC (no kernel) */
    cudaEvent_t ev;
    uint32_t n;
    int busy;
};

struct ps_xfer {
    struct ps_xfer_params p;
    cudaStream_t stream;
    struct xslot *s;
    size_t elem;            /* bytes per output element */
    int passthrough;
};

int ps_xfer_available(char *err)
{
    int count = 0;  /* cudaGetDeviceCount leaves it untouched on some failures */
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        if (err)
            snprintf(err, PS_ERRLEN, "CUDA is not usable: %s (%s)", cudaGetErrorString(e), cudaGetErrorName(e));
        return 0;
    }
    if (count <= 0) {
        if (err)
            snprintf(err, PS_ERRLEN, "CUDA is not usable: no CUDA device found");
        return 0;
    }
    if (err)
        err[0] = 0;
    return 1;
}

void *ps_xfer_host_alloc(size_t bytes, int pinned)
{
    void *p = NULL;
    if (pinned) {
        /* Portable: any thread's context may copy from it. NULL on failure (no driver, memlock). */
        if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess)
            return NULL;
        return p;
    }
    if (posix_memalign(&p, 4096, bytes ? bytes : 1))
        return NULL;
    return p;
}

void ps_xfer_host_free(void *p, int pinned)
{
    if (!p)
        return;
    if (pinned)
        cudaFreeHost(p);
    else
        free(p);
}

static size_t dtype_size(int dtype)
{
    switch (dtype) {
    case PS_DTYPE_FLOAT16: return 2;
    case PS_DTYPE_FLOAT32: return 4;
    default: return 1;
    }
}

int ps_xfer_create(const struct ps_xfer_params *p, struct ps_xfer **out, char *err)
{
    struct ps_xfer *x = NULL;
    cudaError_t e = cudaSuccess;
    char why[PS_ERRLEN];

    *out = NULL;
    if (!ps_xfer_available(why))
        return ps_seterr(err, PS_ENOGPU, "device=cuda asked for, but %s", why);
    if (p->slots <= 0 || p->max_n == 0 || p->h == 0 || p->w == 0 ||
        (p->dtype != PS_DTYPE_UINT8 && p->dtype != PS_DTYPE_FLOAT16 && p->dtype != PS_DTYPE_FLOAT32))
        return ps_seterr(err, PS_ECONFIG, "bad transfer parameters (slots %d, batch %u of %ux%u, dtype %d)",
                         p->slots, p->max_n, p->h, p->w, p->dtype);
    x = calloc(1, sizeof *x);
    if (!x)
        return ps_seterr(err, -ENOMEM, "out of memory");
    x->p = *p;
    x->elem = dtype_size(p->dtype);
    x->passthrough = p->dtype == PS_DTYPE_UINT8 && p->layout != PS_LAYOUT_NCHW;
    x->s = calloc((size_t)p->slots, sizeof *x->s);
    if (!x->s) {
        free(x);
        return ps_seterr(err, -ENOMEM, "out of memory");
    }
    size_t in_bytes = (size_t)p->max_n * p->h * p->w * 3;
    if ((e = cudaStreamCreateWithFlags(&x->stream, cudaStreamNonBlocking)) != cudaSuccess)
        goto err;
    for (int i = 0; i < p->slots; i++) {
        struct xslot *s = &x->s[i];
        if ((e = cudaMalloc(&s->din, in_bytes)) != cudaSuccess)
            goto err;
        if (x->passthrough)
            s->dout = s->din;
        else if ((e = cudaMalloc(&s->dout, in_bytes * x->elem)) != cudaSuccess)
            goto err;
        if ((e = cudaEventCreateWithFlags(&s->ev, cudaEventDisableTiming)) != cudaSuccess)
            goto err;
    }
    *out = x;
    return 0;
err:
    ps_xfer_destroy(x);
    return ps_seterr(err, PS_ENOGPU, "CUDA setup for %d batch slots of %zu bytes failed: %s",
                     p->slots, in_bytes, cudaGetErrorString(e));
}

void ps_xfer_destroy(struct ps_xfer *x)
{
    if (!x)
        return;
    if (x->stream)
        cudaStreamSynchronize(x->stream);
    for (int i = 0; x->s && i < x->p.slots; i++) {
        struct xslot *s = &x->s[i];
        if (s->dout && s->dout != s->din)
            cudaFree(s->dout);
        if (s->din)
            cudaFree(s->din);
        if (s->ev)
            cudaEventDestroy(s->ev);
    }
    if (x->stream)
        cudaStreamDestroy(x->stream);
    free(x->s);
    free(x);
}

int ps_xfer_submit(struct ps_xfer *x, int slot, const void *host, uint32_t n)
{
    if (!x || slot < 0 || slot >= x->p.slots || n > x->p.max_n || (!host && n))
        return -EINVAL;
    struct xslot *s = &x->s[slot];
    size_t bytes = (size_t)n * x->p.h * x->p.w * 3;
    cudaError_t e = cudaMemcpyAsync(s->din, host, bytes, cudaMemcpyHostToDevice, x->stream);
    if (e == cudaSuccess && !x->passthrough)
        e = (cudaError_t)ps_xfer_launch(s->din, s->dout, n, x->p.h, x->p.w, x->p.dtype, x->p.layout,
                                        x->p.mean, x->p.std, x->stream);
    if (e == cudaSuccess)
        e = cudaEventRecord(s->ev, x->stream);
    if (e != cudaSuccess) {
        ps_log(PS_LOG_ERROR, "CUDA copy of batch slot %d failed: %s", slot, cudaGetErrorString(e));
        return -EIO;
    }
    s->n = n;
    s->busy = 1;
    return 0;
}

int ps_xfer_wait(struct ps_xfer *x, int slot, void **dev, size_t *bytes)
{
    if (!x || slot < 0 || slot >= x->p.slots)
        return -EINVAL;
    struct xslot *s = &x->s[slot];
    if (!s->busy)
        return -EINVAL;
    cudaError_t e = cudaEventSynchronize(s->ev);
    s->busy = 0;
    if (e != cudaSuccess) {
        ps_log(PS_LOG_ERROR, "CUDA copy of batch slot %d failed: %s", slot, cudaGetErrorString(e));
        return -EIO;
    }
    if (dev)
        *dev = s->dout;
    if (bytes)
        *bytes = (size_t)s->n * x->p.h * x->p.w * 3 * x->elem;
    return 0;
}
