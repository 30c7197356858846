"""
Does transformers load our export, and compute what we compute? Loads OUT_DIR (written by
scripts/hf_export.py) with AutoModelForCausalLM (no missing, unexpected or mismatched weights
allowed), runs it in fp32 on fixed random tokens, and compares its logits with the C reference's
(dev/test/tools/ref_logits) on the model file that was exported. Used by dev/test/test_hf_gpu.sh on
a model the trainer has trained a few steps.

usage: python3 dev/reference/check_export.py MODEL.bin OUT_DIR REF_LOGITS_BINARY
Prints the comparison; exit 0 if it holds, 1 if not.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
from transformers import AutoModelForCausalLM

# Both sides compute in fp32 from the same fp32 weights: accumulation order and the C reference's
# double sums, ~1e-6 of the largest logit (dev/test/test_hf.py measured 0.6e-6 to 1.5e-6 on the
# fixtures); a layout or RoPE error moves logits by 1e-1 and more.
LOGITS_TOL = 1e-5


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 usage="python3 dev/reference/check_export.py run/model_00000003.bin hf_out ./ref_logits")
    ap.add_argument("model")
    ap.add_argument("out_dir")
    ap.add_argument("ref_logits")
    a = ap.parse_args()
    for path in (a.model, a.ref_logits, os.path.join(a.out_dir, "config.json")):
        if not os.path.exists(path):
            print(f"error: {path}: no such file", file=sys.stderr)
            return 1
    try:
        hf, info = AutoModelForCausalLM.from_pretrained(a.out_dir, torch_dtype=torch.float32, output_loading_info=True)
    except (OSError, ValueError) as e:
        print(f"error: {a.out_dir}: transformers cannot load it: {e}", file=sys.stderr)
        return 1
    problems = {k: v for k, v in info.items() if v}
    if problems:
        print(f"FAIL transformers loading {a.out_dir}: {problems}")
        return 1
    B, T, V = 2, 64, hf.config.vocab_size
    tokens = np.random.default_rng(0).integers(0, V, size=(B, T), dtype=np.int32)
    with torch.no_grad():
        theirs = hf(torch.from_numpy(tokens.astype(np.int64))).logits.float().numpy().reshape(-1)
    with tempfile.TemporaryDirectory() as tmp:
        tok_path, out_path = os.path.join(tmp, "tokens.i32"), os.path.join(tmp, "logits.f32")
        tokens.tofile(tok_path)
        run = subprocess.run([a.ref_logits, a.model, tok_path, out_path, str(B)], capture_output=True, text=True)
        if run.returncode != 0:
            print(f"error: {a.model}: the C reference failed on it: {run.stderr.strip()}", file=sys.stderr)
            return 1
        ours = np.fromfile(out_path, dtype=np.float32)
    err = float(np.abs(ours - theirs).max() / np.abs(ours).max())
    ok = err < LOGITS_TOL
    print(f"{'ok  ' if ok else 'FAIL'} transformers' logits of {a.out_dir} vs the C reference's of {a.model}: "
          f"max|diff|/max|ref| = {err:.2g} (tol {LOGITS_TOL:g})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
