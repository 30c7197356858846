"""CPU checks of the trainer's metrics.jsonl and main.log lines for bits per byte and HellaSwag, of
scripts/to_tensorboard.py and of llama_fp8/trainer_log.py's reading of those lines.

The files are written by the trainer's own writers (metrics_step, report_val, hellaswag_log of
train_llama_fp8.cu, through dev/test/tools/metrics_lines.cu, built with nvcc: host code only, no GPU)
for a made-up bf16 run resumed after step 2, and an fp8 fallback's switch after step 4 (its line on
standard output, main.log's line, which trainer_log.py passes over, and metrics.jsonl's record, which
to_tensorboard.py leaves out). to_tensorboard.py turns metrics.jsonl into event files,
read back here with tensorboard's own reader (EventAccumulator): the resumed run's abandoned step is
gone, a non-finite loss is left out, bpb is the val loss in bits over the val bytes
(4.25 nats x 512 tokens / (ln 2 x 1000 bytes)). Bad input: a missing file, a line that is not a
record, an existing output. Needs nvcc, tensorboardX and tensorboard. Last line: "N passed, N failed".

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


def run(args):
    p = subprocess.run([str(a) for a in args], capture_output=True)
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


def main():
    if shutil.which("nvcc") is None:
        print("not run: nvcc is not here (metrics_lines.cu builds the trainer's host code)")
        return summary()
    try:
        import tensorboardX  # noqa: F401
        import tensorboard  # noqa: F401
    except ImportError as e:
        check(False, f"Python packages: {e}; install with: .venv/bin/pip install -r requirements.txt")
        return summary()
    exe = os.path.join(TMP, "metrics_lines")
    rc, o, e = run(["nvcc", "-O1", "-arch=sm_90", "-std=c++17", "-Xcompiler", "-fopenmp", f"-I{ROOT}",
                    os.path.join(ROOT, "dev", "test", "tools", "metrics_lines.cu"), "-lcublasLt", "-lcublas", "-lgomp", "-o", exe])
    if not check(rc == 0, "dev/test/tools/metrics_lines.cu builds with nvcc"):
        print(o + e)
        return summary()
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
        return summary()
    got = scalars(out)
    check(close(got.get("train/loss", []), [(1, 5.0), (2, 4.0), (4, 2.5)]),
          f"train/loss: the resumed run's step 3 replaced, its non-finite loss left out ({got.get('train/loss')})")
    check(close(got.get("train/lr", []), [(1, 3e-4), (2, 3e-4), (3, 2e-4), (4, 1e-4)]), "train/lr of every step, the latest attempt's")
    check(close(got.get("train/mfu", []), [(1, 0.25), (2, 0.25), (4, 0.3)]), "train/mfu (none where the trainer knew no peak)")
    check(close(got.get("train/memory_gib", []), [(1, 3.0), (2, 3.0), (3, 3.0), (4, 3.0)]), "train/memory_gib")
    check(close(got.get("val/bpb", []), [(2, bpb2), (4, bpb4)]), f"val/bpb = val loss / ln 2 x tokens / bytes ({got.get('val/bpb')})")
    check(close(got.get("val/loss", []), [(2, 4.25), (4, 3.5)]), "val/loss")
    check(close(got.get("hellaswag/acc_norm", []), [(2, 0.3), (4, 0.625)]) and close(got.get("hellaswag/acc", []), [(2, 0.25), (4, 0.5)]),
          "hellaswag/acc and acc_norm")

    rc, _, e = to_tb(run_dir)
    check(rc == 1 and e.startswith(f"error: {out}: exists"), f"an existing output is refused without --force ({e.strip()})")
    with open(os.path.join(run_dir, "metrics.jsonl"), "a") as f:
        f.write('{"step": 5, "loss": 2.')  # cut off: a run that died while writing it
    rc, _, e = to_tb(run_dir, "--force")
    check(rc == 0 and close(scalars(out).get("train/loss", []), [(1, 5.0), (2, 4.0), (4, 2.5)]), f"a cut-off last line is skipped ({e.strip()})")
    bad = os.path.join(TMP, "bad.jsonl")
    with open(bad, "w") as f:
        f.write('{"step": 1, "loss": 2.0}\nnot json\n{"step": 2, "loss": 1.0}\n')
    rc, _, e = to_tb(bad, "--out", os.path.join(TMP, "bad_tb"))
    check(rc == 1 and e.startswith(f"error: {bad}: line 2:") and "Traceback" not in e and not os.path.exists(os.path.join(TMP, "bad_tb")),
          f"a line that is not a record: {e.strip()}")
    missing = os.path.join(TMP, "none", "metrics.jsonl")
    rc, _, e = to_tb(missing)
    check(rc == 1 and e.startswith(f"error: {missing}: cannot read"), f"a missing file: {e.strip()}")
    return summary()


if __name__ == "__main__":
    sys.exit(main())
