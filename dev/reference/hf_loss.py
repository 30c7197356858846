"""transformers' own loss on our val batches, the reference for train_llama_fp8 -x 0 on a model
imported with scripts/hf_import.py (README, "Fine-tune a Hugging Face model").

The batches are the trainer's: batch k of a B x T evaluation is the B*T+1 tokens of the shard from
k*B*T on, inputs the first B*T as B rows of T, targets the same shifted by one. The loss is the mean
cross-entropy over every target of the first --batches batches, in fp32 and in bf16 (the model's
weights and arithmetic in bfloat16): their difference is the size of bf16 noise on this model.

    python3 dev/reference/hf_loss.py MODEL_DIR VAL.bin -b 4 -t 1024 --batches 8 [--gguf FILE] [--generate 64] [--device cpu]
"""
import argparse
import importlib.util
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from llama_fp8 import formats  # the shard reader every tool shares


def batches(tokens, B, T, n):
    need = n * B * T + 1
    if len(tokens) < need:
        sys.exit(f"error: the shard has {len(tokens)} tokens, {n} batches of {B} x {T} need {need}")
    for k in range(n):
        buf = torch.from_numpy(tokens[k * B * T: k * B * T + B * T + 1].astype(np.int64))
        yield buf[:-1].view(B, T), buf[1:].view(B, T)


@torch.no_grad()
def mean_loss(model, tokens, B, T, n, device):
    total, count = 0.0, 0
    for x, y in batches(tokens, B, T, n):
        logits = model(x.to(device)).logits.float()
        loss = torch.nn.functional.cross_entropy(logits.view(-1, logits.size(-1)), y.to(device).view(-1), reduction="sum")
        total += loss.item()
        count += y.numel()
    return total / count


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="a Hugging Face model folder (or the folder of --gguf)")
    ap.add_argument("val", help="a token shard (dev/data/tokenize_text.py)")
    ap.add_argument("-b", type=int, default=4)
    ap.add_argument("-t", type=int, default=1024)
    ap.add_argument("--batches", type=int, default=8)
    ap.add_argument("--gguf", help="load this GGUF file of the folder instead")
    ap.add_argument("--generate", type=int, default=0, help="then print this many greedily generated tokens")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu",
                    help="where transformers runs: cuda, cpu, cuda:1, ... (default: cuda if a GPU answers, else cpu)")
    a = ap.parse_args()
    tokens = formats.read_shard(a.val)
    kw = {"gguf_file": a.gguf} if a.gguf else {}
    for dtype in (torch.float32, torch.bfloat16):
        model = AutoModelForCausalLM.from_pretrained(a.model, dtype=dtype, **kw).to(a.device).eval()
        loss = mean_loss(model, tokens, a.b, a.t, a.batches, a.device)
        print(f"transformers {str(dtype).replace('torch.', '')} val loss {loss:.6f} over {a.batches} batches of {a.b} x {a.t} tokens")
    if a.generate:
        tok = AutoTokenizer.from_pretrained(a.model, **kw)
        prompt = tok("The old house stood", return_tensors="pt").input_ids.to(a.device)
        out = model.generate(prompt, max_new_tokens=a.generate, do_sample=False)
        print("transformers generates:", tok.decode(out[0]))


if __name__ == "__main__":
    main()
