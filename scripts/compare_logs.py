#!/usr/bin/env python3
"""Compares two runs' main.log step by step: train loss (trl), gradient norm (norm), val loss (tel);
or (health) the fp8 health of their fp8.log's first logged step. dev/test/test_multi_gpu.sh uses it
(2 ranks against 1 rank; a resumed run against the straight one); dev/test/test_trainer_log.py
checks it on sample logs.

    python3 scripts/compare_logs.py A B exact
    python3 scripts/compare_logs.py A B tol F1 L NF1 N
    python3 scripts/compare_logs.py A B fp8 F1 NF1 N RATIO BF16_1RANK BF16_2RANK
    python3 scripts/compare_logs.py A B health

  exact  the same printed values at the same steps (the runs must be bit-identical)
  tol    |A - B| / |B| per value: step-1 loss <= F1, any later loss <= L, step-1 norm <= NF1, any
         later norm <= N
  fp8    A is the 2-rank fp8 run, B the 1-rank fp8 run, BF16_1RANK and BF16_2RANK the bf16 runs of
         the same two set-ups. Step 1 as in tol (F1, NF1). After it, the losses (train and val) must
         stay much closer to the 1-rank fp8 run than fp8 itself moves the 1-rank run from bf16:
             |A - B| / |B|  <=  RATIO * gap(step) + 2 printed units,
         gap(step) = the largest |fp8 - bf16| / |bf16| of the 1-rank runs up to that step (the curves
         cross now and then: the running largest is the effect fp8 has had so far). A 2-rank run
         whose GEMMs fell back to bf16 is the 1-rank bf16 run up to data-parallel noise, so it sits a
         whole gap away (ratio ~1) and fails. The check can tell the two apart only if the gap stands
         clear of that noise: the largest gap must be at least 1/RATIO times the largest 2-rank vs
         1-rank difference of the bf16 runs (data parallelism alone, without fp8), else it fails
         saying it cannot tell. Norms after step 1: <= max(N, 2 * the norm's gap), which still shows a
         lost rank's gradient or a missing 1/world (a factor ~2); they are not what makes the check
         sharp (a norm follows every rounding chaotically: seen 16% apart at step 7 between 2 ranks
         and 1 in fp8 at lr 1e-3).
  health A and B are fp8.logs (-fp8_log 1) of a 2-rank and a 1-rank run over the same tokens. At
         their first logged step (the first, live step): every linear's W underflow and saturation
         fractions are equal (each rank casts the same weights with the same scale, the counts are
         summed over the ranks and divided by the values all ranks cast), and not all zero, else it
         cannot tell; the X and dY underflow fractions summed over the linears are within a factor 1.5
         of each other (the ranks cast different tokens, and the first micro-step's live scales see 2
         ranks' amaxes, not 1's: close, not equal; a rank's counts lost or counted twice is a factor
         2). Saturations of X and dY are too rare in a live step to compare.
Prints one line (the largest relative differences, or the first failure) and exits 0 when the logs
agree, 1 when they do not, 2 on bad arguments or an unreadable log.
"""
import importlib.util
import math
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8.trainer_log import FP8_KINDS, parse_fp8_log, parse_main_log

PRINTED_UNIT = {"trl": 1e-6, "tel": 1e-6, "norm": 1e-4}  # the last digit of %.6f / %.4f in main.log
LOSSES = ("trl", "tel")


def values(path):
    """{(kind, step): value} of one main.log."""
    log = parse_main_log(path)
    rows = {}
    for step, rec in log.train.items():
        for kind in ("trl", "norm"):
            if kind in rec:
                rows[(kind, step)] = rec[kind]
    for step, v in log.val.items():
        rows[("tel", step)] = v
    return rows


def rel(x, y):
    return abs(x - y) / max(abs(y), 1e-12)


def running_max_diff(A, B):
    """{(kind, step): the largest rel(A, B) of that kind up to that step}, over the keys both have."""
    out, run = {}, {}
    for kind, step in sorted((k for k in A if k in B), key=lambda k: k[1]):
        run[kind] = max(run.get(kind, 0.0), rel(A[(kind, step)], B[(kind, step)]))
        out[(kind, step)] = run[kind]
    return out


def compare(A, B, mode, args, extra=None):
    """(ok, message). extra: {'gap': running fp8-vs-bf16 gap, 'noise': {kind: largest bf16 2-vs-1 rank difference}}."""
    if not A or set(A) != set(B):
        return False, f"different or missing steps: {len(A)} vs {len(B)} values"
    worst = {}
    if mode == "fp8":
        for kind in LOSSES:
            steps = [s for k, s in A if k == kind and s > 1]
            if not steps:
                continue
            gap = extra["gap"].get((kind, max(steps)), 0.0)
            need = max(extra["noise"].get(kind, 0.0) / args["ratio"], 2 * PRINTED_UNIT[kind] / max(abs(B[(kind, max(steps))]), 1e-12))
            if gap < need:
                return False, (f"cannot tell: fp8 moves the 1-rank {kind} from bf16 by at most {gap:.2e}, less than "
                               f"{need:.2e} (1/{args['ratio']:g} of the bf16 runs' 2-vs-1-rank difference, or 2 printed units): "
                               "a 2-rank run with bf16 GEMMs would look the same")
    for key in sorted(A, key=lambda k: (k[1], k[0])):
        x, y = A[key], B[key]
        kind, step = key
        if mode == "exact":
            if not (x == y or (math.isnan(x) and math.isnan(y))):
                return False, f"{kind} at step {step}: {x} vs {y}"
            continue
        d = rel(x, y)
        if step == 1 and kind != "tel":
            bound = args["f1"] if kind == "trl" else args["nf1"]
        elif kind == "norm":
            bound = args["n"] if mode == "tol" else max(args["n"], 2.0 * extra["gap"].get(key, 0.0))
        elif mode == "tol":
            bound = args["l"]
        else:
            gap = extra["gap"].get(key)
            if gap is None:
                return False, f"{kind} at step {step}: the 1-rank fp8 and bf16 logs do not both have it"
            bound = args["ratio"] * gap + 2 * PRINTED_UNIT[kind] / max(abs(y), 1e-12)
            if d > bound:
                return False, (f"{kind} at step {step}: {x} vs {y}, relative difference {d:.2e} > {args['ratio']:g} x "
                               f"fp8's own effect so far ({gap:.2e}, 1 rank fp8 vs bf16): the 2-rank run is not "
                               "clearly nearer the 1-rank fp8 run than bf16 is (are its GEMMs fp8?)")
        if d > bound:
            return False, f"{kind} at step {step}: {x} vs {y}, relative difference {d:.2e} > {bound:g}"
        worst[kind] = max(worst.get(kind, 0.0), d)
    if mode == "exact":
        return True, "identical"
    msg = "; ".join(f"max rel diff {k} {v:.1e}" for k, v in sorted(worst.items())) if worst else "identical"
    if mode == "fp8":
        gap_max = {}
        for (kind, _), g in extra["gap"].items():
            gap_max[kind] = max(gap_max.get(kind, 0.0), g)
        msg += "; fp8 vs bf16 (1 rank) up to " + ", ".join(f"{k} {v:.1e}" for k, v in sorted(gap_max.items()))
    return True, msg


HEALTH_FACTOR = 1.5  # health mode: X and dY fractions of 2 ranks vs 1 within this factor


def first_step_health(path):
    """(step, {(layer, linear): record}) of an fp8.log's first logged step, with the health fields."""
    data, _ = parse_fp8_log(path)
    steps = sorted({s for series in data.values() for s in series})
    if not steps:
        raise ValueError(f"{path}: no fp8 lines")
    first = {key: series[steps[0]] for key, series in data.items() if steps[0] in series}
    if not all(f"{k}_under" in rec for rec in first.values() for k in FP8_KINDS):
        raise ValueError(f"{path}: no underflow/saturation fields (a trainer before fp8 health counts)")
    return steps[0], first


def compare_health(a, b):
    """(ok, message) for health mode: a the 2-rank run's first_step_health, b the 1-rank run's."""
    (step_a, A), (step_b, B) = a, b
    if step_a != step_b:
        return False, f"first logged steps differ: {step_a} vs {step_b}"
    if set(A) != set(B):
        return False, f"different linears: {len(A)} vs {len(B)}"
    w_nonzero = 0
    for key in sorted(B):
        for f in ("w_under", "w_sat"):
            if A[key][f] != B[key][f]:
                return False, (f"layer {key[0]} {key[1]} {f}: {A[key][f]:g} with 2 ranks, {B[key][f]:g} with 1: "
                               "the same weights cast with the same scale must lose the same fraction")
            w_nonzero += B[key][f] > 0
    if w_nonzero == 0:
        return False, "cannot tell: no W tensor underflowed or saturated in either run"
    parts = []
    for f in ("x_under", "dy_under"):
        a, b = sum(r[f] for r in A.values()), sum(r[f] for r in B.values())
        if b == 0:
            return False, f"cannot tell: no {f[:-6]} value underflowed with 1 rank"
        if not 1 / HEALTH_FACTOR <= a / b <= HEALTH_FACTOR:
            return False, f"{f} summed over the linears: {a:.3e} with 2 ranks, {b:.3e} with 1: not within a factor {HEALTH_FACTOR:g}"
        parts.append(f"{f} x{a / b:.3f}")
    return True, f"W equal ({w_nonzero} non-zero fractions); 2 ranks / 1 rank: " + ", ".join(parts)


def main(argv):
    usage = "usage: compare_logs.py A B exact | A B tol F1 L NF1 N | A B fp8 F1 NF1 N RATIO BF16_1RANK BF16_2RANK | A B health"
    nargs = {"exact": 3, "tol": 7, "fp8": 9, "health": 3}
    if len(argv) < 3 or argv[2] not in nargs or len(argv) != nargs[argv[2]]:
        print(usage, file=sys.stderr)
        return 2
    a, b, mode = argv[:3]
    if mode == "health":
        try:
            ok, msg = compare_health(first_step_health(a), first_step_health(b))
        except OSError as e:
            print(f"error: {e.filename}: {e.strerror}")
            return 2
        except ValueError as e:
            print(f"error: {e}")
            return 2
        print(msg)
        return 0 if ok else 1
    try:
        nums = [float(x) for x in argv[3:7]]
        if mode == "tol":
            args = dict(zip(("f1", "l", "nf1", "n"), nums))
        elif mode == "fp8":
            args = dict(zip(("f1", "nf1", "n", "ratio"), nums))
        else:
            args = {}
    except ValueError:
        print(usage, file=sys.stderr)
        return 2
    try:
        A, B = values(a), values(b)
        extra = None
        if mode == "fp8":
            bf16_1, bf16_2 = values(argv[7]), values(argv[8])
            noise = {}
            for (kind, step), v in bf16_2.items():
                if (kind, step) in bf16_1 and step > 1:
                    noise[kind] = max(noise.get(kind, 0.0), rel(v, bf16_1[(kind, step)]))
            extra = {"gap": running_max_diff(B, bf16_1), "noise": noise}
    except OSError as e:
        print(f"error: {e.filename}: {e.strerror}")
        return 2
    ok, msg = compare(A, B, mode, args, extra)
    print(msg)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
