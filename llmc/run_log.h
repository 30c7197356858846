/*
The run log: each event of a training run (its description at a (re)start, a step, a val loss, a
HellaSwag score, a linear the fp8 fallback switched, a sample, the data mixture, the median step)
written by one call, which prints its line on stdout and writes its main.log line and its
metrics.jsonl record. Only the main rank prints and logs. The formats are read by
llama_fp8/trainer_log.py (main.log; stdout where a run writes no log: -o '', -x 0) and
scripts/to_tensorboard.py (metrics.jsonl); docs/formats.md and README.md describe them. Plain C: it
takes the numbers it writes (the trainer works them out of the model); fp8.log's lines, one per
linear, are the trainer's write_fp8_log. Before any of it, run_log_dir_check: the log directory
can be written, and its logs appended to.
*/
#ifndef LLMC_RUN_LOG_H
#define LLMC_RUN_LOG_H

#include <fcntl.h>     // open: the log directory's write check
#include <math.h>
#include <stdio.h>
#include <sys/stat.h>  // stat, mkdir
#include <unistd.h>    // access, unlink, getpid
#include "utils.h"        // fopenCheck, fcloseCheck
#include "llama_config.h" // LlamaConfig, ROPE_LLAMA3

typedef struct {
    int main_rank; // the others print and write nothing
    FILE *out;     // stdout (a test's file)
    FILE *log;     // main.log, or NULL (no log directory: -o '', -x 0)
    FILE *metrics; // metrics.jsonl, or NULL
    FILE *fp8;     // fp8.log (-fp8_log N in fp8), or NULL
} RunLog;

// The run log of a rank: with a log directory `dir` (NULL: none) the main rank's main.log,
// metrics.jsonl and, with fp8_log, fp8.log. A resumed run appends to them: its earlier steps' lines
// stay, and the readers (llama_fp8/trainer_log.py, scripts/to_tensorboard.py) drop what the abandoned
// attempt logged after the checkpoint. Any other run starts them empty.
static RunLog run_log_open(int main_rank, const char *dir, int resumed, int fp8_log) {
    RunLog rl = {main_rank, stdout, NULL, NULL, NULL};
    if (!main_rank || !dir) return rl;
    const char *mode = resumed ? "a" : "w";
    char path[1100];
    snprintf(path, sizeof(path), "%s/main.log", dir);
    rl.log = fopenCheck(path, mode);
    snprintf(path, sizeof(path), "%s/metrics.jsonl", dir);
    rl.metrics = fopenCheck(path, mode);
    if (fp8_log) {
        snprintf(path, sizeof(path), "%s/fp8.log", dir);
        rl.fp8 = fopenCheck(path, mode);
    }
    return rl;
}

// Before the run starts: the log directory `dir` (-o) can be written, made if missing (create: 0 for
// -check 1, which writes nothing: then the folder it would be made in must take it), a file created
// and removed there, and the logs a resumed run appends to (run_log_open's) open for appending.
// Refused naming the path.
static void run_log_dir_check(const char *dir, int create) {
    char probe[1100], parent[1024];
    struct stat st;
    const char *where = dir;
    if (stat(dir, &st) != 0) {
        if (create && mkdir(dir, 0755) != 0) FATAL("cannot create log directory '%s' (-o): %s", dir, strerror(errno));
        if (!create) { // the folder it would be made in
            snprintf(parent, sizeof(parent), "%s", dir);
            char *slash = strrchr(parent, '/');
            if (slash == parent) slash[1] = '\0';
            else if (slash) *slash = '\0';
            else snprintf(parent, sizeof(parent), ".");
            if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
                FATAL("cannot create log directory '%s' (-o): '%s' is no directory", dir, parent);
            where = parent;
        }
    } else if (!S_ISDIR(st.st_mode)) {
        FATAL("log directory '%s' (-o) exists and is not a directory", dir);
    }
    snprintf(probe, sizeof(probe), "%s/.write_check_%d", where, (int)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0)
        FATAL("cannot write in %s '%s' (-o %s): %s", where == dir ? "log directory" : "the log directory's parent",
              where, dir, strerror(errno));
    close(fd);
    unlink(probe);
    const char *logs[] = {"main.log", "metrics.jsonl", "fp8.log"};
    for (int i = 0; where == dir && i < 3; i++) {
        snprintf(probe, sizeof(probe), "%s/%s", dir, logs[i]);
        if (access(probe, F_OK) != 0) continue;
        fd = open(probe, O_WRONLY | O_APPEND);
        if (fd < 0) FATAL("'%s' cannot be appended to: %s", probe, strerror(errno));
        close(fd);
    }
}

static void run_log_close(RunLog *rl) {
    if (rl->log) fcloseCheck(rl->log);
    if (rl->fp8) fcloseCheck(rl->fp8);
    if (rl->metrics) fcloseCheck(rl->metrics);
    rl->log = rl->fp8 = rl->metrics = NULL;
}

// A JSON number, or null for inf / NaN (JSON has neither).
static void json_number(FILE *f, const char *key, double v) {
    if (isfinite(v)) fprintf(f, ", \"%s\": %.8g", key, v);
    else fprintf(f, ", \"%s\": null", key);
}

// MFU of `flops_per_s` against `peak` TFLOP/s; "n/a" for a GPU whose peak is unknown.
static void format_mfu(char *buf, size_t n, double flops_per_s, double peak_tflops) {
    if (peak_tflops > 0) snprintf(buf, n, "%.1f%%", 100.0 * flops_per_s / (peak_tflops * 1e12));
    else snprintf(buf, n, "n/a");
}

// A run's description, printed at every (re)start; main.log's header repeats its model and batch.
typedef struct {
    const char *gpu, *launch;  // the GPU's name; with several GPUs, how they were started
    int world;                 // GPUs
    const char *precision;     // -precision
    const char *fp8_scaling;   // "delayed" or "current"; NULL in bf16
    const char *model;         // the model file or preset
    const LlamaConfig *cfg;
    size_t params, bytes_allocated; // bytes_allocated: of one GPU
    int B, T, total_batch, grad_accum, max_steps, warmup, resumed, synthetic;
    float lr, final_lr_frac, weight_decay, grad_clip;
    const char *adam_moments, *master_weights, *attention; // -adam_moments, -master_weights: fp32 or bf16
    int recompute, fp8_weight_cache; // -r; -fp8_weight_cache, -1 in bf16 (no fp8 weights)
    int adam_offload;          // -adam_offload: AdamW's moments in host memory
    const char *options;       // main.log's options line after "options:": " -flag value" for every option
} RunHeader;

// The description on stdout, and main.log's header: the '#' line (llama_fp8/trainer_log.py reads it),
// then the options line, so the log says how its run was made.
static void run_log_header(const RunLog *rl, const RunHeader *h) {
    if (!rl->main_rank) return;
    const LlamaConfig *cfg = h->cfg;
    char gpus[320], scaling[32] = "", rope[96] = "";
    if (h->world > 1) snprintf(gpus, sizeof(gpus), "%d x %s (%s)", h->world, h->gpu, h->launch);
    else snprintf(gpus, sizeof(gpus), "%s", h->gpu);
    if (h->fp8_scaling) snprintf(scaling, sizeof(scaling), " (%s scaling)", h->fp8_scaling);
    if (cfg->rope_scaling == ROPE_LLAMA3)
        snprintf(rope, sizeof(rope), " (llama3 scaling: factor %g, low %g, high %g, original %d)", cfg->rope_factor,
                 cfg->rope_low_freq_factor, cfg->rope_high_freq_factor, cfg->rope_original_T);
    fprintf(rl->out, "train_llama_fp8 | %s | %s%s | model %s: V %d L %d C %d NH %d NKV %d FF %d theta %g%s%s"
            " | %.1fM params\n", gpus, h->precision, scaling, h->model, cfg->V, cfg->L, cfg->C, cfg->NH, cfg->NKV,
            cfg->FF, cfg->rope_theta, rope, cfg->tied_embeddings ? " | tied embeddings" : "", h->params / 1e6);
    fprintf(rl->out, "B %d T %d | total batch %d tokens (grad accum %d) | %d steps | lr %g warmup %d final %g"
            " | wd %g clip %g | AdamW moments %s | master weights %s | %s attention\n", h->B, h->T, h->total_batch,
            h->grad_accum, h->max_steps, h->lr, h->warmup, h->final_lr_frac, h->weight_decay, h->grad_clip,
            h->adam_moments, h->master_weights, h->attention);
    fprintf(rl->out, "device memory allocated: %.2f GiB%s | recompute %s%s%s%s\n", h->bytes_allocated / 1073741824.0,
            h->world > 1 ? " per GPU (ZeRO-1)" : "", h->recompute ? "SwiGLU" : "none",
            h->fp8_weight_cache < 0 ? "" : h->fp8_weight_cache ? " | fp8 weight cache on" : " | fp8 weight cache off",
            h->adam_offload ? " | AdamW moments in host memory" : "", h->resumed ? " | resumed" : "");
    if (!rl->log) return;
    fprintf(rl->log, "# %s precision %s model %s V %d L %d C %d NH %d NKV %d FF %d B %d T %d total_batch %d"
            " adam_moments %s%s", h->gpu, h->precision, h->model, cfg->V, cfg->L, cfg->C, cfg->NH, cfg->NKV, cfg->FF,
            h->B, h->T, h->total_batch, h->adam_moments, h->synthetic ? " data synthetic" : "");
    fprintf(rl->log, h->world > 1 ? " gpus %d\n" : "\n", h->world);
    fprintf(rl->log, "options:%s\n", h->options);
    fflush(rl->log);
}

// A step's fp8 health in metrics.jsonl: the fractions of every value cast that underflowed and
// saturated, and the tensor that lost most to underflow (its fraction and name, as fp8.log names it).
typedef struct {
    double underflow, saturation, worst_underflow;
    char worst_tensor[64];
} Fp8Health;

// An optimizer step as the step line gives it (the step counted from 1).
typedef struct {
    int step, max_steps;
    float loss, norm, lr, ms;
    double tok_per_s, flops_per_s, peak_tflops; // peak_tflops 0: unknown, no MFU
    size_t mem_used;                            // device memory in use, bytes
    int skipped;                                // the update skipped (a non-finite gradient)
} RunStep;

// A step: its line, main.log's `s:` line and metrics.jsonl's record with the memory in use and, in fp8
// (health not NULL), the step's fp8 health.
static void run_log_step(const RunLog *rl, const RunStep *s, const Fp8Health *health) {
    if (!rl->main_rank) return;
    char mfu[32];
    format_mfu(mfu, sizeof(mfu), s->flops_per_s, s->peak_tflops);
    fprintf(rl->out, "step %5d/%d | loss %.6f | norm %.4f | lr %.3e | %.2f ms | %.0f tok/s | MFU %s%s\n", s->step,
            s->max_steps, s->loss, s->norm, s->lr, s->ms, s->tok_per_s, mfu,
            s->skipped ? " | update SKIPPED (non-finite gradient)" : "");
    if (rl->log) {
        fprintf(rl->log, "s:%d trl:%.6f norm:%.4f lr:%.4e ms:%.2f tok/s:%.0f\n", s->step, s->loss, s->norm, s->lr,
                s->ms, s->tok_per_s);
        fflush(rl->log);
    }
    if (!rl->metrics) return;
    FILE *f = rl->metrics;
    fprintf(f, "{\"step\": %d", s->step);
    json_number(f, "loss", s->loss);
    json_number(f, "lr", s->lr);
    json_number(f, "norm", s->norm);
    json_number(f, "ms", s->ms);
    json_number(f, "tokens_per_s", s->tok_per_s);
    if (s->peak_tflops > 0) json_number(f, "mfu", s->flops_per_s / (s->peak_tflops * 1e12));
    json_number(f, "memory_gib", s->mem_used / 1073741824.0);
    if (health) {
        json_number(f, "fp8_underflow", health->underflow);
        json_number(f, "fp8_saturation", health->saturation);
        json_number(f, "fp8_worst_underflow", health->worst_underflow);
        fprintf(f, ", \"fp8_worst_underflow_tensor\": \"%s\"", health->worst_tensor);
    }
    fprintf(f, "}\n");
    fflush(f);
}

// An evaluation's val loss after `step` (0: -x 0's, before any step), with its bits per byte when
// bpb > 0 (a decode table gave the val bytes); `over` ends the printed line (-x 0 says what it
// evaluated), else "".
static void run_log_val(const RunLog *rl, int step, float val_loss, double bpb, const char *over) {
    if (!rl->main_rank) return;
    if (bpb > 0.0) fprintf(rl->out, "val loss %.6f | bpb %.4f%s\n", val_loss, bpb, over);
    else fprintf(rl->out, "val loss %.6f%s\n", val_loss, over);
    if (rl->log) {
        if (bpb <= 0.0) fprintf(rl->log, "s:%d tel:%.6f\n", step, val_loss);
        else fprintf(rl->log, "s:%d tel:%.6f bpb:%.6f\n", step, val_loss, bpb);
        fflush(rl->log);
    }
    if (rl->metrics) {
        fprintf(rl->metrics, "{\"step\": %d", step);
        json_number(rl->metrics, "val_loss", val_loss);
        if (bpb > 0.0) json_number(rl->metrics, "bpb", bpb);
        fprintf(rl->metrics, "}\n");
        fflush(rl->metrics);
    }
}

// A HellaSwag score after `step`: acc and acc_norm over `items` items.
static void run_log_hellaswag(const RunLog *rl, int step, double acc, double acc_norm, int items) {
    if (!rl->main_rank) return;
    fprintf(rl->out, "hellaswag: acc %.4f acc_norm %.4f (%d items)\n", acc, acc_norm, items);
    if (rl->log) {
        fprintf(rl->log, "s:%d hs_acc:%.6f hs_acc_norm:%.6f hs_items:%d\n", step, acc, acc_norm, items);
        fflush(rl->log);
    }
    if (rl->metrics) {
        fprintf(rl->metrics, "{\"step\": %d", step);
        json_number(rl->metrics, "hellaswag_acc", acc);
        json_number(rl->metrics, "hellaswag_acc_norm", acc_norm);
        fprintf(rl->metrics, ", \"hellaswag_items\": %d}\n", items);
        fflush(rl->metrics);
    }
}

// A linear the fp8 fallback switched after `step` (layer L: the lm_head) to `grain` from the next step
// on: its tensor `tensor` lost the fraction `lost` of its values in that step, over threshold_pct
// percent in `patience` steps in a row. main.log's `fp8_fallback:` line is one
// llama_fp8/trainer_log.py passes over.
static void run_log_fallback(const RunLog *rl, int step, int layer, const char *linear, const char *grain,
                             const char *tensor, double lost, double threshold_pct, int patience) {
    if (!rl->main_rank) return;
    fprintf(rl->out, "fp8 fallback: layer %d %s -> %s from step %d on (its %s lost %.2f%% of its values in step %d,"
            " over %g%% in %d steps in a row)\n", layer, linear, grain, step + 1, tensor, 100.0 * lost, step,
            threshold_pct, patience);
    if (rl->log) {
        fprintf(rl->log, "fp8_fallback: s:%d layer:%d linear:%s grain:%s tensor:%s lost:%.6e steps:%d\n", step,
                layer, linear, grain, tensor, lost, patience);
        fflush(rl->log);
    }
    if (rl->metrics) {
        fprintf(rl->metrics, "{\"step\": %d, \"fp8_fallback\": \"layer %d %s\", \"fp8_grain\": \"%s\","
                " \"fp8_fallback_tensor\": \"%s\"", step, layer, linear, grain, tensor);
        json_number(rl->metrics, "fp8_fallback_lost", lost);
        fprintf(rl->metrics, "}\n");
        fflush(rl->metrics);
    }
}

// A sample's token ids in main.log (stdout has its text, printed token by token as it is sampled).
static void run_log_sample(const RunLog *rl, const int *tokens, int n) {
    if (!rl->main_rank || !rl->log) return;
    fprintf(rl->log, "sample:");
    for (int t = 0; t < n; t++) fprintf(rl->log, " %d", tokens[t]);
    fprintf(rl->log, "\n");
}

// The data mixture the run realized (dataloader_mixture_report's text).
static void run_log_mixture(const RunLog *rl, const char *report) {
    if (!rl->main_rank) return;
    fprintf(rl->out, "data mixture realized: %s\n", report);
    if (rl->log) fprintf(rl->log, "mixture: %s\n", report);
}

// The median step time over `steps` steps after warm-up, and the device memory in use (rank 0's with
// several GPUs): stdout only.
static void run_log_median(const RunLog *rl, float ms, int steps, double tok_per_s, double flops_per_s,
                           double peak_tflops, size_t mem_used, int world) {
    if (!rl->main_rank) return;
    char mfu[32];
    format_mfu(mfu, sizeof(mfu), flops_per_s, peak_tflops);
    fprintf(rl->out, "median step %.2f ms over %d steps after warm-up | %.0f tok/s | MFU %s | device memory in use"
            " %.2f GiB%s\n", ms, steps, tok_per_s, mfu, mem_used / 1073741824.0, world > 1 ? " (rank 0)" : "");
}

#endif
