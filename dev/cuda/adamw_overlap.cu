/*
AdamW beside the next step's forward: does the memory-bound optimizer step hide behind the
compute-bound fp8 GEMMs of the forward that follows it? adamw_kernel is the largest kernel of the 7B
step after the GEMMs and attention (dev/results/step_profile_7b_fp8.md); the forward's layer l needs
only layer l's updated weights, so layer l's GEMMs could start while AdamW works on the layers above.
Llama-2-7B shapes, L layers (default 16; the ratios are those of 32): per layer the four forward fp8
GEMMs at N = B*T = 8192 tokens (qkv, wo, w13, w2), each reading the E4M3 W that the trainer's AdamW
of that layer wrote (fp32 master, bf16 moments and gradient, the fused E4M3 cast, no bf16 param).
  gemms    the GEMMs alone, layer by layer
  adamw    AdamW alone, layer by layer
  serial   AdamW of every layer, then the GEMMs, on one stream (the trainer today)
  overlap  AdamW on a low-priority stream, layer l's GEMMs on a high-priority one waiting for
           layer l's AdamW only
The GEMMs' kernels are persistent and fill every SM, so AdamW's blocks find room only between them;
the second argument has cuBLASLt plan the GEMMs for fewer SMs (its SM count target), leaving the
rest to AdamW, at a cost the gemms row shows.
Check: overlap's GEMM outputs equal serial's byte for byte from the same optimizer state (a GEMM that
ran before its layer's AdamW was done would read other weights). The kernels themselves are
validated by adamw and fp8_gemm.
Build (from dev/cuda): make adamw_overlap; run: ./adamw_overlap [layers [GEMM SMs]]
*/
#include "bench_common.h"
#include "llmc/adamw.cuh"
#include "llmc/matmul.cuh"

#define N_TOKENS 8192
#define KINDS 4

struct Gemm { const char *name; int in, out; };
static const Gemm GEMMS[KINDS] = {{"qkv", 4096, 12288}, {"wo", 4096, 4096}, {"w13", 4096, 22016}, {"w2", 11008, 4096}};

struct Bench {
    int L;
    size_t per_layer, off[KINDS]; // a layer's weights, kind k's first element within its layer
    float *master, *scale, *amax, *x_scale_inv, *w_scale_inv;
    floatX *grad, *m, *v, *y;
    uint8_t *w8;
    fp8e4 *x[KINDS];
    size_t y_off[KINDS], y_layer; // GEMM outputs: every layer's own
};

static size_t elem(const Bench &b, int l, int k) { return (size_t)l * b.per_layer + b.off[k]; }

// the optimizer state as it starts every checked run: the same bytes each time
static void reset_state(Bench &b) {
    size_t n = (size_t)b.L * b.per_layer;
    fill_uniform(b.master, n, 1, 0.02f);
    fill_uniform(b.m, n, 2, 0.001f);
    cudaCheck(cudaMemset(b.v, 0, n * sizeof(floatX))); // v >= 0: zero, as at the first step
    cudaCheck(cudaMemset(b.amax, 0, (size_t)b.L * KINDS * sizeof(float)));
}

static void adamw_layer(Bench &b, int l, int t, cudaStream_t s) {
    for (int k = 0; k < KINDS; k++) {
        size_t e = elem(b, l, k), n = (size_t)GEMMS[k].in * GEMMS[k].out;
        int i = l * KINDS + k;
        Fp8Cast wc = {b.w8 + e, b.amax + i, b.scale + i, NULL};
        AdamWSlice sl = {b.master + e, NULL, b.grad + e, b.m + e, b.v + e, 1, n, e, wc, 1, n, 1};
        AdamWStep st = {1e-4f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, t};
        adamw_update(&sl, &st, s);
    }
}

static void gemms_layer(Bench &b, int l, cudaStream_t s) {
    for (int k = 0; k < KINDS; k++) {
        floatX *y = b.y + (size_t)l * b.y_layer + b.y_off[k];
        matmul_fp8_fprop(y, b.x[k], (const fp8e4 *)(b.w8 + elem(b, l, k)), b.x_scale_inv, b.w_scale_inv, N_TOKENS,
                         GEMMS[k].in, GEMMS[k].out, s);
    }
}

enum { GEMMS_ONLY, ADAMW_ONLY, SERIAL, OVERLAP };
static const char *VARIANT_NAMES[] = {"gemms", "adamw", "serial", "overlap"};

// One run of a variant between start and stop, both recorded on hi (lo's work joins hi through the events).
static void run_variant(Bench &b, int variant, int t, cudaStream_t hi, cudaStream_t lo, cudaEvent_t start,
                        cudaEvent_t *layer_done, cudaEvent_t stop) {
    cudaCheck(cudaEventRecord(start, hi));
    if (variant == OVERLAP) {
        cudaCheck(cudaStreamWaitEvent(lo, start, 0));
        for (int l = 0; l < b.L; l++) {
            adamw_layer(b, l, t, lo);
            cudaCheck(cudaEventRecord(layer_done[l], lo));
        }
        for (int l = 0; l < b.L; l++) {
            cudaCheck(cudaStreamWaitEvent(hi, layer_done[l], 0));
            gemms_layer(b, l, hi);
        }
    } else {
        if (variant != GEMMS_ONLY) for (int l = 0; l < b.L; l++) adamw_layer(b, l, t, hi);
        if (variant != ADAMW_ONLY) for (int l = 0; l < b.L; l++) gemms_layer(b, l, hi);
    }
    cudaCheck(cudaEventRecord(stop, hi));
}

int main(int argc, char **argv) {
    Bench b;
    memset(&b, 0, sizeof(b));
    b.L = argc > 1 ? atoi(argv[1]) : 16;
    int gemm_sms = argc > 2 ? atoi(argv[2]) : 0;
    if (b.L < 1 || b.L > 32 || gemm_sms < 0) FATAL("usage: %s [layers 1..32 [GEMM SMs, 0: all]]", argv[0]);
    dev_setup();
    matmul_init();
    matmul_set_sm_count(gemm_sms);
    for (int k = 0; k < KINDS; k++) {
        b.off[k] = b.per_layer;
        b.per_layer += (size_t)GEMMS[k].in * GEMMS[k].out;
        b.y_off[k] = b.y_layer;
        b.y_layer += (size_t)N_TOKENS * GEMMS[k].out;
    }
    size_t n = (size_t)b.L * b.per_layer;
    printf("Llama-2-7B, %d layers: %.2f B weights, forward GEMMs at N = %d on %s SMs\n", b.L, n / 1e9, N_TOKENS,
           gemm_sms ? argv[2] : "all");
    b.master = device_alloc<float>(n);
    b.grad = device_alloc<floatX>(n); b.m = device_alloc<floatX>(n); b.v = device_alloc<floatX>(n);
    b.w8 = device_alloc<uint8_t>(n);
    b.y = device_alloc<floatX>((size_t)b.L * b.y_layer);
    b.scale = device_alloc<float>((size_t)b.L * KINDS); b.amax = device_alloc<float>((size_t)b.L * KINDS);
    b.x_scale_inv = device_alloc<float>(1); b.w_scale_inv = device_alloc<float>(1);
    std::vector<float> scales((size_t)b.L * KINDS, 1000.0f); // weights ~0.02 to ~20 in E4M3
    upload(b.scale, scales.data(), scales.size());
    set_float(b.x_scale_inv, 1.0f);
    set_float(b.w_scale_inv, 1e-3f);
    fill_uniform(b.grad, n, 4, 0.005f);
    for (int k = 0; k < KINDS; k++) {
        size_t nx = (size_t)N_TOKENS * GEMMS[k].in;
        floatX *tmp = device_alloc<floatX>(nx);
        fill_uniform(tmp, nx, 10 + k, 2.0f);
        b.x[k] = device_alloc<fp8e4>(nx);
        fp8_cast(b.x[k], FP8_E4M3, tmp, nx, b.amax, NULL, b.x_scale_inv, 0); // scale 1: X in [-2, 2)
        cudaCheck(cudaFree(tmp));
    }
    int least, greatest;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
    cudaStream_t hi, lo;
    cudaCheck(cudaStreamCreateWithPriority(&hi, cudaStreamNonBlocking, greatest));
    cudaCheck(cudaStreamCreateWithPriority(&lo, cudaStreamNonBlocking, least));
    cudaEvent_t start, stop, layer_done[32];
    cudaCheck(cudaEventCreate(&start)); cudaCheck(cudaEventCreate(&stop));
    for (int l = 0; l < b.L; l++) cudaCheck(cudaEventCreateWithFlags(&layer_done[l], cudaEventDisableTiming));

    // the check: serial and overlap from the same state give the same GEMM outputs (hi and lo do not
    // wait for the default stream's fills and copies, hence the device syncs)
    size_t ny = (size_t)b.L * b.y_layer;
    std::vector<uint16_t> y_serial, y_overlap;
    for (int variant : {SERIAL, OVERLAP}) {
        reset_state(b);
        cudaCheck(cudaMemset(b.y, 0xff, ny * sizeof(floatX)));
        cudaCheck(cudaDeviceSynchronize());
        run_variant(b, variant, 1, hi, lo, start, layer_done, stop);
        cudaCheck(cudaDeviceSynchronize());
        (variant == SERIAL ? y_serial : y_overlap) = to_host<uint16_t>(b.y, ny);
    }
    size_t differ = 0;
    for (size_t i = 0; i < ny; i++) differ += y_serial[i] != y_overlap[i];
    printf("check: overlap's GEMM outputs against serial's: %zu of %zu differ: %s\n", differ, ny, differ ? "FAIL" : "PASS");

    const int reps = 11, warmup = 2;
    float t[4];
    for (int variant = GEMMS_ONLY; variant <= OVERLAP; variant++) {
        std::vector<float> ms(reps);
        for (int r = -warmup; r < reps; r++) {
            run_variant(b, variant, 2 + r + warmup, hi, lo, start, layer_done, stop);
            cudaCheck(cudaEventSynchronize(stop));
            if (r >= 0) cudaCheck(cudaEventElapsedTime(&ms[r], start, stop));
        }
        t[variant] = median(ms);
        print_gpu_state(VARIANT_NAMES[variant]);
    }
    printf("\nmedian of %d after %d warm-ups, ms for %d layers\n", reps, warmup, b.L);
    for (int variant = GEMMS_ONLY; variant <= OVERLAP; variant++) printf("  %-8s %9.2f\n", VARIANT_NAMES[variant], t[variant]);
    printf("overlap hides %.2f ms of AdamW's %.2f (%.0f%%); overlap / serial = %.3f\n", t[SERIAL] - t[OVERLAP], t[ADAMW_ONLY],
           100.0 * (t[SERIAL] - t[OVERLAP]) / t[ADAMW_ONLY], t[OVERLAP] / t[SERIAL]);
    matmul_destroy();
    return differ ? 1 : 0;
}
