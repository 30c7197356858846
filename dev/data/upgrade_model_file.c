/*
Rewrites a model file of version 1 or 2 (llmc/model_file.h) as version 3, whose checksum covers the
header as well as the weights. The old checksum is checked as the weights stream through, at C speed
(llama_fp8/model_file.py refuses version 1: it would check FNV-1a at ~5 MB/s); the new file appears
under its name only when complete, and nothing is left behind when the old file is bad.
Build and run from the repository root:
  make dev/data/upgrade_model_file
  ./dev/data/upgrade_model_file log/model_00001500.bin log/model_00001500_v3.bin
*/
#include <unistd.h>
#include "llmc/utils.h"      // FATAL, fopenCheck, freadCheck, fwriteCheck, renameCheck
#include "llmc/model_file.h" // model_file_open, checksum_of_version, checksum_of_header

#define UPGRADE_CHUNK ((size_t)64 << 20)

static const char *g_partial; // the temporary output while it is being written: an error removes it
static void remove_partial(void) {
    if (g_partial) remove(g_partial);
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: %s OLD.bin NEW.bin\n  rewrites model file OLD.bin (version 1 or 2) as version %d, whose checksum covers "
                        "the header too\n", argv[0], MODEL_VERSION);
        return 1;
    }
    const char *in = argv[1], *out = argv[2];
    if (access(out, F_OK) == 0) FATAL("%s: exists; remove it or give another name", out);
    int32_t h[MODEL_HEADER_INTS];
    LlamaConfig c;
    FILE *f = model_file_open(in, h, &c);
    if (h[1] == MODEL_VERSION) FATAL("%s: already version %d, nothing to do", in, MODEL_VERSION);
    size_t sizes[NUM_PARAM_TENSORS];
    int64_t size = (int64_t)sizeof(h) + (int64_t)(param_sizes(&c, sizes) * sizeof(float)); // model_file_open checked it

    int32_t nh[MODEL_HEADER_INTS];
    memcpy(nh, h, sizeof(nh));
    nh[1] = MODEL_VERSION;
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", out);
    g_partial = tmp;
    atexit(remove_partial);
    FILE *g = fopenCheck(tmp, "wb");
    fwriteCheck(nh, sizeof(int32_t), MODEL_HEADER_INTS, g); // its checksum words are written last
    uint64_t old_sum = checksum_of_header(h), new_sum = checksum_of_header(nh);
    char *buf = (char *)mallocCheck(UPGRADE_CHUNK);
    for (int64_t left = size - (int64_t)sizeof(h); left > 0;) {
        size_t n = (size_t)left < UPGRADE_CHUNK ? (size_t)left : UPGRADE_CHUNK;
        freadCheck(buf, 1, n, f, in);
        old_sum = checksum_of_version(h[1])(old_sum, buf, n);
        new_sum = checksum_crc32(new_sum, buf, n);
        fwriteCheck(buf, 1, n, g);
        left -= (int64_t)n;
    }
    free(buf);
    fcloseCheck(f);
    if (old_sum != header_checksum_word(h)) FATAL("%s: checksum mismatch: the file is corrupt; nothing written", in);
    header_set_checksum_word(nh, new_sum);
    fseekCheck(g, 0, SEEK_SET);
    fwriteCheck(nh, sizeof(int32_t), MODEL_HEADER_INTS, g);
    if (fflush(g) != 0 || fsync(fileno(g)) != 0) FATAL("%s: write failed: %s", tmp, strerror(errno));
    fcloseCheck(g);
    renameCheck(tmp, out);
    g_partial = NULL;
    printf("wrote %s: %s (version %d) as version %d, V %d L %d C %d\n", out, in, h[1], MODEL_VERSION, c.V, c.L, c.C);
    return 0;
}
