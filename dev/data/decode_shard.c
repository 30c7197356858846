/*
Decodes token shards back to the raw bytes they stand for, through the trainer's own decode-table
reader (llmc/tokenizer.h), and writes them to stdout: the check that a shard, its table and the C
side agree (dev/test/test_tokenize.py compares the output with the text that was tokenized).
Every token is written, the document-start and end pieces included.

    gcc -O2 -Wall -Wno-unused-function -I. dev/data/decode_shard.c -o dev/data/decode_shard
    ./dev/data/decode_shard data/NAME_tokenizer.bin data/NAME_train_000.bin [more shards...] > text

tokenizer.h keeps pieces NUL-terminated, so a piece that is the byte 0x00 (e.g. SentencePiece's
<0x00>) decodes to nothing here: text holding NUL bytes does not round-trip.
*/
#include "llmc/utils.h"     // FATAL, fopenCheck, freadCheck, fwriteCheck, fileSizeCheck
#include "llmc/tokenizer.h" // tokenizer_init, tokenizer_decode

#define SHARD_HEADER_INTS 256
#define BLOCK_TOKENS (1 << 20)

// Writes the pieces of every token of shard `path` to stdout; checks the header as the data loader does.
static void decode_shard(Tokenizer *tok, const char *path) {
    FILE *fp = fopenCheck(path, "rb");
    int64_t size = fileSizeCheck(fp);
    int64_t header_bytes = SHARD_HEADER_INTS * (int64_t)sizeof(int32_t);
    if (size < header_bytes) FATAL("shard '%s' is truncated: %lld bytes, shorter than the header", path, (long long)size);
    int32_t header[SHARD_HEADER_INTS];
    freadCheck(header, sizeof(int32_t), SHARD_HEADER_INTS, fp, path);
    int width;
    if (header[0] == 20240520 && header[1] == 1) width = 2;
    else if (header[0] == 20240801 && header[1] == 7) width = 4;
    else FATAL("shard '%s' has magic %d version %d, expected 20240520 v1 or 20240801 v7", path, header[0], header[1]);
    int64_t ntok = (int64_t)(uint32_t)header[2];
    if (size != header_bytes + ntok * width) {
        FATAL("shard '%s': header says %lld tokens, the file has %lld bytes", path, (long long)ntok, (long long)size);
    }
    unsigned char *raw = (unsigned char *)mallocCheck((size_t)BLOCK_TOKENS * width);
    for (int64_t done = 0; done < ntok;) {
        size_t n = (size_t)(ntok - done < BLOCK_TOKENS ? ntok - done : BLOCK_TOKENS);
        freadCheck(raw, width, n, fp, path);
        for (size_t i = 0; i < n; i++) {
            uint32_t id;
            if (width == 2) { uint16_t t16; memcpy(&t16, raw + 2 * i, 2); id = t16; }
            else { memcpy(&id, raw + 4 * i, 4); }
            // an unknown id would decode to a placeholder: here it means shard and table disagree
            if (id >= (uint32_t)tok->vocab_size) {
                FATAL("shard '%s': token %lld is id %u, outside the table's vocabulary of %d", path,
                      (long long)(done + i), id, tok->vocab_size);
            }
            const char *piece = tokenizer_decode(tok, (int)id);
            fwriteCheck(piece, 1, strlen(piece), stdout);
        }
        done += n;
    }
    free(raw);
    fcloseCheck(fp);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER.bin SHARD.bin [SHARD.bin...] > text\n"
                        "writes the bytes of every token of the shards, in order, to stdout\n", argv[0]);
        return 1;
    }
    Tokenizer tok;
    tokenizer_init(&tok, argv[1]);
    for (int i = 2; i < argc; i++) decode_shard(&tok, argv[i]);
    if (fflush(stdout) != 0) FATAL("writing stdout failed: %s", strerror(errno));
    tokenizer_free(&tok);
    return 0;
}
