// xfer_kernels.cu - the GPU side of xfer_cuda.c: uint8 NHWC batch -> normalised float16/float32
// (or uint8) in NCHW or channels-last, one thread per output element.
// nvcc's launch stubs cache the kernel handle in a function-local static; with gcc's default
// thread-safe statics that needs libstdc++ (__cxa_guard_*), which the C link of the library lacks.
// The stubs run once per launch from one thread at a time per kernel, and the handle is idempotent.
#pragma nv_diag_suppress 1675
#if defined(__GNUC__) && !defined(__clang__) && !defined(__CUDA_ARCH__)
#pragma GCC optimize("no-threadsafe-statics")
#endif
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>

// Values of enum ps_dtype / ps_layout (include/pagestream.h); kept here so nvcc needs no C11 header.
#define K_DTYPE_UINT8 0
#define K_DTYPE_FLOAT16 1
#define K_DTYPE_FLOAT32 2
#define K_LAYOUT_NHWC 0
#define K_LAYOUT_NCHW 1

struct k_norm {
    float mean[3], inv_std[3];
};

// Plain (non-template) kernels: template kernel stubs pull in libstdc++ guard symbols, and the
// library is linked by the C compiler without libstdc++.
#define K_NHWC(NAME, T, CVT)                                                                        \
    __global__ void NAME(const uint8_t *__restrict__ in, T *__restrict__ out, size_t total, k_norm nm) \
    {                                                                                              \
        size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                                  \
        size_t stride = (size_t)gridDim.x * blockDim.x;                                            \
        for (; i < total; i += stride) {                                                           \
            int c = (int)(i % 3);                                                                  \
            out[i] = CVT(((float)in[i] - nm.mean[c]) * nm.inv_std[c]);                             \
        }                                                                                          \
    }
// Planar: walk the output in order (coalesced writes); reads stride by 3 bytes, which the cache absorbs.
#define K_NCHW(NAME, T, CVT)                                                                        \
    __global__ void NAME(const uint8_t *__restrict__ in, T *__restrict__ out, size_t total, size_t hw, \
                         k_norm nm)                                                                \
    {                                                                                              \
        size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;                                  \
        size_t stride = (size_t)gridDim.x * blockDim.x;                                            \
        for (; i < total; i += stride) {                                                           \
            size_t n = i / (3 * hw), r = i - n * 3 * hw;                                           \
            int c = (int)(r / hw);                                                                 \
            size_t p = r - (size_t)c * hw;                                                         \
            out[i] = CVT(((float)in[(n * hw + p) * 3 + c] - nm.mean[c]) * nm.inv_std[c]);          \
        }                                                                                          \
    }
#define CVT_F32(v) (v)
#define CVT_F16(v) __float2half_rn(v)
// Channels-last: the output index equals the input index, so reads and writes are both coalesced.
K_NHWC(k_nhwc_f32, float, CVT_F32)
K_NHWC(k_nhwc_f16, __half, CVT_F16)
K_NCHW(k_nchw_f32, float, CVT_F32)
K_NCHW(k_nchw_f16, __half, CVT_F16)

__global__ void k_nchw_u8(const uint8_t *__restrict__ in, uint8_t *__restrict__ out, size_t total, size_t hw)
{
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (; i < total; i += stride) {
        size_t n = i / (3 * hw), r = i - n * 3 * hw;
        size_t c = r / hw, p = r - c * hw;
        out[i] = in[(n * hw + p) * 3 + c];
    }
}

extern "C" int ps_xfer_launch(const void *in, void *out, uint32_t n, uint32_t h, uint32_t w, int dtype,
                              int layout, const float *mean, const float *std, void *stream)
{
    size_t hw = (size_t)h * w, total = (size_t)n * hw * 3;
    if (!total)
        return 0;
    k_norm nm;
    for (int c = 0; c < 3; c++) {
        nm.mean[c] = mean[c];
        nm.inv_std[c] = std[c] != 0.0f ? 1.0f / std[c] : 1.0f;
    }
    const int threads = 256;
    size_t want = (total + threads - 1) / threads;
    unsigned blocks = want > 65535u * 8 ? 65535u * 8 : (unsigned)want;
    cudaStream_t s = (cudaStream_t)stream;
    const uint8_t *src = (const uint8_t *)in;
    if (dtype == K_DTYPE_UINT8) {
        if (layout != K_LAYOUT_NCHW)
            return (int)cudaMemcpyAsync(out, in, total, cudaMemcpyDeviceToDevice, s);
        k_nchw_u8<<<blocks, threads, 0, s>>>(src, (uint8_t *)out, total, hw);
    } else if (dtype == K_DTYPE_FLOAT16) {
        if (layout == K_LAYOUT_NCHW)
            k_nchw_f16<<<blocks, threads, 0, s>>>(src, (__half *)out, total, hw, nm);
        else
            k_nhwc_f16<<<blocks, threads, 0, s>>>(src, (__half *)out, total, nm);
    } else {
        if (layout == K_LAYOUT_NCHW)
            k_nchw_f32<<<blocks, threads, 0, s>>>(src, (float *)out, total, hw, nm);
        else
            k_nhwc_f32<<<blocks, threads, 0, s>>>(src, (float *)out, total, nm);
    }
    return (int)cudaGetLastError();
}
