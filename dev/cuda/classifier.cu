/*
Fused classifier of llmc/fused_classifier.cuh (softmax + cross-entropy + dlogits in place):
validation against a CPU reference in double, then timing.
Build and run (from the repository root):
    make -C dev/cuda classifier && ./dev/cuda/classifier
  or without make:  nvcc -O3 -arch=sm_90 -std=c++17 --use_fast_math -I. dev/cuda/classifier.cu -o dev/cuda/classifier
Optional arguments: N V (the timed shape; default 8192 32000). A Llama 3 vocabulary (V = 128256,
rows longer than the register cache, read twice) is timed as well.

What is validated, for V = 32000, 128256 (uncached remainder), 32768 and 32776 (exactly the cache,
one vector past it), 8 and 40 (tiny rows, most threads idle), with some rows shifted by +50 (the
max subtraction must keep exp finite): losses and dlogits of fused_classifier; classifier_loss
(validation mode) leaves the logits bit-untouched and gives the same losses bit for bit; repeated
runs are bit-identical. Losses are NaN-poisoned first; every dlogit is compared, so one left unwritten
(still a logit) fails.

Tolerances (fp32 against double): a probability p = exp(x - max) / sum carries __expf's error
(~2^-22 + |x - max| 2^-24) plus the sum's, whose worst case grows with the terms each thread adds in
sequence (V / 512): eps_p = 1e-5 + 6e-8 * V / 512 relative. dlogit: half a bf16 ulp + eps_p * dloss *
(p + onehot). loss = max + log(sum) - x[target]: eps_p + 1e-6 * (|max| + |x[target]|) absolute.
Exit status 1 on any failure. There is one version of the kernel (the one in llmc/).
*/
#include "llmc/fused_classifier.cuh" // the kernel under test
#include "kernel_test.h"     // CPU bf16, comparisons, poison, timing

static void validate(int N, int V) {
    printf("validate N = %d, V = %d\n", N, V);
    const size_t NV = (size_t)N * V;
    std::vector<uint16_t> logits = random_bf16(NV, 0.0f, 2.0f);
    for (int n = 0; n < N; n += 5) // shifted rows: naive exp would overflow at +88
        for (int j = 0; j < V; j++) logits[(size_t)n * V + j] = float_to_bf16(bf16_to_float(logits[(size_t)n * V + j]) + 50.0f);
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = (int)(random_u32(&g_rng) % V);
    const float dloss = 1.0f / 3000.0f;
    floatX *d_logits = (floatX *)to_device(logits);
    int *d_targets = to_device(targets);
    float *d_losses = device_alloc<float>(N), *d_losses2 = device_alloc<float>(N);

    // validation mode first: losses only, logits untouched
    poison(d_losses2, N * 4);
    classifier_loss(d_logits, d_losses2, d_targets, N, V, 0);
    std::vector<uint16_t> after = to_host<uint16_t>(d_logits, NV);
    check_bitwise("classifier_loss leaves logits", logits.data(), after.data(), NV * 2);

    poison(d_losses, N * 4);
    fused_classifier(d_logits, d_losses, d_targets, N, V, dloss, 1, 0);
    std::vector<uint16_t> grad = to_host<uint16_t>(d_logits, NV);
    std::vector<float> losses = to_host<float>(d_losses, N), losses2 = to_host<float>(d_losses2, N);

    const double eps_p = 1e-5 + 6e-8 * V / 512.0;
    Cmp cl = cmp_begin("loss"), cg = cmp_begin("dlogits");
    std::vector<double> e(V);
    for (int n = 0; n < N; n++) {
        const size_t o = (size_t)n * V;
        double m = -INFINITY;
        for (int j = 0; j < V; j++) m = fmax(m, (double)bf16_to_float(logits[o + j]));
        double s = 0;
        for (int j = 0; j < V; j++) s += (e[j] = exp(bf16_to_float(logits[o + j]) - m));
        const double xt = bf16_to_float(logits[o + targets[n]]);
        const double loss = m + log(s) - xt;
        cmp_add(&cl, n, losses[n], loss, eps_p + 1e-6 * (fabs(m) + fabs(xt)));
        for (int j = 0; j < V; j++) {
            const double p = e[j] / s, hot = j == targets[n] ? 1.0 : 0.0, ref = (p - hot) * dloss;
            cmp_add(&cg, o + j, bf16_to_float(grad[o + j]), ref, fabs(ref) / 256 + eps_p * dloss * (p + hot));
        }
    }
    cmp_end(&cl);
    cmp_end(&cg);
    check_bitwise("classifier_loss losses == fused", losses.data(), losses2.data(), N * 4);

    // repeat from the same logits: bit-identical
    upload(d_logits, logits.data(), NV);
    poison(d_losses, N * 4);
    fused_classifier(d_logits, d_losses, d_targets, N, V, dloss, 1, 0);
    std::vector<uint16_t> grad2 = to_host<uint16_t>(d_logits, NV);
    std::vector<float> losses3 = to_host<float>(d_losses, N);
    check_bitwise("deterministic dlogits", grad.data(), grad2.data(), NV * 2);
    check_bitwise("deterministic losses", losses.data(), losses3.data(), N * 4);
    cudaCheck(cudaFree(d_logits)); cudaCheck(cudaFree(d_targets)); cudaCheck(cudaFree(d_losses));
    cudaCheck(cudaFree(d_losses2));
}

static void benchmark(int N, int V) {
    printf("benchmark N = %d, V = %d (bytes: logits read + dlogits written; the loss-only mode reads)\n", N, V);
    const size_t NV = (size_t)N * V;
    floatX *d_logits = device_alloc<floatX>(NV);
    cudaCheck(cudaMemset(d_logits, 0x3c, NV * 2)); // every logit 0.0115: the timing does not depend on values
    std::vector<int> targets(N);
    for (int n = 0; n < N; n++) targets[n] = (int)(random_u32(&g_rng) % V);
    int *d_targets = to_device(targets);
    float *d_losses = device_alloc<float>(N);
    float ms = time_median_ms([&] { fused_classifier(d_logits, d_losses, d_targets, N, V, 1.0f / N, 1, 0); });
    report_bandwidth("fused_classifier (loss + dlogits)", ms, NV * 4.0 + N * 8.0);
    ms = time_median_ms([&] { classifier_loss(d_logits, d_losses, d_targets, N, V, 0); });
    report_bandwidth("classifier_loss (validation)", ms, NV * 2.0 + N * 8.0);
    cudaCheck(cudaFree(d_logits)); cudaCheck(cudaFree(d_targets)); cudaCheck(cudaFree(d_losses));
}

int main(int argc, char **argv) {
    int N = argc > 1 ? atoi(argv[1]) : 8192, V = argc > 2 ? atoi(argv[2]) : 32000;
    dev_setup();
    const int shapes[][2] = {{8192, 32000}, {64, 128256}, {5, 32768}, {3, 32776}, {7, 8}, {33, 40}};
    for (const auto &s : shapes) validate(s[0], s[1]);
    benchmark(N, V);
    benchmark(8192, 128256);
    return finish("classifier");
}
