"""Writes a train shard of random documents, for timing -doc_mask (dev/results/doc_mask/design.md,
"Measurement"): each document is the document-start id (BOS) followed by random other ids, its length
drawn uniformly from 1 .. 2 * mean_len - 1, so a packed row of T tokens holds about T / mean_len
documents (and starts mid-document). Random ids teach nothing: the shard is for speed runs, not for
training.

    python3 dev/data/synthetic_documents.py --out data/docs1000_train.bin --tokens 4000000 --vocab 32000 --bos 1 --mean_len 1000

--vocab and --bos are the model's: Llama 2's 32000 and 1 match -e llama2-7b with the decode table
dev/data/tinyshakespeare/llama2_tokenizer.bin (whose document-start id -doc_mask 1 reads).
"""
import argparse
import importlib.util
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats
from llama_fp8.formats import FormatError

with formats.required_packages():
    import numpy as np


def documents(tokens, vocab, bos, mean_len, seed):
    """`tokens` ids: documents of uniform random lengths in [1, 2 mean_len - 1], each its BOS then ids
    drawn uniformly from the vocabulary without the BOS; the last one cut off at `tokens`."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab - 1, size=tokens, dtype=np.int64)
    ids += ids >= bos  # skip the BOS id: every other id equally likely
    lengths = rng.integers(1, 2 * mean_len, size=2 * (tokens // mean_len) + 16)  # about twice the tokens
    while lengths.sum() < tokens:  # too few only by a rare draw: more documents
        lengths = np.concatenate([lengths, rng.integers(1, 2 * mean_len, size=lengths.size)])
    starts = np.cumsum(lengths) - lengths
    ids[starts[starts < tokens]] = bos
    return ids


@formats.tool_main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="python3 dev/data/synthetic_documents.py --out SHARD.bin [--tokens N] [--vocab V] [--bos ID]"
                                      " [--mean_len L] [--seed S] [--force]")
    p.add_argument("--out", required=True, help="the token shard to write")
    p.add_argument("--tokens", type=int, default=4_000_000, help="tokens in the shard (default 4,000,000)")
    p.add_argument("--vocab", type=int, default=32000, help="vocabulary size: ids are drawn from [0, vocab) (default 32000)")
    p.add_argument("--bos", type=int, default=1, help="the document-start id (default 1, Llama 2's BOS)")
    p.add_argument("--mean_len", type=int, default=1000, help="mean document length in tokens (default 1000)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args(argv)
    if args.tokens < 1 or args.tokens >= 2**32:
        p.error("--tokens must be in [1, 2^32)")
    if args.vocab < 2:
        p.error("--vocab must be at least 2 (the BOS and one other id)")
    if not 0 <= args.bos < args.vocab:
        p.error(f"--bos {args.bos} is outside the vocabulary [0, {args.vocab})")
    if args.mean_len < 1:
        p.error("--mean_len must be at least 1")
    if not args.force and os.path.exists(args.out):
        raise FormatError(args.out, "exists; pass --force to replace it")
    ids = documents(args.tokens, args.vocab, args.bos, args.mean_len, args.seed)
    formats.write_shard(args.out, ids, formats.shard_dtype(args.vocab - 1))
    docs = int((ids == args.bos).sum())
    print(f"{args.tokens:,} tokens, {docs:,} documents (mean length {args.tokens / docs:.0f}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
