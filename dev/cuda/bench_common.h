/*
What every dev/cuda program shares, whatever form its checks take: the host's view of bf16 and fp32
bits, device buffers, a fill kernel for timing inputs, CUDA-event timers that report the median of
many runs, the bandwidth line against the H200's copy bandwidth, and the GPU's clock and power
(nvidia-smi's) after a timing, and the energy per call from NVML's counter. kernel_test.h adds the
validation conventions (random inputs, NaN poisoning, comparisons, PASS/FAIL counting) on top of it;
attention and nccl_check print their own verdicts and include only this file.
*/
#ifndef DEV_CUDA_BENCH_COMMON_H
#define DEV_CUDA_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <math.h>
#include <vector>
#include <algorithm>
#include <dlfcn.h>
#include "llmc/cuda_common.cuh"

#define H200_COPY_GBPS 4170.0 // measured device-to-device copy bandwidth, the roofline for these kernels

// ----------------------------------------------------------------------------------------------
// CPU bf16 and fp32 bits

static float bf16_to_float(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint16_t float_to_bf16(float f) { // round to nearest even
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fc0; // NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
// Exact checks compare bit patterns (a NaN matches itself, -0 differs from 0); special inputs such
// as subnormals are made from them.
static uint32_t float_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}
static float float_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ----------------------------------------------------------------------------------------------
// device buffers

// 16 spare bytes: a zero-length buffer is still a real allocation.
template <typename T>
static T *device_alloc(size_t n) { return (T *)cudaMallocCheck(n * sizeof(T) + 16, "test buffer"); }
// n elements to / from a device pointer, which may point into a buffer (an offset, a slice).
template <typename T>
static void upload(void *d, const T *h, size_t n) { cudaCheck(cudaMemcpy(d, h, n * sizeof(T), cudaMemcpyHostToDevice)); }
template <typename T>
static void download(T *h, const void *d, size_t n) { cudaCheck(cudaMemcpy(h, d, n * sizeof(T), cudaMemcpyDeviceToHost)); }
template <typename T>
static T *to_device(const std::vector<T> &h) {
    T *d = device_alloc<T>(h.size());
    upload(d, h.data(), h.size());
    return d;
}
template <typename T>
static std::vector<T> to_host(const void *d, size_t n) {
    std::vector<T> h(n);
    cudaCheck(cudaDeviceSynchronize());
    download(h.data(), d, n);
    return h;
}
static void set_float(float *d, float v) { upload(d, &v, 1); }
static float get_float(const float *d) {
    float v;
    download(&v, d, 1);
    return v;
}

// ----------------------------------------------------------------------------------------------
// timing inputs, made on the GPU (they are gigabytes; their values only have to be realistic)

__device__ __forceinline__ uint32_t index_hash(size_t i, uint32_t seed) {
    uint32_t h = (uint32_t)i * 2654435761u ^ seed;
    h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12;
    return h;
}
template <typename T>
__global__ void fill_uniform_kernel(T *p, size_t n, uint32_t seed, float bound) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        p[i] = (T)(((float)(index_hash(i, seed) & 0xffff) / 32768.0f - 1.0f) * bound);
    }
}
// p[i] uniform in [-bound, bound), a function of i and seed.
template <typename T>
static void fill_uniform(T *p, size_t n, uint32_t seed, float bound) {
    fill_uniform_kernel<<<1024, 256>>>(p, n, seed, bound);
    cudaLaunchCheck();
}

// ----------------------------------------------------------------------------------------------
// setup and timing

// Also sets g_num_sms, by which llmc's launchers size their grids.
static cudaDeviceProp device_properties(void) {
    int dev = 0;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    g_num_sms = prop.multiProcessorCount;
    return prop;
}
static void dev_setup(void) {
    cudaDeviceProp prop = device_properties();
    printf("device: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1048576.0);
}

// The GPU's SM clock, power and clock-limit reasons at this moment, as nvidia-smi reads them.
static void print_gpu_state(const char *when) {
    FILE *p = popen("nvidia-smi --query-gpu=clocks.sm,power.draw,power.limit,clocks_event_reasons.active"
                    " --format=csv,noheader 2>/dev/null", "r");
    char line[256] = "";
    if (p == NULL || fgets(line, sizeof(line), p) == NULL) snprintf(line, sizeof(line), "nvidia-smi did not answer\n");
    if (p != NULL) pclose(p);
    printf("GPU after %s: SM clock, power, power limit, clock event reasons: %s", when, line);
}

// Element n/2 of the sorted times: the time of one real run, unmoved by a few slow outliers.
static float median(std::vector<float> ms) {
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
}

// Median over reps runs of f(), after warmup untimed runs. Each run is timed alone: the host waits
// for its stop event before the next run, so a time can include the gap until f's first launch
// reaches the idle GPU.
template <typename F>
static float time_median_ms(F f, int reps = 25, int warmup = 5) {
    for (int i = 0; i < warmup; i++) f();
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; i++) {
        cudaCheck(cudaEventRecord(start));
        f();
        cudaCheck(cudaEventRecord(stop));
        cudaCheck(cudaEventSynchronize(stop));
        cudaCheck(cudaEventElapsedTime(&ms[i], start, stop));
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return median(ms);
}

// The same median with the runs queued back to back (each between its own pair of events, the host
// waiting only after the last), so launch gaps do not stretch short runs. f(i) gets the run's index
// (the warm-ups count 0, 1, ..., then the timed runs again from 0): to rotate between input copies
// that L2 cannot hold together, or to number optimizer steps.
template <typename F>
static float time_median_ms_queued(F f, int reps = 25, int warmup = 5) {
    for (int i = 0; i < warmup; i++) f(i);
    std::vector<cudaEvent_t> ev(2 * reps);
    for (auto &e : ev) cudaCheck(cudaEventCreate(&e));
    for (int i = 0; i < reps; i++) {
        cudaCheck(cudaEventRecord(ev[2 * i], 0));
        f(i);
        cudaCheck(cudaEventRecord(ev[2 * i + 1], 0));
    }
    cudaCheck(cudaEventSynchronize(ev.back()));
    std::vector<float> ms(reps);
    for (int i = 0; i < reps; i++) cudaCheck(cudaEventElapsedTime(&ms[i], ev[2 * i], ev[2 * i + 1]));
    for (auto &e : ev) cudaCheck(cudaEventDestroy(e));
    return median(ms);
}

// ----------------------------------------------------------------------------------------------
// energy: NVML's counter of the GPU's total energy (mJ since the driver loaded; it moves every 20-100
// ms), opened with dlopen so that no program needs NVML to build or to run. Under the power cap a
// kernel's time in the trainer follows from its energy, not from its speed on a cool GPU, so the
// energy per call is what decides between two kernels there (dev/results/bench_defaults_h200_1206).

typedef struct {
    void *dev;                                           // nvmlDevice_t of the current CUDA device
    int (*total_energy)(void *dev, unsigned long long *mj); // nvmlDeviceGetTotalEnergyConsumption
} GpuEnergy;

// 1 with e ready, else 0 (no NVML, or it cannot read this GPU's energy) with the reason printed.
static int gpu_energy_open(GpuEnergy *e) {
    void *lib = dlopen("libnvidia-ml.so.1", RTLD_NOW);
    int (*init)(void) = lib ? (int (*)(void))dlsym(lib, "nvmlInit_v2") : NULL;
    int (*by_bus)(const char *, void **) = lib ? (int (*)(const char *, void **))dlsym(lib, "nvmlDeviceGetHandleByPciBusId_v2") : NULL;
    e->total_energy = lib ? (int (*)(void *, unsigned long long *))dlsym(lib, "nvmlDeviceGetTotalEnergyConsumption") : NULL;
    if (!init || !by_bus || !e->total_energy || init() != 0) {
        printf("energy: NVML not available (%s): energy not measured\n", lib ? "a symbol is missing or nvmlInit failed" : dlerror());
        return 0;
    }
    int cuda_dev = 0;
    char bus[32];
    cudaCheck(cudaGetDevice(&cuda_dev));
    cudaCheck(cudaDeviceGetPCIBusId(bus, sizeof(bus), cuda_dev));
    unsigned long long mj = 0;
    if (by_bus(bus, &e->dev) != 0 || e->total_energy(e->dev, &mj) != 0) {
        printf("energy: NVML cannot read the energy of the GPU at %s: energy not measured\n", bus);
        return 0;
    }
    return 1;
}

typedef struct { float ms; double mj, watts; int calls; } EnergyPerCall;

// f run back to back for at least `seconds` (long enough for the clock to settle where the power cap
// holds it), after as long again of the same work untimed so that the counter's lag covers busy time at
// both ends: the mean ms and mJ per call and the mean power. mj < 0 without NVML.
template <typename F>
static EnergyPerCall energy_per_call(const GpuEnergy *e, F f, double seconds) {
    EnergyPerCall r = {0.0f, -1.0, -1.0, 0};
    const float one = time_median_ms(f, 5, 2);
    const int batch = std::max(1, (int)(20.0 / std::max(one, 1e-3f))); // ~20 ms between host checks
    cudaEvent_t start, stop;
    cudaCheck(cudaEventCreate(&start));
    cudaCheck(cudaEventCreate(&stop));
    unsigned long long e0 = 0, e1 = 0;
    for (int phase = 0; phase < 2; phase++) { // 0: the untimed lead-in, 1: measured
        if (phase == 1) {
            if (e) e->total_energy(e->dev, &e0);
            cudaCheck(cudaEventRecord(start));
        }
        const double t0 = monotonic_seconds();
        int calls = 0;
        do {
            for (int i = 0; i < batch; i++) f();
            calls += batch;
            cudaCheck(cudaDeviceSynchronize());
        } while (monotonic_seconds() - t0 < seconds);
        if (phase == 1) {
            cudaCheck(cudaEventRecord(stop));
            cudaCheck(cudaEventSynchronize(stop));
            if (e) e->total_energy(e->dev, &e1);
            cudaCheck(cudaEventElapsedTime(&r.ms, start, stop));
            r.ms /= calls;
            r.calls = calls;
            if (e) {
                r.mj = (double)(e1 - e0) / calls;
                r.watts = r.mj / r.ms;
            }
        }
    }
    cudaCheck(cudaEventDestroy(start));
    cudaCheck(cudaEventDestroy(stop));
    return r;
}

static void report_bandwidth(const char *name, float ms, double bytes) {
    double gbps = bytes / (ms * 1e-3) / 1e9;
    printf("  %-44s %9.2f us %8.1f GB/s  %5.1f%% of %.0f GB/s\n", name, ms * 1e3, gbps, 100.0 * gbps / H200_COPY_GBPS,
           H200_COPY_GBPS);
}

#endif
