/*
 * xfer.h - moving finished batches to the GPU. Exactly one of xfer_cuda.c
 * (built when nvcc exists, CUDA=auto|1) or xfer_none.c is linked in.
 */
#ifndef PS_XFER_H
#define PS_XFER_H

#include <stddef.h>
#include <stdint.h>

/** 1 when this build has CUDA and a GPU answers; 0 otherwise (why in err, may be NULL). */
int ps_xfer_available(char *err);

/** Host memory for batch buffers: pinned when CUDA is in use, else aligned malloc. */
void *ps_xfer_host_alloc(size_t bytes, int pinned);
void ps_xfer_host_free(void *p, int pinned);

struct ps_xfer;

struct ps_xfer_params {
    int slots;              /* ring depth: device buffers, one per batch slot */
    uint32_t max_n, h, w;   /* batch shape (uint8 NHWC input) */
    int dtype;              /* enum ps_dtype of the output */
    int layout;             /* enum ps_layout of the output */
    float mean[3], std[3];  /* output = (x - mean) / std, on the 0..255 scale */
};

/** Create the device buffers and the stream. PS_ENOGPU without CUDA/GPU. */
int ps_xfer_create(const struct ps_xfer_params *p, struct ps_xfer **out, char *err);
void ps_xfer_destroy(struct ps_xfer *x);

/**
 * Start copying n images (uint8 NHWC, pinned host) of batch slot @p slot to
 * the device and converting them; returns at once.
 */
int ps_xfer_submit(struct ps_xfer *x, int slot, const void *host, uint32_t n);
/** Wait until slot's copy/convert is done; *dev receives the device pointer. */
int ps_xfer_wait(struct ps_xfer *x, int slot, void **dev, size_t *bytes);

#endif
