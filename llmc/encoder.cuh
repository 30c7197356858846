/*
Token embedding: out[i] = wte[tokens[i]] (the Llama has no position embedding; RoPE does that).
  encoder_forward   a gather of 16-byte vectors
  encoder_backward  dwte[v] += sum of dout[i] over the positions i with tokens[i] == v

Why the backward looks like this: a scatter-add with float atomics would add a token's rows in
whatever order the blocks happen to run, so dwte would change in its last bits from run to run and
a resumed run would not reproduce the original. Instead the host, which has the batch's tokens
anyway, groups positions by token (O(N), counting-sort style) into a compact list uploaded once per
call; then one block per distinct token adds that token's rows in increasing position order, in
fp32, and adds the sum to dwte once. Every dwte row is written by one block: no atomics, and the
result is bit-identical from run to run (and independent of the GPU).

The grouping (encoder_backward_group) and the upload plus kernel (encoder_backward_launch) are separate
calls, so that a CUDA graph can replay the launch: the graph's copy reads the pinned host list as it is
when the graph runs, and the kernel has a fixed grid (one block per position, the blocks past the
number of groups return) and reads the number of groups from the list. A list slot per micro-step lets
a step group all its micro-batches before it launches any. An event recorded after the last eager
upload guards the host lists: grouping waits for it (cheaply: the copy finished long ago) before it
overwrites one. A slot's device list is reused by its next upload, which the stream orders after the
kernel that read it; so launch on one stream (or order the streams) between micro-steps.
*/
#ifndef LLMC_ENCODER_CUH
#define LLMC_ENCODER_CUH

#include "cuda_common.cuh" // floatX, fp8 types, Fp8Cast, block_reduce, cudaCheck, FATAL
#include "packed.cuh" // 16-byte bf16 vectors, row_grid, alignment checks

#define ENCODER_THREADS 128
#define ENCODER_BWD_THREADS 256

// ----------------------------------------------------------------------------------------------
// kernels

__global__ void __launch_bounds__(ENCODER_THREADS) encoder_forward_kernel(
    floatX *__restrict__ out, const int *__restrict__ tokens, const floatX *__restrict__ wte, int N, int C) {
    const int vi = blockIdx.x * blockDim.x + threadIdx.x;
    if (vi >= C / 8) return;
    for (int row = blockIdx.y; row < N; row += gridDim.y) {
        const int tok = tokens[row];
        store16(out + (size_t)row * C + (size_t)vi * 8, load16(wte + (size_t)tok * C + (size_t)vi * 8));
    }
}

// list = [G | tokens of the groups (G) | group starts (G + 1) | positions grouped by token (N)].
// Block u < G owns token tokens[u]; each thread owns column vectors and adds the group's rows in order.
__global__ void __launch_bounds__(ENCODER_BWD_THREADS) encoder_backward_kernel(
    floatX *dwte, const floatX *__restrict__ dout, const int *__restrict__ list, int C) {
    const int G = list[0], u = blockIdx.x;
    if (u >= G) return;
    const int *tokens = list + 1, *starts = tokens + G, *pos = starts + G + 1;
    const int tok = tokens[u];
    const int begin = starts[u], end = starts[u + 1];
    for (int vi = threadIdx.x; vi < C / 8; vi += blockDim.x) {
        const size_t col = (size_t)vi * 8;
        float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
        // 4 rows' loads in flight at once; the adds stay in position order
        for (int j = begin; j < end; j += 4) {
            uint4 v[4];
#pragma unroll
            for (int q = 0; q < 4; q++)
                v[q] = j + q < end ? load16(dout + (size_t)pos[j + q] * C + col) : make_uint4(0, 0, 0, 0);
#pragma unroll
            for (int q = 0; q < 4; q++) {
                if (j + q < end) {
                    float f[8];
                    bf16x8_to_float(f, v[q]);
#pragma unroll
                    for (int i = 0; i < 8; i++) acc[i] += f[i];
                }
            }
        }
        floatX *dst = dwte + (size_t)tok * C + col;
        float d[8];
        bf16x8_to_float(d, load16(dst));
#pragma unroll
        for (int i = 0; i < 8; i++) d[i] += acc[i];
        store16(dst, float_to_bf16x8(d));
    }
}

// ----------------------------------------------------------------------------------------------
// launchers and the backward's state

// out (N, C) = wte[tokens] with tokens (N) on the device, each in [0, V).
static void encoder_forward(floatX *out, const int *tokens, const floatX *wte, int N, int C, cudaStream_t stream) {
    const char *who = "encoder_forward";
    if (C <= 0 || C % 8 != 0) FATAL("%s: C = %d must be a positive multiple of 8 (16-byte vectors)", who, C);
    check_aligned(out, 16, "out", who);
    check_aligned(wte, 16, "wte", who);
    if (N <= 0) return;
    dim3 grid = row_grid(C / 8, ENCODER_THREADS, N);
    encoder_forward_kernel<<<grid, ENCODER_THREADS, 0, stream>>>(out, tokens, wte, N, C);
    cudaLaunchCheck();
}

typedef struct {
    int max_N, C, slots;
    size_t list_ints;    // one slot's list: 3 * max_N + 2 ints (G <= N)
    int *count;          // host, count_cap entries, all zero between calls: per token count, then write cursor
    int count_cap;       // grows to the largest token id seen + 1
    int *host_list;      // pinned, slots lists: the layout encoder_backward_kernel reads
    int *device_list;    // the same on the device
    cudaEvent_t uploaded; // recorded after each eager upload
} EncoderBackward;

static void encoder_backward_alloc(EncoderBackward *eb, int slots) {
    size_t bytes = (size_t)slots * eb->list_ints * sizeof(int);
    cudaCheck(cudaMallocHost((void **)&eb->host_list, bytes));
    eb->device_list = (int *)cudaMallocCheck(bytes, "encoder backward token groups");
    eb->slots = slots;
}

// Once, for batches of up to max_N tokens of width C; one list slot (encoder_backward_reserve adds more).
static void encoder_backward_init(EncoderBackward *eb, int max_N, int C) {
    if (max_N <= 0) FATAL("encoder_backward_init: max_N = %d must be positive", max_N);
    if (C <= 0 || C % 8 != 0) FATAL("encoder_backward_init: C = %d must be a positive multiple of 8", C);
    memset(eb, 0, sizeof(*eb));
    eb->max_N = max_N;
    eb->C = C;
    eb->list_ints = 3 * (size_t)max_N + 2;
    encoder_backward_alloc(eb, 1);
    cudaCheck(cudaEventCreateWithFlags(&eb->uploaded, cudaEventDisableTiming));
}

static void encoder_backward_free_lists(EncoderBackward *eb) {
    cudaCheck(cudaEventSynchronize(eb->uploaded));
    cudaCheck(cudaFreeHost(eb->host_list));
    cudaCheck(cudaFree(eb->device_list));
}

// At least `slots` list slots (one per micro-step of a step). Growing reallocates the lists, so call it
// when no launch is in flight and before a CUDA graph is captured.
static void encoder_backward_reserve(EncoderBackward *eb, int slots) {
    if (slots <= eb->slots) return;
    cudaCheck(cudaDeviceSynchronize());
    encoder_backward_free_lists(eb);
    encoder_backward_alloc(eb, slots);
}

static void encoder_backward_free(EncoderBackward *eb) {
    encoder_backward_free_lists(eb);
    cudaCheck(cudaEventDestroy(eb->uploaded));
    free(eb->count);
    memset(eb, 0, sizeof(*eb));
}

// Groups tokens_host (N, on the HOST: the micro-batch's inputs) by token into list slot `slot`.
static void encoder_backward_group(EncoderBackward *eb, int slot, const int *tokens_host, int N) {
    const char *who = "encoder_backward_group";
    if (N > eb->max_N) FATAL("%s: N = %d exceeds the max_N = %d given to encoder_backward_init", who, N, eb->max_N);
    if (slot < 0 || slot >= eb->slots) FATAL("%s: slot %d of %d", who, slot, eb->slots);
    int max_tok = -1;
    for (int i = 0; i < N; i++) {
        int t = tokens_host[i];
        if (t < 0) FATAL("%s: token %d at position %d is negative", who, t, i);
        if (t > max_tok) max_tok = t;
    }
    if (max_tok >= (1 << 24)) FATAL("%s: token id %d is beyond any vocabulary (corrupt data?)", who, max_tok);
    if (max_tok >= eb->count_cap) { // the count table is zero between calls, so growing keeps it so
        free(eb->count);
        eb->count_cap = max_tok + 1;
        eb->count = (int *)callocCheck((size_t)eb->count_cap, sizeof(int));
    }
    cudaCheck(cudaEventSynchronize(eb->uploaded)); // the last upload has read the host lists

    // groups in order of first appearance; within a group, positions ascending
    int *list = eb->host_list + (size_t)slot * eb->list_ints, *count = eb->count;
    int *tokens = list + 1, G = 0;
    for (int i = 0; i < N; i++) {
        int t = tokens_host[i];
        if (count[t]++ == 0) tokens[G++] = t;
    }
    list[0] = G;
    int *starts = tokens + G, *pos = starts + G + 1;
    int run = 0;
    for (int u = 0; u < G; u++) {
        int t = tokens[u];
        starts[u] = run;
        run += count[t];
        count[t] = starts[u]; // from here on: the write cursor of token t
    }
    starts[G] = run;
    for (int i = 0; i < N; i++) pos[count[tokens_host[i]]++] = i;
    for (int u = 0; u < G; u++) count[tokens[u]] = 0;
}

// dwte (V, C) += the scatter of dout (N, C) by the N tokens grouped into slot `slot`.
static void encoder_backward_launch(EncoderBackward *eb, int slot, floatX *dwte, const floatX *dout, int N, int C,
                                    cudaStream_t stream) {
    const char *who = "encoder_backward_launch";
    if (N > eb->max_N) FATAL("%s: N = %d exceeds the max_N = %d given to encoder_backward_init", who, N, eb->max_N);
    if (C != eb->C) FATAL("%s: C = %d differs from the C = %d given to encoder_backward_init", who, C, eb->C);
    if (slot < 0 || slot >= eb->slots) FATAL("%s: slot %d of %d", who, slot, eb->slots);
    check_aligned(dwte, 16, "dwte", who);
    check_aligned(dout, 16, "dout", who);
    if (N <= 0) return;
    size_t off = (size_t)slot * eb->list_ints;
    cudaCheck(cudaMemcpyAsync(eb->device_list + off, eb->host_list + off, (3 * (size_t)N + 2) * sizeof(int),
                              cudaMemcpyHostToDevice, stream));
    cudaStreamCaptureStatus capture;
    cudaCheck(cudaStreamIsCapturing(stream, &capture));
    if (capture == cudaStreamCaptureStatusNone) cudaCheck(cudaEventRecord(eb->uploaded, stream));
    encoder_backward_kernel<<<N, ENCODER_BWD_THREADS, 0, stream>>>(dwte, dout, eb->device_list + off, C);
    cudaLaunchCheck();
}

// Both at once, in slot 0.
static void encoder_backward(EncoderBackward *eb, floatX *dwte, const floatX *dout, const int *tokens_host, int N,
                             int C, cudaStream_t stream) {
    encoder_backward_group(eb, 0, tokens_host, N);
    encoder_backward_launch(eb, 0, dwte, dout, N, C, stream);
}

#endif
