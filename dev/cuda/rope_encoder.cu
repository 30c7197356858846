/*
RoPE (llmc/rope.cuh) and token embedding (llmc/encoder.cuh) kernels: validation against a CPU
reference, then timing.
Build and run (from the repository root):
    make -C dev/cuda rope_encoder && ./dev/cuda/rope_encoder
  or without make:  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I. dev/cuda/rope_encoder.cu -o dev/cuda/rope_encoder
No arguments. Timed shapes: RoPE at B = 4, T = 2048, HS = 128 with NH = NKV = 32 (Llama 2 7B) and
NH = 32, NKV = 8 (Llama 3 8B); embedding at N = 8192, C = 4096, V = 32000.

What is validated:
- rope_forward: q and k heads against a CPU rotation with angles in double (independent of the
  table), v heads bit-untouched; rope_backward: the inverse rotation, dv untouched, the E5M2 copy of
  the whole row exact, amax exact, its fp8 health counts exact against llmc/fp8.h's oracle over the
  bf16 written, added to what the counters held (some input pairs shrunk or zeroed, shrink_some, so
  that some values underflow; ~5% saturate); the cast-free backward leaves the same bf16.
- encoder_forward: an exact gather. encoder_backward: EXACTLY the CPU's fp32 sum in increasing
  position order added once to bf16 dwte (the kernel promises that order, so the match is bit-exact),
  rows of absent tokens untouched, two successive calls (the pinned list is reused), skewed token
  frequencies (one token in ~1/4 of the positions), and bit-identical repeated runs.
Outputs are NaN-poisoned first where the kernel writes them all. Exit status 1 on any failure.
*/
#include "llmc/rope.cuh"    // rope_freqs, rope_forward, rope_backward
#include "llmc/encoder.cuh" // encoder_forward, EncoderBackward
#include "kernel_test.h"     // CPU bf16, comparisons, poison, timing

static const float THETA = 10000.0f;

// what rope_freqs reads of a model config: the head size and theta (no RoPE scaling)
static LlamaConfig rope_config(int NH, int HS) {
    LlamaConfig c = {};
    c.C = NH * HS;
    c.NH = NH;
    c.rope_theta = THETA;
    return c;
}

static void validate_rope(int B, int T, int NH, int NKV, int HS) {
    printf("validate rope B = %d, T = %d, NH = %d, NKV = %d, HS = %d\n", B, T, NH, NKV, HS);
    const int row = (NH + 2 * NKV) * HS, BT = B * T;
    const size_t n = (size_t)BT * row;
    float *d_freqs = device_alloc<float>(rope_freqs_floats(HS, T));
    LlamaConfig rc = rope_config(NH, HS);
    rope_freqs(d_freqs, &rc, T);
    std::vector<uint16_t> q = random_bf16(n, 0.0f, 1.0f);
    shrink_some(q, 4, 40, n); // tiny or zero pairs: rotated values that underflow, zeros that must not count
    floatX *d_qkv = (floatX *)to_device(q);
    rope_forward(d_qkv, d_freqs, NULL, B, T, NH, NKV, HS, 0);
    std::vector<uint16_t> fwd = to_host<uint16_t>(d_qkv, n);

    // backward on the same data as an upstream gradient
    float *d_amax = device_alloc<float>(1), *d_scale = device_alloc<float>(1);
    uint8_t *d_f8 = device_alloc<uint8_t>(n);
    unsigned long long *d_counts = counts_alloc(FP8_COUNTS);
    const float scale = 57344.0f / 2.0f; // ~5% saturate
    set_float(d_scale, scale);
    set_float(d_amax, 0.0f);
    poison(d_f8, n);
    Fp8Cast cast = {d_f8, d_amax, d_scale, d_counts};
    upload(d_qkv, q.data(), n);
    rope_backward(d_qkv, d_freqs, NULL, B, T, NH, NKV, HS, cast, 0);
    std::vector<uint16_t> bwd = to_host<uint16_t>(d_qkv, n);
    std::vector<uint8_t> f8 = to_host<uint8_t>(d_f8, n);
    float amax = get_float(d_amax);

    std::vector<double> cos_t((size_t)T * HS / 2), sin_t((size_t)T * HS / 2);
    for (int t = 0; t < T; t++)
        for (int i = 0; i < HS / 2; i++) {
            const double angle = t * pow((double)THETA, -2.0 * i / HS);
            cos_t[(size_t)t * HS / 2 + i] = cos(angle);
            sin_t[(size_t)t * HS / 2 + i] = sin(angle);
        }
    Cmp cf = cmp_begin("rope forward q, k"), cb = cmp_begin("rope backward dq, dk");
    Cmp cv = cmp_begin("rope v / dv untouched (exact)");
    for (int r = 0; r < BT; r++) {
        const int t = r % T;
        for (int e = 0; e < row; e += 2) {
            const size_t k = (size_t)r * row + e;
            double x0 = bf16_to_float(q[k]), x1 = bf16_to_float(q[k + 1]);
            if (e >= (NH + NKV) * HS) {
                cmp_add(&cv, k, bf16_to_float(fwd[k]), x0, 0.0);
                cmp_add(&cv, k + 1, bf16_to_float(fwd[k + 1]), x1, 0.0);
                cmp_add(&cv, k, bf16_to_float(bwd[k]), x0, 0.0);
                cmp_add(&cv, k + 1, bf16_to_float(bwd[k + 1]), x1, 0.0);
                continue;
            }
            const int i = (e % HS) / 2;
            const double c = cos_t[(size_t)t * HS / 2 + i], s = sin_t[(size_t)t * HS / 2 + i];
            const double mag = fabs(x0) + fabs(x1);
            double y0 = x0 * c - x1 * s, y1 = x0 * s + x1 * c;
            cmp_add(&cf, k, bf16_to_float(fwd[k]), y0, fabs(y0) / 256 + 1e-5 * mag);
            cmp_add(&cf, k + 1, bf16_to_float(fwd[k + 1]), y1, fabs(y1) / 256 + 1e-5 * mag);
            double d0 = x0 * c + x1 * s, d1 = -x0 * s + x1 * c;
            cmp_add(&cb, k, bf16_to_float(bwd[k]), d0, fabs(d0) / 256 + 1e-5 * mag);
            cmp_add(&cb, k + 1, bf16_to_float(bwd[k + 1]), d1, fabs(d1) / 256 + 1e-5 * mag);
        }
    }
    cmp_end(&cf);
    cmp_end(&cb);
    cmp_end(&cv);
    check_fp8("rope backward fp8 e5m2 (whole row)", f8.data(), bwd.data(), n, scale, FP8_E5M2);
    check_amax("rope backward amax (whole row)", amax, bwd.data(), n);
    check_counts("rope backward counts (whole row)", d_counts, fp8_counts_of(bwd.data(), n, scale, FP8_E5M2));

    // without a cast: the same bf16, and the second run is bit-identical to the first
    Fp8Cast none = {NULL, NULL, NULL, NULL};
    upload(d_qkv, q.data(), n);
    rope_backward(d_qkv, d_freqs, NULL, B, T, NH, NKV, HS, none, 0);
    std::vector<uint16_t> bwd2 = to_host<uint16_t>(d_qkv, n);
    check_bitwise("rope backward without cast == with", bwd.data(), bwd2.data(), n * 2);
    cudaCheck(cudaFree(d_freqs)); cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_amax));
    cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_f8)); cudaCheck(cudaFree(d_counts));
}

// Tokens with a skewed distribution: ~1/4 of the positions hold token 7, the rest uniform in [0, V).
static std::vector<int> random_tokens(int N, int V) {
    std::vector<int> t(N);
    for (int i = 0; i < N; i++) t[i] = (random_u32(&g_rng) % 4 == 0) ? 7 % V : (int)(random_u32(&g_rng) % V);
    return t;
}

static void validate_encoder(int N, int C, int V) {
    printf("validate encoder N = %d, C = %d, V = %d\n", N, C, V);
    const size_t NC = (size_t)N * C, VC = (size_t)V * C;
    std::vector<uint16_t> wte = random_bf16(VC, 0.0f, 1.0f);
    std::vector<int> tok = random_tokens(N, V);
    floatX *d_wte = (floatX *)to_device(wte), *d_out = device_alloc<floatX>(NC);
    int *d_tok = to_device(tok);
    poison(d_out, NC * 2);
    encoder_forward(d_out, d_tok, d_wte, N, C, 0);
    {
        std::vector<uint16_t> out = to_host<uint16_t>(d_out, NC);
        bool ok = true;
        for (int i = 0; i < N && ok; i++) ok = memcmp(&out[(size_t)i * C], &wte[(size_t)tok[i] * C], C * 2) == 0;
        check_true("encoder forward (exact gather)", ok, ok ? "every row" : "a row differs");
    }

    // backward: two micro-steps with different tokens and gradients
    std::vector<int> tok2 = random_tokens(N, V);
    std::vector<uint16_t> dout1 = random_bf16(NC, 0.0f, 1.0f), dout2 = random_bf16(NC, 0.0f, 1.0f);
    std::vector<uint16_t> dwte0 = random_bf16(VC, 0.0f, 1.0f);
    floatX *d_dwte = (floatX *)to_device(dwte0), *d_d1 = (floatX *)to_device(dout1), *d_d2 = (floatX *)to_device(dout2);
    EncoderBackward eb;
    encoder_backward_init(&eb, N, C);
    encoder_backward(&eb, d_dwte, d_d1, tok.data(), N, C, 0);
    encoder_backward(&eb, d_dwte, d_d2, tok2.data(), N, C, 0);
    std::vector<uint16_t> got = to_host<uint16_t>(d_dwte, VC);

    // CPU: the same fp32 sums in the same order, each micro-step rounded into bf16 once
    std::vector<uint16_t> ref = dwte0;
    const std::vector<int> *toks[2] = {&tok, &tok2};
    const std::vector<uint16_t> *douts[2] = {&dout1, &dout2};
    for (int step = 0; step < 2; step++) {
        std::vector<int> slot(V, -1), slot_token;
        for (int i = 0; i < N; i++) {
            int t = (*toks[step])[i];
            if (slot[t] < 0) slot[t] = (int)slot_token.size(), slot_token.push_back(t);
        }
        std::vector<float> acc(slot_token.size() * (size_t)C, 0.0f);
        for (int i = 0; i < N; i++) { // increasing position order, fp32, as the kernel promises
            float *a = &acc[(size_t)slot[(*toks[step])[i]] * C];
            for (int c = 0; c < C; c++) a[c] += bf16_to_float((*douts[step])[(size_t)i * C + c]);
        }
        for (size_t u = 0; u < slot_token.size(); u++)
            for (int c = 0; c < C; c++) {
                uint16_t &r = ref[(size_t)slot_token[u] * C + c];
                r = float_to_bf16(bf16_to_float(r) + acc[u * C + c]);
            }
    }
    Cmp c = cmp_begin("encoder backward dwte (exact)");
    for (size_t k = 0; k < VC; k++) cmp_add(&c, k, bf16_to_float(got[k]), bf16_to_float(ref[k]), 0.0);
    cmp_end(&c);

    // repeat from the same state: bit-identical
    upload(d_dwte, dwte0.data(), VC);
    encoder_backward(&eb, d_dwte, d_d1, tok.data(), N, C, 0);
    encoder_backward(&eb, d_dwte, d_d2, tok2.data(), N, C, 0);
    std::vector<uint16_t> got2 = to_host<uint16_t>(d_dwte, VC);
    check_bitwise("encoder backward deterministic", got.data(), got2.data(), VC * 2);
    encoder_backward_free(&eb);
    cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_tok)); cudaCheck(cudaFree(d_dwte));
    cudaCheck(cudaFree(d_d1)); cudaCheck(cudaFree(d_d2));
}

static void benchmark_rope(int B, int T, int NH, int NKV, int HS) {
    const int row = (NH + 2 * NKV) * HS;
    const double BT = (double)B * T, qk = BT * (NH + NKV) * HS, all = BT * row;
    printf("benchmark rope B = %d, T = %d, NH = %d, NKV = %d, HS = %d\n", B, T, NH, NKV, HS);
    float *d_freqs = device_alloc<float>(rope_freqs_floats(HS, T));
    LlamaConfig rc = rope_config(NH, HS);
    rope_freqs(d_freqs, &rc, T);
    floatX *d_qkv = (floatX *)to_device(random_bf16((size_t)BT * row, 0.0f, 1.0f));
    float *d_amax = device_alloc<float>(1), *d_scale = device_alloc<float>(1);
    uint8_t *d_f8 = device_alloc<uint8_t>((size_t)BT * row);
    set_float(d_scale, 1.0f);
    set_float(d_amax, 0.0f);
    Fp8Cast cast = {d_f8, d_amax, d_scale, NULL}, none = {NULL, NULL, NULL, NULL};
    float ms = time_median_ms([&] { rope_forward(d_qkv, d_freqs, NULL, B, T, NH, NKV, HS, 0); });
    report_bandwidth("rope_forward (q, k in place)", ms, qk * 4);
    ms = time_median_ms([&] { rope_backward(d_qkv, d_freqs, NULL, B, T, NH, NKV, HS, cast, 0); });
    report_bandwidth("rope_backward (+ fp8 of the whole row)", ms, qk * 4 + (all - qk) * 2 + all);
    ms = time_median_ms([&] { rope_backward(d_qkv, d_freqs, NULL, B, T, NH, NKV, HS, none, 0); });
    report_bandwidth("rope_backward (no cast)", ms, qk * 4);
    cudaCheck(cudaFree(d_freqs)); cudaCheck(cudaFree(d_qkv)); cudaCheck(cudaFree(d_amax));
    cudaCheck(cudaFree(d_scale)); cudaCheck(cudaFree(d_f8));
}

static void benchmark_encoder(int N, int C, int V) {
    printf("benchmark encoder N = %d, C = %d, V = %d\n", N, C, V);
    const size_t NC = (size_t)N * C, VC = (size_t)V * C;
    std::vector<int> tok = random_tokens(N, V);
    int distinct = 0;
    {
        std::vector<char> seen(V, 0);
        for (int t : tok) distinct += !seen[t], seen[t] = 1;
    }
    floatX *d_wte = (floatX *)to_device(random_bf16(VC, 0.0f, 1.0f)), *d_out = device_alloc<floatX>(NC);
    int *d_tok = to_device(tok);
    float ms = time_median_ms([&] { encoder_forward(d_out, d_tok, d_wte, N, C, 0); });
    report_bandwidth("encoder_forward", ms, NC * 4.0);
    EncoderBackward eb;
    encoder_backward_init(&eb, N, C);
    ms = time_median_ms([&] { encoder_backward(&eb, d_wte, d_out, tok.data(), N, C, 0); });
    report_bandwidth("encoder_backward (incl. host grouping)", ms, NC * 2.0 + distinct * (double)C * 4);
    printf("  (%d distinct tokens; the time includes the host's grouping of the tokens, which the trainer\n"
           "   overlaps with earlier GPU work: it runs while the GPU is still busy with the backward)\n", distinct);
    encoder_backward_free(&eb);
    cudaCheck(cudaFree(d_wte)); cudaCheck(cudaFree(d_out)); cudaCheck(cudaFree(d_tok));
}

int main(void) {
    dev_setup();
    validate_rope(4, 2048, 32, 32, 128);
    validate_rope(2, 37, 4, 2, 64);
    validate_rope(3, 5, 3, 1, 8);
    validate_rope(1, 300, 8, 8, 16);
    validate_encoder(8192, 4096, 32000);
    validate_encoder(37, 264, 50);
    validate_encoder(5, 8, 3);
    benchmark_rope(4, 2048, 32, 32, 128);
    benchmark_rope(4, 2048, 32, 8, 128);
    benchmark_encoder(8192, 4096, 32000);
    return finish("rope_encoder");
}
