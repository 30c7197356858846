#!/usr/bin/env python3
"""Plot fp8 scales (or amaxes) against step from a train_llama_fp8 fp8.log.

    python3 scripts/plot_fp8.py LOG [--layers 0 -1] [--linears qkv w2] [--what scale] [--out fp8_scales.png]

LOG is an fp8.log or a log directory holding one (the trainer writes it with -fp8_log N). Three
panels, log y: X, W and dY, one line per selected (layer, linear). Defaults: layer 0 and the last
layer, linears qkv and w2. Negative layers count from the end (-1 = last).

fp8.log lines, one per linear per logged step:
    s:<step> layer:<l> linear:<qkv|wo|w13|w2> x_amax:<v> x_scale:<v> w_amax:<v> w_scale:<v> dy_amax:<v> dy_scale:<v>
A resumed run appends: when the step goes back, what was read from that step on is dropped.
Malformed (e.g. cut-off) lines are skipped; non-positive or non-finite values cannot sit on a log
axis and are counted and left out.
"""
import argparse
import math
import os
import sys

from trainer_log import FP8_KINDS, parse_fp8_log

KINDS = tuple(zip(FP8_KINDS, ("X (E4M3)", "W (E4M3)", "dY (E5M2)")))
LINEARS = ("qkv", "wo", "w13", "w2")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("log", help="fp8.log or a log directory holding one")
    p.add_argument("--layers", nargs="+", type=int, default=[0, -1], help="layers to plot (default: 0 -1 = first and last)")
    p.add_argument("--linears", nargs="+", default=["qkv", "w2"], help=f"linears to plot, of {' '.join(LINEARS)} (default: qkv w2); 'all' for every one")
    p.add_argument("--what", choices=("scale", "amax"), default="scale", help="plot scales (default) or amaxes")
    p.add_argument("--out", default="fp8_scales.png", help="output PNG (default fp8_scales.png)")
    p.add_argument("--title", help="plot title")
    a = p.parse_args(argv)

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

    try:
        import matplotlib
    except ImportError:
        sys.exit(f"{os.path.basename(sys.argv[0])}: matplotlib is not installed for {sys.executable} "
                 "(e.g. python3 -m venv /tmp/plotenv && /tmp/plotenv/bin/pip install matplotlib numpy)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(10, 10), sharex=True)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    styles = ["-", "--", ":", "-."]  # colour says the layer, line style the linear
    dropped = 0
    for ax, (kind, kind_name) in zip(axes, KINDS):
        key = f"{kind}_{a.what}"
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
        ax.set_ylabel(f"{kind_name} {a.what}")
        ax.grid(True, which="both", alpha=0.3)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=8, ncol=2)
    axes[0].set_title(a.title or f"fp8 {a.what}s: {path}")
    axes[-1].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(a.out, dpi=120)
    plt.close(fig)
    if dropped:
        print(f"plot_fp8.py: left out {dropped} non-positive or non-finite value(s) (log axis)", file=sys.stderr)
    print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
