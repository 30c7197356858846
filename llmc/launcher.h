/*
The -ngpu launcher and the launch decision: host code only (fork, execve, signals, the environment),
no CUDA and no NCCL, so the host tests run it with stand-in ranks. llmc/multi_gpu.cuh includes it
and builds the communicator on what it decides.

Launch (mg_start_of decides, in this order):
  1. LLAMA_FP8_RANK is set: this process is rank LLAMA_FP8_RANK of LLAMA_FP8_WORLD, started by the
     fork launcher below; it reads the NCCL unique id from the file LLAMA_FP8_ID_FILE.
  2. An MPI launcher's variables are set (OMPI_COMM_WORLD_SIZE, PMI_SIZE, MV2_COMM_WORLD_SIZE) with
     more than one rank: MPI_Init, rank 0 makes the id and MPI_Bcast hands it out (needs ENABLE_MPI;
     without it the launch is refused, since N copies would otherwise train N separate models).
     One MPI rank (`srun --mpi=pmi2 -n 1`, `mpirun -np 1`) is no launch of ours: -ngpu N still works.
  3. -ngpu N (N > 1): this process becomes the launcher. It starts N ranks by fork + execve of
     /proc/self/exe with the same argv and the same environment plus LLAMA_FP8_RANK, LLAMA_FP8_WORLD
     and LLAMA_FP8_ID_FILE=/tmp/llama_fp8_nccl_<launcher pid>, then only watches them: it never
     touches a GPU beyond counting them, so it never returns from multi_gpu_init. Rank 0 writes the
     id file atomically (temporary name + rename); the others poll for it, up to the timeout. If any
     rank exits non-zero or is killed, the launcher names it and its status or signal, sends the rest
     SIGUSR2 carrying STOP_PEER_FAILED (they exit at once, quietly: llmc/stop_signal.h), SIGKILL
     after 5 s, and exits 1; if the launcher itself dies, every rank gets SIGKILL (PR_SET_PDEATHSIG).
     The launcher takes the stop signals as a rank does (llmc/stop_signal.h; a SIGHUP ignored at
     start, as under nohup, stays ignored here and in the ranks, which inherit it so through execve):
     SIGTERM, SIGINT, SIGHUP and SIGUSR1 are passed on to every rank as SIGUSR1 (stop after this
     step with a checkpoint), a second SIGTERM/SIGINT/SIGHUP or any SIGUSR2 as SIGUSR2 (exit now),
     each carrying the signal the launcher got (sigqueue), so the ranks name it and exit with its
     status. A rank that exits 128 + a stop signal after such a stop (nothing saved: -o '') has done
     what was asked; the launcher then exits with that status too, and with 128 + the second signal
     after an "exit now". The ranks start with the stop signals blocked (inherited through execve),
     so one that arrives before a rank is ready to take it waits instead of killing it.
  4. Otherwise: one GPU, no communicator.
The environment passes to the ranks unchanged (NCCL_* settings such as NCCL_NVLS_ENABLE included);
rank r uses local device r (CUDA_VISIBLE_DEVICES is respected, not rewritten).
*/
#ifndef LLMC_LAUNCHER_H
#define LLMC_LAUNCHER_H

#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include <sys/prctl.h>
#include "utils.h"       // FATAL, monotonic_seconds
#include "stop_signal.h" // the stop signals' meaning, shared with the ranks

#define MG_KILL_GRACE_S 5.0        // launcher: after a rank failed, SIGUSR2 to the rest, then SIGKILL after this long

// The rank count an MPI launcher announced in the environment, 0 if none.
static int mg_mpi_env_size(void) {
    const char *names[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "MV2_COMM_WORLD_SIZE"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v && atoi(v) > 0) return atoi(v);
    }
    return 0;
}

static int mg_env_int(const char *name) {
    const char *v = getenv(name);
    char *end = NULL;
    long x = v ? strtol(v, &end, 10) : -1;
    if (v == NULL || *v == '\0' || *end != '\0' || x < 0 || x > 1000000) {
        FATAL("environment variable %s is '%s', not a rank number: it is set by the -ngpu launcher and should not be set by hand",
              name, v ? v : "(unset)");
    }
    return (int)x;
}

static const char *mg_describe_status(int status, char *buf, size_t n) {
    if (WIFEXITED(status)) snprintf(buf, n, "exited with status %d", WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) snprintf(buf, n, "was killed by signal %d (%s)", WTERMSIG(status), strsignal(WTERMSIG(status)));
    else snprintf(buf, n, "stopped (status 0x%x)", status);
    return buf;
}

// The launcher's ranks, for its signal handler (0: not started or ended), and what it was asked:
// the first stop signal, the signal of an "exit now" (0: none).
static pid_t *volatile g_mg_pids = NULL;
static volatile sig_atomic_t g_mg_nranks = 0, g_mg_counted = 0, g_mg_stop_sig = 0, g_mg_exit_sig = 0;

// As a rank takes a signal (llmc/stop_signal.h), passed on with the signal itself as the value.
static void mg_launcher_signal(int sig) {
    int now = sig == SIGUSR2 || (sig != SIGUSR1 && g_mg_counted++ > 0);
    if (now && g_mg_exit_sig == 0) g_mg_exit_sig = sig;
    if (!now && g_mg_stop_sig == 0) g_mg_stop_sig = sig;
    union sigval v;
    v.sival_int = sig;
    for (int k = 0; k < g_mg_nranks; k++) if (g_mg_pids[k] > 0) sigqueue(g_mg_pids[k], now ? SIGUSR2 : SIGUSR1, v);
}

// Did a rank that ended with `status` do what the launcher's signals asked? It finished (0), or,
// once a stop or an "exit now" was passed on, exited 128 + a stop signal (a stop with nothing saved,
// or an exit now).
static int mg_rank_status_ok(int status) {
    if (!WIFEXITED(status)) return 0;
    int code = WEXITSTATUS(status);
    if (code == 0) return 1;
    if (g_mg_stop_sig == 0 && g_mg_exit_sig == 0) return 0;
    for (int i = 0; i < NUM_STOP_SIGNALS; i++) if (code == 128 + STOP_SIGNALS[i]) return 1;
    return 0;
}

// The -ngpu launcher: starts world ranks and watches them. Never returns.
static void mg_launch_ranks(int world, char **argv) {
    double t0 = monotonic_seconds();
    char id_path[64], tmp_path[96];
    snprintf(id_path, sizeof(id_path), "/tmp/llama_fp8_nccl_%d", (int)getpid());
    snprintf(tmp_path, sizeof(tmp_path), "%s.tmp", id_path);
    unlink(id_path); // a file left by an earlier process with this pid must never be read
    unlink(tmp_path);

    // Each rank's environment: ours, unchanged, plus (replacing any stale copies of) the three variables.
    int nenv = 0;
    while (environ[nenv]) nenv++;
    char ***envs = (char ***)mallocCheck(world * sizeof(char **));
    for (int r = 0; r < world; r++) {
        char **e = envs[r] = (char **)mallocCheck((nenv + 4) * sizeof(char *));
        int k = 0;
        for (int i = 0; i < nenv; i++) {
            if (strncmp(environ[i], "LLAMA_FP8_RANK=", 15) == 0 || strncmp(environ[i], "LLAMA_FP8_WORLD=", 16) == 0 ||
                strncmp(environ[i], "LLAMA_FP8_ID_FILE=", 18) == 0) continue;
            e[k++] = environ[i];
        }
        e[k] = (char *)mallocCheck(32);
        snprintf(e[k++], 32, "LLAMA_FP8_RANK=%d", r);
        e[k] = (char *)mallocCheck(32);
        snprintf(e[k++], 32, "LLAMA_FP8_WORLD=%d", world);
        e[k] = (char *)mallocCheck(96);
        snprintf(e[k++], 96, "LLAMA_FP8_ID_FILE=%s", id_path);
        e[k] = NULL;
    }

    printf("multi-GPU: starting %d ranks on this node (NCCL id file %s)\n", world, id_path);
    fflush(stdout);
    fflush(stderr);
    pid_t parent = getpid();
    pid_t *pids = (pid_t *)callocCheck(world, sizeof(pid_t));
    g_mg_pids = pids;
    g_mg_nranks = world;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = mg_launcher_signal;
    sa.sa_flags = SA_RESTART;
    sigset_t stops, before;
    stop_signal_set(&stops); // before any handler: it sees whether SIGHUP was ignored at start
    sa.sa_mask = stops; // one forward at a time
    for (int i = 0; i < NUM_STOP_SIGNALS; i++) if (sigismember(&stops, STOP_SIGNALS[i])) sigaction(STOP_SIGNALS[i], &sa, NULL);
    // blocked until every pid is known (a signal meanwhile waits, then reaches every rank); the ranks
    // keep the block through execve until their stop-signal thread takes over
    sigprocmask(SIG_BLOCK, &stops, &before);
    for (int r = 0; r < world; r++) {
        pid_t p = fork();
        if (p < 0) {
            int err = errno;
            for (int k = 0; k < r; k++) kill(pids[k], SIGKILL);
            FATAL("fork of rank %d failed: %s", r, strerror(err));
        }
        if (p == 0) { // child: only async-signal-safe calls until execve
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent) _exit(EXIT_FAILURE); // the launcher died before prctl
            execve("/proc/self/exe", argv, envs[r]);
            const char msg[] = "multi-GPU launcher: execve(/proc/self/exe) failed\n";
            ssize_t ignored = write(2, msg, sizeof(msg) - 1);
            (void)ignored;
            _exit(127);
        }
        pids[r] = p;
    }
    sigprocmask(SIG_SETMASK, &before, NULL);

    int alive = world, failed_rank = -1, term_sent = 0, kill_sent = 0, stop_status = 0;
    double t_fail = 0.0;
    while (alive > 0) {
        int status = 0;
        pid_t p = waitpid(-1, &status, failed_rank < 0 ? 0 : WNOHANG);
        if (p < 0 && errno == EINTR) continue;
        if (p < 0) break; // no children left
        if (p > 0) {
            int r = -1;
            for (int k = 0; k < world; k++) if (pids[k] == p) r = k;
            if (r < 0) continue;
            pids[r] = 0;
            alive--;
            int ok = mg_rank_status_ok(status);
            if (ok && WEXITSTATUS(status) != 0 && stop_status == 0) stop_status = WEXITSTATUS(status);
            if (!ok && failed_rank < 0) {
                char desc[96];
                failed_rank = r;
                t_fail = monotonic_seconds();
                fprintf(stderr, "multi-GPU launcher: rank %d %s after %.1f s: stopping the other ranks\n", r,
                        mg_describe_status(status, desc, sizeof(desc)), t_fail - t0);
                fflush(stderr);
            }
            continue;
        }
        // p == 0: a failure is being handled and some ranks are still alive
        if (!term_sent) {
            union sigval v;
            v.sival_int = STOP_PEER_FAILED;
            for (int k = 0; k < world; k++) if (pids[k] > 0) sigqueue(pids[k], SIGUSR2, v);
            term_sent = 1;
        } else if (!kill_sent && monotonic_seconds() - t_fail > MG_KILL_GRACE_S) {
            for (int k = 0; k < world; k++) if (pids[k] > 0) kill(pids[k], SIGKILL);
            kill_sent = 1;
        }
        usleep(20000);
    }
    unlink(id_path);
    unlink(tmp_path);
    if (failed_rank >= 0) {
        fprintf(stderr, "multi-GPU launcher: all %d ranks ended %.2f s after rank %d failed (%.1f s after the start); exit status 1\n",
                world, monotonic_seconds() - t_fail, failed_rank, monotonic_seconds() - t0);
        exit(EXIT_FAILURE);
    }
    exit(g_mg_exit_sig ? 128 + g_mg_exit_sig : stop_status);
}

// How multi_gpu_init starts this process's part of the job (the file comment's order), and the
// number of ranks it will have, known before it runs: settings that cannot work with that many (a
// total batch that does not split over them) are refused before any rank starts, and main knows
// whether this process becomes the launcher. Reads only the environment.
enum { MG_START_SINGLE, MG_START_FORK_RANK, MG_START_MPI, MG_START_LAUNCHER };
static int mg_start_of(int ngpu, int *world) {
    if (getenv("LLAMA_FP8_RANK") != NULL) { *world = mg_env_int("LLAMA_FP8_WORLD"); return MG_START_FORK_RANK; }
    int mpi_size = mg_mpi_env_size();
    if (mpi_size > 1) { *world = mpi_size; return MG_START_MPI; }
    if (ngpu > 1) { *world = ngpu; return MG_START_LAUNCHER; }
    *world = 1;
    return MG_START_SINGLE;
}

static int mg_planned_world(int ngpu) {
    int world;
    mg_start_of(ngpu, &world);
    return world;
}

// Of those ranks, the ones on this host (what they share: its memory), known before any starts: under an
// MPI launcher the local count it announced (Open MPI, MPICH's Hydra, MVAPICH2), else every rank.
static int mg_planned_local_world(int ngpu) {
    int world, start = mg_start_of(ngpu, &world);
    if (start != MG_START_MPI) return world;
    const char *names[] = {"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS", "MV2_COMM_WORLD_LOCAL_SIZE"};
    for (int i = 0; i < 3; i++) {
        const char *v = getenv(names[i]);
        if (v && atoi(v) > 0 && atoi(v) <= world) return atoi(v);
    }
    return world;
}

#endif // LLMC_LAUNCHER_H
