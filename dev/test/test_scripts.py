"""CPU checks of the scripts' parsers.

- scripts/ncu_step_table.py: the CSVs of a 1-layer and a 2-layer run are built here from known
  per-kernel durations; the script's table must give those durations back.
- scripts/benchmark.sh --table-only: on real logs of H200 runs (dev/test/fixtures/bench/, our bf16
  trainer from before -adam_moments, PyTorch bf16, our fp8 trainer with bf16 AdamW moments) and
  nvidia-smi samples built here; the table must carry the logs' numbers, the means of the busy
  samples, and label each run of ours by the moments its log reports, whatever its system name asked
  for: fp32 ones named (a log without the field is fp32), bf16 ones (the default) not. Then transformers' rows (bench_hf.py): real CPU logic-check runs of bench_hf.py and
  bench_torch.py on the tied smollm2-135m preset through benchmark.sh (dev/test/fixtures/bench/cpu/;
  no H200 log of bench_hf.py exists yet) and an out-of-memory log built here in bench_hf.py's format:
  the labels, the speedup against transformers bf16 when PyTorch bf16 is absent (and against PyTorch
  bf16 when present), OOM, the tied-embeddings note, and a log of another run flagged as such.
- scripts/benchmark.sh run with a Python that lacks llama_fp8 (-S -E): exit 2 naming that Python and
  make venv before any system runs. --accum N: bench_torch.py (a stand-in recording its arguments) gets
  --accum N, the table's header says N micro-steps, and a log of another accumulation is flagged.
  Our runs labelled by the grain and master weights their logs report (the H100 logs of dev/results).
- scripts/compare_convergence.sh --current, with a fake trainer that copies logs written here in the
  trainer's formats (test_trainer_log.py's writers): fp8's fp8.log has the fp8 health fields,
  fp8_current's is an older trainer's. fp8 must get fp8_health.png and a health section in
  summary.md naming the tensors given the most underflow and saturation; fp8_current a note instead.
- scripts/convergence_seeds.sh with a fake trainer whose final val loss depends on -seed, -precision
  and -adam_moments (bf16 unless given, as the trainer's; logs in the trainer's formats,
  test_trainer_log.py's writers): 4 seeds with the default bf16 moments, then -adam_moments fp32 with
  --compare against them and seed 2's fp8 run crashing (exit 3, the row says so, means over 3 seeds),
  mended by --skip-existing (only that run again). The table's
  numbers (per seed, means, sample sd, spread, against the other run) are worked out here from the
  values written; the trainer must get the flags exactly (a glob, a space) plus -seed N; the refusals
  (exit 2, nothing trains), and missing or val-less logs named as such. On the real logs of
  dev/results/conv125m_gutenberg, convergence_seeds.py must give the numbers of its hand-made seeds.md.
- dev/test/test_mutations.sh's patches (dev/test/mutations/*.patch): each names its bug and the
  command that must catch it, and still applies to this tree (patch --dry-run), so a stale one shows
  here and not first on the GPU.
- dev/test/run_tests.sh: copied into a fake tree whose suites pass, fail, crash, print no summary or
  exit non-zero after a clean summary, with a fake nvidia-smi that answers (a "GPU") or not and a
  fake make that builds or fails; the totals and the exit status must be what each case gives. Its
  Python suites must import the fake tree's llama_fp8, and test_mutations.sh's a mutant's.
- The llama_fp8 package: every tool importing it and every Python suite, run by a Python without it,
  exits 1 saying to run make venv and use .venv/bin/python3; scripts/venv.sh installs it editable
  (with this pyproject.toml, in a tree of its own); make venv reinstalls when pyproject.toml changes.
- The indexes: scripts/README.md has a row for every file of scripts/, dev/test/README.md for every
  test driver (dev/test/*.sh), dev/results/README.md for every folder and file of dev/results/.
- dev/data/get_data.sh, offline from a local source folder: a source missing files (one of them cut
  off in the destination), one short and one altered must exit 1 naming each, putting nothing in
  place; with ../shared/data, every .bin there is listed and copied byte for byte, and a rerun mends
  a truncated and a deleted copy.
Last line: "N passed, N failed".

    python3 dev/test/test_scripts.py
"""
import filecmp
import importlib.util
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

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
    for name in ("ours-bf16", "torch-bf16"):
        shutil.copy(os.path.join(BENCH_LOGS, name + ".log"), logdir)
    shutil.copy(os.path.join(BENCH_LOGS, "ours-fp8-bf16m.log"), os.path.join(logdir, "ours-fp8.log"))  # bf16 moments: now the default
    # ours: idle start-up samples (left out), then 8 busy ones, 6 of them at the power cap
    idle = [(0, 1980, 121.0, 0x0)] * 5
    busy = [(100, 1410, 696.0, 0x4)] * 6 + [(98, 1980, 520.0, 0x0)] * 2
    write_smi(os.path.join(logdir, "ours-bf16.smi.csv"), idle + busy + idle)
    with open(os.path.join(logdir, "torch-bf16.smi.csv"), "w") as f:
        f.write("Field \"clocks_event_reasons.active\" is not a valid field to query.\n")  # an older driver
    out_md = os.path.join(tmp, "bench.md")
    p = subprocess.run(["bash", BENCH, "--table-only", "--systems", "ours-bf16,torch-bf16,ours-fp8", "--logdir", logdir,
                        "--out", out_md], capture_output=True, text=True, env=dict(os.environ, PYTHON=sys.executable))
    check(p.returncode == 0 and os.path.exists(out_md), f"benchmark.sh --table-only (exit {p.returncode}: {p.stderr.strip()[-200:]})")
    if not os.path.exists(out_md):
        return
    rows = {}
    for line in open(out_md):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 7:
            rows[cells[0]] = cells
    # ours-bf16's log is of a trainer before -adam_moments (no such field in its batch line): fp32 moments
    ours, torch = rows.get("ours bf16, fp32 AdamW moments (train_llama_fp8)"), rows.get("PyTorch bf16, torch.compile")
    check(ours is not None and torch is not None, f"a row for each system, the old trainer's labelled fp32 moments: rows {sorted(rows)}")
    if ours is None or torch is None:
        return
    # the logs: median step line 12942 tok/s, 134.07 GiB allocated, 134.76 GiB in use; RESULT tok_s=12893 ...
    check(ours[1:6] == ["12,942", "555", "134.1", "134.8", "1.00x"], f"our row from our log: {ours[1:6]}")
    check(torch[1:6] == ["12,893", "553", "74.7", "76.5", "1.00x"], f"PyTorch's row from its log: {torch[1:6]}")
    mhz, watts = (6 * 1410 + 2 * 1980) / 8, (6 * 696 + 2 * 520) / 8
    want = f"{mhz:,.0f} MHz, {watts:.0f} W (75% at the power cap), {1000 * watts / 12942:.1f} mJ per token"
    check(ours[6] == want, f"busy clock, power and energy per token from the samples and tokens/s: '{ours[6]}' (want '{want}')")
    check(torch[6] == "-", f"samples without the fields give '-': '{torch[6]}'")
    # its log: "AdamW moments bf16" in the config line; median step line 20102 tok/s (20102 / 12893 = 1.56x),
    # 104.81 GiB allocated
    bf16m = rows.get("ours fp8, delayed scaling (train_llama_fp8)")
    check(bf16m is not None, f"the bf16-moments run (the default) labelled without a moments note: rows {sorted(rows)}")
    if bf16m is not None:
        check(bf16m[1:6] == ["20,102", "862", "104.8", "105.5", "1.56x"], f"the bf16-moments row from its log: {bf16m[1:6]}")
    # ours-fp8-fp32m: labelled by what its log reports (fp32; or bf16, had --trainer-args overridden it)
    text = open(os.path.join(BENCH_LOGS, "ours-fp8-bf16m.log")).read()
    check("| AdamW moments bf16 |" in text, "the fixture's batch line reports bf16 moments")
    for moments, want in (("fp32", "ours fp8, delayed scaling, fp32 AdamW moments (train_llama_fp8)"),
                          ("bf16", "ours fp8, delayed scaling (train_llama_fp8)")):
        with open(os.path.join(logdir, "ours-fp8-fp32m.log"), "w") as f:
            f.write(text.replace("| AdamW moments bf16 |", f"| AdamW moments {moments} |"))
        p = subprocess.run(["bash", BENCH, "--table-only", "--systems", "ours-fp8-fp32m", "--logdir", logdir, "--out", out_md],
                           capture_output=True, text=True, env=dict(os.environ, PYTHON=sys.executable))
        labels = [line.split("|")[1].strip() for line in open(out_md) if line.startswith("| ours")]
        check(p.returncode == 0 and labels == [want], f"ours-fp8-fp32m with a log of {moments} moments: labelled {labels} (want {want!r}; exit {p.returncode})")


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
    check("- hf-bf16: its log is for a different run (smollm2-135m, B 1 T 64, grad accum 1)" in text
          and "differ between systems" in text,
          f"a transformers log of another model is flagged (exit {rc})")


CONVERGENCE = os.path.join(ROOT, "scripts", "compare_convergence.sh")


def test_benchmark_no_package(tmp):
    """benchmark.sh with a Python that lacks llama_fp8 (its table needs it) stops before any system runs,
    naming that Python and make venv: on a fresh GPU machine without .venv the runs took minutes of GPU
    time, then every PyTorch system and the table failed on the missing package."""
    bare = os.path.join(tmp, "bare_python")
    with open(bare, "w") as f:
        f.write(f"#!/bin/sh\nexec {sys.executable} -S -E \"$@\"\n")  # no site-packages: no .venv install
    os.chmod(bare, 0o755)
    logdir = os.path.join(tmp, "log_bench_bare")
    p = subprocess.run(["bash", BENCH, "--systems", "torch-bf16", "--model", "tiny", "--logdir", logdir,
                        "--out", os.path.join(tmp, "bare.md")], capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=bare, BENCH_ALLOW_NO_GPU="1"))
    check(p.returncode == 2 and "has no llama_fp8 package" in p.stderr and "make venv" in p.stderr and bare in p.stderr,
          f"benchmark.sh with a Python without llama_fp8: exit 2 naming it and make venv (exit {p.returncode}: "
          f"{p.stderr.strip()[-300:]!r})")
    check(not os.path.exists(os.path.join(logdir, "torch-bf16.log")), "a system ran before the refusal")


def test_benchmark_accum(tmp):
    """--accum N: PyTorch's and transformers' runs get --accum N, the table's header says N micro-steps and
    N x B x T tokens per step, and a log of another accumulation is flagged. bench_torch.py itself is
    stood in for by a script that records its arguments and prints a RESULT line (no torch here)."""
    fake = os.path.join(tmp, "fake_python")
    with open(fake, "w") as f:
        f.write("#!/bin/sh\n"
                "case \"$2\" in *bench_torch.py) echo \"ARGS $*\"; "
                "echo 'RESULT system=torch-bf16 model=tiny B=2 T=64 accum=8 tok_s=100 tflops=1 mem_gib=1 dev_gib=1 "
                "ms=1 flops_tok=1e6'; exit 0;; esac\n"
                f"exec {sys.executable} \"$@\"\n")
    os.chmod(fake, 0o755)
    logdir = os.path.join(tmp, "log_bench_accum")
    out_md = os.path.join(tmp, "accum.md")
    p = subprocess.run(["bash", BENCH, "--systems", "torch-bf16", "--model", "tiny", "--B", "2", "--T", "64",
                        "--accum", "8", "--logdir", logdir, "--out", out_md], capture_output=True, text=True,
                       env=dict(os.environ, PYTHON=fake, BENCH_ALLOW_NO_GPU="1"))
    log_path = os.path.join(logdir, "torch-bf16.log")
    log = open(log_path).read() if os.path.exists(log_path) else ""
    args = re.search(r"^ARGS (.*)$", log, re.M)
    check(args and " --accum 8 " in args.group(1) + " " and " --B 2 " in args.group(1),
          f"bench_torch.py's arguments: {args and args.group(1)!r}")
    text = open(out_md).read() if os.path.exists(out_md) else ""
    check(p.returncode == 0 and "B 2 x T 64 x 8 micro-steps (1024 tokens/step)" in text and "different run" not in text,
          f"the table of an --accum 8 run (exit {p.returncode}): {text[:300]!r} {p.stderr.strip()[-200:]!r}")
    rc, err, rows, text = bench_table(BENCH_CPU_LOGS, os.path.join(tmp, "accum_other.md"), "--systems", "torch-bf16",
                                      "--model", "smollm2-135m", "--B", "1", "--T", "64", "--accum", "4")
    check("torch-bf16: its log is for a different run (smollm2-135m, B 1 T 64, grad accum 1)" in text,
          f"a log of one micro-step tabulated as --accum 4 is flagged: {text[-400:]!r}")
    ours_dir = os.path.join(tmp, "log_bench_accum_ours")   # our H200 log, as if run with -d 4 x B x T
    os.makedirs(ours_dir)
    with open(os.path.join(BENCH_LOGS, "ours-bf16.log")) as f:
        text = f.read().replace("(grad accum 1)", "(grad accum 4)")
    with open(os.path.join(ours_dir, "ours-bf16.log"), "w") as f:
        f.write(text)
    for accum, flagged in (("4", False), ("1", True)):
        rc, err, rows, text = bench_table(ours_dir, os.path.join(tmp, "accum_ours.md"), "--systems", "ours-bf16",
                                          "--accum", accum)
        check(("ours-bf16: its log is for a different run (llama2-7b, B 2 T 4096, grad accum 4)" in text) == flagged,
              f"our log of 4 micro-steps (its batch line's grad accum) tabulated as --accum {accum}: {text[-300:]!r}")


def test_benchmark_labels(tmp):
    """A run of ours is labelled by the grain, master weights and moments' place its log reports, whichever
    --trainer-args asked for them: the H100 runs of dev/results/fit80_h100 (-master_weights bf16; per-tensor,
    -fp8_grain row and block), one with -adam_offload 1 and an H200 fixture (fp32 master weights, the default:
    not named)."""
    logs = os.path.join(ROOT, "dev", "results", "fit80_h100", "logs")
    want = {"fit80": "ours fp8, delayed scaling, bf16 master weights (train_llama_fp8)",
            "fit80_row": "ours fp8, row-wise scaling, bf16 master weights (train_llama_fp8)",
            "fit80_block": "ours fp8, block scaling, bf16 master weights (train_llama_fp8)"}
    for run, label in want.items():
        logdir = os.path.join(tmp, "labels_" + run)
        os.makedirs(logdir)
        shutil.copy(os.path.join(logs, run + "_ours-fp8.log"), os.path.join(logdir, "ours-fp8.log"))
        rc, err, rows, text = bench_table(logdir, os.path.join(tmp, run + ".md"), "--systems", "ours-fp8")
        check(label in rows, f"{run}: labelled {sorted(rows)} (want {label!r}; exit {rc}: {err.strip()[-200:]})")
    # the same run as -adam_offload 1 writes it (the fit80 run of dev/results/fit80_vs_pytorch_h100, its
    # header's memory line saying so)
    logdir = os.path.join(tmp, "labels_offload")
    os.makedirs(logdir)
    with open(os.path.join(ROOT, "dev", "results", "fit80_vs_pytorch_h100", "logs", "fit80", "ours-fp8.log")) as f:
        text = f.read()
    line = "| recompute SwiGLU | fp8 weight cache off"
    check(text.count(line) == 1, f"the fit80 log's memory line lacks {line!r}")
    with open(os.path.join(logdir, "ours-fp8.log"), "w") as f:
        f.write(text.replace(line, line + " | AdamW moments in host memory"))
    rc, err, rows, text = bench_table(logdir, os.path.join(tmp, "offload.md"), "--systems", "ours-fp8")
    label = "ours fp8, delayed scaling, bf16 master weights, AdamW moments in host memory (train_llama_fp8)"
    check(label in rows, f"an -adam_offload 1 run: labelled {sorted(rows)} (want {label!r})")
    logdir = os.path.join(tmp, "labels_h200")
    os.makedirs(logdir)
    shutil.copy(os.path.join(BENCH_LOGS, "ours-fp8-bf16m.log"), os.path.join(logdir, "ours-fp8.log"))
    rc, err, rows, text = bench_table(logdir, os.path.join(tmp, "h200.md"), "--systems", "ours-fp8")
    check("ours fp8, delayed scaling (train_llama_fp8)" in rows, f"an fp32-master, per-tensor run: labelled {sorted(rows)}")


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
# copies the run's logs, chosen by -precision and -fp8_recipe, into -o DIR, and writes its checkpoint;
# -x 0 evaluates -init_from as the trainer prints it: a val loss of 6.004 in bf16, 6.03 in fp8 (the
# trainer's default), refusing the flags that conflict with -init_from's shape
recipe= precision=fp8 steps= init= shape=
while [ $# -gt 1 ]; do
    case $1 in -o) dir=$2 ;; -precision) precision=$2 ;; -fp8_recipe) recipe=_$2 ;; -x) steps=$2 ;; -init_from) init=$2 ;; -e|-L) shape=$1 ;; esac
    shift 2
done
if [ "$steps" = 0 ]; then
    [ -z "$shape" ] || {{ echo "$shape conflicts with -init_from '$init': the model's shape comes from the file"; exit 1; }}
    [ -f "$init" ] || {{ echo "-init_from '$init': no such file"; exit 1; }}
    case $precision in bf16) echo "val loss 6.004000 | bpb 1.2000 over 2 batches of 4 x 64 tokens" ;; *) echo "val loss 6.030000 | bpb 1.2050 over 2 batches of 4 x 64 tokens" ;; esac
    echo "hellaswag: acc 0.3300 acc_norm 0.4100 (100 items)"
    exit 0
fi
touch "$dir/model_00000010.bin" "$dir/model_00000020.bin"
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
    check("weights in bf16" not in text and not os.path.exists(os.path.join(out, "fp8", "bf16_eval.log")),
          "without --eval-bf16 no fp8 run is evaluated in bf16")
    # --eval-bf16: each fp8 run's last checkpoint, in bf16, without the flags of the model's shape and steps
    out = os.path.join(tmp, "conv_eval")
    p = subprocess.run(["bash", CONVERGENCE, "--out", out, "--current", "--quiet", "--eval-bf16", "--bin", trainer, "--python", sys.executable,
                        "--", "-e", "tiny", "-L", "2", "-x", "20"], capture_output=True, text=True)
    text = open(os.path.join(out, "summary.md")).read() if os.path.exists(os.path.join(out, "summary.md")) else ""
    rows = [line for line in text.splitlines() if "weights in bf16 |" in line]
    want = [f"| {run} weights in bf16 | - | - | - | 6.0040 | +0.07% | 1.2000 | 0.4100 (0.3300, 100) | - | - |" for run in ("fp8", "fp8_current")]
    evaluated = open(os.path.join(out, "fp8", "bf16_eval.log")).read() if os.path.exists(os.path.join(out, "fp8", "bf16_eval.log")) else ""
    check(p.returncode == 0 and rows == want and "== fp8's weights in bf16:" in p.stdout and "model_00000020.bin -precision bf16 -x 0" in p.stdout,
          f"--eval-bf16: a row per fp8 run, its last checkpoint evaluated in bf16 (exit {p.returncode}; rows {rows}; {evaluated!r}; {p.stderr.strip()!r})")


SEEDS = os.path.join(ROOT, "scripts", "convergence_seeds.sh")
# the fake runs' last val loss with fp32 moments: bf16's per seed, fp8's relative gap to it (seed 1 over
# compare_convergence.sh's 1%), and what bf16 moments change in each run (relative), so the table's numbers
# can be worked out here
SEED_BF16 = {1337: 4.2237, 0: 4.2064, 1: 4.2027, 2: 4.2139}
SEED_FP8_GAP = {1337: -0.0009, 0: 0.002, 1: 0.015, 2: 0.0036}
SEED_BF16M = {(1337, "bf16"): -0.002, (0, "bf16"): 0.001, (1, "bf16"): -0.003, (2, "bf16"): 0.0005,
              (1337, "fp8"): 0.0012, (0, "fp8"): -0.0025, (1, "fp8"): -0.004, (2, "fp8"): 0.0}


def seed_val(seed, precision, moments):
    """The val loss the fake trainer logs at its last step, as main.log's %.6f prints it."""
    v = SEED_BF16[seed] * (1 + (SEED_FP8_GAP[seed] if precision == "fp8" else 0.0))
    v *= 1 + (SEED_BF16M[(seed, precision)] if moments == "bf16" else 0.0)
    return float("%.6f" % v)


def pct(x):
    return f"{100 * x:+.2f}%"


def seeds_rows(text):
    """{first cell: [the other cells]} of the markdown table rows in text."""
    rows = {}
    for line in text.splitlines():
        if line.startswith("| ") and not line.startswith("| seed ") and not line.startswith("|---"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            rows[cells[0]] = cells[1:]
    return rows


def test_convergence_seeds(tmp):
    """scripts/convergence_seeds.sh with a fake trainer whose val loss depends on -seed, -precision and
    -adam_moments: two 4-seed runs (the default bf16 moments; fp32 moments with --compare against the first,
    seed 2's fp8 crashing, then re-run with --skip-existing), the refusals, missing logs and, on the real logs of
    dev/results/conv125m_gutenberg, the numbers of its hand-made seeds.md. The plots are left out (a
    matplotlib that does not import, on PYTHONPATH) to keep it fast; test_compare_convergence checks them."""
    src = os.path.join(tmp, "seed_logs")
    os.makedirs(src)
    for seed in SEED_BF16:
        for precision in ("bf16", "fp8"):
            for moments in ("fp32", "bf16"):
                header = logs.HEADER % ("NVIDIA H200", precision, "tiny", 32000, 4, 256, 4, 2, 768, 2, 128, 1024, moments, "") + "\n"
                last = seed_val(seed, precision, moments)
                with open(os.path.join(src, f"{seed}_{precision}_{moments}.main.log"), "w") as f:
                    f.write(header + "".join(logs.train_line(s, 10 - 0.2 * s) for s in range(1, 21)))
                    f.write(logs.VAL % (10, last + 0.5) + logs.VAL % (20, last))
    calls = os.path.join(tmp, "seed_calls")
    trainer = os.path.join(tmp, "fake_seed_trainer")
    with open(trainer, "w") as f:
        f.write(f"""#!/usr/bin/env bash
# writes the log of its -seed, -precision and -adam_moments (bf16 by default, as the trainer's) into
# -o DIR, and its argv into DIR/argv.txt; crashes (exit 1, half a log) when the file crash_<seed>_<precision> is there
args=("$@")
moments=bf16
while [ $# -gt 1 ]; do
    case $1 in -o) dir=$2 ;; -precision) precision=$2 ;; -seed) seed=$2 ;; -adam_moments) moments=$2 ;; esac
    shift 2
done
printf '%s\\n' "${{args[@]}}" >"$dir/argv.txt"
echo "$seed $precision" >>{shlex_quote(calls)}
if [ -f {shlex_quote(src)}/crash_${{seed}}_$precision ]; then
    head -n 5 {shlex_quote(src)}/${{seed}}_${{precision}}_$moments.main.log >"$dir/main.log"
    echo "CUDA error: an illegal memory access was encountered"; exit 1
fi
cp {shlex_quote(src)}/${{seed}}_${{precision}}_$moments.main.log "$dir/main.log"
""")
    os.chmod(trainer, 0o755)
    nompl = os.path.join(tmp, "nompl", "matplotlib")
    os.makedirs(nompl)
    with open(os.path.join(nompl, "__init__.py"), "w") as f:
        f.write('raise ImportError("matplotlib left out by test_scripts.py")\n')
    # ahead of the PYTHONPATH this suite runs with, not instead of it (the mutation runner's names the mutant's llama_fp8)
    pythonpath = os.pathsep.join(filter(None, [os.path.dirname(nompl), os.environ.get("PYTHONPATH")]))
    env = dict(os.environ, PYTHONPATH=pythonpath)
    flags = ["-x", "20", "-i", "data/x_*.bin", "-tok", "a b.bin"]

    def run(*args, trainer_flags=flags):
        open(calls, "w").close()
        p = subprocess.run(["bash", SEEDS, *args, "--quiet", "--bin", trainer, "--python", sys.executable, "--", *trainer_flags],
                           capture_output=True, text=True, env=env, cwd=tmp)
        n = len(open(calls).read().splitlines())
        md = os.path.join(tmp, args[args.index("--out") + 1], "seeds.md") if "--out" in args else ""
        return p, n, open(md).read() if md and os.path.exists(md) else ""

    def expect(moments, seeds, crashed=()):
        """{seed: (bf16 val, fp8 val or None, diff or None)}, the mean and sd of the diffs, and the spread of bf16."""
        rows = {}
        for seed in seeds:
            b = seed_val(seed, "bf16", moments)
            fp = None if seed in crashed else seed_val(seed, "fp8", moments)
            rows[seed] = (b, fp, None if fp is None else (fp - b) / b)
        diffs = [d for _, _, d in rows.values() if d is not None]
        bvals = [b for b, _, _ in rows.values()]
        return rows, statistics.fmean(diffs), statistics.stdev(diffs), \
            f"{min(bvals):.4f}-{max(bvals):.4f} ({100 * (max(bvals) - min(bvals)) / statistics.fmean(bvals):.2f}%)"

    # the default bf16 moments, every seed: exit 0 although seed 1's fp8 is over the threshold (its verdict says so)
    p, n, md = run("--out", "ref")
    rows = seeds_rows(md)
    want, mean, sd, spread = expect("bf16", SEED_BF16)
    ok = p.returncode == 0 and n == 8 and all(
        rows.get(str(s)) == ["20", f"{b:.4f}", f"{fp:.4f}", pct(d), "FAIL (over +1%)" if s == 1 else "PASS"]
        for s, (b, fp, d) in want.items())
    check(ok, f"convergence_seeds.sh: 4 seeds, one row each with bf16/fp8 val, their difference and the verdict (exit {p.returncode}, "
              f"{n} trainer runs; {p.stderr.strip()[-300:]!r})")
    check(rows.get("mean", [None] * 4)[3] == f"{pct(mean)} (sd {100 * sd:.2f}%, 4 seeds)" and rows["mean"][4] == "3 of 4 PASS"
          and f"bf16 alone spans {spread}" in md and "AdamW moments: bf16." in md,
          f"seeds.md: the mean and sample sd of the differences, bf16's spread, the moments ({rows.get('mean')}, want {pct(mean)} sd {100 * sd:.2f}%, {spread})")
    argv = open(os.path.join(tmp, "ref", "seed0", "bf16", "argv.txt")).read().splitlines()
    check(argv == flags + ["-seed", "0", "-precision", "bf16", "-o", "ref/seed0/bf16"] and
          "-x 20 -i data/x_\\*.bin -tok a\\ b.bin -seed N" in md,
          f"the trainer gets the flags exactly (a glob and a space unexpanded) plus -seed N; seeds.md shows them ({argv})")

    # refusals: nothing trains
    shutil.copytree(os.path.join(tmp, "ref"), os.path.join(tmp, "ref_unfinished"))
    os.unlink(os.path.join(tmp, "ref_unfinished", "seed0", "fp8", "DONE"))
    for what, args, tf, msg in (
            ("-seed among the trainer flags", ("--out", "x"), flags + ["-seed", "3"], "don't pass -seed"),
            ("a seed that is no number", ("--out", "x", "--seeds", "1,x"), flags, "--seeds wants"),
            ("a seed twice", ("--out", "x", "--seeds", "1,2,1"), flags, "--seeds lists 1 twice"),
            ("--compare of no folder", ("--out", "x", "--compare", "nowhere"), flags, "--compare nowhere: not a folder"),
            ("--compare lacking a seed", ("--out", "x", "--seeds", "1337,5", "--compare", "ref"), flags,
             "error: ref/seed5/bf16/main.log: missing"),
            ("--compare with a run that did not finish", ("--out", "x", "--compare", "ref_unfinished"), flags,
             "error: ref_unfinished/seed0/fp8/DONE: missing: the run did not finish"),
            ("-o for compare_convergence.sh", ("--out", "x"), flags + ["-o", "y"], "don't pass -o"),
            ("-precision in --fp8-args", ("--out", "x", "--fp8-args", "-precision bf16"), flags,
             "don't pass -precision (in --fp8-args)"),
            ("an odd --fp8-args", ("--out", "x", "--fp8-args", "-fp8_lm_head"), flags, "got an odd number in --fp8-args")):
        p, n, _ = run(*args, trainer_flags=tf)
        check(p.returncode == 2 and n == 0 and msg in p.stderr, f"convergence_seeds.sh refuses {what}: exit 2, no run ({p.returncode}, {n}; {p.stderr.strip()[:300]!r})")

    # --fp8-args: only the fp8 runs get them; summary.md, seeds.md and --compare say so
    p, n, md = run("--out", "lmhead", "--seeds", "0", "--compare", "ref", "--fp8-args", "-fp8_lm_head 1")
    argv = {r: open(os.path.join(tmp, "lmhead", "seed0", r, "argv.txt")).read().splitlines() for r in ("bf16", "fp8")}
    summary = open(os.path.join(tmp, "lmhead", "seed0", "summary.md")).read()
    check(p.returncode == 0 and n == 2 and argv["bf16"] == flags + ["-seed", "0", "-precision", "bf16", "-o", "lmhead/seed0/bf16"] and
          argv["fp8"] == flags + ["-seed", "0", "-precision", "fp8", "-fp8_recipe", "delayed", "-fp8_log", "10",
                                  "-fp8_lm_head", "1", "-o", "lmhead/seed0/fp8"] and
          "The fp8 runs also: `-fp8_lm_head 1`" in summary and "and to the fp8 runs `-fp8_lm_head 1`" in md and
          "The fp8 runs' own flags (--fp8-args): this run `-fp8_lm_head 1`, ref `none`." in md and
          open(os.path.join(tmp, "lmhead", "fp8_args.txt")).read() == "-fp8_lm_head 1\n",
          f"--fp8-args: the fp8 run alone gets them, and summary.md, seeds.md and --compare name them (exit {p.returncode}, "
          f"{n} runs; {argv}; {p.stderr.strip()[-300:]!r})")

    # fp32 moments against the default bf16 ones; seed 2's fp8 crashes: the other seeds go on, exit 3
    open(os.path.join(src, "crash_2_fp8"), "w").close()
    p, n, md = run("--out", "fp32m", "--compare", "ref", trainer_flags=flags + ["-adam_moments", "fp32"])
    main, _, against = md.partition("## Against `ref` (ref)")
    rows = seeds_rows(main)
    want, mean, sd, _ = expect("fp32", SEED_BF16, crashed=(2,))
    check(p.returncode == 3 and n == 8 and "seed(s) 2 had a run that crashed" in p.stderr and "seed 2: compare_convergence.sh exited 3" in p.stderr and
          rows.get("2") == ["20", f"{want[2][0]:.4f}", "n/a", "n/a", "CRASHED: fp8"] and
          rows.get("mean", [None] * 4)[3] == f"{pct(mean)} (sd {100 * sd:.2f}%, 3 seeds)" and
          rows["mean"][2] == f"{statistics.fmean(want[s][1] for s in (1337, 0, 1)):.4f} (3 seeds)",
          f"a crashed seed: exit 3, its row says CRASHED, the means are over the other 3 (exit {p.returncode}; {rows.get('2')}, {rows.get('mean')})")

    def expect_against(seeds_fp8):
        vs = {run: [(seed_val(s, run, "fp32") - seed_val(s, run, "bf16")) / seed_val(s, run, "bf16")
                    for s in (SEED_BF16 if run == "bf16" else seeds_fp8)] for run in ("bf16", "fp8")}
        return {run: f"{pct(statistics.fmean(v))} (sd {100 * statistics.stdev(v):.2f}%, {len(v)} seeds)" for run, v in vs.items()}

    rows = seeds_rows(against)
    vs = expect_against((1337, 0, 1))
    r0 = [seed_val(0, r, m) for r in ("bf16", "fp8") for m in ("fp32", "bf16")]  # this run's, then ref's
    ref_fp8 = [(seed_val(s, "fp8", "bf16") - seed_val(s, "bf16", "bf16")) / seed_val(s, "bf16", "bf16") for s in SEED_BF16]
    check(rows.get("0") == [f"{r0[0]:.4f}", f"{r0[1]:.4f}", pct((r0[0] - r0[1]) / r0[1]),
                            f"{r0[2]:.4f}", f"{r0[3]:.4f}", pct((r0[2] - r0[3]) / r0[3]), pct((r0[3] - r0[1]) / r0[1])] and
          rows.get("2", [None] * 7)[3:6] == [ "n/a", f"{seed_val(2, 'fp8', 'bf16'):.4f}", "n/a"] and
          rows.get("mean", [None] * 7)[2] == vs["bf16"] and rows["mean"][5] == vs["fp8"] and
          rows["mean"][6] == f"{pct(statistics.fmean(ref_fp8))} (sd {100 * statistics.stdev(ref_fp8):.2f}%, 4 seeds)",
          f"--compare: per seed and on average this run's bf16 and fp8 val against ref's ({rows.get('0')}, {rows.get('mean')}; want {vs})")
    check("Flags: this run adds `-adam_moments fp32`. AdamW moments: this run fp32; ref bf16." in against,
          f"--compare: the flags' difference and each side's AdamW moments from the main.log headers ({against[:300]!r})")

    # the crash mended: --skip-existing re-runs only seed 2's fp8 and the table is whole
    os.unlink(os.path.join(src, "crash_2_fp8"))
    p, n, md = run("--out", "fp32m", "--compare", "ref", "--skip-existing", trainer_flags=flags + ["-adam_moments", "fp32"])
    main, _, against = md.partition("## Against `ref` (ref)")
    rows, arows = seeds_rows(main), seeds_rows(against)
    want, mean, sd, _ = expect("fp32", SEED_BF16)
    check(p.returncode == 0 and n == 1 and open(calls).read() == "2 fp8\n" and
          rows.get("mean", [None] * 4)[3] == f"{pct(mean)} (sd {100 * sd:.2f}%, 4 seeds)" and
          arows.get("mean", [None] * 6)[5] == expect_against(tuple(SEED_BF16))["fp8"],
          f"--skip-existing: only the crashed run again, then all 4 seeds in both tables (exit {p.returncode}, {n} runs: "
          f"{open(calls).read()!r}; {rows.get('mean')})")

    # logs gone bad after the runs: the table is written, naming each file and its problem; exit 1
    os.unlink(os.path.join(tmp, "ref", "seed0", "fp8", "main.log"))
    with open(os.path.join(tmp, "fp32m", "seed1", "bf16", "main.log"), "w") as f:
        f.write(logs.train_line(1, 10.0))
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "convergence_seeds.py"), "--out", "fp32m",
                        "--seeds", "1337,0,1,2", "--status", "0,0,0,0", "--compare", "ref"], capture_output=True, text=True, cwd=tmp)
    md = open(os.path.join(tmp, "fp32m", "seeds.md")).read()
    for err in ("error: ref/seed0/fp8/main.log: missing (did the run start?)",
                "error: fp32m/seed1/bf16/main.log: has no val loss"):
        check(r.returncode == 1 and err in r.stderr and err in md, f"convergence_seeds.py names a bad log: {err!r} (exit {r.returncode}; {r.stderr.strip()!r})")

    # the real logs of dev/results/conv125m_gutenberg: the numbers of its hand-made seeds.md
    real = os.path.join(ROOT, "dev", "results", "conv125m_gutenberg")
    for seed in (1337, 0, 1, 2):
        for run in ("bf16", "fp8"):
            d = os.path.join(tmp, "real", f"seed{seed}", run)
            os.makedirs(d)
            shutil.copy(os.path.join(real, f"{run}_main.log") if seed == 1337 else
                        os.path.join(real, "seeds", f"seed{seed}_{run}_main.log"), os.path.join(d, "main.log"))
            open(os.path.join(d, "DONE"), "w").close()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "convergence_seeds.py"), "--out", "real",
                        "--seeds", "1337,0,1,2"], capture_output=True, text=True, cwd=tmp)
    rows = seeds_rows(r.stdout)
    check(r.returncode == 0 and [rows.get(s, [None] * 4)[3] for s in ("1337", "0", "1", "2")] == ["-0.09%", "-0.09%", "+0.31%", "+0.36%"]
          and rows.get("mean", [None] * 5)[1:5] == ["4.2117", "4.2168", "+0.12% (sd 0.24%, 4 seeds)", "4 of 4 PASS"]
          and "bf16 alone spans 4.2027-4.2237 (0.50%)" in r.stdout,
          f"on the real 125M logs (no --status: verdicts from the losses): dev/results/conv125m_gutenberg/seeds.md's numbers (exit {r.returncode}; {rows}; {r.stderr.strip()!r})")


RUNNER = os.path.join(ROOT, "dev", "test", "run_tests.sh")
# the suites run_tests.sh runs, as paths in the tree (the Python ones are found by its glob)
CPU_SUITES = ["dev/test/test_cpu", "dev/test/test_trainer_host", "dev/test/test_zero_layout"]
PY_SUITES = ["dev/test/test_a.py", "dev/test/test_b.py"]
GPU_SUITES = ["test_llama_fp8", "dev/test/test_signal.sh", "dev/test/test_hf_gpu.sh", "dev/cuda/rmsnorm", "dev/cuda/fp8_block",
              "dev/cuda/fp8_rowwise"]
# the arguments a suite must be run with (none where not listed): the fp8 ones' full runs time for minutes
SUITE_ARGS = {"dev/cuda/fp8_block": "-validate", "dev/cuda/fp8_rowwise": "-validate"}


def fake_tree(tmp, outcomes, gpu, build_ok=True, venv=True):
    """A copy of the runner beside fake suites; outcomes maps a suite to (stdout, exit status, signal),
    signal "HANG" for one that never ends. The Python suites pass only when run by .venv/bin/python3
    (a wrapper that marks its children) and import the fake tree's own llama_fp8 (that wrapper's is an
    editable install of this repository's), the GPU shell scripts only when python3 on their PATH is it,
    the others only with their SUITE_ARGS."""
    root = tempfile.mkdtemp(dir=tmp)
    for d in ("dev/test", "dev/cuda", "bin", "llama_fp8"):
        os.makedirs(os.path.join(root, d))
    open(os.path.join(root, "llama_fp8", "__init__.py"), "w").close()
    shutil.copy(RUNNER, os.path.join(root, "dev", "test"))
    venv_python = os.path.join(root, ".venv", "bin", "python3")
    if venv:
        os.makedirs(os.path.dirname(venv_python))
        with open(venv_python, "w") as f:
            f.write(f"#!/bin/sh\nFAKE_VENV=1 exec {shlex_quote(sys.executable)} \"$@\"\n")
        os.chmod(venv_python, 0o755)
    for suite in CPU_SUITES + PY_SUITES + GPU_SUITES:
        text, rc, sig = outcomes.get(suite, ("1 passed, 0 failed", 0, None))
        path = os.path.join(root, suite)
        if suite in CPU_SUITES[1:]: # a host-only suite is run for its source (run_tests.sh globs dev/test/test_*.cu)
            open(path + ".cu", "w").close()
        if suite.endswith(".py"):
            body = "import os, signal, sys, time\n"
            body += "if os.environ.get('FAKE_VENV') != '1':\n    print('not the venv python')\n    print('0 passed, 1 failed')\n    sys.exit(1)\n"
            body += "import llama_fp8\n"
            body += f"if os.path.dirname(llama_fp8.__path__[0]) != {root!r}:\n"
            body += "    print('llama_fp8 from', llama_fp8.__path__[0])\n"
            body += "    print('0 passed, 1 failed')\n    sys.exit(1)\n"
            body += f"print({text!r})\nsys.stdout.flush()\n"
            body += ("time.sleep(60)\n" if sig == "HANG" else f"os.kill(os.getpid(), signal.{sig})\n" if sig else f"sys.exit({rc})\n")
        else:
            body = "#!/bin/sh\n"
            args = SUITE_ARGS.get(suite, "")
            body += f"[ \"$*\" = {shlex_quote(args)} ] || {{ echo \"run with '$*', not '{args}'\"; echo '0 passed, 1 failed'; exit 1; }}\n"
            if suite.endswith(".sh"):
                body += f"[ \"$(command -v python3)\" = {shlex_quote(venv_python)} ] || {{ echo 'python3 is not the venv one'; echo '0 passed, 1 failed'; exit 1; }}\n"
            body += f"printf '%s\\n' {shlex_quote(text)}\n"
            body += "sleep 60\n" if sig == "HANG" else f"kill -{sig} $$\n" if sig else f"exit {rc}\n"
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


def run_runner(root, **env):
    env = dict(os.environ, PATH=os.path.join(root, "bin") + os.pathsep + os.environ["PATH"], **env)
    p = subprocess.run(["bash", os.path.join(root, "dev", "test", "run_tests.sh")], capture_output=True, text=True, env=env)
    lines = p.stdout.strip().splitlines()
    return p.returncode, lines[-1] if lines else "", p.stdout


def test_runner(tmp):
    n_cpu, n_gpu = len(CPU_SUITES) + len(PY_SUITES), len(GPU_SUITES)
    cases = [  # (what, outcomes, gpu, build ok, want passed, want failed, {tree options, env}, a line the output must hold)
        ("every suite passes, no GPU", {}, False, True, n_cpu, 0, {}, None),
        ("every suite passes, GPU suites and dev/cuda checks included", {}, True, True, n_cpu + n_gpu, 0, {}, None),
        ("a CPU suite with failures", {"dev/test/test_cpu": ("7 passed, 2 failed", 1, None)}, False, True, n_cpu - 1 + 7, 2, {}, None),
        ("a suite crashing before its summary", {"dev/test/test_trainer_host": ("ok half of it", 0, "SEGV")}, False, True, n_cpu - 1, 1, {}, None),
        ("a Python suite printing no summary", {"dev/test/test_b.py": ("no summary here", 0, None)}, False, True, n_cpu - 1, 1, {}, None),
        ("a suite exiting 3 after '4 passed, 0 failed'", {"dev/test/test_zero_layout": ("4 passed, 0 failed", 3, None)},
         False, True, n_cpu - 1 + 4, 1, {}, None),
        ("a suite running no tests ('0 passed, 0 failed', exit 0)", {"dev/test/test_a.py": ("0 passed, 0 failed", 0, None)},
         False, True, n_cpu - 1, 1, {}, "suite 'test_a' ran no tests (0 passed, 0 failed)"),
        ("a CPU suite hanging (SUITE_TIMEOUT=2)", {"dev/test/test_cpu": ("started", 0, "HANG")}, False, True, n_cpu - 1, 1,
         {"SUITE_TIMEOUT": "2"}, "suite 'cpu' timed out: still running after 2 s, killed"),
        ("a Python suite hanging after its summary (SUITE_TIMEOUT=2)", {"dev/test/test_b.py": ("3 passed, 0 failed", 0, "HANG")},
         False, True, n_cpu - 1, 1, {"SUITE_TIMEOUT": "2"}, "suite 'test_b' timed out: still running after 2 s, killed"),
        ("a GPU suite hanging (GPU_SUITE_TIMEOUT=2; the CPU limit stays the default)", {"dev/test/test_signal.sh": ("started", 0, "HANG")},
         True, True, n_cpu + n_gpu - 1, 1, {"GPU_SUITE_TIMEOUT": "2"}, "suite 'signal' timed out: still running after 2 s, killed"),
        ("no .venv: the Python suites are not run", {}, False, True, len(CPU_SUITES), 1, {"venv": False}, None),
        ("the GPU suite failing", {"test_llama_fp8": ("10 passed, 1 failed", 1, None)}, True, True, n_cpu + 10 + n_gpu - 1, 1, {}, None),
        ("the GPU suite killed", {"test_llama_fp8": ("", 0, "KILL")}, True, True, n_cpu + n_gpu - 1, 1, {}, "suite 'gpu' crashed (exit 137) before printing its summary"),
        ("dev/cuda/rmsnorm failing", {"dev/cuda/rmsnorm": ("rmsnorm: FAIL (2 checks failed)", 1, None)}, True, True, n_cpu + n_gpu - 1, 1,
         {}, "check 'dev/cuda/rmsnorm' failed (exit 1)"),
        ("dev/cuda/fp8_block -validate failing", {"dev/cuda/fp8_block": ("fp8_block: 3 FAILED", 1, None)}, True, True,
         n_cpu + n_gpu - 1, 1, {}, "check 'dev/cuda/fp8_block' failed (exit 1)"),
        ("the GPU build failing", {}, True, False, n_cpu, 1, {}, None),
        ("no GPU: the GPU suites are not run", {"test_llama_fp8": ("0 passed, 5 failed", 1, None)}, False, True, n_cpu, 0, {}, None),
    ]
    for what, outcomes, gpu, build_ok, want_p, want_f, opts, line in cases:
        env = {k: v for k, v in opts.items() if k != "venv"}
        rc, last, out = run_runner(fake_tree(tmp, outcomes, gpu, build_ok, opts.get("venv", True)), **env)
        want = f"{want_p} passed, {want_f} failed"
        ok = last == want and (rc == 0) == (want_f == 0) and (line is None or line in out.splitlines())
        check(ok, f"run_tests.sh, {what}: '{last}', exit {rc} (want '{want}', exit {'0' if want_f == 0 else 'non-zero'}"
                  f"{f', and the line {line!r}' if line else ''})" + ("" if ok else f"\n{out[-800:]}"))


MUTATIONS = os.path.join(ROOT, "dev", "test", "test_mutations.sh")
# the fake tree's source and the fake suites that read it: ./test_llama_fp8 [FILTER] in the harness's
# format ("FAIL <test> (...)" lines, then the summary), ./kernel in a dev/cuda program's, and two CPU
# suites (a host-only program, dev/test/test_host beside its dev/test/test_host.cu, and a Python one)
FAKE_SRC = "# a fake source\nvalue = {}\n# end\n"
FAKE_SUITE = """#!/bin/sh
case "$(sed -n 2p src.txt)" in
    "value = 2") echo "FAIL the test (1 checks failed, 0.1 s)"; echo "0 passed, 1 failed"; exit 1;;
    "value = 3") echo "./test_llama_fp8: line 9: syntax error"; exit 2;;
    "value = 4") echo "ok   the test (0.1 s)"; echo "FAIL another test (1 checks failed, 0.1 s)"; echo "1 passed, 1 failed"; exit 1;;
    *) echo "ok   the test (0.1 s)"; echo "1 passed, 0 failed";;
esac
"""
FAKE_KERNEL = """#!/bin/sh
[ "$(sed -n 2p src.txt)" = "value = 5" ] && { echo "kernel: FAIL (2 checks failed)"; exit 1; }
[ "$(sed -n 2p src.txt)" = "value = 7" ] && { echo "kernel: 3 passed, 2 failed"; exit 1; }
echo "kernel: PASS"
"""
FAKE_PY_SUITE = """import signal, sys
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:  # as test_hf's Ctrl-C check, which needs SIGINT's default action
    print("FAIL SIGINT is ignored\\n0 passed, 1 failed")
    sys.exit(1)
if open("src.txt").read().splitlines()[1] == "value = 2":
    print("FAIL the check (value 2)\\n0 passed, 1 failed")
    sys.exit(1)
print("ok   the check\\n1 passed, 0 failed")
"""
# (name, the patch's two context lines and the value it sets, its Caught by: command, the verdict wanted)
FAKE_MUTATIONS = [
    ("caught", ("# a fake source", "# end"), "2", "./test_llama_fp8 'the test'", "caught"),
    ("caught_by_summary", ("# a fake source", "# end"), "2", "./test_llama_fp8", "caught"),
    ("caught_by_kernel", ("# a fake source", "# end"), "5", "./kernel", "caught"),
    ("caught_by_kernel_counts", ("# a fake source", "# end"), "7", "./kernel", "caught"),  # fp8_rowwise's verdict
    ("another_test_fails", ("# a fake source", "# end"), "4", "./test_llama_fp8 'the test'", "NOT CAUGHT"),
    ("suite_crashes", ("# a fake source", "# end"), "3", "./test_llama_fp8", "NOT CAUGHT"),
    ("missed", ("# a fake source", "# end"), "6", "./test_llama_fp8 'the test'", "MISSED"),
    ("stale", ("# another source", "# and its end"), "2", "./test_llama_fp8", "STALE"),
    ("fuzzy", ("# a fake sourcE", "# end"), "2", "./test_llama_fp8", "STALE"),  # applies only with fuzz
    ("broken", ("# a fake source", "# end"), "build_error", "./test_llama_fp8", "BROKEN"),
]
VERDICT = r"(caught|MISSED|NOT CAUGHT|STALE|BROKEN|not run) +{}\b"


def mutation_tree(tmp, mutations):
    """A copy of dev/test/test_mutations.sh in a fake tree holding the fake suites and, for each
    (name, (first, last), value, cmd) of mutations, a patch setting src.txt's value; make fails on a
    source holding build_error and writes what it was asked to build to make.log; nvidia-smi lists one GPU."""
    root = tempfile.mkdtemp(dir=tmp)
    for d in ("dev/test/mutations", "bin"):
        os.makedirs(os.path.join(root, d))
    shutil.copy(MUTATIONS, os.path.join(root, "dev", "test"))
    files = {"src.txt": FAKE_SRC.format(1), "test_llama_fp8": FAKE_SUITE, "kernel": FAKE_KERNEL,
             "dev/test/test_host": FAKE_SUITE, "dev/test/test_host.cu": "", "dev/test/test_py.py": FAKE_PY_SUITE,
             "dev/test/test_gpu.sh": FAKE_SUITE,
             "bin/make": (f"#!/bin/sh\necho \"$*\" >> {shlex_quote(os.path.join(root, 'make.log'))}\n"
                          "! grep -q build_error src.txt || { echo 'src.txt:2: error: build_error'; exit 2; }\n"),
             "bin/nvidia-smi": "#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-0)'\n"}
    for name, (first, last), value, cmd in mutations:
        files[f"dev/test/mutations/{name}.patch"] = (
            f"Mutation: {name}\nCaught by: {cmd}\n\n--- a/src.txt\n+++ b/src.txt\n@@ -1,3 +1,3 @@\n"
            f" {first}\n-value = 1\n+value = {value}\n {last}\n")
    for name, text in files.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
        os.chmod(os.path.join(root, name), 0o755)
    return root


def ignore_sigint():
    """what a shell's background job starts with: SIGINT and SIGQUIT ignored"""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGQUIT, signal.SIG_IGN)


def run_mutations(root, *args, **env):
    """test_mutations.sh ARGS in the fake tree, started as a shell's background job (the fake Python
    suite fails where SIGINT reaches it ignored): (exit status, stdout's lines, stdout and stderr). The
    runner's own settings are left out of the environment (this test runs under it, as a mutant's command)."""
    env = dict({k: v for k, v in os.environ.items() if not k.startswith("MUTATION")},
               PATH=os.path.join(root, "bin") + os.pathsep + os.environ["PATH"], **env)
    p = subprocess.run(["bash", os.path.join(root, "dev", "test", "test_mutations.sh"), *args], capture_output=True, text=True, env=env,
                       preexec_fn=ignore_sigint)
    return p.returncode, p.stdout.strip().splitlines(), p.stdout + p.stderr


def verdicts(lines, names):
    """{name: the verdict its line gives, or None where no line names it}"""
    return {name: next((m.group(1) for m in (re.match(VERDICT.format(name), line) for line in lines) if m), None) for name in names}


def test_mutation_runner(tmp):
    """dev/test/test_mutations.sh on fake patches of a fake tree: the verdict of each, and the totals."""
    root = mutation_tree(tmp, [m[:4] for m in FAKE_MUTATIONS])
    rc, lines, out = run_mutations(root)
    got = verdicts(lines, [m[0] for m in FAKE_MUTATIONS])
    for name, _, _, cmd, verdict in FAKE_MUTATIONS:
        check(got[name] == verdict, f"test_mutations.sh, mutation {name} ({cmd}): {got[name]!r} (want {verdict!r})")
    n_caught = sum(v == "caught" for *_, v in FAKE_MUTATIONS)
    want = f"{n_caught} passed, {len(FAKE_MUTATIONS) - n_caught} failed"
    check(lines[-1:] == [want] and rc != 0, f"test_mutations.sh's totals: {lines[-1:]}, exit {rc} (want '{want}', non-zero)"
                                            + ("" if lines[-1:] == [want] else f"\n{out[-1500:]}"))


HOST, PY = "make -s dev/test/test_host && ./dev/test/test_host", "python3 dev/test/test_py.py"
# (name, value, Caught by: command, its suite as the per-suite table must name it, the verdict wanted
# in --cpu mode, None for a patch --cpu must leave out: its suite needs a GPU)
CPU_MODE_MUTATIONS = [
    ("host_caught", "2", HOST, "dev/test/test_host", "caught"),
    ("py_caught", "2", PY, "dev/test/test_py.py", "caught"),
    ("py_missed", "6", PY, "dev/test/test_py.py", "MISSED"),
    ("gpu_test", "2", "./test_llama_fp8 'the test'", "test_llama_fp8", None),
    ("gpu_script", "2", "bash dev/test/test_gpu.sh", "dev/test/test_gpu.sh", None),  # a dev/test script, no .cu: GPU
    ("gpu_kernel", "5", "make -s -C dev/cuda kernel && ./kernel", "kernel", None),
]


def suite_table(lines):
    """{suite: (patches naming it, tried, caught)} from the per-suite table's rows"""
    rows = (re.fullmatch(r"\| (\S+) \| (\d+) \| (\d+) \| (\d+) \|", line) for line in lines)
    return {m.group(1): tuple(int(m.group(i)) for i in (2, 3, 4)) for m in rows if m}


def test_mutation_runner_cpu(tmp):
    """test_mutations.sh --cpu on a fake tree with GPU and CPU patches: it tries exactly the CPU ones,
    builds no GPU program, fails the run for a missed one, counts per suite; MUTATION_SAMPLE's seeds."""
    names = [m[0] for m in CPU_MODE_MUTATIONS]
    cpu = {name: verdict for name, _, _, _, verdict in CPU_MODE_MUTATIONS if verdict}
    root = mutation_tree(tmp, [(name, ("# a fake source", "# end"), value, cmd) for name, value, cmd, *_ in CPU_MODE_MUTATIONS])
    rc, lines, out = run_mutations(root, "--cpu")
    got = verdicts(lines, names)
    tried = {n: v for n, v in got.items() if v}
    check(tried == cpu, f"--cpu: the verdicts {tried} (want {cpu}, no line for the GPU patches)" + ("" if tried == cpu else f"\n{out[-1500:]}"))
    built = open(os.path.join(root, "make.log")).read().split() if os.path.exists(os.path.join(root, "make.log")) else []
    check(built == ["-s", "dev/test/test_host"], f"--cpu: make asked for {built} (want only the host suite's own command's: "
                                                 "['-s', 'dev/test/test_host'], no GPU program)")
    check(lines[-1:] == ["2 passed, 1 failed"] and rc != 0, f"--cpu with a missed CPU patch: {lines[-1:]}, exit {rc} (want '2 passed, 1 failed', non-zero)")
    want = {}
    for name, _, _, suite, verdict in CPU_MODE_MUTATIONS:
        n, t, c = want.get(suite, (0, 0, 0))
        want[suite] = (n + 1, t + (verdict is not None), c + (verdict == "caught"))
    table = suite_table(lines)
    check(table == want, f"--cpu: the per-suite table (patches naming it, tried, caught) {table} (want {want})")
    rc, lines, _ = run_mutations(root, "--cpu", MUTATIONS="host_caught py_caught gpu_test")
    check(lines[-1:] == ["2 passed, 0 failed"] and rc == 0, f"--cpu, MUTATIONS naming 2 caught CPU patches and a GPU one: {lines[-1:]}, exit {rc} "
                                                             "(want '2 passed, 0 failed', exit 0)")
    samples = {}
    for seed in range(1, 9):
        rc, lines, out = run_mutations(root, "--cpu", MUTATION_SAMPLE="2", MUTATION_SEED=str(seed))
        sample = frozenset(n for n, v in verdicts(lines, names).items() if v)
        check(len(sample) == 2 and sample <= cpu.keys() and f"seed {seed} (MUTATION_SEED={seed} repeats it)" in out,
              f"--cpu, MUTATION_SAMPLE=2, MUTATION_SEED={seed}: tried {sorted(sample)} (want 2 CPU patches), the seed printed")
        samples[seed] = sample
    again = frozenset(n for n, v in verdicts(run_mutations(root, "--cpu", MUTATION_SAMPLE="2", MUTATION_SEED="1")[1], names).items() if v)
    check(again == samples[1], f"MUTATION_SEED=1 twice: {sorted(samples[1])}, then {sorted(again)}")
    check(set().union(*samples.values()) == cpu.keys(), f"seeds 1 to 8 leave no CPU patch out of every sample: {sorted(set().union(*samples.values()))}")
    today = subprocess.run(["date", "-u", "+%Y%m%d"], capture_output=True, text=True).stdout.strip()
    _, _, out = run_mutations(root, "--cpu", MUTATION_SAMPLE="1")
    check(f"seed {today} " in out, f"MUTATION_SAMPLE without MUTATION_SEED: the seed is today's date, {today}")


FAKE_PKG_SUITE = """import sys
import llama_fp8
if llama_fp8.value == 2:
    print("FAIL the package's value is 2 (its file: " + llama_fp8.__file__ + ")\\n0 passed, 1 failed")
    sys.exit(1)
print("ok   the package's value (its file: " + llama_fp8.__file__ + ")\\n1 passed, 0 failed")
"""


def test_mutation_runner_package(tmp):
    """A patch of llama_fp8/*.py is caught in the mutant although the tree's own llama_fp8 is importable
    from anywhere (as .venv's editable install of it makes it; here through PYTHONPATH, which outranks that
    install): the mutant's Python must import the mutant's package."""
    root = mutation_tree(tmp, [])
    os.makedirs(os.path.join(root, "llama_fp8"))
    patch = ("Mutation: the package's value 2\nCaught by: python3 dev/test/test_pkg.py\n\n"
             "--- a/llama_fp8/__init__.py\n+++ b/llama_fp8/__init__.py\n@@ -1,3 +1,3 @@\n"
             " # a fake source\n-value = 1\n+value = 2\n # end\n")
    files = {"llama_fp8/__init__.py": FAKE_SRC.format(1), "dev/test/test_pkg.py": FAKE_PKG_SUITE,
             "dev/test/mutations/pkg_value.patch": patch}
    for name, text in files.items():
        with open(os.path.join(root, name), "w") as f:
            f.write(text)
    rc, lines, out = run_mutations(root, "--cpu", PYTHONPATH=root)
    got = verdicts(lines, ["pkg_value"])["pkg_value"]
    check(got == "caught" and rc == 0, "test_mutations.sh --cpu, a patch of llama_fp8/__init__.py with the tree's own "
                                       f"package on the path: {got!r}, exit {rc} (want 'caught', 0)"
                                       + ("" if got == "caught" else f"\n{out[-800:]}"))


def patch_applies(path, cwd):
    """Whether patch `path` applies to the tree at cwd as dev/test/test_mutations.sh applies it: exactly
    (no fuzz, as the runner refuses any other); (applies, patch's output)."""
    r = subprocess.run(["patch", "-p1", "--dry-run", "-s", "-f", "--fuzz=0", "-i", path], cwd=cwd, capture_output=True, text=True)
    return r.returncode == 0, (r.stdout + r.stderr).strip()


def test_mutation_patches(tmp):
    # the premise: a patch whose context no longer matches the tree (one line moved on) does not apply
    tree = tempfile.mkdtemp(dir=tmp)
    with open(os.path.join(tree, "f.txt"), "w") as f:
        f.write("".join(f"line {i}\n" for i in range(1, 9)))
    fuzzy = os.path.join(tree, "fuzzy.patch")
    with open(fuzzy, "w") as f:
        f.write("--- a/f.txt\n+++ b/f.txt\n@@ -3,5 +3,5 @@\n line 3\n line 4\n-line 5\n+LINE 5\n line 6\n line 7 changed\n")
    ok, out = patch_applies(fuzzy, tree)
    check(not ok, f"a patch with a stale context line does not apply (the runner's rule: no fuzz) ({out[:200]})")
    d = os.path.join(ROOT, "dev", "test", "mutations")
    patches = sorted(f for f in os.listdir(d) if f.endswith(".patch"))
    check(len(patches) > 0, "dev/test/mutations has patches")
    for name in patches:
        path = os.path.join(d, name)
        text = open(path).read()
        named = text.startswith("Mutation: ") and "\nCaught by: " in text
        ok, out = patch_applies(path, ROOT)
        check(named and ok, f"mutation {name}: names its bug and its test, applies to the tree exactly ({out[:200]})")


NO_PACKAGE = "has no llama_fp8 package: run make venv, then use .venv/bin/python3"


def test_no_package():
    """Every tool that imports llama_fp8 (scripts/, dev/data/, dev/reference/) and every Python suite, run by
    a Python without the package (this one with -S -E: no site-packages, so no .venv install, and no
    PYTHONPATH), exits 1 saying what to run, with no traceback; the same Python with its site finds it."""
    found = subprocess.run([sys.executable, "-c", "import llama_fp8"], capture_output=True, text=True)
    check(found.returncode == 0, f"{sys.executable} imports llama_fp8 ({found.stderr.strip()[-200:]})")
    uses = re.compile(r"^\s*(from llama_fp8[ .]|import llama_fp8\b)", re.M)
    tools = [os.path.join(d, n) for d in ("scripts", "dev/data", "dev/reference")
             for n in sorted(os.listdir(os.path.join(ROOT, d)))
             if n.endswith(".py") and uses.search(open(os.path.join(ROOT, d, n)).read())]
    suites = [os.path.join("dev/test", n) for n in sorted(os.listdir(os.path.join(ROOT, "dev", "test")))
              if re.fullmatch(r"test_.*\.py", n)]
    check(len(tools) > 10 and len(suites) > 10,
          f"the tools importing llama_fp8 ({len(tools)}) and the Python suites ({len(suites)}) found")
    wrong = []
    for path in tools + suites:
        r = subprocess.run([sys.executable, "-S", "-E", os.path.join(ROOT, path)], capture_output=True, text=True,
                           cwd=tempfile.gettempdir())
        if not (r.returncode == 1 and NO_PACKAGE in r.stderr and "Traceback" not in r.stderr):
            wrong.append(f"{path}: exit {r.returncode}, {r.stderr.strip()[-300:]!r}")
    check(not wrong, f"each of the {len(tools) + len(suites)}, run without llama_fp8: exit 1, '{NO_PACKAGE}', "
                     "no traceback" + "".join(f"\n    {w}" for w in wrong))


# (folder, its README, what the README's rows must name, the rows' format): every entry a table row of its own
INDEXES = [
    ("scripts", "scripts/README.md", lambda name: name not in ("README.md", "__pycache__"), "| `{}` |"),
    ("dev/test", "dev/test/README.md", lambda name: name.endswith(".sh"), "| `{}` |"),
    ("dev/results", "dev/results/README.md", lambda name: name != "README.md", "| `{}` |"),
]


def test_indexes():
    for folder, readme, listed, row in INDEXES:
        text = open(os.path.join(ROOT, readme)).read()
        names = sorted(n for n in os.listdir(os.path.join(ROOT, folder)) if not n.startswith(".") and listed(n))
        missing = [n for n in names if row.format(n + ("/" if os.path.isdir(os.path.join(ROOT, folder, n)) else "")) not in text]
        check(names and not missing, f"{readme} has a row for each of the {len(names)} entries of {folder}/ it indexes"
                                     f" (missing: {', '.join(missing) or 'none'})")


def test_venv_in_venv(tmp):
    """scripts/venv.sh made from a python3 that is itself a virtual environment (the GPU image's torch
    one), in a tree of this pyproject.toml, an empty requirements.txt and a llama_fp8 of one module: .venv
    sees that environment's packages, as --system-site-packages alone would not, and imports the tree's
    llama_fp8 from anywhere, a module added to it since included (an editable install). pip's settings
    are the environment's: building the package takes a setuptools wheel from PyPI or PIP_FIND_LINKS."""
    root = os.path.join(tmp, "venv_in_venv")
    os.makedirs(os.path.join(root, "scripts"))
    os.makedirs(os.path.join(root, "llama_fp8"))
    shutil.copy(os.path.join(ROOT, "scripts", "venv.sh"), os.path.join(root, "scripts"))
    shutil.copy(os.path.join(ROOT, "pyproject.toml"), root)
    open(os.path.join(root, "requirements.txt"), "w").close()
    with open(os.path.join(root, "llama_fp8", "__init__.py"), "w") as f:
        f.write("WHERE = 'tree'\n")
    parent = os.path.join(tmp, "parent_env")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", parent], check=True)
    site = subprocess.run([os.path.join(parent, "bin", "python3"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    with open(os.path.join(site, "parent_only_module.py"), "w") as f:
        f.write("WHERE = 'parent'\n")
    # PIP_TIMEOUT, PIP_RETRIES: offline with no PIP_FIND_LINKS, pip gives up on PyPI in seconds. No PYTHONPATH: the
    # runners' (this repository's root, or a mutant's) would outrank .venv's install
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(PYTHON=os.path.join(parent, "bin", "python3"), PIP_TIMEOUT="10", PIP_RETRIES="1")
    r = subprocess.run(["bash", "scripts/venv.sh"], cwd=root, capture_output=True, text=True, env=env)
    offline = re.search(r"(No matching distribution|find a version that satisfies).*setuptools.*", r.stdout + r.stderr)
    if r.returncode != 0 and offline:
        print(f"not run: venv.sh's install of llama_fp8, offline without PIP_FIND_LINKS ({offline.group(0)})")
        return
    with open(os.path.join(root, "llama_fp8", "added.py"), "w") as f:
        f.write("WHERE = 'added'\n")
    code = ("import parent_only_module as m, llama_fp8, llama_fp8.added as a; "
            "print(m.WHERE, llama_fp8.WHERE, a.WHERE, llama_fp8.__file__)")
    got = subprocess.run([os.path.join(root, ".venv", "bin", "python3"), "-c", code],
                         capture_output=True, text=True, cwd=tmp, env=env) if r.returncode == 0 else r
    want = f"parent tree added {os.path.join(root, 'llama_fp8', '__init__.py')}"
    check(r.returncode == 0 and got.stdout.strip() == want,
          "venv.sh from a python3 in a virtual environment: .venv imports that environment's packages and the tree's "
          f"llama_fp8, editable: {got.stdout.strip()!r} (want {want!r})"
          f" ({(r.stdout + r.stderr + got.stderr).strip()[-300:]})")


def test_venv_stamp(tmp):
    """make venv (the Makefile's .venv/requirements.stamp) runs scripts/venv.sh again when requirements.txt or
    pyproject.toml is newer than the stamp, and not when neither is (make -n, in a copy of the Makefile)."""
    root = os.path.join(tmp, "venv_stamp")
    os.makedirs(os.path.join(root, ".venv"))
    shutil.copy(os.path.join(ROOT, "Makefile"), root)
    for name, age in (("requirements.txt", 100), ("pyproject.toml", 100), (".venv/requirements.stamp", 0)):
        open(os.path.join(root, name), "w").close()
        os.utime(os.path.join(root, name), (time.time() - age, time.time() - age))
    for newer, want in ((None, False), ("requirements.txt", True), ("pyproject.toml", True)):
        # no nvcc needed: CUDA_HOME given, the library probes off
        args = ["make", "-n", "CUDA_HOME=/nonexistent", "NO_CUDNN=1", "NO_NCCL=1", "NO_MPI=1"]
        r = subprocess.run(args + (["-W", newer] if newer else []) + ["venv"], cwd=root, capture_output=True, text=True)
        runs = "bash scripts/venv.sh" in r.stdout
        check(r.returncode == 0 and runs == want,
              f"make venv with {newer or 'nothing'} newer than .venv/requirements.stamp: "
              f"{'runs' if runs else 'does not run'} scripts/venv.sh (want {'it' if want else 'not'}), "
              f"exit {r.returncode} ({r.stdout.strip().splitlines()[-1:]})")


def test_get_data(tmp):
    """dev/data/get_data.sh SOURCE DEST, offline (a local source folder): a source missing files or
    holding a short or an altered one exits 1 naming each (a missing one too where DEST holds a cut-off
    copy of it), reports no success and puts no wrong or partial file in DEST; with this workplace's
    ../shared/data the copy is every .bin there byte for byte, and a rerun mends a file an interrupted
    copy left truncated and one deleted since."""
    script = os.path.join(ROOT, "dev", "data", "get_data.sh")
    listed = re.findall(r"^([0-9a-f]{32}) (\d+) (\S+)$", open(script).read(), re.M)
    names = [name for _, _, name in listed]
    if not check(len(names) > 2, f"get_data.sh lists the corpus's files with their md5 and size ({len(names)} listed)"):
        return

    def get_data(src, dest):
        r = subprocess.run(["bash", script, src, dest], capture_output=True, text=True)
        return r.returncode, r.stdout, r.stderr

    src, dest = os.path.join(tmp, "get_data_src"), os.path.join(tmp, "get_data_dest")
    os.makedirs(src)
    os.makedirs(dest)
    with open(os.path.join(dest, names[1]), "wb") as f:
        f.write(b"cut off")  # an interrupted earlier copy
    (_, short_bytes, short), (_, bytes_, altered) = listed[0], listed[-1]
    with open(os.path.join(src, short), "wb") as f:
        f.write(b"\0" * (int(short_bytes) - 2))  # a copy cut short
    with open(os.path.join(src, altered), "wb") as f:
        f.write(b"\0" * int(bytes_))  # its size, other bytes
    rc, out, err = get_data(src, dest)
    errors = dict(re.findall(r"^error: " + re.escape(src) + r"/(\S+): (.*)$", err, re.M))
    want = {name: "missing" for name in names[1:-1]}
    ok = rc == 1 and "holds all" not in out and {n: errors.get(n, "")[:7] for n in names[1:-1]} == want
    ok = ok and errors.get(short, "").startswith(f"{int(short_bytes) - 2} bytes") and errors.get(altered, "").startswith("md5 ")
    ok = ok and f"incomplete corpus: {len(names)} of its {len(names)} files missing or wrong" in err and os.listdir(dest) == [names[1]]
    check(ok, f"get_data.sh, a source missing {len(names) - 2} of the {len(names)} files (one cut off in DEST), one short, one altered: "
                                 f"exit {rc}, each named, nothing put in place ({err.strip().splitlines()[-1:]})")

    shared = os.path.join(ROOT, "..", "shared", "data")
    if not os.path.isdir(shared):
        print(f"not run: get_data.sh's full copy ({shared} is not here: this workplace's corpus)")
        return
    bins = sorted(f for f in os.listdir(shared) if f.endswith(".bin"))
    check(sorted(names) == bins, f"get_data.sh lists every .bin of ../shared/data ({len(names)} listed, {len(bins)} there)")
    same = lambda: [n for n in bins if not os.path.exists(os.path.join(dest, n)) or  # noqa: E731
                    not filecmp.cmp(os.path.join(shared, n), os.path.join(dest, n), shallow=False)]
    os.remove(os.path.join(dest, names[1]))
    rc, out, err = get_data(shared, dest)
    check(rc == 0 and f"holds all {len(bins)} files" in out and not same() and sorted(os.listdir(dest)) == bins,
          f"get_data.sh ../shared/data: exit {rc}, every file byte for byte (differing: {same()}) ({(out + err).splitlines()[:1]})")
    with open(os.path.join(dest, bins[0]), "r+b") as f:
        f.truncate(1000)  # an interrupted copy: newer than the source, as cp -u would keep it
    os.remove(os.path.join(dest, bins[-1]))
    rc, out, err = get_data(shared, dest)
    check(rc == 0 and f"2 copied from {shared}, {len(bins) - 2} already there" in out and not same(),
          f"get_data.sh again over a truncated and a deleted file: both copied, the rest kept ({(out + err).splitlines()[:1]})")


if __name__ == "__main__":
    # python3 dev/test/test_scripts.py [TEST ...]: only those (e.g. test_runner, as the mutations of
    # the runners name it: a mutant fails test_mutation_patches, its own patch being applied)
    tests = [test_scaling, test_refusals, test_benchmark_table, test_benchmark_table_hf, test_benchmark_no_package,
             test_benchmark_accum, test_benchmark_labels,
             test_compare_convergence,
             test_convergence_seeds, test_runner, test_mutation_runner, test_mutation_runner_cpu,
             test_mutation_runner_package, test_venv_in_venv, test_venv_stamp, test_get_data]
    chosen = sys.argv[1:] or ["test_mutation_patches", "test_indexes", "test_no_package"] + [t.__name__ for t in tests]
    unknown = [name for name in chosen if name not in globals() or not name.startswith("test_")]
    if unknown:
        sys.exit(f"error: no such test: {', '.join(unknown)}")
    if "test_indexes" in chosen:
        test_indexes()
    if "test_no_package" in chosen:
        test_no_package()
    with tempfile.TemporaryDirectory() as tmp:
        if "test_mutation_patches" in chosen:
            test_mutation_patches(tmp)
        for t in tests:
            if t.__name__ in chosen:
                t(tmp)
    sys.exit(summary())
