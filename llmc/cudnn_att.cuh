/*
Fused causal GQA attention through cuDNN's backend (graph) C API: a forward graph that also emits the
softmax Stats (log-sum-exp per query row, needed by the backward) and a deterministic backward graph.
No cudnn-frontend: every tensor and operation is a cudnnBackend descriptor (docs/attention.md
has the recipe). Graphs are built once per (B, T, NH, NKV, HS, direction, mask) and cached with their
plan; all plans share one workspace that only grows when a plan is built, never in steady state.

Masks (the plan key's `mask`): ATT_MASK_CAUSAL, causal over each row; ATT_MASK_DOC_BIAS, document
masking (-doc_mask 1) as an additive bias (B, 1, T, T) bf16 added to the scaled scores before the
causal mask: 0 for the keys of the query's document, a large negative for the keys before its start
(cudnn-frontend's SDPA "bias": documented for the forward and the backward, (B, 1, S_q, S_kv) among its
shapes, no dBias needed). The caller writes it (llmc/attention.cuh doc_bias_forward); every causal tile
is still computed, and each reads its tile of the bias.
Compiled only when the Makefile defines ENABLE_CUDNN (link -lcudnn); llmc/attention.cuh dispatches here
for the shapes cudnn_att_unsupported() accepts and falls back to its plain kernels otherwise, including
when building a plan fails (printed once per shape, never fatal).

Layouts: qkv is packed (B, T, NH + 2*NKV, HS), so Q, K, V (and dQ, dK, dV in dqkv) are strided views
(B, H, T, HS) with strides {T*H3*HS, HS, H3*HS, 1}, H3 = NH + 2*NKV, at head offsets 0, NH, NH + NKV.
K^T and V^T are the same memory with the last two dims/strides swapped. out/dout are (B, T, NH*HS);
stats is (B, NH, T) fp32.

Two backward forms (cudnn_att_set_deterministic picks one; each has its own cached plan):
- deterministic (bit-reproducible runs and resumes): dQ is written straight from the dS x K matmul.
  That is cuDNN's deterministic form on Hopper for cuDNN < 9.25: it materializes dS in a workspace of
  about B*NH*T*T*2 bytes and runs dQ = dS x K as a separate kernel. Engine configs that cuDNN marks
  NONDETERMINISTIC are refused.
- fast (the default): dS x K goes into an fp32 dQ accumulator (zeroed before each call, atomics inside
  the fused kernel), then IDENTITY to bf16 dQ. The order of the atomic adds varies between runs, so dQ
  may differ in its last bits from run to run. If cuDNN has no plan for it, the deterministic form runs.

fp8 attention (cudnn_att_fp8_forward / cudnn_att_fp8_backward; TransformerEngine's fp8_dpa with delayed
scaling, docs/attention.md "fp8 attention: built, tested, not used"): the same causal GQA graphs with fp8 matmul inputs, per-tensor
scales and amaxes, in cudnn-frontend's op order (its SDPA with FP8 MMA and its sdpa_fp8_backward node).
Layouts as above, in bytes: qkv (B, T, NH + 2*NKV, HS) E4M3, out (B, T, NH*HS) E4M3 (on Hopper O must be
fp8), stats (B, NH, T) fp32; dout (B, T, NH*HS) E5M2, dqkv (B, T, NH + 2*NKV, HS) E5M2 (dQ, dK, dV must be
fp8 on Hopper). Every scale, descale and amax is one fp32 on the device, passed as a pointer
(CudnnAttFp8Forward / CudnnAttFp8Backward say which is which); cuDNN reads and writes 16-byte-aligned
copies in the workspace, filled from the caller's pointers on the stream before each call, and the
amaxes are max-accumulated into the caller's afterwards (like every fp8 cast of this project), so a
step's amax slot collects every layer and micro-step. Inside the kernels P (TE's "S") is cast to E4M3
with scale_s, and dS (TE's "dP") to dout's type, E5M2, with scale_dp; amax_s and amax_dp are their
amaxes before scaling. Shapes: HS % 16 == 0 and HS <= 256 for the forward, HS == 128 exactly for the
backward (cuDNN's limit on Hopper), T % 128 == 0 as above. Plans are cached like the bf16 ones (the key
has fp8 in it); the fp8 backward obeys cudnn_att_set_deterministic like the bf16 one (deterministic:
engines marked NONDETERMINISTIC are refused). A shape without a plan is reported once and the call
returns 0: the caller decides what runs instead.
*/
#ifndef LLMC_CUDNN_ATT_CUH
#define LLMC_CUDNN_ATT_CUH

#include <cudnn.h>
#include "cuda_common.cuh"

// ---------------------------------------------------------------------------------------------------
// state

static cudnnHandle_t g_cudnn_handle = NULL;
static size_t g_cudnn_version = 0;        // cudnnGetVersion() of the library actually loaded
static void *g_cudnn_workspace = NULL;    // shared by every plan: calls must be stream-ordered
static size_t g_cudnn_workspace_bytes = 0;
static int g_cudnn_sm_major = 0;          // compute capability major of the device (fp8 needs 9+)

#define CUDNN_ATT_MAX_DESCS 256 // descriptors one plan is built from (~150 for the fp8 backward graph + engine configs)
#define CUDNN_ATT_MAX_OPS 64    // the fp8 backward graph has 43
#define CUDNN_ATT_MAX_PLANS 32

enum { ATT_MASK_CAUSAL, ATT_MASK_DOC_BIAS }; // the score mask a plan's graphs apply (the top of this file)

typedef struct {
    int B, T, NH, NKV, HS, backward, deterministic; // deterministic: the backward form (forward: 1)
    int fp8;                        // the fp8 graphs (cudnn_att_fp8_*), else bf16
    int mask;                       // ATT_MASK_CAUSAL or ATT_MASK_DOC_BIAS (bf16 only; fp8 is causal)
    int failed;                     // building failed: the plain kernel runs, nothing is retried
    char failure[320];              // why (the last graph variant's error), for cudnn_att_plan_failure
    int nondeterministic;           // the engine is marked NONDETERMINISTIC (printed for fp8 plans)
    cudnnBackendDescriptor_t plan;
    cudnnBackendDescriptor_t descs[CUDNN_ATT_MAX_DESCS]; // everything the plan was built from
    int ndescs;
    int64_t plan_workspace;         // bytes the plan itself needs
    size_t softmax_sum_offset;      // backward: byte offset of softmax_sum (B, NH, T) fp32 in the workspace
    size_t dq_accum_offset, dq_accum_bytes; // fast backward: the fp32 dQ accumulator in the workspace (else 0)
    size_t fp8_scalars_offset;      // fp8: byte offset of the scale/descale/amax slots in the workspace
    float scale, neg_inf, one;      // by-value scalars: their host addresses go in the variant pack
} CudnnAttPlan;

static CudnnAttPlan g_cudnn_plans[CUDNN_ATT_MAX_PLANS];
static int g_cudnn_nplans = 0;

// Unique ids of the non-virtual tensors (the variant pack's keys); virtual ones count up from 100.
enum {
    ATT_UID_Q = 1, ATT_UID_KT, ATT_UID_V, ATT_UID_VT, ATT_UID_O, ATT_UID_STATS, ATT_UID_SCALE,
    ATT_UID_NEG_INF, ATT_UID_DO, ATT_UID_DQ, ATT_UID_DK, ATT_UID_DV, ATT_UID_ONE, ATT_UID_SOFTMAX_SUM,
    ATT_UID_DQ_ACCUM, ATT_UID_DOC_BIAS,
    // fp8 graphs: device scalars ({1,1,1,1} fp32), each at its own 16-byte slot of the workspace (in this order)
    ATT_UID_DESCALE_Q, ATT_UID_DESCALE_K, ATT_UID_DESCALE_V, ATT_UID_DESCALE_O, ATT_UID_DESCALE_DO,
    ATT_UID_DESCALE_S, ATT_UID_DESCALE_DP, ATT_UID_SCALE_S, ATT_UID_SCALE_O, ATT_UID_SCALE_DP, ATT_UID_SCALE_DQ,
    ATT_UID_SCALE_DK, ATT_UID_SCALE_DV, ATT_UID_AMAX_S, ATT_UID_AMAX_O, ATT_UID_AMAX_DQ, ATT_UID_AMAX_DK,
    ATT_UID_AMAX_DV, ATT_UID_AMAX_DP,
    ATT_UID_FIRST_VIRTUAL = 100
};
#define ATT_FP8_NSCALARS (ATT_UID_AMAX_DP - ATT_UID_DESCALE_Q + 1)
#define ATT_FP8_SLOT_FLOATS 4 // 16 bytes per scalar slot

static void cudnn_check(cudnnStatus_t status, const char *file, int line) {
    if (status != CUDNN_STATUS_SUCCESS) {
        char detail[512] = "";
        cudnnGetLastErrorString(detail, sizeof(detail));
        fatal_at(file, line, "cuDNN error: %s (%s)", cudnnGetErrorString(status), detail);
    }
}
#define cudnnCheck(status) cudnn_check((status), __FILE__, __LINE__)

// ---------------------------------------------------------------------------------------------------
// graph building: every call is checked; the first failure is kept with the call, the descriptor and
// the attribute it concerned, later calls are skipped, and the caller prints it and falls back.

typedef struct {
    CudnnAttPlan *p;
    cudnnStatus_t status;       // CUDNN_STATUS_SUCCESS until something fails
    char where[256];            // what failed
    cudnnBackendDescriptor_t ops[CUDNN_ATT_MAX_OPS];
    int nops;
    int64_t next_uid;           // for virtual tensors
} CudnnGraph;

typedef struct { int64_t v[4]; } Dims4;
static Dims4 dims4(int64_t a, int64_t b, int64_t c, int64_t d) { Dims4 r = {{a, b, c, d}}; return r; }

static int cg_ok(const CudnnGraph *g) { return g->status == CUDNN_STATUS_SUCCESS; }

static void cg_check(CudnnGraph *g, cudnnStatus_t status, const char *call, const char *what, const char *attr) {
    if (status == CUDNN_STATUS_SUCCESS || !cg_ok(g)) return;
    g->status = status;
    snprintf(g->where, sizeof(g->where), "%s(%s%s%s)", call, what, attr ? ", " : "", attr ? attr : "");
}

#define CG_SET(g, desc, what, attr, type, count, ptr)                                               \
    do {                                                                                             \
        if (cg_ok(g)) cg_check((g), cudnnBackendSetAttribute((desc), (attr), (type), (count), (ptr)), \
                               "cudnnBackendSetAttribute", (what), #attr);                           \
    } while (0)

static cudnnBackendDescriptor_t cg_create(CudnnGraph *g, cudnnBackendDescriptorType_t type, const char *what) {
    if (!cg_ok(g)) return NULL;
    if (g->p->ndescs == CUDNN_ATT_MAX_DESCS) {
        cg_check(g, CUDNN_STATUS_INTERNAL_ERROR, "too many descriptors (raise CUDNN_ATT_MAX_DESCS)", what, NULL);
        return NULL;
    }
    cudnnBackendDescriptor_t desc = NULL;
    cg_check(g, cudnnBackendCreateDescriptor(type, &desc), "cudnnBackendCreateDescriptor", what, NULL);
    if (desc != NULL) g->p->descs[g->p->ndescs++] = desc;
    return desc;
}

static void cg_finalize(CudnnGraph *g, cudnnBackendDescriptor_t desc, const char *what) {
    if (cg_ok(g)) cg_check(g, cudnnBackendFinalize(desc), "cudnnBackendFinalize", what, NULL);
}

static cudnnBackendDescriptor_t cg_tensor_reordered(CudnnGraph *g, const char *name, int64_t uid, cudnnDataType_t dtype,
                                                    Dims4 dims, Dims4 strides, int is_virtual, int by_value,
                                                    cudnnBackendTensorReordering_t reordering) {
    cudnnBackendDescriptor_t t = cg_create(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, name);
    int64_t alignment = 16;
    bool virt = is_virtual != 0, byval = by_value != 0;
    CG_SET(g, t, name, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dtype);
    CG_SET(g, t, name, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims.v);
    CG_SET(g, t, name, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides.v);
    CG_SET(g, t, name, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    CG_SET(g, t, name, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &alignment);
    if (virt) CG_SET(g, t, name, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (byval) CG_SET(g, t, name, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
    if (reordering != CUDNN_TENSOR_REORDERING_NONE)
        CG_SET(g, t, name, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &reordering);
    cg_finalize(g, t, name);
    return t;
}

static cudnnBackendDescriptor_t cg_tensor(CudnnGraph *g, const char *name, int64_t uid, cudnnDataType_t dtype,
                                          Dims4 dims, Dims4 strides, int is_virtual, int by_value) {
    return cg_tensor_reordered(g, name, uid, dtype, dims, strides, is_virtual, by_value, CUDNN_TENSOR_REORDERING_NONE);
}

static cudnnBackendDescriptor_t cg_virtual(CudnnGraph *g, const char *name, cudnnDataType_t dtype, Dims4 dims, Dims4 strides) {
    return cg_tensor(g, name, g->next_uid++, dtype, dims, strides, 1, 0);
}

// an fp32 scalar passed by value (a host pointer in the variant pack)
static cudnnBackendDescriptor_t cg_scalar(CudnnGraph *g, const char *name, int64_t uid) {
    return cg_tensor(g, name, uid, CUDNN_DATA_FLOAT, dims4(1, 1, 1, 1), dims4(1, 1, 1, 1), 0, 1);
}

// an fp32 scalar on the device ({1,1,1,1}): the fp8 graphs' scales, descales and amaxes
static cudnnBackendDescriptor_t cg_device_scalar(CudnnGraph *g, const char *name, int64_t uid) {
    return cg_tensor(g, name, uid, CUDNN_DATA_FLOAT, dims4(1, 1, 1, 1), dims4(1, 1, 1, 1), 0, 0);
}

// row-major packed strides of dims (the fp8 graphs' virtual products: cuDNN ignores virtual strides)
static Dims4 packed_strides(Dims4 d) { return dims4(d.v[1] * d.v[2] * d.v[3], d.v[2] * d.v[3], d.v[3], 1); }

static void cg_add_op(CudnnGraph *g, cudnnBackendDescriptor_t op, const char *name) {
    if (!cg_ok(g)) return;
    if (g->nops == CUDNN_ATT_MAX_OPS) {
        cg_check(g, CUDNN_STATUS_INTERNAL_ERROR, "too many operations (raise CUDNN_ATT_MAX_OPS)", name, NULL);
        return;
    }
    g->ops[g->nops++] = op;
}

// y = mode(x [, b] [, t]); t is the condition of BINARY_SELECT (y = t ? x : b). axis >= 0: GEN_INDEX's axis.
static void cg_pointwise(CudnnGraph *g, const char *name, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                         cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t,
                         cudnnBackendDescriptor_t y, int64_t axis) {
    cudnnBackendDescriptor_t pw = cg_create(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR, name);
    CG_SET(g, pw, name, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    CG_SET(g, pw, name, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) CG_SET(g, pw, name, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    cg_finalize(g, pw, name);
    cudnnBackendDescriptor_t op = cg_create(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, name);
    float alpha = 1.0f;
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) CG_SET(g, op, name, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) CG_SET(g, op, name, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &alpha);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &alpha);
    cg_finalize(g, op, name);
    cg_add_op(g, op, name);
}

// c = a x b over the last two dims, batched over the first two (b's head dim broadcasts for GQA)
static void cg_matmul(CudnnGraph *g, const char *name, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                      cudnnBackendDescriptor_t c) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = cg_create(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR, name);
    CG_SET(g, mm, name, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cg_finalize(g, mm, name);
    cudnnBackendDescriptor_t op = cg_create(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, name);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    cg_finalize(g, op, name);
    cg_add_op(g, op, name);
}

// y = reduce(x) over the dims where y has size 1 (or, for the GQA head sums, y has fewer heads).
// deterministic: -1 leaves the attribute unset (it exists from cuDNN 9.11).
static void cg_reduction(CudnnGraph *g, const char *name, cudnnReduceTensorOp_t reduce_op,
                         cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y, int deterministic) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = cg_create(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR, name);
    CG_SET(g, rd, name, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &reduce_op);
    CG_SET(g, rd, name, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
#if CUDNN_VERSION >= 91100
    if (deterministic >= 0) {
        bool det = deterministic != 0;
        CG_SET(g, rd, name, CUDNN_ATTR_REDUCTION_IS_DETERMINISTIC, CUDNN_TYPE_BOOLEAN, 1, &det);
    }
#else
    (void)deterministic;
#endif
    cg_finalize(g, rd, name);
    cudnnBackendDescriptor_t op = cg_create(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, name);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    cg_finalize(g, op, name);
    cg_add_op(g, op, name);
}

// y = x seen with other dims/strides (here: a transpose of the last two dims)
static void cg_reshape(CudnnGraph *g, const char *name, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = cg_create(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, name);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    CG_SET(g, op, name, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cg_finalize(g, op, name);
    cg_add_op(g, op, name);
}

// y = causal_mask(x): x where row (query) >= col (key), fill elsewhere
static void cg_causal_mask(CudnnGraph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t fill,
                           cudnnBackendDescriptor_t y, Dims4 dims, Dims4 strides) {
    cudnnBackendDescriptor_t row = cg_virtual(g, "row_index", CUDNN_DATA_INT32, dims, strides);
    cudnnBackendDescriptor_t col = cg_virtual(g, "col_index", CUDNN_DATA_INT32, dims, strides);
    cudnnBackendDescriptor_t keep = cg_virtual(g, "causal_keep", CUDNN_DATA_BOOLEAN, dims, strides);
    cg_pointwise(g, "gen_row_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL, row, 2);
    cg_pointwise(g, "gen_col_index", CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL, col, 3);
    cg_pointwise(g, "row_ge_col", CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cg_pointwise(g, "causal_select", CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, fill, keep, y, -1);
}

// y = x * b as a new virtual fp32 tensor (b: a tensor of the same dims or a {1,1,1,1} scalar)
static cudnnBackendDescriptor_t cg_mul(CudnnGraph *g, const char *name, cudnnBackendDescriptor_t x,
                                       cudnnBackendDescriptor_t b, Dims4 dims, Dims4 strides) {
    cudnnBackendDescriptor_t y = cg_virtual(g, name, CUDNN_DATA_FLOAT, dims, strides);
    cg_pointwise(g, name, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, x, b, NULL, y, -1);
    return y;
}

// P = softmax(x) over the last dim, written out as max, subtract, exp, sum, log: stats = max + log(sum)
// (non-virtual fp32 (B, H, T, 1)), P = exp / sum (virtual, of the type the caller made it).
static void cg_softmax(CudnnGraph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t stats,
                       cudnnBackendDescriptor_t P, Dims4 scores, Dims4 scores_st, Dims4 rows, Dims4 rows_st) {
    const cudnnDataType_t F32 = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t m = cg_virtual(g, "row_max", F32, rows, rows_st);
    cg_reduction(g, "reduce_max", CUDNN_REDUCE_TENSOR_MAX, x, m, -1);
    cudnnBackendDescriptor_t s_sub = cg_virtual(g, "S_minus_max", F32, scores, scores_st);
    cg_pointwise(g, "sub_max", CUDNN_POINTWISE_SUB, F32, x, m, NULL, s_sub, -1);
    cudnnBackendDescriptor_t e = cg_virtual(g, "exp_S", F32, scores, scores_st);
    cg_pointwise(g, "exp", CUDNN_POINTWISE_EXP, F32, s_sub, NULL, NULL, e, -1);
    cudnnBackendDescriptor_t l = cg_virtual(g, "row_sum", F32, rows, rows_st);
    cg_reduction(g, "reduce_sum", CUDNN_REDUCE_TENSOR_ADD, e, l, -1);
    cudnnBackendDescriptor_t log_l = cg_virtual(g, "log_row_sum", F32, rows, rows_st);
    cg_pointwise(g, "log", CUDNN_POINTWISE_LOG, F32, l, NULL, NULL, log_l, -1);
    cg_pointwise(g, "stats", CUDNN_POINTWISE_ADD, F32, m, log_l, NULL, stats, -1);
    cg_pointwise(g, "div_sum", CUDNN_POINTWISE_DIV, F32, e, l, NULL, P, -1);
}

// c = fp8(a x b x descale_a x descale_b x scale_c) and amax_c = max|a x b x descale_a x descale_b| (before
// the scale), as cudnn-frontend's matmul_fp8 builds it: a fp32 product, the descales, the scale into the
// non-virtual fp8 c, the AMAX reduction. prod_dims: a x b's dims; when c has fewer heads (GQA's dK, dV),
// the product is first summed over each kv head's group of query heads.
static void cg_matmul_fp8(CudnnGraph *g, const char *name, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                          cudnnBackendDescriptor_t descale_a, cudnnBackendDescriptor_t descale_b,
                          cudnnBackendDescriptor_t scale_c, cudnnBackendDescriptor_t c, cudnnBackendDescriptor_t amax_c,
                          Dims4 prod_dims, Dims4 c_dims) {
    char nm[96];
    snprintf(nm, sizeof(nm), "%s (fp32)", name);
    cudnnBackendDescriptor_t x = cg_virtual(g, nm, CUDNN_DATA_FLOAT, prod_dims, packed_strides(prod_dims));
    cg_matmul(g, name, a, b, x);
    Dims4 d = prod_dims;
    if (c_dims.v[1] != prod_dims.v[1]) {
        snprintf(nm, sizeof(nm), "%s: sum over each head group", name);
        cudnnBackendDescriptor_t sum = cg_virtual(g, nm, CUDNN_DATA_FLOAT, c_dims, packed_strides(c_dims));
        cg_reduction(g, nm, CUDNN_REDUCE_TENSOR_ADD, x, sum, -1);
        x = sum;
        d = c_dims;
    }
    snprintf(nm, sizeof(nm), "%s: x descale_a", name);
    x = cg_mul(g, nm, x, descale_a, d, packed_strides(d));
    snprintf(nm, sizeof(nm), "%s: x descale_b", name);
    x = cg_mul(g, nm, x, descale_b, d, packed_strides(d));
    snprintf(nm, sizeof(nm), "%s: x scale (fp8 out)", name);
    cg_pointwise(g, nm, CUDNN_POINTWISE_MUL, CUDNN_DATA_FLOAT, x, scale_c, NULL, c, -1);
    snprintf(nm, sizeof(nm), "%s: amax", name);
    cg_reduction(g, nm, CUDNN_REDUCE_TENSOR_AMAX, x, amax_c, -1);
}

// The dims and strides of every tensor of the four graphs (layouts: the comment at the top of this file)
typedef struct {
    Dims4 scores, scores_st, scores_t_st; // (B, NH, T, T) and its transpose in the same memory
    Dims4 rows, rows_st;                  // (B, NH, T, 1): Stats, D
    Dims4 q, kv, kv_t;                    // (B, NH, T, HS), (B, NKV, T, HS), (B, NKV, HS, T)
    Dims4 qkv_st, qkv_t_st;               // Q, K, V (and dQ, dK, dV) in the packed qkv rows; K^T, V^T
    Dims4 o_st;                           // O, dO: (B, T, NH*HS)
    Dims4 full_head_st;                   // a K or V gradient per query head, packed (GQA)
    Dims4 bias, bias_st;                  // (B, 1, T, T): the document bias, broadcast over the heads
} AttShapes;

static AttShapes att_shapes(int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    int64_t H3 = NH + 2 * NKV;
    AttShapes d;
    d.scores = dims4(B, NH, T, T);
    d.scores_st = dims4(NH * T * T, T * T, T, 1);
    d.scores_t_st = dims4(NH * T * T, T * T, 1, T);
    d.rows = dims4(B, NH, T, 1);
    d.rows_st = dims4(NH * T, T, 1, 1);
    d.q = dims4(B, NH, T, HS);
    d.kv = dims4(B, NKV, T, HS);
    d.kv_t = dims4(B, NKV, HS, T);
    d.qkv_st = dims4(T * H3 * HS, HS, H3 * HS, 1);
    d.qkv_t_st = dims4(T * H3 * HS, HS, 1, H3 * HS);
    d.o_st = dims4(T * NH * HS, HS, NH * HS, 1);
    d.full_head_st = dims4(NH * T * HS, T * HS, HS, 1);
    d.bias = dims4(B, 1, T, T);
    d.bias_st = dims4(T * T, T * T, T, 1);
    return d;
}

// The non-virtual tensors the graphs share (in their variant packs), declared in this order: Q, K^T and
// V (forward) or V^T (backward), O, all x_type; the backward's dO; Stats (fp32); attn_scale and -inf (by
// value); the document bias (ATT_MASK_DOC_BIAS only); the backward's dQ, dK, dV. grad_type is dO's
// and dQ, dK, dV's (backward only).
typedef struct {
    cudnnBackendDescriptor_t Q, KT, V, VT, O, stats, scale, neg_inf; // V: forward only, VT: backward only
    cudnnBackendDescriptor_t doc_bias;                               // NULL unless mask is ATT_MASK_DOC_BIAS
    cudnnBackendDescriptor_t dO, dQ, dK, dV;                         // backward only
} AttTensors;

static AttTensors att_tensors(CudnnGraph *g, const AttShapes *d, int backward, cudnnDataType_t x_type,
                              cudnnDataType_t grad_type, int mask) {
    AttTensors t;
    memset(&t, 0, sizeof(t));
    t.Q = cg_tensor(g, "Q", ATT_UID_Q, x_type, d->q, d->qkv_st, 0, 0);
    t.KT = cg_tensor(g, "K^T", ATT_UID_KT, x_type, d->kv_t, d->qkv_t_st, 0, 0);
    if (backward) t.VT = cg_tensor(g, "V^T", ATT_UID_VT, x_type, d->kv_t, d->qkv_t_st, 0, 0);
    else t.V = cg_tensor(g, "V", ATT_UID_V, x_type, d->kv, d->qkv_st, 0, 0);
    t.O = cg_tensor(g, "O", ATT_UID_O, x_type, d->q, d->o_st, 0, 0);
    if (backward) t.dO = cg_tensor(g, "dO", ATT_UID_DO, grad_type, d->q, d->o_st, 0, 0);
    t.stats = cg_tensor(g, "Stats", ATT_UID_STATS, CUDNN_DATA_FLOAT, d->rows, d->rows_st, 0, 0);
    t.scale = cg_scalar(g, "attn_scale", ATT_UID_SCALE);
    t.neg_inf = cg_scalar(g, "-inf", ATT_UID_NEG_INF);
    if (mask == ATT_MASK_DOC_BIAS) t.doc_bias = cg_tensor(g, "doc_bias", ATT_UID_DOC_BIAS, x_type, d->bias, d->bias_st, 0, 0);
    if (!backward) return t;
    t.dQ = cg_tensor(g, "dQ", ATT_UID_DQ, grad_type, d->q, d->qkv_st, 0, 0);
    t.dK = cg_tensor(g, "dK", ATT_UID_DK, grad_type, d->kv, d->qkv_st, 0, 0);
    t.dV = cg_tensor(g, "dV", ATT_UID_DV, grad_type, d->kv, d->qkv_st, 0, 0);
    return t;
}

// ---------------------------------------------------------------------------------------------------
// the two graphs (docs/attention.md "The cuDNN graphs", steps in the same order)

// s + the document bias (ATT_MASK_DOC_BIAS: cudnn-frontend's bias, after the scale and before the
// causal mask, forward and backward alike), else s
static cudnnBackendDescriptor_t cg_doc_bias(CudnnGraph *g, const AttTensors *t, const AttShapes *d, cudnnBackendDescriptor_t s) {
    if (t->doc_bias == NULL) return s;
    cudnnBackendDescriptor_t y = cg_virtual(g, "S_plus_doc_bias", CUDNN_DATA_FLOAT, d->scores, d->scores_st);
    cg_pointwise(g, "add_doc_bias", CUDNN_POINTWISE_ADD, CUDNN_DATA_FLOAT, s, t->doc_bias, NULL, y, -1);
    return y;
}

static void cudnn_att_forward_graph(CudnnGraph *g, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int mask) {
    const cudnnDataType_t BF16 = CUDNN_DATA_BFLOAT16, F32 = CUDNN_DATA_FLOAT;
    AttShapes d = att_shapes(B, T, NH, NKV, HS);
    AttTensors t = att_tensors(g, &d, 0, BF16, BF16, mask);

    cudnnBackendDescriptor_t s = cg_virtual(g, "S", F32, d.scores, d.scores_st);
    cg_matmul(g, "Q x K^T", t.Q, t.KT, s);
    cudnnBackendDescriptor_t s_scaled = cg_virtual(g, "S_scaled", F32, d.scores, d.scores_st);
    cg_pointwise(g, "mul_scale", CUDNN_POINTWISE_MUL, F32, s, t.scale, NULL, s_scaled, -1);
    s_scaled = cg_doc_bias(g, &t, &d, s_scaled);
    cudnnBackendDescriptor_t s_masked = cg_virtual(g, "S_masked", F32, d.scores, d.scores_st);
    cg_causal_mask(g, s_scaled, t.neg_inf, s_masked, d.scores, d.scores_st);
    cudnnBackendDescriptor_t P = cg_virtual(g, "P", BF16, d.scores, d.scores_st); // bmm2's A must be the i/o type
    cg_softmax(g, s_masked, t.stats, P, d.scores, d.scores_st, d.rows, d.rows_st);
    cg_matmul(g, "P x V", P, t.V, t.O);
}

// A K or V gradient: the matmul a x b straight into out, or for GQA into every query head (a virtual
// tensor of q_dims) and then summed over each kv head's group of query heads into out.
static void cg_kv_grad(CudnnGraph *g, const char *matmul_name, const char *full_name, const char *sum_name,
                       cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t out,
                       Dims4 q_dims, Dims4 full_head_st, int gqa, int det_head_sum) {
    if (!gqa) {
        cg_matmul(g, matmul_name, a, b, out);
        return;
    }
    cudnnBackendDescriptor_t full = cg_virtual(g, full_name, CUDNN_DATA_BFLOAT16, q_dims, full_head_st);
    cg_matmul(g, matmul_name, a, b, full);
    cg_reduction(g, sum_name, CUDNN_REDUCE_TENSOR_ADD, full, out, det_head_sum);
}

// mask_after_stats: 0 = the recipe's order (mask, then subtract Stats, as cudnn-frontend 1.0-1.5 built
// it), 1 = subtract Stats, then mask (newer cudnn-frontend); both compute the same P.
// det_head_sum: for GQA, the IS_DETERMINISTIC attribute of the head reductions of dK, dV (-1: unset).
// dq_accum: ATT_DQ_DIRECT (deterministic), or dQ through an fp32 accumulator tensor (ATT_UID_DQ_ACCUM,
// laid out like O) with cuDNN's F16x16 reordering (as its samples declare it) or without.
enum { ATT_DQ_DIRECT, ATT_DQ_ACCUM_F16x16, ATT_DQ_ACCUM_PLAIN };
static void cudnn_att_backward_graph(CudnnGraph *g, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS, int mask,
                                     int mask_after_stats, int det_head_sum, int dq_accum) {
    const cudnnDataType_t BF16 = CUDNN_DATA_BFLOAT16, F32 = CUDNN_DATA_FLOAT;
    AttShapes d = att_shapes(B, T, NH, NKV, HS);
    AttTensors t = att_tensors(g, &d, 1, BF16, BF16, mask);
    cudnnBackendDescriptor_t one = cg_scalar(g, "1.0", ATT_UID_ONE);
    cudnnBackendDescriptor_t softmax_sum = cg_tensor(g, "softmax_sum", ATT_UID_SOFTMAX_SUM, F32, d.rows, d.rows_st, 0, 0);

    // 1. softmax_sum = rowsum(dO * O) (= rowsum(P * dP))
    cudnnBackendDescriptor_t do_o = cg_virtual(g, "dO*O", F32, d.q, d.o_st);
    cg_pointwise(g, "mul_dO_O", CUDNN_POINTWISE_MUL, F32, t.dO, t.O, NULL, do_o, -1);
    cudnnBackendDescriptor_t do_o_sum = cg_virtual(g, "rowsum_dO*O", F32, d.rows, d.rows_st);
    cg_reduction(g, "reduce_dO_O", CUDNN_REDUCE_TENSOR_ADD, do_o, do_o_sum, -1);
    cg_pointwise(g, "softmax_sum", CUDNN_POINTWISE_MUL, F32, do_o_sum, one, NULL, softmax_sum, -1);

    // 2. recompute P = exp(mask(scale * Q K^T [+ doc_bias]) - Stats)
    cudnnBackendDescriptor_t s = cg_virtual(g, "S", F32, d.scores, d.scores_st);
    cg_matmul(g, "Q x K^T", t.Q, t.KT, s);
    cudnnBackendDescriptor_t s_scaled = cg_virtual(g, "S_scaled", F32, d.scores, d.scores_st);
    cg_pointwise(g, "mul_scale", CUDNN_POINTWISE_MUL, F32, s, t.scale, NULL, s_scaled, -1);
    s_scaled = cg_doc_bias(g, &t, &d, s_scaled);
    cudnnBackendDescriptor_t s_shifted = cg_virtual(g, "S_minus_stats", F32, d.scores, d.scores_st);
    cudnnBackendDescriptor_t s_masked = cg_virtual(g, "S_masked", F32, d.scores, d.scores_st);
    if (!mask_after_stats) {
        cg_causal_mask(g, s_scaled, t.neg_inf, s_masked, d.scores, d.scores_st);
        cg_pointwise(g, "sub_stats", CUDNN_POINTWISE_SUB, F32, s_masked, t.stats, NULL, s_shifted, -1);
    } else {
        cg_pointwise(g, "sub_stats", CUDNN_POINTWISE_SUB, F32, s_scaled, t.stats, NULL, s_shifted, -1);
        cg_causal_mask(g, s_shifted, t.neg_inf, s_masked, d.scores, d.scores_st);
    }
    cudnnBackendDescriptor_t P = cg_virtual(g, "P", F32, d.scores, d.scores_st);
    cg_pointwise(g, "exp", CUDNN_POINTWISE_EXP, F32, mask_after_stats ? s_masked : s_shifted, NULL, NULL, P, -1);

    // 3. dV = P^T x dO (GQA: per query head, then summed over each kv head's group)
    cudnnBackendDescriptor_t PT = cg_virtual(g, "P^T", BF16, d.scores, d.scores_t_st);
    cg_reshape(g, "transpose_P", P, PT);
    cg_kv_grad(g, "P^T x dO", "dV_full_heads", "sum_dV_heads", PT, t.dO, t.dV, d.q, d.full_head_st, NH != NKV, det_head_sum);

    // 4. dS = scale * P * (dO V^T - softmax_sum)
    cudnnBackendDescriptor_t dP = cg_virtual(g, "dP", F32, d.scores, d.scores_st);
    cg_matmul(g, "dO x V^T", t.dO, t.VT, dP);
    cudnnBackendDescriptor_t dp_sub = cg_virtual(g, "dP_minus_sum", F32, d.scores, d.scores_st);
    cg_pointwise(g, "sub_softmax_sum", CUDNN_POINTWISE_SUB, F32, dP, softmax_sum, NULL, dp_sub, -1);
    cudnnBackendDescriptor_t dp_p = cg_virtual(g, "dP_times_P", F32, d.scores, d.scores_st);
    cg_pointwise(g, "mul_P", CUDNN_POINTWISE_MUL, F32, dp_sub, P, NULL, dp_p, -1);
    cudnnBackendDescriptor_t dS = cg_virtual(g, "dS", F32, d.scores, d.scores_st);
    cg_pointwise(g, "mul_scale_dS", CUDNN_POINTWISE_MUL, F32, dp_p, t.scale, NULL, dS, -1);

    // 5. dK = dS^T x Q (GQA as for dV)
    cudnnBackendDescriptor_t dST = cg_virtual(g, "dS^T", BF16, d.scores, d.scores_t_st);
    cg_reshape(g, "transpose_dS", dS, dST);
    cg_kv_grad(g, "dS^T x Q", "dK_full_heads", "sum_dK_heads", dST, t.Q, t.dK, d.q, d.full_head_st, NH != NKV, det_head_sum);

    // 6. dQ = dS x K, written directly (bf16), or accumulated in fp32 and then converted.
    // K is K^T reshaped back; cudnn-frontend leaves this virtual tensor at the intermediate type (fp32).
    cudnnBackendDescriptor_t K = cg_virtual(g, "K", F32, d.kv, d.qkv_st);
    cg_reshape(g, "transpose_K^T", t.KT, K);
    if (dq_accum == ATT_DQ_DIRECT) {
        cg_matmul(g, "dS x K", dS, K, t.dQ);
        return;
    }
    cudnnBackendDescriptor_t acc = cg_tensor_reordered(g, "dQ_accumulator", ATT_UID_DQ_ACCUM, F32, d.q, d.o_st, 0, 0,
        dq_accum == ATT_DQ_ACCUM_F16x16 ? CUDNN_TENSOR_REORDERING_F16x16 : CUDNN_TENSOR_REORDERING_NONE);
    cg_matmul(g, "dS x K", dS, K, acc);
    cg_pointwise(g, "dQ_from_accumulator", CUDNN_POINTWISE_IDENTITY, F32, acc, NULL, NULL, t.dQ, -1);
}

// ---------------------------------------------------------------------------------------------------
// the fp8 graphs (docs/attention.md, fp8 attention): cudnn-frontend's op order, tensor types and virtual
// types (fp32 intermediates; P and dS retyped to fp8 by the multiply with their scale)

// Forward: S = Q K^T x attn_scale x descale_q x descale_k -> causal mask -> softmax (Stats) -> P;
// amax_s = max|P|; P x scale_s as E4M3 -> P V x descale_s x descale_v -> amax_o; x scale_o -> O (E4M3).
static void cudnn_att_fp8_forward_graph(CudnnGraph *g, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    const cudnnDataType_t E4M3 = CUDNN_DATA_FP8_E4M3, F32 = CUDNN_DATA_FLOAT;
    AttShapes d = att_shapes(B, T, NH, NKV, HS);
    AttTensors t = att_tensors(g, &d, 0, E4M3, E4M3, ATT_MASK_CAUSAL);
    cudnnBackendDescriptor_t descale_q = cg_device_scalar(g, "descale_q", ATT_UID_DESCALE_Q);
    cudnnBackendDescriptor_t descale_k = cg_device_scalar(g, "descale_k", ATT_UID_DESCALE_K);
    cudnnBackendDescriptor_t descale_v = cg_device_scalar(g, "descale_v", ATT_UID_DESCALE_V);
    cudnnBackendDescriptor_t descale_s = cg_device_scalar(g, "descale_s", ATT_UID_DESCALE_S);
    cudnnBackendDescriptor_t scale_s = cg_device_scalar(g, "scale_s", ATT_UID_SCALE_S);
    cudnnBackendDescriptor_t scale_o = cg_device_scalar(g, "scale_o", ATT_UID_SCALE_O);
    cudnnBackendDescriptor_t amax_s = cg_device_scalar(g, "amax_s", ATT_UID_AMAX_S);
    cudnnBackendDescriptor_t amax_o = cg_device_scalar(g, "amax_o", ATT_UID_AMAX_O);

    cudnnBackendDescriptor_t s = cg_virtual(g, "S", F32, d.scores, d.scores_st);
    cg_matmul(g, "Q x K^T", t.Q, t.KT, s);
    s = cg_mul(g, "mul_scale", s, t.scale, d.scores, d.scores_st);
    s = cg_mul(g, "mul_descale_q", s, descale_q, d.scores, d.scores_st);
    s = cg_mul(g, "mul_descale_k", s, descale_k, d.scores, d.scores_st);
    cudnnBackendDescriptor_t s_masked = cg_virtual(g, "S_masked", F32, d.scores, d.scores_st);
    cg_causal_mask(g, s, t.neg_inf, s_masked, d.scores, d.scores_st);
    cudnnBackendDescriptor_t P = cg_virtual(g, "P", F32, d.scores, d.scores_st);
    cg_softmax(g, s_masked, t.stats, P, d.scores, d.scores_st, d.rows, d.rows_st);
    cg_reduction(g, "amax_s", CUDNN_REDUCE_TENSOR_AMAX, P, amax_s, -1);
    cudnnBackendDescriptor_t P8 = cg_virtual(g, "P (E4M3)", E4M3, d.scores, d.scores_st); // bmm2's A: the i/o type
    cg_pointwise(g, "mul_scale_s", CUDNN_POINTWISE_MUL, F32, P, scale_s, NULL, P8, -1);
    cg_matmul_fp8(g, "P x V", P8, t.V, descale_s, descale_v, scale_o, t.O, amax_o, d.q, d.q);
}

// Backward (cudnn-frontend's sdpa_fp8_backward): D = rowsum(dO * O) x descale_do x descale_o; P recomputed
// from Q K^T (scaled, descaled, masked) and Stats; dV = fp8(P x scale_s)^T dO; dS = (dO V^T x descales - D)
// x P x attn_scale -> amax_dp, x scale_dp as E5M2; dQ = dS K, dK = dS^T Q. GQA: dK, dV are summed over
// each kv head's group of query heads before their descales (cg_matmul_fp8). dS's fp8 type is dO's.
static void cudnn_att_fp8_backward_graph(CudnnGraph *g, int64_t B, int64_t T, int64_t NH, int64_t NKV, int64_t HS) {
    const cudnnDataType_t E4M3 = CUDNN_DATA_FP8_E4M3, E5M2 = CUDNN_DATA_FP8_E5M2, F32 = CUDNN_DATA_FLOAT;
    AttShapes d = att_shapes(B, T, NH, NKV, HS);
    AttTensors t = att_tensors(g, &d, 1, E4M3, E5M2, ATT_MASK_CAUSAL);
    cudnnBackendDescriptor_t descale_q = cg_device_scalar(g, "descale_q", ATT_UID_DESCALE_Q);
    cudnnBackendDescriptor_t descale_k = cg_device_scalar(g, "descale_k", ATT_UID_DESCALE_K);
    cudnnBackendDescriptor_t descale_v = cg_device_scalar(g, "descale_v", ATT_UID_DESCALE_V);
    cudnnBackendDescriptor_t descale_o = cg_device_scalar(g, "descale_o", ATT_UID_DESCALE_O);
    cudnnBackendDescriptor_t descale_do = cg_device_scalar(g, "descale_do", ATT_UID_DESCALE_DO);
    cudnnBackendDescriptor_t descale_s = cg_device_scalar(g, "descale_s", ATT_UID_DESCALE_S);
    cudnnBackendDescriptor_t descale_dp = cg_device_scalar(g, "descale_dp", ATT_UID_DESCALE_DP);
    cudnnBackendDescriptor_t scale_s = cg_device_scalar(g, "scale_s", ATT_UID_SCALE_S);
    cudnnBackendDescriptor_t scale_dp = cg_device_scalar(g, "scale_dp", ATT_UID_SCALE_DP);
    cudnnBackendDescriptor_t scale_dq = cg_device_scalar(g, "scale_dq", ATT_UID_SCALE_DQ);
    cudnnBackendDescriptor_t scale_dk = cg_device_scalar(g, "scale_dk", ATT_UID_SCALE_DK);
    cudnnBackendDescriptor_t scale_dv = cg_device_scalar(g, "scale_dv", ATT_UID_SCALE_DV);
    cudnnBackendDescriptor_t amax_dq = cg_device_scalar(g, "amax_dq", ATT_UID_AMAX_DQ);
    cudnnBackendDescriptor_t amax_dk = cg_device_scalar(g, "amax_dk", ATT_UID_AMAX_DK);
    cudnnBackendDescriptor_t amax_dv = cg_device_scalar(g, "amax_dv", ATT_UID_AMAX_DV);
    cudnnBackendDescriptor_t amax_dp = cg_device_scalar(g, "amax_dp", ATT_UID_AMAX_DP);

    // 1. softmax_sum D = rowsum(dO * O) x descale_do x descale_o (virtual here, as in cudnn-frontend)
    cudnnBackendDescriptor_t do_o = cg_virtual(g, "dO*O", F32, d.q, d.o_st);
    cg_pointwise(g, "mul_dO_O", CUDNN_POINTWISE_MUL, F32, t.dO, t.O, NULL, do_o, -1);
    cudnnBackendDescriptor_t softmax_sum = cg_virtual(g, "rowsum_dO*O", F32, d.rows, d.rows_st);
    cg_reduction(g, "reduce_dO_O", CUDNN_REDUCE_TENSOR_ADD, do_o, softmax_sum, -1);
    softmax_sum = cg_mul(g, "mul_descale_dO", softmax_sum, descale_do, d.rows, d.rows_st);
    softmax_sum = cg_mul(g, "mul_descale_O", softmax_sum, descale_o, d.rows, d.rows_st);

    // 2. recompute P = exp(mask(Q K^T x attn_scale x descale_q x descale_k) - Stats)
    cudnnBackendDescriptor_t s = cg_virtual(g, "S", F32, d.scores, d.scores_st);
    cg_matmul(g, "Q x K^T", t.Q, t.KT, s);
    s = cg_mul(g, "mul_scale", s, t.scale, d.scores, d.scores_st);
    s = cg_mul(g, "mul_descale_q", s, descale_q, d.scores, d.scores_st);
    s = cg_mul(g, "mul_descale_k", s, descale_k, d.scores, d.scores_st);
    cudnnBackendDescriptor_t s_masked = cg_virtual(g, "S_masked", F32, d.scores, d.scores_st);
    cg_causal_mask(g, s, t.neg_inf, s_masked, d.scores, d.scores_st);
    cudnnBackendDescriptor_t s_shifted = cg_virtual(g, "S_minus_stats", F32, d.scores, d.scores_st);
    cg_pointwise(g, "sub_stats", CUDNN_POINTWISE_SUB, F32, s_masked, t.stats, NULL, s_shifted, -1);
    cudnnBackendDescriptor_t P = cg_virtual(g, "P", F32, d.scores, d.scores_st);
    cg_pointwise(g, "exp", CUDNN_POINTWISE_EXP, F32, s_shifted, NULL, NULL, P, -1);

    // 3. dV = fp8(P x scale_s)^T x dO (GQA: per query head, then summed over each kv head's group)
    cudnnBackendDescriptor_t P8 = cg_virtual(g, "P (E4M3)", E4M3, d.scores, d.scores_st);
    cg_pointwise(g, "mul_scale_s", CUDNN_POINTWISE_MUL, F32, P, scale_s, NULL, P8, -1);
    cudnnBackendDescriptor_t P8T = cg_virtual(g, "P^T (E4M3)", E4M3, d.scores, d.scores_t_st);
    cg_reshape(g, "transpose_P", P8, P8T);
    cg_matmul_fp8(g, "P^T x dO", P8T, t.dO, descale_s, descale_do, scale_dv, t.dV, amax_dv, d.q, d.kv);

    // 4. dS = (dO V^T x descale_do x descale_v - D) x P x attn_scale; amax_dp; x scale_dp as E5M2
    cudnnBackendDescriptor_t dP = cg_virtual(g, "dP", F32, d.scores, d.scores_st);
    cg_matmul(g, "dO x V^T", t.dO, t.VT, dP);
    dP = cg_mul(g, "mul_descale_dO_dP", dP, descale_do, d.scores, d.scores_st);
    dP = cg_mul(g, "mul_descale_V", dP, descale_v, d.scores, d.scores_st);
    cudnnBackendDescriptor_t dp_sub = cg_virtual(g, "dP_minus_sum", F32, d.scores, d.scores_st);
    cg_pointwise(g, "sub_softmax_sum", CUDNN_POINTWISE_SUB, F32, dP, softmax_sum, NULL, dp_sub, -1);
    cudnnBackendDescriptor_t dS = cg_mul(g, "mul_P", dp_sub, P, d.scores, d.scores_st);
    dS = cg_mul(g, "mul_scale_dS", dS, t.scale, d.scores, d.scores_st);
    cg_reduction(g, "amax_dP", CUDNN_REDUCE_TENSOR_AMAX, dS, amax_dp, -1);
    cudnnBackendDescriptor_t dS8 = cg_virtual(g, "dS (E5M2)", E5M2, d.scores, d.scores_st);
    cg_pointwise(g, "mul_scale_dP", CUDNN_POINTWISE_MUL, F32, dS, scale_dp, NULL, dS8, -1);

    // 5. dQ = dS x K. K is K^T reshaped back; cudnn-frontend leaves it at the intermediate type (fp32).
    cudnnBackendDescriptor_t K = cg_virtual(g, "K", F32, d.kv, d.qkv_st);
    cg_reshape(g, "transpose_K^T", t.KT, K);
    cg_matmul_fp8(g, "dS x K", dS8, K, descale_dp, descale_k, scale_dq, t.dQ, amax_dq, d.q, d.q);

    // 6. dK = dS^T x Q (GQA as for dV)
    cudnnBackendDescriptor_t dS8T = cg_virtual(g, "dS^T (E5M2)", E5M2, d.scores, d.scores_t_st);
    cg_reshape(g, "transpose_dS", dS8, dS8T);
    cg_matmul_fp8(g, "dS^T x Q", dS8T, t.Q, descale_dp, descale_q, scale_dk, t.dK, amax_dk, d.q, d.kv);
}

// ---------------------------------------------------------------------------------------------------
// plan: heuristics -> the first engine config that finalizes (deterministic backward: not marked
// NONDETERMINISTIC). dev/cuda/attention's config sweep asks for the k-th config instead
// (cudnn_att_set_config; the trainer never does): the configs of mode A, then FALLBACK's, counted together.

static int g_cudnn_att_config = -1;       // -1: the first that finalizes; k >= 0: the k-th offered, or no plan
static int g_cudnn_att_configs_offered;   // how many the last plan's heuristics offered (both modes)
static int g_cudnn_att_config_taken;      // which of them (counted as above) the last plan was built from
static char g_cudnn_att_config_desc[160]; // the last plan's config: its engine and knob choices

static void cudnn_att_set_config(int k) { g_cudnn_att_config = k; }

// "engine E, knobs type=value ..." of an engine config, into buf
static void cudnn_att_describe_config(cudnnBackendDescriptor_t cfg, int64_t engine_index, char *buf, size_t n) {
    int len = snprintf(buf, n, "engine %lld, knobs", (long long)engine_index);
    cudnnBackendDescriptor_t choices[16];
    int64_t count = 0, made = 0;
    for (; made < 16; made++)
        if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_KNOB_CHOICE_DESCRIPTOR, &choices[made]) != CUDNN_STATUS_SUCCESS) break;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_KNOB_CHOICES, CUDNN_TYPE_BACKEND_DESCRIPTOR, made, &count,
                                 choices) != CUDNN_STATUS_SUCCESS) count = 0;
    for (int64_t i = 0; i < count && len > 0 && (size_t)len < n; i++) {
        cudnnBackendKnobType_t type = (cudnnBackendKnobType_t)0;
        int64_t value = 0, got = 0;
        cudnnBackendGetAttribute(choices[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_TYPE, CUDNN_TYPE_KNOB_TYPE, 1, &got, &type);
        cudnnBackendGetAttribute(choices[i], CUDNN_ATTR_KNOB_CHOICE_KNOB_VALUE, CUDNN_TYPE_INT64, 1, &got, &value);
        len += snprintf(buf + len, n - len, " %d=%lld", (int)type, (long long)value);
    }
    if (count == 0 && len > 0 && (size_t)len < n) snprintf(buf + len, n - len, " none");
    for (int64_t i = 0; i < made; i++) cudnnBackendDestroyDescriptor(choices[i]);
}

static int cudnn_att_config_is_nondeterministic(cudnnBackendDescriptor_t cfg, int64_t *engine_index) {
    cudnnBackendDescriptor_t engine = NULL;
    int nondet = 0;
    *engine_index = -1;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINE_DESCRIPTOR, &engine) != CUDNN_STATUS_SUCCESS) return 0;
    int64_t n = 0;
    if (cudnnBackendGetAttribute(cfg, CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &engine) == CUDNN_STATUS_SUCCESS) {
        cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1, &n, engine_index);
        cudnnBackendNumericalNote_t notes[CUDNN_NUMERICAL_NOTE_TYPE_COUNT];
        int64_t nnotes = 0;
        if (cudnnBackendGetAttribute(engine, CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                     CUDNN_NUMERICAL_NOTE_TYPE_COUNT, &nnotes, notes) == CUDNN_STATUS_SUCCESS) {
            for (int64_t i = 0; i < nnotes; i++) nondet |= notes[i] == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC;
        }
    }
    cudnnBackendDestroyDescriptor(engine);
    return nondet;
}

// Finalizes g's operation graph and finds a plan: 1 on success (engine = its global index), else 0 with
// g->status and g->where saying why.
static int cudnn_att_make_plan(CudnnGraph *g, int deterministic, int64_t *engine) {
    CudnnAttPlan *p = g->p;
    cudnnBackendDescriptor_t graph = cg_create(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "operation graph");
    CG_SET(g, graph, "operation graph", CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_cudnn_handle);
    CG_SET(g, graph, "operation graph", CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    cg_finalize(g, graph, "operation graph");
    if (!cg_ok(g)) return 0;

    const cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    const char *mode_names[2] = {"heuristics mode A", "heuristics mode FALLBACK"};
    cudnnStatus_t last_status = CUDNN_STATUS_NOT_SUPPORTED;
    char last_where[256] = "no engine config offered by the heuristics";
    int skipped_nondet = 0, offered = 0;
    g_cudnn_att_configs_offered = 0;
    for (int mi = 0; mi < 2; mi++) {
        cudnnBackendDescriptor_t heur = cg_create(g, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, mode_names[mi]);
        CG_SET(g, heur, mode_names[mi], CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph);
        CG_SET(g, heur, mode_names[mi], CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]);
        cg_finalize(g, heur, mode_names[mi]);
        int64_t count = 0;
        if (cg_ok(g)) {
            cg_check(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL),
                     "cudnnBackendGetAttribute", mode_names[mi], "CUDNN_ATTR_ENGINEHEUR_RESULTS (count)");
        }
        if (!cg_ok(g)) { // a failing heuristics mode is not fatal: remember it and try the next one
            last_status = g->status;
            snprintf(last_where, sizeof(last_where), "%s", g->where);
            g->status = CUDNN_STATUS_SUCCESS;
            continue;
        }
        if (count > 16) count = 16;
        cudnnBackendDescriptor_t cfgs[16];
        for (int64_t i = 0; i < count; i++) cfgs[i] = cg_create(g, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "engine config");
        int64_t got = 0;
        if (cg_ok(g) && count > 0) {
            cg_check(g, cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs),
                     "cudnnBackendGetAttribute", mode_names[mi], "CUDNN_ATTR_ENGINEHEUR_RESULTS");
        }
        if (!cg_ok(g)) return 0;
        g_cudnn_att_configs_offered += (int)got;
        for (int64_t i = 0; i < got; i++, offered++) {
            int64_t engine_index = -1;
            if (g_cudnn_att_config >= 0 && offered != g_cudnn_att_config) continue;
            if (deterministic && cudnn_att_config_is_nondeterministic(cfgs[i], &engine_index)) {
                skipped_nondet++;
                continue;
            }
            cudnnBackendDescriptor_t plan = NULL;
            cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
            if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &g_cudnn_handle);
            if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
            if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(plan); // compiles the kernel (NVRTC): slow
            int64_t n = 0, ws = 0;
            if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
            if (st == CUDNN_STATUS_SUCCESS) {
                p->plan = plan;
                p->plan_workspace = ws;
                p->nondeterministic = cudnn_att_config_is_nondeterministic(cfgs[i], &engine_index);
                *engine = engine_index;
                cudnn_att_describe_config(cfgs[i], engine_index, g_cudnn_att_config_desc, sizeof(g_cudnn_att_config_desc));
                g_cudnn_att_config_taken = offered;
                return 1;
            }
            char detail[200] = "";
            cudnnGetLastErrorString(detail, sizeof(detail));
            last_status = st;
            snprintf(last_where, sizeof(last_where), "execution plan for %s config %lld: %s", mode_names[mi], (long long)i, detail);
            if (plan) cudnnBackendDestroyDescriptor(plan);
        }
    }
    g->status = last_status;
    if (skipped_nondet > 0) {
        snprintf(g->where, sizeof(g->where), "%s; %d engine config(s) refused as NONDETERMINISTIC", last_where, skipped_nondet);
    } else {
        snprintf(g->where, sizeof(g->where), "%s", last_where);
    }
    return 0;
}

static void cudnn_att_free_plan(CudnnAttPlan *p) {
    if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
    for (int i = p->ndescs - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(p->descs[i]);
    p->plan = NULL;
    p->ndescs = 0;
}

// Grows the shared workspace (only ever while a plan is being built).
static void cudnn_att_reserve_workspace(size_t bytes) {
    if (bytes <= g_cudnn_workspace_bytes) return;
    if (g_cudnn_workspace) cudaCheck(cudaFree(g_cudnn_workspace)); // cudaFree waits for work still using it
    g_cudnn_workspace = cudaMallocCheck(bytes, "the cuDNN attention workspace");
    g_cudnn_workspace_bytes = bytes;
}

static int g_cudnn_att_deterministic = 0; // the backward form new plans get (see the top of this file)

// 1: the deterministic backward (bit-reproducible); 0: the fast one with the fp32 dQ accumulator.
static void cudnn_att_set_deterministic(int deterministic) { g_cudnn_att_deterministic = deterministic != 0; }

// One way to build the backward graph; cudnn_att_get_plan tries them in order until one gets a plan.
typedef struct { int dq_accum, mask_after_stats, det_head_sum; } AttBackwardVariant;

static void att_variant_name(char *buf, size_t n, AttBackwardVariant v) {
    static const char *dq[3] = {"dQ direct", "dQ fp32 accumulator (F16x16)", "dQ fp32 accumulator"};
    snprintf(buf, n, "%s, mask %s Stats%s", dq[v.dq_accum], v.mask_after_stats ? "after" : "before",
             v.det_head_sum == 1 ? ", head sums IS_DETERMINISTIC" : "");
}

// The forms to try: the fast backward's accumulator variants first (unless deterministic), then the
// direct dQ; within each, the recipe's mask order, then the newer cudnn-frontend's; for GQA on cuDNN
// >= 9.11 each first with the head sums flagged deterministic.
static int att_backward_variants(AttBackwardVariant *v, int gqa, int deterministic) {
    const int accs[3] = {ATT_DQ_ACCUM_F16x16, ATT_DQ_ACCUM_PLAIN, ATT_DQ_DIRECT};
    const int flag_head_sums = gqa && g_cudnn_version >= 91100 && CUDNN_VERSION >= 91100;
    int n = 0;
    for (int a = deterministic ? 2 : 0; a < 3; a++)
        for (int mask = 0; mask < 2; mask++)
            for (int h = flag_head_sums ? 0 : 1; h < 2; h++) v[n++] = (AttBackwardVariant){accs[a], mask, h == 0 ? 1 : -1};
    return n;
}

// The cached plan of this shape, direction, precision and mask (and backward form), or NULL if none was built.
static CudnnAttPlan *cudnn_att_find_plan(int B, int T, int NH, int NKV, int HS, int backward, int fp8, int mask) {
    const int deterministic = backward ? g_cudnn_att_deterministic : 1;
    for (int i = 0; i < g_cudnn_nplans; i++) {
        CudnnAttPlan *p = &g_cudnn_plans[i];
        if (p->B == B && p->T == T && p->NH == NH && p->NKV == NKV && p->HS == HS && p->backward == backward &&
            p->deterministic == deterministic && p->fp8 == fp8 && p->mask == mask) {
            return p;
        }
    }
    return NULL;
}

// The cached plan for this shape, direction, precision and mask (and backward form), built on first
// use; NULL if it cannot be built.
static CudnnAttPlan *cudnn_att_get_plan(int B, int T, int NH, int NKV, int HS, int backward, int fp8, int mask) {
    const int deterministic = backward ? g_cudnn_att_deterministic : 1;
    CudnnAttPlan *found = cudnn_att_find_plan(B, T, NH, NKV, HS, backward, fp8, mask);
    if (found != NULL) return found->failed ? NULL : found;
    const char *dir = fp8 ? (backward ? "fp8 backward" : "fp8 forward")
                    : mask == ATT_MASK_DOC_BIAS ? (backward ? "document-masked backward" : "document-masked forward")
                    : (backward ? "backward" : "forward");
    const char *fallback = fp8 ? "the caller's fallback runs" : "this shape uses the plain kernel";
    if (g_cudnn_nplans == CUDNN_ATT_MAX_PLANS) {
        printf("attention: cuDNN %s plan cache full (%d shapes); B=%d T=%d NH=%d NKV=%d HS=%d: %s\n",
               dir, CUDNN_ATT_MAX_PLANS, B, T, NH, NKV, HS, fallback);
        return NULL;
    }
    CudnnAttPlan *p = &g_cudnn_plans[g_cudnn_nplans++];
    memset(p, 0, sizeof(*p));
    p->B = B; p->T = T; p->NH = NH; p->NKV = NKV; p->HS = HS; p->backward = backward; p->deterministic = deterministic;
    p->fp8 = fp8; p->mask = mask;
    p->scale = 1.0f / sqrtf((float)HS);
    // cudnn-frontend masks with the lowest float before cuDNN 9.10 (its fp8 graphs included), -inf after
    p->neg_inf = fp8 && g_cudnn_version < 91000 ? -FLT_MAX : -INFINITY;
    p->one = 1.0f;

    AttBackwardVariant variants[12];
    const int nvariants = backward && !fp8 ? att_backward_variants(variants, NH != NKV, deterministic) : 1;
    int64_t engine = -1;
    int vi = 0;
    char name[128] = "";
    for (; vi < nvariants; vi++) {
        cudnn_att_free_plan(p);
        CudnnGraph g;
        memset(&g, 0, sizeof(g));
        g.p = p;
        g.status = CUDNN_STATUS_SUCCESS;
        g.next_uid = ATT_UID_FIRST_VIRTUAL;
        if (fp8) {
            if (backward) cudnn_att_fp8_backward_graph(&g, B, T, NH, NKV, HS);
            else cudnn_att_fp8_forward_graph(&g, B, T, NH, NKV, HS);
        } else if (backward) {
            const AttBackwardVariant v = variants[vi];
            att_variant_name(name, sizeof(name), v);
            cudnn_att_backward_graph(&g, B, T, NH, NKV, HS, mask, v.mask_after_stats, v.det_head_sum, v.dq_accum);
        } else {
            cudnn_att_forward_graph(&g, B, T, NH, NKV, HS, mask);
        }
        if (cg_ok(&g) && cudnn_att_make_plan(&g, backward && deterministic, &engine)) break;
        char detail[256] = "";
        cudnnGetLastErrorString(detail, sizeof(detail));
        snprintf(p->failure, sizeof(p->failure), "%s failed: %s%s%s", g.where, cudnnGetErrorString(g.status),
                 detail[0] ? " - " : "", detail);
        printf("attention: cuDNN %s graph for B=%d T=%d NH=%d NKV=%d HS=%d%s%s: %s\n", dir, B, T, NH, NKV, HS,
               name[0] ? ", variant " : "", name, p->failure);
    }
    if (vi == nvariants) {
        printf("attention: no cuDNN %s plan for B=%d T=%d NH=%d NKV=%d HS=%d; %s\n", dir, B, T, NH, NKV, HS, fallback);
        cudnn_att_free_plan(p);
        p->failed = 1;
        return NULL;
    }
    p->failure[0] = '\0';
    size_t need = (size_t)p->plan_workspace;
    if (fp8) {
        p->fp8_scalars_offset = CEIL_DIV(need, 256) * 256;
        need = p->fp8_scalars_offset + ATT_FP8_NSCALARS * ATT_FP8_SLOT_FLOATS * sizeof(float);
    } else if (backward) {
        p->softmax_sum_offset = CEIL_DIV(need, 256) * 256;
        need = p->softmax_sum_offset + (size_t)B * NH * T * sizeof(float);
        if (variants[vi].dq_accum != ATT_DQ_DIRECT) {
            p->dq_accum_offset = CEIL_DIV(need, 256) * 256;
            p->dq_accum_bytes = (size_t)B * T * NH * HS * sizeof(float);
            need = p->dq_accum_offset + p->dq_accum_bytes;
        }
    }
    cudnn_att_reserve_workspace(need);
    printf("attention: cuDNN %s plan for B=%d T=%d NH=%d NKV=%d HS=%d: engine %lld, workspace %.1f MiB%s%s%s\n",
           dir, B, T, NH, NKV, HS, (long long)engine, need / 1048576.0, name[0] ? ", graph variant: " : "", name,
           fp8 && p->nondeterministic ? ", engine marked NONDETERMINISTIC" : "");
    return p;
}

// Why the plan of this shape could not be built (what cuDNN said), or NULL if it was built or not tried.
static const char *cudnn_att_plan_failure(int B, int T, int NH, int NKV, int HS, int backward, int fp8, int mask) {
    CudnnAttPlan *p = cudnn_att_find_plan(B, T, NH, NKV, HS, backward, fp8, mask);
    if (p == NULL) return g_cudnn_nplans == CUDNN_ATT_MAX_PLANS ? "the plan cache is full" : NULL;
    return p->failed ? p->failure : NULL;
}

static void cudnn_att_execute(CudnnAttPlan *p, int n, const int64_t *uids, void **ptrs, cudaStream_t stream) {
    cudnnBackendDescriptor_t pack = NULL;
    cudnnCheck(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack));
    cudnnCheck(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids));
    cudnnCheck(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs));
    cudnnCheck(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &g_cudnn_workspace));
    cudnnCheck(cudnnBackendFinalize(pack));
    cudnnCheck(cudnnSetStream(g_cudnn_handle, stream));
    cudnnCheck(cudnnBackendExecute(g_cudnn_handle, p->plan, pack));
    cudnnCheck(cudnnBackendDestroyDescriptor(pack));
}

// ---------------------------------------------------------------------------------------------------
// what llmc/attention.cuh calls

// NULL if cuDNN's fused attention takes this shape, else why not (for logs).
static const char *cudnn_att_unsupported(int T, int NH, int NKV, int HS) {
    if (g_cudnn_handle == NULL) return "plain (cuDNN not initialized)";
    if (T % 128 != 0) return "plain (T % 128 != 0: cuDNN <= 9.15 backward NaNs)";
    if (HS % 8 != 0 || HS > 128) return "plain (cuDNN path needs HS % 8 == 0 and HS <= 128)";
    if (NKV <= 0 || NH % NKV != 0) return "plain (NH % NKV != 0)";
    return NULL;
}

// 1 if a plan for this shape (and mask: ATT_MASK_*) exists or could be built now.
static int cudnn_att_plan_ready(int B, int T, int NH, int NKV, int HS, int backward, int mask) {
    return cudnn_att_get_plan(B, T, NH, NKV, HS, backward, 0, mask) != NULL;
}

// doc_bias (B, 1, T, T) bf16: document masking (the top of this file), NULL: causal. Returns 0 (having
// done nothing) if there is no plan for the shape: the caller runs the plain kernel.
static int cudnn_att_forward(floatX *out, float *stats, const floatX *qkv, const floatX *doc_bias, int B, int T, int NH,
                             int NKV, int HS, cudaStream_t stream) {
    CudnnAttPlan *p = cudnn_att_get_plan(B, T, NH, NKV, HS, 0, 0, doc_bias != NULL ? ATT_MASK_DOC_BIAS : ATT_MASK_CAUSAL);
    if (p == NULL) return 0;
    int64_t uids[8] = {ATT_UID_Q, ATT_UID_KT, ATT_UID_V, ATT_UID_O, ATT_UID_STATS, ATT_UID_SCALE, ATT_UID_NEG_INF,
                       ATT_UID_DOC_BIAS};
    void *ptrs[8] = {(void *)qkv, (void *)(qkv + (size_t)NH * HS), (void *)(qkv + (size_t)(NH + NKV) * HS),
                     (void *)out, (void *)stats, &p->scale, &p->neg_inf, (void *)doc_bias};
    cudnn_att_execute(p, p->mask == ATT_MASK_DOC_BIAS ? 8 : 7, uids, ptrs, stream); // the pack holds the plan's tensors
    return 1;
}

static int cudnn_att_backward(floatX *dqkv, const floatX *dout, const floatX *qkv, const floatX *out, const float *stats,
                              const floatX *doc_bias, int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    CudnnAttPlan *p = cudnn_att_get_plan(B, T, NH, NKV, HS, 1, 0, doc_bias != NULL ? ATT_MASK_DOC_BIAS : ATT_MASK_CAUSAL);
    if (p == NULL) return 0;
    void *softmax_sum = (char *)g_cudnn_workspace + p->softmax_sum_offset;
    void *dq_accum = (char *)g_cudnn_workspace + p->dq_accum_offset;
    int64_t uids[15] = {ATT_UID_Q, ATT_UID_KT, ATT_UID_VT, ATT_UID_O, ATT_UID_DO, ATT_UID_STATS, ATT_UID_SCALE,
                        ATT_UID_NEG_INF, ATT_UID_ONE, ATT_UID_DQ, ATT_UID_DK, ATT_UID_DV, ATT_UID_SOFTMAX_SUM};
    void *ptrs[15] = {(void *)qkv, (void *)(qkv + (size_t)NH * HS), (void *)(qkv + (size_t)(NH + NKV) * HS),
                      (void *)out, (void *)dout, (void *)stats, &p->scale, &p->neg_inf, &p->one,
                      (void *)dqkv, (void *)(dqkv + (size_t)NH * HS), (void *)(dqkv + (size_t)(NH + NKV) * HS), softmax_sum};
    int n = 13; // the pack holds the plan's tensors: these, the fast form's accumulator, the document bias
    if (p->dq_accum_bytes > 0) {
        cudaCheck(cudaMemsetAsync(dq_accum, 0, p->dq_accum_bytes, stream));
        uids[n] = ATT_UID_DQ_ACCUM; ptrs[n++] = dq_accum;
    }
    if (p->mask == ATT_MASK_DOC_BIAS) { uids[n] = ATT_UID_DOC_BIAS; ptrs[n++] = (void *)doc_bias; }
    cudnn_att_execute(p, n, uids, ptrs, stream);
    return 1;
}

// ---------------------------------------------------------------------------------------------------
// fp8 attention (see the top of this file). The scaling factors, each a device pointer to one fp32
// (any 4-byte-aligned address: cuDNN gets aligned copies). scale_x multiplies x into its fp8 range
// before the cast; descale_x = 1 / x's scale undoes it (TE's scale_inv). Every field is required.
// amax_x: max|x| before scaling, max-accumulated into *amax_x (zero it first for this call's value).

typedef struct {
    const float *descale_q, *descale_k, *descale_v; // Q, K, V's E4M3 codes in qkv (one pointer for one qkv scale)
    const float *scale_s, *descale_s;  // P = softmax(S), cast to E4M3 inside the kernel (TE's "S" slot)
    const float *scale_o;              // O's E4M3 cast (out)
    float *amax_s, *amax_o;            // max|P|, max|O|, before scale_s / scale_o
} CudnnAttFp8Forward;

typedef struct {
    const float *descale_q, *descale_k, *descale_v; // as in the forward
    const float *descale_o, *descale_do; // the forward's out (E4M3) and dout (E5M2)
    const float *scale_s, *descale_s;  // the forward's: P is recomputed and cast to E4M3 the same way
    const float *scale_dp, *descale_dp; // dS = P * (dP - D) * attn_scale cast to E5M2 inside the kernel (TE's "dP")
    const float *scale_dq, *scale_dk, *scale_dv; // the E5M2 casts of dQ, dK, dV (dqkv)
    float *amax_dq, *amax_dk, *amax_dv, *amax_dp; // before their scales
} CudnnAttFp8Backward;

// The caller's scalars, by slot (slot i is the workspace copy of unique id ATT_UID_DESCALE_Q + i).
typedef struct { const float *in[ATT_FP8_NSCALARS]; float *amax[ATT_FP8_NSCALARS]; } AttFp8Scalars;

// Before the cuDNN call: copy the scales and descales into their slots, zero the amax slots.
__global__ void att_fp8_scalars_in_kernel(float *slots, AttFp8Scalars s) {
    const int i = threadIdx.x;
    if (i >= ATT_FP8_NSCALARS) return;
    if (s.in[i] != NULL) slots[i * ATT_FP8_SLOT_FLOATS] = *s.in[i];
    if (s.amax[i] != NULL) slots[i * ATT_FP8_SLOT_FLOATS] = 0.0f;
}

// After it: max the amaxes into the caller's. Non-negative floats order like their bit patterns, so an
// integer max merges them (a NaN wins, as in llmc/packed.cuh's block_commit_amax).
__global__ void att_fp8_amax_out_kernel(const float *slots, AttFp8Scalars s) {
    const int i = threadIdx.x;
    if (i < ATT_FP8_NSCALARS && s.amax[i] != NULL) {
        atomicMax((int *)s.amax[i], (int)(__float_as_uint(slots[i * ATT_FP8_SLOT_FLOATS]) & 0x7fffffffu));
    }
}

static void att_fp8_set(AttFp8Scalars *s, int uid, const float *in, float *amax, const char *what) {
    if (in == NULL && amax == NULL) FATAL("cuDNN fp8 attention: %s is NULL (every scale, descale and amax is required)", what);
    s->in[uid - ATT_UID_DESCALE_Q] = in;
    s->amax[uid - ATT_UID_DESCALE_Q] = amax;
}

// Runs p with the n tensors in uids/ptrs plus the fp8 scalars of s (uids, ptrs: room for n + ATT_FP8_NSCALARS).
static void cudnn_att_fp8_execute(CudnnAttPlan *p, int n, int64_t *uids, void **ptrs, const AttFp8Scalars *s,
                                  cudaStream_t stream) {
    float *slots = (float *)((char *)g_cudnn_workspace + p->fp8_scalars_offset);
    for (int i = 0; i < ATT_FP8_NSCALARS; i++) {
        if (s->in[i] == NULL && s->amax[i] == NULL) continue;
        uids[n] = ATT_UID_DESCALE_Q + i;
        ptrs[n++] = slots + i * ATT_FP8_SLOT_FLOATS;
    }
    att_fp8_scalars_in_kernel<<<1, 32, 0, stream>>>(slots, *s);
    cudaLaunchCheck();
    cudnn_att_execute(p, n, uids, ptrs, stream);
    att_fp8_amax_out_kernel<<<1, 32, 0, stream>>>(slots, *s);
    cudaLaunchCheck();
}

// NULL if cuDNN's fp8 attention takes this shape on this device, else why not.
static const char *cudnn_att_fp8_unsupported(int T, int NH, int NKV, int HS, int backward) {
    if (g_cudnn_handle == NULL) return "cuDNN not initialized";
    if (g_cudnn_sm_major < 9) return "fp8 attention needs sm_90 (Hopper) or newer";
    if (g_cudnn_version < 90100) return "fp8 attention needs cuDNN >= 9.1.0";
    if (T % 128 != 0) return "T % 128 != 0 (as the bf16 path: cuDNN <= 9.15 backward NaNs)";
    if (NKV <= 0 || NH % NKV != 0) return "NH % NKV != 0";
    if (g_cudnn_sm_major == 9) {
        if (backward && HS != 128) return "cuDNN's fp8 backward needs HS == 128 on Hopper";
        if (HS % 16 != 0 || HS > 256) return "cuDNN's fp8 forward needs HS % 16 == 0 and HS <= 256 on Hopper";
    } else if (HS % 16 != 0 || HS > 128) {
        return "cuDNN's fp8 attention needs HS % 16 == 0 and HS <= 128 on this GPU";
    }
    return NULL;
}

// 1 if an fp8 plan for this shape exists or could be built now (cudnn_att_plan_failure says why not).
static int cudnn_att_fp8_plan_ready(int B, int T, int NH, int NKV, int HS, int backward) {
    return cudnn_att_fp8_unsupported(T, NH, NKV, HS, backward) == NULL &&
           cudnn_att_get_plan(B, T, NH, NKV, HS, backward, 1, ATT_MASK_CAUSAL) != NULL;
}

// out (B, T, NH*HS) E4M3, stats (B, NH, T) fp32, *sc's amaxes <- qkv (B, T, NH + 2*NKV, HS) E4M3.
// Returns 0 (having done nothing) if the shape is unsupported or has no plan; the caller falls back.
static int cudnn_att_fp8_forward(fp8e4 *out, float *stats, const fp8e4 *qkv, const CudnnAttFp8Forward *sc,
                                 int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    if (cudnn_att_fp8_unsupported(T, NH, NKV, HS, 0) != NULL) return 0;
    CudnnAttPlan *p = cudnn_att_get_plan(B, T, NH, NKV, HS, 0, 1, ATT_MASK_CAUSAL);
    if (p == NULL) return 0;
    AttFp8Scalars s;
    memset(&s, 0, sizeof(s));
    att_fp8_set(&s, ATT_UID_DESCALE_Q, sc->descale_q, NULL, "descale_q");
    att_fp8_set(&s, ATT_UID_DESCALE_K, sc->descale_k, NULL, "descale_k");
    att_fp8_set(&s, ATT_UID_DESCALE_V, sc->descale_v, NULL, "descale_v");
    att_fp8_set(&s, ATT_UID_DESCALE_S, sc->descale_s, NULL, "descale_s");
    att_fp8_set(&s, ATT_UID_SCALE_S, sc->scale_s, NULL, "scale_s");
    att_fp8_set(&s, ATT_UID_SCALE_O, sc->scale_o, NULL, "scale_o");
    att_fp8_set(&s, ATT_UID_AMAX_S, NULL, sc->amax_s, "amax_s");
    att_fp8_set(&s, ATT_UID_AMAX_O, NULL, sc->amax_o, "amax_o");
    int64_t uids[7 + ATT_FP8_NSCALARS] = {ATT_UID_Q, ATT_UID_KT, ATT_UID_V, ATT_UID_O, ATT_UID_STATS, ATT_UID_SCALE,
                                          ATT_UID_NEG_INF};
    void *ptrs[7 + ATT_FP8_NSCALARS] = {(void *)qkv, (void *)(qkv + (size_t)NH * HS), (void *)(qkv + (size_t)(NH + NKV) * HS),
                                        (void *)out, (void *)stats, &p->scale, &p->neg_inf};
    cudnn_att_fp8_execute(p, 7, uids, ptrs, &s, stream);
    return 1;
}

// dqkv (B, T, NH + 2*NKV, HS) E5M2 (written, not accumulated), *sc's amaxes <- dout (B, T, NH*HS) E5M2,
// qkv and out (E4M3) and stats of the fp8 forward. Returns 0 (having done nothing) like the forward.
static int cudnn_att_fp8_backward(fp8e5 *dqkv, const fp8e5 *dout, const fp8e4 *qkv, const fp8e4 *out, const float *stats,
                                  const CudnnAttFp8Backward *sc, int B, int T, int NH, int NKV, int HS, cudaStream_t stream) {
    if (cudnn_att_fp8_unsupported(T, NH, NKV, HS, 1) != NULL) return 0;
    CudnnAttPlan *p = cudnn_att_get_plan(B, T, NH, NKV, HS, 1, 1, ATT_MASK_CAUSAL);
    if (p == NULL) return 0;
    AttFp8Scalars s;
    memset(&s, 0, sizeof(s));
    att_fp8_set(&s, ATT_UID_DESCALE_Q, sc->descale_q, NULL, "descale_q");
    att_fp8_set(&s, ATT_UID_DESCALE_K, sc->descale_k, NULL, "descale_k");
    att_fp8_set(&s, ATT_UID_DESCALE_V, sc->descale_v, NULL, "descale_v");
    att_fp8_set(&s, ATT_UID_DESCALE_O, sc->descale_o, NULL, "descale_o");
    att_fp8_set(&s, ATT_UID_DESCALE_DO, sc->descale_do, NULL, "descale_do");
    att_fp8_set(&s, ATT_UID_DESCALE_S, sc->descale_s, NULL, "descale_s");
    att_fp8_set(&s, ATT_UID_DESCALE_DP, sc->descale_dp, NULL, "descale_dp");
    att_fp8_set(&s, ATT_UID_SCALE_S, sc->scale_s, NULL, "scale_s");
    att_fp8_set(&s, ATT_UID_SCALE_DP, sc->scale_dp, NULL, "scale_dp");
    att_fp8_set(&s, ATT_UID_SCALE_DQ, sc->scale_dq, NULL, "scale_dq");
    att_fp8_set(&s, ATT_UID_SCALE_DK, sc->scale_dk, NULL, "scale_dk");
    att_fp8_set(&s, ATT_UID_SCALE_DV, sc->scale_dv, NULL, "scale_dv");
    att_fp8_set(&s, ATT_UID_AMAX_DQ, NULL, sc->amax_dq, "amax_dq");
    att_fp8_set(&s, ATT_UID_AMAX_DK, NULL, sc->amax_dk, "amax_dk");
    att_fp8_set(&s, ATT_UID_AMAX_DV, NULL, sc->amax_dv, "amax_dv");
    att_fp8_set(&s, ATT_UID_AMAX_DP, NULL, sc->amax_dp, "amax_dp");
    int64_t uids[11 + ATT_FP8_NSCALARS] = {ATT_UID_Q, ATT_UID_KT, ATT_UID_VT, ATT_UID_O, ATT_UID_DO, ATT_UID_STATS,
                                           ATT_UID_SCALE, ATT_UID_NEG_INF, ATT_UID_DQ, ATT_UID_DK, ATT_UID_DV};
    void *ptrs[11 + ATT_FP8_NSCALARS] = {(void *)qkv, (void *)(qkv + (size_t)NH * HS), (void *)(qkv + (size_t)(NH + NKV) * HS),
                                         (void *)out, (void *)dout, (void *)stats, &p->scale, &p->neg_inf, (void *)dqkv,
                                         (void *)(dqkv + (size_t)NH * HS), (void *)(dqkv + (size_t)(NH + NKV) * HS)};
    cudnn_att_fp8_execute(p, 11, uids, ptrs, &s, stream);
    return 1;
}

// 1 if the fused path is usable; prints what was found either way.
static int cudnn_att_init(void) {
    if (g_cudnn_handle != NULL) return 1;
    g_cudnn_version = cudnnGetVersion();
    int major = (int)(g_cudnn_version / 10000), minor = (int)(g_cudnn_version / 100 % 100), patch = (int)(g_cudnn_version % 100);
    if (g_cudnn_version < 90000) {
        printf("attention: cuDNN %d.%d.%d is older than 9.0; using the plain attention kernels\n", major, minor, patch);
        return 0;
    }
    if (g_cudnn_version == 91000 || g_cudnn_version == 91001) {
        printf("attention: cuDNN %d.%d.%d has known-bad fused attention (9.10.0/9.10.1); using the plain attention kernels\n",
               major, minor, patch);
        return 0;
    }
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&g_cudnn_sm_major, cudaDevAttrComputeCapabilityMajor, dev));
    cudnnStatus_t st = cudnnCreate(&g_cudnn_handle);
    if (st != CUDNN_STATUS_SUCCESS) {
        printf("attention: cudnnCreate failed (%s); using the plain attention kernels\n", cudnnGetErrorString(st));
        g_cudnn_handle = NULL;
        return 0;
    }
    printf("attention: cuDNN %d.%d.%d (built against %d.%d.%d) fused attention for T %% 128 == 0, HS %% 8 == 0, HS <= 128;"
           " plain kernels otherwise\n", major, minor, patch, CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    return 1;
}

// Drops every cached plan (the next call of each shape builds its plan again).
static void cudnn_att_forget_plans(void) {
    for (int i = 0; i < g_cudnn_nplans; i++) cudnn_att_free_plan(&g_cudnn_plans[i]);
    g_cudnn_nplans = 0;
}

static void cudnn_att_destroy(void) {
    cudnn_att_forget_plans();
    if (g_cudnn_workspace) cudaCheck(cudaFree(g_cudnn_workspace));
    g_cudnn_workspace = NULL;
    g_cudnn_workspace_bytes = 0;
    if (g_cudnn_handle) cudnnCheck(cudnnDestroy(g_cudnn_handle));
    g_cudnn_handle = NULL;
}

#endif
