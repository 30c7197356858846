"""The table of scripts/benchmark.sh, from its logs: one row per system, tokens/s, model TFLOP/s, peak
and device memory, the speedup against the first baseline with a number, and the busy GPU's clock
and power from the nvidia-smi samples; notes for failed runs and for logs of another run. Printed
and written to OUT. Standard library only; benchmark.sh calls it with its settings:

    python3 scripts/benchmark_table.py LOGDIR OUT SYSTEMS MODEL B T STEPS WARMUP TRAINER_ARGS TORCH_ARGS HF_ARGS ACCUM

Exit status 0 when every system produced a number, 1 otherwise (the table is written either way).
"""
import datetime
import importlib.util
import os
import re
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import trainer_log                    # the reader of the trainer's output
from llama_fp8.model_flops import flops_per_token    # the trainer's formula (llmc/mfu.h)

if len(sys.argv) != 13:
    sys.exit("usage: " + __doc__.split("\n\n")[1].strip())

logdir, outfile, systems, model, B, T, steps, warmup, trainer_args, torch_args, hf_args, accum = sys.argv[1:]
B, T, accum = int(B), int(T), int(accum)
LABELS = {"ours-bf16": "ours bf16 (train_llama_fp8)",
          "ours-fp8": "ours fp8, delayed scaling (train_llama_fp8)",
          "ours-bf16-fp32m": "ours bf16, fp32 AdamW moments (train_llama_fp8)",
          "ours-fp8-fp32m": "ours fp8, delayed scaling, fp32 AdamW moments (train_llama_fp8)",
          "ours-fp8-current": "ours fp8, current scaling (train_llama_fp8)",
          "torch-bf16": "PyTorch bf16, torch.compile",
          "torch-bf16-eager": "PyTorch bf16, eager",
          "torch-fp8": "PyTorch fp8 tensorwise (dynamic), torch.compile",
          "torch-fp8-eager": "PyTorch fp8 tensorwise (dynamic), eager",
          "hf-bf16": "transformers bf16, torch.compile",
          "hf-bf16-eager": "transformers bf16, eager",
          "hf-amp": "transformers fp32 weights + bf16 autocast, torch.compile",
          "hf-amp-eager": "transformers fp32 weights + bf16 autocast, eager"}
FP32M = ", fp32 AdamW moments"  # in the label of a run of ours with them
BF16W = ", bf16 master weights"  # in the label of a run of ours with -master_weights bf16
ON_HOST = ", AdamW moments in host memory"  # and with -adam_offload 1
GRAINS = {"row": "row-wise scaling", "block": "block scaling"}  # for "delayed scaling" in a run of another grain
# the speedup column is against the first of these with a number
BASELINES = (("torch-bf16", "PyTorch bf16"), ("hf-bf16", "transformers bf16"))


def busy_clock_power(path):
    """(mean SM clock MHz, mean power W, share at the power cap) over the nvidia-smi samples with the
    GPU at least 90% busy, or None (no file, too few busy samples, or fields this driver lacks)."""
    busy = []
    for line in open(path, errors="replace"):
        f = [x.strip() for x in line.split(",")]
        try:
            util, mhz, watts, reasons = float(f[1]), float(f[2]), float(f[3]), int(f[4], 16)
        except (IndexError, ValueError):
            continue
        if util >= 90:
            busy.append((mhz, watts, reasons & 0x4 != 0))  # 0x4: clocks held down by the software power cap
    if len(busy) < 4:
        return None
    n = len(busy)
    return sum(b[0] for b in busy) / n, sum(b[1] for b in busy) / n, sum(b[2] for b in busy) / n


def failure(text, rc):
    """(table cell, reason) for a run that printed no result."""
    lines = [l.strip() for l in text.splitlines() if l.strip() and not l.startswith("BENCH_")]
    why = next((l for l in reversed(lines) if re.search(r"out of (gpu )?memory|error", l, re.I)), lines[-1] if lines else "no output")
    if re.search(r"out of (gpu )?memory|OutOfMemoryError|tok_s=OOM", text, re.I):
        return "OOM", why
    if rc in (124, 137):
        return "TIMEOUT", "killed by --timeout"
    return "FAILED (exit %s)" % rc, why


rows, notes, gpu, tied = [], [], None, False
for name in systems.split(","):
    path = os.path.join(logdir, name + ".log")
    row = dict(name=name, label=LABELS[name], tok=None, tflops=None, peak=None, dev=None, cell="not run", busy=None)
    rows.append(row)
    smi = os.path.join(logdir, name + ".smi.csv")
    if os.path.exists(smi):
        row["busy"] = busy_clock_power(smi)
    if not os.path.exists(path):
        continue
    text = open(path, errors="replace").read()
    m = re.search(r"^BENCH_EXIT (\d+)", text, re.M)
    rc = int(m.group(1)) if m else None
    ours = trainer_log.parse_stdout(text)
    if gpu is None:
        m = re.search(r"^PyTorch \S+ \| (.+?) \(sm_", text, re.M)
        gpu = ours.gpu or (m.group(1) if m else None)
    dims = trainer_log.model_dims(text)   # bench_torch.py and bench_hf.py print the trainer's model line too
    tied |= bool(ours.tied) or bool(re.search(r"^model \S+: .*\| tied embeddings \|", text, re.M))
    if ours.B is not None:
        bt = (ours.B, ours.T, ours.grad_accum or 1)
    else:
        m = re.search(r"^RESULT .*? B=(\d+) T=(\d+)(?: accum=(\d+))?", text, re.M)
        bt = (int(m.group(1)), int(m.group(2)), int(m.group(3) or 1)) if m else None
    if (dims and dims[0] != model) or (bt and bt != (B, T, accum)):
        notes.append("%s: its log is for a different run (%s, B %s T %s, grad accum %s) than the table's header: "
                     "re-run it" % (name, dims[0] if dims else "?", *(bt if bt else ("?", "?", "?"))))
    if name.startswith("ours-"):
        # the label says what ran, whichever flag asked for it: bf16 moments (the default) unnamed, fp32
        # named; a log whose batch line lacks the field is of a trainer before -adam_moments: fp32
        moments = ours.adam_moments or ("fp32" if ours.B is not None else None)
        if moments:
            plain = LABELS[name].replace(FP32M, "")
            row["label"] = plain.replace(" (train_llama_fp8)", FP32M + " (train_llama_fp8)") if moments == "fp32" else plain
        # and the grain, master weights and moments' place it ran with (--trainer-args '-fp8_grain row',
        # '-master_weights bf16', '-adam_offload 1')
        grain = re.search(r"^fp8 grain: every fp8 linear (row|block)-scaled", text, re.M)
        if grain:
            row["label"] = row["label"].replace("delayed scaling", GRAINS[grain.group(1)])
        if ours.master_weights == "bf16":
            row["label"] = row["label"].replace(" (train_llama_fp8)", BF16W + " (train_llama_fp8)")
        if ours.moments_on_host:
            row["label"] = row["label"].replace(" (train_llama_fp8)", ON_HOST + " (train_llama_fp8)")
        if ours.median and ours.dims:
            row["fpt"] = flops_per_token(*(ours.dims[k] for k in trainer_log.DIM_NAMES), T, tied=ours.tied)
            row["tok"] = ours.median["tok/s"]
            row["tflops"] = row["tok"] * row["fpt"] / 1e12
            row["dev"] = ours.median["device_gib"]
            row["peak"] = ours.allocated_gib
    else:
        res = re.findall(r"^RESULT (.*)$", text, re.M)
        kv = dict(f.split("=", 1) for f in res[-1].split()) if res else {}
        if kv.get("system"):
            row["label"] = LABELS.get(kv["system"], kv["system"])
        try:
            row["tok"], row["tflops"] = float(kv["tok_s"]), float(kv["tflops"])
            row["peak"], row["dev"] = float(kv["mem_gib"]), float(kv["dev_gib"])
            row["fpt"] = float(kv["flops_tok"])
        except (KeyError, ValueError):
            row["tok"] = None
    if row["tok"] is None:
        row["cell"], why = failure(text, rc)
        notes.append("%s: %s" % (name, why))

fpts = {r["name"]: r["fpt"] for r in rows if r.get("fpt")}
if fpts and max(fpts.values()) > 1.001 * min(fpts.values()):
    notes.append("model FLOPs per token differ between systems (%s): the runs are not the same model"
                 % ", ".join("%s %.4g" % kv for kv in fpts.items()))
base, base_name = next(((r["tok"], label) for name, label in BASELINES for r in rows if r["name"] == name and r["tok"]),
                       (None, BASELINES[0][1]))
f = lambda v, fmt: "-" if v is None or v != v else fmt % v   # v != v: NaN (no GPU memory on the CPU)
out = ["## Training speed: %s, B %d x T %d%s (%d tokens/step)%s, %s" % (
           model, B, T, " x %d micro-steps" % accum if accum > 1 else "", B * T * accum, ", " + gpu if gpu else "",
           datetime.date.today().isoformat()),
       "",
       "| system | tokens/s | model TFLOP/s | peak memory GiB | device memory GiB | speedup vs %s | busy GPU: SM clock, power, energy |" % base_name,
       "|---|---|---|---|---|---|---|"]
for r in rows:
    ok = r["tok"] is not None
    busy = "{:,.0f} MHz, {:.0f} W ({:.0%} at the power cap)".format(*r["busy"]) if r["busy"] else "-"
    if r["busy"] and ok:
        busy += ", %.1f mJ per token" % (1000.0 * r["busy"][1] / r["tok"])
    out.append("| %s | %s | %s | %s | %s | %s | %s |" % (
        r["label"], "{:,.0f}".format(r["tok"]) if ok else r["cell"], f(r["tflops"], "%.0f"), f(r["peak"], "%.1f"),
        f(r["dev"], "%.1f"), "%.2fx" % (r["tok"] / base) if ok and base else "-", busy))
out += ["",
        "Median step time: PyTorch (and transformers) over %s steps after %s warm-up steps; ours over the steps after its first 3. "
        "Model TFLOP/s = tokens/s x (6 x (params - embedding) + 6 x L x T x C) (docs/baselines.md)%s. "
        "Peak memory: PyTorch torch.cuda.max_memory_allocated during the timed steps; ours what the trainer "
        "allocates up front (its 'device memory allocated' line). Device memory: what the GPU has in use (cudaMemGetInfo: allocator "
        "cache, workspaces and CUDA context included), after our first step / after PyTorch's last. "
        "Busy GPU: means over the nvidia-smi samples (every 250 ms) with the GPU at least 90%% busy during the run "
        "(compilation and start-up mostly fall outside); the share of those with the clock held down by the power cap; "
        "energy per token: that mean power over tokens/s (at the power cap a step takes its energy over the power, so "
        "only a run that needs fewer joules per token can be faster there)."
        % (steps, warmup, "; with tied embeddings the lm_head is the embedding, so its GEMMs are not counted" if tied else "")]
for who, extra in (("our trainer", trainer_args), ("bench_torch.py", torch_args), ("bench_hf.py", hf_args)):
    if extra.strip():
        notes.append("extra flags for %s: `%s`" % (who, extra.strip()))
if notes:
    out += [""] + ["- " + n for n in notes]
table = "\n".join(out) + "\n"
print(table, end="")
with open(outfile, "w") as fh:
    fh.write(table)
print("(written to %s)" % outfile)
sys.exit(0 if all(r["tok"] is not None for r in rows) else 1)
