/*
A checkpoint file as bytes (docs/formats.md): a header of 256 int32 words, then its sections one after
another. The model file (model_SSSSSSSS.bin; its header words: llmc/model_file.h) and each rank's state
file (state_SSSSSSSS_RRRRR.bin, STATE_MAGIC; its words and sections: train_llama_fp8.cu's
STATE_FIELDS and state_sections) share this layout, the versions and the checksum of header and body.
write_sections writes a file to NAME.tmp, starting the writeback of each chunk as it goes, syncs it and
renames it; read_sections checks the magic, the version, the header words the caller expects, the size
and the checksum, and every refusal names the file. Which files make a checkpoint, and which one -y 1
takes: llmc/checkpoint.h.
Plain C, header-only; also compiles as C++ under nvcc, where a section may live on the GPU.
*/
#ifndef LLMC_CHECKPOINT_FILE_H
#define LLMC_CHECKPOINT_FILE_H

#if !defined(_GNU_SOURCE) // C++ compilers define it; a C build must, before its first #include
#error "llmc/checkpoint_file.h needs _GNU_SOURCE (sync_file_range): define it before any #include"
#endif

#include <errno.h>
#include <fcntl.h>         // sync_file_range, posix_fadvise
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "utils.h"         // FATAL, the checked file calls
#include "llama_config.h"  // LlamaConfig, param_sizes
#include "model_file.h"    // MODEL_MAGIC, MODEL_VERSION, model_header_get, the checksums and their header words
#include "stop_signal.h"   // stop_signal_partial: a second signal or an error exit removes NAME.tmp
#ifdef __CUDACC__
#include "cuda_common.cuh" // cudaCheck: a section on the GPU
#endif

#define STATE_MAGIC 20261202
#define CKPT_VERSION MODEL_VERSION // both files; versions 1 and 2 still read (llmc/model_file.h)
#ifndef CKPT_CHUNK // the host tests set a small one, so their small files cross chunk edges
#define CKPT_CHUNK ((size_t)64 << 20)
#endif

// A file section: `bytes` at ptr, in host memory or (on_device) on the GPU. A section read with a
// sink goes to sink(ctx, chunk, offset in the section, chunk bytes) a chunk at a time instead, so a
// reader that keeps part of it never holds all of it.
typedef void (*SectionSink)(void *ctx, const void *chunk, size_t offset, size_t n);
typedef struct { const void *ptr; size_t bytes; int on_device; SectionSink sink; void *ctx; } Section;

// The size of a file of these sections: the header and every section.
static int64_t sections_file_bytes(const Section *sec, int nsec) {
    int64_t bytes = 256 * sizeof(int);
    for (int s = 0; s < nsec; s++) bytes += (int64_t)sec[s].bytes;
    return bytes;
}

// A section on the GPU passes through the host buffer a chunk at a time (to_device: the direction).
// Only an nvcc build has one: a plain C build (the CPU tests) refuses it.
static void section_copy(void *dst, const void *src, size_t n, int to_device) {
#ifdef __CUDACC__
    cudaCheck(cudaMemcpy(dst, src, n, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost));
#else
    (void)dst; (void)src; (void)n; (void)to_device;
    FATAL("a checkpoint section on the GPU in a build without CUDA");
#endif
}

// Buffered writes with one fsync at the end ran at 0.2 GB/s on a disk that writes 0.9 GB/s
// (dev/results/checkpoint_io.md): the dirty pages piled up and went out late. So the writeback of
// each chunk starts as soon as it is written, and the chunk before is awaited and dropped from the
// page cache. A file system without sync_file_range is left to the fsync at the end.
typedef struct { int64_t awaited, started; int off; } WriteBehind;

// A write into tmp failed (errno says why): the file at the final name is left as it was.
static void write_failed(const char *tmp) {
    FATAL("writing checkpoint '%s' failed: %s (disk full?); the previous checkpoint is kept", tmp, strerror(errno));
}

static void write_behind(FILE *f, WriteBehind *wb, const char *tmp) {
    if (fflush(f) != 0) write_failed(tmp);
    if (wb->off) return;
    int fd = fileno(f);
    int64_t end = (int64_t)ftello(f);
    const int wait_write_wait = SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE | SYNC_FILE_RANGE_WAIT_AFTER;
    int ok = sync_file_range(fd, wb->started, end - wb->started, SYNC_FILE_RANGE_WRITE) == 0 &&
             sync_file_range(fd, wb->awaited, wb->started - wb->awaited, wait_write_wait) == 0;
    if (!ok && (errno == EINVAL || errno == ESPIPE || errno == ENOSYS || errno == EOPNOTSUPP)) { wb->off = 1; return; }
    if (!ok) write_failed(tmp);
    // only advice: its result does not matter
    posix_fadvise(fd, wb->awaited, wb->started - wb->awaited, POSIX_FADV_DONTNEED);
    wb->awaited = wb->started;
    wb->started = end;
}

// Writes header (256 words: its checksum words are set here) and the sections to path, through
// path.tmp: a write that fails midway leaves the file that was there as it was.
static void write_sections(const char *path, int *header, const Section *sec, int nsec) {
    char tmp[1100];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    stop_signal_partial(tmp); // a second signal removes it
    FILE *f = fopenCheck(tmp, "wb");
    fwriteCheck(header, sizeof(int), 256, f);
    char *buf = (char *)mallocCheck(CKPT_CHUNK);
    uint64_t h = checksum_of_header(header);
    WriteBehind wb = {0, 0, 0};
    for (int s = 0; s < nsec; s++) {
        for (size_t off = 0; off < sec[s].bytes; off += CKPT_CHUNK) {
            size_t n = sec[s].bytes - off < CKPT_CHUNK ? sec[s].bytes - off : CKPT_CHUNK;
            const char *src = (const char *)sec[s].ptr + off;
            if (sec[s].on_device) { section_copy(buf, src, n, 0); src = buf; }
            h = checksum_of_version(header[1])(h, src, n);
            fwriteCheck(src, 1, n, f);
            write_behind(f, &wb, tmp);
        }
    }
    free(buf);
    if (fflush(f) != 0) write_failed(tmp);
    header_set_checksum_word(header, h);
    fseekCheck(f, 0, SEEK_SET);
    fwriteCheck(header, sizeof(int), 256, f);
    if (fflush(f) != 0 || fsync(fileno(f)) != 0) FATAL("flushing checkpoint '%s' failed: %s", tmp, strerror(errno));
    fcloseCheck(f);
    renameCheck(tmp, path);
    stop_signal_partial(NULL);
}

// A header word a reader expects (index, value, name), so a mismatch says exactly what differs; a
// word set by a flag also gives the flag that makes it 0 and 1 (pass[0], pass[1]; NULL for other
// words), so the message says what resumes the file.
typedef struct { int at, value; const char *name; const char *pass[2]; } HeaderExpect;

// read_sections' checks of what the header and the size say (header: the file's 256 words); returns
// the file open after its header. A resume on another number of GPUs reads only parts of the old files
// (load_resharded): their checksums were verified whole when the checkpoint was picked.
static FILE *open_sections(const char *path, int magic, const HeaderExpect *expect, int nexpect, const Section *sec,
                           int nsec, int header[256]) {
    FILE *f = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(f);
    if (size < (int64_t)(256 * sizeof(int))) FATAL("checkpoint '%s' is truncated (%lld bytes)", path, (long long)size);
    freadCheck(header, sizeof(int), 256, f, path);
    if (header[0] != magic)
        FATAL("'%s' is not a train_llama_fp8 checkpoint of this kind (magic %d, expected %d)", path, header[0], magic);
    if (header[1] < 1 || header[1] > CKPT_VERSION)
        FATAL("checkpoint '%s' has version %d; this build reads versions 1 to %d", path, header[1], CKPT_VERSION);
    for (int i = 0; i < nexpect; i++) {
        int v = header[expect[i].at];
        if (v == expect[i].value) continue;
        const char *pass = v == 0 || v == 1 ? expect[i].pass[v] : NULL;
        FATAL("checkpoint '%s' does not match this run: %s is %d in the file, %d here%s%s", path, expect[i].name, v,
              expect[i].value, pass ? "; to resume it, pass " : "", pass ? pass : "");
    }
    int64_t want = sections_file_bytes(sec, nsec);
    if (size != want)
        FATAL("checkpoint '%s' has %lld bytes, expected %lld: truncated or from another configuration", path,
              (long long)size, (long long)want);
    return f;
}

// Reads and verifies a file written by write_sections into the sections (with the checks of
// open_sections); header_out (256 words, or NULL) receives the file's header. Returns the file's
// version (version2_notice).
static int read_sections(const char *path, int magic, const HeaderExpect *expect, int nexpect, const Section *sec,
                         int nsec, int *header_out) {
    int header[256];
    FILE *f = open_sections(path, magic, expect, nexpect, sec, nsec, header);
    char *buf = (char *)mallocCheck(CKPT_CHUNK);
    uint64_t h = checksum_of_header(header);
    for (int s = 0; s < nsec; s++) {
        for (size_t off = 0; off < sec[s].bytes; off += CKPT_CHUNK) {
            size_t n = sec[s].bytes - off < CKPT_CHUNK ? sec[s].bytes - off : CKPT_CHUNK;
            char *dst = sec[s].on_device || sec[s].sink ? buf : (char *)sec[s].ptr + off;
            freadCheck(dst, 1, n, f, path);
            h = checksum_of_version(header[1])(h, dst, n);
            if (sec[s].sink) sec[s].sink(sec[s].ctx, buf, off, n);
            else if (sec[s].on_device) section_copy((char *)sec[s].ptr + off, buf, n, 1);
        }
    }
    free(buf);
    fcloseCheck(f);
    if (h != header_checksum_word(header)) FATAL("checkpoint '%s' is corrupt (checksum mismatch)", path);
    if (header_out) memcpy(header_out, header, sizeof(header));
    return header[1];
}

// The header of the file at path into h (256 words; all 0 where the file is shorter than that:
// read_sections refuses it, naming the file); returns the file's size. Nothing is verified.
static int64_t read_header(const char *path, int h[256]) {
    FILE *f = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(f);
    memset(h, 0, 256 * sizeof(int));
    if (size >= (int64_t)(256 * sizeof(int))) freadCheck(h, sizeof(int), 256, f, path);
    fcloseCheck(f);
    return size;
}

// A file of version 2 still loads, its header outside the checksum; the main rank alone says so, as
// every rank reads the model file and the ranks' state files are of one checkpoint, like rank 0's.
static void version2_notice(const char *path, int version, int main_rank) {
    if (version == 2 && main_rank)
        fprintf(stderr, "notice: '%s' is a version-2 file: its checksum covers the body, not the header (version 3,"
               " which this build writes, covers both; dev/data/upgrade_model_file rewrites a model file)\n", path);
}

// The model config a model file holds (its header, llmc/model_file.h); exits naming the file if it
// is not a model file or its size is not its config's (a shape word changed by corruption is refused
// here, before a model of that shape is allocated; the checksum is checked when the weights load).
// max_T is 0 when the file does not say.
static LlamaConfig read_model_config(const char *path) {
    FILE *f = fopenCheck(path, "rb");
    int h[MODEL_HEADER_INTS];
    int64_t size = fileSizeCheck(f);
    if (size < (int64_t)sizeof(h)) FATAL("model file '%s' is truncated: shorter than its header", path);
    freadCheck(h, sizeof(int), MODEL_HEADER_INTS, f, path);
    fcloseCheck(f);
    LlamaConfig c;
    const char *bad = model_header_get(h, &c);
    if (bad) FATAL("model file '%s': %s", path, bad);
    size_t sizes[NUM_PARAM_TENSORS];
    int64_t want = (int64_t)sizeof(h) + (int64_t)(param_sizes(&c, sizes) * sizeof(float));
    if (size != want)
        FATAL("model file '%s' has %lld bytes, but the config in its header needs %lld: truncated, or the header is"
              " corrupt", path, (long long)size, (long long)want);
    return c;
}

// A model file read through, its checksum checked, its weights dropped (-init_from, before the GPU).
static void drop_chunk(void *ctx, const void *chunk, size_t offset, size_t n) {
    (void)ctx; (void)chunk; (void)offset; (void)n;
}
static void check_model_file(const char *path) {
    LlamaConfig c = read_model_config(path);
    size_t sizes[NUM_PARAM_TENSORS];
    Section ms[] = {{NULL, param_sizes(&c, sizes) * sizeof(float), 0, drop_chunk, NULL}};
    read_sections(path, MODEL_MAGIC, NULL, 0, ms, 1, NULL);
}

#endif // LLMC_CHECKPOINT_FILE_H
