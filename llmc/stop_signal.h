/*
Stopping on a signal without losing work: clusters send SIGTERM some time before SIGKILL (Slurm:
the grace period), users press Ctrl-C. The first SIGTERM or SIGINT only sets a flag; the trainer
finishes the step in flight, writes a checkpoint, says how to resume and exits 0. A second one exits
at once with status 128 + signal, first removing the temporary file of a checkpoint being written,
so nothing partial is left and the previous checkpoint stays the latest.

SIGUSR1 asks for the same stop but never counts as the second signal: it is what mpirun forwards to
its ranks (OpenMPI forwards SIGUSR1/2; SIGTERM to mpirun kills the job after a short delay) and what
the -ngpu launcher sends when it is signalled, so that a rank that also got the signal itself (Ctrl-C
reaches every process of the terminal's group) does not take the copy as a second one. SIGUSR2 is
the launcher's "exit now". Plain C, header-only; also compiles as C++ under nvcc.
*/
#ifndef LLMC_STOP_SIGNAL_H
#define LLMC_STOP_SIGNAL_H

#include <signal.h>
#include <string.h>
#include <unistd.h>

static volatile sig_atomic_t g_stop_signal = 0; // the first signal that asked to stop, 0 if none
static volatile sig_atomic_t g_stop_count = 0;  // SIGTERM/SIGINT received
static volatile char g_partial_path[1100];      // the temporary file being written, "" if none

static void stop_signal_handler(int sig) {
    int now = sig == SIGUSR2 || (sig != SIGUSR1 && g_stop_count++ > 0);
    if (now) { // only async-signal-safe calls
        const char msg[] = "\nsecond signal: exiting now without a checkpoint (the last complete one is kept)\n";
        ssize_t ignored = write(STDERR_FILENO, msg, sizeof(msg) - 1);
        if (g_partial_path[0] && unlink((const char *)g_partial_path) == 0) {
            const char what[] = "removed the partial file ";
            size_t n = 0;
            while (g_partial_path[n]) n++;
            ignored = write(STDERR_FILENO, what, sizeof(what) - 1);
            ignored = write(STDERR_FILENO, (const char *)g_partial_path, n);
            ignored = write(STDERR_FILENO, "\n", 1);
        }
        (void)ignored;
        _exit(128 + sig);
    }
    if (g_stop_signal == 0) g_stop_signal = sig;
}

static void stop_signal_install(void) {
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = stop_signal_handler;
    sa.sa_flags = SA_RESTART; // file writes and waits carry on through the first signal
    sigemptyset(&sa.sa_mask);
    const int sigs[] = {SIGTERM, SIGINT, SIGUSR1, SIGUSR2};
    for (int i = 0; i < 4; i++) sigaction(sigs[i], &sa, NULL);
}

// The file a second signal must remove (a checkpoint's temporary name), or NULL once it is renamed.
static void stop_signal_partial(const char *path) {
    g_partial_path[0] = '\0';
    if (path == NULL) return;
    size_t n = strlen(path);
    if (n >= sizeof(g_partial_path)) n = sizeof(g_partial_path) - 1;
    for (size_t i = 1; i < n; i++) g_partial_path[i] = path[i]; // the first byte last: the handler sees all or ""
    g_partial_path[n] = '\0';
    g_partial_path[0] = path[0];
}

static const char *stop_signal_name(int sig) {
    return sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : sig == SIGUSR1 ? "SIGUSR1" : "a signal";
}

#endif // LLMC_STOP_SIGNAL_H
