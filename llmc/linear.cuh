/*
The model's linears (issue 42): every block linear (qkv, wo, w13, w2 of each layer) and the lm_head,
each a Linear running the recipe of its grain (llmc/recipe.cuh's contract), and what they share.
  Linears          all of them, the shared scratch, each fp8 linear's grain and steps over the fallback's
                   threshold (contiguous arrays: the checkpoint's sections), the fallback's bookkeeping
  RECIPES          the one table of recipes, indexed by grain
  linears_init / linears_memory_plan / linears_free, linears_use_scratch, linears_start
  linear_set_grain, linears_resumed         a linear leaves per-tensor scaling; a resumed run's grains
  linear_x_site, linear_x_existing, linear_dy_site, linear_dy_existing, linear_forward, linear_backward,
  linear_recompute_x                        the passes, dispatched to the linear's recipe
  linears_cast_weights, linears_regrain, linears_adamw_cast   the E4M3 weights of the next step
  linears_counts_to_host, linears_fallback_step, linear_values_cast   the fallback (llmc/fp8_fallback.h)
A linear is named by its layer l and its kind lin (LIN_*, or LIN_LM_HEAD of layer 0). Nothing here
knows the model: the trainer hands in its parameters, gradients, fp8 state and scratch.
*/
#ifndef LLMC_LINEAR_CUH
#define LLMC_LINEAR_CUH

#include "recipe.cuh"        // Linear, LinearShared, LinearOptions, Recipe
#include "recipe_tensor.cuh" // RECIPE_TENSOR
#include "recipe_block.cuh"  // RECIPE_BLOCK, block_scratch_floats, block_scratch_carve
#include "recipe_bf16.cuh"   // RECIPE_BF16
#include "recipe_row.cuh"    // RECIPE_ROW
#include "adamw.cuh"         // AdamWSlice: AdamW's fused E4M3 weight cast
#include "fp8_fallback.h"    // Fp8Switch, fp8_fallback_rule, fp8_values_cast, fp8_grain_allowed

// The recipe of each grain (FP8_GRAIN_*, the checkpoint's byte).
static const Recipe *const RECIPES[FP8_GRAINS] = {&RECIPE_TENSOR, &RECIPE_BLOCK, &RECIPE_BF16, &RECIPE_ROW};

enum { LINEARS_ALLOCATIONS = 8 };

typedef struct {
    LlamaConfig cfg;
    LinearShared sh;
    Linear *all;               // (4L + 1, host) by fp8_linear's index: every layer's four, then the lm_head
    int count;                 // the fp8 linears among them (fp8_num_linears; 0 in bf16 mode)
    unsigned char *grain;      // (count, host) FP8_GRAIN_* of each fp8 linear; checkpointed
    int *over_steps;           // (count, host) steps in a row over the fallback's threshold; checkpointed
    int grain_changes;         // grains changed so far: a captured step graph is captured again after one
    unsigned long long *counts_host; // (pinned, with the fallback) the last step's health counts, read with the norm
    Fp8Switch *switched;       // (count, host) the linears the last update switched (num_switched of them)
    int num_switched;
    size_t *bytes_allocated;   // the owner's count of device bytes, which every allocation here adds to
    void *allocations[LINEARS_ALLOCATIONS]; // the device buffers above, for linears_free (a linear's own: in it)
    int num_allocations;
} Linears;

static Linear *linear_of(const Linears *L, int l, int lin) { return &L->all[fp8_linear(&L->cfg, l, lin)]; }

// The fp8 grain of linear (l, lin), an fp8 linear's (FP8_GRAIN_TENSOR in bf16 mode, where none has one).
static int linear_grain(const Linears *L, int l, int lin) {
    return L->grain ? L->grain[fp8_linear(&L->cfg, l, lin)] : FP8_GRAIN_TENSOR;
}

// What a step of grad_accum micro-steps cast besides each linear's own casts (llmc/fp8_fallback.h).
static Fp8StepCasts linears_step_casts(const Linears *L, int grad_accum) {
    Fp8StepCasts s = {L->sh.o.N, grad_accum, L->sh.o.world, L->sh.o.w_cache};
    return s;
}

// The values tensor `kind` of fp8 linear (l, lin) had cast in a step of grad_accum micro-steps, over every rank.
static double linear_values_cast(const Linears *L, int l, int lin, int kind, int grad_accum) {
    return fp8_values_cast(&L->cfg, lin, kind, RECIPES[linear_grain(L, l, lin)]->casts,
                           linears_step_casts(L, grad_accum));
}

static void *linears_alloc(Linears *L, size_t bytes, const char *what) {
    if (L->num_allocations == LINEARS_ALLOCATIONS) FATAL("linears_alloc: too many buffers");
    *L->bytes_allocated += bytes;
    return L->allocations[L->num_allocations++] = cudaMallocCheck(bytes, what);
}

// Linear (l, lin)'s shape and fp8 tensors (no views: the memory plan's too).
static Linear linear_shape(const LlamaConfig *c, const LinearOptions *o, int l, int lin) {
    Linear x;
    memset(&x, 0, sizeof(x));
    int fp8 = o->fp8 && (lin != LIN_LM_HEAD || o->lm_head);
    x.l = l; x.lin = lin; x.IN = linear_in(c, lin); x.OUT = linear_out(c, lin);
    x.t_x = fp8 ? fp8_tensor(c, l, lin, FP8_X) : -1;
    x.t_w = fp8 ? fp8_tensor(c, l, lin, FP8_W) : -1;
    x.t_dy = fp8 ? fp8_tensor(c, l, lin, FP8_DY) : -1;
    x.keeps_x = lin != LIN_WO && !(lin == LIN_W2 && o->recompute >= 1);
    x.recipe = fp8 ? RECIPES[FP8_GRAIN_TENSOR] : &RECIPE_BF16;
    return x;
}

// The bytes of each part of the own buffers linear x needs under recipe r; returns their total in one
// allocation, every part 256-byte aligned.
static size_t linear_buffer_bytes(const Recipe *r, const Linear *x, const LinearOptions *o,
                                  size_t bytes[LINEAR_PARTS]) {
    size_t total = 0;
    for (int k = 0; k < LINEAR_PARTS; k++) bytes[k] = 0;
    if (r->buffer_bytes) r->buffer_bytes(x, o, bytes);
    for (int k = 0; k < LINEAR_PARTS; k++) total += CEIL_DIV(bytes[k], 256) * 256;
    return total;
}

// The device memory linears_init allocates for this config and these options (without a GPU), and
// that of every linear of -fp8_grain's grain from step 0 (linears_start). Not in it: the buffers of
// linears the fallback switches later (linear_buffer_bytes each).
static size_t linears_memory_plan(const LlamaConfig *c, const LinearOptions *o) {
    size_t b = 0, widest_w = 0, L = c->L, scratch[5], bytes[LINEAR_PARTS];
    if (!o->fp8) return 0;
    for (int lin = 0; lin < LINS_PER_LAYER + o->lm_head; lin++) {
        size_t n = (size_t)linear_in(c, lin) * linear_out(c, lin);
        if (!o->w_by_adamw && o->w_cache) b += (lin == LIN_LM_HEAD ? 1 : L) * n;
        if (n > widest_w) widest_w = n;
    }
    b += (o->w_cache ? 0 : widest_w) + widest_w; // without the cache one layer's W; W^T
    if (fp8_grain_allowed(o->grain, o->fallback, FP8_GRAIN_BLOCK))
        b += block_scratch_floats(c, o->N, o->lm_head, scratch) * sizeof(float);
    for (int l = 0; o->grain != FP8_GRAIN_TENSOR && l < c->L; l++) {
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0 ? o->lm_head : 0); lin++) {
            Linear x = linear_shape(c, o, l, lin);
            b += linear_buffer_bytes(RECIPES[o->grain], &x, o, bytes);
        }
    }
    return b;
}

// The linears of config c under options o, on the model's bf16 parameters (param[], params_memory) and
// gradients (grad[]; a tied lm_head's param and grad already wte's), fp32 master and fp8 state fs
// (fp8 mode; its live_bf16 is the linears' staging buffer). fp8 mode allocates the E4M3 weights (the
// cache, or one layer's), W^T and, where a linear may be block-scaled, the block scratch, adding them
// to *bytes_allocated. Every linear starts per-tensor (fp8) or bf16; the activations' fp8 scratch
// comes later (linears_use_scratch).
static void linears_init(Linears *L, const LlamaConfig *c, const LinearOptions *o, Fp8State *fs, floatX *const param[],
                         floatX *const grad[], const floatX *params_memory, const float *master,
                         size_t *bytes_allocated) {
    memset(L, 0, sizeof(*L));
    L->cfg = *c;
    L->sh.o = *o;
    L->sh.fs = fs;
    L->sh.master = master;
    L->bytes_allocated = bytes_allocated;
    fp8e4 *w_fp8[LINS_PER_LAYER + 1] = {NULL};
    if (o->fp8) {
        // w_by_adamw: the first half of the linears' bf16 parameters holds the E4M3 copy. Several
        // GPUs all-gather bf16 parameters and cast after the gather.
        size_t widest_w = 0;
        for (int lin = 0; lin < LINS_PER_LAYER + o->lm_head; lin++) {
            size_t n = (size_t)linear_in(c, lin) * linear_out(c, lin);
            if (o->w_by_adamw) w_fp8[lin] = (fp8e4 *)param[LINEAR_PARAM[lin]];
            else if (o->w_cache)
                w_fp8[lin] = (fp8e4 *)linears_alloc(L, (lin == LIN_LM_HEAD ? 1 : c->L) * n, "fp8 weights");
            if (n > widest_w) widest_w = n;
        }
        if (!o->w_cache) {
            fp8e4 *layer_w = (fp8e4 *)linears_alloc(L, widest_w, "fp8 weight (one layer)");
            for (int lin = 0; lin < LINS_PER_LAYER + o->lm_head; lin++) w_fp8[lin] = layer_w;
        }
        L->sh.w_fp8_t = (fp8e4 *)linears_alloc(L, widest_w, "fp8 transposed weight (one layer)");
        L->count = fp8_num_linears(c, o->lm_head);
        L->grain = (unsigned char *)callocCheck(L->count, 1);
        L->over_steps = (int *)callocCheck(L->count, sizeof(int));
        L->switched = (Fp8Switch *)callocCheck(L->count, sizeof(Fp8Switch));
        if (o->fallback) {
            size_t nc = (size_t)FP8_COUNTS * fp8_num_tensors(c, o->lm_head);
            cudaCheck(cudaMallocHost(&L->counts_host, nc * sizeof(unsigned long long)));
        }
        if (fp8_grain_allowed(o->grain, o->fallback, FP8_GRAIN_BLOCK)) { // one linear's block scale_invs at a time
            size_t n[5], total = block_scratch_floats(c, o->N, o->lm_head, n);
            L->sh.block =
                block_scratch_carve((float *)linears_alloc(L, total * sizeof(float), "scratch: fp8 block scales"), n);
        }
    }
    L->all = (Linear *)callocCheck((size_t)LINS_PER_LAYER * c->L + 1, sizeof(Linear));
    for (int l = 0; l < c->L; l++) {
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0); lin++) {
            Linear *x = linear_of(L, l, lin);
            size_t wn = (size_t)linear_in(c, lin) * linear_out(c, lin);
            *x = linear_shape(c, o, l, lin);
            x->w = param[LINEAR_PARAM[lin]] + l * wn;
            x->dw = grad[LINEAR_PARAM[lin]] + l * wn;
            x->w_at = x->w - params_memory;
            x->w_fp8 = w_fp8[lin] ? w_fp8[lin] + (o->w_cache ? l * wn : 0) : NULL;
        }
    }
}

// The activations' fp8 scratch the linears share (llmc/recipe.cuh's LinearShared), once allocated.
static void linears_use_scratch(Linears *L, fp8e4 *x_fp8, fp8e4 *x_fp8_t, fp8e5 *dy_fp8, fp8e5 *dy_fp8_t) {
    L->sh.x_fp8 = x_fp8; L->sh.x_fp8_t = x_fp8_t;
    L->sh.dy_fp8 = dy_fp8; L->sh.dy_fp8_t = dy_fp8_t;
}

static void linears_free(Linears *L) {
    for (int i = 0; i < L->num_allocations; i++) cudaCheck(cudaFree(L->allocations[i]));
    for (int i = 0; L->all && i < L->count; i++)
        if (L->all[i].own.memory) cudaCheck(cudaFree(L->all[i].own.memory));
    if (L->counts_host) cudaCheck(cudaFreeHost(L->counts_host));
    free(L->all); free(L->grain); free(L->over_steps); free(L->switched);
    memset(L, 0, sizeof(*L));
}

// The own buffers x needs under `grain`, in one allocation.
static void linear_buffers_make(Linears *L, Linear *x, int grain) {
    size_t bytes[LINEAR_PARTS], total = linear_buffer_bytes(RECIPES[grain], x, &L->sh.o, bytes);
    if (total == 0) return; // a bf16 wo whose bf16 X and W are there anyway
    x->own.memory = cudaMallocCheck(total, "fp8 block scales / bf16 copies of a linear off per-tensor scaling");
    char *at = (char *)x->own.memory;
    *L->bytes_allocated += total;
    for (int k = 0; k < LINEAR_PARTS; k++) {
        x->own.part[k] = bytes[k] ? at : NULL;
        at += CEIL_DIV(bytes[k], 256) * 256;
    }
}

// Linear (l, lin) leaves per-tensor scaling for `grain` from the next pass on, for good (only between
// optimizer steps): the buffers that grain needs are made, and the step graph is captured again
// (grain_changes). Its per-tensor state (slots, histories, scales) carries on, so the logs read it as
// before.
static void linear_set_grain(Linears *L, int l, int lin, int grain) {
    int i = fp8_linear(&L->cfg, l, lin);
    if (L->grain[i] != FP8_GRAIN_TENSOR || grain == FP8_GRAIN_TENSOR ||
        !fp8_grain_allowed(L->sh.o.grain, L->sh.o.fallback, grain))
        FATAL("linear_set_grain: layer %d %s is of grain %s; a linear only ever leaves per-tensor scaling, "
              "for a grain its run allows (asked: %s)",
              l, LINEAR_NAMES[lin], FP8_GRAIN_NAMES[L->grain[i]], FP8_GRAIN_NAMES[grain]);
    Linear *x = linear_of(L, l, lin);
    linear_buffers_make(L, x, grain);
    x->recipe = RECIPES[grain];
    L->grain[i] = (unsigned char)grain;
    L->grain_changes++;
}

// Every fp8 linear of -fp8_grain's grain from step 0, when it is not per-tensor (model_init's end).
static void linears_start(Linears *L) {
    for (int l = 0; L->sh.o.fp8 && L->sh.o.grain != FP8_GRAIN_TENSOR && l < L->cfg.L; l++)
        for (int lin = 0; lin < LINS_PER_LAYER + (l == 0 ? L->sh.o.lm_head : 0); lin++)
            linear_set_grain(L, l, lin, L->sh.o.grain);
}

// After a resume, whose state file set every linear's grain (a linear the fallback switched resumes
// switched): each one this run's options allow, or the file (path) is refused; the buffers of those
// that need them made.
static void linears_resumed(Linears *L, const char *path) {
    const LlamaConfig *c = &L->cfg;
    const LinearOptions *o = &L->sh.o;
    for (int i = 0; L->grain && i < L->count; i++) {
        int grain = L->grain[i], l = i / LINS_PER_LAYER, lin = l < c->L ? i % LINS_PER_LAYER : LIN_LM_HEAD;
        if (grain >= FP8_GRAINS || !fp8_grain_allowed(o->grain, o->fallback, grain))
            FATAL("checkpoint '%s': fp8 linear %d (layer %d %s) has grain %d, which a run of -fp8_grain %s "
                  "-fp8_fallback %s cannot have",
                  path, i, l, LINEAR_NAMES[lin], grain, FP8_GRAIN_NAMES[o->grain],
                  o->fallback ? FP8_GRAIN_NAMES[o->fallback] : "off");
        Linear *x = &L->all[i];
        x->recipe = RECIPES[grain];
        if (grain == FP8_GRAIN_TENSOR || x->own.memory) continue;
        linear_buffers_make(L, x, grain);
        L->grain_changes++;
    }
}

// ---- the passes: linear (l, lin)'s recipe does the work (llmc/recipe.cuh says what each is handed)

static Fp8Site linear_x_site(Linears *L, int l, int lin, Fp8Pass p, fp8e4 *x_fp8, fp8e4 *x_t, floatX *bf16) {
    const Linear *x = linear_of(L, l, lin);
    return x->recipe->x_site(x, &L->sh, p, x_fp8, x_t, bf16);
}

static void linear_x_existing(Linears *L, int l, int lin, Fp8Pass p, fp8e4 *x_fp8, const floatX *in,
                              cudaStream_t stream) {
    const Linear *x = linear_of(L, l, lin);
    if (x->recipe->x_existing) x->recipe->x_existing(x, &L->sh, p, x_fp8, in, stream);
}

static Fp8Site linear_dy_site(Linears *L, int l, int lin, Fp8Pass p, floatX *bf16) {
    const Linear *x = linear_of(L, l, lin);
    return x->recipe->dy_site(x, &L->sh, p, bf16);
}

static void linear_dy_existing(Linears *L, int l, int lin, Fp8Pass p, const floatX *dy, cudaStream_t stream) {
    const Linear *x = linear_of(L, l, lin);
    if (x->recipe->dy_existing) x->recipe->dy_existing(x, &L->sh, p, dy, stream);
}

static void linear_forward(Linears *L, int l, int lin, Fp8Pass p, floatX *y, const floatX *in, const fp8e4 *x_fp8,
                           cudaStream_t stream) {
    fp8_no_open_site(L->sh.fs, "linear_forward");
    const Linear *x = linear_of(L, l, lin);
    x->recipe->forward(x, &L->sh, p, y, in, x_fp8, stream);
}

// dx = dy w; dw = dy^T x in micro-step 0, dw += dy^T x after it (accumulate; so the step need not
// zero dw). llmc/recipe.cuh says where dY and X are found.
static void linear_backward(Linears *L, int l, int lin, Fp8Pass p, int accumulate, floatX *dx, const floatX *dy,
                            const floatX *in, const fp8e4 *x_fp8, const fp8e4 *x_t, int dy_t_ready,
                            cudaStream_t stream) {
    fp8_no_open_site(L->sh.fs, "linear_backward");
    const Linear *x = linear_of(L, l, lin);
    x->recipe->backward(x, &L->sh, p, accumulate, dx, dy, in, x_fp8, x_t, dy_t_ready, stream);
}

// w2's X recomputed in layer l's backward (-r 1): the cast SwiGLU's forward makes, X^T's buffer
// (*x_t, NULL on entry) and the bf16 X's (*x_bf16, the caller's on entry).
static Fp8Cast linear_recompute_x(Linears *L, int l, fp8e4 **x_t, floatX **x_bf16) {
    const Linear *x = linear_of(L, l, LIN_W2);
    return x->recipe->recompute_x(x, &L->sh, x_t, x_bf16);
}

// ---- the weights of the next step

// Every fp8 linear's W for the next step, in its grain, from the bf16 weights in `params` (the
// parameters' layout: the parameters themselves, or bf16(master) staged elsewhere), as pass p casts.
static void linears_cast_weights(Linears *L, Fp8Pass p, const floatX *params, cudaStream_t stream) {
    for (int lin = 0; lin < LINS_PER_LAYER + L->sh.o.lm_head; lin++) {
        for (int l = 0; l < (lin == LIN_LM_HEAD ? 1 : L->cfg.L); l++) {
            const Linear *x = linear_of(L, l, lin);
            x->recipe->cast_weight(x, &L->sh, p, params + x->w_at, 0, stream);
        }
    }
}

// After AdamW wrote every fp8 linear's per-tensor E4M3 W from the master (w_by_adamw): the linears of
// another grain made again from the fp32 master (their recipe's after_adamw), as pass p casts.
static void linears_regrain(Linears *L, Fp8Pass p, cudaStream_t stream) {
    for (int lin = 0; lin < LINS_PER_LAYER + L->sh.o.lm_head; lin++) {
        for (int l = 0; l < (lin == LIN_LM_HEAD ? 1 : L->cfg.L); l++) {
            const Linear *x = linear_of(L, l, lin);
            if (x->recipe->after_adamw) x->recipe->after_adamw(x, &L->sh, p, stream);
        }
    }
}

// AdamW's slice s of parameter tensor `tensor`: with w_by_adamw, a tensor of an fp8 linear's weights
// is one piece, and AdamW writes every layer's E4M3 W instead of the bf16 weights, recording its
// amax and counts for the next step's scales.
static void linears_adamw_cast(const Linears *L, int tensor, AdamWSlice *s) {
    const Fp8State *fs = L->sh.fs;
    for (int lin = 0; L->sh.o.w_by_adamw && lin < LINS_PER_LAYER + L->sh.o.lm_head; lin++) {
        if (LINEAR_PARAM[lin] != tensor) continue;
        int t0 = fp8_tensor(&L->cfg, 0, lin, FP8_W);
        s->wcast.out = linear_of(L, 0, lin)->w_fp8;
        s->wcast.amax = fp8_amax(fs, t0); s->wcast.scale = fp8_scale(fs, t0); s->wcast.counts = fp8_counts(fs, t0);
        s->fp8_layers = lin == LIN_LM_HEAD ? 1 : L->cfg.L;
        s->layer_numel = s->n / s->fp8_layers;
        s->fp8_tensor_stride = FP8_KINDS * LINS_PER_LAYER;
        s->param = NULL;
        return;
    }
}

// ---- the fallback (-fp8_fallback)

// The step's health counts (the finished step's, after fp8_end_step) to the host, on `stream`: read
// once the stream got there (with the gradient norm).
static void linears_counts_to_host(Linears *L, cudaStream_t stream) {
    if (!L->sh.o.fallback) return;
    size_t nc = (size_t)FP8_COUNTS * L->sh.fs->layout.num_tensors;
    cudaCheck(cudaMemcpyAsync(L->counts_host, fp8_last_counts(L->sh.fs), nc * sizeof(unsigned long long),
                              cudaMemcpyDeviceToHost, stream));
}

// The fallback's rule on the counts of a step of grad_accum micro-steps (linears_counts_to_host): the
// linears it switches (switched, num_switched) take the fallback's grain from the next step on.
static void linears_fallback_step(Linears *L, int grad_accum) {
    const LinearOptions *o = &L->sh.o;
    L->num_switched = o->fallback ? fp8_fallback_rule(&L->cfg, o->lm_head, o->rule, linears_step_casts(L, grad_accum),
                                                      L->counts_host, L->grain, L->over_steps, L->switched)
                                  : 0;
    for (int k = 0; k < L->num_switched; k++) linear_set_grain(L, L->switched[k].l, L->switched[k].lin, o->fallback);
}

#endif
