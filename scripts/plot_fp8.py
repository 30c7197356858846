#!/usr/bin/env python3
"""Plot fp8 scales (or amaxes) against step from a train_llama_fp8 fp8.log, or its fp8 health:
how much of each fp8 tensor underflowed or saturated.

    python3 scripts/plot_fp8.py LOG [--layers 0 -1] [--linears qkv w2] [--what scale] [--out fp8_scales.png]
    python3 scripts/plot_fp8.py LOG --health [--out fp8_health.png]
    python3 scripts/plot_fp8.py LOG --health-summary [--top 3]

LOG is an fp8.log or a log directory holding one (the trainer writes it with -fp8_log N).

Scales (the default): three panels, log y: X, W and dY, one line per selected (layer, linear).
Defaults: layer 0 and the last layer, linears qkv and w2. Negative layers count from the end (-1 = last).

--health: heat maps in a 2 x 3 grid, underflow above saturation, X, W and dY from left to right.
In each, one row per linear (layer by layer qkv wo w13 w2, then the lm_head) against the logged
steps; the colour is log10 of the fraction of the values the tensor had cast in that step that
underflowed (non-zero, cast to fp8 zero) or saturated (clipped at the format's max). Fractions
below 1e-8 show as 1e-8, none at all in white, a step the log lacks for a linear in grey.

--health-summary: markdown lines naming the --top tensors (default 3) with the largest underflow
and the largest saturation fraction, as the mean over the logged steps, with the largest at one
step (trainer_log.health_summary, which compare_convergence.sh puts into its summary.md).

fp8.log lines, one per linear per logged step (the lm_head's, in fp8 with -fp8_lm_head 1, as layer 0's):
    s:<step> layer:<l> linear:<qkv|wo|w13|w2|lm_head> x_amax:<v> x_scale:<v> x_under:<f> x_sat:<f>
        w_amax:.. w_scale:.. w_under:.. w_sat:.. dy_amax:.. dy_scale:.. dy_under:.. dy_sat:..
A trainer before the fp8 health counts wrote no *_under and *_sat fields: its logs plot their
scales, and --health and --health-summary refuse them.
A resumed run appends: when the step goes back, what was read from that step on is dropped.
Malformed (e.g. cut-off) lines are skipped; non-positive or non-finite values cannot sit on a log
axis and are counted and left out.
"""
import argparse
import importlib.util
import math
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8.trainer_log import (FP8_KINDS, HEALTH, KIND_NAMES, LINEARS, has_health, health_summary, parse_fp8_log,
                                   tensor_name, tensor_rows)

FORMATS = dict(zip(FP8_KINDS, ("E4M3", "E4M3", "E5M2")))
FLOOR = 1e-8  # heat maps: a smaller fraction shows as this one (zero has a colour of its own)


def row_ticks(rows):
    """Heat-map y ticks: every row when there are few; else the first row of every k-th layer (at
    most 16 labelled) and the lm_head."""
    if len(rows) <= 24:
        return list(range(len(rows))), [tensor_name(l, lin) for l, lin in rows]
    layers = sorted({l for l, lin in rows if lin != "lm_head"})
    labelled = set(layers[::math.ceil(len(layers) / 16)])
    ticks, labels = [], []
    for i, (l, lin) in enumerate(rows):
        if lin == "lm_head" or l in labelled:
            ticks.append(i)
            labels.append(tensor_name(l, lin) if lin == "lm_head" else f"layer {l}")
            labelled.discard(l)  # a layer's first row only
    return ticks, labels


def plot_health(plt, data, out, title):
    import numpy as np

    rows = tensor_rows(data)
    steps = sorted({s for series in data.values() for s in series})
    col = {s: i for i, s in enumerate(steps)}
    # cell edges halfway between logged steps, so the x axis reads in steps however they are spaced
    st = np.array(steps, dtype=float)
    if len(st) > 1:
        half = np.diff(st) / 2
        x_edges = np.concatenate([[st[0] - half[0]], st[:-1] + half, [st[-1] + half[-1]]])
    else:
        x_edges = st[0] + np.array([-0.5, 0.5])
    y_edges = np.arange(len(rows) + 1) - 0.5
    lo = math.log10(FLOOR)
    cmap = plt.get_cmap("viridis").with_extremes(under="white", bad="lightgrey")

    fig, axes = plt.subplots(2, 3, figsize=(16, 9), sharex=True, sharey=True, constrained_layout=True)
    for r, (what, name) in enumerate(HEALTH):
        grids = []
        for kind in FP8_KINDS:
            g = np.full((len(rows), len(steps)), np.nan)
            for i, row in enumerate(rows):
                for s, rec in data[row].items():
                    g[i, col[s]] = rec.get(f"{kind}_{what}", np.nan)
            grids.append(g)
        peak = max((g[g > 0].max() for g in grids if (g > 0).any()), default=FLOOR)
        hi = min(0.0, max(math.ceil(math.log10(peak)), lo + 1))  # one colour scale per row of panels
        for c, (kind, g) in enumerate(zip(FP8_KINDS, grids)):
            z = np.full_like(g, np.nan)
            z[g > 0] = np.log10(np.maximum(g[g > 0], FLOOR))
            z[g == 0] = lo - 1  # under the colour scale: the colormap's 'under' colour
            ax = axes[r, c]
            mesh = ax.pcolormesh(x_edges, y_edges, np.ma.masked_invalid(z), cmap=cmap, vmin=lo, vmax=hi)
            ax.set_title(f"{KIND_NAMES[kind]} ({FORMATS[kind]}) {name}")
        fig.colorbar(mesh, ax=axes[r, :], extend="min", label=f"log10 {name} fraction (white: none)")
    ticks, labels = row_ticks(rows)
    for ax in axes[:, 0]:
        ax.set_yticks(ticks, labels, fontsize=7 if len(ticks) > 12 else 9)
        if len(ticks) < len(rows):
            ax.set_ylabel(f"rows in each layer: {' '.join(LINEARS)}")
    axes[0, 0].set_ylim(len(rows) - 0.5, -0.5)  # the first layer on top
    axes[0, 0].xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    for ax in axes[-1]:
        ax.set_xlabel("step")
    fig.suptitle(title)
    tmp = out + ".tmp"  # a finished PNG or none: never half of one under the real name
    fig.savefig(tmp, dpi=120, format="png")
    os.replace(tmp, out)
    plt.close(fig)


def plot_scales(plt, data, layers, linears, what, out, title):
    """Returns how many values were left out (non-positive or non-finite: the axis is log)."""
    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]  # colour says the layer, line style the linear
    dropped = 0
    for ax, kind in zip(axes, FP8_KINDS):
        key = f"{kind}_{what}"
        for li, layer in enumerate(layers):
            for ki, lin in enumerate(linears):
                series = data.get((layer, lin), {})
                steps, vals = [], []
                for s in sorted(series):
                    v = series[s].get(key)
                    if v is None:
                        continue
                    if not (math.isfinite(v) and v > 0):
                        dropped += 1
                        continue
                    steps.append(s)
                    vals.append(v)
                if steps:
                    ax.plot(steps, vals, lw=1.4, color=colors[li % len(colors)], ls=styles[ki % len(styles)],
                            marker="." if len(steps) < 60 else None, label=f"layer {layer} {lin}")
        ax.set_yscale("log")
        ax.set_ylabel(f"{KIND_NAMES[kind]} ({FORMATS[kind]}) {what}")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, ncol=2)
    axes[0].set_title(title)
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    tmp = out + ".tmp"  # a finished PNG or none: never half of one under the real name
    fig.savefig(tmp, dpi=120, format="png")
    os.replace(tmp, out)
    plt.close(fig)
    return dropped


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", help="fp8.log or a log directory holding one")
    p.add_argument("--layers", nargs="+", type=int, default=[0, -1], help="layers to plot (default: 0 -1 = first and last)")
    p.add_argument("--linears", nargs="+", default=["qkv", "w2"], help=f"linears to plot, of {' '.join(LINEARS)} (default: qkv w2); 'all' for every one")
    p.add_argument("--what", choices=("scale", "amax"), default="scale", help="plot scales (default) or amaxes")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--health", action="store_true", help="heat maps of every tensor's underflow and saturation fractions")
    mode.add_argument("--health-summary", action="store_true", help="print the tensors with the most underflow and saturation (markdown)")
    p.add_argument("--top", type=int, default=3, help="--health-summary: how many tensors of each (default 3)")
    p.add_argument("--out", help="output PNG (default fp8_scales.png, with --health fp8_health.png)")
    p.add_argument("--title", help="plot title")
    a = p.parse_args(argv)
    if a.top < 1:
        p.error(f"--top wants a positive number, got {a.top}")

    path = os.path.join(a.log, "fp8.log") if os.path.isdir(a.log) else a.log
    try:
        data, skipped = parse_fp8_log(path)
    except OSError as e:
        print(f"plot_fp8.py: cannot read {path}: {e.strerror}", file=sys.stderr)
        return 1
    if skipped:
        print(f"plot_fp8.py: {path}: skipped {skipped} malformed line(s)", file=sys.stderr)
    if not data:
        print(f"plot_fp8.py: {path}: no fp8 lines (was the run fp8, with -fp8_log N > 0?)", file=sys.stderr)
        return 1
    if (a.health or a.health_summary) and not has_health(data):
        print(f"plot_fp8.py: {path}: no underflow/saturation fields: written by a trainer before fp8 health counts", file=sys.stderr)
        return 1
    if a.health_summary:
        print("\n".join(health_summary(data, a.top)))
        return 0

    if not a.health:
        nlayers = max(l for l, _ in data) + 1
        layers = []
        for l in a.layers:
            ll = l + nlayers if l < 0 else l
            if not 0 <= ll < nlayers:
                print(f"plot_fp8.py: layer {l} out of range: the log has layers 0..{nlayers - 1}", file=sys.stderr)
                return 1
            if ll not in layers:
                layers.append(ll)
        linears = list(LINEARS) if a.linears == ["all"] else a.linears
        present = sorted({lin for _, lin in data})
        for lin in linears:
            if lin not in present:
                print(f"plot_fp8.py: no linear '{lin}' in the log (it has: {' '.join(present)})", file=sys.stderr)
                return 1

    from llama_fp8 import formats  # here: reading the log needs no package, plotting does
    with formats.required_packages():
        import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = a.out or ("fp8_health.png" if a.health else "fp8_scales.png")
    if a.health:
        plot_health(plt, data, out, a.title or f"fp8 health: {path}")
    else:
        dropped = plot_scales(plt, data, layers, linears, a.what, out, a.title or f"fp8 {a.what}s: {path}")
        if dropped:
            print(f"plot_fp8.py: left out {dropped} non-positive or non-finite value(s) (log axis)", file=sys.stderr)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
