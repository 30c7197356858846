"""Writes dev/test/fixtures/masked_loss/: transformers' masked loss and its gradient on the gqa
Hugging Face fixture (dev/test/fixtures/hf/gqa), the reference dev/test/test_masked_loss.py checks
the C reference's masked loss against (llama_ref.h: targets -1, one optimizer step over micro-batches).

    python3 dev/reference/make_masked_loss_fixture.py --out dev/test/fixtures/masked_loss

Needs torch and transformers (CPU is enough); run once, commit the output (the same bytes every run:
seeded, one thread, float32, eager attention).

One optimizer step of K = 2 micro-batches, each B = 2 rows of T + 1 = 17 tokens, given to
transformers as input_ids with labels = the tokens where learned, -100 where not (transformers
shifts: the prediction from token t is scored against labels[t + 1], so labels[:, 0] never counts).
Micro-batch 0 learns 21 of its 32 targets, micro-batch 1 only 5, so the step's mean over its 26
learned targets and the mean of the two micro-batches' means differ. The step's loss and gradient
are transformers' own gradient-accumulation rule since 4.46: each micro-batch's loss is its summed
loss over num_items_in_batch = the step's 26 learned targets, the micro-batches' losses add, and so
do their gradients (backward on each).
  tokens.npy        int32 (K, B, T + 1)  the rows
  labels.npy        int32 (K, B, T + 1)  the rows with -100 where not learned
  expected.json     step_loss (the sum above), micro_losses (each micro-batch's own mean over its learned
                    targets, labels as given), learned (targets learned per micro-batch), mean_of_means
  grads.safetensors float32, transformers' parameter names: the step's gradient
"""
import argparse
import json
import os
import sys

import numpy as np
import torch
from safetensors.torch import save_file
from transformers import LlamaForCausalLM

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = os.path.join(ROOT, "dev", "test", "fixtures", "hf", "gqa")
K, B, T = 2, 2, 16
LEARNED = (21, 5)  # learned targets of micro-batch 0 and 1


def make_batches(V):
    rng = np.random.default_rng(33)
    tokens = rng.integers(0, V, size=(K, B, T + 1), dtype=np.int64)
    labels = np.full_like(tokens, -100)
    for k in range(K):
        # choose which of the B*T targets (label positions 1..T of each row) are learned
        flat = rng.permutation(B * T)[:LEARNED[k]]
        for i in flat:
            b, t = divmod(int(i), T)
            labels[k, b, t + 1] = tokens[k, b, t + 1]
    return tokens, labels


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="python3 dev/reference/make_masked_loss_fixture.py --out dev/test/fixtures/masked_loss")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = LlamaForCausalLM.from_pretrained(MODEL, torch_dtype=torch.float32, attn_implementation="eager")
    model.train(False)
    tokens, labels = make_batches(model.config.vocab_size)
    total = int((labels[:, :, 1:] != -100).sum())
    micro_losses = []
    with torch.no_grad():
        for k in range(K):
            out = model(input_ids=torch.from_numpy(tokens[k]), labels=torch.from_numpy(labels[k]))
            micro_losses.append(out.loss.item())
    model.zero_grad()
    step_loss = 0.0
    for k in range(K):
        out = model(input_ids=torch.from_numpy(tokens[k]), labels=torch.from_numpy(labels[k]), num_items_in_batch=total)
        out.loss.backward()
        step_loss += out.loss.item()
    learned = [int((labels[k, :, 1:] != -100).sum()) for k in range(K)]
    if learned != list(LEARNED) or total != sum(LEARNED):
        sys.exit(f"error: {args.out}: learned targets {learned}, expected {list(LEARNED)}")
    grads = {name: p.grad.detach().clone().contiguous() for name, p in model.named_parameters()}
    os.makedirs(args.out, exist_ok=True)
    tmp = os.path.join(args.out, ".tmp")
    np.save(tmp + "_tokens.npy", tokens.astype(np.int32))
    np.save(tmp + "_labels.npy", labels.astype(np.int32))
    save_file(grads, tmp + "_grads.safetensors")
    with open(tmp + "_expected.json", "w") as f:
        json.dump({"step_loss": step_loss, "micro_losses": micro_losses, "learned": learned,
                   "mean_of_means": sum(micro_losses) / K, "model": "dev/test/fixtures/hf/gqa"}, f, indent=1)
        f.write("\n")
    for name in ("tokens.npy", "labels.npy", "grads.safetensors", "expected.json"):
        os.replace(tmp + "_" + name, os.path.join(args.out, name))
    print(f"{args.out}: step loss {step_loss:.6f} over {total} learned targets (mean of the micro-batches' means "
          f"{sum(micro_losses) / K:.6f}); {len(grads)} gradient tensors")


if __name__ == "__main__":
    main()
