/*
Host-side utilities shared by the trainer, the CPU reference and the tests: fatal-error helpers and
checked wrappers around the C library calls that touch files and memory. Every failure names the
file and line of the call and exits non-zero, so a user sees what went wrong and where.
Plain C (also compiles as C++ under nvcc).
*/
#ifndef LLMC_UTILS_H
#define LLMC_UTILS_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <stdint.h>
#include <math.h>
#include <sys/types.h>
#include <time.h>

// A fatal error with a printf-style message; the message should say what to do about it. The line
// goes out in one write: the ranks of a multi-GPU run that fail together (a full disk, say) share a
// terminal or a log, and lines written piecewise would interleave mid-line there.
static void fatal_at(const char *file, int line, const char *fmt, ...) {
    char msg[8192];
    int n = snprintf(msg, sizeof(msg), "error (%s:%d): ", file, line);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg + n, sizeof(msg) - n, fmt, ap); // file names are short: n is well inside msg
    va_end(ap);
    size_t len = strlen(msg);
    if (len == sizeof(msg) - 1) len--; // cut short: the newline takes the last character
    msg[len++] = '\n';
    fwrite(msg, 1, len, stderr); // stderr is unbuffered: one write
    exit(EXIT_FAILURE);
}
#define FATAL(...) fatal_at(__FILE__, __LINE__, __VA_ARGS__)

static FILE *fopen_check(const char *path, const char *mode, const char *file, int line) {
    FILE *fp = fopen(path, mode);
    if (fp == NULL) {
        fatal_at(file, line, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    }
    return fp;
}
#define fopenCheck(path, mode) fopen_check(path, mode, __FILE__, __LINE__)

// fread that insists on reading everything asked for: a short read means a truncated file.
static void fread_check(void *ptr, size_t size, size_t nmemb, FILE *fp, const char *what, const char *file, int line) {
    size_t got = fread(ptr, size, nmemb, fp);
    if (got != nmemb) {
        fatal_at(file, line, "short read of %s: wanted %zu items of %zu bytes, got %zu (%s)",
                 what, nmemb, size, got, feof(fp) ? "file truncated" : strerror(errno));
    }
}
#define freadCheck(ptr, size, nmemb, fp, what) fread_check(ptr, size, nmemb, fp, what, __FILE__, __LINE__)

static void fwrite_check(const void *ptr, size_t size, size_t nmemb, FILE *fp, const char *file, int line) {
    if (fwrite(ptr, size, nmemb, fp) != nmemb) {
        fatal_at(file, line, "write failed: %s (disk full?)", strerror(errno));
    }
}
#define fwriteCheck(ptr, size, nmemb, fp) fwrite_check(ptr, size, nmemb, fp, __FILE__, __LINE__)

static void fclose_check(FILE *fp, const char *file, int line) {
    if (fclose(fp) != 0) {
        fatal_at(file, line, "close failed: %s", strerror(errno));
    }
}
#define fcloseCheck(fp) fclose_check(fp, __FILE__, __LINE__)

// 64-bit seeks: shards and checkpoints can exceed 2 GB (llm.c's int offset bug).
static void fseek_check(FILE *fp, int64_t offset, int whence, const char *file, int line) {
    if (fseeko(fp, (off_t)offset, whence) != 0) {
        fatal_at(file, line, "seek to %lld failed: %s", (long long)offset, strerror(errno));
    }
}
#define fseekCheck(fp, off, whence) fseek_check(fp, off, whence, __FILE__, __LINE__)

static int64_t file_size_check(FILE *fp, const char *file, int line) {
    fseek_check(fp, 0, SEEK_END, file, line);
    int64_t size = (int64_t)ftello(fp);
    fseek_check(fp, 0, SEEK_SET, file, line);
    return size;
}
#define fileSizeCheck(fp) file_size_check(fp, __FILE__, __LINE__)

static void *malloc_check(size_t size, const char *file, int line) {
    void *ptr = malloc(size);
    if (ptr == NULL && size > 0) {
        fatal_at(file, line, "host allocation of %zu bytes (%.2f GiB) failed", size, size / 1073741824.0);
    }
    return ptr;
}
#define mallocCheck(size) malloc_check(size, __FILE__, __LINE__)

static void *calloc_check(size_t n, size_t size, const char *file, int line) {
    void *ptr = calloc(n, size);
    if (ptr == NULL && n * size > 0) {
        fatal_at(file, line, "host allocation of %zu bytes (%.2f GiB) failed", n * size, n * size / 1073741824.0);
    }
    return ptr;
}
#define callocCheck(n, size) calloc_check(n, size, __FILE__, __LINE__)

// Write a whole file atomically: the caller writes to tmp_path, this renames it over final_path,
// so a crash mid-write never destroys the previous good file.
static void rename_check(const char *tmp_path, const char *final_path, const char *file, int line) {
    if (rename(tmp_path, final_path) != 0) {
        fatal_at(file, line, "rename '%s' -> '%s' failed: %s", tmp_path, final_path, strerror(errno));
    }
}
#define renameCheck(tmp, final) rename_check(tmp, final, __FILE__, __LINE__)

// Seconds on the monotonic clock, for timeouts and timings.
static double monotonic_seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

// xorshift* random numbers: the same stream on every platform, used for init, shuffles and tests.
static uint32_t random_u32(uint64_t *state) {
    *state ^= *state >> 12;
    *state ^= *state << 25;
    *state ^= *state >> 27;
    return (uint32_t)((*state * 0x2545F4914F6CDD1Dull) >> 32);
}
static float random_f32(uint64_t *state) { // uniform in [0, 1)
    return (random_u32(state) >> 8) / 16777216.0f;
}
// Standard normal by Box-Muller, one value per call (the second is discarded for simplicity of state).
static float random_normal(uint64_t *state) {
    float u1 = random_f32(state), u2 = random_f32(state);
    if (u1 < 1e-7f) u1 = 1e-7f;
    return sqrtf(-2.0f * logf(u1)) * cosf(6.283185307179586f * u2);
}

#endif
