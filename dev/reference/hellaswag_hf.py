"""transformers' HellaSwag scores of an eval file (dev/data/prepare_hellaswag.py), the reference for
the trainer's -hs on a real model: the same tokens, scored as lm-eval's loglikelihood does (one
forward of context + ending[:-1], log_softmax at the ending's positions, summed in float64; acc the
largest sum, acc_norm the largest sum per character), written in the trainer's -hs_preds layout.
With --compare OURS it prints both runs' acc and acc_norm and the share of items predicted alike.

    python3 dev/reference/hellaswag_hf.py --model smollm2_hf --eval hs.bin --out hf_preds.txt [--compare ours.txt]

Needs torch, transformers, numpy (CPU is enough: --threads).
"""
import argparse
import importlib.util
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

import numpy as np

from llama_fp8 import formats
from llama_fp8.trainer_log import hs_scores, read_hs_preds


def summary(name, preds):
    acc, acc_norm = hs_scores(preds)
    print(f"{name}: acc {acc:.4f} acc_norm {acc_norm:.4f} ({len(preds)} items)")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", required=True, help="a Hugging Face model folder, or a GGUF file (transformers dequantizes it)")
    p.add_argument("--eval", required=True, help="the eval file")
    p.add_argument("--out", required=True, help="predictions, in the trainer's -hs_preds layout")
    p.add_argument("--max_items", type=int, default=0)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    p.add_argument("--compare", metavar="OURS", help="the trainer's -hs_preds file of the same items")
    args = p.parse_args()
    import torch
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(args.threads)
    items, _ = formats.read_hellaswag(args.eval)
    if args.max_items:
        items = items[:args.max_items]
    if args.model.endswith(".gguf"):  # transformers 5 cannot save a GGUF-loaded model, so it is read here
        folder, name = os.path.split(os.path.abspath(args.model))
        model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32).eval()
    else:
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    with open(args.out + ".tmp", "w") as f:
        f.write("# item label pred pred_norm logprob0 logprob1 logprob2 logprob3\n")
        for i, (label, ctx, endings, chars) in enumerate(items):
            lp = []
            for cont in endings:
                row = ctx + cont
                with torch.no_grad():
                    logits = model(torch.tensor([row[:-1]])).logits[0].float()
                ls = torch.log_softmax(logits, dim=-1)[len(ctx) - 1:]
                lp.append(float(ls[torch.arange(len(cont)), torch.tensor(cont)].double().sum()))
            lp = np.array(lp)
            f.write(f"{i} {label} {int(lp.argmax())} {int((lp / np.array(chars)).argmax())} " + " ".join(f"{x:.6f}" for x in lp) + "\n")
            if i % 100 == 99:
                print(f"{i + 1} items", flush=True)
    os.replace(args.out + ".tmp", args.out)
    hf = read_hs_preds(args.out)
    summary("transformers (CPU, fp32)", hf)
    if args.compare:
        ours = read_hs_preds(args.compare)
        common = sorted(set(hf) & set(ours))
        summary("ours", {i: ours[i] for i in common})
        same = sum(hf[i][1] == ours[i][1] for i in common) / len(common)
        same_norm = sum(hf[i][2] == ours[i][2] for i in common) / len(common)
        print(f"same acc prediction on {100 * same:.2f}% of {len(common)} items, same acc_norm prediction on {100 * same_norm:.2f}%"
              f" ({'PASS' if min(same, same_norm) >= 0.99 else 'FAIL'}: the bar is 99%)")
        return 0 if min(same, same_norm) >= 0.99 else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
