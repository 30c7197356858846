"""Writes the HellaSwag fixture of dev/test/test_hellaswag.py: synthetic items in HellaSwag's 6-line
layout (no HellaSwag text: contexts and endings are TinyShakespeare lines, from the repository's val
shard) and what transformers makes of them with the tied fixture of dev/test/fixtures/hf (a
byte-level BPE tokenizer, a random tiny LlamaForCausalLM): the tokens and the log-probabilities the
test holds our script, the C reference scorer and the trainer's host side to.

    python3 dev/reference/make_hellaswag_fixture.py --out dev/test/fixtures/hellaswag

Needs torch, transformers, tokenizers and numpy (CPU); run once, commit the output (the same bytes on
every run: seeded, one thread). Independent of our code on purpose: the tokens come from
transformers' tokenizer, split as lm-eval's HFLM._encode_pair splits context and continuation
(" " + ending: the whole text encoded, the continuation's tokens what follows the context's), and
the log-probabilities from transformers' model in float32 (eager attention), as lm-eval's
loglikelihood computes them: log_softmax of the logits at the continuation's positions, summed. Writes
  OUT/items.txt      the items (activity label: context / label / 4 endings)
  OUT/expected.json  per item: label, context and ending token ids, the endings' lengths in
                     characters, logprob (the whole row) and logprob_T<T_SMALL> (the row cut to its
                     last T_SMALL + 1 tokens, as lm-eval truncates a row longer than the model's context)
"""
import argparse
import importlib.util
import json
import os
import random
import re
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

import numpy as np
import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from llama_fp8 import formats  # noqa: E402  (only to read the repository's TinyShakespeare shard)

MODEL = os.path.join(ROOT, "dev", "test", "fixtures", "hf", "tied")
ITEMS = 40
T_SMALL = 32
SEED = 32


def shakespeare_text():
    data = os.path.join(ROOT, "dev", "data", "tinyshakespeare")
    pieces, _ = formats.read_decode_table(os.path.join(data, "llama2_tokenizer.bin"))
    return b"".join(pieces[i] for i in formats.read_shard(os.path.join(data, "tinyshakespeare_llama2_val.bin"))).decode("utf-8")


def synthetic_items(rng):
    """(activity label, context, label, endings): a speaker's name as the label, one or two lines of
    the play as the context, four short lines as the endings."""
    text = shakespeare_text()
    speakers = sorted(set(re.findall(r"([A-Z][a-z]+(?: [A-Z][a-z]+)?):\n", text)))
    lines = [line.strip() for line in text.split("\n")]
    speech = [l for l in lines if not l.endswith(":") and 20 <= len(l) <= 80]
    short = [l.rstrip(".,;:!?").lower() + "." for l in speech if len(l) <= 30]
    items = []
    for _ in range(ITEMS):
        ctx = " ".join(rng.sample(speech, rng.choice([1, 2])))
        items.append((rng.choice(speakers), ctx, rng.randrange(4), rng.sample(short, 4)))
    return items


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="example: python3 dev/reference/make_hellaswag_fixture.py --out dev/test/fixtures/hellaswag")
    parser.add_argument("--out", required=True, help="folder to write items.txt and expected.json into")
    args = parser.parse_args()
    torch.set_num_threads(1)  # deterministic sums
    os.makedirs(args.out, exist_ok=True)
    items = synthetic_items(random.Random(SEED))
    with open(os.path.join(args.out, "items.txt"), "w", encoding="utf-8") as f:
        for activity, ctx, label, endings in items:
            f.write(f"{activity}: {ctx}\n{label}\n" + "".join(e + "\n" for e in endings))

    tok = PreTrainedTokenizerFast.from_pretrained(MODEL)
    model = LlamaForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager").eval()
    encode = lambda s: tok(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    out = []
    for activity, ctx, label, endings in items:
        query = f"{activity}: {ctx}"
        ctx_enc = encode(query)
        rec = {"label": label, "context": ctx_enc, "endings": [], "chars": [len(e) for e in endings],
               "logprob": [], f"logprob_T{T_SMALL}": []}
        for e in endings:
            cont = encode(query + " " + e)[len(ctx_enc):]
            assert 0 < len(cont) <= T_SMALL, (e, cont)
            rec["endings"].append(cont)
            for key, row in (("logprob", ctx_enc + cont), (f"logprob_T{T_SMALL}", (ctx_enc + cont)[-(T_SMALL + 1):])):
                with torch.no_grad():
                    logits = model(torch.tensor([row[:-1]])).logits[0]
                lp = torch.log_softmax(logits, dim=-1)[len(row) - 1 - len(cont):]
                rec[key].append(float(np.sum(lp[torch.arange(len(cont)), torch.tensor(cont)].numpy().astype(np.float64))))
        out.append(rec)
    with open(os.path.join(args.out, "expected.json"), "w") as f:
        json.dump({"model": "dev/test/fixtures/hf/tied", "t_small": T_SMALL, "items": out}, f, indent=None)
        f.write("\n")
    lp = np.array([r["logprob"] for r in out])
    chars = np.array([r["chars"] for r in out])
    ntok = np.array([[len(e) for e in r["endings"]] for r in out])
    labels = np.array([r["label"] for r in out])
    print(f"{args.out}: {len(out)} items; transformers acc {np.mean(lp.argmax(1) == labels):.3f}"
          f" acc_norm {np.mean((lp / chars).argmax(1) == labels):.3f};"
          f" per-token normalization predicts {np.sum((lp / chars).argmax(1) != (lp / ntok).argmax(1))} items differently")


if __name__ == "__main__":
    main()
