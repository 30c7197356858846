/*
A minimal test harness for the CPU tests: CHECK records a failure (with file, line and a message)
without stopping the test; run_test runs one named test (when its name contains g_test_filter)
and counts it as passed or failed, printing its wall time;
run_expect_fatal runs a function in a child process, so code that must exit with an error on bad
input can be tested, and returns its exit status and what it printed to stderr. Beside them, the
files tests make: copies, and model files whose weights are never read.
*/
#ifndef DEV_TEST_HARNESS_H
#define DEV_TEST_HARNESS_H

#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/wait.h>
#include "llmc/utils.h"      // monotonic_seconds
#include "llmc/model_file.h" // model_header_put, param_sizes

static int g_tests_passed = 0, g_tests_failed = 0, g_check_failures = 0;

#define CHECK(cond, ...) do { \
    if (!(cond)) { \
        g_check_failures++; \
        fprintf(stdout, "    FAIL %s:%d: ", __FILE__, __LINE__); \
        fprintf(stdout, __VA_ARGS__); \
        fprintf(stdout, "\n"); \
    } } while (0)

static const char *g_test_filter = ""; // run_test runs only the tests whose name contains it

// Each result line ends with the test's wall time, so a slow test (a GPU suite's device time is
// scarce) can be found from the log.
static void run_test(const char *name, void (*fn)(void)) {
    if (strstr(name, g_test_filter) == NULL) return;
    g_check_failures = 0;
    double t0 = monotonic_seconds();
    fn();
    double secs = monotonic_seconds() - t0;
    fflush(stdout);
    if (g_check_failures == 0) { g_tests_passed++; printf("ok   %s (%.1f s)\n", name, secs); }
    else { g_tests_failed++; printf("FAIL %s (%d checks failed, %.1f s)\n", name, g_check_failures, secs); }
    fflush(stdout);
}

// A file's size in bytes, or -1 if it cannot be opened.
static long file_size(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fclose(f);
    return n;
}

// Copies a file (a missing one copies as nothing: the check that follows fails, no crash).
static void copy_file(const char *from, const char *to) {
    FILE *a = fopen(from, "rb"), *b = fopen(to, "wb");
    char buf[4096];
    size_t n;
    while (a && b && (n = fread(buf, 1, sizeof(buf), a)) > 0) fwrite(buf, 1, n, b);
    if (a) fclose(a);
    if (b) fclose(b);
}

// A model file of cfg (its header, step 0) whose weights read as zeros: cut to their size, a sparse
// file with nothing written, for the checks that stop at the header or the size.
static void write_sparse_model_file(const char *path, const LlamaConfig *cfg) {
    int h[MODEL_HEADER_INTS];
    model_header_put(h, cfg, 0);
    FILE *f = fopen(path, "wb");
    fwrite(h, sizeof(int), MODEL_HEADER_INTS, f);
    fclose(f);
    size_t sizes[NUM_PARAM_TENSORS];
    CHECK(truncate(path, (off_t)(sizeof(h) + param_sizes(cfg, sizes) * sizeof(float))) == 0, "truncate %s", path);
}

// Runs fn(arg) in a child. Returns the child's exit status (128 + signal if killed); its stderr
// (up to errlen-1 bytes) lands in err. A function that returns normally gives status 0.
static int run_expect_fatal(void (*fn)(void *), void *arg, char *err, size_t errlen) {
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); return -1; }
    fflush(stdout); fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        dup2(fds[1], 2);
        fn(arg);
        _exit(0);
    }
    close(fds[1]);
    size_t n = 0;
    ssize_t got;
    while (n + 1 < errlen && (got = read(fds[0], err + n, errlen - 1 - n)) > 0) n += (size_t)got;
    err[n] = '\0';
    char sink[256];
    while (read(fds[0], sink, sizeof(sink)) > 0) {}
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + WTERMSIG(status);
}

#endif
