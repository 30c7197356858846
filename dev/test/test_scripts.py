"""CPU checks of the scripts' parsers.

- scripts/ncu_step_table.py: the CSVs of a 1-layer and a 2-layer run are built here from known
  per-kernel durations; the script's table must give those durations back.
- scripts/benchmark.sh --table-only: on real logs of H200 runs (dev/test/fixtures/bench/, our bf16
  trainer, PyTorch bf16, our fp8 trainer with bf16 AdamW moments) and nvidia-smi samples built here;
  the table must carry the logs' numbers, the means of the busy samples, and label the run with bf16
  moments as such. Then transformers' rows (bench_hf.py): real CPU logic-check runs of bench_hf.py and
  bench_torch.py on the tied smollm2-135m preset through benchmark.sh (dev/test/fixtures/bench/cpu/;
  no H200 log of bench_hf.py exists yet) and an out-of-memory log built here in bench_hf.py's format:
  the labels, the speedup against transformers bf16 when PyTorch bf16 is absent (and against PyTorch
  bf16 when present), OOM, the tied-embeddings note, and a log of another run flagged as such.
- scripts/compare_convergence.sh --current, with a fake trainer that copies logs written here in the
  trainer's formats (test_trainer_log.py's writers): fp8's fp8.log has the fp8 health fields,
  fp8_current's is an older trainer's. fp8 must get fp8_health.png and a health section in
  summary.md naming the tensors given the most underflow and saturation; fp8_current a note instead.
- scripts/test_mutations.sh's patches (dev/test/mutations/*.patch): each names its bug and the
  command that must catch it, and still applies to this tree (patch --dry-run), so a stale one shows
  here and not first on the GPU.
- scripts/run_tests.sh: copied into a fake tree whose suites pass, fail, crash, print no summary or
  exit non-zero after a clean summary, with a fake nvidia-smi that answers (a "GPU") or not and a
  fake make that builds or fails; the totals and the exit status must be what each case gives.
Last line: "N passed, N failed".

    python3 dev/test/test_scripts.py
"""
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TABLE = os.path.join(ROOT, "scripts", "ncu_step_table.py")
BENCH = os.path.join(ROOT, "scripts", "benchmark.sh")
BENCH_LOGS = os.path.join(ROOT, "dev", "test", "fixtures", "bench")
BENCH_CPU_LOGS = os.path.join(BENCH_LOGS, "cpu")   # CPU runs: smollm2-135m, B 1, T 64, 3 steps after 2
HEADER = ["ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Context", "Stream", "Block Size",
          "Grid Size", "Device", "CC", "Section Name", "Metric Name", "Metric Unit", "Metric Value"]

# (kernel name as ncu prints it, ns per layer, ns outside the layers): calls per layer / outside
# follow from which of the two is non-zero
KERNELS = [
    ("encoder_forward_kernel(int *, const __nv_bfloat16 *)", [], [19000]),
    ("nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_NNT", [1200000, 1300000], []),
    ("void rmsnorm_forward_kernel<1, 1>(__nv_bfloat16 *, float *)", [111000], [31000]),
    ("void fused_classifier_kernel<1>(__nv_bfloat16 *, float *)", [], [268000]),
    ("void adamw_kernel<1, 1>(float *, float *)", [1632000], [2119000]),
]


def step_rows(layers, complete=True):
    """One step's (kernel, ns) rows, starting with encoder_forward; without the optimizer if not complete."""
    rows = []
    for name, per_layer, outside in KERNELS:
        if "adamw" in name and not complete:
            continue
        rows += [(name, ns) for _ in range(layers) for ns in per_layer] + [(name, ns) for ns in outside]
    return rows


def write_csv(path, steps):
    with open(path, "w") as f:
        f.write("==PROF== Connected to process 1\nstep     1/3 | loss 11.1\n")
        f.write(",".join(f'"{h}"' for h in HEADER) + "\n")
        i = 0
        for rows in steps:
            for name, ns in rows:
                vals = [str(i), "1", "train_llama_fp8", "127.0.0.1", name, "1", "7", "(256, 1, 1)", "(132, 1, 1)",
                        "0", "9.0", "Command line profiler metrics", "gpu__time_duration.sum", "ns", f"{ns:,}"]
                f.write(",".join(f'"{v}"' for v in vals) + "\n")
                i += 1


def run_table(layers, csv1, csv2):
    p = subprocess.run([sys.executable, TABLE, "--layers", str(layers), csv1, csv2], capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def table_rows(out):
    """{kernel: (calls per layer, calls outside, ms per layer, ms outside, ms per step)}"""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 8 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (int(cells[2]), int(cells[3]), float(cells[4]), float(cells[5]), float(cells[6]))
    return rows


from checks import check, summary  # noqa: E402  (dev/test/checks.py)
import test_trainer_log as logs  # noqa: E402  (the sample-log writers, in the trainer's formats)


def test_scaling(tmp):
    # step 1 carries plan building and GEMM tuning (extra kernels: must be left out); step 3 is cut off
    # before the optimizer (must be skipped for step 2, the last complete one)
    tuning = [("nvjet_sm90_tuning_candidate_TNT", 5000000)] * 3
    for layers, path in ((1, "L1.csv"), (2, "L2.csv")):
        steps = [step_rows(layers) + tuning, step_rows(layers), step_rows(layers, complete=False)]
        write_csv(os.path.join(tmp, path), steps)
    rc, out, err = run_table(32, os.path.join(tmp, "L1.csv"), os.path.join(tmp, "L2.csv"))
    check(rc == 0, f"table from a 1- and a 2-layer run (exit {rc}: {err.strip()})")
    rows = table_rows(out)
    check("nvjet_sm90_tuning_candidate_TNT" not in rows, "the first step's extra kernels are left out")
    for name, per_layer, outside in KERNELS:
        key = name.split("(")[0].replace("void ", "").strip()
        if key not in rows:
            check(False, f"{key}: missing from the table")
            continue
        cl, co, ml, mo, ms = rows[key]
        want_ml, want_mo = sum(per_layer) / 1e6, sum(outside) / 1e6
        ok = cl == len(per_layer) and co == len(outside) and abs(ml - want_ml) < 1e-3 and abs(mo - want_mo) < 1e-3 \
            and abs(ms - (want_mo + 32 * want_ml)) < 1e-2
        check(ok, f"{key}: {cl}/{co} calls, {ml:.3f}/{mo:.3f} ms, {ms:.2f} ms per step "
                  f"(built from {len(per_layer)}/{len(outside)} calls, {want_ml:.3f}/{want_mo:.3f} ms)")
    total = sum(sum(p) * 32 + sum(o) for _, p, o in KERNELS) / 1e6
    check(f"| all kernels | {total:.1f} |" in out, f"the total is {total:.1f} ms")


def test_refusals(tmp):
    one_step = os.path.join(tmp, "one.csv")
    write_csv(one_step, [step_rows(1)])
    rc, _, err = run_table(32, one_step, one_step)
    check(rc != 0 and "no complete step" in err, f"a run with only the first step is refused ({err.strip()})")
    empty = os.path.join(tmp, "empty.csv")
    with open(empty, "w") as f:
        f.write("==ERROR== the application returned an error code (1)\n")
    rc, _, err = run_table(32, empty, empty)
    check(rc != 0 and "no ncu CSV rows" in err, f"a CSV without rows is refused ({err.strip()})")
    rc, _, err = run_table(0, one_step, one_step)
    check(rc != 0 and "--layers" in err, "--layers 0 is refused")


def write_smi(path, samples):
    """nvidia-smi --format=csv,noheader,nounits lines: (utilization %, SM MHz, W, clock event reasons)"""
    with open(path, "w") as f:
        for i, (util, mhz, watts, reasons) in enumerate(samples):
            f.write(f"2026/11/30 11:23:{i // 4:02d}.{250 * (i % 4):03d}, {util}, {mhz}, {watts:.2f}, 0x{reasons:016x}\n")


def test_benchmark_table(tmp):
    logdir = os.path.join(tmp, "log_bench")
    os.makedirs(logdir)
    for name in ("ours-bf16", "torch-bf16", "ours-fp8-bf16m"):
        shutil.copy(os.path.join(BENCH_LOGS, name + ".log"), logdir)
    # ours: idle start-up samples (left out), then 8 busy ones, 6 of them at the power cap
    idle = [(0, 1980, 121.0, 0x0)] * 5
    busy = [(100, 1410, 696.0, 0x4)] * 6 + [(98, 1980, 520.0, 0x0)] * 2
    write_smi(os.path.join(logdir, "ours-bf16.smi.csv"), idle + busy + idle)
    with open(os.path.join(logdir, "torch-bf16.smi.csv"), "w") as f:
        f.write("Field \"clocks_event_reasons.active\" is not a valid field to query.\n")  # an older driver
    out_md = os.path.join(tmp, "bench.md")
    p = subprocess.run(["bash", BENCH, "--table-only", "--systems", "ours-bf16,torch-bf16,ours-fp8-bf16m", "--logdir", logdir,
                        "--out", out_md], capture_output=True, text=True, env=dict(os.environ, PYTHON=sys.executable))
    check(p.returncode == 0 and os.path.exists(out_md), f"benchmark.sh --table-only (exit {p.returncode}: {p.stderr.strip()[-200:]})")
    if not os.path.exists(out_md):
        return
    rows = {}
    for line in open(out_md):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7:
            rows[cells[0]] = cells
    ours, torch = rows.get("ours bf16 (train_llama_fp8)"), rows.get("PyTorch bf16, torch.compile")
    check(ours is not None and torch is not None, "a row for each system")
    if ours is None or torch is None:
        return
    # the logs: median step line 12942 tok/s, 134.07 GiB allocated, 134.76 GiB in use; RESULT tok_s=12893 ...
    check(ours[1:6] == ["12,942", "555", "134.1", "134.8", "1.00x"], f"our row from our log: {ours[1:6]}")
    check(torch[1:6] == ["12,893", "553", "74.7", "76.5", "1.00x"], f"PyTorch's row from its log: {torch[1:6]}")
    mhz = (6 * 1410 + 2 * 1980) / 8
    want = f"{mhz:,.0f} MHz, {(6 * 696 + 2 * 520) / 8:.0f} W (75% at the power cap)"
    check(ours[6] == want, f"busy clock and power from the samples: '{ours[6]}' (want '{want}')")
    check(torch[6] == "-", f"samples without the fields give '-': '{torch[6]}'")
    # its log: "AdamW moments bf16" in the config line; median step line 20102 tok/s (20102 / 12893 = 1.56x),
    # 104.81 GiB allocated
    bf16m = rows.get("ours fp8, delayed scaling, bf16 AdamW moments (train_llama_fp8)")
    check(bf16m is not None, f"the bf16-moments run labelled as such: rows {sorted(rows)}")
    if bf16m is not None:
        check(bf16m[1:6] == ["20,102", "862", "104.8", "105.5", "1.56x"], f"the bf16-moments row from its log: {bf16m[1:6]}")


def bench_table(logdir, out_md, *args):
    """benchmark.sh --table-only ARGS -> (exit status, stderr, {first cell: row cells}, the table's text)."""
    p = subprocess.run(["bash", BENCH, "--table-only", "--logdir", logdir, "--out", out_md] + list(args),
                       capture_output=True, text=True, env=dict(os.environ, PYTHON=sys.executable))
    text = open(out_md).read() if os.path.exists(out_md) else ""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7:
            rows[cells[0]] = cells
    return p.returncode, p.stderr, rows, text


def test_benchmark_table_hf(tmp):
    logdir = os.path.join(tmp, "log_bench_hf")
    os.makedirs(logdir)
    for name in ("hf-bf16", "torch-bf16"):
        shutil.copy(os.path.join(BENCH_CPU_LOGS, name + ".log"), logdir)
    # what bench_hf.py prints when it runs out of memory (bench_torch.run_and_report), built here
    with open(os.path.join(logdir, "hf-amp.log"), "w") as f:
        f.write("BENCH_CMD python3 -u dev/reference/bench_hf.py --model smollm2-135m --B 1 --T 64 --steps 3 --warmup 2 --weights fp32\n"
                "PyTorch 2.11.0+cu130 | NVIDIA H200 (sm_90) | transformers 5.3.0\n"
                "model smollm2-135m: V 49152 L 30 C 576 NH 9 NKV 3 FF 1536 theta 100000 | tied embeddings | 134.5M params | "
                "B 1 T 64 | transformers 5.3.0 LlamaForCausalLM, sdpa attention | fp32 master weights, gradients and AdamW state, "
                "forward under bf16 autocast | torch.compile\n"
                "OUT OF MEMORY: smollm2-135m transformers, fp32 weights B=1 T=64 does not fit (CUDA out of memory. Tried to allocate "
                "9.00 GiB). Try a smaller --B or --T.\n"
                "RESULT system=hf-amp model=smollm2-135m B=1 T=64 tok_s=OOM tflops=OOM mem_gib=OOM\nBENCH_EXIT 3\n")
    run = ["--model", "smollm2-135m", "--B", "1", "--T", "64", "--steps", "3", "--warmup", "2"]
    hf_label, amp_label, torch_label = ("transformers bf16, torch.compile", "transformers fp32 weights + bf16 autocast, torch.compile",
                                        "PyTorch bf16, torch.compile")
    # without PyTorch bf16 the speedup is against transformers bf16; its log: RESULT tok_s=35 mem_gib=nan
    rc, err, rows, text = bench_table(logdir, os.path.join(tmp, "hf.md"), "--systems", "hf-bf16,hf-amp", *run)
    check(rc == 1 and text, f"benchmark.sh --table-only, transformers bf16 and an OOM: exit 1 ({rc}: {err.strip()[-200:]})")
    hf, amp = rows.get(hf_label), rows.get(amp_label)
    check(hf is not None and amp is not None, f"a row for each transformers system, labelled: rows {sorted(rows)}")
    if hf is None or amp is None:
        return
    check(hf[1:6] == ["35", "0", "-", "-", "1.00x"], f"transformers' row from its log: {hf[1:6]}")
    check(amp[1] == "OOM" and "- hf-amp: OUT OF MEMORY: smollm2-135m" in text, f"the OOM run: '{amp[1]}' and its line under the table")
    check("speedup vs transformers bf16 |" in text, "without PyTorch bf16 the speedup is against transformers bf16")
    check("with tied embeddings the lm_head is the embedding" in text, "a tied model's FLOPs note")
    check("different run" not in text and "differ between systems" not in text, "no note of another run")
    # with PyTorch bf16 (its log: RESULT tok_s=83) the speedup is against it: 35 / 83 = 0.42x
    rc, err, rows, text = bench_table(logdir, os.path.join(tmp, "hf_torch.md"), "--systems", "torch-bf16,hf-bf16", *run)
    hf, torch = rows.get(hf_label), rows.get(torch_label)
    check(rc == 0 and hf is not None and torch is not None, f"PyTorch bf16 and transformers bf16 (exit {rc}: {err.strip()[-200:]})")
    if hf is not None and torch is not None:
        check(torch[1:6] == ["83", "0", "-", "-", "1.00x"] and hf[5] == "0.42x" and "speedup vs PyTorch bf16 |" in text,
              f"speedup against PyTorch bf16: {torch[1:6]}, {hf[5]}")
        check("differ between systems" not in text, "PyTorch and transformers count the same FLOPs per token for the tied model")
    # transformers' smollm2 log beside the llama2-7b logs, tabulated as llama2-7b B 2 T 4096
    for name in ("ours-bf16", "torch-bf16"):
        shutil.copy(os.path.join(BENCH_LOGS, name + ".log"), logdir)
    rc, err, rows, text = bench_table(logdir, os.path.join(tmp, "mixed.md"), "--systems", "ours-bf16,torch-bf16,hf-bf16")
    check("- hf-bf16: its log is for a different run (smollm2-135m, B 1 T 64)" in text and "differ between systems" in text,
          f"a transformers log of another model is flagged (exit {rc})")


CONVERGENCE = os.path.join(ROOT, "scripts", "compare_convergence.sh")


def test_compare_convergence(tmp):
    src = os.path.join(tmp, "conv_logs")
    os.makedirs(src)
    for run, gap in (("bf16", 0.0), ("fp8_delayed", 2e-3), ("fp8_current", 3e-3)):
        with open(os.path.join(src, run + ".main.log"), "w") as f:
            f.write(logs.header_line(run[:4]) + "".join(logs.train_line(s, (10 - 0.2 * s) * (1 + gap)) for s in range(1, 21)))
            f.write(logs.VAL % (20, 6.0 * (1 + gap)))
    most_under, most_sat = (1, "w2", "dy"), (0, "qkv", "x")  # everything else 1e-4 underflow, no saturation
    for run, kind_fmt in (("fp8_delayed", logs.FP8_KIND), ("fp8_current", logs.FP8_KIND_OLD)):
        with open(os.path.join(src, run + ".fp8.log"), "w") as f:
            for step in (10, 20):
                for layer in (0, 1):
                    for linear in ("qkv", "wo", "w13", "w2"):
                        f.write(logs.fp8_line(step, layer, linear, {k: dict(
                            amax=1.0, scale=448.0, under=5e-2 if (layer, linear, k) == most_under else 1e-4,
                            sat=1e-6 * step if (layer, linear, k) == most_sat else 0.0) for k in ("x", "w", "dy")}, kind_fmt))
    trainer = os.path.join(tmp, "fake_trainer")
    with open(trainer, "w") as f:
        f.write(f"""#!/usr/bin/env bash
# copies the run's logs, chosen by -precision and -fp8_recipe, into -o DIR
recipe=
while [ $# -gt 1 ]; do
    case $1 in -o) dir=$2 ;; -precision) precision=$2 ;; -fp8_recipe) recipe=_$2 ;; esac
    shift 2
done
cp {shlex_quote(src)}/$precision$recipe.main.log "$dir/main.log"
[ ! -f {shlex_quote(src)}/$precision$recipe.fp8.log ] || cp {shlex_quote(src)}/$precision$recipe.fp8.log "$dir/fp8.log"
""")
    os.chmod(trainer, 0o755)
    out = os.path.join(tmp, "conv")
    p = subprocess.run(["bash", CONVERGENCE, "--out", out, "--current", "--quiet", "--bin", trainer, "--python", sys.executable,
                        "--", "-x", "20"], capture_output=True, text=True)
    check(p.returncode == 0 and p.stdout.rstrip().endswith("compare_convergence.sh: OK"),
          f"compare_convergence.sh with a fake trainer: OK (exit {p.returncode}; {p.stderr.strip()!r})")
    text = open(os.path.join(out, "summary.md")).read() if os.path.exists(os.path.join(out, "summary.md")) else ""
    fp8 = text.partition("## fp8 health: fp8\n")[2].partition("## ")[0]
    check("- underflow #1: layer 1 w2 dY 5.0e-02 of its values (mean over 2 logged steps; max 5.0e-02 at step 10)" in fp8 and
          "- saturation #1: layer 0 qkv X 1.5e-05 of its values (mean over 2 logged steps; max 2.0e-05 at step 20)" in fp8 and
          "saturation #2" not in fp8, f"summary.md: fp8's health names the tensors of most underflow and saturation ({fp8!r})")
    current = text.partition("## fp8 health: fp8_current\n")[2]
    check("fp8_current/fp8.log has no underflow/saturation fields (written by a trainer before fp8 health counts)" in current,
          f"summary.md: fp8_current's older fp8.log is noted ({current!r})")
    pngs = {name: os.path.exists(os.path.join(out, name)) for name in ("fp8_health.png", "fp8_scales.png", "fp8_current_health.png", "fp8_current_scales.png")}
    if importlib.util.find_spec("matplotlib"):
        check(pngs == {"fp8_health.png": True, "fp8_scales.png": True, "fp8_current_health.png": False, "fp8_current_scales.png": True}
              and "Plots: loss.png, fp8_scales.png, fp8_health.png, fp8_current_scales.png\n" in text,
              f"the health plot for fp8 only, beside the scale plots ({pngs})")
    else:
        check("fp8_health.png" in p.stderr and "fp8_current_health.png" not in p.stderr,
              f"without matplotlib: the health plot of fp8 (only) is among the failed plots ({p.stderr.strip()!r})")


RUNNER = os.path.join(ROOT, "scripts", "run_tests.sh")
# the suites run_tests.sh runs, as paths in the tree (the Python ones are found by its glob)
CPU_SUITES = ["dev/test/test_cpu", "dev/test/test_trainer_host", "dev/test/test_zero_layout"]
PY_SUITES = ["dev/test/test_a.py", "dev/test/test_b.py"]
GPU_SUITES = ["test_llama_fp8", "scripts/test_signal.sh", "scripts/test_hf_gpu.sh"]


def fake_tree(tmp, outcomes, gpu, build_ok=True):
    """A copy of the runner beside fake suites; outcomes maps a suite to (stdout, exit status, signal)."""
    root = tempfile.mkdtemp(dir=tmp)
    for d in ("scripts", "dev/test", "bin"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(RUNNER, os.path.join(root, "scripts"))
    for suite in CPU_SUITES + PY_SUITES + GPU_SUITES:
        text, rc, sig = outcomes.get(suite, ("1 passed, 0 failed", 0, None))
        path = os.path.join(root, suite)
        if suite.endswith(".py"):
            body = f"import os, signal, sys\nprint({text!r})\nsys.stdout.flush()\n"
            body += f"os.kill(os.getpid(), signal.{sig})\n" if sig else f"sys.exit({rc})\n"
        else:
            body = f"#!/bin/sh\nprintf '%s\\n' {shlex_quote(text)}\n" + (f"kill -{sig} $$\n" if sig else f"exit {rc}\n")
        with open(path, "w") as f:
            f.write(body)
        os.chmod(path, 0o755)
    tools = {"nvidia-smi": "exit 0" if gpu else "exit 9", "make": "exit 0" if build_ok else "echo 'nvcc: error' >&2; exit 2"}
    for name, body in tools.items():
        path = os.path.join(root, "bin", name)
        with open(path, "w") as f:
            f.write(f"#!/bin/sh\n{body}\n")
        os.chmod(path, 0o755)
    return root


def shlex_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def run_runner(root):
    env = dict(os.environ, PATH=os.path.join(root, "bin") + os.pathsep + os.environ["PATH"])
    p = subprocess.run(["bash", os.path.join(root, "scripts", "run_tests.sh")], capture_output=True, text=True, env=env)
    lines = p.stdout.strip().splitlines()
    return p.returncode, lines[-1] if lines else ""


def test_runner(tmp):
    n_cpu = len(CPU_SUITES) + len(PY_SUITES)
    cases = [  # (what, outcomes, gpu, build ok, want passed, want failed)
        ("every suite passes, no GPU", {}, False, True, n_cpu, 0),
        ("every suite passes, GPU suites included", {}, True, True, n_cpu + len(GPU_SUITES), 0),
        ("a CPU suite with failures", {"dev/test/test_cpu": ("7 passed, 2 failed", 1, None)}, False, True, n_cpu - 1 + 7, 2),
        ("a suite crashing before its summary", {"dev/test/test_trainer_host": ("ok half of it", 0, "SEGV")}, False, True, n_cpu - 1, 1),
        ("a Python suite printing no summary", {"dev/test/test_b.py": ("no summary here", 0, None)}, False, True, n_cpu - 1, 1),
        ("a suite exiting 3 after '4 passed, 0 failed'", {"dev/test/test_zero_layout": ("4 passed, 0 failed", 3, None)},
         False, True, n_cpu - 1 + 4, 1),
        ("the GPU suite failing", {"test_llama_fp8": ("10 passed, 1 failed", 1, None)}, True, True, n_cpu + 10 + len(GPU_SUITES) - 1, 1),
        ("the GPU suite killed", {"test_llama_fp8": ("", 0, "KILL")}, True, True, n_cpu + len(GPU_SUITES) - 1, 1),
        ("the GPU build failing", {}, True, False, n_cpu, 1),
        ("no GPU: the GPU suites are not run", {"test_llama_fp8": ("0 passed, 5 failed", 1, None)}, False, True, n_cpu, 0),
    ]
    for what, outcomes, gpu, build_ok, want_p, want_f in cases:
        rc, last = run_runner(fake_tree(tmp, outcomes, gpu, build_ok))
        want = f"{want_p} passed, {want_f} failed"
        check(last == want and (rc == 0) == (want_f == 0), f"run_tests.sh, {what}: '{last}', exit {rc} (want '{want}', exit {'0' if want_f == 0 else 'non-zero'})")


def test_mutation_patches():
    d = os.path.join(ROOT, "dev", "test", "mutations")
    patches = sorted(f for f in os.listdir(d) if f.endswith(".patch"))
    check(len(patches) > 0, "dev/test/mutations has patches")
    for name in patches:
        path = os.path.join(d, name)
        text = open(path).read()
        named = text.startswith("Mutation: ") and "\nCaught by: " in text
        r = subprocess.run(["patch", "-p1", "--dry-run", "-s", "-f", "-i", path], cwd=ROOT, capture_output=True, text=True)
        check(named and r.returncode == 0, f"mutation {name}: names its bug and its test, applies to the tree ({(r.stdout + r.stderr).strip()[:200]})")


if __name__ == "__main__":
    test_mutation_patches()
    with tempfile.TemporaryDirectory() as tmp:
        test_scaling(tmp)
        test_refusals(tmp)
        test_benchmark_table(tmp)
        test_benchmark_table_hf(tmp)
        test_compare_convergence(tmp)
        test_runner(tmp)
    sys.exit(summary())
