"""Per-kernel time of one training step from two Nsight Compute CSVs (scripts/profile_step.sh).

Each CSV holds `ncu --csv --metrics gpu__time_duration.sum` rows of a run of train_llama_fp8 with 1
and with 2 layers. A step starts at an encoder_forward_kernel; the table uses the last complete one
(the last that reaches the optimizer, adamw_kernel), leaving out the first (plans and tuning). Per kernel
name: per layer = (2-layer step) - (1-layer step), outside the layers = (1-layer step) - per layer,
and for a model of --layers L: outside + L x per layer.

    python3 scripts/ncu_step_table.py --layers 32 log_profile/ncu_L1.csv log_profile/ncu_L2.csv
"""
import argparse
import csv
import re
import sys
from collections import defaultdict

STEP_START = "encoder_forward_kernel"
STEP_END = "adamw_kernel"


def last_step(path):
    """{kernel name: [calls, ms]} over the last training step in one ncu CSV."""
    with open(path, newline="") as f:
        rows = list(csv.reader(line for line in f if line.startswith('"')))
    if not rows:
        sys.exit(f"{path}: no ncu CSV rows (did the profiled run fail?)")
    header, rows = rows[0], rows[1:]
    try:
        name_col, value_col = header.index("Kernel Name"), header.index("Metric Value")
        unit_col = header.index("Metric Unit")
    except ValueError:
        sys.exit(f"{path}: not an ncu --csv table (header {header[:6]}...)")
    starts = [i for i, r in enumerate(rows) if STEP_START in r[name_col]] + [len(rows)]
    complete = [(a, b) for a, b in zip(starts[1:-1], starts[2:]) if any(STEP_END in r[name_col] for r in rows[a:b])]
    if not complete:
        sys.exit(f"{path}: no complete step after the first ({len(starts) - 1} started; did the run end early?)")
    first, end = complete[-1]
    step = defaultdict(lambda: [0, 0.0])
    for r in rows[first:end]:
        if r[unit_col] != "ns":
            sys.exit(f"{path}: durations in {r[unit_col]!r}, expected ns (--print-units base)")
        name = re.sub(r"^void ", "", r[name_col].split("(")[0]).strip()
        step[name][0] += 1
        step[name][1] += float(r[value_col].replace(",", "")) / 1e6
    return step


def kind(name):
    if name.startswith(("nvjet", "sm90_xmma", "cutlass")) or "gemm" in name:
        return "GEMM"
    if "cudnn" in name or "sdpa" in name:
        return "attention"
    return "other"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, required=True, help="layers of the model the table is for")
    ap.add_argument("csv_1_layer")
    ap.add_argument("csv_2_layers")
    a = ap.parse_args()
    if a.layers < 1:
        sys.exit("--layers must be at least 1")
    one, two = last_step(a.csv_1_layer), last_step(a.csv_2_layers)
    rows = []
    for name in set(one) | set(two):
        c1, t1 = one.get(name, [0, 0.0])
        c2, t2 = two.get(name, [0, 0.0])
        per_layer, outside = t2 - t1, 2 * t1 - t2
        rows.append((outside + a.layers * per_layer, per_layer, outside, c2 - c1, 2 * c1 - c2, name))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print(f"One step of a {a.layers}-layer model, per kernel (ms; kernels timed alone under ncu)\n")
    print("| kernel | kind | calls per layer | calls outside | ms per layer | ms outside | ms per step | share |")
    print("|---|---|---|---|---|---|---|---|")
    for step_ms, per_layer, outside, calls_layer, calls_out, name in rows:
        print(f"| `{name[:90]}` | {kind(name)} | {calls_layer} | {calls_out} | {per_layer:.3f} | {outside:.3f} | "
              f"{step_ms:.2f} | {100 * step_ms / total:.1f}% |")
    by_kind = defaultdict(float)
    for r in rows:
        by_kind[kind(r[5])] += r[0]
    print("\n| kind | ms per step | share |\n|---|---|---|")
    for k, ms in sorted(by_kind.items(), key=lambda kv: -kv[1]):
        print(f"| {k} | {ms:.1f} | {100 * ms / total:.1f}% |")
    print(f"| all kernels | {total:.1f} | 100% |")


if __name__ == "__main__":
    main()
