/*
Data parallelism on one node: the NCCL communicator of the ranks llmc/launcher.h starts (its file
comment says how), the collectives the trainer needs, and failure handling that ends every rank in
bounded time instead of hanging. Without ENABLE_NCCL this compiles to a single-GPU version (world 1,
every collective a no-op) and asking for more GPUs is a clear error.

Streams: every collective runs on mg->comm_stream (non-blocking, highest priority). A collective
given the compute stream first makes the comm stream wait for the work queued there so far (an
event), so it sees the data the compute stream produced, and the compute stream carries on with the
next layer's backward meanwhile. Results reach the compute stream only after mg_join(mg, stream).

Failure handling: the communicator is non-blocking (ncclConfig_t.blocking = 0), and the host never
waits on anything NCCL touches with a blocking CUDA call: mg_wait polls the stream and
ncclCommGetAsyncError, and on an NCCL error or after timeout_s seconds (LLAMA_FP8_NCCL_TIMEOUT_S,
default 60) it prints the rank, the GPU and the error, aborts the communicator and exits 1. Any other
fatal error (FATAL, cudaCheck) aborts the communicator on the way out (an atexit hook), so peers
waiting on this rank see an error instead of waiting forever. An alarm bounds the abort itself.
The timeout has to exceed the longest time one rank may legitimately run ahead of another between
two collectives: rank-0-only work (a checkpoint write) should end in mg_barrier with a longer limit.

ZeRO-1's layout (which buckets are reduced when, which pieces each rank's shard holds) is not here
but in llmc/zero_layout.h, the one the trainer and dev/cuda/nccl_check.cu both use.
*/
#ifndef LLMC_MULTI_GPU_CUH
#define LLMC_MULTI_GPU_CUH

#include <unistd.h>
#include <fcntl.h>
#include <sched.h>
#include "utils.h"        // FATAL, fatal_at, monotonic_seconds
#include "launcher.h"     // mg_start_of, mg_launch_ranks: how the ranks are started
#include "cuda_common.cuh" // cudaCheck, floatX
#include "stop_signal.h"    // stop_signal_cleanup: a failing rank removes its unfinished checkpoint files
#ifdef ENABLE_NCCL
#include <nccl.h>
#if defined(ENABLE_MPI)
#include <mpi.h>
#define MG_USE_MPI 1     // MPI is only of use to hand out the NCCL id
#endif
#endif

extern char **environ;

#define MG_DEFAULT_TIMEOUT_S 60.0  // LLAMA_FP8_NCCL_TIMEOUT_S overrides
#define MG_ABORT_ALARM_S 10        // a rank that is aborting is killed by SIGALRM if that takes longer

enum { MG_LAUNCH_SINGLE, MG_LAUNCH_FORK, MG_LAUNCH_MPI };
static const char *const MG_LAUNCH_NAMES[] = {"single GPU", "-ngpu fork launcher", "mpirun"};
typedef enum { MG_SUM, MG_AVG } MgOp;

typedef struct {
    int rank, world;               // this process's rank; number of ranks (1: no communicator)
    int local_rank, local_world;   // within this node (equal to rank, world on one node)
    int local_device;              // CUDA device of this rank, made current by multi_gpu_init
    int launch;                    // MG_LAUNCH_*
    double timeout_s;              // the longest any wait may take before the job is ended
    cudaStream_t comm_stream;      // every collective runs here
    cudaEvent_t ready, done, waited; // compute -> comm, comm -> compute, mg_wait's marker
    void *scratch;                 // device, 64 bytes: barrier, scalar sums, agreement checks
    void *host_scratch;            // pinned, 64 bytes
    char id_path[64];              // fork launch: the NCCL id file
#ifdef ENABLE_NCCL
    ncclComm_t comm;
#endif
} MultiGpu;

// What the atexit hook and the failure path must reach without a MultiGpu pointer (the struct may
// be a local of main that is gone by the time exit handlers run).
#ifdef ENABLE_NCCL
static ncclComm_t g_mg_comm = NULL; // live communicator, NULL once freed or aborted
#endif
static int g_mg_mpi_live = 0;       // MPI initialized and not finalized

static int mg_is_main(const MultiGpu *mg) { return mg->rank == 0; }

// A world-1 MultiGpu for code that runs without multi_gpu_init (the GPU tests). With world 1 every
// collective returns at once and mg_wait is a plain stream synchronize, so nothing else is touched.
static MultiGpu *mg_single_gpu(void) {
    static MultiGpu one;
    one.world = one.local_world = 1;
    one.timeout_s = MG_DEFAULT_TIMEOUT_S;
    return &one;
}

// Abort whatever is live (communicator, MPI), bounded by an alarm: used on every failure path.
static void mg_abort_all(void) {
    alarm(MG_ABORT_ALARM_S);
#ifdef ENABLE_NCCL
    if (g_mg_comm != NULL) {
        ncclComm_t c = g_mg_comm;
        g_mg_comm = NULL;
        ncclCommAbort(c); // makes NCCL kernels still waiting on a peer return
    }
#endif
#ifdef MG_USE_MPI
    if (g_mg_mpi_live) {
        g_mg_mpi_live = 0;
        MPI_Abort(MPI_COMM_WORLD, EXIT_FAILURE); // mpirun ends the other ranks
    }
#endif
}

// atexit: a rank leaving with its communicator still live (FATAL, cudaCheck, or main returning
// without multi_gpu_free) aborts it, so its peers get an error instead of waiting on it.
static void mg_atexit(void) {
    int live = g_mg_mpi_live;
#ifdef ENABLE_NCCL
    live |= g_mg_comm != NULL;
#endif
    if (live) mg_abort_all();
}

// A failure on a rank: says which rank and GPU, aborts, exits 1 at once (no exit handlers: they
// could block on a stream that waits for a dead peer).
static void mg_fail_at(const MultiGpu *mg, const char *file, int line, const char *fmt, ...) {
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "error (%s:%d): rank %d of %d (GPU %d): %s\n", file, line, mg->rank, mg->world, mg->local_device, msg);
    fflush(stderr);
    stop_signal_cleanup();
    mg_abort_all();
    _exit(EXIT_FAILURE);
}
#define MG_FAIL(mg, ...) mg_fail_at((mg), __FILE__, __LINE__, __VA_ARGS__)

#ifdef ENABLE_NCCL
// Polls a non-blocking communicator until a call that returned ncclInProgress has settled (NCCL
// forbids the next call before that), failing on an error or after the timeout.
static void mg_nccl_settle(const MultiGpu *mg, const char *what, const char *file, int line) {
    double t0 = monotonic_seconds();
    for (;;) {
        ncclResult_t state = ncclInProgress;
        ncclResult_t r = ncclCommGetAsyncError(mg->comm, &state);
        if (r != ncclSuccess) state = r;
        if (state == ncclSuccess) return;
        if (state != ncclInProgress) {
            mg_fail_at(mg, file, line, "NCCL %s failed: %s (%s)", what, ncclGetErrorString(state), ncclGetLastError(mg->comm));
        }
        if (monotonic_seconds() - t0 > mg->timeout_s) {
            mg_fail_at(mg, file, line, "NCCL %s did not complete within %.0f s: another rank has probably died, hung or"
                       " was started with different settings (LLAMA_FP8_NCCL_TIMEOUT_S sets the limit)", what, mg->timeout_s);
        }
        usleep(1000);
    }
}
static void mg_nccl_check(const MultiGpu *mg, ncclResult_t r, const char *what, const char *file, int line) {
    if (r == ncclSuccess) return;
    if (r == ncclInProgress) { mg_nccl_settle(mg, what, file, line); return; }
    mg_fail_at(mg, file, line, "NCCL %s failed: %s (%s)", what, ncclGetErrorString(r), ncclGetLastError(mg->comm));
}
#define mgNcclCheck(mg, call, what) mg_nccl_check((mg), (call), (what), __FILE__, __LINE__)
#endif

#ifdef MG_USE_MPI
static void mg_mpi_check(int err, const char *file, int line) {
    if (err != MPI_SUCCESS) {
        char s[MPI_MAX_ERROR_STRING];
        int len = 0;
        MPI_Error_string(err, s, &len);
        fatal_at(file, line, "MPI error: %s", s);
    }
}
#define mpiCheck(err) mg_mpi_check((err), __FILE__, __LINE__)
#endif

// ----------------------------------------------------------------------------------------------
// Waiting with a deadline

// Waits on the host until everything queued so far on `stream` has run, never longer than
// timeout_s: on an NCCL error, a CUDA error or the deadline it ends this rank (see the file comment).
// Use it in place of cudaStreamSynchronize wherever the stream may depend on a collective.
static void mg_wait_for(MultiGpu *mg, cudaStream_t stream, const char *what, double timeout_s) {
    if (mg->world == 1) {
        cudaCheck(cudaStreamSynchronize(stream));
        return;
    }
    cudaCheck(cudaEventRecord(mg->waited, stream));
    double t0 = monotonic_seconds();
    for (long spins = 0;; spins++) {
        cudaError_t q = cudaEventQuery(mg->waited);
        if (q == cudaSuccess) return;
        if (q != cudaErrorNotReady) MG_FAIL(mg, "CUDA error while waiting for %s: %s (%s)", what, cudaGetErrorString(q), cudaGetErrorName(q));
#ifdef ENABLE_NCCL
        if (spins % 64 == 0) {
            ncclResult_t state = ncclSuccess;
            ncclResult_t r = ncclCommGetAsyncError(mg->comm, &state);
            if (r != ncclSuccess) state = r;
            if (state != ncclSuccess && state != ncclInProgress) {
                MG_FAIL(mg, "NCCL error while waiting for %s: %s (%s)", what, ncclGetErrorString(state), ncclGetLastError(mg->comm));
            }
        }
#endif
        double waited = monotonic_seconds() - t0;
        if (waited > timeout_s) {
            MG_FAIL(mg, "waited %.0f s for %s without it finishing: another rank has probably died or hung. If a"
                    " rank is only slow (checkpoint, sampling), raise LLAMA_FP8_NCCL_TIMEOUT_S", waited, what);
        }
        if (waited > 0.002) usleep(50); // spin briefly (end-of-step latency), then stop burning a core
    }
}
static void mg_wait(MultiGpu *mg, cudaStream_t stream, const char *what) { mg_wait_for(mg, stream, what, mg->timeout_s); }

// Makes `stream` wait (on the GPU) for every collective issued so far: call before the compute
// stream reads a collective's result.
static void mg_join(MultiGpu *mg, cudaStream_t stream) {
    if (mg->world == 1 || stream == mg->comm_stream) return;
    cudaCheck(cudaEventRecord(mg->done, mg->comm_stream));
    cudaCheck(cudaStreamWaitEvent(stream, mg->done, 0));
}

// The comm stream waits for the work queued on `stream` so far (the producer of the data).
static void mg_after(MultiGpu *mg, cudaStream_t stream) {
    if (stream == mg->comm_stream) return;
    cudaCheck(cudaEventRecord(mg->ready, stream));
    cudaCheck(cudaStreamWaitEvent(mg->comm_stream, mg->ready, 0));
}

// ----------------------------------------------------------------------------------------------
// Collectives. All asynchronous: queued on the comm stream after the work already on `stream`;
// the result is ready for `stream` after mg_join. With world 1 they do nothing (or a copy when the
// output is a different buffer). Counts are in elements of the named type.

// ncclGroupStart/End around several collectives: one launch, e.g. a layer's gradient slices.
static void mg_group_start(MultiGpu *mg) {
#ifdef ENABLE_NCCL
    if (mg->world > 1) mgNcclCheck(mg, ncclGroupStart(), "group start");
#else
    (void)mg;
#endif
}
static void mg_group_end(MultiGpu *mg) {
#ifdef ENABLE_NCCL
    if (mg->world > 1) mgNcclCheck(mg, ncclGroupEnd(), "group end");
#else
    (void)mg;
#endif
}

// In place: buf (n bf16) = sum (or mean) over ranks. MG_AVG lets NCCL scale by 1/world, which is
// exact only for a power-of-two world; folding 1/world into the loss gradient and using MG_SUM is exact.
static void mg_allreduce_bf16(MultiGpu *mg, floatX *buf, size_t n, MgOp op, cudaStream_t stream) {
    if (mg->world == 1 || n == 0) return;
    mg_after(mg, stream);
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllReduce(buf, buf, n, ncclBfloat16, op == MG_AVG ? ncclAvg : ncclSum, mg->comm, mg->comm_stream),
                "all-reduce (bf16)");
#endif
}

// send holds world * shard_n bf16; recv (shard_n) = sum (or mean) over ranks of send's shard `rank`.
// In place when recv == send + rank * shard_n (the ZeRO-1 gradient reduce).
static void mg_reducescatter_bf16(MultiGpu *mg, const floatX *send, floatX *recv, size_t shard_n, MgOp op, cudaStream_t stream) {
    if (shard_n == 0) return;
    if (mg->world == 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, shard_n * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        return;
    }
    mg_after(mg, stream);
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclReduceScatter(send, recv, shard_n, ncclBfloat16, op == MG_AVG ? ncclAvg : ncclSum, mg->comm, mg->comm_stream),
                "reduce-scatter (bf16)");
#endif
}

// recv (world * shard_n bf16) = every rank's send (shard_n) in rank order. In place when
// send == recv + rank * shard_n (the parameters after a ZeRO-1 update).
static void mg_allgather_bf16(MultiGpu *mg, const floatX *send, floatX *recv, size_t shard_n, cudaStream_t stream) {
    if (shard_n == 0) return;
    if (mg->world == 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, shard_n * sizeof(floatX), cudaMemcpyDeviceToDevice, stream));
        return;
    }
    mg_after(mg, stream);
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllGather(send, recv, shard_n, ncclBfloat16, mg->comm, mg->comm_stream), "all-gather (bf16)");
#endif
}

// The same for raw bytes (fp8 copies, fp32 master weights for a checkpoint): shard_bytes per rank.
static void mg_allgather_bytes(MultiGpu *mg, const void *send, void *recv, size_t shard_bytes, cudaStream_t stream) {
    if (shard_bytes == 0) return;
    if (mg->world == 1) {
        if (recv != send) cudaCheck(cudaMemcpyAsync(recv, send, shard_bytes, cudaMemcpyDeviceToDevice, stream));
        return;
    }
    mg_after(mg, stream);
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllGather(send, recv, shard_bytes, ncclUint8, mg->comm, mg->comm_stream), "all-gather (bytes)");
#endif
}

// In place: amax[i] = max over ranks, for the n amax slots (docs/fp8_recipe.md "The end of an
// optimizer step", step 1: one call for all of them). The slots are non-negative floats, which order
// like their int32 bit patterns, so the reduction runs on the bits as int32: that is exactly the
// order of the kernels' integer atomic max
// (llmc/packed.cuh's block_commit_amax), and a NaN amax on any rank (bits above inf's) reaches every
// rank's history as it would on one GPU (a float max could drop it: fmaxf prefers the number). Needs
// every value >= +0.
static void mg_allreduce_amax(MultiGpu *mg, float *amax, size_t n, cudaStream_t stream) {
    if (mg->world == 1 || n == 0) return;
    mg_after(mg, stream);
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllReduce(amax, amax, n, ncclInt32, ncclMax, mg->comm, mg->comm_stream), "all-reduce (amax max)");
#endif
}

// In place: buf (n uint64 counters, on the device) = sum over ranks (the fp8 health counts).
static void mg_allreduce_sum_u64(MultiGpu *mg, unsigned long long *buf, size_t n, cudaStream_t stream) {
    if (mg->world == 1 || n == 0) return;
    mg_after(mg, stream);
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllReduce(buf, buf, n, ncclUint64, ncclSum, mg->comm, mg->comm_stream), "all-reduce (uint64 sum)");
#endif
}

// In place: buf (n fp32, on the device) = sum over ranks (a squared gradient norm of a shard).
static void mg_allreduce_sum_f32(MultiGpu *mg, float *buf, size_t n, cudaStream_t stream) {
    if (mg->world == 1 || n == 0) return;
    mg_after(mg, stream);
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllReduce(buf, buf, n, ncclFloat32, ncclSum, mg->comm, mg->comm_stream), "all-reduce (fp32 sum)");
#endif
}

// Synchronous: the sum over ranks of a host float (losses). Waits for the comm stream (bounded).
static float mg_allreduce_sum_float(MultiGpu *mg, float v) {
    if (mg->world == 1) return v;
    float *h = (float *)mg->host_scratch;
    h[0] = v;
    cudaCheck(cudaMemcpyAsync(mg->scratch, h, sizeof(float), cudaMemcpyHostToDevice, mg->comm_stream));
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllReduce(mg->scratch, mg->scratch, 1, ncclFloat32, ncclSum, mg->comm, mg->comm_stream), "all-reduce (float sum)");
#endif
    cudaCheck(cudaMemcpyAsync(h, mg->scratch, sizeof(float), cudaMemcpyDeviceToHost, mg->comm_stream));
    mg_wait(mg, mg->comm_stream, "a float sum across ranks");
    return h[0];
}

// Every rank waits here for every other, at most timeout_s seconds (<= 0: mg->timeout_s). Only the
// host meets: work queued on compute streams is not waited for.
static void mg_barrier(MultiGpu *mg, double timeout_s) {
    if (mg->world == 1) return;
#ifdef ENABLE_NCCL
    mgNcclCheck(mg, ncclAllReduce(mg->scratch, mg->scratch, 1, ncclInt32, ncclSum, mg->comm, mg->comm_stream), "barrier");
#endif
    mg_wait_for(mg, mg->comm_stream, "the barrier", timeout_s > 0 ? timeout_s : mg->timeout_s);
}

// Do all ranks hold the same v? Returns 1 if so; *vmin / *vmax (may be NULL) get the extremes.
static int mg_all_agree(MultiGpu *mg, long long v, long long *vmin, long long *vmax) {
    long long lo = v, hi = v;
    if (mg->world > 1) {
        long long *h = (long long *)mg->host_scratch;
        h[0] = v;
        h[1] = -v; // max of -v = -(min of v): one call for both
        cudaCheck(cudaMemcpyAsync(mg->scratch, h, 2 * sizeof(long long), cudaMemcpyHostToDevice, mg->comm_stream));
#ifdef ENABLE_NCCL
        mgNcclCheck(mg, ncclAllReduce(mg->scratch, mg->scratch, 2, ncclInt64, ncclMax, mg->comm, mg->comm_stream), "all-reduce (agreement)");
#endif
        cudaCheck(cudaMemcpyAsync(h, mg->scratch, 2 * sizeof(long long), cudaMemcpyDeviceToHost, mg->comm_stream));
        mg_wait(mg, mg->comm_stream, "an agreement check across ranks");
        hi = h[0];
        lo = -h[1];
    }
    if (vmin) *vmin = lo;
    if (vmax) *vmax = hi;
    return lo == hi;
}

// Ends every rank with a message if the ranks disagree about `what` (a size, a step, a setting).
static void mg_check_agree(MultiGpu *mg, long long v, const char *what) {
    long long lo, hi;
    if (!mg_all_agree(mg, v, &lo, &hi)) {
        MG_FAIL(mg, "the ranks disagree about %s: this rank has %lld, the values range over [%lld, %lld]."
                " Every rank must be started with the same settings and files", what, v, lo, hi);
    }
}

// ----------------------------------------------------------------------------------------------
// Start-up: the ranks' GPUs and NCCL id (how the ranks are started: llmc/launcher.h)

static void mg_check_gpus(int wanted, const char *how) {
    int ndev = 0;
    cudaError_t err = cudaGetDeviceCount(&ndev);
    if (err != cudaSuccess || ndev == 0) {
        FATAL("%s asks for %d GPUs, but no CUDA GPU is visible (%s)", how, wanted, err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    }
    if (wanted > ndev) {
        const char *vis = getenv("CUDA_VISIBLE_DEVICES");
        FATAL("%s asks for %d GPUs on this node, but only %d %s visible (CUDA_VISIBLE_DEVICES=%s): use at most %d",
              how, wanted, ndev, ndev == 1 ? "is" : "are", vis ? vis : "(unset)", ndev);
    }
}

#ifdef ENABLE_NCCL
// The id file: magic, world, then the id; written by rank 0 under a temporary name and renamed, so
// a reader sees all of it or nothing.
typedef struct { char magic[8]; int world, launcher_pid; ncclUniqueId id; } MgIdFile;
static const char MG_ID_MAGIC[8] = {'L', 'F', '8', 'N', 'C', 'C', 'L', '1'};

static void mg_write_id(const MultiGpu *mg, const ncclUniqueId *id) {
    char tmp[96];
    snprintf(tmp, sizeof(tmp), "%s.tmp", mg->id_path);
    MgIdFile f;
    memset(&f, 0, sizeof(f));
    memcpy(f.magic, MG_ID_MAGIC, 8);
    f.world = mg->world;
    f.launcher_pid = (int)getppid();
    f.id = *id;
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) MG_FAIL(mg, "cannot create the NCCL id file '%s': %s", tmp, strerror(errno));
    if (write(fd, &f, sizeof(f)) != (ssize_t)sizeof(f)) MG_FAIL(mg, "cannot write the NCCL id file '%s': %s", tmp, strerror(errno));
    if (close(fd) != 0) MG_FAIL(mg, "cannot close the NCCL id file '%s': %s", tmp, strerror(errno));
    if (rename(tmp, mg->id_path) != 0) MG_FAIL(mg, "rename '%s' -> '%s' failed: %s", tmp, mg->id_path, strerror(errno));
}

static void mg_read_id(const MultiGpu *mg, ncclUniqueId *id) {
    double t0 = monotonic_seconds();
    MgIdFile f;
    for (;;) {
        int fd = open(mg->id_path, O_RDONLY);
        if (fd >= 0) {
            ssize_t got = read(fd, &f, sizeof(f));
            close(fd);
            if (got != (ssize_t)sizeof(f) || memcmp(f.magic, MG_ID_MAGIC, 8) != 0) {
                MG_FAIL(mg, "the NCCL id file '%s' is not one this program wrote (%zd bytes)", mg->id_path, got);
            }
            break;
        }
        if (errno != ENOENT) MG_FAIL(mg, "cannot open the NCCL id file '%s': %s", mg->id_path, strerror(errno));
        if (monotonic_seconds() - t0 > mg->timeout_s) {
            MG_FAIL(mg, "rank 0 did not write the NCCL id file '%s' within %.0f s (did it fail to start?)", mg->id_path, mg->timeout_s);
        }
        usleep(10000);
    }
    if (f.launcher_pid != (int)getppid()) {
        MG_FAIL(mg, "the NCCL id file '%s' belongs to another launch (launcher pid %d, ours %d)", mg->id_path, f.launcher_pid, (int)getppid());
    }
    if (f.world != mg->world) {
        MG_FAIL(mg, "world sizes disagree: the NCCL id file '%s' was written for %d ranks, this rank was started as one of %d",
                mg->id_path, f.world, mg->world);
    }
    *id = f.id;
}
#endif

// Sets up this process's part of the job (see the file comment); ngpu is the -ngpu flag (0: one
// GPU, or as many as mpirun started). Makes the rank's GPU current. Call it first in main, after
// parsing the options and before any CUDA call other than counting the GPUs (which the launcher does
// itself: it makes no context). The -ngpu launcher process never returns.
static void multi_gpu_init(MultiGpu *mg, char **argv, int ngpu) {
    memset(mg, 0, sizeof(*mg));
    mg->world = mg->local_world = 1;
    mg->launch = MG_LAUNCH_SINGLE;
    mg->timeout_s = MG_DEFAULT_TIMEOUT_S;
    const char *tv = getenv("LLAMA_FP8_NCCL_TIMEOUT_S");
    if (tv && *tv) {
        char *end = NULL;
        double t = strtod(tv, &end);
        if (*end != '\0' || !(t > 0.0)) FATAL("LLAMA_FP8_NCCL_TIMEOUT_S must be a positive number of seconds, got '%s'", tv);
        mg->timeout_s = t;
    }
    if (ngpu < 0) FATAL("-ngpu must be 0 (one GPU, or mpirun's rank count) or a GPU count, got %d", ngpu);

    int planned, start = mg_start_of(ngpu, &planned);
    if (start == MG_START_FORK_RANK) {
        mg->launch = MG_LAUNCH_FORK;
        mg->rank = mg_env_int("LLAMA_FP8_RANK");
        mg->world = mg_env_int("LLAMA_FP8_WORLD");
        const char *idf = getenv("LLAMA_FP8_ID_FILE");
        if (idf == NULL || strlen(idf) >= sizeof(mg->id_path)) FATAL("LLAMA_FP8_ID_FILE is unset or too long: it is set by the -ngpu launcher");
        strcpy(mg->id_path, idf);
        if (mg->world < 2 || mg->rank >= mg->world) FATAL("LLAMA_FP8_RANK=%d / LLAMA_FP8_WORLD=%d make no sense", mg->rank, mg->world);
        if (ngpu != mg->world) FATAL("world sizes disagree: this rank was started as one of %d but its -ngpu is %d", mg->world, ngpu);
        mg->local_rank = mg->rank;
        mg->local_world = mg->world;
    } else if (start == MG_START_MPI) {
        int mpi_size = planned;
        if (ngpu > 0 && ngpu != mpi_size) {
            FATAL("world sizes disagree: mpirun started %d rank%s but -ngpu is %d. Under mpirun leave -ngpu out (or give the"
                  " same count); without mpirun, -ngpu N starts the ranks itself", mpi_size, mpi_size == 1 ? "" : "s", ngpu);
        }
#ifndef ENABLE_NCCL
        FATAL("mpirun started %d ranks, but this build has no NCCL, so it can only train on one GPU: install NCCL"
              " (libnccl-dev) and rebuild (make prints whether it found NCCL)", mpi_size);
#elif !defined(MG_USE_MPI)
        FATAL("mpirun started %d ranks, but this build has no MPI: run it without mpirun as '%s -ngpu %d ...'"
              " (or install MPI and rebuild)", mpi_size, argv[0], mpi_size);
#else
        mg->launch = MG_LAUNCH_MPI;
        mpiCheck(MPI_Init(NULL, NULL));
        g_mg_mpi_live = 1;
        mpiCheck(MPI_Comm_rank(MPI_COMM_WORLD, &mg->rank));
        mpiCheck(MPI_Comm_size(MPI_COMM_WORLD, &mg->world));
        if (mg->world != mpi_size) FATAL("MPI reports %d ranks but the launcher's environment says %d", mg->world, mpi_size);
        MPI_Comm node;
        mpiCheck(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, mg->rank, MPI_INFO_NULL, &node));
        mpiCheck(MPI_Comm_rank(node, &mg->local_rank));
        mpiCheck(MPI_Comm_size(node, &mg->local_world));
        mpiCheck(MPI_Comm_free(&node));
#endif
    } else if (start == MG_START_LAUNCHER) {
#ifndef ENABLE_NCCL
        FATAL("-ngpu %d: this build has no NCCL, so it can only train on one GPU. Install NCCL (libnccl-dev) and"
              " rebuild (make prints whether it found NCCL), or run with -ngpu 1", ngpu);
#else
        mg_check_gpus(ngpu, "-ngpu");
        mg_launch_ranks(ngpu, argv); // never returns
#endif
    }

    if (mg->world > 1) mg_check_gpus(mg->local_world, "this job");
    mg->local_device = mg->local_rank;
    cudaCheck(cudaSetDevice(mg->local_device));
    int lo_prio = 0, hi_prio = 0;
    cudaCheck(cudaDeviceGetStreamPriorityRange(&lo_prio, &hi_prio));
    cudaCheck(cudaStreamCreateWithPriority(&mg->comm_stream, cudaStreamNonBlocking, hi_prio));
    cudaCheck(cudaEventCreateWithFlags(&mg->ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&mg->done, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&mg->waited, cudaEventDisableTiming));
    mg->scratch = cudaMallocCheck(64, "multi-GPU scratch");
    cudaCheck(cudaMemset(mg->scratch, 0, 64));
    cudaCheck(cudaMallocHost(&mg->host_scratch, 64));
    if (mg->world == 1) return;

#ifdef ENABLE_NCCL
    atexit(mg_atexit); // after the CUDA runtime's own handler, so it runs before the runtime tears down
    ncclUniqueId id;
    if (mg->rank == 0) mgNcclCheck(mg, ncclGetUniqueId(&id), "unique id");
    if (mg->launch == MG_LAUNCH_FORK) {
        if (mg->rank == 0) mg_write_id(mg, &id);
        else mg_read_id(mg, &id);
    }
#ifdef MG_USE_MPI
    if (mg->launch == MG_LAUNCH_MPI) mpiCheck(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, MPI_COMM_WORLD));
#endif
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0; // every call returns at once; mg_nccl_settle / mg_wait poll with a deadline
    ncclResult_t r = ncclCommInitRankConfig(&mg->comm, mg->world, id, mg->rank, &config);
    g_mg_comm = mg->comm;
    mgNcclCheck(mg, r, "communicator setup");
    int count = 0, user_rank = -1;
    mgNcclCheck(mg, ncclCommCount(mg->comm, &count), "comm count");
    mgNcclCheck(mg, ncclCommUserRank(mg->comm, &user_rank), "comm rank");
    if (count != mg->world || user_rank != mg->rank) {
        MG_FAIL(mg, "world sizes disagree: the communicator has %d ranks and calls this one %d", count, user_rank);
    }
    // once every rank is in the communicator, every rank has read the id file
    if (mg->launch == MG_LAUNCH_FORK && mg->rank == 0) unlink(mg->id_path);
    mg_check_agree(mg, mg->world, "the number of ranks");
    mg_check_agree(mg, ngpu, "-ngpu");
#endif
}

// Drains the comm stream (bounded), then closes the communicator, MPI and the scratch buffers.
static void multi_gpu_free(MultiGpu *mg) {
    if (mg->comm_stream == NULL) return;
    if (mg->world > 1) {
        mg_wait(mg, mg->comm_stream, "the last collectives");
#ifdef ENABLE_NCCL
        mgNcclCheck(mg, ncclCommFinalize(mg->comm), "finalize");
        g_mg_comm = NULL;
        ncclCommDestroy(mg->comm);
        mg->comm = NULL;
#endif
#ifdef MG_USE_MPI
        if (g_mg_mpi_live) {
            g_mg_mpi_live = 0;
            mpiCheck(MPI_Finalize());
        }
#endif
    }
    cudaCheck(cudaFree(mg->scratch));
    cudaCheck(cudaFreeHost(mg->host_scratch));
    cudaCheck(cudaEventDestroy(mg->ready));
    cudaCheck(cudaEventDestroy(mg->done));
    cudaCheck(cudaEventDestroy(mg->waited));
    cudaCheck(cudaStreamDestroy(mg->comm_stream));
    mg->comm_stream = NULL;
}

#endif
