"""dev/data/synthetic_documents.py, the shard of random documents the -doc_mask speed runs read
(dev/results/doc_mask/design.md, "Measurement"): run as a program into a temporary folder and read
back with llama_fp8.formats. The shard must hold the tokens asked for, 16-bit for a vocabulary that
fits; begin with the BOS; have BOS only at document starts, documents of lengths in [1, 2 mean - 1]
(the last one cut off), about tokens / mean of them; draw the other ids from the whole vocabulary but
the BOS (the largest id and 0 appear); give the same bytes for the same seed and others for another
seed; and with --mean_len 1 be all BOS. Last line: "N passed, N failed".

    python3 dev/test/test_synthetic_documents.py
"""
import os
import shutil
import subprocess
import sys
import tempfile

from checks import ROOT, check, summary  # dev/test/checks.py
from llama_fp8 import formats

import numpy as np

TMP = tempfile.mkdtemp(prefix="test_synthetic_documents_")


def make(name, *args):
    out = os.path.join(TMP, name)
    p = subprocess.run([sys.executable, "dev/data/synthetic_documents.py", "--out", out] + list(args), cwd=ROOT,
                       capture_output=True, text=True)
    check(p.returncode == 0, f"synthetic_documents.py {' '.join(args)}: exit {p.returncode} {p.stderr.strip()[-300:]}")
    return formats.read_shard(out) if p.returncode == 0 else np.zeros(0, dtype=np.uint16), out


try:
    tokens, vocab, bos, mean = 200_000, 500, 7, 100
    ids, first = make("a.bin", "--tokens", str(tokens), "--vocab", str(vocab), "--bos", str(bos), "--mean_len", str(mean), "--seed", "3")
    check(ids.size == tokens and ids.dtype == np.uint16, f"{ids.size} tokens of {ids.dtype}, want {tokens} of uint16")
    check(ids.size > 0 and ids[0] == bos, "the shard begins with the BOS")
    starts = np.flatnonzero(ids == bos)
    lengths = np.diff(starts)  # every document's but the last, which the shard cuts off
    check(lengths.size > 0 and lengths.min() >= 1 and lengths.max() <= 2 * mean - 1,
          f"document lengths {lengths.min() if lengths.size else '-'}..{lengths.max() if lengths.size else '-'}, want within [1, {2 * mean - 1}]")
    # uniform lengths: sd (2 mean - 1) / sqrt(12) = 58 over ~2000 documents, so the mean is within ~1.3
    # of 100 (a BOS drawn among the other ids would make it ~83)
    check(abs(tokens / starts.size - mean) < 5, f"{starts.size} documents, mean length {tokens / starts.size:.1f}, want {mean} +- 5")
    others = ids[ids != bos]
    check(others.max() == vocab - 1 and others.min() == 0, f"the other ids span {others.min()}..{others.max()}, want 0..{vocab - 1}")
    again, _ = make("b.bin", "--tokens", str(tokens), "--vocab", str(vocab), "--bos", str(bos), "--mean_len", str(mean), "--seed", "3")
    other, _ = make("c.bin", "--tokens", str(tokens), "--vocab", str(vocab), "--bos", str(bos), "--mean_len", str(mean), "--seed", "4")
    check(np.array_equal(ids, again) and not np.array_equal(ids, other), "the same seed gives the same shard, another seed another")
    ones, _ = make("d.bin", "--tokens", "1000", "--vocab", "70000", "--bos", "5", "--mean_len", "1")
    check(ones.size == 1000 and ones.dtype == np.uint32 and np.all(ones == 5), "--mean_len 1: every token a BOS, a 32-bit shard for 70000 ids")
finally:
    shutil.rmtree(TMP)
sys.exit(summary())
