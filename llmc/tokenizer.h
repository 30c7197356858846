/*
The tokenizer's decode side: token id -> the bytes it stands for, from llm.c's decode table
(docs/formats.md: magic 20240328, version 2, header [2] vocab size, [3] document-start id, [4] 20261207
when [5] holds the tokenizer fingerprint; then per token a uint8 length and that many raw bytes). Used
to print samples, and its fingerprint (tokenizer_fingerprint) to check that the shards were made with
it. Plain C, header-only; also compiles as C++ under nvcc.

Pieces are raw bytes, not escapes: Llama 2's byte tokens are the bytes themselves (id 13 is "\n"),
its "▁" is already a space, and a multi-byte UTF-8 character may be split over several tokens.
So tokenizer_safe_print filters bytes instead of whole pieces (see there).
*/
#ifndef LLMC_TOKENIZER_H
#define LLMC_TOKENIZER_H

#include <unistd.h> // access
#include <zlib.h>  // crc32 (the fingerprint; only a program that calls tokenizer_fingerprint links zlib)
#include "utils.h" // FATAL, fopenCheck, freadCheck, fileSizeCheck, mallocCheck

#define TOKENIZER_MAGIC 20240328
#define TOKENIZER_VERSION 2
#define TOKENIZER_HEADER_INTS 256
#define TOKENIZER_RECORD_MAGIC 20261207 // header word 4 of a table whose word 5 is its fingerprint (llama_fp8/formats.py)

typedef struct {
    int vocab_size;
    int doc_start_id;    // the token every document starts with (Llama 2: 1 <s>, Llama 3: 128000)
    int init_ok;         // 0 after tokenizer_init_optional found no file
    int recorded;        // the header records a fingerprint: fingerprint_recorded
    uint32_t fingerprint_recorded;
    char **pieces;       // (vocab_size) NUL-terminated pieces, pointing into blob
    int *piece_len;      // (vocab_size) each piece's bytes: a piece may hold a 0 byte (Llama 2's <0x00>)
    char *blob;          // every piece, each followed by a NUL
    char bad_id[32];     // the placeholder tokenizer_decode returns for an out-of-range id
} Tokenizer;

static void tokenizer_init(Tokenizer *t, const char *path) {
    memset(t, 0, sizeof(*t));
    FILE *fp = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(fp);
    int64_t header_bytes = TOKENIZER_HEADER_INTS * (int64_t)sizeof(int32_t);
    if (size < header_bytes) {
        FATAL("tokenizer '%s' is truncated: %lld bytes, shorter than the %lld-byte header", path,
              (long long)size, (long long)header_bytes);
    }
    int32_t header[TOKENIZER_HEADER_INTS];
    freadCheck(header, sizeof(int32_t), TOKENIZER_HEADER_INTS, fp, path);
    if (header[0] != TOKENIZER_MAGIC) {
        FATAL("tokenizer '%s' has bad magic %d, expected %d; is it a tokenizer decode table?", path,
              header[0], TOKENIZER_MAGIC);
    }
    if (header[1] != TOKENIZER_VERSION) {
        FATAL("tokenizer '%s' has version %d, expected %d", path, header[1], TOKENIZER_VERSION);
    }
    if (header[2] <= 0) FATAL("tokenizer '%s' has a bad vocabulary size %d", path, header[2]);
    t->vocab_size = header[2];
    t->doc_start_id = header[3];
    t->recorded = header[4] == TOKENIZER_RECORD_MAGIC;
    t->fingerprint_recorded = (uint32_t)header[5];
    // the whole body at once, then split: lengths and bytes are interleaved, and the file is small
    size_t body = (size_t)(size - header_bytes);
    unsigned char *data = (unsigned char *)mallocCheck(body);
    freadCheck(data, 1, body, fp, path);
    fcloseCheck(fp);
    // body - vocab_size bytes of text plus one NUL per piece: exactly the blob's size if well-formed
    t->blob = (char *)mallocCheck(body + 1);
    t->pieces = (char **)mallocCheck((size_t)t->vocab_size * sizeof(char *));
    t->piece_len = (int *)mallocCheck((size_t)t->vocab_size * sizeof(int));
    size_t in = 0, out = 0;
    for (int i = 0; i < t->vocab_size; i++) {
        if (in >= body || in + 1 + data[in] > body) {
            FATAL("tokenizer '%s' is truncated: it ends inside token %d of the %d its header says", path,
                  i, t->vocab_size);
        }
        size_t len = data[in++];
        t->pieces[i] = t->blob + out;
        t->piece_len[i] = (int)len;
        memcpy(t->blob + out, data + in, len);
        t->blob[out + len] = '\0';
        in += len;
        out += len + 1;
    }
    if (in != body) {
        FATAL("tokenizer '%s' has %zu bytes after its %d tokens; the header's vocabulary size disagrees"
              " with the file", path, body - in, t->vocab_size);
    }
    free(data);
    t->init_ok = 1;
}

// Like tokenizer_init, but a missing file is not an error: returns 0 (the caller prints token ids).
// A file that exists but is malformed is still fatal.
static int tokenizer_init_optional(Tokenizer *t, const char *path) {
    FILE *fp = fopen(path, "rb");
    if (fp == NULL) {
        memset(t, 0, sizeof(*t));
        return 0;
    }
    fcloseCheck(fp);
    tokenizer_init(t, path);
    return 1;
}

// The trainer's -tok: '' is no table; the default (`default_path`, the shipped table, which a
// checkout without dev/data/tinyshakespeare lacks) is optional, so the quick start runs without it;
// any other path names a table that must exist. Returns whether a table was read.
static int tokenizer_init_flag(Tokenizer *t, const char *path, const char *default_path) {
    memset(t, 0, sizeof(*t));
    if (path[0] == '\0') return 0;
    if (strcmp(path, default_path) == 0) return tokenizer_init_optional(t, path);
    if (access(path, F_OK) != 0) FATAL("-tok '%s': no such decode table (%s); give the table made with the data's tokenizer, or -tok '' for none", path, strerror(errno));
    tokenizer_init(t, path);
    return 1;
}

// The tokenizer fingerprint: zlib's CRC-32 of the table's body (per token a length byte, then its
// bytes) up to the last non-empty piece, so the empty pieces that pad a table to a model's vocabulary
// do not change it (llama_fp8/formats.py: tokenizer_fingerprint, the same function). Exits naming
// `path` if the header records another: the file was changed after it was written.
static uint32_t tokenizer_fingerprint(const Tokenizer *t, const char *path) {
    int n = t->vocab_size;
    while (n > 0 && t->piece_len[n - 1] == 0) n--;
    uLong crc = crc32(0L, Z_NULL, 0);
    for (int i = 0; i < n; i++) {
        unsigned char len = (unsigned char)t->piece_len[i];
        crc = crc32(crc, &len, 1);
        crc = crc32(crc, (const Bytef *)t->pieces[i], (uInt)len);
    }
    if (t->recorded && (uint32_t)crc != t->fingerprint_recorded)
        FATAL("decode table '%s' records tokenizer fingerprint %08x but its pieces give %08x: the file was changed after it was"
              " written", path, t->fingerprint_recorded, (unsigned)crc);
    return (uint32_t)crc;
}

// The piece of token `id`. An id outside the vocabulary (a model's vocabulary can be padded past the
// tokenizer's) decodes to a visible placeholder "<bad id N>", valid until the next call, not an error.
static const char *tokenizer_decode(Tokenizer *t, int id) {
    if (id < 0 || id >= t->vocab_size) {
        snprintf(t->bad_id, sizeof(t->bad_id), "<bad id %d>", id);
        return t->bad_id;
    }
    return t->pieces[id];
}

// Prints a piece to stdout with control bytes dropped: printable ASCII, newline and tab pass, as do
// bytes >= 0x80 (parts of UTF-8 characters, which a split character's tokens reassemble); the rest
// (escape, carriage return, NUL, ...) would garble the terminal.
static void tokenizer_safe_print(const char *piece) {
    for (const unsigned char *p = (const unsigned char *)piece; *p != '\0'; p++) {
        if ((*p >= 0x20 && *p != 0x7F) || *p == '\n' || *p == '\t') putchar(*p);
    }
}

static void tokenizer_free(Tokenizer *t) {
    free(t->pieces);
    free(t->piece_len);
    free(t->blob);
    memset(t, 0, sizeof(*t));
}

#endif
