/*
A model's fp8 scaling state on the GPU, and the protocol its casts follow (docs/fp8_recipe.md):
  Fp8State           the state buffer (llmc/fp8_layout.h: amax slots, histories, scales, scale_invs),
                     the 16-byte-aligned scale_inv copies cuBLASLt reads, the live amax, and the fp8
                     health counts of the step being cast and of the last finished one
  Fp8Pass            a pass's fp8 mode, handed to every cast (no field of the state says it): whether
                     the casts record amaxes and counts (training) or not (evaluation), and whether
                     they scale live (from their own amax) or with the delayed scale
  fp8_site, fp8_site_t, fp8_site_finish
                     a producer kernel's fp8 copy: the site fills the Fp8Cast the kernel takes (delayed:
                     the kernel casts and records the amax in the same pass; live: it writes bf16 and the
                     amax, and the finish sets the scale and casts); a site left open stops the run at
                     the next site, GEMM or update
  fp8_cast_existing  the fp8 copy of a bf16 tensor that exists already (the attention output, a weight)
  fp8_site_block, fp8_block_cast_existing
                     the same for a linear of block grain (-fp8_grain block, -fp8_fallback block): the
                     producer writes bf16, the finish casts it in 1x128 blocks (llmc/fp8_block.cuh),
                     row-wise and transposed, each block scaled from its own amax; fp8_site_grain, the
                     same with a recipe's own cast (llmc/recipe_row.cuh's per row)
  fp8_forget_cast    a weight cast of this step forgotten (its counts, its amax), for one made again
  fp8_end_step       once per optimizer step, after its last backward: every amax slot MAX-reduced and
                     every health count summed over the ranks, every history rolled and every scale
                     updated, the step's counts made the last step's
With several GPUs every scale is the same on all ranks: delayed ones come from the reduced histories,
live ones from amaxes MAX-reduced on the spot. With one GPU no collective is made.
*/
#ifndef LLMC_FP8_STATE_CUH
#define LLMC_FP8_STATE_CUH

#include <string.h>
#include "cuda_common.cuh" // floatX, Fp8Cast, cudaCheck, cudaMallocCheck, FATAL
#include "fp8_layout.h"    // Fp8StateLayout, FP8_KINDS, FP8_DY
#include "fp8.h"           // fp8_state_init, fp8_kind_format, fp8_format_max, FP8_COUNTS
#include "fp8_scaling.cuh" // fp8_cast, fp8_cast_transpose, amax_abs_max, fp8_scale_from_live_amax, fp8_update_scales
#include "fp8_block.cuh"   // fp8_block_cast: the casts of block-scaled linears
#include "multi_gpu.cuh"   // MultiGpu: the reductions over the ranks

typedef struct {
    Fp8StateLayout layout;
    float *buffer;              // (layout.total) the state buffer; NULL in bf16 mode, where every site is inert
    float *gemm_scale_inv;      // (NT, FP8_GEMM_SCALE_STRIDE) aligned copies of scale_inv for cuBLASLt
    float *live_amax;           // (1) amax of the cast being scaled live, before it joins its slot
    unsigned long long *counts; // (2, NT, FP8_COUNTS) fp8 health (llmc/fp8.h): [0] what this step's casts
                                // lost so far, [1] the last finished step's (fp8_end_step moves it)
    floatX *live_bf16;          // the caller's bf16 staging buffer for a live cast whose producer's bf16
                                // copy nobody keeps (B*T values of the widest tensor)
    int margin;                 // -fp8_margin
    MultiGpu *mg;               // the ranks the live amaxes and the end of a step reduce over
    int open_site;              // 1 + the tensor whose producer site is open (fp8_site .. fp8_site_finish); 0: none
} Fp8State;

typedef struct {
    int recording; // the casts record their amax into the tensor's slot and count their health (training)
    int live;      // the casts measure their amax first and scale from it
} Fp8Pass;

// The device bytes fp8_state_create takes for a layout: the state, the live amax, the health counts
// (two sets) and the GEMMs' scale_invs.
static size_t fp8_state_bytes(Fp8StateLayout lay) {
    size_t nt = (size_t)lay.num_tensors;
    return lay.total * sizeof(float) + sizeof(float) + 2 * (size_t)FP8_COUNTS * nt * sizeof(unsigned long long) +
           nt * FP8_GEMM_SCALE_STRIDE * sizeof(float);
}

// The state of the layout's tensors in device memory as llmc/fp8.h's fp8_state_init leaves it (no
// amax yet, every scale and scale_inv 1), no live amax and no counts; live_bf16 is set by the caller.
// Returns the bytes it took (fp8_state_bytes).
static size_t fp8_state_create(Fp8State *f, Fp8StateLayout lay, int margin, MultiGpu *mg) {
    memset(f, 0, sizeof(*f));
    f->layout = lay;
    f->margin = margin;
    f->mg = mg;
    size_t nt = (size_t)lay.num_tensors, state_bytes = lay.total * sizeof(float);
    size_t counts_bytes = 2 * (size_t)FP8_COUNTS * nt * sizeof(unsigned long long), gemm_bytes = nt * FP8_GEMM_SCALE_STRIDE * sizeof(float);
    f->buffer = (float *)cudaMallocCheck(state_bytes, "fp8 scaling state");
    float *h = (float *)mallocCheck(state_bytes);
    fp8_state_init(h, lay);
    cudaCheck(cudaMemcpy(f->buffer, h, state_bytes, cudaMemcpyHostToDevice));
    free(h);
    f->live_amax = (float *)cudaMallocCheck(sizeof(float), "fp8 live amax");
    cudaCheck(cudaMemset(f->live_amax, 0, sizeof(float)));
    f->counts = (unsigned long long *)cudaMallocCheck(counts_bytes, "fp8 health counts");
    cudaCheck(cudaMemset(f->counts, 0, counts_bytes));
    f->gemm_scale_inv = (float *)cudaMallocCheck(gemm_bytes, "fp8 GEMM scales");
    float *ones = (float *)mallocCheck(gemm_bytes);
    for (size_t i = 0; i < nt * FP8_GEMM_SCALE_STRIDE; i++) ones[i] = 1.0f; // scale_inv starts at 1
    cudaCheck(cudaMemcpy(f->gemm_scale_inv, ones, gemm_bytes, cudaMemcpyHostToDevice));
    free(ones);
    return fp8_state_bytes(lay);
}

// The caller's bf16 staging buffer for live casts whose producer's bf16 copy nobody keeps (live_bf16).
static void fp8_state_stage(Fp8State *f, floatX *live_bf16) { f->live_bf16 = live_bf16; }

// After the state buffer was loaded (a checkpoint): the GEMMs' scale_inv copies made from it, on the
// default stream, before any step.
static void fp8_state_loaded(Fp8State *f) {
    fp8_publish_scale_inv(f->gemm_scale_inv, f->buffer + f->layout.scale_inv, f->layout.num_tensors, 0);
}

static void fp8_state_free(Fp8State *f) {
    if (f->buffer) {
        cudaCheck(cudaFree(f->buffer));
        cudaCheck(cudaFree(f->live_amax));
        cudaCheck(cudaFree(f->counts));
        cudaCheck(cudaFree(f->gemm_scale_inv));
    }
    memset(f, 0, sizeof(*f));
}

static float *fp8_amax(const Fp8State *f, int t) { return f->buffer + f->layout.amax_slot + t; }
static float *fp8_scale(const Fp8State *f, int t) { return f->buffer + f->layout.scale + t; }
static float *fp8_scale_inv(const Fp8State *f, int t) { return f->buffer + f->layout.scale_inv + t; }
static float *fp8_gemm_scale_inv(const Fp8State *f, int t) { return f->gemm_scale_inv + (size_t)FP8_GEMM_SCALE_STRIDE * t; }
// Tensor t's health counters of the step being cast.
static unsigned long long *fp8_counts(const Fp8State *f, int t) { return f->counts + (size_t)FP8_COUNTS * t; }
// The same for a cast of pass p: NULL when it records nothing (evaluation).
static unsigned long long *fp8_pass_counts(const Fp8State *f, Fp8Pass p, int t) { return p.recording ? fp8_counts(f, t) : NULL; }
// The health counts of the last finished step (fp8_end_step made them so), every tensor's.
static unsigned long long *fp8_last_counts(const Fp8State *f) {
    return f->counts + (size_t)FP8_COUNTS * f->layout.num_tensors;
}
static int fp8_format_of(int t) { return fp8_kind_format(t % FP8_KINDS); }
static float fp8_max_of(int t) { return fp8_format_max(fp8_kind_format(t % FP8_KINDS)); }

// A producer kernel about to write tensor t. Delayed scaling: the kernel writes the fp8 copy itself
// (cast.out) and records the amax in the same pass. Live scaling: the kernel writes bf16 (to `bf16`,
// or to the staging buffer when the caller needs no bf16 copy) and the amax; fp8_site_finish then
// derives the scale and casts. In bf16 mode, or for no fp8 tensor (t < 0), the site is inert and the
// kernel just writes `bf16`. A site left open (its fp8_site_finish forgotten: live scaling would never
// cast) stops the run at the next site, GEMM or update, in the first step of any fp8 run.
// A site made by fp8_site_t also writes the fp8 copy transposed (out_t, cols x rows), for a wgrad:
// with delayed scaling the producer kernel does (cast_t), with live scaling fp8_site_finish's cast.
// A site made by fp8_site_grain (fp8_site_block) casts in the finish with the recipe's cast `grain_cast`
// (block: the codes' scale_invs sinv, sinv_t).
typedef void (*Fp8GrainCast)(const Fp8State *f, Fp8Pass p, int t, void *out, float *sinv, void *out_t, float *sinv_t,
                             const floatX *in, int rows, int cols, cudaStream_t stream);
typedef struct Fp8Site {
    Fp8Cast cast; void *cast_t; floatX *bf16; int t, live, recording; void *out, *out_t; size_t n; int rows, cols;
    Fp8GrainCast grain_cast; float *sinv, *sinv_t;
} Fp8Site;

static void fp8_no_open_site(const Fp8State *f, const char *where) {
    if (f->open_site) FATAL("%s: the producer site of fp8 tensor %d was opened (fp8_site) but never finished (fp8_site_finish)",
                            where, f->open_site - 1);
}

static Fp8Site fp8_site(Fp8State *f, Fp8Pass p, int t, void *out, floatX *bf16, size_t n) {
    fp8_no_open_site(f, "fp8_site");
    Fp8Site s;
    memset(&s, 0, sizeof(s));
    s.bf16 = bf16; s.t = t; s.out = out; s.n = n; s.recording = p.recording;
    if (f->buffer == NULL || t < 0) return s; // inert: the kernel just writes bf16
    f->open_site = t + 1;
    s.live = p.live;
    s.cast.amax = s.live ? f->live_amax : p.recording ? fp8_amax(f, t) : NULL;
    s.cast.scale = fp8_scale(f, t);
    if (s.live) { if (s.bf16 == NULL) s.bf16 = f->live_bf16; }
    else { s.cast.out = out; s.cast.counts = fp8_pass_counts(f, p, t); }
    return s;
}

// The same for a (rows, cols) tensor whose fp8 copy also goes transposed to out_t (NULL: a plain
// fp8_site), out (the row-major copy) then optional. Live, the finish casts with fp8_cast_transpose:
// the same codes and counts as fp8_cast's, and the transpose is that of the row-major codes.
static Fp8Site fp8_site_t(Fp8State *f, Fp8Pass p, int t, void *out, void *out_t, floatX *bf16, int rows, int cols) {
    Fp8Site s = fp8_site(f, p, t, out, bf16, (size_t)rows * cols);
    s.out_t = out_t; s.rows = rows; s.cols = cols;
    if (f->buffer != NULL && t >= 0 && !s.live) s.cast_t = out_t;
    return s;
}

// Live scaling of tensor t from f->live_amax, the amax of this cast alone: MAX-reduced over the ranks
// first, so every rank casts with the same scale from the very first step.
static void fp8_live_scale(Fp8State *f, int recording, int t, cudaStream_t stream) {
    if (f->mg->world > 1) {
        mg_allreduce_amax(f->mg, f->live_amax, 1, stream);
        mg_join(f->mg, stream);
    }
    // a pass that records no amax: the live one joins no slot, and is cleared here instead
    fp8_scale_from_live_amax(fp8_scale(f, t), fp8_scale_inv(f, t), fp8_gemm_scale_inv(f, t), f->live_amax,
                             recording ? fp8_amax(f, t) : NULL, fp8_max_of(t), f->margin, stream);
    if (!recording) cudaCheck(cudaMemsetAsync(f->live_amax, 0, sizeof(float), stream));
}

// A producer of tensor t (rows, cols) of a linear whose recipe scales from the values being cast (current
// scaling: no live amax, no delayed scale): the kernel writes bf16 only (to `bf16`, or the staging
// buffer), and fp8_site_finish casts it with grain_cast: row-wise to out with its scale_invs sinv and,
// with out_t, transposed to out_t with sinv_t (either may be NULL, not both), recording the tensor's
// amax and counting every cast made when the pass records.
static Fp8Site fp8_site_grain(Fp8State *f, Fp8Pass p, int t, Fp8GrainCast grain_cast, void *out, float *sinv,
                              void *out_t, float *sinv_t, floatX *bf16, int rows, int cols) {
    Fp8Site s = fp8_site(f, p, t, NULL, bf16 ? bf16 : f->live_bf16, (size_t)rows * cols);
    memset(&s.cast, 0, sizeof(s.cast));
    s.live = 0;
    s.grain_cast = grain_cast;
    s.out = out; s.out_t = out_t; s.sinv = sinv; s.sinv_t = sinv_t; s.rows = rows; s.cols = cols;
    return s;
}

// The block casts of a bf16 tensor that exists already (the attention output, the dlogits, a recast
// X^T), as fp8_site_block's finish makes them.
static void fp8_block_cast_existing(const Fp8State *f, Fp8Pass p, int t, void *out, float *sinv, void *out_t, float *sinv_t,
                                    const floatX *in, int rows, int cols, cudaStream_t stream) {
    fp8_block_cast(out, sinv, out_t, sinv_t, fp8_format_of(t), in, rows, cols, p.recording ? fp8_amax(f, t) : NULL,
                   fp8_pass_counts(f, p, t), stream);
}

// fp8_site_grain of a block-scaled linear: one scale per 1x128 block from that block's own amax.
static Fp8Site fp8_site_block(Fp8State *f, Fp8Pass p, int t, void *out, float *sinv, void *out_t, float *sinv_t,
                              floatX *bf16, int rows, int cols) {
    return fp8_site_grain(f, p, t, fp8_block_cast_existing, out, sinv, out_t, sinv_t, bf16, rows, cols);
}

static void fp8_site_finish(Fp8State *f, const Fp8Site *s, cudaStream_t stream) {
    f->open_site = 0;
    if (s->grain_cast) {
        Fp8Pass p = {s->recording, 0};
        s->grain_cast(f, p, s->t, s->out, s->sinv, s->out_t, s->sinv_t, s->bf16, s->rows, s->cols, stream);
        return;
    }
    if (!s->live) return;
    fp8_live_scale(f, s->recording, s->t, stream);
    unsigned long long *counts = s->recording ? fp8_counts(f, s->t) : NULL;
    if (s->out_t != NULL)
        fp8_cast_transpose(s->out, s->out_t, fp8_format_of(s->t), s->bf16, s->rows, s->cols, NULL, counts, fp8_scale(f, s->t), stream);
    else fp8_cast(s->out, fp8_format_of(s->t), s->bf16, s->n, NULL, counts, fp8_scale(f, s->t), stream);
}

// fp8 copy (n values into out) of a bf16 tensor that already exists, as tensor t (fp8 mode only).
static void fp8_cast_existing(Fp8State *f, Fp8Pass p, int t, void *out, const floatX *in, size_t n, cudaStream_t stream) {
    if (p.live) {
        amax_abs_max(f->live_amax, in, n, stream);
        fp8_live_scale(f, p.recording, t, stream);
        fp8_cast(out, fp8_format_of(t), in, n, NULL, fp8_pass_counts(f, p, t), fp8_scale(f, t), stream);
    } else {
        fp8_cast(out, fp8_format_of(t), in, n, p.recording ? fp8_amax(f, t) : NULL, fp8_pass_counts(f, p, t), fp8_scale(f, t), stream);
    }
}

// Tensor t's cast of this step forgotten: its counts, and with clear_amax its amax slot (a weight cast
// made again in another grain, or by none).
static void fp8_forget_cast(const Fp8State *f, int t, int clear_amax, cudaStream_t stream) {
    cudaCheck(cudaMemsetAsync(fp8_counts(f, t), 0, FP8_COUNTS * sizeof(unsigned long long), stream));
    if (clear_amax) cudaCheck(cudaMemsetAsync(fp8_amax(f, t), 0, sizeof(float), stream));
}

// The end of an optimizer step, after its last backward (docs/fp8_recipe.md "The end of an optimizer
// step", 1-3): one MAX all-reduce of every amax slot, so every rank rolls the same histories into the
// same scales, and in the same NCCL group the SUM of the health counts; they queue behind the
// gradient buckets, and the join makes the stream wait for all of them. Then one kernel rolls every
// history and sets every scale, and the step's counts become the last step's (so the weights cast
// next count toward the next step).
static void fp8_end_step(Fp8State *f, cudaStream_t stream) {
    MultiGpu *mg = f->mg;
    size_t nt = (size_t)f->layout.num_tensors;
    mg_group_start(mg);
    mg_allreduce_amax(mg, f->buffer + f->layout.amax_slot, nt, stream);
    mg_allreduce_sum_u64(mg, f->counts, FP8_COUNTS * nt, stream);
    mg_group_end(mg);
    mg_join(mg, stream);
    fp8_update_scales(f->buffer, f->gemm_scale_inv, f->layout, f->margin, stream);
    size_t bytes = FP8_COUNTS * nt * sizeof(unsigned long long);
    cudaCheck(cudaMemcpyAsync(f->counts + FP8_COUNTS * nt, f->counts, bytes, cudaMemcpyDeviceToDevice, stream));
    cudaCheck(cudaMemsetAsync(f->counts, 0, bytes, stream));
}

#endif
