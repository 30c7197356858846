#!/usr/bin/env python3
"""The seeds table of scripts/convergence_seeds.sh: DIR/seeds.md from the compare_convergence.sh runs
in DIR/seed<N>/ (bf16/main.log and fp8/main.log of each seed, read by trainer_log.parse_main_log).

    python3 scripts/convergence_seeds.py --out conv125m_seeds --seeds 1337,0,1,2 --status 0,0,1,0
    python3 scripts/convergence_seeds.py --out conv125m_seeds_fp32m --seeds 1337,0,1,2 --status 0,0,0,0 \\
        --compare conv125m_seeds
    python3 scripts/convergence_seeds.py --check-compare conv125m_seeds --seeds 1337,0,1,2

The table: per seed the bf16 and fp8 val loss at the last evaluated step, fp8's relative difference
(fp8 - bf16) / bf16 and compare_convergence.sh's verdict (from its exit status, --status: 0 PASS,
1 FAIL over the threshold, 3 a run crashed or no comparison; without --status the same rule on the
val losses, so logs copied from elsewhere can be tabulated too); the mean and the sample standard
deviation of the differences over the seeds that have both; bf16's and fp8's spread across the seeds
((max - min) / mean). With --compare REF (an earlier output of convergence_seeds.sh, e.g. the same
seeds with other AdamW moments): a second table of this run's bf16 and fp8 val against REF's, per seed
and on average, REF's own fp8-vs-bf16 mean and spread, and how the two runs' flags (DIR/flags.txt,
REF/flags.txt) and their main.log headers' AdamW moments differ.
--check-compare REF: that REF has a readable main.log with a val loss for every seed's bf16 and fp8
run (convergence_seeds.sh checks this before it trains anything).

Standard library only. Errors: "error: <file>: <problem>" on stderr and exit status 1; seeds.md is
still written when only some logs are bad (the problems are listed in it).
"""
import argparse
import importlib.util
import math
import os
import re
import shlex
import statistics
import sys
import tempfile

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8.trainer_log import parse_main_log

RUNS = ("bf16", "fp8")  # compare_convergence.sh's run folders


class SeedsError(Exception):
    """A log or folder this table needs, and what is wrong with it."""

    def __init__(self, path, problem):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


def read_run(run_dir):
    """{'val': last val loss, 'step': its step, 'moments': the main.log header's adam_moments or None,
    'gpu': the header's GPU or None, 'hs': the last HellaSwag score {'acc', 'acc_norm', 'items'} or None}
    of one run folder; SeedsError when main.log is missing, cannot
    be read or has no val loss."""
    path = os.path.join(run_dir, "main.log")
    if not os.path.exists(path):
        raise SeedsError(path, "missing (did the run start?)")
    try:
        log = parse_main_log(path)
    except OSError as e:
        raise SeedsError(path, f"cannot be read: {e.strerror or e}")
    steps = log.val_steps()
    if not steps:
        raise SeedsError(path, "has no val loss (no 's:N tel:' line: was there val data, -j, and -v?)")
    header = log.header[-1] if log.header else ""
    moments = re.search(r"\badam_moments (\S+)", header)
    gpu = header.partition(" precision ")[0] if " precision " in header else None
    return {"val": log.val[steps[-1]], "step": steps[-1], "moments": moments.group(1) if moments else None, "gpu": gpu,
            "hs": log.hellaswag[max(log.hellaswag)] if log.hellaswag else None}


def rel(a, b):  # (a - b) / b
    return (a - b) / b if a is not None and b is not None and math.isfinite(a) and math.isfinite(b) and b != 0 else float("nan")


def pct(x):
    return "n/a" if x is None or not math.isfinite(x) else f"{100 * x:+.2f}%"


def loss(x):
    return "n/a" if x is None else f"{x:.4f}"


def finite(xs):
    return [x for x in xs if x is not None and math.isfinite(x)]


def mean_sd(xs):
    """'+0.12% (sd 0.24%, 4 seeds)' of relative differences: mean and sample standard deviation."""
    xs = finite(xs)
    if not xs:
        return "n/a"
    sd = f"sd {100 * statistics.stdev(xs):.2f}%" if len(xs) > 1 else "sd n/a"
    return f"{pct(statistics.fmean(xs))} ({sd}, {len(xs)} seed{'s' if len(xs) != 1 else ''})"


def spread(xs):
    """'4.2027-4.2237 (0.50%)': min-max and (max - min) / mean of the finite values."""
    xs = finite(xs)
    if len(xs) < 2:
        return "n/a (fewer than 2 seeds)"
    return f"{min(xs):.4f}-{max(xs):.4f} ({100 * (max(xs) - min(xs)) / statistics.fmean(xs):.2f}%)"


def mean_loss(xs, n=None):
    """The mean of the finite values, with how many when fewer than n (default: all of xs): '4.2117',
    '4.2128 (3 seeds)'."""
    ok = finite(xs)
    if not ok:
        return "n/a"
    n = len(xs) if n is None else n
    return f"{statistics.fmean(ok):.4f}" + ("" if len(ok) == n else f" ({len(ok)} seed{'s' if len(ok) != 1 else ''})")


def read_seeds(out, seeds, status=None):
    """{seed: {'bf16': run or None, 'fp8': run or None, 'done': {run: bool}, 'status': int or None}} and
    the problems (SeedsError) of runs that finished (DONE) but whose log is bad; a run without DONE
    (crashed, or never started) is None."""
    table, problems = {}, []
    for i, seed in enumerate(seeds):
        row = {"status": status[i] if status else None, "done": {}}
        for run in RUNS:
            d = os.path.join(out, f"seed{seed}", run)
            row["done"][run] = os.path.isfile(os.path.join(d, "DONE"))
            row[run] = None
            if not row["done"][run]:
                continue
            try:
                row[run] = read_run(d)
            except SeedsError as e:
                problems.append(e)
        table[seed] = row
    return table, problems


def verdict(row, threshold, diff):
    """compare_convergence.sh's verdict from its exit status; without one (--status left out) the same
    rule on the val losses here: fp8 at most threshold over bf16."""
    crashed = [run for run in RUNS if not row["done"][run]]
    st = row["status"]
    if crashed:
        return "CRASHED: " + ", ".join(crashed)
    if st is None:
        st = 3 if not math.isfinite(diff) else 1 if diff > threshold else 0
    if st == 0:
        return "PASS"
    if st == 1:
        return f"FAIL (over +{100 * threshold:g}%)"
    if st == 3:
        return "no comparison (see its summary.md)"
    return f"exit {st}"


def val_cell(run, step):
    """'4.2200', or '4.2200 (@1400)' when its last val step is not the row's."""
    if run is None:
        return "n/a"
    return loss(run["val"]) + ("" if run["step"] == step else f" (@{run['step']})")


def flag_pairs(flags):
    """'-e 125m -l 6e-4' (bash-quoted) -> {'-e': '125m', '-l': '6e-4'} (the last of a repeated flag)."""
    words = shlex.split(flags)
    return {words[i]: words[i + 1] if i + 1 < len(words) else "" for i in range(0, len(words), 2)}


def flags_difference(mine, theirs):
    """What this run's flags add, change and lack against REF's, in words."""
    try:
        a, b = flag_pairs(mine), flag_pairs(theirs)
    except ValueError as e:  # an unbalanced quote: shown, not compared
        return f"has flags that cannot be compared ({e}): `{mine}` against ref's `{theirs}`"
    q = lambda k, v: f"`{k} {shlex.quote(v)}`"  # noqa: E731
    parts = []
    added = [q(k, v) for k, v in a.items() if k not in b]
    changed = [f"{q(k, b[k])} to {q(k, v)}" for k, v in a.items() if k in b and b[k] != v]
    lacks = [q(k, v) for k, v in b.items() if k not in a]
    if added:
        parts.append("adds " + ", ".join(added))
    if changed:
        parts.append("changes " + ", ".join(changed))
    if lacks:
        parts.append("lacks " + ", ".join(lacks))
    return "; ".join(parts) if parts else "the same flags"


def moments_of(table):
    """'bf16', 'fp32', 'bf16, fp32' (mixed) or 'not in the main.log headers' of every run read."""
    seen = sorted({run["moments"] for row in table.values() for r in RUNS for run in [row[r]] if run and run["moments"]})
    missing = any(run and not run["moments"] for row in table.values() for r in RUNS for run in [row[r]])
    if not seen:
        return "not in the main.log headers (a trainer before -adam_moments: fp32)"
    return ", ".join(seen) + (" (some headers lack it)" if missing else "")


def read_flags(d, name="flags.txt"):
    try:
        with open(os.path.join(d, name)) as f:
            return f.read().strip()
    except OSError:
        return None


def hellaswag_table(seeds, rows):
    """The runs' last HellaSwag acc_norm (acc) per seed and their means, when any run had -hs."""
    if not any(r[run] and r[run]["hs"] for r in rows for run in RUNS):
        return []
    cell = lambda run: f"{run['hs']['acc_norm']:.4f} ({run['hs']['acc']:.4f})" if run and run["hs"] else "n/a"  # noqa: E731
    lines = ["", "HellaSwag at each run's last evaluation, acc_norm (acc); the items: "
             + ", ".join(sorted({str(r[run]["hs"]["items"]) for r in rows for run in RUNS if r[run] and r[run]["hs"]})), "",
             "| seed | bf16 acc_norm (acc) | fp8 acc_norm (acc) | fp8 - bf16 acc_norm |", "|---|---|---|---|"]
    deltas = []
    for seed, row in zip(seeds, rows):
        b, f = row["bf16"], row["fp8"]
        d = f["hs"]["acc_norm"] - b["hs"]["acc_norm"] if b and f and b["hs"] and f["hs"] else None
        if d is not None:
            deltas.append(d)
        lines.append(f"| {seed} | {cell(b)} | {cell(f)} | {'n/a' if d is None else f'{d:+.4f}'} |")
    if deltas:
        lines.append(f"| mean | | | {statistics.mean(deltas):+.4f} |")
    return lines


def seeds_table(out, seeds, status, flags, threshold, compare=None, fp8_args=""):
    """(the text of seeds.md, the problems (SeedsError) met)."""
    table, problems = read_seeds(out, seeds, status)
    rows = [table[s] for s in seeds]
    gpus = sorted({r[run]["gpu"] for r in rows for run in RUNS if r[run] and r[run]["gpu"]})
    lines = [f"# bf16 vs fp8 over {len(seeds)} seed{'s' if len(seeds) != 1 else ''}", "",
             f"`scripts/compare_convergence.sh` once per seed, into `{out}/seed<N>/`, each with the trainer flags",
             "", f"    {flags} -seed N" if flags else "    -seed N", "",
             f"(compare_convergence.sh adds each run's `-precision`{f', and to the fp8 runs `{fp8_args}`' if fp8_args else ''})."
             f" AdamW moments: {moments_of(table)}."
             + (f" GPU: {', '.join(gpus)}." if gpus else ""), "",
             "| seed | step | bf16 val | fp8 val | fp8 vs bf16 | verdict |", "|---|---|---|---|---|---|"]
    diffs = {}
    for seed, row in zip(seeds, rows):
        b, f = row["bf16"], row["fp8"]
        step = b["step"] if b else f["step"] if f else None
        diffs[seed] = rel(f["val"], b["val"]) if b and f and b["step"] == f["step"] else float("nan")
        lines.append(f"| {seed} | {step if step is not None else 'n/a'} | {val_cell(b, step)} | {val_cell(f, step)} | "
                     f"{pct(diffs[seed])} | {verdict(row, threshold, diffs[seed])} |")
    bvals = [r["bf16"]["val"] if r["bf16"] else None for r in rows]
    fvals = [r["fp8"]["val"] if r["fp8"] else None for r in rows]
    lines.append(f"| mean | | {mean_loss(bvals)} | {mean_loss(fvals)} | {mean_sd(diffs.values())} | "
                 f"{sum(verdict(r, threshold, diffs[s]) == 'PASS' for s, r in zip(seeds, rows))} of {len(rows)} PASS |")
    lines += ["", "fp8 vs bf16 at the last val step, the mean and sample standard deviation over the seeds with both "
              f"runs at the same step: {mean_sd(diffs.values())}.",
              f"Across the seeds bf16 alone spans {spread(bvals)}, fp8 {spread(fvals)} ((max - min) / mean): "
              "a single seed's fp8-vs-bf16 difference carries noise of that order."]
    for seed, row in zip(seeds, rows):
        b, f = row["bf16"], row["fp8"]
        if b and f and b["step"] != f["step"]:
            lines.append(f"Warning: seed {seed}: fp8's last val loss is at step {f['step']}, bf16's at {b['step']}: no difference taken.")
    lines.append(f"Verdicts: compare_convergence.sh's (fp8's final val loss at most +{100 * threshold:g}% over bf16's)"
                 + ("." if status else ", worked out here from the val losses (no exit statuses given)."))
    lines += hellaswag_table(seeds, rows)

    if compare is not None:
        ref, ref_problems = read_seeds(compare, seeds)
        problems += ref_problems
        lines += ["", f"## Against `{compare}` (ref)", ""]
        ref_flags = read_flags(compare)
        lines.append("Flags: this run " + (flags_difference(flags, ref_flags) if ref_flags is not None
                                           else f"(ref's flags unknown: no {os.path.join(compare, 'flags.txt')})")
                     + f". AdamW moments: this run {moments_of(table)}; ref {moments_of(ref)}.")
        ref_fp8_args = read_flags(compare, "fp8_args.txt") or ""  # an older REF has none: it had no --fp8-args
        if ref_fp8_args != fp8_args:
            lines.append(f"The fp8 runs' own flags (--fp8-args): this run `{fp8_args or 'none'}`, ref `{ref_fp8_args or 'none'}`.")
        lines += ["", "| seed | bf16 val | ref bf16 | bf16 vs ref | fp8 val | ref fp8 | fp8 vs ref | ref fp8 vs bf16 |",
                  "|---|---|---|---|---|---|---|---|"]
        vs = {run: [] for run in RUNS}       # this run's val against ref's, per seed (nan: not both)
        paired = {run: ([], []) for run in RUNS}  # (this, ref) val of the seeds that have both
        ref_diffs = []
        for seed, row in zip(seeds, rows):
            rrow = ref[seed]
            cells = [str(seed)]
            for run in RUNS:
                mine, theirs = row[run], rrow[run]
                same_step = mine and theirs and mine["step"] == theirs["step"]
                d = rel(mine["val"], theirs["val"]) if same_step else float("nan")
                vs[run].append(d)
                if math.isfinite(d):
                    paired[run][0].append(mine["val"])
                    paired[run][1].append(theirs["val"])
                step = mine["step"] if mine else theirs["step"] if theirs else None
                cells += [val_cell(mine, step), val_cell(theirs, step), pct(d)]
            rb, rf = rrow["bf16"], rrow["fp8"]
            rd = rel(rf["val"], rb["val"]) if rb and rf and rb["step"] == rf["step"] else float("nan")
            ref_diffs.append(rd)
            cells.append(pct(rd))
            lines.append("| " + " | ".join(cells) + " |")
        rbvals = [ref[s]["bf16"]["val"] if ref[s]["bf16"] else None for s in seeds]
        rfvals = [ref[s]["fp8"]["val"] if ref[s]["fp8"] else None for s in seeds]
        # the mean row's losses: over the seeds both runs have, so that they compare like with like
        pm = {run: [mean_loss(paired[run][k], len(seeds)) for k in (0, 1)] for run in RUNS}
        lines.append(f"| mean | {pm['bf16'][0]} | {pm['bf16'][1]} | {mean_sd(vs['bf16'])} | {pm['fp8'][0]} | "
                     f"{pm['fp8'][1]} | {mean_sd(vs['fp8'])} | {mean_sd(ref_diffs)} |")
        lines += ["",
                  f"This run against ref, per seed (the same seed: the same initial weights and data order), at the last val step: "
                  f"bf16 {mean_sd(vs['bf16'])}, fp8 {mean_sd(vs['fp8'])}.",
                  f"ref's bf16 spans {spread(rbvals)} across the same seeds, its fp8 {spread(rfvals)}; "
                  f"ref's fp8 vs bf16: mean {mean_sd(ref_diffs)}, this run's {mean_sd(diffs.values())}."]
        for seed, row in zip(seeds, rows):
            for run in RUNS:
                mine, theirs = row[run], ref[seed][run]
                if mine and theirs and mine["step"] != theirs["step"]:
                    lines.append(f"Warning: seed {seed}: this run's {run} has its last val loss at step {mine['step']}, "
                                 f"ref's at {theirs['step']}: no difference taken.")
            for run in RUNS:
                if not ref[seed]["done"][run]:
                    lines.append(f"ref's seed {seed} {run} did not finish (no {os.path.join(compare, f'seed{seed}', run, 'DONE')}).")
    if problems:
        lines += [""] + [f"error: {e}" for e in problems]
    return "\n".join(lines) + "\n", problems


def check_compare(ref, seeds):
    """The problems (SeedsError) of REF's bf16 and fp8 runs of these seeds: a log the table cannot read,
    or no DONE beside it; REF must be a folder."""
    if not os.path.isdir(ref):
        return [SeedsError(ref, "not a folder (--compare wants an earlier convergence_seeds.sh --out DIR)")]
    problems = []
    for seed in seeds:
        for run in RUNS:
            d = os.path.join(ref, f"seed{seed}", run)
            try:
                read_run(d)
            except SeedsError as e:
                problems.append(e)
                continue
            if not os.path.isfile(os.path.join(d, "DONE")):  # the table takes a run without DONE as unfinished
                problems.append(SeedsError(os.path.join(d, "DONE"), "missing: the run did not finish (compare_convergence.sh writes it when a run ends)"))
    return problems


def write_atomic(path, text):
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".seeds.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def int_list(s, what):
    try:
        vals = [int(x) for x in s.split(",")]
    except ValueError:
        raise SeedsError(what, f"wants comma-separated integers, got {s!r}")
    return vals


def main(argv=None):
    p = argparse.ArgumentParser(description="DIR/seeds.md from convergence_seeds.sh's runs (see the module docstring)",
                                usage="python3 scripts/convergence_seeds.py --out conv125m_seeds --seeds 1337,0,1,2 "
                                      "--status 0,0,0,0 [--compare conv125m_seeds_fp32m]")
    p.add_argument("--out", help="convergence_seeds.sh's output folder (holds seed<N>/); seeds.md is written there")
    p.add_argument("--seeds", required=True, help="comma-separated seeds, in the table's order")
    p.add_argument("--status", help="compare_convergence.sh's exit status of each seed, comma-separated (default: the "
                   "verdicts from the val losses and --threshold, as compare_convergence.sh decides them)")
    p.add_argument("--flags", help="the trainer flags of every run, as bash quoted them (default: OUT/flags.txt)")
    p.add_argument("--fp8-args", help="the fp8 runs' own flags (convergence_seeds.sh --fp8-args; default: OUT/fp8_args.txt)")
    p.add_argument("--threshold", type=float, default=0.01, help="compare_convergence.sh's --threshold (default 0.01)")
    p.add_argument("--compare", metavar="REF", help="an earlier convergence_seeds.sh output to set this run against")
    p.add_argument("--check-compare", metavar="REF", help="only check that REF has every seed's logs; write nothing")
    args = p.parse_args(argv)
    try:
        seeds = int_list(args.seeds, "--seeds")
        if args.check_compare is not None:
            problems = check_compare(args.check_compare, seeds)
            for e in problems:
                print(f"error: {e}", file=sys.stderr)
            return 1 if problems else 0
        if not args.out:
            p.error("--out is required (or --check-compare)")
        status = int_list(args.status, "--status") if args.status else None
        if status is not None and len(status) != len(seeds):
            raise SeedsError("--status", f"{len(status)} values for {len(seeds)} seeds")
        flags = args.flags if args.flags is not None else read_flags(args.out) or ""
        if args.compare is not None and not os.path.isdir(args.compare):
            raise SeedsError(args.compare, "not a folder (--compare wants an earlier convergence_seeds.sh --out DIR)")
        fp8_args = args.fp8_args if args.fp8_args is not None else read_flags(args.out, "fp8_args.txt") or ""
        text, problems = seeds_table(args.out, seeds, status, flags, args.threshold, args.compare, fp8_args)
        path = os.path.join(args.out, "seeds.md")
        try:
            write_atomic(path, text)
        except OSError as e:
            raise SeedsError(path, f"cannot be written: {e.strerror or e}")
    except SeedsError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(text, end="")
    for e in problems:
        print(f"error: {e}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
