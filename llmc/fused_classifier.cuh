/*
The loss head: per row of bf16 logits (N, V), softmax + cross-entropy
  losses[i] = logsumexp(logits[i]) - logits[i][targets[i]]           (fp32)
and, in place, the gradient of the lm_head output
  logits[i][j] := (softmax(logits[i])[j] - (j == targets[i])) * dloss  (bf16)
where dloss is d(total loss)/d(losses[i]), e.g. 1 / (B * T * grad_accum) for a mean. A target of -1
(the ignore index: a loss-masked target, llmc/dataloader.h) gives loss 0 and a zero gradient row.

Why fused: the row is read once and written once; fp32 logits or probabilities never touch memory
(at N = 8192, V = 32000 an fp32 copy would be 1 GB). One block per row; each thread keeps up to
CLASSIFIER_CACHED 16-byte vectors of the row in registers between the statistics and the gradient,
so rows up to 32768 logits are read from memory exactly once; longer rows (Llama 3's 128256) read
the rest a second time for the gradient. The row's max and sum of exponentials are block reductions
in a fixed order: the losses and gradients are bit-identical from run to run.

classifier_loss is the validation variant: losses only, logits untouched.
*/
#ifndef LLMC_FUSED_CLASSIFIER_CUH
#define LLMC_FUSED_CLASSIFIER_CUH

#include <math.h>
#include "cuda_common.cuh" // floatX, fp8 types, Fp8Cast, block_reduce, cudaCheck, FATAL
#include "packed.cuh" // 16-byte bf16 vectors, alignment checks

#define CLASSIFIER_THREADS 512
#define CLASSIFIER_CACHED 8 // vectors per thread kept in registers: 512 * 8 * 8 = 32768 logits

// ----------------------------------------------------------------------------------------------
// kernel

// logits 8*vi .. 8*vi+7 of the row (raw: their bf16 values) := (softmax - onehot(target)) * dloss
__device__ __forceinline__ void classifier_store_grad8(floatX *x, int vi, uint4 raw, float row_max, float inv_sum,
                                                       int target, float dloss) {
    float f[8];
    bf16x8_to_float(f, raw);
#pragma unroll
    for (int i = 0; i < 8; i++) f[i] = (__expf(f[i] - row_max) * inv_sum - (vi * 8 + i == target ? 1.0f : 0.0f)) * dloss;
    store16(x + (size_t)vi * 8, float_to_bf16x8(f));
}

template <bool WRITE_DLOGITS>
__global__ void __launch_bounds__(CLASSIFIER_THREADS, 2) fused_classifier_kernel(
    floatX *logits, float *losses, const int *__restrict__ targets, int V, float dloss) {
    constexpr int K = CLASSIFIER_CACHED;
    floatX *x = logits + (size_t)blockIdx.x * V;
    const int nvec = V / 8;
    const int target = targets[blockIdx.x];
    if (target < 0) { // the whole block takes this branch: no barrier is left waiting
        if (threadIdx.x == 0 && losses != NULL) losses[blockIdx.x] = 0.0f;
        if (WRITE_DLOGITS)
            for (int vi = threadIdx.x; vi < nvec; vi += CLASSIFIER_THREADS) store16(x + (size_t)vi * 8, make_uint4(0, 0, 0, 0));
        return;
    }
    // read before the reductions' barriers, i.e. before any thread overwrites the row
    const float target_logit = threadIdx.x == 0 ? __bfloat162float(x[target]) : 0.0f;

    uint4 cache[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int vi = threadIdx.x + k * CLASSIFIER_THREADS;
        cache[k] = vi < nvec ? load16(x + (size_t)vi * 8) : make_uint4(0, 0, 0, 0);
    }
    // this thread's max and sum of exp(x - max): cached part in two sweeps (one exp per logit),
    // the uncached remainder (long rows only) online
    float m = -INFINITY, s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (threadIdx.x + k * CLASSIFIER_THREADS < nvec) {
            float f[8];
            bf16x8_to_float(f, cache[k]);
#pragma unroll
            for (int i = 0; i < 8; i++) m = fmaxf(m, f[i]);
        }
    }
#pragma unroll
    for (int k = 0; k < K; k++) {
        if (threadIdx.x + k * CLASSIFIER_THREADS < nvec) {
            float f[8];
            bf16x8_to_float(f, cache[k]);
#pragma unroll
            for (int i = 0; i < 8; i++) s += __expf(f[i] - m);
        }
    }
    for (int vi = threadIdx.x + K * CLASSIFIER_THREADS; vi < nvec; vi += CLASSIFIER_THREADS) {
        float f[8], vm = m;
        bf16x8_to_float(f, load16(x + (size_t)vi * 8));
#pragma unroll
        for (int i = 0; i < 8; i++) vm = fmaxf(vm, f[i]);
        s *= __expf(m - vm); // m == -inf (nothing seen yet): s is 0 and stays 0
#pragma unroll
        for (int i = 0; i < 8; i++) s += __expf(f[i] - vm);
        m = vm;
    }
    const float row_max = block_reduce<true>(m);
    s = m == -INFINITY ? 0.0f : s * __expf(m - row_max);
    const float row_sum = block_reduce<false>(s);
    if (threadIdx.x == 0 && losses != NULL) losses[blockIdx.x] = logf(row_sum) + row_max - target_logit;
    if (!WRITE_DLOGITS) return;

    const float inv_sum = 1.0f / row_sum;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int vi = threadIdx.x + k * CLASSIFIER_THREADS;
        if (vi < nvec) classifier_store_grad8(x, vi, cache[k], row_max, inv_sum, target, dloss);
    }
    for (int vi = threadIdx.x + K * CLASSIFIER_THREADS; vi < nvec; vi += CLASSIFIER_THREADS)
        classifier_store_grad8(x, vi, load16(x + (size_t)vi * 8), row_max, inv_sum, target, dloss);
}

// ----------------------------------------------------------------------------------------------
// launchers

static void classifier_check(const char *who, const floatX *logits, int V) {
    if (V <= 0 || V % 8 != 0) FATAL("%s: V = %d must be a positive multiple of 8 (16-byte rows); pad the vocabulary", who, V);
    check_aligned(logits, 16, "logits", who);
}

// logits (N, V) bf16; targets (N) in [0, V) or -1 (ignored); losses (N) fp32, may be NULL. With write_dlogits != 0
// the logits are replaced by dloss * (softmax - onehot(target)); with 0 they are left untouched.
static void fused_classifier(floatX *logits, float *losses, const int *targets, int N, int V, float dloss,
                             int write_dlogits, cudaStream_t stream) {
    classifier_check("fused_classifier", logits, V);
    if (N <= 0) return;
    if (write_dlogits) fused_classifier_kernel<true><<<N, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, targets, V, dloss);
    else fused_classifier_kernel<false><<<N, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, targets, V, dloss);
    cudaLaunchCheck();
}

// Validation: losses (N) only; logits are not modified.
static void classifier_loss(const floatX *logits, float *losses, const int *targets, int N, int V, cudaStream_t stream) {
    fused_classifier((floatX *)logits, losses, targets, N, V, 0.0f, 0, stream);
}

#endif
