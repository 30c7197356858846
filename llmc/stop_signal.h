/*
Stopping on a signal without losing work: clusters send SIGTERM some time before SIGKILL (Slurm:
the grace period, or SIGUSR1 ahead of time with --signal=USR1@SECONDS), users press Ctrl-C, a
closed terminal sends SIGHUP. A SIGHUP ignored at start (`nohup ./train_llama_fp8 ... &`) stays
ignored: the user asked the run to outlive the terminal. (SIGINT is taken even so: a script's
background job inherits it ignored from the shell without asking, and a `kill -INT` from that
script is a stop request.) The first SIGTERM, SIGINT or SIGHUP only sets a flag; the trainer
finishes the step in flight, writes a checkpoint, says how to resume and exits 0. A second one exits
at once with status 128 + signal, first removing the temporary file of a checkpoint being written,
so nothing partial is left and the previous checkpoint stays the latest.

SIGUSR1 asks for the same stop but never counts as the second signal: it is what mpirun forwards to
its ranks (OpenMPI forwards SIGUSR1/2; SIGTERM to mpirun kills the job after a short delay) and what
the -ngpu launcher sends when it is signalled, so that a rank that also got the signal itself (Ctrl-C
reaches every process of the terminal's group) does not take the copy as a second one. SIGUSR2 is
"exit now". The launcher sends both with sigqueue, carrying the signal it got itself as the value:
the rank then stops (or exits) as if that signal had reached it, under its name and exit status.
Its SIGUSR2 carrying STOP_PEER_FAILED means another rank failed: the rank exits at once without a
message of its own (no checkpoint can complete without that rank), so the failed rank's error and
the launcher's line naming it are what a user reads.

The signals are blocked in every thread and one thread of ours waits for them (sigwaitinfo): a
thread that NCCL, CUDA or OpenMP creates later inherits the block, so a stop signal never interrupts
one of their system calls, and a second signal still ends a process whose main thread is stuck.
An unfinished checkpoint's files are also removed when the process exits on an error (atexit, and
llmc/multi_gpu.cuh's failure path).
Plain C, header-only; also compiles as C++ under nvcc.
*/
#ifndef LLMC_STOP_SIGNAL_H
#define LLMC_STOP_SIGNAL_H

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <pthread.h>

static volatile sig_atomic_t g_stop_signal = 0; // the first signal that asked to stop, 0 if none
static volatile sig_atomic_t g_stop_count = 0;  // SIGTERM/SIGINT/SIGHUP received
// What a second signal, or an exit on an error, must remove: the temporary file being written (a
// checkpoint's, before its rename) and this rank's finished files of a checkpoint that is not yet
// complete (its state file; rank 0's model file too), unless the checkpoint's completion marker
// (g_unfinished_until) exists by then; "" if none.
static volatile char g_partial_path[1100], g_unfinished_path[2][1100], g_unfinished_until[1100];

static const int STOP_SIGNALS[] = {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2};
#define NUM_STOP_SIGNALS 5
#define STOP_PEER_FAILED (-1) // the launcher's SIGUSR2 value when another rank failed (no signal's number)

// The stop signals this process takes: all five, less SIGHUP if it is ignored (as it was at start:
// call this before installing any handler).
static void stop_signal_set(sigset_t *set) {
    sigemptyset(set);
    for (int i = 0; i < NUM_STOP_SIGNALS; i++) sigaddset(set, STOP_SIGNALS[i]);
    struct sigaction hup;
    if (sigaction(SIGHUP, NULL, &hup) == 0 && hup.sa_handler == SIG_IGN) sigdelset(set, SIGHUP);
}

// Only async-signal-safe calls: it also runs from mg_fail_at's _exit path.
static void stop_signal_remove_one(volatile char *path) {
    if (path[0] && unlink((const char *)path) == 0) {
        // the line in one write: several ranks remove theirs at once, and a pipe keeps a write of
        // up to PIPE_BUF bytes whole
        const char what[] = "removed the partial file ";
        char line[sizeof(what) + 1100];
        size_t n = sizeof(what) - 1;
        memcpy(line, what, n);
        for (size_t i = 0; path[i] && n < sizeof(line) - 1; i++) line[n++] = path[i];
        line[n++] = '\n';
        ssize_t ignored = write(STDERR_FILENO, line, n);
        (void)ignored;
    }
    path[0] = '\0';
}
static void stop_signal_cleanup(void) {
    stop_signal_remove_one(g_partial_path);
    if (g_unfinished_until[0] && access((const char *)g_unfinished_until, F_OK) == 0) return; // complete after all: another rank wrote the marker
    stop_signal_remove_one(g_unfinished_path[0]);
    stop_signal_remove_one(g_unfinished_path[1]);
}

// One signal: sig as received; the launcher's SIGUSR1/SIGUSR2 carry (SI_QUEUE) the signal it got,
// or STOP_PEER_FAILED.
static void stop_signal_take(int sig, const siginfo_t *info) {
    int as = sig;
    if ((sig == SIGUSR1 || sig == SIGUSR2) && info && info->si_code == SI_QUEUE) {
        int v = info->si_value.sival_int;
        if (v == SIGTERM || v == SIGINT || v == SIGHUP || v == SIGUSR1 || v == SIGUSR2) as = v;
        if (sig == SIGUSR2 && v == STOP_PEER_FAILED) {
            stop_signal_cleanup();
            _exit(128 + SIGUSR2);
        }
    }
    int now = sig == SIGUSR2 || (sig != SIGUSR1 && g_stop_count++ > 0);
    if (now) {
        const char msg[] = "\nsecond signal: exiting now without a checkpoint (the last complete one is kept)\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)ignored;
        stop_signal_cleanup();
        _exit(128 + as);
    }
    if (g_stop_signal == 0) g_stop_signal = as;
}

static void *stop_signal_thread(void *arg) {
    (void)arg;
    sigset_t set;
    stop_signal_set(&set);
    for (;;) {
        siginfo_t info;
        int sig = sigwaitinfo(&set, &info);
        if (sig > 0) stop_signal_take(sig, &info);
    }
    return NULL;
}

// Call first in main, before anything starts a thread (CUDA, NCCL, OpenMP): blocks the stop signals
// in this thread, and so in every thread created from here on, and starts the thread that takes them.
static void stop_signal_install(void) {
    sigset_t set;
    stop_signal_set(&set);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    pthread_t t;
    if (pthread_create(&t, NULL, stop_signal_thread, NULL) != 0) {
        const char msg[] = "error: cannot start the stop-signal thread\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        (void)ignored;
        exit(EXIT_FAILURE);
    }
    pthread_detach(t);
}

static void stop_signal_set_path(volatile char *to, const char *path) {
    static int cleanup_registered = 0;
    if (!cleanup_registered) { cleanup_registered = 1; atexit(stop_signal_cleanup); }
    to[0] = '\0';
    if (path == NULL) return;
    size_t n = strlen(path);
    if (n >= sizeof(g_partial_path)) n = sizeof(g_partial_path) - 1;
    for (size_t i = 1; i < n; i++) to[i] = path[i]; // the first byte last: the signal thread sees all or ""
    to[n] = '\0';
    to[0] = path[0];
}
// The temporary file being written (removed on a second signal or an error exit), NULL once renamed.
static void stop_signal_partial(const char *path) { stop_signal_set_path(g_partial_path, path); }
// A finished file of this rank's of a checkpoint that is complete once `marker` exists (removed
// likewise, unless the marker is there by then): each call adds one, two at most (the state file;
// rank 0's model file); NULL once the checkpoint is complete.
static void stop_signal_unfinished(const char *path, const char *marker) {
    if (path != NULL) {
        stop_signal_set_path(g_unfinished_until, marker);
        stop_signal_set_path(g_unfinished_path[g_unfinished_path[0][0] != '\0'], path);
        return;
    }
    stop_signal_set_path(g_unfinished_path[0], NULL);
    stop_signal_set_path(g_unfinished_path[1], NULL);
}

static const char *stop_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGHUP ? "SIGHUP" : sig == SIGUSR1 ? "SIGUSR1"
         : sig == SIGUSR2 ? "SIGUSR2" : "a signal";
}

#endif // LLMC_STOP_SIGNAL_H
