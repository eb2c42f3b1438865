/* xfer_none.c - the build without CUDA: batches stay in host memory. */
#include <stdlib.h>
#include <stdio.h>
#include <string.h>

#include "pagestream.h"
#include "decode/xfer.h"
#include "io/io.h"

int ps_xfer_available(char *err)
{
    if (err)
        snprintf(err, PS_ERRLEN, "this build of pagestream has no CUDA support (built without nvcc)");
    return 0;
}

void *ps_xfer_host_alloc(size_t bytes, int pinned)
{
    void *p = NULL;
    (void)pinned;
    if (posix_memalign(&p, 4096, bytes ? bytes : 1))
        return NULL;
    return p;
}

void ps_xfer_host_free(void *p, int pinned)
{
    (void)pinned;
    free(p);
}

int ps_xfer_create(const struct ps_xfer_params *p, struct ps_xfer **out, char *err)
{
    (void)p;
    *out = NULL;
    return ps_seterr(err, PS_ENOGPU, "device=cuda asked for, but this build has no CUDA support (rebuild with nvcc: make CUDA=1)");
}

void ps_xfer_destroy(struct ps_xfer *x) { (void)x; }

int ps_xfer_submit(struct ps_xfer *x, int slot, const void *host, uint32_t n)
{
    (void)x; (void)slot; (void)host; (void)n;
    return PS_ENOGPU;
}

int ps_xfer_wait(struct ps_xfer *x, int slot, void **dev, size_t *bytes)
{
    (void)x; (void)slot; (void)dev; (void)bytes;
    return PS_ENOGPU;
}
