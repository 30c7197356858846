"""How alike two HellaSwag runs' predictions are (-hs_preds files, or dev/reference/hellaswag_hf.py's
in that layout): OURS's acc and acc_norm, and the share of the items both files have that OURS
predicts as REF does, by acc and by acc_norm. scripts/hellaswag_check.sh compares our fp8 run with
transformers' this way (no bar: fp8's noise); --bar F makes it a check, exit 1 below F.

    python3 scripts/compare_hellaswag.py /tmp/hellaswag_check/hf.txt /tmp/hellaswag_check/ours_fp8.txt --name "ours fp8"

Standard library only. A file that is not a predictions file prints `error: <file>: <problem>` and
exits 1.
"""
import argparse
import importlib.util
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8.trainer_log import hs_scores, read_hs_preds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("ref", metavar="REF", help="the reference's predictions")
    p.add_argument("ours", metavar="OURS", help="the predictions compared with them")
    p.add_argument("--name", default="ours", help="what OURS is called in the output (default: ours)")
    p.add_argument("--bar", type=float, help="the share of items predicted alike (both acc and acc_norm) below which it fails")
    args = p.parse_args(argv)
    preds = {}
    for path in (args.ref, args.ours):
        try:
            preds[path] = read_hs_preds(path)
        except OSError as e:
            print(f"error: {path}: cannot read: {e.strerror or e}", file=sys.stderr)
            return 1
        except ValueError as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return 1
    ref, ours = preds[args.ref], preds[args.ours]
    common = sorted(set(ref) & set(ours))
    if not common:
        print(f"error: {args.ours}: no item in common with {args.ref}", file=sys.stderr)
        return 1
    acc, acc_norm = hs_scores(ours)
    print(f"{args.name}: acc {acc:.4f} acc_norm {acc_norm:.4f} ({len(ours)} items)")
    same = sum(ref[i][1] == ours[i][1] for i in common) / len(common)
    same_norm = sum(ref[i][2] == ours[i][2] for i in common) / len(common)
    verdict = "" if args.bar is None else f" ({'PASS' if min(same, same_norm) >= args.bar else 'FAIL'}: the bar is {100 * args.bar:g}%)"
    print(f"same acc prediction as {args.ref} on {100 * same:.2f}% of {len(common)} items, same acc_norm prediction on"
          f" {100 * same_norm:.2f}%{verdict}")
    return 1 if args.bar is not None and min(same, same_norm) < args.bar else 0


if __name__ == "__main__":
    sys.exit(main())
