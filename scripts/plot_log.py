#!/usr/bin/env python3
"""Plot train and val loss from one or more train_llama_fp8 main.log files.

    python3 scripts/plot_log.py LOG [LOG ...] [--labels A B ...] [--smooth K] [--out loss.png]

Each LOG is a main.log or a log directory holding one. Top panel: train loss (a trailing mean over
K steps with --smooth K) and val loss against step. With two or more logs, a second panel shows the
relative difference (run_i - run_0) / run_0 of val loss and of the smoothed train loss, in percent,
on the steps both runs logged; run_0 (the first LOG) is the baseline.

The logs are read by trainer_log.parse_main_log (the format, and how a resumed run's repeated
steps and cut-off lines are handled, are described there); it needs only the standard library, and
compare_convergence.sh imports it from here for its summary. matplotlib is imported only for plotting.
"""
import argparse
import importlib.util
import math
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8.trainer_log import parse_main_log


def smooth(values, k):
    """Trailing mean over the last k values (fewer at the start); NaNs propagate through their window."""
    if k <= 1:
        return list(values)
    out, acc, window = [], 0.0, []
    for v in values:
        window.append(v)
        acc += v
        if len(window) > k:
            acc -= window.pop(0)
        # recompute when a non-finite value is in play: a running sum cannot drop it again
        out.append(acc / len(window) if math.isfinite(acc) else sum(window) / len(window))
    return out


def rel_diff(steps_a, vals_a, steps_b, vals_b):
    """(b - a) / a on the steps both have."""
    a = dict(zip(steps_a, vals_a))
    steps, diffs = [], []
    for s, vb in zip(steps_b, vals_b):
        va = a.get(s)
        if va is None or va == 0 or not math.isfinite(va):
            continue
        steps.append(s)
        diffs.append((vb - va) / va)
    return steps, diffs


def default_labels(paths):
    """Directory names of the logs; the full directory paths where those collide."""
    dirs = [os.path.dirname(os.path.abspath(p if not os.path.isdir(p) else os.path.join(p, "main.log"))) for p in paths]
    names = [os.path.basename(d) or d for d in dirs]
    if len(set(names)) < len(names):
        names = [os.path.relpath(d) for d in dirs]
    return names


def _auto_ylim(series_list):
    """Loss starts near ln(V) ~ 10 and falls fast: scale the axis to what follows the first 5% of steps."""
    lo, hi = math.inf, -math.inf
    for steps, vals in series_list:
        if not steps:
            continue
        cut = steps[0] + 0.05 * (steps[-1] - steps[0])
        for s, v in zip(steps, vals):
            if math.isfinite(v):
                lo = min(lo, v)
                if s >= cut:
                    hi = max(hi, v)
    if not math.isfinite(lo) or not math.isfinite(hi) or hi <= lo:
        return None
    pad = 0.05 * (hi - lo)
    return lo - pad, hi + pad


def plot(logs, labels, out, smooth_k=1, title=None, ylim=None, threshold=None):
    from llama_fp8 import formats  # here: reading the logs needs no package, plotting does
    with formats.required_packages():
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    two = len(logs) >= 2
    fig, axes = plt.subplots(2 if two else 1, 1, figsize=(10, 8 if two else 5), sharex=True, squeeze=False)
    ax = axes[0][0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    trains, plotted = [], []
    for i, (log, label) in enumerate(zip(logs, labels)):
        c = colors[i % len(colors)]
        steps, trl = log.series("trl")
        trl_s = smooth(trl, smooth_k)
        trains.append((steps, trl_s))
        if steps:
            ax.plot(steps, trl_s, color=c, lw=1.0, alpha=0.8,
                    label=f"{label} train" + (f" (mean of {smooth_k})" if smooth_k > 1 else ""))
            plotted.append((steps, trl_s))
        vsteps = log.val_steps()
        vals = [log.val[s] for s in vsteps]
        if vsteps:
            ax.plot(vsteps, vals, color=c, lw=1.8, ls="--", marker="o", ms=3.5, label=f"{label} val")
            plotted.append((vsteps, vals))
    if ylim is None:
        ylim = _auto_ylim(plotted)
    if ylim is not None:
        ax.set_ylim(*ylim)
    ax.set_ylabel("loss")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, ncol=2)
    ax.set_title(title or "train / val loss")

    if two:
        ax2 = axes[1][0]
        base = logs[0]
        bvs = base.val_steps()
        bvals = [base.val[s] for s in bvs]
        for i in range(1, len(logs)):
            c = colors[i % len(colors)]
            s, d = rel_diff(trains[0][0], trains[0][1], trains[i][0], trains[i][1])
            if s:
                ax2.plot(s, [100 * x for x in d], color=c, lw=0.9, alpha=0.6, label=f"{labels[i]} train")
            vs = logs[i].val_steps()
            s, d = rel_diff(bvs, bvals, vs, [logs[i].val[x] for x in vs])
            if s:
                ax2.plot(s, [100 * x for x in d], color=c, lw=1.8, ls="--", marker="o", ms=3.5, label=f"{labels[i]} val")
        ax2.axhline(0.0, color="k", lw=0.8)
        if threshold is not None:
            ax2.axhline(100 * threshold, color="r", lw=0.8, ls=":", label=f"threshold +{100 * threshold:g}%")
        ax2.set_ylabel(f"(run - {labels[0]}) / {labels[0]}  [%]")
        ax2.grid(True, alpha=0.3)
        if ax2.get_legend_handles_labels()[0]:
            ax2.legend(fontsize=8, ncol=2)
        # the first steps' differences are large and uninformative: scale to the rest
        lines = [(list(l.get_xdata()), list(l.get_ydata())) for l in ax2.get_lines() if len(l.get_xdata()) > 1]
        yl = _auto_ylim(lines)
        if yl is not None:
            lo, hi = yl
            if threshold is not None:
                hi = max(hi, 100 * threshold * 1.2)
            ax2.set_ylim(min(lo, 0.0), max(hi, 0.0))
    axes[-1][0].set_xlabel("step")
    fig.tight_layout()
    tmp = out + ".tmp"  # a finished PNG or none: never half of one under the real name
    fig.savefig(tmp, dpi=120, format="png")
    os.replace(tmp, out)
    plt.close(fig)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("logs", nargs="+", help="main.log files or log directories; the first is the baseline")
    p.add_argument("--labels", nargs="+", help="one label per log (default: the log directory names)")
    p.add_argument("--smooth", type=int, default=1, metavar="K", help="trailing mean of train loss over K steps (default 1: none)")
    p.add_argument("--out", default="loss.png", help="output PNG (default loss.png)")
    p.add_argument("--title", help="plot title")
    p.add_argument("--ylim", nargs=2, type=float, metavar=("LO", "HI"), help="loss axis limits (default: fit the curves after the first 5%% of steps)")
    p.add_argument("--threshold", type=float, help="draw +THRESHOLD (relative, e.g. 0.01) in the difference panel")
    a = p.parse_args(argv)
    if a.labels and len(a.labels) != len(a.logs):
        p.error(f"--labels gives {len(a.labels)} labels for {len(a.logs)} logs")
    if a.smooth < 1:
        p.error("--smooth must be >= 1")
    labels = a.labels or default_labels(a.logs)
    logs = []
    for path in a.logs:
        try:
            log = parse_main_log(path)
        except OSError as e:
            print(f"plot_log.py: cannot read {path}: {e.strerror}", file=sys.stderr)
            return 1
        if log.skipped:
            print(f"plot_log.py: {log.path}: skipped {log.skipped} malformed line(s)", file=sys.stderr)
        if not log.train and not log.val:
            print(f"plot_log.py: {log.path}: no step lines", file=sys.stderr)
        logs.append(log)
    plot(logs, labels, a.out, a.smooth, a.title, tuple(a.ylim) if a.ylim else None, a.threshold)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
