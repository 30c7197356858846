/*
Stochastic rounding of float to bf16 with counter-based random bits: the rule behind AdamW's bf16
moments (-adam_moments bf16, the default) and bf16 master weights (-master_weights bf16), shared by the
CUDA kernel (llmc/adamw.cuh), the C reference's AdamW (dev/test/llama_ref.h) and the tests that hold
it to the rule (dev/test/test_bf16_round.h on the CPU, dev/cuda/adamw.cu against the GPU).

Why stochastic: an AdamW moment changes each step by (1 - beta) of its size, e.g. 0.1% for v with
beta2 = 0.999, less than half a bf16 ulp (2^-9 relative); round-to-nearest would then keep v where it
is forever (a decaying v never decays). Rounding up with probability (the dropped 16 bits) / 2^16
makes the stored value exact in expectation, so the moments follow their fp32 course on average.

The random bits are a hash of (element index, step), not a generator's state: every element's
rounding is reproducible, independent of the launch shape, the number of GPUs and the ZeRO shard
that updates it. m takes the hash's low 16 bits, v its high 16. A bf16 master weight (an update of
lr ~1e-5 on a weight of 0.01 is 0.1% of it, again under half an ulp) takes the low 16 bits of the
hash of its index plus BF16_ROUND_WEIGHT_SALT (bf16_round_weight_bits): another input than any
element's index (a model holds far fewer than 2^63 elements), so its bits are independent of the
moments' and a weight is not rounded up whenever its m is.
Plain C, also compiled by nvcc (BF16R_HD = __host__ __device__ there).
*/
#ifndef LLMC_BF16_ROUND_H
#define LLMC_BF16_ROUND_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define BF16R_HD __host__ __device__
#else
#define BF16R_HD
#endif

// 32 well-mixed bits from a 64-bit element index and the 1-based AdamW step (a lowbias32-style
// finalizer over both words).
static inline BF16R_HD uint32_t bf16_round_bits(uint64_t index, int step) {
    uint32_t x = (uint32_t)index * 0x9e3779b9u ^ (uint32_t)(index >> 32) * 0x85ebca6bu ^ (uint32_t)step * 0xc2b2ae35u;
    x ^= x >> 16; x *= 0x7feb352du;
    x ^= x >> 15; x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

// Added to an element's index for its master weight's rounding bits: above every index (2^63 and more,
// no wrap for any index below 2^64 - salt), odd, the golden ratio's bits.
#define BF16_ROUND_WEIGHT_SALT 0x9e3779b97f4a7c15ull

// The 32 bits whose low 16 round a bf16 master weight (bf16_round_stochastic), independent of the
// moments' bf16_round_bits(index, step).
static inline BF16R_HD uint32_t bf16_round_weight_bits(uint64_t index, int step) {
    return bf16_round_bits(index + BF16_ROUND_WEIGHT_SALT, step);
}

// float -> bf16 bits, rounding the magnitude up with probability (low 16 bits of x) / 2^16, decided by
// r16 (16 random bits): exact in expectation. inf and NaN are truncated (they stay inf and NaN).
static inline BF16R_HD uint16_t bf16_round_stochastic(float x, uint32_t r16) {
    uint32_t b;
    memcpy(&b, &x, sizeof(b));
    if ((b & 0x7f800000u) != 0x7f800000u) b += r16 & 0xffffu;
    return (uint16_t)(b >> 16);
}

static inline BF16R_HD float bf16_bits_to_float(uint16_t h) {
    uint32_t b = (uint32_t)h << 16;
    float x;
    memcpy(&x, &b, sizeof(x));
    return x;
}

#endif
