"""Writes the shard-record fixture of dev/test/test_data.h (test_cpu): decode tables and token shards
written by llama_fp8/formats.py, so that the C side's tokenizer fingerprint (llmc/tokenizer.h) and
shard record (llmc/dataloader.h) are held to the Python writer's.

    python3 dev/reference/make_data_fixture.py --out dev/test/fixtures/data

Needs numpy. Run once, commit the output (the same bytes on every run). Writes
  OUT/tok.bin          a decode table of 300 pieces: id 0 empty, ASCII, non-ASCII UTF-8 (some split
                       over two tokens), the bytes 0x80-0xff alone, a 255-byte piece, the last id (299)
                       non-empty
  OUT/tok_padded.bin   the same pieces and 20 empty ones after them (as hf_import pads a table to a
                       model's vocabulary): the same fingerprint
  OUT/other_tok.bin    the same but one byte of piece 150 changed: another fingerprint
  OUT/train_000.bin    tok.bin's train shard: every id 0..299 in turn, 600 tokens (16-bit)
  OUT/val.bin          its val shard: 300 tokens
  OUT/other_000.bin    a train shard of other_tok.bin
"""
import argparse
import importlib.util
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

import numpy as np

from llama_fp8 import formats  # the shard and decode table writers every tool shares

VOCAB = 300


def pieces():
    p = [b""]
    p += [bytes([c]) for c in range(0x20, 0x7f)]                                   # 1..95: printable ASCII
    p += ["é".encode(), "—".encode(), "日本".encode(), "ß".encode()[:1], "ß".encode()[1:]]  # non-ASCII, split
    p += [bytes([b]) for b in range(0x80, 0x100)]                                   # single high bytes
    p += [b"x" * 255]
    while len(p) < VOCAB - 1:
        p.append(f" tok{len(p)}".encode())
    p.append(" last".encode())  # id V-1
    return p


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="python3 dev/reference/make_data_fixture.py --out dev/test/fixtures/data")
    ap.add_argument("--out", required=True)
    out = ap.parse_args().out
    os.makedirs(out, exist_ok=True)
    tok = pieces()
    other = list(tok)
    other[150] = other[150][:-1] + bytes([other[150][-1] ^ 1])
    formats.write_decode_table(os.path.join(out, "tok.bin"), tok, 1)
    formats.write_decode_table(os.path.join(out, "tok_padded.bin"), tok + [b""] * 20, 1)
    formats.write_decode_table(os.path.join(out, "other_tok.bin"), other, 1)
    ids = np.arange(2 * VOCAB) % VOCAB
    formats.write_shard(os.path.join(out, "train_000.bin"), ids, tokenizer=tok, role="train")
    formats.write_shard(os.path.join(out, "val.bin"), ids[:VOCAB], tokenizer=tok, role="val")
    formats.write_shard(os.path.join(out, "other_000.bin"), ids, tokenizer=other, role="train")


if __name__ == "__main__":
    main()
