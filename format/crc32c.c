/*
 * crc32c.c - CRC32C (Castagnoli), the checksum of every .pgs page, sample
 * and table: slicing-by-8 in portable C, and the SSE4.2 crc32 instruction
 * (three interleaved streams) when the CPU has it, chosen once at run time.
 */
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "format/format_int.h"

#define POLY 0x82f63b78u /* reflected Castagnoli polynomial */

static uint32_t tab[8][256];
static pthread_once_t tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ POLY : c >> 1;
        tab[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            tab[k][n] = (tab[k - 1][n] >> 8) ^ tab[0][tab[k - 1][n] & 0xff];
}

/* raw (not pre/post-inverted) slicing-by-8 update */
static uint32_t sw_update(uint32_t c, const uint8_t *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        c = (c >> 8) ^ tab[0][(c ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= c; /* little-endian: the low 4 bytes take the running CRC */
        c = tab[7][v & 0xff] ^ tab[6][(v >> 8) & 0xff] ^ tab[5][(v >> 16) & 0xff] ^
            tab[4][(v >> 24) & 0xff] ^ tab[3][(v >> 32) & 0xff] ^ tab[2][(v >> 40) & 0xff] ^
            tab[1][(v >> 48) & 0xff] ^ tab[0][v >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        c = (c >> 8) ^ tab[0][(c ^ *p++) & 0xff];
    return c;
}

uint32_t ps_crc32c_sw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&tab_once, tab_init);
    return ~sw_update(~crc, buf, len);
}

#if defined(__x86_64__)
#include <immintrin.h>

/*
 * Shifting a CRC forward over n zero bytes is linear over GF(2): we keep,
 * per block length used by the interleaved loop, a table that does it in
 * four lookups, so three independent crc32 streams (the instruction has a
 * latency of 3 and a throughput of 1) can be merged.
 */
#define HW_BLOCK 4096u /* bytes per stream per round */
static uint32_t shift_tab[4][256];
static pthread_once_t shift_once = PTHREAD_ONCE_INIT;

/* GF(2) 32x32 matrices as 32 columns: the image of each bit of the CRC state */
static uint32_t gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (int i = 0; vec; i++, vec >>= 1)
        if (vec & 1)
            sum ^= mat[i];
    return sum;
}

static void gf2_square(uint32_t *sq, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        sq[n] = gf2_times(mat, mat[n]);
}

static void shift_init(void)
{
    uint32_t a[32], b[32], *m = a, *t = b;
    /* the operator for one zero bit, squared log2(8 * HW_BLOCK) = 15 times */
    a[0] = POLY;
    for (int n = 1; n < 32; n++)
        a[n] = 1u << (n - 1);
    for (uint32_t bits = 1; bits < 8 * HW_BLOCK; bits *= 2) {
        gf2_square(t, m);
        uint32_t *x = m;
        m = t;
        t = x;
    }
    for (uint32_t k = 0; k < 4; k++)
        for (uint32_t v = 0; v < 256; v++)
            shift_tab[k][v] = gf2_times(m, v << (8 * k));
}

static inline uint32_t shift_block(uint32_t c)
{
    return shift_tab[0][c & 0xff] ^ shift_tab[1][(c >> 8) & 0xff] ^ shift_tab[2][(c >> 16) & 0xff] ^
           shift_tab[3][c >> 24];
}

__attribute__((target("sse4.2"))) static uint32_t hw_update(uint32_t c, const uint8_t *p, size_t len)
{
    uint64_t c0 = c;

    while (len && ((uintptr_t)p & 7)) {
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
        len--;
    }
    while (len >= 3 * HW_BLOCK) {
        uint64_t c1 = 0, c2 = 0;
        const uint8_t *p1 = p + HW_BLOCK, *p2 = p + 2 * HW_BLOCK;
        for (size_t i = 0; i < HW_BLOCK; i += 8) {
            uint64_t a, b, d;
            memcpy(&a, p + i, 8);
            memcpy(&b, p1 + i, 8);
            memcpy(&d, p2 + i, 8);
            c0 = _mm_crc32_u64(c0, a);
            c1 = _mm_crc32_u64(c1, b);
            c2 = _mm_crc32_u64(c2, d);
        }
        /* raw CRC of A||B = shift(crc(A)) ^ crc_from_zero(B) */
        c0 = shift_block((uint32_t)c0) ^ (uint32_t)c1;
        c0 = shift_block((uint32_t)c0) ^ (uint32_t)c2;
        p += 3 * HW_BLOCK;
        len -= 3 * HW_BLOCK;
    }
    while (len >= 8) {
        uint64_t a;
        memcpy(&a, p, 8);
        c0 = _mm_crc32_u64(c0, a);
        p += 8;
        len -= 8;
    }
    while (len--)
        c0 = _mm_crc32_u8((uint32_t)c0, *p++);
    return (uint32_t)c0;
}

int ps_crc32c_hw_available(void)
{
    static int have = -1;
    int h = __atomic_load_n(&have, __ATOMIC_RELAXED);
    if (h < 0) {
        __builtin_cpu_init();
        h = __builtin_cpu_supports("sse4.2") ? 1 : 0;
        __atomic_store_n(&have, h, __ATOMIC_RELAXED);
    }
    return h;
}

uint32_t ps_crc32c_hw(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&shift_once, shift_init);
    return ~hw_update(~crc, buf, len);
}
#else
int ps_crc32c_hw_available(void) { return 0; }
uint32_t ps_crc32c_hw(uint32_t crc, const void *buf, size_t len) { return ps_crc32c_sw(crc, buf, len); }
#endif

uint32_t ps_crc32c(uint32_t crc, const void *buf, size_t len)
{
    return ps_crc32c_hw_available() ? ps_crc32c_hw(crc, buf, len) : ps_crc32c_sw(crc, buf, len);
}
