"""The summary of scripts/compare_convergence.sh: a table of its finished runs (final train and val
loss against bf16, val bpb, HellaSwag, median tokens/s), the threshold check of each fp8 run's final
val loss against bf16's, the runs that crashed, and each fp8 run's fp8 health (the tensors with the
most underflow and saturation). With compare_convergence.sh --eval-bf16, each fp8 run's final
weights evaluated in bf16 (OUT/<run>/bf16_eval.log, the trainer's -x 0 output) get a row of their
own, "<run> weights in bf16". Printed and written to OUT/summary.md. Standard library only;
compare_convergence.sh calls it with its settings:

    python3 scripts/convergence_summary.py OUT THRESHOLD FLAGS FP8_FLAGS FAILED RUN...

FAILED is a space-separated list of the runs that crashed. Exit status: 0 when every fp8 run is
within THRESHOLD, 4 when one is not, 5 when there is no finite bf16 val loss to check against.
"""
import importlib.util
import math
import os
import statistics
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8.trainer_log import has_health, health_summary, parse_fp8_log, parse_main_log, parse_stdout

if len(sys.argv) < 6:
    sys.exit("usage: " + __doc__.split("\n\n")[1].strip())
out, threshold, flags, fp8_flags, failed, runs = sys.argv[1], float(sys.argv[2]), sys.argv[3], sys.argv[4], sys.argv[5].split(), sys.argv[6:]
stats = {}
for run in runs:
    log = parse_main_log(os.path.join(out, run, "main.log"))
    steps = log.train_steps()
    last20 = [log.train[s]["trl"] for s in steps[-20:]]
    # tokens/s as the trainer's own median: leave out the first 3 steps (GEMM and attention plans)
    tps = [log.train[s]["tok/s"] for s in steps[3:] if "tok/s" in log.train[s]] or \
          [log.train[s]["tok/s"] for s in steps if "tok/s" in log.train[s]]
    vsteps = log.val_steps()
    stats[run] = dict(
        last_step=steps[-1] if steps else None,
        train=sum(last20) / len(last20) if last20 else float("nan"),
        n_train=len(last20),
        val=log.val[vsteps[-1]] if vsteps else float("nan"),
        val_step=vsteps[-1] if vsteps else None,
        tps=statistics.median(tps) if tps else float("nan"),
        bpb=log.bpb.get(vsteps[-1], float("nan")) if vsteps else float("nan"),
        hs=log.hellaswag[max(log.hellaswag)] if log.hellaswag else None,  # the last HellaSwag score (-hs)
    )

# compare_convergence.sh --eval-bf16: an fp8 run's last checkpoint evaluated in bf16 (-x 0), its numbers at step 0
evals = {}
for run in runs:
    path = os.path.join(out, run, "bf16_eval.log")
    if run.startswith("fp8") and os.path.isfile(path):
        with open(path, errors="replace") as f:
            o = parse_stdout(f.read())
        evals[run] = dict(val=o.val.get(0, float("nan")), bpb=o.bpb.get(0, float("nan")), hs=o.hellaswag.get(0))

def rel(a, b):  # (a - b) / b
    return (a - b) / b if math.isfinite(a) and math.isfinite(b) and b != 0 else float("nan")

def pct(x):
    return "n/a" if not math.isfinite(x) else f"{100 * x:+.2f}%"

def num(x, fmt):
    return "n/a" if not math.isfinite(x) else format(x, fmt)

def ratio(a, b):
    return f"{a / b:.2f}x" if math.isfinite(a) and math.isfinite(b) and b > 0 else "n/a"

base = stats.get("bf16")
lines = [f"# Convergence: {', '.join(runs)}", "",
         f"Trainer flags (all runs): `{flags.strip()}`", *([f"The fp8 runs also: `{fp8_flags}`"] if fp8_flags else []), "",
         "| run | steps | final train loss (mean of last 20) | train vs bf16 | final val loss (step) | val vs bf16 | val bpb | HellaSwag acc_norm (acc, items) | median tok/s | tok/s vs bf16 |",
         "|---|---|---|---|---|---|---|---|---|---|"]
for run in runs:
    s = stats[run]
    is_base = run == "bf16"
    hs = s["hs"]
    lines.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
        run, s["last_step"] if s["last_step"] is not None else "n/a",
        num(s["train"], ".4f") + ("" if s["n_train"] in (0, 20) else f" (of {s['n_train']})"),
        "-" if is_base else pct(rel(s["train"], base["train"])) if base else "n/a",
        num(s["val"], ".4f") + (f" ({s['val_step']})" if s["val_step"] is not None else ""),
        "-" if is_base else pct(rel(s["val"], base["val"])) if base else "n/a",
        num(s["bpb"], ".4f"),
        f"{hs['acc_norm']:.4f} ({hs['acc']:.4f}, {hs['items']})" if hs else "n/a",
        num(s["tps"], ",.0f"),
        "-" if is_base else ratio(s["tps"], base["tps"] if base else float("nan"))))
    if run in evals:
        e = evals[run]
        lines.append("| {} weights in bf16 | - | - | - | {} | {} | {} | {} | - | - |".format(
            run, num(e["val"], ".4f"), pct(rel(e["val"], base["val"])) if base else "n/a", num(e["bpb"], ".4f"),
            f"{e['hs']['acc_norm']:.4f} ({e['hs']['acc']:.4f}, {e['hs']['items']})" if e["hs"] else "n/a"))
lines.append("")
if evals:
    lines += ["A \"weights in bf16\" row is that fp8 run's last checkpoint evaluated in bf16 (`-x 0`, "
              "`<run>/bf16_eval.log`): fp8's training without fp8's rounding at evaluation, as the model runs once exported.", ""]

status = 0
notes = []
if base is None:
    notes.append("No finished bf16 run: the fp8 runs cannot be checked against it.")
    status = 5
elif not math.isfinite(base["val"]):
    notes.append("bf16 has no finite final val loss (was there val data, -j?): nothing to check against.")
    status = 5
else:
    for run in runs:
        if run == "bf16":
            continue
        s = stats[run]
        d = rel(s["val"], base["val"])
        if s["val_step"] != base["val_step"]:
            notes.append(f"Warning: {run}'s last val loss is at step {s['val_step']}, bf16's at step {base['val_step']}.")
        if not math.isfinite(d):
            notes.append(f"FAIL: {run} has no finite final val loss.")
            status = 4
        elif d > threshold:
            notes.append(f"FAIL: {run} final val loss {s['val']:.4f} is {pct(d)} vs bf16 {base['val']:.4f}, over the threshold +{100 * threshold:g}%.")
            status = 4
        else:
            notes.append(f"PASS: {run} final val loss {s['val']:.4f} is {pct(d)} vs bf16 {base['val']:.4f} (threshold +{100 * threshold:g}%).")
lines += notes
for run in failed:
    lines.append(f"CRASHED: {run} did not finish (see {run}/console.log); it is left out above.")
for run in runs:
    path = os.path.join(out, run, "fp8.log")
    if not run.startswith("fp8") or not os.path.isfile(path) or os.path.getsize(path) == 0:
        continue
    lines += ["", f"## fp8 health: {run}", ""]
    try:
        data = parse_fp8_log(path)[0]
    except OSError as e:
        lines.append(f"{run}/fp8.log could not be read: {e.strerror}.")
        continue
    if has_health(data):
        png = f"{run}_health.png"
        lines += [f"Fractions of a tensor's values cast in a step that underflowed (non-zero, cast to fp8 zero) or "
                  f"saturated (clipped at the format's max), from {run}/fp8.log"
                  + (f"; every tensor in {png}." if os.path.exists(os.path.join(out, png)) else "."), ""]
        lines += health_summary(data)
    else:
        lines.append(f"{run}/fp8.log has no underflow/saturation fields (written by a trainer before fp8 health counts).")
pngs = [p for p in ["loss.png"] + [f"{r}_{k}.png" for r in runs for k in ("scales", "health")] if os.path.exists(os.path.join(out, p))]
lines += ["", "Plots: " + (", ".join(pngs) if pngs else "none (plotting failed)")]
text = "\n".join(lines) + "\n"
with open(os.path.join(out, "summary.md"), "w") as f:
    f.write(text)
print(text, end="")
sys.exit(status)
