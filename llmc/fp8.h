/*
The two fp8 formats (E4M3 "fn" for X and W, E5M2 for dY) as plain arithmetic: encode with
round-to-nearest-even and saturation, decode, and the delayed-scaling state machine of
docs/fp8_recipe.md (amax history roll, scale = fp8_max / amax / 2^margin).
This is the definition the CPU reference, the tests and the GPU kernels are held to. The codec and
the scale rule are __host__ __device__ (FP8_HD), but note that nvcc --use_fast_math turns the
device versions' divisions approximate and flushes subnormals, so kernels that must match bit for
bit restate them with exact operations (llmc/fp8_scaling.cuh). Plain C, also compiled by nvcc.
*/
#ifndef LLMC_FP8_H
#define LLMC_FP8_H

#include <stdint.h>
#include <math.h>
#include <float.h>
#include "fp8_layout.h"   // Fp8StateLayout, FP8_DY, FP8_KINDS

#ifdef __CUDACC__
#define FP8_HD __host__ __device__
#else
#define FP8_HD
#endif

typedef enum { FP8_E4M3 = 0, FP8_E5M2 = 1 } Fp8Format;
#define FP8_E4M3_MAX 448.0f
#define FP8_E5M2_MAX 57344.0f
// The NaN code the encoder writes for a NaN input, in either format (what CUDA's cast writes).
#define FP8_NAN_CODE 0x7F

static inline FP8_HD float fp8_format_max(Fp8Format f) { return f == FP8_E4M3 ? FP8_E4M3_MAX : FP8_E5M2_MAX; }

// The fp8 state's tensor kinds: dY (gradients need range more than precision) is E5M2, X and W E4M3.
static inline FP8_HD Fp8Format fp8_kind_format(int kind) { return kind == FP8_DY ? FP8_E5M2 : FP8_E4M3; }

// Layout of each format: mantissa bits, and the exponent of its smallest normal value (2^emin).
// Exponent bias = 1 - emin (E4M3: 7, E5M2: 15).
static inline FP8_HD int fp8_mantissa_bits(Fp8Format f) { return f == FP8_E4M3 ? 3 : 2; }
static inline FP8_HD int fp8_min_exponent(Fp8Format f) { return f == FP8_E4M3 ? -6 : -14; }

// float -> fp8 code. Round to nearest, ties to even mantissa, subnormals included; anything beyond
// the max (inf included) saturates to +-max, as CUDA's __NV_SATFINITE casts do; NaN -> FP8_NAN_CODE;
// the sign of zero is kept (a tiny negative value rounds to the -0 code).
static inline FP8_HD uint8_t fp8_encode(float x, Fp8Format f) {
    if (isnan(x)) return FP8_NAN_CODE;
    int mbits = fp8_mantissa_bits(f), emin = fp8_min_exponent(f);
    uint8_t sign = signbit(x) ? 0x80 : 0x00;
    float a = fabsf(x);
    // Everything above max rounds to max or to a value past it, so saturating first is exact.
    if (a > fp8_format_max(f)) a = fp8_format_max(f);
    // a's binade 2^e (below the normal range the spacing stays that of 2^emin: subnormals).
    int e = emin;
    if (a >= ldexpf(1.0f, emin)) {
        frexpf(a, &e); // a = frac * 2^e with frac in [0.5, 1)
        e -= 1;
    }
    // a in units of the spacing 2^(e - mbits): an exact power-of-two scaling, then one rounding
    // (rintf rounds half to even). r is in [2^mbits, 2^(mbits+1)] for normals, where the top value
    // is a carry into the next binade, and in [0, 2^mbits] for subnormals.
    int r = (int)rintf(ldexpf(a, mbits - e));
    // Code = biased exponent << mbits | mantissa. With E = e - emin + 1 (the biased exponent) and
    // mantissa r - 2^mbits this is ((e - emin) << mbits) + r, which also holds for subnormals
    // (E = 0, mantissa r) and for a carry (r = 2^(mbits+1) bumps the exponent field).
    return (uint8_t)(sign | (((e - emin) << mbits) + r));
}

// fp8 code -> float. E4M3 ("fn"): no inf, 0x7F/0xFF are NaN. E5M2: IEEE-like, exponent field all
// ones is inf (mantissa 0) or NaN.
static inline FP8_HD float fp8_decode(uint8_t code, Fp8Format f) {
    int mbits = fp8_mantissa_bits(f), emin = fp8_min_exponent(f);
    int mag = code & 0x7F;
    int exp_field = mag >> mbits, mantissa = mag & ((1 << mbits) - 1);
    float v;
    if (f == FP8_E4M3 && mag == 0x7F) return NAN;
    if (f == FP8_E5M2 && exp_field == 31) {
        if (mantissa != 0) return NAN;
        v = INFINITY;
    } else if (exp_field == 0) {
        v = ldexpf((float)mantissa, emin - mbits);
    } else {
        v = ldexpf((float)((1 << mbits) + mantissa), exp_field - 1 + emin - mbits);
    }
    return (code & 0x80) ? -v : v;
}

// fp8 health counters, per fp8 tensor (the trainer's fp8_counts, the reference's, Fp8Cast.counts):
// underflows, then saturations, of every value its casts cast in one optimizer step.
#define FP8_COUNTS 2
enum { FP8_UNDERFLOWS = 0, FP8_SATURATIONS = 1 };

// fp8 health: what a cast of x with this scale loses. Underflow: a non-zero x whose code is +-0 (its
// scaled magnitude at most half the smallest subnormal, ties going to the even code 0). Saturation:
// a scaled magnitude past the format's max (inf included), clipped to it. NaN is neither.
static inline FP8_HD int fp8_underflows(float x, float scale, Fp8Format f) {
    return x != 0.0f && !isnan(x) && (fp8_encode(x * scale, f) & 0x7F) == 0;
}
static inline FP8_HD int fp8_saturates(float x, float scale, Fp8Format f) {
    float a = fabsf(x * scale);
    return !isnan(a) && a > fp8_format_max(f);
}

// What a cast with this scale keeps of x, in the scaled domain (the value the GEMM multiplies).
static inline FP8_HD float fp8_quantize(float x, float scale, Fp8Format f) {
    return fp8_decode(fp8_encode(x * scale, f), f);
}

// scale = (fmax / amax) / 2^margin (TE's formula). A zero, negative, inf or NaN amax carries no
// information: keep the previous scale. A finite amax so small that the scale overflows gets FLT_MAX,
// so scale_inv stays non-zero.
static inline FP8_HD float fp8_compute_scale(float amax, float fmax, int margin, float prev_scale) {
    if (!(amax > 0.0f) || !isfinite(amax)) return prev_scale;
    float scale = (fmax / amax) / ldexpf(1.0f, margin);
    return isfinite(scale) ? scale : FLT_MAX;
}

// The once-per-step update of one tensor: roll the history (entry 0 newest, the oldest drops),
// move the slot into it and zero the slot, then scale from the largest FINITE entry (a NaN or inf
// amax stays in the history for the logs but never reaches a scale).
static inline FP8_HD void fp8_update_tensor(float *slot, float *history, int H, float *scale, float *scale_inv,
                                            float fmax, int margin) {
    for (int i = H - 1; i > 0; i--) history[i] = history[i - 1];
    history[0] = *slot;
    *slot = 0.0f;
    float amax = 0.0f;
    for (int i = 0; i < H; i++) {
        if (isfinite(history[i]) && history[i] > amax) amax = history[i];
    }
    *scale = fp8_compute_scale(amax, fmax, margin, *scale);
    *scale_inv = 1.0f / *scale;
}

// Host version of the GPU update kernel: every tensor of the state buffer.
static inline void fp8_update_state(float *state, Fp8StateLayout lay, int margin) {
    int H = lay.history_len;
    for (int t = 0; t < lay.num_tensors; t++) {
        float fmax = fp8_format_max(fp8_kind_format(t % FP8_KINDS));
        fp8_update_tensor(state + lay.amax_slot + t, state + lay.amax_history + (size_t)t * H, H,
                          state + lay.scale + t, state + lay.scale_inv + t, fmax, margin);
    }
}

// Initial state: no amax seen (history and slots 0), scale 1, scale_inv 1.
static inline void fp8_state_init(float *state, Fp8StateLayout lay) {
    for (size_t i = 0; i < lay.total; i++) state[i] = 0.0f;
    for (int t = 0; t < lay.num_tensors; t++) {
        state[lay.scale + t] = 1.0f;
        state[lay.scale_inv + t] = 1.0f;
    }
}

#endif
