"""CPU check that llama_fp8/model_flops.py (benchmark.sh's, bench_torch.py's and bench_hf.py's model
FLOPs) gives what the trainer's llmc/mfu.h gives: dev/test/tools/model_flops.c, built here with gcc,
prints the C parameter count and model_flops_per_token for every preset of llmc/llama_config.h (MHA,
GQA, tied) and odd shapes (MQA, one layer, tied and untied), at several T; the Python values must be
equal to the last bit. The presets are listed in more places, which must agree with llama_config.h:
dev/reference/bench_torch.py's table (read as text, so no torch is needed here: every preset without
RoPE scaling, each with llama_config.h's V L C NH NKV FF rope_theta max_T tied) and the trainer's -e
help text and unknown-preset message (every name of PRESETS below, no other).
Last line: "N passed, N failed".

    python3 dev/test/test_model_flops.py
"""
import ast
import os
import re
import subprocess
import sys
import tempfile

from checks import check, summary  # dev/test/checks.py
from llama_fp8 import model_flops

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

PRESETS = ["tiny", "125m", "1b", "llama2-7b", "llama3-8b", "llama3.1-8b", "llama3.2-1b", "smollm2-135m"]
SHAPES = ["32000,2,64,4,1,96,0", "32000,2,64,4,1,96,1", "50257,1,96,6,3,250,0", "7,3,16,2,2,5,1"]  # V,L,C,NH,NKV,FF,tied
TS = [1, 128, 1024, 4096, 8192]


def main(tmp):
    exe = os.path.join(tmp, "model_flops")
    build = subprocess.run(["gcc", "-O2", "-Wall", "-Wno-unused-function", "-I.", "dev/test/tools/model_flops.c", "-o", exe],
                           cwd=ROOT, capture_output=True, text=True)
    if not check(build.returncode == 0 and not build.stderr, f"build dev/test/tools/model_flops.c{build.stderr}"):
        return
    seen_tied = False
    for T in TS:
        p = subprocess.run([exe, str(T)] + PRESETS + SHAPES, capture_output=True, text=True)
        lines = p.stdout.split("\n")[:-1]
        if not check(p.returncode == 0 and len(lines) == len(PRESETS + SHAPES), f"T {T}: the C program answers ({p.stderr.strip()})"):
            continue
        bad = []
        for name, line in zip(PRESETS + SHAPES, lines):
            f = line.split()
            V, L, C, NH, NKV, FF, tied, t, params = map(int, f[:9])
            c_flops = float(f[9])
            seen_tied |= tied == 1
            py_params = model_flops.num_params(V, L, C, NH, NKV, FF, tied == 1)
            py_flops = model_flops.flops_per_token(V, L, C, NH, NKV, FF, t, tied == 1)
            if py_params != params or py_flops != c_flops:
                bad.append(f"{name}: params {py_params} vs C {params}, FLOPs {py_flops!r} vs C {c_flops!r}")
        check(not bad, f"T {T}: Python = C for {len(lines)} configs (presets and odd shapes)" + ("; " + "; ".join(bad) if bad else ""))
    check(seen_tied, "a tied config was among them (llama3.2-1b, smollm2-135m)")
    check_preset_lists(exe)
    # an anchor that does not come from either implementation: docs/baselines.md's Llama-2-7B row is what
    # PyTorch's bench_torch.py logged on the H200 (dev/test/fixtures/bench/torch-bf16.log, flops_tok=4.286529e+10)
    got = model_flops.flops_per_token(32000, 32, 4096, 32, 32, 11008, 4096)
    check(f"{got:.6e}" == "4.286529e+10", f"llama2-7b at T 4096: {got:.6e} FLOPs per token (the logged 4.286529e+10)")


def check_preset_lists(exe):
    """bench_torch.py's PRESETS and the trainer's preset names against llama_config.h's presets."""
    p = subprocess.run([exe, "1024"] + PRESETS, capture_output=True, text=True)
    c_presets = {}
    for name, line in zip(PRESETS, p.stdout.split("\n")):
        f = line.split()
        V, L, C, NH, NKV, FF, tied = map(int, f[:7])
        c_presets[name] = dict(dims=(V, L, C, NH, NKV, FF, float(f[10]), int(f[11]), tied), scaled=int(f[12]) != 0)
    if not check(p.returncode == 0 and len(c_presets) == len(PRESETS), f"the C program knows every preset of PRESETS ({p.stderr.strip()})"):
        return
    src = open(os.path.join(ROOT, "dev", "reference", "bench_torch.py")).read()
    m = re.search(r"^PRESETS = (\{.*?^\})", src, re.M | re.S)
    table = ast.literal_eval(m.group(1)) if m else {}
    bad = [f"{n}: {tuple(table[n])} vs C {c_presets[n]['dims'] if n in c_presets else 'no such preset'}"
           for n in table if n not in c_presets or tuple(table[n]) != c_presets[n]["dims"]]
    bad += [f"{n}: missing" for n, c in c_presets.items() if not c["scaled"] and n not in table]
    check(table and not bad, f"bench_torch.py's PRESETS ({len(table)}) = llama_config.h's presets without RoPE scaling"
          + ("; " + "; ".join(bad) if bad else ""))
    trainer = open(os.path.join(ROOT, "train_llama_fp8.cu")).read()
    for what, pattern in (("-e help text", r'"model preset: ([^(]+?) \('), ("unknown-preset message", r"unknown model preset '%s' \(([^)]+)\)")):
        m = re.search(pattern, trainer)
        names = [n.strip() for n in m.group(1).split(",")] if m else None
        check(names == PRESETS, f"train_llama_fp8.cu's {what} lists the presets {PRESETS} (it lists {names})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        main(tmp)
    sys.exit(summary())
