/*
The text bytes the trainer counts for bits per byte (llmc/bpb.h) over a token shard read as one
sequence (inputs the tokens, targets the next ones), for dev/test/test_hellaswag.py.

Build and run from the repository root:
  gcc -O2 -Wall -Wno-unused-function -I. dev/test/tools/text_bytes.c -lm -o text_bytes
  ./text_bytes TABLE.bin SHARD.bin      prints the byte count
*/
#include <stdio.h>
#include "llmc/tokenizer.h" // tokenizer_init
#include "llmc/bpb.h"       // target_text_bytes

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s TABLE.bin SHARD.bin (a 32-bit shard)\n", argv[0]);
        return 1;
    }
    Tokenizer tok;
    tokenizer_init(&tok, argv[1]);
    FILE *f = fopenCheck(argv[2], "rb");
    int64_t size = fileSizeCheck(f);
    int header[256];
    if (size < (int64_t)sizeof(header)) FATAL("%s: truncated", argv[2]);
    freadCheck(header, sizeof(int), 256, f, argv[2]);
    if (header[0] != 20240801 || size != (int64_t)sizeof(header) + 4 * (int64_t)header[2]) FATAL("%s: not a 32-bit token shard", argv[2]);
    int n = header[2];
    int *tokens = (int *)mallocCheck((size_t)n * sizeof(int));
    freadCheck(tokens, sizeof(int), (size_t)n, f, argv[2]);
    fcloseCheck(f);
    printf("%.0f\n", n > 1 ? target_text_bytes(&tok, tokens, tokens + 1, (size_t)n - 1) : 0.0);
    free(tokens);
    tokenizer_free(&tok);
    return 0;
}
