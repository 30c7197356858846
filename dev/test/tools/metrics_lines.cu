/*
A main.log and a metrics.jsonl written by the trainer's own writers (llmc/run_log.h's run_log_step,
run_log_val, run_log_hellaswag, through the trainer's fp8_report_switches run_log_fallback) for a
made-up bf16 run of 4 steps that was resumed after step 2, with a val loss, bits per byte and
HellaSwag at steps 2 and 4, a non-finite loss at step 3, and after step 4 the lines of an fp8
fallback's switch (layer 11's w2 to block, its X having lost 11.23%: the writer reads only the
model's host fields). No GPU: the writers need none. dev/test/test_metrics.py reads them back.

Build and run from the repository root:
  nvcc -O1 -arch=sm_90 -std=c++17 -Xcompiler -fopenmp -I. dev/test/tools/metrics_lines.cu -lcublasLt -lcublas -lgomp -o metrics_lines
  ./metrics_lines DIR      writes DIR/main.log and DIR/metrics.jsonl
*/
#define TESTING
#include "train_llama_fp8.cu"

int main(int argc, char **argv) {
    if (argc != 2) FATAL("usage: %s DIR", argv[0]);
    char path[600];
    snprintf(path, sizeof(path), "%s/main.log", argv[1]);
    RunLog rl = {1, stdout, fopenCheck(path, "w"), NULL, NULL};
    snprintf(path, sizeof(path), "%s/metrics.jsonl", argv[1]);
    rl.metrics = fopenCheck(path, "w");
    Model m;
    memset(&m, 0, sizeof(m));
    m.mg = mg_single_gpu();
    m.opt.B = 4;
    m.opt.T = 64;
    size_t gib = (size_t)1 << 30;
    // the first attempt: steps 1-3, the last one's record abandoned by the resume; MFU 0.25 of a 1000 TFLOP/s peak
    for (int step = 1; step <= 3; step++) {
        RunStep s = {step, 4, 6.0f - step, 1.5f, 3e-4f, 20.0f, 51200.0, 250e12, 1000.0, 3 * gib, 0};
        run_log_step(&rl, &s, NULL);
    }
    ValText vt = {1000.0, 2.0 * m.opt.B * m.opt.T}; // 2 val positions' 512 targets in 1000 bytes
    run_log_val(&rl, 2, 4.25f, bits_per_byte(4.25f, vt), "");
    run_log_hellaswag(&rl, 2, 0.25f, 0.3f, 40);
    // resumed from step 2: steps 3 and 4 again, step 3's loss not finite, its MFU unknown
    RunStep s3 = {3, 4, NAN, 1.25f, 2e-4f, 21.0f, 48000.0, 0.0, 0.0, 3 * gib, 1};
    RunStep s4 = {4, 4, 2.5f, 1.0f, 1e-4f, 19.5f, 52000.0, 300e12, 1000.0, 3 * gib, 0};
    run_log_step(&rl, &s3, NULL);
    run_log_step(&rl, &s4, NULL);
    run_log_val(&rl, 4, 3.5f, bits_per_byte(3.5f, vt), "");
    run_log_hellaswag(&rl, 4, 0.5f, 0.625f, 40);
    Fp8Switch sw = {11, LIN_W2, FP8_X, 0.1123};
    m.cfg.L = 30;
    m.opt.fp8_fallback = FP8_GRAIN_BLOCK; m.opt.fp8_fallback_millionths = 10000; m.opt.fp8_fallback_patience = 3;
    m.linears.switched = &sw;
    m.linears.num_switched = 1;
    fp8_report_switches(&m, 4, &rl);
    run_log_close(&rl);
    return 0;
}
