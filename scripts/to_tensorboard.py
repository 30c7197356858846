"""Turns a run's metrics.jsonl (what train_llama_fp8 writes in its log directory: one JSON object per
step and per evaluation) into TensorBoard event files, written by tensorboardX.

    python3 scripts/to_tensorboard.py log_fp8 && tensorboard --logdir log_fp8/tensorboard

Scalars: train/{loss,lr,norm,ms,tokens_per_s,mfu,memory_gib}, fp8/{underflow,saturation,worst_underflow}
(fp8 runs), val/{loss,bpb}, hellaswag/{acc,acc_norm}. A resumed run appends to metrics.jsonl and
repeats the steps after its checkpoint: as llama_fp8/trainer_log.py does for main.log, when a step
goes back, what was read from that step on is dropped, so the latest attempt wins. The trainer
writes an inf or NaN as null: such a value is left out (TensorBoard plots no point there) and the
closing line names each one. A cut-off last line (a run that died while writing it) is skipped; any
other line that is not a JSON object with an integer step, or that gives one of the scalars above a
value that is not a number (a string, true/false), is an error naming the line: the file is not one
the trainer wrote. The events are written under OUT.partial (one a killed run left is removed first)
and renamed to OUT at the end; --force replaces only an OUT that is an event folder (it holds event
files and nothing else). Needs tensorboardX (requirements.txt).
"""
import argparse
import importlib.util
import json
import math
import os
import shutil
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats
from llama_fp8.formats import FormatError

TAGS = {"loss": "train/loss", "lr": "train/lr", "norm": "train/norm", "ms": "train/ms", "tokens_per_s": "train/tokens_per_s",
        "mfu": "train/mfu", "memory_gib": "train/memory_gib", "fp8_underflow": "fp8/underflow",
        "fp8_saturation": "fp8/saturation", "fp8_worst_underflow": "fp8/worst_underflow", "val_loss": "val/loss",
        "bpb": "val/bpb", "hellaswag_acc": "hellaswag/acc", "hellaswag_acc_norm": "hellaswag/acc_norm"}
EVENTS_PREFIX = "events.out.tfevents."  # the name of every file tensorboardX writes


def read_metrics(path):
    """[(step, {tag: value})] of a metrics.jsonl (or a log directory holding one), in order, the
    abandoned steps of a resumed run dropped; value None where the trainer wrote null (inf or NaN)."""
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
            if not isinstance(step, int) or isinstance(step, bool):
                raise TypeError("step is not an integer")
        except (ValueError, KeyError, TypeError) as e:
            if n == len(lines):  # no newline after it: cut off
                continue
            raise FormatError(path, f"line {n}: not a metrics record ({type(e).__name__}: {e})") from None
        if "loss" in rec:  # a training step: a repeated one starts a resumed attempt
            if last_step is not None and step <= last_step:
                records = [(s, r) for s, r in records if s < step]
            last_step = step
        values = {}
        for key, v in rec.items():
            if key not in TAGS:
                continue
            if isinstance(v, bool) or not isinstance(v, (int, float, type(None))):
                raise FormatError(path, f"line {n}: {key} is {json.dumps(v)}, not a number")
            values[TAGS[key]] = float(v) if v is not None and math.isfinite(v) else None
        records.append((step, values))
    if not records:
        raise FormatError(path, "no records")
    return records


def remove(path):
    """Removes a file or a folder with what it holds."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path)
    else:
        os.remove(path)


def check_out(out, force):
    """Refuses an existing out, unless --force and it is an event folder: never a file or a folder
    holding anything else (a mistyped --out must not delete it)."""
    if not os.path.lexists(out):
        return
    if not force:
        raise FormatError(out, "exists; pass --force to replace it")
    if not os.path.isdir(out) or os.path.islink(out):
        raise FormatError(out, "exists and is not a folder: --force replaces only an event folder this script wrote")
    others = sorted(f for f in os.listdir(out) if not f.startswith(EVENTS_PREFIX))
    if others:
        raise FormatError(out, f"holds {others[0]!r}, not a TensorBoard event file: --force replaces only an event folder this script wrote")


def write_events(records, out):
    """The records' finite values as TensorBoard scalars in folder out, written under out.partial
    first; on any error nothing of this run is left."""
    with formats.required_packages():
        from tensorboardX import SummaryWriter
    tmp = out + ".partial"
    made = False
    try:
        if os.path.lexists(tmp):  # a killed run's: its events must not show among these
            remove(tmp)
        os.mkdir(tmp)
        made = True
        with SummaryWriter(logdir=tmp) as w:
            for step, values in records:
                for tag, v in values.items():
                    if v is not None:
                        w.add_scalar(tag, v, step)
        if os.path.lexists(out):
            remove(out)
        os.replace(tmp, out)
    except OSError as e:
        if made:
            shutil.rmtree(tmp, ignore_errors=True)
        where = f" ({e.filename})" if e.filename and e.filename != out else ""
        raise FormatError(out, f"cannot write: {e.strerror or e}{where}") from None


@formats.tool_main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], usage="python3 scripts/to_tensorboard.py RUN [--out DIR] [--force]")
    p.add_argument("run", metavar="RUN", help="a log directory (-o) or its metrics.jsonl")
    p.add_argument("--out", metavar="DIR", help="the event files' folder (default RUN/tensorboard)")
    p.add_argument("--force", action="store_true", help="replace an existing --out event folder")
    args = p.parse_args(argv)
    run_dir = args.run if os.path.isdir(args.run) else os.path.dirname(os.path.abspath(args.run))
    out = (args.out or os.path.join(run_dir, "tensorboard")).rstrip("/") or "/"
    check_out(out, args.force)
    records = read_metrics(args.run)
    write_events(records, out)
    left_out = [f"{tag} at step {step}" for step, values in records for tag, v in values.items() if v is None]
    print(f"{len(records)} records ({sum(len(v) for _, v in records) - len(left_out)} scalars) -> {out}")
    if left_out:
        more = f", and {len(left_out) - 5} more" if len(left_out) > 5 else ""
        print(f"{len(left_out)} non-finite value{'s' if len(left_out) > 1 else ''} (null in metrics.jsonl) left out: {', '.join(left_out[:5])}{more}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
