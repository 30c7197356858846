/*
The linears' GEMMs through cuBLASLt: bf16 (forward, dgrad, wgrad) and fp8 (fprop, dgrad, wgrad).
One handle and one 32 MiB workspace for the process; each distinct GEMM (kind, m, n, k, accumulate,
operand alignments) gets its matmul descriptor, matrix layouts and algorithm chosen once, on first
use, and kept in a small table (creating them per call is a known cost of llm.c's path). The
algorithm is the heuristic's first, or with matmul_set_tuning(1) the fastest of its candidates timed
on the first call's operands (the trainer's -deterministic 0): a few % on some shapes (the lm_head's
bf16 GEMMs 8-16% on an H200), but the choice can differ from process to process, and with it the
last bits of the results.

Everything is row-major in C terms. A linear is Y(N, OUT) = X(N, IN) W(OUT, IN)^T with N tokens.
cuBLASLt is column-major, and a row-major (r, c) matrix is the same bytes as a column-major (c, r)
one, so each product is computed transposed: e.g. Y^T (OUT, N) = W (OUT, IN) . X^T (IN, N).

fp8 on Hopper: only the "TN" form exists (A transposed, B not, in cuBLASLt's terms), so both operands
must have the reduction dimension contiguous; E4M3xE4M3, E4M3xE5M2 and E5M2xE4M3 are supported,
E5M2xE5M2 is not. The three products in that form (D, A and B are cuBLASLt's operands):
  fprop  Y^T (OUT,N)  = W (OUT,IN)       . X^T (IN,N)    A = w    (E4M3, OUT x IN, lda IN)
                                                         B = x    (E4M3, N x IN,   ldb IN)
  dgrad  dX^T (IN,N)  = W^T (IN,OUT)     . dY^T (OUT,N)  A = w_t  (E4M3, IN x OUT, lda OUT)
                                                         B = dy   (E5M2, N x OUT,  ldb OUT)
  wgrad  dW^T (IN,OUT)= X^T (IN,N)       . dY (N,OUT)    A = x_t  (E4M3, IN x N,   lda N)
                                                         B = dy_t (E5M2, OUT x N,  ldb N)
(shapes of A and B as row-major C arrays). The fp8 copies are scaled: the GEMM multiplies the fp32
sum by *A_SCALE_POINTER * *B_SCALE_POINTER, i.e. the two scale_inv values. Output is bf16; C has
D's type and layout, and beta = 1 adds the old D (gradient accumulation), as TransformerEngine does.
FAST_ACCUM is on in fprop only (TE/torchao: Hopper's fp8 accumulator is limited; the gradients
get the periodically promoted, slower path).
The block-scaled kinds (MM_FP8B_*, llmc/fp8_block.cuh's matmul_fp8_block_*) are the same three
products with one fp32 scale per 128-block instead of per tensor: A_SCALE_MODE / B_SCALE_MODE set to
VEC128_32F (1x128 blocks) or BLK128x128_32F (128x128 blocks, W and W^T), the scale pointers then
pointing at the tensors of block scales; no fast accumulation (cuBLASLt 12.9+, Hopper only).
The row-scaled kinds (MM_FP8R_*, llmc/fp8_row.cuh's matmul_fp8_row_*) are the same three products
with every operand E4M3 and one fp32 scale per row of A and of B (the row of the row-major array
above, i.e. along the reduction dimension): OUTER_VEC_32F, D(i, j) = sum * a_scale[i] * b_scale[j];
fast accumulation in fprop only, as per-tensor (cuBLASLt 12.9+; whether a GPU runs them is probed).

The scale pointers are set on the cached descriptor at every call: cuBLASLt reads descriptor
attributes when cublasLtMatmul enqueues the kernel, so later changes don't affect queued work.
Calls are not thread-safe (one host thread drives the GPU, as in llm.c).
*/
#ifndef LLMC_MATMUL_CUH
#define LLMC_MATMUL_CUH

#include <stdint.h>
#include <cublasLt.h>
#include "cuda_common.cuh" // floatX, fp8e4, fp8e5, cudaCheck, FATAL

#ifndef cublasCheck
static void cublas_check(cublasStatus_t status, const char *file, int line) {
    if (status != CUBLAS_STATUS_SUCCESS) {
        fatal_at(file, line, "cuBLAS error: %s (%s)", cublasLtGetStatusString(status), cublasLtGetStatusName(status));
    }
}
#define cublasCheck(status) cublas_check((status), __FILE__, __LINE__)
#endif

#define MATMUL_WORKSPACE_BYTES ((size_t)32 << 20)
#define MATMUL_MAX_PLANS 256
// The heuristic does not promise that its first algorithm launches for the actual pointers (cuBLASLt's
// own samples suggest trying the next ones): each plan keeps several candidates and uses the first
// that runs. With tuning on (matmul_set_tuning), the first call instead times every candidate on the
// real operands and keeps the fastest, if it beats the first by MATMUL_TUNE_MARGIN. Either way the
// choice is fixed after the first call: within a process, results are deterministic.
#define MATMUL_CANDIDATES 16
#define MATMUL_TUNE_MARGIN 0.97f

enum { MM_BF16_FWD, MM_BF16_DX, MM_BF16_DW, MM_FP8_FPROP, MM_FP8_DGRAD, MM_FP8_WGRAD, MM_FP8B_FPROP, MM_FP8B_DGRAD,
       MM_FP8B_WGRAD, MM_FP8R_FPROP, MM_FP8R_DGRAD, MM_FP8R_WGRAD, MM_NUM_KINDS };
static const char *const MATMUL_KIND_NAMES[MM_NUM_KINDS] = {
    "bf16 forward", "bf16 dgrad", "bf16 wgrad", "fp8 fprop", "fp8 dgrad", "fp8 wgrad", "fp8 block fprop",
    "fp8 block dgrad", "fp8 block wgrad", "fp8 row fprop", "fp8 row dgrad", "fp8 row wgrad"};
// How an fp8 operand's scale pointer is read: one scale for the tensor, cuBLASLt's block scales
// (llmc/fp8_block.cuh says their layouts), or one scale per row (llmc/fp8_row.cuh).
enum { MATMUL_SCALE_TENSOR, MATMUL_SCALE_VEC128, MATMUL_SCALE_BLK128, MATMUL_SCALE_OUTER };

// One cached GEMM: everything cublasLtMatmul needs except the pointers.
typedef struct {
    int kind, m, n, k, accumulate;
    int sm_count; // the SMs it was planned for (matmul_set_sm_count; 0: every SM)
    int align[4]; // bytes: A, B, C(=D), and 0 (reserved)
    cublasLtMatmulDesc_t desc;
    // C (read when accumulating) and D have equal layouts; each gets its own object, as cuBLASLt's
    // samples do. (The fp8 NOT_SUPPORTED seen on H200 came from unaligned scale pointers, not from this.)
    cublasLtMatrixLayout_t a_layout, b_layout, c_layout, d_layout;
    cublasLtMatmulAlgo_t algos[MATMUL_CANDIDATES]; // the heuristic's candidates, best first
    int num_algos;
    int chosen; // index of the candidate in use (the first that ran, or the tuned one); -1 until the first call
    float tuned_ms[2]; // tuning: the first runnable candidate's and the chosen one's time (0: not tuned)
} MatmulPlan;

static cublasLtHandle_t g_cublaslt = NULL;
static void *g_matmul_workspace = NULL;
static MatmulPlan g_matmul_plans[MATMUL_MAX_PLANS];
static int g_matmul_num_plans = 0;
static int g_matmul_tune = 0;
static int g_matmul_sm_count = 0; // the SMs the GEMMs called from now on are planned for (0: every SM)

void matmul_set_tuning(int on) { g_matmul_tune = on; }
// The GEMMs called from now on leave the other SMs to a concurrent stream (cuBLASLt's SM count target;
// each count has plans of its own; dev/cuda/adamw_overlap). 0: every SM.
void matmul_set_sm_count(int sms) { g_matmul_sm_count = sms; }

void matmul_init(void) {
    if (g_cublaslt != NULL) return;
    cublasCheck(cublasLtCreate(&g_cublaslt));
    g_matmul_workspace = cudaMallocCheck(MATMUL_WORKSPACE_BYTES, "the cuBLASLt workspace");
    g_matmul_num_plans = 0;
}

static void matmul_plan_destroy(MatmulPlan *p) {
    cublasCheck(cublasLtMatrixLayoutDestroy(p->a_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->b_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->c_layout));
    cublasCheck(cublasLtMatrixLayoutDestroy(p->d_layout));
    cublasCheck(cublasLtMatmulDescDestroy(p->desc));
}

void matmul_destroy(void) {
    for (int i = 0; i < g_matmul_num_plans; i++) matmul_plan_destroy(&g_matmul_plans[i]);
    g_matmul_num_plans = 0;
    if (g_matmul_workspace != NULL) cudaCheck(cudaFree(g_matmul_workspace));
    g_matmul_workspace = NULL;
    if (g_cublaslt != NULL) cublasCheck(cublasLtDestroy(g_cublaslt));
    g_cublaslt = NULL;
}

// Largest power of two (<= 256, cuBLASLt's default assumption) that divides the address: the
// heuristic is told the real alignment, so an operand at an odd offset gets an algorithm that can read it.
static int matmul_ptr_alignment(const void *p) {
    uintptr_t a = (uintptr_t)p;
    int align = 256;
    while (align > 1 && (a % (uintptr_t)align) != 0) align /= 2;
    return align;
}

// Operand description of each kind (cuBLASLt column-major terms): types, transposes, fast accumulation.
typedef struct {
    cudaDataType_t a_type, b_type;
    cublasOperation_t op_a, op_b;
    int8_t fast_accum; // fp8 only
    int is_fp8;
    int a_scale, b_scale; // MATMUL_SCALE_*
} MatmulKindInfo;

static MatmulKindInfo matmul_kind_info(int kind) {
    MatmulKindInfo k;
    k.fast_accum = 0;
    k.is_fp8 = 0;
    k.a_scale = k.b_scale = MATMUL_SCALE_TENSOR;
    switch (kind) {
    case MM_BF16_FWD: k.a_type = CUDA_R_16BF; k.b_type = CUDA_R_16BF; k.op_a = CUBLAS_OP_T; k.op_b = CUBLAS_OP_N; break;
    case MM_BF16_DX:  k.a_type = CUDA_R_16BF; k.b_type = CUDA_R_16BF; k.op_a = CUBLAS_OP_N; k.op_b = CUBLAS_OP_N; break;
    case MM_BF16_DW:  k.a_type = CUDA_R_16BF; k.b_type = CUDA_R_16BF; k.op_a = CUBLAS_OP_N; k.op_b = CUBLAS_OP_T; break;
    case MM_FP8_FPROP: k.a_type = CUDA_R_8F_E4M3; k.b_type = CUDA_R_8F_E4M3; k.op_a = CUBLAS_OP_T; k.op_b = CUBLAS_OP_N;
                       k.fast_accum = 1; k.is_fp8 = 1; break;
    case MM_FP8_DGRAD: k.a_type = CUDA_R_8F_E4M3; k.b_type = CUDA_R_8F_E5M2; k.op_a = CUBLAS_OP_T; k.op_b = CUBLAS_OP_N;
                       k.is_fp8 = 1; break;
    case MM_FP8_WGRAD: k.a_type = CUDA_R_8F_E4M3; k.b_type = CUDA_R_8F_E5M2; k.op_a = CUBLAS_OP_T; k.op_b = CUBLAS_OP_N;
                       k.is_fp8 = 1; break;
    case MM_FP8B_FPROP: k = matmul_kind_info(MM_FP8_FPROP); k.fast_accum = 0;
                        k.a_scale = MATMUL_SCALE_BLK128; k.b_scale = MATMUL_SCALE_VEC128; break;
    case MM_FP8B_DGRAD: k = matmul_kind_info(MM_FP8_DGRAD); k.a_scale = MATMUL_SCALE_BLK128; k.b_scale = MATMUL_SCALE_VEC128; break;
    case MM_FP8B_WGRAD: k = matmul_kind_info(MM_FP8_WGRAD); k.a_scale = MATMUL_SCALE_VEC128; k.b_scale = MATMUL_SCALE_VEC128; break;
    case MM_FP8R_FPROP: k = matmul_kind_info(MM_FP8_FPROP); k.a_scale = k.b_scale = MATMUL_SCALE_OUTER; break;
    case MM_FP8R_DGRAD: case MM_FP8R_WGRAD: // dY is E4M3 too (torchao's row-wise recipe)
        k = matmul_kind_info(MM_FP8_DGRAD);
        k.b_type = CUDA_R_8F_E4M3;
        k.a_scale = k.b_scale = MATMUL_SCALE_OUTER;
        break;
    default: FATAL("matmul: unknown GEMM kind %d", kind);
    }
    return k;
}

// The scale modes of a block- or row-scaled kind, set before the heuristic (it picks such kernels
// only when it sees them).
static void matmul_set_scale_modes(cublasLtMatmulDesc_t desc, MatmulKindInfo info, int kind) {
#if CUBLAS_VERSION >= 120900
    const int32_t modes[4] = {CUBLASLT_MATMUL_MATRIX_SCALE_SCALAR_32F, CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F,
                              CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F};
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &modes[info.a_scale], sizeof(int32_t)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &modes[info.b_scale], sizeof(int32_t)));
#else
    (void)desc; (void)info;
    FATAL("matmul: %s needs cuBLASLt 12.9+ (block- or row-scaled fp8); this was built with cuBLAS headers %d",
          MATMUL_KIND_NAMES[kind], CUBLAS_VERSION);
#endif
}

// Builds into p the plan of D(m,n) = op(A)(m,k) op(B)(k,n), column-major, packed leading dimensions,
// for operands of these alignments: its descriptor, layouts and the heuristic's candidates
// (p->num_algos, 0 if cuBLASLt has none).
static void matmul_plan_build(MatmulPlan *p, int kind, int m, int n, int k, int accumulate, const int align[4],
                              const float *a_scale, const float *b_scale) {
    MatmulKindInfo info = matmul_kind_info(kind);
    memset(p, 0, sizeof(*p));
    p->kind = kind; p->m = m; p->n = n; p->k = k; p->accumulate = accumulate; p->sm_count = g_matmul_sm_count;
    for (int i = 0; i < 4; i++) p->align[i] = align[i];

    cublasCheck(cublasLtMatmulDescCreate(&p->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &info.op_a, sizeof(info.op_a)));
    cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &info.op_b, sizeof(info.op_b)));
    if (p->sm_count > 0)
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_SM_COUNT_TARGET, &p->sm_count,
                                                   sizeof(p->sm_count)));
    if (info.is_fp8) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &info.fast_accum,
                                                   sizeof(info.fast_accum)));
        // set before the heuristic, so it sees the same descriptor the calls will use
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
        if (info.a_scale != MATMUL_SCALE_TENSOR || info.b_scale != MATMUL_SCALE_TENSOR) matmul_set_scale_modes(p->desc, info, kind);
    }
    // stored shapes: op T stores the operand as (k, m) / (n, k) column-major, op N as (m, k) / (k, n)
    int a_rows = info.op_a == CUBLAS_OP_N ? m : k, a_cols = info.op_a == CUBLAS_OP_N ? k : m;
    int b_rows = info.op_b == CUBLAS_OP_N ? k : n, b_cols = info.op_b == CUBLAS_OP_N ? n : k;
    cublasCheck(cublasLtMatrixLayoutCreate(&p->a_layout, info.a_type, a_rows, a_cols, a_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->b_layout, info.b_type, b_rows, b_cols, b_rows));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->c_layout, CUDA_R_16BF, m, n, m));
    cublasCheck(cublasLtMatrixLayoutCreate(&p->d_layout, CUDA_R_16BF, m, n, m));

    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    size_t ws = MATMUL_WORKSPACE_BYTES;
    uint32_t al_a = (uint32_t)align[0], al_b = (uint32_t)align[1], al_d = (uint32_t)align[2];
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_d, sizeof(al_d)));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof(al_d)));
    cublasLtMatmulHeuristicResult_t results[MATMUL_CANDIDATES];
    int found = 0;
    cublasCheck(cublasLtMatmulAlgoGetHeuristic(g_cublaslt, p->desc, p->a_layout, p->b_layout, p->c_layout, p->d_layout,
                                               pref, MATMUL_CANDIDATES, results, &found));
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    for (int i = 0; i < found; i++) {
        if (results[i].state == CUBLAS_STATUS_SUCCESS) p->algos[p->num_algos++] = results[i].algo;
    }
    p->chosen = -1;
}

// Finds or creates the plan of D(m,n) = op(A)(m,k) op(B)(k,n) for these operands.
static MatmulPlan *matmul_get_plan(int kind, int m, int n, int k, int accumulate, const void *A, const void *B,
                                   const void *D, const float *a_scale, const float *b_scale) {
    int align[4] = {matmul_ptr_alignment(A), matmul_ptr_alignment(B), matmul_ptr_alignment(D), 0};
    for (int i = 0; i < g_matmul_num_plans; i++) {
        MatmulPlan *p = &g_matmul_plans[i];
        if (p->kind == kind && p->m == m && p->n == n && p->k == k && p->accumulate == accumulate &&
            p->sm_count == g_matmul_sm_count && p->align[0] == align[0] && p->align[1] == align[1] &&
            p->align[2] == align[2]) return p;
    }
    if (g_matmul_num_plans == MATMUL_MAX_PLANS) {
        FATAL("matmul: more than %d distinct GEMMs (shape, kind, alignment, SM count); raise MATMUL_MAX_PLANS in llmc/matmul.cuh",
              MATMUL_MAX_PLANS);
    }
    MatmulPlan *p = &g_matmul_plans[g_matmul_num_plans];
    matmul_plan_build(p, kind, m, n, k, accumulate, align, a_scale, b_scale);
    if (p->num_algos == 0) {
        FATAL("matmul: cuBLASLt has no algorithm for %s m=%d n=%d k=%d (alignments A %d, B %d, D %d bytes)%s",
              MATMUL_KIND_NAMES[kind], m, n, k, align[0], align[1], align[2],
              matmul_kind_info(kind).is_fp8
                  ? "; fp8 GEMMs need compute capability 8.9 or 9.0 (Ada/Hopper) and cuBLAS 12+"
                  : "");
    }
    g_matmul_num_plans++;
    return p;
}

static cublasStatus_t matmul_launch(MatmulPlan *p, int algo, const void *A, const void *B, floatX *D,
                                    cudaStream_t stream) {
    const float one = 1.0f, zero = 0.0f;
    return cublasLtMatmul(g_cublaslt, p->desc, &one, A, p->a_layout, B, p->b_layout, p->accumulate ? &one : &zero, D,
                          p->c_layout, D, p->d_layout, &p->algos[algo], g_matmul_workspace, MATMUL_WORKSPACE_BYTES,
                          stream);
}

// Median time of 5 runs of candidate `algo` (after one warm-up) into the scratch output; < 0 if refused.
static float matmul_time_candidate(MatmulPlan *p, int algo, const void *A, const void *B, floatX *scratch,
                                   cudaEvent_t ev[6], cudaStream_t stream) {
    cublasStatus_t st = matmul_launch(p, algo, A, B, scratch, stream);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED) return -1.0f;
    cublasCheck(st);
    float ms[5];
    for (int r = 0; r < 6; r++) {
        cudaCheck(cudaEventRecord(ev[r], stream));
        if (r < 5) cublasCheck(matmul_launch(p, algo, A, B, scratch, stream));
    }
    cudaCheck(cudaEventSynchronize(ev[5]));
    for (int r = 0; r < 5; r++) cudaCheck(cudaEventElapsedTime(&ms[r], ev[r], ev[r + 1]));
    for (int i = 1; i < 5; i++) for (int j = i; j > 0 && ms[j] < ms[j - 1]; j--) { float t = ms[j]; ms[j] = ms[j - 1]; ms[j - 1] = t; }
    return ms[2];
}

// Times every candidate on the real operands, writing a scratch output (D and the work before this
// call stay untouched), and returns the one to keep: the fastest, if it beats the first runnable
// candidate by MATMUL_TUNE_MARGIN; -1 if none runs or there is no memory for the scratch output
// (then the heuristic's choice stands).
static int matmul_tune(MatmulPlan *p, const void *A, const void *B, cudaStream_t stream) {
    floatX *scratch = NULL;
    // stream-ordered: no device-wide sync, so NCCL work of other streams in flight cannot block it
    if (cudaMallocAsync((void **)&scratch, (size_t)p->m * p->n * sizeof(floatX), stream) != cudaSuccess) {
        (void)cudaGetLastError(); // clear the allocation error
        return -1;
    }
    cudaCheck(cudaMemsetAsync(scratch, 0, (size_t)p->m * p->n * sizeof(floatX), stream));
    cudaEvent_t ev[6];
    for (int r = 0; r < 6; r++) cudaCheck(cudaEventCreate(&ev[r]));
    int first = -1, best = -1;
    float first_ms = 0.0f, best_ms = 0.0f;
    for (int i = 0; i < p->num_algos; i++) {
        float ms = matmul_time_candidate(p, i, A, B, scratch, ev, stream);
        if (ms < 0.0f) continue;
        if (first < 0) { first = i; first_ms = ms; }
        if (best < 0 || ms < best_ms) { best = i; best_ms = ms; }
    }
    for (int r = 0; r < 6; r++) cudaCheck(cudaEventDestroy(ev[r]));
    cudaCheck(cudaFreeAsync(scratch, stream));
    if (best >= 0 && best_ms > MATMUL_TUNE_MARGIN * first_ms) { best = first; best_ms = first_ms; }
    p->tuned_ms[0] = first_ms;
    p->tuned_ms[1] = best_ms;
    return best;
}

static void matmul_run(int kind, int m, int n, int k, const void *A, const void *B, floatX *D, int accumulate,
                       const float *a_scale, const float *b_scale, cudaStream_t stream) {
    if (g_cublaslt == NULL) FATAL("matmul: call matmul_init() before the first GEMM");
    MatmulPlan *p = matmul_get_plan(kind, m, n, k, accumulate, A, B, D, a_scale, b_scale);
    if (kind >= MM_FP8_FPROP) {
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
        cublasCheck(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
    }
    if (p->chosen < 0 && g_matmul_tune) p->chosen = matmul_tune(p, A, B, stream);
    if (p->chosen >= 0) {
        cublasCheck(matmul_launch(p, p->chosen, A, B, D, stream));
        return;
    }
    // first call: a refused candidate returns before launching anything, so D is untouched
    for (int i = 0; i < p->num_algos; i++) {
        cublasStatus_t st = matmul_launch(p, i, A, B, D, stream);
        if (st == CUBLAS_STATUS_SUCCESS) { p->chosen = i; return; }
        if (st != CUBLAS_STATUS_NOT_SUPPORTED) cublasCheck(st);
    }
    FATAL("matmul: cuBLASLt refused all %d candidate algorithms for %s m=%d n=%d k=%d", p->num_algos,
          MATMUL_KIND_NAMES[kind], m, n, k);
}

// One line per tuned GEMM whose choice differs from the heuristic's, and the total of both.
void matmul_print_tuning(FILE *f) {
    float first = 0.0f, chosen = 0.0f;
    int tuned = 0, changed = 0;
    for (int i = 0; i < g_matmul_num_plans; i++) {
        const MatmulPlan *p = &g_matmul_plans[i];
        if (p->tuned_ms[0] <= 0.0f) continue;
        tuned++;
        first += p->tuned_ms[0];
        chosen += p->tuned_ms[1];
        if (p->tuned_ms[1] < p->tuned_ms[0]) {
            changed++;
            fprintf(f, "  %-12s m=%5d n=%5d k=%5d%s: %.3f -> %.3f ms (candidate %d of %d)\n", MATMUL_KIND_NAMES[p->kind],
                    p->m, p->n, p->k, p->accumulate ? " acc" : "", p->tuned_ms[0], p->tuned_ms[1], p->chosen + 1,
                    p->num_algos);
        }
    }
    fprintf(f, "GEMM tuning: %d of %d GEMMs changed algorithm; one call of each: %.3f -> %.3f ms\n", changed, tuned,
            first, chosen);
}

// cuBLASLt's fp8 kernels need every dimension (and so every leading dimension) a multiple of 16 and
// 16-byte aligned pointers.
static void matmul_fp8_check_scale(const char *fn, const float *a_scale, const float *b_scale) {
    if ((uintptr_t)a_scale % 16 != 0 || (uintptr_t)b_scale % 16 != 0)
        FATAL("%s: fp8 scale pointers must be 16-byte aligned (cuBLASLt refuses others); got %p and %p", fn,
              (const void *)a_scale, (const void *)b_scale);
}

static void matmul_fp8_check(const char *fn, int N, int IN, int OUT, const void *a, const void *b, const void *d) {
    if (N <= 0 || IN <= 0 || OUT <= 0 || N % 16 != 0 || IN % 16 != 0 || OUT % 16 != 0) {
        FATAL("%s: N=%d IN=%d OUT=%d: fp8 GEMMs need every dimension a positive multiple of 16 (cuBLASLt on Hopper);"
              " choose a batch*sequence length and model widths that are multiples of 16", fn, N, IN, OUT);
    }
    if (((uintptr_t)a | (uintptr_t)b | (uintptr_t)d) % 16 != 0) {
        FATAL("%s: fp8 GEMM operands must be 16-byte aligned (got %p, %p, %p)", fn, a, b, d);
    }
}

// y (N,OUT) = x (N,IN) w (OUT,IN)^T, bf16 in and out, fp32 accumulation.
void matmul_forward(floatX *y, const floatX *x, const floatX *w, int N, int IN, int OUT, cudaStream_t stream) {
    matmul_run(MM_BF16_FWD, OUT, N, IN, w, x, y, 0, NULL, NULL, stream);
}

// dx (N,IN) = dy (N,OUT) w (OUT,IN), overwritten (skipped if dx is NULL);
// dw (OUT,IN) (+)= dy^T x, accumulated into the old dw (beta = 1) when accumulate_dw (skipped if dw is NULL).
void matmul_backward(floatX *dx, floatX *dw, const floatX *dy, const floatX *x, const floatX *w, int N, int IN, int OUT,
                     int accumulate_dw, cudaStream_t stream) {
    if (dx != NULL) matmul_run(MM_BF16_DX, IN, N, OUT, w, dy, dx, 0, NULL, NULL, stream);
    if (dw != NULL) matmul_run(MM_BF16_DW, IN, OUT, N, x, dy, dw, accumulate_dw ? 1 : 0, NULL, NULL, stream);
}

// fprop: y (N,OUT) = (x w^T) * x_scale_inv * w_scale_inv; x (N,IN) and w (OUT,IN) E4M3. Fast accumulation.
void matmul_fp8_fprop(floatX *y, const fp8e4 *x, const fp8e4 *w, const float *x_scale_inv, const float *w_scale_inv,
                      int N, int IN, int OUT, cudaStream_t stream) {
    matmul_fp8_check("matmul_fp8_fprop", N, IN, OUT, x, w, y);
    matmul_fp8_check_scale("matmul_fp8_fprop", x_scale_inv, w_scale_inv);
    matmul_run(MM_FP8_FPROP, OUT, N, IN, w, x, y, 0, w_scale_inv, x_scale_inv, stream);
}

// dgrad: dx (N,IN) = (dy w) * dy_scale_inv * w_scale_inv; dy (N,OUT) E5M2, w_t = W^T (IN,OUT) E4M3. Overwrites dx.
void matmul_fp8_dgrad(floatX *dx, const fp8e5 *dy, const fp8e4 *w_t, const float *dy_scale_inv, const float *w_scale_inv,
                      int N, int IN, int OUT, cudaStream_t stream) {
    matmul_fp8_check("matmul_fp8_dgrad", N, IN, OUT, w_t, dy, dx);
    matmul_fp8_check_scale("matmul_fp8_dgrad", dy_scale_inv, w_scale_inv);
    matmul_run(MM_FP8_DGRAD, IN, N, OUT, w_t, dy, dx, 0, w_scale_inv, dy_scale_inv, stream);
}

// wgrad: dw (OUT,IN) (+)= (dy^T x) * dy_scale_inv * x_scale_inv; dy_t = dY^T (OUT,N) E5M2, x_t = X^T (IN,N) E4M3.
// bf16 output; accumulate adds the old dw (beta = 1).
void matmul_fp8_wgrad(floatX *dw, const fp8e5 *dy_t, const fp8e4 *x_t, const float *dy_scale_inv, const float *x_scale_inv,
                      int N, int IN, int OUT, int accumulate, cudaStream_t stream) {
    matmul_fp8_check("matmul_fp8_wgrad", N, IN, OUT, x_t, dy_t, dw);
    matmul_fp8_check_scale("matmul_fp8_wgrad", dy_scale_inv, x_scale_inv);
    matmul_run(MM_FP8_WGRAD, IN, OUT, N, x_t, dy_t, dw, accumulate ? 1 : 0, x_scale_inv, dy_scale_inv, stream);
}

#endif
