"""CPU checks of llama_fp8/trainer_log.py (the reader of the trainer's main.log, fp8.log and standard
output, used by plot_log.py, plot_fp8.py, compare_convergence.sh, benchmark.sh and
test_multi_gpu.sh), of plot_fp8.py's fp8 health modes and of scripts/compare_logs.py
(test_multi_gpu.sh's step-by-step comparison of two runs).

The sample logs are written here with the trainer's own format strings, read out of
train_llama_fp8.cu and llmc/run_log.h, so a change of format there shows up here: a main.log with a resumed run (the
repeated steps must replace the abandoned ones), sample lines, malformed and cut-off lines; one
resumed from a checkpoint before its last logged step, whose abandoned val, bpb and HellaSwag
records (the last at the last step) must all go; a
standard output with 2 GPUs, tied embeddings, llama3 RoPE scaling, bf16 AdamW moments and master weights, a skipped
update, val losses, a stop by SIGTERM and the median line; an fp8.log with a resumed run, a cut-off
line and the underflow/saturation fractions, and one of a trainer before those (it parses and plots
its scales; plot_fp8.py --health and --health-summary refuse it). On a crafted 3-layer fp8.log the
health summary must name the tensors worked out from the values written, and --health must write a
PNG (where matplotlib is installed; else say it is missing). Then real logs: a 400-step main.log of
dev/results and an H200 run's output in dev/test/fixtures/bench. compare_logs.py's fp8 mode must pass
a 2-rank fp8 run that tracks the 1-rank one, fail one that fell back to bf16 GEMMs (the old bound,
twice the fp8-vs-bf16 gap, passed it), and fail saying it cannot tell when fp8 barely moves the
loss. Last line: "N passed, N failed".

    python3 dev/test/test_trainer_log.py
"""
import contextlib
import importlib.util
import io
import math
import os
import re
import subprocess
import sys
import tempfile

from checks import check, load_tool, summary  # dev/test/checks.py
from llama_fp8 import trainer_log

compare_logs = load_tool("scripts/compare_logs.py")  # its comparisons, called here on sample logs

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


SOURCES = ("train_llama_fp8.cu", "llmc/run_log.h")  # the trainer, and its run log's events
SRC = "".join(open(os.path.join(ROOT, path)).read() for path in SOURCES)


def fmt(prefix):
    """The C string literal in the trainer's SOURCES that starts with prefix, with the literals C joins
    to it (adjacent ones, across line breaks), unescaped (printf formats %d %s %g %.6f %.4e %5d mean the
    same in Python's % operator)."""
    literal = r'"((?:[^"\\]|\\.)*)"'
    m = re.search(r'"' + re.escape(prefix) + r'(?:[^"\\]|\\.)*"(?:\s*' + literal + ')*', SRC)
    if m is None:
        raise SystemExit(f"test_trainer_log.py: no format string starting with {prefix!r} in {', '.join(SOURCES)}")
    text = "".join(re.findall(literal, m.group(0)))
    return text.replace("\\n", "\n").replace('\\"', '"')


TRAIN = fmt("s:%d trl:")
VAL = fmt("s:%d tel:")
VAL_BPB = fmt("s:%d tel:%.6f bpb:")
HELLASWAG = fmt("s:%d hs_acc:")
HEADER = fmt("# %s precision")
STEP = fmt("step %5d/%d | loss")
VAL_OUT = fmt("val loss %.6f%s\\n")
CONFIG = fmt("train_llama_fp8 | %s")
ROPE = fmt(" (llama3 scaling")
BATCH = fmt("B %d T %d | total batch")
MEMORY = fmt("device memory allocated:")
STOPPED = fmt("stopped by %s after step %d of %d. To continue")
MEDIAN = fmt("median step %.2f ms")
FP8_LINE = fmt("s:%d layer:%d linear:%s")
FP8_KIND = fmt(" %s_amax:%.6e %s_scale:%.6e")
FP8_KIND_OLD = " %s_amax:%.6e %s_scale:%.6e"  # write_fp8_log's before the fp8 health counts


def train_line(step, loss, norm=1.5, lr=3e-4, ms=12.5, tps=81920.0):
    return TRAIN % (step, loss, norm, lr, ms, tps)


def header_line(prec="fp8", gpus=0):
    return HEADER % ("NVIDIA H200", prec, "tiny", 32000, 4, 256, 4, 2, 768, 2, 128, 1024, "fp32", "") + \
        (" gpus %d\n" % gpus if gpus else "\n")


def test_main_log(tmp):
    d = os.path.join(tmp, "run")
    os.makedirs(d)
    lines = [header_line()]
    for s in range(1, 13):  # the first attempt: dies after step 12 (checkpoint at 8)
        lines.append(train_line(s, 10.0 - 0.1 * s))
        if s in (5, 10):
            lines.append(VAL % (s, 9.9 - 0.1 * s))
    lines.append("sample: 1 450 29871 13\n")
    lines.append(header_line())  # -y 1 from step 8's checkpoint, appending to the same file
    for s in range(9, 13):
        lines.append(train_line(s, 20.0 + s))
        if s == 10:
            lines.append(VAL % (s, 30.0))
    lines += ["s:oops trl:1.0\n", "s:13 norm:1.0 lr:3e-4\n", "\n", "s:13 trl:4.100000 norm:1.2 lr:3.0"]  # the last one cut off
    with open(os.path.join(d, "main.log"), "w") as f:
        f.write("".join(lines))
    log = trainer_log.parse_main_log(d)  # a log directory works as well as the file
    check(log.path == os.path.join(d, "main.log"), f"a directory is read as its main.log ({log.path})")
    check(log.train_steps() == list(range(1, 13)), f"train steps 1..12 ({log.train_steps()})")
    check([log.train[s]["trl"] for s in (1, 8, 9, 12)] == [9.9, 9.2, 29.0, 32.0],
          "steps 9-12 are the resumed run's, 1-8 the first run's")
    check(log.val == {5: 9.4, 10: 30.0}, f"val: step 5 of the first attempt, step 10 of the resumed one ({log.val})")
    r = log.train[3]
    check(r == {"trl": 9.7, "norm": 1.5, "lr": 3e-4, "ms": 12.5, "tok/s": 81920.0}, f"every field of a train line ({r})")
    check(len(log.header) == 2 and log.header[0].startswith("NVIDIA H200 precision fp8 model tiny V 32000"),
          f"the two '#' lines ({log.header[:1]})")
    check(log.skipped == 3, f"3 malformed lines counted (a bad step, no loss, cut off): {log.skipped}")
    steps, norms = log.series("norm")
    check(steps == list(range(1, 13)) and norms[0] == 1.5, "series('norm')")


def test_main_log_resumed_evals(tmp):
    """A resume from a checkpoint before the last logged step: the first attempt logged steps 1-12
    with a val loss, bpb and HellaSwag at 4, 8 and 12 (the last line of each kind at the last step),
    the second restarts from step 6's checkpoint and stops after step 10, its evaluation at 8 logged
    without bpb (a run without -tok). Every record of the abandoned steps 7-12 must go, whatever its kind."""
    path = os.path.join(tmp, "resumed_evals.log")
    lines = [header_line()]
    for s in range(1, 13):
        lines.append(train_line(s, 10.0 - 0.1 * s))
        if s % 4 == 0:
            lines += [VAL_BPB % (s, 9.0 - 0.1 * s, 3.0 - 0.1 * s), HELLASWAG % (s, 0.25 + 0.01 * s, 0.26 + 0.01 * s, 40)]
    lines.append(header_line())
    for s in range(7, 11):
        lines.append(train_line(s, 20.0 + s))
        if s == 8:
            lines.append(VAL % (s, 30.0))
    with open(path, "w") as f:
        f.write("".join(lines))
    log = trainer_log.parse_main_log(path)
    check(log.train_steps() == list(range(1, 11)) and log.train[7]["trl"] == 27.0 and log.train[6]["trl"] == 9.4,
          f"resumed from an earlier checkpoint: train steps 1-10, 7-10 the second attempt's ({log.train_steps()})")
    check(log.val == {4: 8.6, 8: 30.0}, f"val: the second attempt's step 8, the abandoned 12 gone ({log.val})")
    check(log.bpb == {4: 2.6}, f"bpb: only step 4's, the abandoned attempt's 8 and 12 gone ({log.bpb})")
    check(log.hellaswag == {4: {"acc": 0.29, "acc_norm": 0.3, "items": 40}},
          f"HellaSwag: only step 4's, the abandoned attempt's 8 and 12 gone ({log.hellaswag})")


def test_real_main_log():
    path = os.path.join(ROOT, "dev", "results", "shakespeare125m", "fp8_main.log")
    log = trainer_log.parse_main_log(path)
    check(len(log.train) == 400 and len(log.val) == 20 and log.skipped == 0,
          f"{os.path.relpath(path, ROOT)}: 400 steps, 20 val losses ({len(log.train)}, {len(log.val)}, {log.skipped} skipped)")
    check(log.train[1]["trl"] == 10.528811 and log.val[20] == 6.849063 and "precision fp8" in log.header[0],
          f"its first loss, first val loss and header ({log.train[1]['trl']}, {log.val.get(20)})")


def sample_stdout():
    rope = ROPE % (32.0, 1.0, 4.0, 8192)
    out = [CONFIG % ("2 x NVIDIA H200 (-ngpu fork launcher)", "fp8", " (delayed scaling)", "llama3.2-1b", 128256, 16, 2048,
                     32, 8, 8192, 500000.0, rope, " | tied embeddings", 1235.8),
           "attention: cuDNN forward plan for B=2 T=4096 NH=32 NKV=8 HS=64: engine 2, workspace 0.0 MiB\n",
           BATCH % (2, 4096, 16384, 1, 3, 6e-4, 100, 0.1, 0.1, 1.0, "bf16", "bf16", "cuDNN fused"),
           MEMORY % (41.25, " per GPU (ZeRO-1)", "SwiGLU", " | fp8 weight cache off", " | AdamW moments in host memory", ""),
           STEP % (1, 3, 11.9, 15.6847, 3e-5, 550.72, 29750, "2.1%", ""),
           STEP % (2, 3, 11.5, float("inf"), 6e-5, 22.5, 728165, "52.5%", " | update SKIPPED (non-finite gradient)"),
           VAL_OUT % (11.25, ""),
           STEP % (3, 3, 10.5, 2.2, 9e-5, 22.96, 713564, "51.5%", ""),
           "checkpoint written: log/model_00000003.bin\n",
           STOPPED % ("SIGTERM", 3, 3, "log/model_00000003.bin"),
           MEDIAN % (22.96, 1, 713564, "51.5%", 7.99, " (rank 0)")]
    return "".join(out)


def test_stdout():
    o = trainer_log.parse_stdout(sample_stdout())
    check(o.gpu == "2 x NVIDIA H200 (-ngpu fork launcher)" and o.precision == "fp8 (delayed scaling)",
          f"GPU and precision ({o.gpu!r}, {o.precision!r})")
    check(o.model == "llama3.2-1b" and o.dims == dict(V=128256, L=16, C=2048, NH=32, NKV=8, FF=8192) and o.tied is True,
          f"model, shape and tied embeddings behind the llama3 RoPE text ({o.model}, {o.dims}, {o.tied})")
    check((o.B, o.T, o.adam_moments, o.master_weights, o.allocated_gib) == (2, 4096, "bf16", "bf16", 41.25),
          f"B, T, AdamW moments, master weights, memory allocated ({o.B}, {o.T}, {o.adam_moments}, {o.master_weights},"
          f" {o.allocated_gib})")
    check((o.recompute, o.fp8_weight_cache, o.moments_on_host) == ("SwiGLU", "off", True),
          f"recompute, fp8 weight cache, moments in host memory ({o.recompute}, {o.fp8_weight_cache}, {o.moments_on_host})")
    bf16 = trainer_log.parse_stdout(MEMORY % (2.0, "", "none", "", "", " | resumed"))
    check((bf16.allocated_gib, bf16.recompute, bf16.fp8_weight_cache, bf16.moments_on_host) == (2.0, "none", None, False),
          f"a resumed bf16 run's memory line: no fp8 weight cache, moments on the GPU ({bf16.allocated_gib}, {bf16.recompute},"
          f" {bf16.fp8_weight_cache}, {bf16.moments_on_host})")
    check(sorted(o.steps) == [1, 2, 3] and o.steps[1]["loss"] == 11.9 and o.steps[1]["tok/s"] == 29750 and o.steps[1]["mfu"] == "2.1%",
          f"step lines ({o.steps.get(1)})")
    check(o.steps[2]["skipped"] and math.isinf(o.steps[2]["norm"]) and not o.steps[3]["skipped"], "a skipped update, its inf norm")
    check(o.val == {2: 11.25}, f"the val loss belongs to the step printed before it ({o.val})")
    check(o.stopped == ("SIGTERM", 3), f"stopped by SIGTERM after step 3 ({o.stopped})")
    check(o.median == {"ms": 22.96, "steps": 1, "tok/s": 713564.0, "mfu": "51.5%", "device_gib": 7.99}, f"the median line ({o.median})")
    check(o.bpb == {} and o.hellaswag == {}, f"no bpb or HellaSwag where none was printed ({o.bpb}, {o.hellaswag})")
    # a real -x 0 run's output (NVIDIA H200, 2026-12-02): the val loss with its bpb, then HellaSwag, both before any step
    real = trainer_log.parse_stdout(open(os.path.join(ROOT, "dev", "results", "hellaswag_smollm2", "before_bf16.log")).read())
    check(real.val == {0: 3.436554} and real.bpb == {0: 1.2475} and real.hellaswag == {0: {"acc": 0.3358, "acc_norm": 0.407, "items": 10042}},
          f"-x 0's val loss, bpb and HellaSwag lines ({real.val}, {real.bpb}, {real.hellaswag})")
    untied = trainer_log.parse_stdout(CONFIG % ("NVIDIA H200", "bf16", "", "125m", 32000, 12, 768, 12, 12, 2048, 10000.0, "", "", 134.1))
    check(untied.tied is False and untied.B is None and untied.median is None and not untied.steps,
          "untied; the lines a run did not print are None")


def test_real_stdout():
    bench = os.path.join(ROOT, "dev", "test", "fixtures", "bench")
    o = trainer_log.parse_stdout(open(os.path.join(bench, "ours-fp8-bf16m.log")).read())
    check((o.gpu, o.precision, o.model, o.B, o.T, o.adam_moments, o.allocated_gib) ==
          ("NVIDIA H200", "fp8 (delayed scaling)", "llama2-7b", 2, 4096, "bf16", 104.81),
          f"H200 fp8 run: its config ({o.gpu}, {o.precision}, {o.model}, {o.B}, {o.T}, {o.adam_moments}, {o.allocated_gib})")
    check(o.recompute is None and o.fp8_weight_cache is None, "a log from before the memory line named -r and the cache: None")
    check(len(o.steps) == 13 and o.median["tok/s"] == 20102 and o.median["device_gib"] == 105.51 and o.tied is False,
          f"H200 fp8 run: 13 steps and the median line ({len(o.steps)}, {o.median})")
    torch_text = open(os.path.join(bench, "torch-bf16.log")).read()
    t = trainer_log.parse_stdout(torch_text)
    check(t.gpu is None and not t.steps and trainer_log.model_dims(torch_text)[0] == "llama2-7b",
          "PyTorch's output: no trainer lines, but its model line reads the same")


def fp8_line(step, layer, linear, values, kind_fmt=FP8_KIND):
    """One fp8.log line as write_fp8_log prints it (or an older trainer, with kind_fmt=FP8_KIND_OLD);
    values: {kind: {field: v}} with (at least) the fields kind_fmt names, amax, scale, under, sat."""
    fields = re.findall(r"%s_(\w+):", kind_fmt)
    return FP8_LINE % (step, layer, linear) + \
        "".join(kind_fmt % sum(((k, v[f]) for f in fields), ()) for k, v in values.items()) + "\n"


def run_plot_fp8(*args):
    return subprocess.run([sys.executable, os.path.join(ROOT, "scripts", "plot_fp8.py"), *args], capture_output=True, text=True)


def fp8_values(step):
    """A linear's fields at a logged step (amax and scale of each kind, the fraction that underflowed
    and that saturated), all moving with the step."""
    return {"x": dict(amax=1.5 * step, scale=448 / (1.5 * step), under=1e-4 * step, sat=0.0),
            "w": dict(amax=0.04, scale=448 / 0.04, under=0.0, sat=0.0),
            "dy": dict(amax=2e-5 * step, scale=57344 / (2e-5 * step), under=3e-3, sat=1e-6 * step)}


def test_fp8_log(tmp):
    path = os.path.join(tmp, "fp8.log")
    with open(path, "w") as f:
        for step in (10, 20, 30):
            for layer in (0, 1):
                for linear in ("qkv", "w2"):
                    f.write(fp8_line(step, layer, linear, fp8_values(step)))
        f.write("s:40 layer:0 linear:qkv x_amax:\n")  # cut off
        for layer in (0, 1):  # resumed from step 20: step 30 was redone
            for linear in ("qkv", "w2"):
                f.write(fp8_line(30, layer, linear, fp8_values(31)))
    data, skipped = trainer_log.parse_fp8_log(path)
    check(sorted(data) == [(0, "qkv"), (0, "w2"), (1, "qkv"), (1, "w2")], f"fp8.log: the (layer, linear) series {sorted(data)}")
    series = data[(1, "w2")]
    check(sorted(series) == [10, 20, 30], f"fp8.log: steps {sorted(series)}")
    check(abs(series[30]["dy_amax"] - 2e-5 * 31) < 1e-9 and abs(series[10]["x_scale"] - 448 / 15) < 1e-4,
          f"fp8.log: values, the resumed run's step 30 kept ({series[30]})")
    check(abs(series[10]["x_under"] - 1e-3) < 1e-12 and abs(series[30]["dy_sat"] - 3.1e-5) < 1e-15 and series[20]["w_sat"] == 0.0,
          f"fp8.log: the underflow and saturation fractions ({series[30]})")
    check(set(series[20]) == {f"{k}_{w}" for k in trainer_log.FP8_KINDS for w in trainer_log.FP8_FIELDS},
          f"fp8.log: fields {sorted(series[20])}")
    check(skipped == 1, f"fp8.log: the cut-off line skipped ({skipped})")
    check(trainer_log.has_health(data), "fp8.log: has the health fields")

    # a resume from a checkpoint before the last logged step: the abandoned attempt's later steps go
    earlier = os.path.join(tmp, "fp8_resumed_earlier.log")
    with open(earlier, "w") as f:
        for step in (10, 20, 30, 40):
            f.write(fp8_line(step, 0, "qkv", fp8_values(step)))
        f.write(fp8_line(30, 0, "qkv", fp8_values(31)))  # resumed from step 20, stopped after logging step 30
    series = trainer_log.parse_fp8_log(earlier)[0][(0, "qkv")]
    check(sorted(series) == [10, 20, 30] and abs(series[30]["dy_amax"] - 2e-5 * 31) < 1e-9,
          f"fp8.log resumed before its last logged step: steps {sorted(series)}, step 30 the resumed run's, the abandoned 40 dropped")

    old = os.path.join(tmp, "fp8_old.log")
    with open(old, "w") as f:
        for step in (10, 20):
            f.write(fp8_line(step, 0, "qkv", fp8_values(step), FP8_KIND_OLD))
    data, skipped = trainer_log.parse_fp8_log(old)
    rec = data[(0, "qkv")][20]
    check(sorted(data[(0, "qkv")]) == [10, 20] and skipped == 0 and abs(rec["x_amax"] - 30) < 1e-9 and
          set(rec) == {f"{k}_{w}" for k in trainer_log.FP8_KINDS for w in ("amax", "scale")} and not trainer_log.has_health(data),
          f"fp8.log of a trainer before the health counts: amax and scale, no health ({rec})")
    for mode in ("--health", "--health-summary"):
        r = run_plot_fp8(old, mode, "--out", os.path.join(tmp, "fp8_old_health.png"))
        check(r.returncode == 1 and "no underflow/saturation fields: written by a trainer before fp8 health counts" in r.stderr,
              f"plot_fp8.py {mode} refuses that log ({r.stderr.strip()!r})")
    r = run_plot_fp8(old, "--layers", "0", "--linears", "qkv", "--out", os.path.join(tmp, "fp8_old.png"))
    check(r.returncode == 0 or "missing Python package 'matplotlib'" in r.stderr, f"that log still plots its scales ({r.stderr.strip()!r})")


KIND_LABEL = {"x": "X", "w": "W", "dy": "dY"}


def test_fp8_health(tmp):
    """A 3-layer log with an fp8 lm_head, 5 logged steps. Underflow: every tensor some (no two the
    same), and one with a spike at one step (the largest max, not the largest mean); saturation: two
    tensors only. What the summary must name is worked out here from the values written."""
    steps = (10, 20, 30, 40, 50)
    linears = [(l, lin) for l in range(3) for lin in ("qkv", "wo", "w13", "w2")] + [(0, "lm_head")]
    tensors = [(l, lin, k) for l, lin in linears for k in trainer_log.FP8_KINDS]
    spike = (1, "wo", "w")
    written = {"under": {}, "sat": {}}
    for i, t in enumerate(tensors):
        for j, step in enumerate(steps):
            under = 1e-3 if t == spike and step == 30 else 0.0 if t == spike else ((37 * i) % 41 + 1) * 1e-5 * (1 + 0.25 * j)
            sat = 2e-6 if t == (0, "lm_head", "dy") else 4e-5 if t == (2, "w2", "x") and step == 40 else 0.0
            written["under"].setdefault(t, {})[step] = float("%.6e" % under)
            written["sat"].setdefault(t, {})[step] = float("%.6e" % sat)
    path = os.path.join(tmp, "fp8_health.log")
    with open(path, "w") as f:
        for step in steps:
            for l, lin in linears:
                f.write(fp8_line(step, l, lin, {k: dict(amax=1.0, scale=448.0, under=written["under"][(l, lin, k)][step],
                                                        sat=written["sat"][(l, lin, k)][step]) for k in trainer_log.FP8_KINDS}))
    data, _ = trainer_log.parse_fp8_log(path)

    def expected(what):
        means = {t: sum(v.values()) / len(v) for t, v in written[what].items()}
        top = sorted((t for t in tensors if means[t] > 0), key=lambda t: -means[t])[:3]
        return [(t, means[t], max(written[what][t].values()), max(written[what][t], key=written[what][t].get)) for t in top]

    lines = trainer_log.health_summary(data)
    for what, name in (("under", "underflow"), ("sat", "saturation")):
        exp, got = expected(what), trainer_log.health_top(data, what)
        check([(l, lin, k) for *_, l, lin, k in got] == [t for t, *_ in exp] and
              all(math.isclose(g[0], e[1]) and g[1:4] == (e[2], e[3], len(steps)) for g, e in zip(got, exp)),
              f"health_top {what}: the tensors of the largest means, their max and its step ({got})")
        want = [f"- {name} #{i}: {lin if lin == 'lm_head' else f'layer {l} {lin}'} {KIND_LABEL[k]} {mean:.1e} of its values "
                f"(mean over {len(steps)} logged steps; max {peak:.1e} at step {s})" for i, ((l, lin, k), mean, peak, s) in enumerate(exp, 1)]
        check([ln for ln in lines if ln.startswith(f"- {name} #")] == want, f"health summary names them: {want}")
    spike_max = max(written["under"][spike].values())
    check(spike_max > max(max(v.values()) for t, v in written["under"].items() if t != spike) and
          expected("under")[0][0] != spike, "(the crafted spike has the largest max, not the largest mean)")
    check(len(expected("sat")) == 2 and expected("sat")[0][0] == (2, "w2", "x"), "(two tensors saturate, the one-step one most)")
    for rec in data[(2, "w2")].values():
        rec["x_sat"] = 0.0
    for rec in data[(0, "lm_head")].values():
        rec["dy_sat"] = 0.0
    check(trainer_log.health_summary(data)[-1] == "- saturation: none, in any tensor at any logged step",
          "health summary without any saturation says so")

    r = run_plot_fp8(path, "--health-summary")
    check(r.returncode == 0 and r.stdout.splitlines() == lines, f"plot_fp8.py --health-summary prints them ({r.stdout!r} {r.stderr!r})")
    png = os.path.join(tmp, "fp8_health.png")
    r = run_plot_fp8(path, "--health", "--out", png)
    if importlib.util.find_spec("matplotlib"):
        ok = r.returncode == 0 and open(png, "rb").read(8) == b"\x89PNG\r\n\x1a\n"
        check(ok, f"plot_fp8.py --health writes a PNG ({r.stdout!r} {r.stderr!r})")
    else:
        check(r.returncode != 0 and "missing Python package 'matplotlib'" in r.stderr,
              f"plot_fp8.py --health without matplotlib says so (the PNG itself is not checked here) ({r.stderr!r})")


def write_log(path, losses, norms, vals):
    with open(path, "w") as f:
        f.write(header_line())
        for s, (l, n) in enumerate(zip(losses, norms), 1):
            f.write(train_line(s, l, n))
            if s in vals:
                f.write(VAL % (s, vals[s]))


def run_compare(*argv):
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        rc = compare_logs.main([str(a) for a in argv])
    return rc, buf.getvalue().strip()


def test_compare(tmp):
    """20 steps shaped like test_multi_gpu.sh's: the bf16 loss falls from 10.4; fp8 moves it by up to
    gap and two ranks move either by up to noise (both relative, growing with the step)."""
    def run(prec_gap, noise, seed):
        losses = [(10.4 - 0.2 * s) * (1 + prec_gap * s / 20) * (1 + noise * s / 20 * math.cos(seed * s)) for s in range(1, 21)]
        norms = [2.0 * (1 + 0.01 * prec_gap / 1e-3 * math.sin(s)) * (1 + 5 * noise * s / 20 * math.sin(seed * s)) for s in range(1, 21)]
        return losses, norms, {10: losses[9] * 1.01, 20: losses[19] * 1.01}

    p = lambda name: os.path.join(tmp, name + ".log")
    write_log(p("r1_bf16"), *run(0.0, 0.0, 1))
    write_log(p("r2_bf16"), *run(0.0, 2e-5, 3))
    write_log(p("r1_fp8"), *run(1e-3, 0.0, 1))
    write_log(p("r2_fp8"), *run(1e-3, 2e-5, 3))          # a correct 2-rank fp8 run
    write_log(p("r2_fp8_as_bf16"), *run(0.0, 2e-5, 3))   # GEMMs fell back to bf16: the bf16 trajectory
    write_log(p("r1_fp8_small"), *run(5e-5, 0.0, 1))     # fp8 moving the loss less than 4 x the noise
    write_log(p("r2_fp8_small"), *run(5e-5, 2e-5, 3))
    fp8 = ("fp8", 1e-3, 1e-2, 5e-2, 0.25, p("r1_bf16"), p("r2_bf16"))

    rc, out = run_compare(p("r2_fp8"), p("r1_fp8"), *fp8)
    check(rc == 0 and "fp8 vs bf16 (1 rank) up to" in out, f"fp8: a 2-rank run tracking the 1-rank one passes ({out})")
    rc, out = run_compare(p("r2_fp8_as_bf16"), p("r1_fp8"), *fp8)
    check(rc == 1 and "are its GEMMs fp8?" in out, f"fp8: a 2-rank run with bf16 GEMMs fails ({out})")
    # what the old bound (twice the gap) made of it: every difference is within one gap
    gap = compare_logs.running_max_diff(compare_logs.values(p("r1_fp8")), compare_logs.values(p("r1_bf16")))
    A, B = compare_logs.values(p("r2_fp8_as_bf16")), compare_logs.values(p("r1_fp8"))
    check(all(compare_logs.rel(A[k], B[k]) <= 2 * gap[k] + 1e-6 for k in A if k[1] > 1 and k[0] != "norm"),
          "(the old bound, 2 x the gap, passes that run by construction)")
    rc, out = run_compare(p("r2_fp8_small"), p("r1_fp8_small"), "fp8", 1e-3, 1e-2, 5e-2, 0.25, p("r1_bf16"), p("r2_bf16"))
    check(rc == 1 and out.startswith("cannot tell"), f"fp8: a gap within 4 x the bf16 noise fails, saying it cannot tell ({out})")

    rc, out = run_compare(p("r2_bf16"), p("r1_bf16"), "tol", 1e-5, 2e-2, 1e-3, 5e-2)
    check(rc == 0 and "max rel diff trl" in out, f"tol: bf16 2 ranks vs 1 within 2e-2 ({out})")
    losses, norms, vals = run(0.0, 0.0, 1)
    norms[4] *= 2  # a lost rank's gradient
    write_log(p("r2_bf16_half"), losses, norms, vals)
    rc, out = run_compare(p("r2_bf16_half"), p("r1_bf16"), "tol", 1e-5, 2e-2, 1e-3, 5e-2)
    check(rc == 1 and out.startswith("norm at step 5"), f"tol: a norm twice as large fails ({out})")

    rc, out = run_compare(p("r1_fp8"), p("r1_fp8"), "exact")
    check(rc == 0 and out == "identical", f"exact: a log against itself ({out})")
    rc, out = run_compare(p("r2_bf16"), p("r1_bf16"), "exact")
    check(rc == 1 and "at step" in out, f"exact: another run fails ({out})")
    with open(p("nan_a"), "w") as f:
        f.write(train_line(1, float("nan"), 1.0) + train_line(2, 9.0, float("inf")))
    rc, out = run_compare(p("nan_a"), p("nan_a"), "exact")
    check(rc == 0, f"exact: nan and inf print the same, so they are the same ({out})")
    with open(p("short"), "w") as f:
        f.write(train_line(1, 10.0))
    rc, out = run_compare(p("short"), p("r1_bf16"), "exact")
    check(rc == 1 and out.startswith("different or missing steps"), f"exact: missing steps fail ({out})")
    rc, out = run_compare(p("nope"), p("r1_bf16"), "exact")
    check(rc == 2 and "No such file" in out, f"an unreadable log exits 2 ({out})")
    rc, out = run_compare(p("r1_bf16"), p("r1_bf16"), "tol", 1e-5)
    check(rc == 2 and out.startswith("usage"), "too few tolerances: usage, exit 2")


def test_compare_health(tmp):
    """compare_logs.py health: 2 ranks vs 1 at the first logged step, on fp8.logs in the trainer's format."""
    def write(path, w_under=2e-5, x_scale=1.0, dy_scale=1.0, fmt=FP8_KIND, steps=(1, 2)):
        with open(path, "w") as f:
            for step in steps:
                for layer in (0, 1):
                    for i, linear in enumerate(("qkv", "wo", "w13", "w2")):
                        v = fp8_values(step)
                        v["w"]["under"] = w_under * (i + 1)
                        v["x"]["under"] *= x_scale * (layer + 1)
                        v["dy"]["under"] *= dy_scale
                        f.write(fp8_line(step, layer, linear, v, fmt))

    p = lambda name: os.path.join(tmp, name + ".fp8.log")
    write(p("one"))
    write(p("two"), x_scale=1.2, dy_scale=0.9)  # other tokens, other live scales: close, not equal
    rc, out = run_compare(p("two"), p("one"), "health")
    check(rc == 0 and "W equal (8 non-zero" in out and "x_under x1.200" in out, f"health: a 2-rank run like the 1-rank one passes ({out})")
    write(p("two_w"), w_under=4e-5)  # every rank's W counts summed, divided by one rank's values
    rc, out = run_compare(p("two_w"), p("one"), "health")
    check(rc == 1 and "w_under" in out and "same fraction" in out, f"health: W fractions twice as large fail ({out})")
    write(p("two_half"), x_scale=0.5, dy_scale=0.5)  # rank 1's counts lost
    rc, out = run_compare(p("two_half"), p("one"), "health")
    check(rc == 1 and out.startswith("x_under summed"), f"health: X underflows halved fail ({out})")
    write(p("one_zero"), w_under=0.0)
    write(p("two_zero"), w_under=0.0)
    rc, out = run_compare(p("two_zero"), p("one_zero"), "health")
    check(rc == 1 and out.startswith("cannot tell"), f"health: no W count at all cannot tell ({out})")
    write(p("two_late"), steps=(2,))  # the first logged step is step 2 here, step 1 there: other values
    rc, out = run_compare(p("two_late"), p("one"), "health")
    check(rc == 1 and out.startswith("first logged steps differ"), f"health: logs whose first steps differ fail ({out})")
    write(p("old"), fmt=FP8_KIND_OLD)
    rc, out = run_compare(p("old"), p("one"), "health")
    check(rc == 2 and "no underflow/saturation fields" in out, f"health: a log without the fields exits 2 ({out})")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        test_main_log(tmp)
        test_main_log_resumed_evals(tmp)
        test_real_main_log()
        test_stdout()
        test_real_stdout()
        test_compare(tmp)
        test_fp8_log(tmp)
        test_fp8_health(tmp)
        test_compare_health(tmp)
    sys.exit(summary())
