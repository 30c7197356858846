/*
Checkpoint save and load speed on the host, with the trainer's own code: write_sections and
read_sections of llmc/checkpoint_file.h (64 MiB chunks, zlib's CRC-32 of header and body, fsync, rename)
on a model file of a preset's size or of a byte count, in a folder of your choice. Prints GB/s
(1e9 bytes a second) of the checksum alone (in memory), of the save end to end, of the load from disk
(the file's page cache dropped first, posix_fadvise) and of the load from the page cache.
The GPU's part is left out: its device-to-host copy of each chunk (one GPU) or the gather to rank 0
(several). Not part of make test (it writes GBs); results in dev/results/checkpoint_io.md.
Build and run from the repository root:
  make dev/test/bench_checkpoint
  ./dev/test/bench_checkpoint -e 1b -dir /tmp
  ./dev/test/bench_checkpoint -bytes 6e9 -dir /mnt/scratch
*/
#define TESTING
#include "train_llama_fp8.cu"
#include <fcntl.h>

static double seconds_now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

// The file's cached pages, clean after write_sections' fsync, are dropped so the next read is the disk's.
static void drop_page_cache(const char *path) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) FATAL("cannot open '%s': %s", path, strerror(errno));
    int err = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    if (err != 0) FATAL("posix_fadvise on '%s' failed: %s", path, strerror(err));
    close(fd);
}

int main(int argc, char **argv) {
    const char *preset = NULL, *dir = "/tmp";
    double bytes_arg = 0;
    for (int i = 1; i < argc; i += 2) {
        if (i + 1 >= argc) FATAL("%s needs a value (usage: %s -e PRESET | -bytes N [-dir DIR])", argv[i], argv[0]);
        if (strcmp(argv[i], "-e") == 0) preset = argv[i + 1];
        else if (strcmp(argv[i], "-bytes") == 0) bytes_arg = atof(argv[i + 1]);
        else if (strcmp(argv[i], "-dir") == 0) dir = argv[i + 1];
        else FATAL("unknown option '%s' (usage: %s -e PRESET | -bytes N [-dir DIR])", argv[i], argv[0]);
    }
    if ((preset == NULL) == (bytes_arg <= 0)) FATAL("give one of -e PRESET (a model of -e's presets) and -bytes N (N > 0)");
    int h[256];
    size_t bytes;
    if (preset) {
        LlamaConfig c;
        if (!config_from_preset(preset, &c)) FATAL("-e: unknown preset '%s' (see ./train_llama_fp8 -h)", preset);
        size_t sizes[NUM_PARAM_TENSORS];
        bytes = param_sizes(&c, sizes) * sizeof(float);
        model_header_put(h, &c, 0);
    } else {
        bytes = (size_t)bytes_arg / sizeof(float) * sizeof(float);
        memset(h, 0, sizeof(h));
        h[0] = MODEL_MAGIC; h[1] = CKPT_VERSION;
    }
    char path[1024];
    snprintf(path, sizeof(path), "%s/bench_checkpoint_%d.bin", dir, (int)getpid());
    float *w = (float *)mallocCheck(bytes);
    uint64_t rng = 1;
    for (size_t i = 0; i < bytes / sizeof(float); i++) w[i] = random_f32(&rng) - 0.5f; // touches every page before timing
    Section sec[] = {{w, bytes, 0}};

    double t0 = seconds_now();
    uint64_t crc = checksum_crc32(0, w, bytes);
    double t_crc = seconds_now() - t0;
    t0 = seconds_now();
    write_sections(path, h, sec, 1);
    double t_save = seconds_now() - t0;
    drop_page_cache(path);
    t0 = seconds_now();
    read_sections(path, h[0], NULL, 0, sec, 1, NULL);
    double t_load_disk = seconds_now() - t0;
    t0 = seconds_now();
    read_sections(path, h[0], NULL, 0, sec, 1, NULL);
    double t_load_cached = seconds_now() - t0;
    remove(path);
    free(w);

    double gb = (bytes + sizeof(h)) / 1e9;
    printf("checkpoint of %s: %.3f GB in %s (CRC-32 of the weights %#llx)\n", preset ? preset : "-bytes", gb, dir, (unsigned long long)crc);
    printf("checksum alone (zlib crc32, in memory): %6.2f GB/s (%.2f s)\n", bytes / 1e9 / t_crc, t_crc);
    printf("save (write, checksum, fsync, rename):  %6.2f GB/s (%.2f s)\n", gb / t_save, t_save);
    printf("load from disk (page cache dropped):    %6.2f GB/s (%.2f s)\n", gb / t_load_disk, t_load_disk);
    printf("load from the page cache:               %6.2f GB/s (%.2f s)\n", gb / t_load_cached, t_load_cached);
    return 0;
}
