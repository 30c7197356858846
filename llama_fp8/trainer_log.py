"""The one reader of what train_llama_fp8 writes about a run: its main.log (parse_main_log), its
fp8.log (parse_fp8_log) and its standard output (parse_stdout). plot_log.py, plot_fp8.py,
compare_convergence.sh (through those two), test_multi_gpu.sh and benchmark.sh use it;
dev/test/test_trainer_log.py checks it on sample logs in the trainer's formats. Standard library only.

main.log (written by llmc/run_log.h, one call per event, as are stdout's lines and metrics.jsonl):
    # <GPU> precision <p> model <name> V .. L .. C .. NH .. NKV .. FF .. B .. T .. total_batch .. adam_moments ..
      (a trainer before -adam_moments wrote no adam_moments field: its moments were fp32)
    s:<step> trl:<train loss> norm:<grad norm> lr:<lr> ms:<step ms> tok/s:<tokens per s>
    s:<step> tel:<val loss>[ bpb:<bits per byte>]
    s:<step> hs_acc:<HellaSwag acc> hs_acc_norm:<acc_norm> hs_items:<items>
    sample: <token ids>
    fp8_fallback: s:<step> layer:<l> linear:<name> grain:<block|bf16|row> tensor:<x|w|dy> lost:<fraction> steps:<patience>
A resumed run appends to the same file and repeats steps after its checkpoint: when a train step
goes back, everything already read from that step on is dropped, so the latest attempt wins.
Comment, sample, fp8_fallback (a linear the fallback switched: docs/fp8_recipe.md), blank and malformed
(e.g. cut-off) lines are skipped; malformed ones are counted.

Standard output (the lines this reads; others are left alone), for the runs that write no log:
benchmark.sh's (-o '': no logs or checkpoints; its median line and device memory are on stdout only)
and compare_convergence.sh --eval-bf16's -x 0 evaluations (-x 0 writes nothing into -o):
    train_llama_fp8 | <GPU> | <precision> | model <name>: V .. L .. C .. NH .. NKV .. FF .. theta ..[ | tied embeddings] | <n>M params
    B <B> T <T> | total batch ... | AdamW moments <fp32|bf16> | master weights <fp32|bf16> | ... attention
    device memory allocated: <x> GiB[ per GPU (ZeRO-1)] | recompute <none|SwiGLU>[ | fp8 weight cache <on|off>][ | AdamW
      moments in host memory][ | resumed]
      (a trainer before 2026-12-05 ended the line after GiB[ per GPU (ZeRO-1)])
    step <s>/<n> | loss <l> | norm <g> | lr <lr> | <ms> ms | <tok/s> tok/s | MFU <m>[ | update SKIPPED ...]
    val loss <l>[ | bpb <bits per byte>][ over ...]
    hellaswag: acc <acc> acc_norm <acc_norm> (<n> items)
    stopped by <SIGNAL> after step <s> of <n>...
    median step <ms> ms over <k> steps after warm-up | <tok/s> tok/s | MFU <m> | device memory in use <x> GiB
"""
import math
import os
import re


class MainLog:
    """One parsed main.log: train[step] = {'trl':, 'norm':, 'lr':, 'ms':, 'tok/s':}, val[step] = loss,
    bpb[step] = bits per byte (runs with a decode table), hellaswag[step] = {'acc':, 'acc_norm':, 'items':}."""

    def __init__(self, path):
        self.path = path
        self.header = []   # the '#' lines, one per (re)start
        self.train = {}
        self.val = {}
        self.bpb = {}
        self.hellaswag = {}
        self.skipped = 0   # malformed lines

    def train_steps(self):
        return sorted(self.train)

    def val_steps(self):
        return sorted(self.val)

    def series(self, key):
        """(steps, values) of one train field, for the steps that have it."""
        steps = [s for s in sorted(self.train) if key in self.train[s]]
        return steps, [self.train[s][key] for s in steps]


def _fields(line):
    """'s:12 trl:4.5 tok/s:1000' -> {'s': '12', 'trl': '4.5', 'tok/s': '1000'}."""
    out = {}
    for tok in line.split():
        key, sep, val = tok.partition(":")
        if sep and key and val:
            out[key] = val
    return out


def parse_main_log(path):
    """A main.log, or a log directory holding one -> MainLog. OSError if it cannot be read."""
    if os.path.isdir(path):
        path = os.path.join(path, "main.log")
    log = MainLog(path)
    last_step = None
    with open(path, "r", errors="replace") as f:
        for raw in f:
            line = raw.strip()
            if not line:
                continue
            if line.startswith("#"):
                log.header.append(line[1:].strip())
                continue
            if not line.startswith("s:"):
                continue  # sample: lines and anything else the trainer may add
            kv = _fields(line)
            try:
                step = int(kv["s"])
            except (KeyError, ValueError):
                log.skipped += 1
                continue
            if "tel" in kv:
                try:
                    log.val[step] = float(kv["tel"])
                    if "bpb" in kv:
                        log.bpb[step] = float(kv["bpb"])
                except ValueError:
                    log.skipped += 1
                continue
            if "hs_acc" in kv:
                try:
                    log.hellaswag[step] = {"acc": float(kv["hs_acc"]), "acc_norm": float(kv["hs_acc_norm"]),
                                           "items": int(kv["hs_items"])}
                except (KeyError, ValueError):
                    log.skipped += 1
                continue
            if "trl" not in kv:
                log.skipped += 1
                continue
            rec = {}
            for key in ("trl", "norm", "lr", "ms", "tok/s"):
                if key in kv:
                    try:
                        rec[key] = float(kv[key])
                    except ValueError:
                        pass
            if "trl" not in rec or (not raw.endswith("\n") and "tok/s" not in rec):
                # no loss, or the cut-off last line of a run that died while writing it
                log.skipped += 1
                continue
            if last_step is not None and step <= last_step:
                # a resumed run re-does steps after its checkpoint: drop the abandoned attempt's
                # records from this step on (train, val, bpb, HellaSwag), keep the new ones
                log.train = {s: r for s, r in log.train.items() if s < step}
                log.val = {s: v for s, v in log.val.items() if s < step}
                log.bpb = {s: v for s, v in log.bpb.items() if s < step}
                log.hellaswag = {s: v for s, v in log.hellaswag.items() if s < step}
            log.train[step] = rec
            last_step = step
    return log


FP8_KINDS = ("x", "w", "dy")  # the fp8 tensors of a linear, as fp8.log names them


FP8_FIELDS = ("amax", "scale", "under", "sat")  # of each tensor kind: x_amax, ..., dy_sat


def parse_fp8_log(path):
    """An fp8.log (written with -fp8_log N: one line per linear per logged step, 's:<step> layer:<l>
    linear:<name> x_amax:<v> x_scale:<v> x_under:<f> x_sat:<f> w_amax:<v> ...') -> ({(layer, linear):
    {step: {'x_scale': v, 'dy_under': f, ...}}}, the number of malformed lines). *_under and *_sat are
    the fractions of the values that tensor had cast in that step that underflowed (non-zero, cast to
    fp8 zero) or saturated (clipped at the format's max); a log of a trainer before those counts has
    only the amax and scale keys. A resumed run appends: when the step goes back, what was read from
    that step on is dropped."""
    data, skipped, last_step = {}, 0, None
    with open(path, "r", errors="replace") as f:
        for raw in f:
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            kv = _fields(line)
            try:
                step, layer, linear = int(kv["s"]), int(kv["layer"]), kv["linear"]
            except (KeyError, ValueError):
                skipped += 1
                continue
            rec = {}
            for k in FP8_KINDS:
                for what in FP8_FIELDS:
                    key = f"{k}_{what}"
                    if key in kv:
                        try:
                            rec[key] = float(kv[key])
                        except ValueError:
                            pass
            if not rec:
                skipped += 1
                continue
            if last_step is not None and step < last_step:
                for series in data.values():
                    for s in [s for s in series if s >= step]:
                        del series[s]
            data.setdefault((layer, linear), {})[step] = rec
            last_step = step
    return data, skipped



# --- fp8 health: the tensors an fp8.log shows most underflow and saturation in ---

KIND_NAMES = dict(zip(FP8_KINDS, ("X", "W", "dY")))
LINEARS = ("qkv", "wo", "w13", "w2")
HEALTH = (("under", "underflow"), ("sat", "saturation"))  # the fp8.log field and its name


def tensor_rows(data):
    """The (layer, linear) keys of parse_fp8_log's data in the order of the model: layer by layer
    qkv wo w13 w2 (other names after them), the lm_head last."""
    order = LINEARS + ("lm_head",)
    return sorted(data, key=lambda r: (r[1] == "lm_head", r[0], order.index(r[1]) if r[1] in order else len(order), r[1]))


def tensor_name(layer, linear):
    return linear if linear == "lm_head" else f"layer {layer} {linear}"


def has_health(data):
    """Whether the log has the underflow/saturation fields (a trainer with fp8 health counts wrote it)."""
    return any(k.endswith("_under") for series in data.values() for rec in series.values() for k in rec)


def health_top(data, what, top=3):
    """The `top` tensors with the largest mean fraction `what` ('under' or 'sat') over their logged
    steps, largest first, ties in model order, tensors with none left out:
    [(mean, max, step of the max, logged steps, layer, linear, kind)]."""
    found = []
    for layer, linear in tensor_rows(data):
        series = data[(layer, linear)]
        for kind in FP8_KINDS:
            key = f"{kind}_{what}"
            vals = [(series[s][key], s) for s in sorted(series) if math.isfinite(series[s].get(key, math.nan))]
            mean = sum(v for v, _ in vals) / len(vals) if vals else 0.0
            if mean > 0:
                peak, peak_step = max(vals, key=lambda vs: vs[0])
                found.append((mean, peak, peak_step, len(vals), layer, linear, kind))
    found.sort(key=lambda t: -t[0])
    return found[:top]


def health_summary(data, top=3):
    """Markdown lines naming the `top` tensors with the most underflow and the most saturation
    (health_top); data must have those fields (has_health)."""
    lines = []
    for what, name in HEALTH:
        found = health_top(data, what, top)
        for i, (mean, peak, peak_step, n, layer, linear, kind) in enumerate(found, 1):
            lines.append(f"- {name} #{i}: {tensor_name(layer, linear)} {KIND_NAMES[kind]} {mean:.1e} of its values "
                         f"(mean over {n} logged steps; max {peak:.1e} at step {peak_step})")
        if not found:
            lines.append(f"- {name}: none, in any tensor at any logged step")
    return lines


# "model NAME: V .. FF ..": the trainer's config line; dev/reference/bench_torch.py prints the same
MODEL_DIMS = re.compile(r"model (\S+): V (\d+) L (\d+) C (\d+) NH (\d+) NKV (\d+) FF (\d+)")
DIM_NAMES = ("V", "L", "C", "NH", "NKV", "FF")
_CONFIG = re.compile(r"^train_llama_fp8 \| ([^|]+?) \| ([^|]+?) \| (.*)$", re.M)
_BATCH = re.compile(r"^B (\d+) T (\d+) \|(.*)$", re.M)
_ALLOCATED = re.compile(r"^device memory allocated: ([\d.]+) GiB(.*)$", re.M)
_STEP = re.compile(r"^step +(\d+)/(\d+) \| loss (\S+) \| norm (\S+) \| lr (\S+) \| (\S+) ms \| (\S+) tok/s \| MFU (\S+)(.*)$")
_VAL = re.compile(r"^val loss (\S+)(?: \| bpb (\S+))?")
_HELLASWAG = re.compile(r"^hellaswag: acc (\S+) acc_norm (\S+) \((\d+) items\)")
_STOPPED = re.compile(r"^stopped by (SIG[A-Z0-9]+) after step (\d+) of (\d+)", re.M)
_MEDIAN = re.compile(r"^median step ([\d.]+) ms over (\d+) steps .*?\| (\d+) tok/s \| MFU (.*?) \| "
                     r"device memory in use ([\d.]+) GiB", re.M)


def model_dims(text):
    """(model name, {'V':, 'L':, 'C':, 'NH':, 'NKV':, 'FF':}) from the first config line in text, or None."""
    m = MODEL_DIMS.search(text)
    return (m.group(1), dict(zip(DIM_NAMES, (int(g) for g in m.groups()[1:])))) if m else None


class TrainerOutput:
    """What one run printed. Every field is None (steps and val empty) when its line is missing."""

    def __init__(self):
        self.gpu = None             # 'NVIDIA H200', or '2 x NVIDIA H200 (-ngpu fork launcher)'
        self.precision = None       # 'bf16', 'fp8 (delayed scaling)', 'fp8 (current scaling)'
        self.model = None           # the preset or model file name
        self.dims = None            # {'V':, 'L':, 'C':, 'NH':, 'NKV':, 'FF':}
        self.tied = None            # True with tied embeddings
        self.B = self.T = None
        self.grad_accum = None      # micro-steps per optimizer step, from the batch line's '(grad accum K)'
        self.adam_moments = None    # 'fp32' or 'bf16'; None also when the batch line lacks it (a trainer before -adam_moments: fp32)
        self.master_weights = None  # 'fp32' or 'bf16'; None also without it in the batch line (before -master_weights: fp32)
        self.allocated_gib = None   # 'device memory allocated' (per GPU with ZeRO-1)
        self.recompute = None       # 'none' or 'SwiGLU' (-r 0, 1); None also for a trainer that did not print it
        self.fp8_weight_cache = None  # 'on' or 'off' (fp8 runs; None in bf16 and for a trainer that did not print it)
        self.moments_on_host = None   # True with -adam_offload 1, False without; None without a memory line
        self.steps = {}             # step -> {'loss':, 'norm':, 'lr':, 'ms':, 'tok/s':, 'mfu': str, 'skipped': bool}
        self.val = {}               # the step after which it was measured (0 before any) -> val loss
        self.bpb = {}               # the same steps -> bits per byte (runs with a decode table)
        self.hellaswag = {}         # the step after which it was scored (0 before any) -> {'acc':, 'acc_norm':, 'items':}
        self.stopped = None         # (signal name, step) for a run stopped by a signal
        self.median = None          # {'ms':, 'steps':, 'tok/s':, 'mfu': str, 'device_gib':}


def _field(fields, name):
    """The word after '| name ' in a line's ' | '-separated fields (the text after its head), or None."""
    m = re.search(r"\| %s (\S+) \|" % re.escape(name), fields + " |")
    return m.group(1) if m else None


def parse_stdout(text):
    """The trainer's standard output (a string) -> TrainerOutput. Of the lines printed once per run
    (config, batch, memory, stopped, median) the first counts; of step and val lines, the last one
    for each step (a resumed run printed into the same text)."""
    out = TrainerOutput()
    m = _CONFIG.search(text)
    if m:
        out.gpu, out.precision, rest = m.group(1), m.group(2), m.group(3)
        dims = model_dims(rest)
        if dims:
            out.model, out.dims = dims
        out.tied = "| tied embeddings |" in rest + " |"
    m = _BATCH.search(text)
    if m:
        out.B, out.T = int(m.group(1)), int(m.group(2))
        ga = re.search(r"\(grad accum (\d+)\)", m.group(3))
        out.grad_accum = int(ga.group(1)) if ga else None
        out.adam_moments = _field(m.group(3), "AdamW moments")
        out.master_weights = _field(m.group(3), "master weights")
    m = _ALLOCATED.search(text)
    if m:
        out.allocated_gib = float(m.group(1))
        out.recompute = _field(m.group(2), "recompute")
        out.fp8_weight_cache = _field(m.group(2), "fp8 weight cache")
        out.moments_on_host = "| AdamW moments in host memory |" in m.group(2) + " |"
    last = 0
    for line in text.splitlines():
        m = _STEP.match(line)
        if m:
            last = int(m.group(1))
            try:
                out.steps[last] = {"loss": float(m.group(3)), "norm": float(m.group(4)), "lr": float(m.group(5)),
                                   "ms": float(m.group(6)), "tok/s": float(m.group(7)), "mfu": m.group(8),
                                   "skipped": "update SKIPPED" in m.group(9)}
            except ValueError:
                pass
            continue
        m = _VAL.match(line)
        if m:
            try:
                out.val[last] = float(m.group(1))
                if m.group(2):
                    out.bpb[last] = float(m.group(2))
            except ValueError:
                pass
            continue
        m = _HELLASWAG.match(line)
        if m:
            try:
                out.hellaswag[last] = {"acc": float(m.group(1)), "acc_norm": float(m.group(2)), "items": int(m.group(3))}
            except ValueError:
                pass
    m = _STOPPED.search(text)
    if m:
        out.stopped = (m.group(1), int(m.group(2)))
    m = _MEDIAN.search(text)
    if m:
        out.median = {"ms": float(m.group(1)), "steps": int(m.group(2)), "tok/s": float(m.group(3)), "mfu": m.group(4),
                      "device_gib": float(m.group(5))}
    return out


# --- HellaSwag predictions: -hs_preds FILE (dev/reference/hellaswag_hf.py writes transformers' alike) ---

def read_hs_preds(path):
    """{item: (label, pred, pred_norm)} of a -hs_preds file: a '#' header, then per item 'item label
    pred pred_norm logprob0 .. logprob3'. A line that is not so raises ValueError naming it."""
    out = {}
    with open(path) as f:
        for n, line in enumerate(f, 1):
            if line.startswith("#") or not line.strip():
                continue
            w = line.split()
            try:
                out[int(w[0])] = (int(w[1]), int(w[2]), int(w[3]))
            except (IndexError, ValueError):
                raise ValueError(f"line {n}: not 'item label pred pred_norm ...'") from None
    return out


def hs_scores(preds):
    """(acc, acc_norm) of read_hs_preds' {item: (label, pred, pred_norm)}."""
    n = len(preds)
    return sum(p == l for l, p, _ in preds.values()) / n, sum(q == l for l, _, q in preds.values()) / n
