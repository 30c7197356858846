/*
The model file: model_SSSSSSSS.bin as the trainer writes it, and what scripts/hf_import.py makes of a
Hugging Face model (llama_fp8/model_file.py is the Python reader and writer of the same layout).
int32 header[256], then the fp32 weights in the order of llmc/llama_config.h (with tied embeddings
there is no lm_head tensor). One table, MODEL_HEADER_FIELDS, lists the words that hold the config:
the writer, the reader and every mismatch message use it, so a field is added in one place.
  [0] magic 20261201   [1] version 3   [8] step   [254..255] checksum of header and body (CRC-32, below)
  [2..7] V L C NH NKV FF   [9] rope_theta   [10] norm eps   [11] tied embeddings (0/1)
  [12] RoPE scaling (0 none, 1 llama3)   [13..15] its factor, low and high frequency factors
  [16] its original context   [17] max_position_embeddings (0: unknown)
  [252..253] run id (low word first): the training run whose checkpoint this is (llmc/checkpoint.h;
  its state files carry it too), 0 in a file no run wrote (an import) or written before run ids
Floats are stored as their bits. Version 2 (the same words; the checksum covers the body only) and
version 1 (words 11-17 zero, so untied and unscaled; FNV-1a of the body) still load;
dev/data/upgrade_model_file rewrites either as version 3.
Plain C, header-only; also compiles as C++ under nvcc.
*/
#ifndef LLMC_MODEL_FILE_H
#define LLMC_MODEL_FILE_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <zlib.h>         // crc32
#include "llama_config.h" // LlamaConfig, param_sizes
#include "utils.h"        // FATAL, fopenCheck, freadCheck, fileSizeCheck

#define MODEL_MAGIC 20261201
#define MODEL_VERSION 3
#define MODEL_HEADER_INTS 256
enum { MODEL_HDR_STEP = 8, MODEL_HDR_RUN_ID = 252, MODEL_HDR_CHECKSUM = 254 };

typedef struct { int word; size_t offset; int is_float; const char *name; } ModelHeaderField;
#define MODEL_FIELD(word, field, is_float, name) {word, offsetof(LlamaConfig, field), is_float, name}
static const ModelHeaderField MODEL_HEADER_FIELDS[] = {
    MODEL_FIELD(2, V, 0, "vocab size V"),
    MODEL_FIELD(3, L, 0, "layers L"),
    MODEL_FIELD(4, C, 0, "width C"),
    MODEL_FIELD(5, NH, 0, "heads NH"),
    MODEL_FIELD(6, NKV, 0, "kv heads NKV"),
    MODEL_FIELD(7, FF, 0, "MLP width FF"),
    MODEL_FIELD(9, rope_theta, 1, "rope_theta"),
    MODEL_FIELD(10, norm_eps, 1, "norm eps"),
    MODEL_FIELD(11, tied_embeddings, 0, "tied embeddings"),
    MODEL_FIELD(12, rope_scaling, 0, "RoPE scaling (0 none, 1 llama3)"),
    MODEL_FIELD(13, rope_factor, 1, "RoPE scaling factor"),
    MODEL_FIELD(14, rope_low_freq_factor, 1, "RoPE low_freq_factor"),
    MODEL_FIELD(15, rope_high_freq_factor, 1, "RoPE high_freq_factor"),
    MODEL_FIELD(16, rope_original_T, 0, "RoPE original context"),
};
#define MODEL_NUM_FIELDS ((int)(sizeof(MODEL_HEADER_FIELDS) / sizeof(MODEL_HEADER_FIELDS[0])))
enum { MODEL_HDR_MAX_T = 17 }; // not a shape field: a model file of any context loads

// Checksums, streamed chunk by chunk (start from 0 for either): zlib's CRC-32 since version 2 (the
// same function as Python's zlib.crc32, so the import scripts write it at C speed), FNV-1a 64 in
// version-1 files. zlib takes 32-bit lengths, so a buffer goes in max_call bytes at a time.
static uint64_t checksum_crc32_calls(uint64_t crc, const void *data, size_t n, size_t max_call) {
    const Bytef *p = (const Bytef *)data;
    for (size_t off = 0; off < n; off += max_call) {
        size_t k = n - off < max_call ? n - off : max_call;
        crc = crc32((uLong)crc, p + off, (uInt)k);
    }
    return crc;
}
static uint64_t checksum_crc32(uint64_t crc, const void *data, size_t n) { return checksum_crc32_calls(crc, data, n, (size_t)1 << 30); }
static uint64_t checksum_fnv1a(uint64_t h, const void *data, size_t n) {
    if (h == 0) h = 0xcbf29ce484222325ull;
    const unsigned char *p = (const unsigned char *)data;
    for (size_t i = 0; i < n; i++) { h ^= p[i]; h *= 0x100000001b3ull; }
    return h;
}
typedef uint64_t (*ChecksumFn)(uint64_t, const void *, size_t);
static ChecksumFn checksum_of_version(int version) { return version >= 2 ? checksum_crc32 : checksum_fnv1a; }

// Where the checksum of a file with header h starts before its body: from version 3 on it covers the
// header too (its checksum words read as 0), so a changed rope_theta, shape or step is refused like a
// changed weight; versions 1 and 2 checksum the body alone. The state files of train_llama_fp8.cu
// share the layout and the versions.
static uint64_t checksum_of_header(const int32_t *h) {
    if (h[1] < 3) return 0;
    int32_t copy[MODEL_HEADER_INTS];
    memcpy(copy, h, sizeof(copy));
    copy[MODEL_HDR_CHECKSUM] = copy[MODEL_HDR_CHECKSUM + 1] = 0;
    return checksum_crc32(0, copy, sizeof(copy));
}
static uint64_t header_checksum_word(const int32_t *h) {
    return (uint64_t)(uint32_t)h[MODEL_HDR_CHECKSUM] | ((uint64_t)(uint32_t)h[MODEL_HDR_CHECKSUM + 1] << 32);
}
static void header_set_checksum_word(int32_t *h, uint64_t v) {
    h[MODEL_HDR_CHECKSUM] = (int32_t)(uint32_t)v;
    h[MODEL_HDR_CHECKSUM + 1] = (int32_t)(uint32_t)(v >> 32);
}
static uint64_t header_run_id(const int32_t *h) {
    return (uint64_t)(uint32_t)h[MODEL_HDR_RUN_ID] | ((uint64_t)(uint32_t)h[MODEL_HDR_RUN_ID + 1] << 32);
}
static void header_set_run_id(int32_t *h, uint64_t id) {
    h[MODEL_HDR_RUN_ID] = (int32_t)(uint32_t)id;
    h[MODEL_HDR_RUN_ID + 1] = (int32_t)(uint32_t)(id >> 32);
}

// The header word of field f of c (floats as bits).
static int32_t model_field_word(const LlamaConfig *c, const ModelHeaderField *f) {
    int32_t w;
    memcpy(&w, (const char *)c + f->offset, sizeof(w)); // int and float fields are both 4 bytes
    return w;
}

static void model_header_put(int32_t *h, const LlamaConfig *c, int step) {
    memset(h, 0, MODEL_HEADER_INTS * sizeof(int32_t));
    h[0] = MODEL_MAGIC;
    h[1] = MODEL_VERSION;
    for (int i = 0; i < MODEL_NUM_FIELDS; i++) h[MODEL_HEADER_FIELDS[i].word] = model_field_word(c, &MODEL_HEADER_FIELDS[i]);
    h[MODEL_HDR_STEP] = step;
    h[MODEL_HDR_MAX_T] = c->max_T;
}

// The config a header holds (max_T 0 if the file does not say); NULL, or what is wrong with it.
static const char *model_header_get(const int32_t *h, LlamaConfig *c) {
    if (h[0] != MODEL_MAGIC) return "bad magic: not a train_llama_fp8 model file";
    if (h[1] < 1 || h[1] > MODEL_VERSION) return "unknown version (this build reads model files of versions 1 to 3)";
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < MODEL_NUM_FIELDS; i++)
        memcpy((char *)c + MODEL_HEADER_FIELDS[i].offset, &h[MODEL_HEADER_FIELDS[i].word], sizeof(int32_t));
    c->max_T = h[MODEL_HDR_MAX_T];
    int max_T = c->max_T;
    if (c->max_T <= 0) c->max_T = 1; // config_check wants it positive; the caller sets the real one
    const char *bad = config_check(c);
    c->max_T = max_T;
    return bad;
}

// The first field in which a and b differ, or NULL.
static const ModelHeaderField *model_config_mismatch(const LlamaConfig *a, const LlamaConfig *b) {
    for (int i = 0; i < MODEL_NUM_FIELDS; i++)
        if (model_field_word(a, &MODEL_HEADER_FIELDS[i]) != model_field_word(b, &MODEL_HEADER_FIELDS[i])) return &MODEL_HEADER_FIELDS[i];
    return NULL;
}

// Field f of c as a mismatch message gives it (out, n bytes; returned).
static const char *model_field_text(const LlamaConfig *c, const ModelHeaderField *f, char *out, size_t n) {
    const char *at = (const char *)c + f->offset;
    if (f->is_float) snprintf(out, n, "%g", *(const float *)at);
    else snprintf(out, n, "%d", *(const int *)at);
    return out;
}

// The CPU tools' reader (the trainer reads through its own read_sections): model_file_open reads the
// header of `path` into h and c, refusing a short file or a bad header; model_file_read_weights then
// reads the num_params fp32 weights that follow into params, refusing a size other than the header's
// config needs and a checksum mismatch of the file's version. Every message names the file.
static FILE *model_file_open(const char *path, int32_t h[MODEL_HEADER_INTS], LlamaConfig *c) {
    FILE *f = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(f);
    if (size < (int64_t)(MODEL_HEADER_INTS * sizeof(int32_t))) FATAL("%s: truncated (%lld bytes), shorter than the header", path, (long long)size);
    freadCheck(h, sizeof(int32_t), MODEL_HEADER_INTS, f, path);
    const char *bad = model_header_get(h, c);
    if (bad != NULL) FATAL("%s: %s", path, bad);
    size_t sizes[NUM_PARAM_TENSORS];
    int64_t want = (int64_t)(MODEL_HEADER_INTS * sizeof(int32_t)) + (int64_t)(param_sizes(c, sizes) * sizeof(float));
    if (size != want) FATAL("%s: %lld bytes, but the config in its header needs %lld: truncated or corrupt", path, (long long)size, (long long)want);
    return f;
}

static void model_file_read_weights(FILE *f, const char *path, const int32_t h[MODEL_HEADER_INTS], float *params, size_t num_params) {
    freadCheck(params, sizeof(float), num_params, f, path);
    fcloseCheck(f);
    uint64_t stored = header_checksum_word(h);
    uint64_t sum = checksum_of_version(h[1])(checksum_of_header(h), params, num_params * sizeof(float));
    if (sum != stored) FATAL("%s: checksum mismatch (stored %llx, computed %llx)", path, (unsigned long long)stored, (unsigned long long)sum);
}

#endif // LLMC_MODEL_FILE_H
