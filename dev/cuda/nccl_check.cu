/*
Self-test of llmc/multi_gpu.cuh: the launch, every collective the trainer uses, the ZeRO-1 shard
arithmetic, and the failure handling. Each rank checks its own results against a host computation
and every check's outcome is summed over the ranks; rank 0 prints it.

Checks (all exact unless said otherwise; inputs are small integers or raw bit patterns, which bf16
sums represent exactly, so any rounding in NCCL would show):
  all-reduce bf16 sum      n = 1000003 (odd), per-rank different values
  all-reduce bf16 mean     exact for a power-of-two world; otherwise within 2^-7 relative (NCCL may
                           scale by a rounded 1/world)
  reduce-scatter bf16      the trainer's gradient reduce on its own ZeRO-1 layout of the tiny model
                           (llmc/zero_layout.h): per bucket, out of place into this rank's shard
  all-gather bf16          per bucket, in place, every element's bits (the ZeRO-1 parameter gather)
  all-gather bytes         333331 bytes per rank (odd), not in place
  amax max (fp32 slots)    1203 slots, ranks hold different values: zeros, equal values, per-rank
                           maxima, denormals, inf, and a NaN on one rank, which must reach all ranks
  fp32 sum                 a host float (mg_allreduce_sum_float) and a device array
  agreement, barrier       mg_all_agree on equal and on differing values; three barriers
  ordering                 a collective given the compute stream sees data a slow kernel wrote just
                           before it; after mg_join the compute stream sees the result
  overlap                  a collective finishes while a long kernel still runs on the compute stream
  (the layout itself is checked on the host for worlds 1-8 by dev/test/test_zero_layout)
Then (multi-rank, unless --no-bench) a bandwidth line per collective on 256 MiB of bf16.

Failure modes (multi-rank):
  --kill-rank R   rank R exits (status 3) at iteration 10 of an all-reduce loop; the job must end
                  non-zero within 60 s. With -ngpu the launcher prints how long after the failure
                  every rank had ended; under mpirun, time the command.
  --hang-rank R   rank R stops calling NCCL (sleeps); the others must hit the timeout (--timeout S,
                  default 10 s here, else LLAMA_FP8_NCCL_TIMEOUT_S), abort and exit non-zero.

Build (from dev/cuda):
  nvcc -O3 -arch=sm_90 -DENABLE_NCCL -I../.. nccl_check.cu -lnccl -o nccl_check
  with MPI add: -DENABLE_MPI $(mpicc --showme:compile) $(mpicc --showme:link)   (Open MPI)
  Without -DENABLE_NCCL it builds the single-GPU version (what `make -C dev/cuda` makes); -ngpu 2
  then fails with a message saying the build has no NCCL.
Run:
  ./nccl_check -ngpu 2               or   mpirun -np 2 ./nccl_check
  ./nccl_check -ngpu 2 --kill-rank 1;  echo "exit $?"     (must print a non-zero exit)
  ./nccl_check -ngpu 2 --hang-rank 1;  echo "exit $?"
The last line is "nccl_check: ALL PASS" or "nccl_check: N FAILED"; exit status 0 / 1.
*/
#include "llmc/llama_config.h" // param_sizes, presets: the tiny model's tensors
#include "llmc/zero_layout.h"  // the trainer's ZeRO-1 layout the collectives run on
#include "llmc/multi_gpu.cuh"  // the module under test
#include "bench_common.h"      // bf16 and fp32 bits, device buffers, median

static int g_failures = 0; // checks that failed on any rank (every rank counts the same)

static uint32_t hash32(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}

// One check: ok is this rank's verdict, detail its explanation when not ok. Every rank must call it
// in the same order (it is a collective).
static void report(MultiGpu *mg, const char *what, bool ok, const char *detail) {
    if (!ok) fprintf(stderr, "rank %d: %s: %s\n", mg->rank, what, detail);
    int bad = (int)mg_allreduce_sum_float(mg, ok ? 0.0f : 1.0f);
    if (mg_is_main(mg)) {
        if (bad == 0) printf("PASS  %s\n", what);
        else printf("FAIL  %s (on %d of %d ranks)\n", what, bad, mg->world);
        fflush(stdout);
    }
    if (bad) g_failures++;
}

// bench_common.h's to_host, waited for by mg_wait: a collective that never finishes ends the run at
// the timeout instead of hanging the copy.
template <typename T> static std::vector<T> to_host(MultiGpu *mg, const T *d, size_t n, cudaStream_t stream) {
    std::vector<T> h(n);
    cudaCheck(cudaMemcpyAsync(h.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
    mg_wait(mg, stream, "a test copy");
    return h;
}

// The GPU's nanosecond clock: __nanosleep's durations are only approximate, so waits are timed by it.
__device__ __forceinline__ unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
__device__ void wait_ns(long long ns) {
    unsigned long long t0 = global_ns();
    while ((long long)(global_ns() - t0) < ns) __nanosleep(1000);
}
// Waits `ns` nanoseconds, then fills buf with v: a slow producer.
__global__ void slow_fill_kernel(floatX *buf, size_t n, float v, long long ns) {
    if (threadIdx.x == 0) wait_ns(ns); // every block waits, so no element is written early
    __syncthreads();
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) buf[i] = __float2bfloat16(v);
}
// One block waits `ns` nanoseconds: occupies the compute stream, not the GPU.
__global__ void sleep_kernel(long long ns) { wait_ns(ns); }
__global__ void copy_kernel(floatX *out, const floatX *in, size_t n) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) out[i] = in[i];
}

// ----------------------------------------------------------------------------------------------

static void check_allreduce(MultiGpu *mg, cudaStream_t stream) {
    const size_t n = 1000003;
    int W = mg->world, R = mg->rank;
    char detail[256] = "";
    // sum
    std::vector<uint16_t> h(n), expect(n);
    for (size_t i = 0; i < n; i++) {
        h[i] = float_to_bf16((float)((int)((i * 7 + R * 3) % 11) - 5));
        int s = 0;
        for (int r = 0; r < W; r++) s += (int)((i * 7 + r * 3) % 11) - 5;
        expect[i] = float_to_bf16((float)s);
    }
    floatX *d = (floatX *)to_device(h);
    mg_allreduce_bf16(mg, d, n, MG_SUM, stream);
    mg_join(mg, stream);
    std::vector<uint16_t> got = to_host(mg, (uint16_t *)d, n, stream);
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < n; i++) if (got[i] != expect[i] && bad++ == 0) first = i;
    if (bad) snprintf(detail, sizeof(detail), "%zu wrong, first at %zu: %g, want %g", bad, first, bf16_to_float(got[first]), bf16_to_float(expect[first]));
    report(mg, "all-reduce bf16 sum, n = 1000003", bad == 0, detail);

    // mean: rank r holds k*W + 2r - (W-1), so the mean is k*W exactly
    std::vector<float> want(n);
    for (size_t i = 0; i < n; i++) {
        int k = (int)(i % 9) - 4;
        h[i] = float_to_bf16((float)(k * W + 2 * R - (W - 1)));
        want[i] = (float)(k * W);
    }
    upload(d, h.data(), n);
    mg_allreduce_bf16(mg, d, n, MG_AVG, stream);
    mg_join(mg, stream);
    got = to_host(mg, (uint16_t *)d, n, stream);
    bool pow2 = (W & (W - 1)) == 0;
    bad = 0;
    for (size_t i = 0; i < n; i++) {
        float g = bf16_to_float(got[i]);
        bool ok = pow2 ? g == want[i] : fabsf(g - want[i]) <= fabsf(want[i]) * (1.0f / 128.0f);
        if (!ok && bad++ == 0) first = i;
    }
    detail[0] = '\0';
    if (bad) snprintf(detail, sizeof(detail), "%zu wrong, first at %zu: %g, want %g", bad, first, bf16_to_float(got[first]), want[first]);
    report(mg, pow2 ? "all-reduce bf16 mean (exact: world is a power of two)" : "all-reduce bf16 mean (within 2^-7)", bad == 0, detail);
    cudaCheck(cudaFree(d));
}

// The trainer's ZeRO-1 collectives on the trainer's own layout (llmc/zero_layout.h) of the tiny
// model: one reduce-scatter per bucket, out of place into this rank's shard (the gradient reduce),
// then one in-place all-gather per bucket of each rank's part (the parameter gather), each in one group.
static void check_reducescatter_allgather(MultiGpu *mg, cudaStream_t stream) {
    LlamaConfig tiny;
    config_from_preset("tiny", &tiny);
    size_t sizes[NUM_PARAM_TENSORS], n = param_sizes(&tiny, sizes);
    int W = mg->world, R = mg->rank;
    ZeroLayout z = zero_layout(&tiny, sizes, R, W);
    size_t padded = z.padded;
    char detail[256] = "", what[200];

    // gradients: small integers that differ per rank (bf16 sums of them are exact); the padding is 0
    std::vector<uint16_t> h(padded, 0);
    for (size_t i = 0; i < n; i++) h[i] = float_to_bf16((float)((int)((i * 5 + R) % 13) - 6));
    floatX *d = (floatX *)to_device(h);
    floatX *shard = device_alloc<floatX>(z.shard > 0 ? z.shard : 1);
    mg_group_start(mg);
    for (int k = 0; k < z.num_buckets; k++)
        mg_reducescatter_bf16(mg, d + z.buckets[k].start, shard + z.buckets[k].shard, z.buckets[k].count / W, MG_SUM, stream);
    mg_group_end(mg);
    mg_join(mg, stream);
    std::vector<uint16_t> got = to_host(mg, (uint16_t *)shard, z.shard, stream);
    size_t bad = 0, first = 0, checked = 0;
    float want_first = 0, got_first = 0;
    for (int k = 0; k < z.num_buckets; k++) {
        const GradBucket &b = z.buckets[k];
        size_t part = b.count / W;
        for (size_t j = 0; j < part; j++, checked++) {
            size_t i = b.start + (size_t)R * part + j;
            int sum = 0;
            if (i < n) for (int r = 0; r < W; r++) sum += (int)((i * 5 + r) % 13) - 6;
            if (got[b.shard + j] != float_to_bf16((float)sum) && bad++ == 0) {
                first = i; want_first = (float)sum; got_first = bf16_to_float(got[b.shard + j]);
            }
        }
    }
    if (bad) snprintf(detail, sizeof(detail), "%zu wrong, first at flat %zu: %g, want %g", bad, first, got_first, want_first);
    snprintf(what, sizeof(what), "reduce-scatter bf16 per bucket into the shard: tiny model, %d buckets, %zu of %zu padded elements here",
             z.num_buckets, checked, padded);
    report(mg, what, bad == 0 && (W == 1 || checked == z.shard), detail);

    // parameters: each rank's parts hold finite bit patterns of their flat indices, the rest NaN
    auto pattern = [](size_t i) { return (uint16_t)(hash32(i) & 0xBFFFu); }; // bit 14 clear: finite
    std::vector<uint16_t> p(padded, (uint16_t)0xFFFF);
    for (int k = 0; k < z.num_buckets; k++) {
        size_t part = z.buckets[k].count / W, start = z.buckets[k].start + (size_t)R * part;
        for (size_t j = 0; j < part; j++) p[start + j] = pattern(start + j);
    }
    upload(d, p.data(), padded);
    mg_group_start(mg);
    for (int k = 0; k < z.num_buckets; k++) {
        size_t part = z.buckets[k].count / W;
        mg_allgather_bf16(mg, d + z.buckets[k].start + (size_t)R * part, d + z.buckets[k].start, part, stream);
    }
    mg_group_end(mg);
    mg_join(mg, stream);
    got = to_host(mg, (uint16_t *)d, padded, stream);
    bad = 0;
    for (size_t i = 0; i < padded && W > 1; i++) if (got[i] != pattern(i) && bad++ == 0) first = i;
    detail[0] = '\0';
    if (bad) snprintf(detail, sizeof(detail), "%zu wrong, first at %zu: 0x%04x, want 0x%04x", bad, first, got[first], pattern(first));
    report(mg, "all-gather bf16 per bucket, in place (the ZeRO-1 parameters)", bad == 0, detail);
    if (mg_is_main(mg) && W > 1) {
        printf("      tiny model: %zu params padded to %zu in %d buckets; rank 0's shard of %zu =", n, padded, z.num_buckets, z.shard);
        for (int k = 0; k < z.num_pieces && k < 8; k++) printf(" %s[%zu..+%zu]", PARAM_NAMES[z.pieces[k].tensor], z.pieces[k].offset, z.pieces[k].count);
        printf("%s\n", z.num_pieces > 8 ? " ..." : "");
    }
    zero_layout_free(&z);
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(shard));

    // all-gather of raw bytes, not in place, an odd count per rank
    const size_t nb = 333331;
    std::vector<uint8_t> hb(nb);
    for (size_t j = 0; j < nb; j++) hb[j] = (uint8_t)(j * 31 + R * 101 + 7);
    uint8_t *send = to_device(hb);
    uint8_t *recv = device_alloc<uint8_t>(nb * W);
    cudaCheck(cudaMemset(recv, 0xAA, nb * W));
    mg_allgather_bytes(mg, send, recv, nb, stream);
    mg_join(mg, stream);
    std::vector<uint8_t> gb = to_host(mg, recv, nb * W, stream);
    bad = 0;
    for (int r = 0; r < W; r++)
        for (size_t j = 0; j < nb; j++) if (gb[r * nb + j] != (uint8_t)(j * 31 + r * 101 + 7) && bad++ == 0) first = r * nb + j;
    detail[0] = '\0';
    if (bad) snprintf(detail, sizeof(detail), "%zu wrong bytes, first at %zu", bad, first);
    report(mg, "all-gather bytes, 333331 per rank, not in place", bad == 0, detail);
    cudaCheck(cudaFree(send));
    cudaCheck(cudaFree(recv));
}

// What rank r holds in amax slot i; every case of the failure modes at the end of docs/fp8_recipe.md
// "Choices, and where they come from" that a reduction could get wrong.
static float amax_input(size_t i, int r, int W) {
    switch (i % 8) {
    case 0: return 0.0f;                                       // a tensor that saw only zeros
    case 1: return 1.5f;                                       // equal on every rank
    case 2: return 0.25f * (float)(r + 1) * (float)(i + 1);    // the last rank has the max
    case 3: return r == (int)(i / 8) % W ? 3.0e-30f * (float)(i + 1) : 0.0f; // one rank nonzero, tiny
    case 4: return r == W - 1 ? 1.0e-40f : 0.0f;               // a denormal
    case 5: return r == W - 1 ? INFINITY : 100.0f;             // an overflow on one rank
    case 6: return r == 0 ? float_from_bits(0x7FC00000u) : 2.0f; // a NaN on one rank must win
    default: return (float)(hash32(i * 131 + r) % 100000) * 0.01f; // per-rank random, up to 1000
    }
}

static void check_amax(MultiGpu *mg, cudaStream_t stream) {
    const size_t nt = 1203; // 3 tensors x 401 linears: odd
    int W = mg->world, R = mg->rank;
    std::vector<float> h(nt);
    for (size_t i = 0; i < nt; i++) h[i] = amax_input(i, R, W);
    float *d = to_device(h);
    mg_allreduce_amax(mg, d, nt, stream);
    mg_join(mg, stream);
    std::vector<float> got = to_host(mg, d, nt, stream);
    size_t bad = 0, first = 0;
    uint32_t want_first = 0;
    for (size_t i = 0; i < nt; i++) {
        uint32_t want = 0;
        for (int r = 0; r < W; r++) want = std::max(want, float_bits(amax_input(i, r, W)));
        if (float_bits(got[i]) != want && bad++ == 0) { first = i; want_first = want; }
    }
    char detail[256] = "";
    if (bad) snprintf(detail, sizeof(detail), "%zu slots wrong, first %zu: bits 0x%08x, want 0x%08x", bad, first, float_bits(got[first]), want_first);
    report(mg, "amax max over 1203 fp32 slots (zeros, denormals, inf, NaN on one rank)", bad == 0, detail);
    cudaCheck(cudaFree(d));
}

static void check_sums(MultiGpu *mg, cudaStream_t stream) {
    int W = mg->world, R = mg->rank;
    float s = mg_allreduce_sum_float(mg, 0.25f * (float)(R + 1));
    float want = 0.125f * (float)(W * (W + 1));
    char detail[256] = "";
    if (s != want) snprintf(detail, sizeof(detail), "got %g, want %g", s, want);
    report(mg, "sum of a host float across ranks", s == want, detail);

    const size_t n = 1001;
    std::vector<float> h(n);
    for (size_t i = 0; i < n; i++) h[i] = 0.5f * (float)(i % 17) + (float)R;
    float *d = to_device(h);
    mg_allreduce_sum_f32(mg, d, n, stream);
    mg_join(mg, stream);
    std::vector<float> got = to_host(mg, d, n, stream);
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) if (got[i] != 0.5f * (float)(i % 17) * W + 0.5f * (float)(W * (W - 1))) bad++;
    detail[0] = '\0';
    if (bad) snprintf(detail, sizeof(detail), "%zu of %zu wrong", bad, n);
    report(mg, "sum of a device fp32 array, n = 1001", bad == 0, detail);
    cudaCheck(cudaFree(d));
}

static void check_agree_barrier(MultiGpu *mg) {
    long long lo, hi;
    int same = mg_all_agree(mg, 42, &lo, &hi);
    char detail[256] = "";
    if (!(same && lo == 42 && hi == 42)) snprintf(detail, sizeof(detail), "agree %d, range [%lld, %lld]", same, lo, hi);
    report(mg, "agreement on equal values", same && lo == 42 && hi == 42, detail);
    int differ = mg_all_agree(mg, mg->rank, &lo, &hi);
    bool ok = differ == (mg->world == 1) && lo == 0 && hi == mg->world - 1;
    detail[0] = '\0';
    if (!ok) snprintf(detail, sizeof(detail), "agree %d, range [%lld, %lld]", differ, lo, hi);
    report(mg, "disagreement on the rank number is seen, with its range", ok, detail);
    for (int i = 0; i < 3; i++) mg_barrier(mg, 0);
    report(mg, "three barriers", true, "");
}

static void check_ordering(MultiGpu *mg, cudaStream_t stream) {
    const size_t n = (size_t)1 << 20;
    int W = mg->world, R = mg->rank;
    floatX *d = device_alloc<floatX>(n);
    floatX *out = device_alloc<floatX>(n);
    cudaCheck(cudaMemsetAsync(d, 0, n * sizeof(floatX), stream));
    slow_fill_kernel<<<256, 256, 0, stream>>>(d, n, (float)(R + 1), 20 * 1000 * 1000); // 20 ms, then writes
    cudaLaunchCheck();
    mg_allreduce_bf16(mg, d, n, MG_SUM, stream);
    mg_join(mg, stream);
    copy_kernel<<<256, 256, 0, stream>>>(out, d, n);
    cudaLaunchCheck();
    std::vector<uint16_t> got = to_host(mg, (uint16_t *)out, n, stream);
    uint16_t want = float_to_bf16(0.5f * (float)(W * (W + 1)));
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += got[i] != want;
    char detail[256] = "";
    if (bad) snprintf(detail, sizeof(detail), "%zu of %zu wrong (first %g, want %g)", bad, n, bf16_to_float(got[0]), bf16_to_float(want));
    report(mg, "collective after a slow producer on the compute stream; consumer after mg_join", bad == 0, detail);

    // overlap: the all-reduce of data already produced finishes while a 500 ms kernel holds the compute stream
    cudaEvent_t comm_done, compute_done;
    cudaCheck(cudaEventCreateWithFlags(&comm_done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&compute_done, cudaEventDisableTiming));
    mg_barrier(mg, 0); // both ranks start together, so the peer's half of the collective is not late
    mg_allreduce_bf16(mg, d, n, MG_SUM, stream);
    sleep_kernel<<<1, 32, 0, stream>>>(500LL * 1000 * 1000);
    cudaLaunchCheck();
    cudaCheck(cudaEventRecord(compute_done, stream));
    cudaCheck(cudaEventRecord(comm_done, mg->comm_stream));
    double t0 = monotonic_seconds();
    while (cudaEventQuery(comm_done) == cudaErrorNotReady && monotonic_seconds() - t0 < 5.0) usleep(100);
    bool comm_finished = cudaEventQuery(comm_done) == cudaSuccess;
    bool compute_running = cudaEventQuery(compute_done) == cudaErrorNotReady;
    mg_wait(mg, stream, "the sleep kernel");
    detail[0] = '\0';
    bool ok = mg->world == 1 || (comm_finished && compute_running);
    if (!ok) snprintf(detail, sizeof(detail), "collective finished: %d, compute kernel still running then: %d", comm_finished, compute_running);
    report(mg, "a collective completes while the compute stream is busy (overlap)", ok, detail);
    cudaCheck(cudaEventDestroy(comm_done));
    cudaCheck(cudaEventDestroy(compute_done));
    cudaCheck(cudaFree(d));
    cudaCheck(cudaFree(out));
}

static void bench(MultiGpu *mg, cudaStream_t stream) {
    const size_t n = (size_t)128 << 20; // 256 MiB of bf16
    int W = mg->world;
    floatX *d = (floatX *)cudaMallocCheck(n * sizeof(floatX), "benchmark buffer");
    cudaCheck(cudaMemsetAsync(d, 0, n * sizeof(floatX), stream));
    cudaEvent_t a, b;
    cudaCheck(cudaEventCreate(&a));
    cudaCheck(cudaEventCreate(&b));
    const char *names[] = {"all-reduce", "reduce-scatter", "all-gather"};
    for (int op = 0; op < 3; op++) {
        std::vector<float> ms;
        for (int it = 0; it < 12; it++) {
            mg_barrier(mg, 0);
            cudaCheck(cudaEventRecord(a, mg->comm_stream));
            size_t shard = n / W;
            if (op == 0) mg_allreduce_bf16(mg, d, n, MG_SUM, mg->comm_stream);
            else if (op == 1) mg_reducescatter_bf16(mg, d, d + mg->rank * shard, shard, MG_SUM, mg->comm_stream);
            else mg_allgather_bf16(mg, d + mg->rank * shard, d, shard, mg->comm_stream);
            cudaCheck(cudaEventRecord(b, mg->comm_stream));
            mg_wait(mg, mg->comm_stream, "the benchmark");
            float t;
            cudaCheck(cudaEventElapsedTime(&t, a, b));
            if (it >= 2) ms.push_back(t);
        }
        float t = median(ms);
        double bytes = (double)n * sizeof(floatX);
        double algbw = bytes / (t * 1e-3) / 1e9;
        // bus bandwidth (nccl-tests' definition): what each link carries
        double busbw = algbw * (op == 0 ? 2.0 * (W - 1) / W : (double)(W - 1) / W);
        if (mg_is_main(mg)) printf("bench %-15s 256 MiB bf16: %7.3f ms | algbw %6.1f GB/s | busbw %6.1f GB/s\n", names[op], t, algbw, busbw);
    }
    cudaCheck(cudaEventDestroy(a));
    cudaCheck(cudaEventDestroy(b));
    cudaCheck(cudaFree(d));
}

// --kill-rank / --hang-rank: an all-reduce loop that one rank leaves mid-run.
static void failure_run(MultiGpu *mg, cudaStream_t stream, int kill_rank, int hang_rank, double t_start) {
    const size_t n = (size_t)1 << 20;
    floatX *d = device_alloc<floatX>(n);
    cudaCheck(cudaMemsetAsync(d, 0, n * sizeof(floatX), stream));
    if (mg_is_main(mg)) {
        printf("failure test: rank %d will %s at iteration 10 of 200 all-reduces (timeout %.0f s)\n",
               kill_rank >= 0 ? kill_rank : hang_rank, kill_rank >= 0 ? "exit with status 3" : "stop calling NCCL", mg->timeout_s);
        fflush(stdout);
    }
    for (int it = 0; it < 200; it++) {
        if (it == 10 && mg->rank == kill_rank) {
            printf("rank %d: exiting with status 3 at t = %.2f s (--kill-rank)\n", mg->rank, monotonic_seconds() - t_start);
            fflush(stdout);
            _exit(3);
        }
        if (it == 10 && mg->rank == hang_rank) {
            printf("rank %d: hanging at t = %.2f s (--hang-rank)\n", mg->rank, monotonic_seconds() - t_start);
            fflush(stdout);
            for (;;) pause();
        }
        mg_allreduce_bf16(mg, d, n, MG_SUM, stream);
        mg_join(mg, stream);
        mg_wait(mg, stream, "an all-reduce of the failure test");
        usleep(50000);
    }
    fprintf(stderr, "rank %d: the failure test ran all 200 iterations: the failure was not detected\n", mg->rank);
    exit(EXIT_FAILURE);
}

int main(int argc, char **argv) {
    double t_start = monotonic_seconds();
    int ngpu = 0, kill_rank = -1, hang_rank = -1, do_bench = 1;
    double timeout = 0.0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        int has_val = i + 1 < argc;
        if (strcmp(a, "-ngpu") == 0 && has_val) ngpu = atoi(argv[++i]);
        else if (strcmp(a, "--kill-rank") == 0 && has_val) kill_rank = atoi(argv[++i]);
        else if (strcmp(a, "--hang-rank") == 0 && has_val) hang_rank = atoi(argv[++i]);
        else if (strcmp(a, "--timeout") == 0 && has_val) timeout = atof(argv[++i]);
        else if (strcmp(a, "--no-bench") == 0) do_bench = 0;
        else {
            fprintf(stderr, "usage: %s [-ngpu N] [--kill-rank R | --hang-rank R] [--timeout S] [--no-bench]\n"
                            "       (or under mpirun without -ngpu); see the header of dev/cuda/nccl_check.cu\n", argv[0]);
            return EXIT_FAILURE;
        }
    }
    MultiGpu mg;
    multi_gpu_init(&mg, argv, ngpu);
    if ((kill_rank >= 0 || hang_rank >= 0) && (mg.world < 2 || kill_rank >= mg.world || hang_rank >= mg.world))
        FATAL("--kill-rank / --hang-rank need a rank in [1, world) of a multi-rank run (world is %d)", mg.world);
    if (timeout > 0) mg.timeout_s = timeout;
    else if (hang_rank >= 0 && getenv("LLAMA_FP8_NCCL_TIMEOUT_S") == NULL) mg.timeout_s = 10.0;

    int nccl_version = 0;
#ifdef ENABLE_NCCL
    ncclGetVersion(&nccl_version);
#endif
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, mg.local_device));
    if (mg_is_main(&mg)) {
        printf("nccl_check | %d rank%s (%s) | rank 0 on GPU %d, %s | NCCL %d | timeout %.0f s | NCCL_NVLS_ENABLE=%s\n", mg.world,
               mg.world == 1 ? "" : "s", MG_LAUNCH_NAMES[mg.launch], mg.local_device, prop.name, nccl_version, mg.timeout_s,
               getenv("NCCL_NVLS_ENABLE") ? getenv("NCCL_NVLS_ENABLE") : "(unset)");
        fflush(stdout);
    }
    cudaStream_t stream;
    cudaCheck(cudaStreamCreate(&stream));

    if (kill_rank >= 0 || hang_rank >= 0) failure_run(&mg, stream, kill_rank, hang_rank, t_start); // does not return

    check_allreduce(&mg, stream);
    check_reducescatter_allgather(&mg, stream);
    check_amax(&mg, stream);
    check_sums(&mg, stream);
    check_agree_barrier(&mg);
    check_ordering(&mg, stream);
    if (do_bench && mg.world > 1) bench(&mg, stream);

    cudaCheck(cudaStreamDestroy(stream));
    int failures = g_failures;
    multi_gpu_free(&mg);
    if (mg_is_main(&mg)) {
        if (failures == 0) printf("nccl_check: ALL PASS\n");
        else printf("nccl_check: %d FAILED\n", failures);
    }
    return failures == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
