"""Checks of the trainer's metrics.jsonl and main.log lines for bits per byte and HellaSwag, of
scripts/to_tensorboard.py and of llama_fp8/trainer_log.py's reading of those lines. Event files are
read back with tensorboard's own reader (EventAccumulator).

- CPU, always: a metrics.jsonl written here as the trainer's writers write it (json_number: %.8g,
  null for inf / NaN) for an fp8 run with -hs, resumed from step 2's checkpoint with another -v: the
  abandoned steps 3-4 (their val loss, bpb and HellaSwag too) must be gone, the fp8 fields under their
  own tags (underflow and saturation apart), the null loss of step 3 and the null norm of the last
  step left out and named, the fallback's record and the worst tensor's name (strings) passed over.
  Bad input: a missing file, a line that is not a record, a scalar that is a string or true, an
  existing output without --force, --force onto a file or onto a folder holding other files, a
  read-only --out (each: `error: <path>: ...`, exit 1, no traceback, nothing written or deleted, no
  .partial left); a killed run's .partial folder holding old events is not reused; a cut-off last
  line is skipped.
- With nvcc (no GPU): the trainer's own writers (llmc/run_log.h's run_log_step, run_log_val,
  run_log_hellaswag, and the trainer's fp8_report_switches, through dev/test/tools/metrics_lines.cu: host code
  only) for a made-up bf16 run resumed after step 2, and an fp8 fallback's switch after step 4 (its
  line on standard output, main.log's line, which trainer_log.py passes over, and metrics.jsonl's
  record); bpb is the val loss in bits over the val bytes (4.25 nats x 512 tokens / (ln 2 x 1000 bytes)).
- With ./train_llama_fp8 and a GPU: a 4-step fp8 run of the tiny preset with -fp8_log 1 (the fp8
  fields need the GPU's counts): every step's fp8_underflow and fp8_saturation lie between the
  smallest and largest fraction fp8.log gives a tensor at that step (they are means weighted by the
  values cast), fp8_worst_underflow is the largest and its tensor has it, and to_tensorboard.py
  carries them.
Needs tensorboardX and tensorboard. Last line: "N passed, N failed".

    python3 dev/test/test_metrics.py
"""
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

from checks import check, summary  # dev/test/checks.py
from llama_fp8 import trainer_log

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

TMP = tempfile.mkdtemp(prefix="test_metrics_")


def run(args, cwd=None):
    p = subprocess.run([str(a) for a in args], capture_output=True, cwd=cwd)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def to_tb(*args):
    return run([sys.executable, os.path.join(ROOT, "scripts", "to_tensorboard.py")] + list(args))


def scalars(folder):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    acc = EventAccumulator(folder)
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def close(got, want):
    return len(got) == len(want) and all(s == ws and math.isclose(v, wv, rel_tol=1e-6) for (s, v), (ws, wv) in zip(got, want))


def record(step, **fields):
    """One metrics.jsonl line as the trainer writes it: floats as json_number writes them (%.8g, null
    when not finite), ints as %d, strings quoted."""
    parts = [f'{{"step": {step}']
    for key, v in fields.items():
        if isinstance(v, (str, int)):
            parts.append(f', "{key}": {json.dumps(v)}')
        else:
            parts.append(f', "{key}": {"%.8g" % v if math.isfinite(v) else "null"}')
    return "".join(parts) + "}\n"


def fp8_step(step, loss, norm, attempt):
    """A step's record of an fp8 run: underflow and saturation differ from each other and between the
    attempts."""
    return record(step, loss=loss, lr=3e-4, norm=norm, ms=20.0 + step, tokens_per_s=51200.0, mfu=0.25, memory_gib=3.0,
                  fp8_underflow=1e-3 * step * attempt, fp8_saturation=2e-6 * step * attempt, fp8_worst_underflow=0.01 * step * attempt,
                  fp8_worst_underflow_tensor="layer 1 w2 dy")


def test_fp8_resumed():
    """An fp8 run with -v 2 -hs: steps 1-4, then resumed from step 2's checkpoint with -v 5 (steps 3-5):
    what the first attempt logged at 3 and 4, the evaluations at 4 included, is abandoned."""
    run_dir = os.path.join(TMP, "fp8_run")
    os.makedirs(run_dir)
    bpb = lambda loss: loss * 512 / (math.log(2) * 1000)  # noqa: E731
    lines = []
    for s in range(1, 5):
        lines.append(fp8_step(s, 6.0 - s, 1.5, 1))
        if s % 2 == 0:
            lines.append(record(s, val_loss=4.0 - 0.25 * s, bpb=bpb(4.0 - 0.25 * s)))
        if s == 4:
            lines.append(record(s, hellaswag_acc=0.25, hellaswag_acc_norm=0.3, hellaswag_items=40))
    for s, loss, norm in ((3, math.nan, 1.25), (4, 2.5, 1.0), (5, 2.25, math.inf)):
        lines.append(fp8_step(s, loss, norm, 2))
        if s == 4:  # the fallback switched a linear after step 4
            lines.append(record(4, fp8_fallback="layer 11 w2", fp8_grain="block", fp8_fallback_tensor="x", fp8_fallback_lost=0.1123))
    lines += [record(5, val_loss=3.125, bpb=bpb(3.125)), record(5, hellaswag_acc=0.5, hellaswag_acc_norm=0.625, hellaswag_items=40)]
    with open(os.path.join(run_dir, "metrics.jsonl"), "w") as f:
        f.write("".join(lines))
    rc, o, e = to_tb(run_dir)
    out = os.path.join(run_dir, "tensorboard")
    if not check(rc == 0 and os.path.isdir(out), f"to_tensorboard.py on an fp8 run's metrics.jsonl ({(o + e).strip()})"):
        return
    got = scalars(out)
    want = {"train/loss": [(1, 5.0), (2, 4.0), (4, 2.5), (5, 2.25)],
            "train/norm": [(1, 1.5), (2, 1.5), (3, 1.25), (4, 1.0)],
            "train/ms": [(s, 20.0 + s) for s in range(1, 6)],
            "fp8/underflow": [(1, 1e-3), (2, 2e-3), (3, 6e-3), (4, 8e-3), (5, 1e-2)],
            "fp8/saturation": [(1, 2e-6), (2, 4e-6), (3, 1.2e-5), (4, 1.6e-5), (5, 2e-5)],
            "fp8/worst_underflow": [(1, 0.01), (2, 0.02), (3, 0.06), (4, 0.08), (5, 0.1)],
            "val/loss": [(2, 3.5), (5, 3.125)], "val/bpb": [(2, bpb(3.5)), (5, bpb(3.125))],
            "hellaswag/acc": [(5, 0.5)], "hellaswag/acc_norm": [(5, 0.625)]}
    for tag, w in want.items():
        check(close(got.get(tag, []), w), f"{tag}: {got.get(tag)}, want {w}")
    check("fp8_fallback" not in str(got) and not [t for t in got if t.startswith("fp8/") and t not in want],
          f"the fallback's record and the worst tensor's name are passed over (tags {sorted(got)})")
    check("2 non-finite values (null in metrics.jsonl) left out: train/loss at step 3, train/norm at step 5" in o,
          f"the null values are named: {o.strip()}")
    return run_dir


def refused(what, args, error, out=None, keep=None):
    """to_tensorboard.py must exit 1 with stderr starting `error: ` + error, no traceback, leave no out
    or out.partial that was not there, and keep keep's contents."""
    before = {p: open(p, "rb").read() for p in keep or []}
    existed = out is not None and os.path.lexists(out)
    rc, o, e = to_tb(*args)
    ok = rc == 1 and e.startswith(f"error: {error}") and "Traceback" not in e
    ok = ok and (out is None or (os.path.lexists(out) == existed and not os.path.lexists(out + ".partial")))
    ok = ok and all(os.path.exists(p) and open(p, "rb").read() == b for p, b in before.items())
    check(ok, f"refused: {what} ({e.strip() or o.strip() or f'exit {rc}'})")


def test_refusals(run_dir):
    out = os.path.join(run_dir, "tensorboard")
    refused("an existing output without --force", [run_dir], f"{out}: exists", out)
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
        f.write('{"step": 6, "loss": 2.')  # cut off: a run that died while writing it
    rc, _, e = to_tb(run_dir, "--force")
    check(rc == 0 and close(scalars(out).get("train/loss", []), [(1, 5.0), (2, 4.0), (4, 2.5), (5, 2.25)]),
          f"--force replaces an event folder; a cut-off last line is skipped{f' ({e.strip()})' if rc else ''}")

    def jsonl(name, text):
        p = os.path.join(TMP, name)
        with open(p, "w") as f:
            f.write(text)
        return p
    bad = jsonl("bad.jsonl", '{"step": 1, "loss": 2.0}\nnot json\n{"step": 2, "loss": 1.0}\n')
    refused("a line that is not a record", [bad, "--out", os.path.join(TMP, "bad_tb")], f"{bad}: line 2:", os.path.join(TMP, "bad_tb"))
    text = jsonl("text.jsonl", '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5, "val_loss": "3.25"}\n{"step": 3, "loss": 1.0}\n')
    refused("a scalar that is a string", [text, "--out", os.path.join(TMP, "text_tb")], f'{text}: line 2: val_loss is "3.25", not a number',
            os.path.join(TMP, "text_tb"))
    boolean = jsonl("bool.jsonl", '{"step": 1, "loss": 2.0, "lr": true}\n{"step": 2, "loss": 1.0}\n')
    refused("a scalar that is true", [boolean, "--out", os.path.join(TMP, "bool_tb")], f"{boolean}: line 1: lr is true, not a number",
            os.path.join(TMP, "bool_tb"))
    missing = os.path.join(TMP, "none", "metrics.jsonl")
    refused("a missing file", [missing], f"{missing}: cannot read:")

    good = jsonl("good.jsonl", '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.0}\n')
    notes = jsonl("notes.txt", "my notes\n")
    refused("--force onto a file", [good, "--out", notes, "--force"], f"{notes}: exists and is not a folder", notes, keep=[notes])
    folder = os.path.join(TMP, "results")
    os.makedirs(folder)
    kept = os.path.join(folder, "table.md")
    with open(kept, "w") as f:
        f.write("| run | loss |\n")
    refused("--force onto a folder holding other files", [good, "--out", folder, "--force"], f"{folder}: holds 'table.md'", folder, keep=[kept])

    read_only = os.path.join(TMP, "read_only")
    os.makedirs(read_only)
    os.chmod(read_only, 0o555)
    if os.access(read_only, os.W_OK):  # root writes anyway: a folder of sysfs, where no one makes one
        read_only = "/sys"
    if os.path.isdir(read_only):
        ro_out = os.path.join(read_only, "tb")
        refused("a read-only --out", [good, "--out", ro_out], f"{ro_out}: cannot write:", ro_out)
    else:
        print("not run: a read-only --out (running as root, and no /sys)")

    # a killed run's .partial: its events (at step 0, before this run's: a reader drops events past a
    # restart's first step) and a file must not show
    from tensorboardX import SummaryWriter
    fresh = os.path.join(TMP, "fresh_tb")
    with SummaryWriter(logdir=fresh + ".partial") as w:
        w.add_scalar("train/loss", 7.0, 0)
        w.add_scalar("stale/tag", 1.0, 0)
    stale = os.listdir(fresh + ".partial")[0]  # named for a time long ago (this second's name would be overwritten)
    os.rename(os.path.join(fresh + ".partial", stale), os.path.join(fresh + ".partial", "events.out.tfevents.1700000000.killed"))
    with open(os.path.join(fresh + ".partial", "junk"), "w") as f:
        f.write("x")
    rc, o, e = to_tb(good, "--out", fresh)
    got = scalars(fresh) if rc == 0 else {}
    check(rc == 0 and sorted(got) == ["train/loss"] and got["train/loss"] == [(1, 2.0), (2, 1.0)] and sorted(os.listdir(fresh))[0].startswith("events")
          and len(os.listdir(fresh)) == 1 and not os.path.lexists(fresh + ".partial"),
          f"a killed run's .partial is not reused: only this run's events ({got}, {(o + e).strip()})")


def test_trainer_writers():
    """The trainer's own writers, built with nvcc (host code only)."""
    exe = os.path.join(TMP, "metrics_lines")
    rc, o, e = run(["nvcc", "-O1", "-arch=sm_90", "-std=c++17", "-Xcompiler", "-fopenmp", f"-I{ROOT}",
                    os.path.join(ROOT, "dev", "test", "tools", "metrics_lines.cu"), "-lcublasLt", "-lcublas", "-lgomp", "-o", exe])
    if not check(rc == 0, "dev/test/tools/metrics_lines.cu builds with nvcc"):
        print(o + e)
        return
    run_dir = os.path.join(TMP, "run")
    os.makedirs(run_dir)
    rc, o, e = run([exe, run_dir])
    check(rc == 0 and "val loss 4.250000 | bpb 3.1393" in o and "hellaswag: acc 0.2500 acc_norm 0.3000 (40 items)" in o,
          f"the trainer's lines: {o.strip().splitlines()[:2]}")
    check("fp8 fallback: layer 11 w2 -> block from step 5 on (its x lost 11.23% of its values in step 4, over 1% in 3 steps in a row)\n" in o,
          f"the fallback's switch on standard output: {o.strip().splitlines()[-1:]}")
    with open(os.path.join(run_dir, "main.log")) as f:
        switch_lines = [line for line in f if line.startswith("fp8_fallback:")]
    check(switch_lines == ["fp8_fallback: s:4 layer:11 linear:w2 grain:block tensor:x lost:1.123000e-01 steps:3\n"],
          f"the fallback's switch in main.log: {switch_lines}")
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        records = [json.loads(line) for line in f]
    check({"step": 4, "fp8_fallback": "layer 11 w2", "fp8_grain": "block", "fp8_fallback_tensor": "x", "fp8_fallback_lost": 0.1123} in records,
          f"the fallback's switch in metrics.jsonl: {records[-1]}")

    bpb2, bpb4 = 4.25 * 512 / (math.log(2) * 1000), 3.5 * 512 / (math.log(2) * 1000)
    log = trainer_log.parse_main_log(run_dir)
    check(log.skipped == 0 and set(log.val) == {2, 4} and abs(log.bpb[2] - bpb2) < 1e-5 and abs(log.bpb[4] - bpb4) < 1e-5,
          f"trainer_log.py: val and bpb lines ({log.val}, {log.bpb}, {log.skipped} skipped)")
    check(log.hellaswag == {2: {"acc": 0.25, "acc_norm": 0.3, "items": 40}, 4: {"acc": 0.5, "acc_norm": 0.625, "items": 40}},
          f"trainer_log.py: HellaSwag lines ({log.hellaswag})")

    rc, o, e = to_tb(run_dir)
    out = os.path.join(run_dir, "tensorboard")
    if not check(rc == 0 and os.path.isdir(out), f"to_tensorboard.py {run_dir} ({(o + e).strip()})"):
        return
    got = scalars(out)
    check(close(got.get("train/loss", []), [(1, 5.0), (2, 4.0), (4, 2.5)]) and "train/loss at step 3" in o,
          f"train/loss: the resumed run's step 3 replaced, its non-finite loss left out and named ({got.get('train/loss')})")
    check(close(got.get("train/lr", []), [(1, 3e-4), (2, 3e-4), (3, 2e-4), (4, 1e-4)]), "train/lr of every step, the latest attempt's")
    check(close(got.get("train/mfu", []), [(1, 0.25), (2, 0.25), (4, 0.3)]), "train/mfu (none where the trainer knew no peak)")
    check(close(got.get("train/memory_gib", []), [(1, 3.0), (2, 3.0), (3, 3.0), (4, 3.0)]), "train/memory_gib")
    check(close(got.get("val/bpb", []), [(2, bpb2), (4, bpb4)]), f"val/bpb = val loss / ln 2 x tokens / bytes ({got.get('val/bpb')})")
    check(close(got.get("val/loss", []), [(2, 4.25), (4, 3.5)]), "val/loss")
    check(close(got.get("hellaswag/acc_norm", []), [(2, 0.3), (4, 0.625)]) and close(got.get("hellaswag/acc", []), [(2, 0.25), (4, 0.5)]),
          "hellaswag/acc and acc_norm")


def gpu_count():
    try:
        p = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    except OSError:
        return 0
    return sum(line.startswith("GPU ") for line in p.stdout.splitlines()) if p.returncode == 0 else 0


def test_fp8_run():
    """A real fp8 run's fp8 fields against its fp8.log (-fp8_log 1: every step)."""
    run_dir = os.path.join(TMP, "gpu_fp8")
    rc, o, e = run([os.path.join(ROOT, "train_llama_fp8"), "-e", "tiny", "-i", "synthetic", "-j", "", "-b", "4", "-t", "128", "-x", "4",
                    "-u", "1", "-s", "0", "-precision", "fp8", "-fp8_log", "1", "-o", run_dir], cwd=ROOT)
    if not check(rc == 0, "a 4-step fp8 run with -fp8_log 1" + (f" ({(o + e).strip()[-300:]})" if rc else "")):
        return
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        steps = {r["step"]: r for r in map(json.loads, f) if "loss" in r}
    fp8, _ = trainer_log.parse_fp8_log(os.path.join(run_dir, "fp8.log"))
    check(sorted(steps) == [1, 2, 3, 4] and all(sorted(series) == [1, 2, 3, 4] for series in fp8.values()),
          f"metrics.jsonl and fp8.log: steps 1-4 ({sorted(steps)}, {sorted({s for v in fp8.values() for s in v})})")
    L = 1 + max(l for l, _ in fp8)  # metrics.jsonl names the lm_head's tensors layer L, fp8.log gives it layer 0
    names = {f"layer {L if lin == 'lm_head' else l} {lin} {k}": (l, lin, k) for l, lin in fp8 for k in trainer_log.FP8_KINDS}
    for s in sorted(steps):
        r = steps[s]
        if not check(all(isinstance(r.get(k), (int, float)) for k in ("fp8_underflow", "fp8_saturation", "fp8_worst_underflow")),
                     f"step {s}: the fp8 fields ({r})"):
            continue
        for what, key in (("under", "fp8_underflow"), ("sat", "fp8_saturation")):
            fractions = [fp8[t][s][f"{k}_{what}"] for t in fp8 for k in trainer_log.FP8_KINDS]
            lo, hi = min(fractions), max(fractions)
            check(lo * (1 - 1e-5) <= r[key] <= hi * (1 + 1e-5),
                  f"step {s}: {key} {r[key]:.6e} lies between fp8.log's tensors' {lo:.6e} and {hi:.6e} (a mean weighted by the values cast)")
        worst = max(fp8[t][s][f"{k}_under"] for t in fp8 for k in trainer_log.FP8_KINDS)
        l, lin, k = names.get(r.get("fp8_worst_underflow_tensor"), (None, None, None))
        check(math.isclose(r["fp8_worst_underflow"], worst, rel_tol=1e-5) and l is not None and
              math.isclose(fp8[(l, lin)][s][f"{k}_under"], worst, rel_tol=1e-5),
              f"step {s}: fp8_worst_underflow {r['fp8_worst_underflow']:.6e} is fp8.log's largest, {worst:.6e}, of {r.get('fp8_worst_underflow_tensor')}")
    rc, o, e = to_tb(run_dir)
    got = scalars(os.path.join(run_dir, "tensorboard")) if rc == 0 else {}
    for key, tag in (("fp8_underflow", "fp8/underflow"), ("fp8_saturation", "fp8/saturation"), ("fp8_worst_underflow", "fp8/worst_underflow")):
        check(close(got.get(tag, []), [(s, steps[s][key]) for s in sorted(steps)]), f"to_tensorboard.py: {tag} of every step ({got.get(tag)})")


def main():
    try:
        import tensorboardX  # noqa: F401
        import tensorboard  # noqa: F401
    except ImportError as e:
        check(False, f"Python packages: {e}; install with: .venv/bin/pip install -r requirements.txt")
        return summary()
    run_dir = test_fp8_resumed()
    if run_dir:
        test_refusals(run_dir)
    if shutil.which("nvcc") is None:
        print("not run: the trainer's writers (nvcc is not here to build dev/test/tools/metrics_lines.cu)")
    else:
        test_trainer_writers()
    if not os.access(os.path.join(ROOT, "train_llama_fp8"), os.X_OK) or gpu_count() == 0:
        print("not run: a real fp8 run's fp8 fields (needs ./train_llama_fp8, make train_llama_fp8, and a GPU)")
    else:
        test_fp8_run()
    return summary()


if __name__ == "__main__":
    sys.exit(main())
