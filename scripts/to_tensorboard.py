"""Turns a run's metrics.jsonl (what train_llama_fp8 writes in its log directory: one JSON object per
step and per evaluation) into TensorBoard event files, written by tensorboardX.

    python3 scripts/to_tensorboard.py log_fp8 && tensorboard --logdir log_fp8/tensorboard

Scalars: train/{loss,lr,norm,ms,tokens_per_s,mfu,memory_gib}, fp8/{underflow,saturation,worst_underflow}
(fp8 runs), val/{loss,bpb}, hellaswag/{acc,acc_norm}. A resumed run appends to metrics.jsonl and
repeats the steps after its checkpoint: as llama_fp8/trainer_log.py does for main.log, when a step
goes back, what was read from that step on is dropped, so the latest attempt wins. A cut-off last
line (a run that died while writing it) is skipped; any other line that is not a JSON object with
a step is an error. Needs tensorboardX (requirements.txt).
"""
import argparse
import json
import os
import shutil
import sys

from llama_fp8 import formats
from llama_fp8.formats import FormatError

TAGS = {"loss": "train/loss", "lr": "train/lr", "norm": "train/norm", "ms": "train/ms", "tokens_per_s": "train/tokens_per_s",
        "mfu": "train/mfu", "memory_gib": "train/memory_gib", "fp8_underflow": "fp8/underflow",
        "fp8_saturation": "fp8/saturation", "fp8_worst_underflow": "fp8/worst_underflow", "val_loss": "val/loss",
        "bpb": "val/bpb", "hellaswag_acc": "hellaswag/acc", "hellaswag_acc_norm": "hellaswag/acc_norm"}


def read_metrics(path):
    """[(step, {tag: value})] of a metrics.jsonl (or a log directory holding one), in order, the
    abandoned steps of a resumed run dropped."""
    if os.path.isdir(path):
        path = os.path.join(path, "metrics.jsonl")
    try:
        with open(path, "rb") as f:
            lines = f.read().decode("utf-8", "replace").split("\n")
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    records, last_step = [], None
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            step = rec["step"]
            if not isinstance(step, int):
                raise TypeError("step is not an integer")
        except (ValueError, KeyError, TypeError) as e:
            if n == len(lines):  # no newline after it: cut off
                continue
            raise FormatError(path, f"line {n}: not a metrics record ({type(e).__name__}: {e})") from None
        if "loss" in rec:  # a training step: a repeated one starts a resumed attempt
            if last_step is not None and step <= last_step:
                records = [(s, r) for s, r in records if s < step]
            last_step = step
        values = {TAGS[k]: float(v) for k, v in rec.items() if k in TAGS and isinstance(v, (int, float))}
        records.append((step, values))
    if not records:
        raise FormatError(path, "no records")
    return records


def write_events(records, out):
    """The records as TensorBoard scalars in folder out (made; written under a temporary name first)."""
    with formats.required_packages():
        from tensorboardX import SummaryWriter
    tmp = out.rstrip("/") + ".partial"
    shutil.rmtree(tmp, ignore_errors=True)
    with SummaryWriter(logdir=tmp) as w:
        for step, values in records:
            for tag, v in values.items():
                w.add_scalar(tag, v, step)
    shutil.rmtree(out, ignore_errors=True)
    os.replace(tmp, out)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage="python3 scripts/to_tensorboard.py RUN [--out DIR]")
    p.add_argument("run", metavar="RUN", help="a log directory (-o) or its metrics.jsonl")
    p.add_argument("--out", metavar="DIR", help="the event files' folder (default RUN/tensorboard)")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    args = p.parse_args(argv)
    run_dir = args.run if os.path.isdir(args.run) else os.path.dirname(os.path.abspath(args.run))
    out = args.out or os.path.join(run_dir, "tensorboard")
    try:
        if os.path.exists(out) and not args.force:
            raise FormatError(out, "exists; pass --force to replace it")
        records = read_metrics(args.run)
        write_events(records, out)
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"{len(records)} records ({sum(len(v) for _, v in records)} scalars) -> {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
