#!/usr/bin/env python3
"""
PyTorch speed reference for train_llama_fp8: the same Llama (dev/test/README.md, presets of
llmc/llama_config.h; with tied embeddings, smollm2-135m, there is no lm_head and the logits read wte),
trained with AdamW, timed per step. Two precisions:

  --precision bf16   bf16 parameters, gradients and AdamW state; every matmul in bf16
                     (the "PyTorch + torch.compile, bf16" row of docs/baselines.md)
  --precision fp8    the same, but every block linear (qkv, wo, w13, w2) runs its three GEMMs through
                     torch._scaled_mm with per-tensor dynamic (current) scaling, torchao-style
                     "tensorwise": X and W in E4M3 (forward, fast accumulation), dY in E5M2
                     (backward, full accumulation). The lm_head stays bf16.

  python3 dev/reference/bench_torch.py --model llama2-7b --B 2 --T 4096 --precision fp8
  python3 dev/reference/bench_torch.py --model tiny --B 2 --T 128 --steps 3 --no-compile   # CPU logic check

Timing: --warmup steps (torch.compile compiles in the first), then --steps steps, each bracketed by
CUDA events; reports the median. Model FLOPs follow docs/baselines.md: 6 * (params - embedding) per token
plus causal attention counted half (6 * L * T * C per token), from llama_fp8/model_flops.py, the
trainer's formula (llmc/mfu.h). Peak memory is
torch.cuda.max_memory_allocated over the timed steps; "device" memory is what the whole GPU has in use
at the end (cudaMemGetInfo, i.e. allocator cache and CUDA context included), the number our trainer
prints. The last line is machine-readable:

  RESULT system=torch-fp8 model=llama2-7b B=2 T=4096 tok_s=18228 tflops=781.2 mem_gib=65.60 ...

with tok_s=OOM (out of memory) or tok_s=FAIL (any other error) when the run did not finish.
dev/reference/bench_hf.py (transformers' own model) uses this file's presets, timing loop
(time_steps) and result line (run_and_report). No data is read: the batch is random tokens (speed does not depend on them).
"""
import argparse
import importlib.util
import math
import statistics
import sys
import time

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

import torch
import torch.nn as nn
import torch.nn.functional as F

from llama_fp8 import model_flops  # the model FLOPs of llmc/mfu.h, which benchmark.sh uses too

# name: (V, L, C, NH, NKV, FF, rope_theta, max_T, tied), as config_from_preset in llmc/llama_config.h
# (dev/test/test_model_flops.py checks that they agree); those without RoPE scaling, which this
# model lacks. dev/reference/bench_hf.py builds its transformers configs from the same table.
PRESETS = {
    "tiny": (32000, 4, 256, 4, 2, 768, 10000.0, 256, 0),
    "125m": (32000, 12, 768, 12, 12, 2048, 10000.0, 1024, 0),
    "1b": (32000, 18, 2048, 16, 16, 5632, 10000.0, 2048, 0),
    "llama2-7b": (32000, 32, 4096, 32, 32, 11008, 10000.0, 4096, 0),
    "llama3-8b": (128256, 32, 4096, 32, 8, 14336, 500000.0, 8192, 0),
    "smollm2-135m": (49152, 30, 576, 9, 3, 1536, 100000.0, 8192, 1),
}
NORM_EPS = 1e-5
GIB = 1024.0 ** 3


class Cfg:
    def __init__(self, name):
        self.name = name
        self.V, self.L, self.C, self.NH, self.NKV, self.FF, self.rope_theta, self.max_T, tied = PRESETS[name]
        self.tied = bool(tied)   # lm_head is wte (no lm_head tensor)
        self.HS = self.C // self.NH
        self.QKV = (self.NH + 2 * self.NKV) * self.HS

    def num_params(self):
        return model_flops.num_params(self.V, self.L, self.C, self.NH, self.NKV, self.FF, self.tied)

    def flops_per_token(self, T):
        """As the trainer counts them: with tied embeddings the lm_head is the embedding, left out."""
        return model_flops.flops_per_token(self.V, self.L, self.C, self.NH, self.NKV, self.FF, T, self.tied)

    def model_line(self, nparams):
        """The trainer's "model NAME: V .. | <n>M params" (llama_fp8/trainer_log.py reads it)."""
        return "model %s: V %d L %d C %d NH %d NKV %d FF %d theta %g%s | %.1fM params" % (
            self.name, self.V, self.L, self.C, self.NH, self.NKV, self.FF, self.rope_theta,
            " | tied embeddings" if self.tied else "", nparams / 1e6)


# ----------------------------------------------------------------------------------------------
# fp8 linear: Y = X W^T with all three GEMMs in fp8 (tensorwise dynamic scaling)

E4M3, E5M2 = torch.float8_e4m3fn, torch.float8_e5m2


def to_fp8(t, dtype):
    """Per-tensor current scaling: scale = fp8_max / amax(t); returns (codes, 1/scale as fp32 0-dim)."""
    fmax = torch.finfo(dtype).max
    amax = t.detach().abs().max().float()
    scale = fmax / torch.clamp(amax, min=1e-12)
    q = (t.float() * scale).clamp(-fmax, fmax).to(dtype)   # saturate: the cast alone does not
    return q, scale.reciprocal()


def col_major(t):
    """The same matrix stored column-major (what _scaled_mm wants for its second operand)."""
    return t.t().contiguous().t()


class Fp8Matmul(torch.autograd.Function):
    """fprop  Y  = Xq  Wq^T  (E4M3 x E4M3, fast accumulation)
       dgrad dX  = dYq Wq    (E5M2 x E4M3)
       wgrad dW  = dYq^T Xq  (E5M2 x E4M3)
    X and W are cast afresh every forward; their fp8 copies are what backward keeps (not bf16)."""

    @staticmethod
    def forward(ctx, x, w):
        x2 = x.reshape(-1, x.shape[-1])
        xq, sx_inv = to_fp8(x2, E4M3)
        wq, sw_inv = to_fp8(w, E4M3)
        # wq is (N, K) row-major, so wq.t() is the (K, N) column-major operand _scaled_mm wants
        y = torch._scaled_mm(xq, wq.t(), scale_a=sx_inv, scale_b=sw_inv, out_dtype=x.dtype,
                             use_fast_accum=True)
        ctx.save_for_backward(xq, sx_inv, wq, sw_inv)
        ctx.x_shape, ctx.w_dtype = x.shape, w.dtype
        return y.reshape(*x.shape[:-1], w.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xq, sx_inv, wq, sw_inv = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1])
        dyq, sdy_inv = to_fp8(dy2, E5M2)
        dx = torch._scaled_mm(dyq, col_major(wq), scale_a=sdy_inv, scale_b=sw_inv,
                              out_dtype=dy.dtype, use_fast_accum=False)
        dw = torch._scaled_mm(dyq.t().contiguous(), col_major(xq), scale_a=sdy_inv, scale_b=sx_inv,
                              out_dtype=ctx.w_dtype, use_fast_accum=False)
        return dx.reshape(ctx.x_shape), dw


def fp8_selfcheck(device):
    """One fp8 linear, forward and backward, against the same math in fp32: a wrong layout or a
    swapped scale shows as an error of order 1, while fp8 rounding gives a few percent."""
    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(256, 512, device=device, generator=g).to(torch.bfloat16).requires_grad_(True)
    w = (3.0 * torch.randn(384, 512, device=device, generator=g)).to(torch.bfloat16).requires_grad_(True)
    dy = (1e-3 * torch.randn(256, 384, device=device, generator=g)).to(torch.bfloat16)
    y = Fp8Matmul.apply(x, w)
    y.backward(dy)
    xf, wf, dyf = x.detach().float(), w.detach().float(), dy.float()
    rel = lambda a, b: ((a.float() - b).norm() / b.norm()).item()
    errs = (rel(y, xf @ wf.t()), rel(x.grad, dyf @ wf), rel(w.grad, dyf.t() @ xf))
    print("fp8 linear self-check (relative error vs fp32): y %.4f dx %.4f dw %.4f" % errs)
    if not all(e < 0.15 for e in errs):
        raise RuntimeError("fp8 linear self-check failed: errors %s are far above fp8 rounding" % (errs,))


# ----------------------------------------------------------------------------------------------
# model (dev/test/README.md)

def rmsnorm(x, w):
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + NORM_EPS)
    return (y * w.float()).to(x.dtype)


def rope(x, cos, sin):
    """x (B, T, H, HS): adjacent pairs (2i, 2i+1) rotate by t * theta^(-2i/HS)."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.stack([x0 * c - x1 * s, x0 * s + x1 * c], dim=-1).flatten(-2).to(x.dtype)


class Block(nn.Module):
    def __init__(self, cfg, fp8, dtype, device):
        super().__init__()
        C, FF, QKV = cfg.C, cfg.FF, cfg.QKV
        p = lambda *shape: nn.Parameter(torch.empty(*shape, dtype=dtype, device=device))
        self.cfg, self.fp8 = cfg, fp8
        self.ln1w, self.wqkv, self.wo = p(C), p(QKV, C), p(C, cfg.NH * cfg.HS)
        self.ln2w, self.w13, self.w2 = p(C), p(2 * FF, C), p(C, FF)

    def linear(self, x, w):
        return Fp8Matmul.apply(x, w) if self.fp8 else F.linear(x, w)

    def forward(self, x, cos, sin):
        cfg = self.cfg
        B, T, _ = x.shape
        NH, NKV, HS = cfg.NH, cfg.NKV, cfg.HS
        qkv = self.linear(rmsnorm(x, self.ln1w), self.wqkv)
        q, k, v = qkv.split([NH * HS, NKV * HS, NKV * HS], dim=-1)
        q = rope(q.view(B, T, NH, HS), cos, sin).transpose(1, 2)     # (B, NH, T, HS)
        k = rope(k.view(B, T, NKV, HS), cos, sin).transpose(1, 2)    # (B, NKV, T, HS)
        v = v.view(B, T, NKV, HS).transpose(1, 2)
        # query head h reads kv head h // (NH/NKV). enable_gqa only when heads are shared: with
        # NKV == NH it changes nothing, and leaving it off keeps every SDPA backend eligible.
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=NKV != NH)
        h = x + self.linear(y.transpose(1, 2).reshape(B, T, NH * HS), self.wo)
        g, u = self.linear(rmsnorm(h, self.ln2w), self.w13).chunk(2, dim=-1)  # [gate | up]
        return h + self.linear(F.silu(g) * u, self.w2)


class Llama(nn.Module):
    def __init__(self, cfg, T, fp8, dtype, device):
        super().__init__()
        self.cfg = cfg
        p = lambda *shape: nn.Parameter(torch.empty(*shape, dtype=dtype, device=device))
        self.wte = p(cfg.V, cfg.C)
        self.blocks = nn.ModuleList(Block(cfg, fp8, dtype, device) for _ in range(cfg.L))
        self.lnfw = p(cfg.C)
        self.lm_head = None if cfg.tied else p(cfg.V, cfg.C)   # bf16 in both precisions
        i = torch.arange(cfg.HS // 2, dtype=torch.float64, device=device)
        ang = torch.arange(T, dtype=torch.float64, device=device)[:, None] * cfg.rope_theta ** (-2.0 * i / cfg.HS)
        self.register_buffer("cos", torch.cos(ang).float(), persistent=False)
        self.register_buffer("sin", torch.sin(ang).float(), persistent=False)
        self.init_weights()

    @torch.no_grad()
    def init_weights(self):
        """docs/baselines.md: normal(0, 0.02), wo and w2 normal(0, 0.02/sqrt(2L)), norm weights 1."""
        small = 0.02 / math.sqrt(2 * self.cfg.L)
        for name, prm in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            if prm.dim() == 1:
                prm.fill_(1.0)
            else:
                prm.normal_(0.0, small if leaf in ("wo", "w2") else 0.02)

    def forward(self, idx, targets):
        x = F.embedding(idx, self.wte)
        for blk in self.blocks:
            x = blk(x, self.cos, self.sin)
        logits = F.linear(rmsnorm(x, self.lnfw), self.wte if self.lm_head is None else self.lm_head)
        return F.cross_entropy(logits.float().view(-1, self.cfg.V), targets.reshape(-1))


# ----------------------------------------------------------------------------------------------
# benchmark

def is_oom(e):
    for _ in range(10):   # torch.compile wraps errors raised while compiling: follow the chain
        if e is None:
            break
        if isinstance(e, torch.OutOfMemoryError) or "out of memory" in str(e).lower():
            return True
        e = e.__cause__ or getattr(e, "inner_exception", None)
    return False


def result_line(args, system, **kv):
    fields = dict(system=system, model=args.model, B=args.B, T=args.T, accum=args.accum)
    fields.update(kv)
    return "RESULT " + " ".join("%s=%s" % (k, v) for k, v in fields.items())


def bench(args, device):
    cfg = Cfg(args.model)
    on_gpu = device.type == "cuda"
    fp8 = args.precision == "fp8"
    if fp8:
        for what, n in (("C", cfg.C), ("FF", cfg.FF), ("QKV width", cfg.QKV), ("B*T", args.B * args.T)):
            if n % 16:
                raise ValueError("fp8 GEMMs need multiples of 16: %s = %d" % (what, n))
        fp8_selfcheck(device)
    torch.manual_seed(1337)
    model = Llama(cfg, args.T, fp8, torch.bfloat16, device)
    nparams = sum(p.numel() for p in model.parameters())
    assert nparams == cfg.num_params(), (nparams, cfg.num_params())
    opt = adamw(model, args, on_gpu)
    fwd = torch.compile(model) if args.compile else model
    micro = " x %d micro-steps" % args.accum if args.accum > 1 else ""
    print("%s | B %d T %d%s | %s%s | %s"
          % (cfg.model_line(nparams), args.B, args.T, micro, args.precision,
             " (tensorwise dynamic scaling, lm_head bf16)" if fp8 else "",
             "torch.compile" if args.compile else "eager"), flush=True)

    g = torch.Generator(device=device).manual_seed(1234)
    tokens = torch.randint(0, cfg.V, (args.accum, args.B, args.T + 1), device=device, generator=g)
    x, y = tokens[..., :-1].contiguous(), tokens[..., 1:].contiguous()

    def step():
        total = 0.0
        for i in range(args.accum):
            loss = fwd(x[i], y[i])
            (loss / args.accum).backward()
            total = total + loss.detach()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip, foreach=True)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total / args.accum

    return time_steps(step, args, on_gpu, cfg.flops_per_token(args.T))


def time_steps(step, args, on_gpu, fpt):
    """args.warmup untimed calls of step() (one optimizer step of args.accum micro-steps; it returns the
    mean loss, detached), then args.steps timed ones;
    prints the timing lines and returns the RESULT fields. fpt: model FLOPs per token."""
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    t0 = time.perf_counter()
    for i in range(args.warmup):
        loss = step()
        sync()
        print("warm-up step %d/%d: loss %.4f (%.1f s since start)" % (i + 1, args.warmup, loss.item(), time.perf_counter() - t0),
              flush=True)
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    ms, losses = [], []
    for _ in range(args.steps):
        if on_gpu:
            ev0, ev1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            ev0.record()
            losses.append(step())
            ev1.record()
            ms.append((ev0, ev1))
        else:
            t = time.perf_counter()
            losses.append(step())
            ms.append((time.perf_counter() - t) * 1e3)
    sync()
    if on_gpu:
        ms = [a.elapsed_time(b) for a, b in ms]
    med = statistics.median(ms)
    tok_s = args.B * args.T * args.accum / (med / 1e3)
    tflops = tok_s * fpt / 1e12
    if on_gpu:
        mem = torch.cuda.max_memory_allocated() / GIB
        free_b, total_b = torch.cuda.mem_get_info()
        dev = (total_b - free_b) / GIB
    else:
        mem = dev = float("nan")
    print("timed steps: loss %.4f -> %.4f | step ms min %.2f median %.2f max %.2f"
          % (losses[0].item(), losses[-1].item(), min(ms), med, max(ms)))
    print("median step %.2f ms over %d steps after %d warm-up | %.0f tok/s | %.1f model TFLOP/s | "
          "peak allocated %.2f GiB | device memory in use %.2f GiB" % (med, len(ms), args.warmup, tok_s, tflops, mem, dev))
    return dict(tok_s="%.0f" % tok_s, tflops="%.1f" % tflops, mem_gib="%.2f" % mem, dev_gib="%.2f" % dev,
                ms="%.2f" % med, flops_tok="%.6e" % fpt)


def adamw(model, args, on_gpu):
    """Our trainer's AdamW: weight decay 0.1 on matrices and embeddings, none on norm weights; fused on a GPU."""
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    return torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                             lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=on_gpu, foreach=None if on_gpu else True)


def add_run_args(ap, model, B, T):
    """The options every PyTorch benchmark here takes (this one and bench_hf.py), with their defaults."""
    ap.add_argument("--model", default=model, choices=sorted(PRESETS))
    ap.add_argument("--B", type=int, default=B, help="sequences per micro-step")
    ap.add_argument("--T", type=int, default=T, help="sequence length")
    ap.add_argument("--steps", type=int, default=10, help="timed steps (the median is reported)")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation happens here)")
    ap.add_argument("--compile", action=argparse.BooleanOptionalAction, default=True, help="wrap the model in torch.compile")
    ap.add_argument("--lr", type=float, default=3e-4, help="AdamW learning rate (constant)")
    ap.add_argument("--clip", type=float, default=1.0, help="global gradient-norm clip, as our trainer does (0: off)")
    ap.add_argument("--accum", type=int, default=1, help="micro-steps of B x T tokens per optimizer step (gradient "
                    "accumulation: each micro-step's loss divided by accum, as our trainer's -d does)")


def parse_run_args(ap):
    args = ap.parse_args()
    if args.steps < 1 or args.warmup < 0 or args.B < 1 or args.T < 1 or args.accum < 1:
        ap.error("need --steps >= 1, --warmup >= 0, --B >= 1, --T >= 1, --accum >= 1")
    return args


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_run_args(ap, "llama2-7b", 2, 4096)
    ap.add_argument("--precision", default="bf16", choices=["bf16", "fp8"])
    args = parse_run_args(ap)
    system = "torch-%s%s" % (args.precision, "" if args.compile else "-eager")

    if torch.cuda.is_available():
        device = torch.device("cuda")
        name, cap = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
        print("PyTorch %s | %s (sm_%d%d)" % (torch.__version__, name, cap[0], cap[1]))
        if args.precision == "fp8" and cap < (8, 9):
            print("error: fp8 GEMMs (torch._scaled_mm) need compute capability 8.9+; %s is %d.%d" % (name, *cap))
            print(result_line(args, system, tok_s="FAIL", tflops="FAIL", mem_gib="FAIL"))
            return 1
    else:
        device = torch.device("cpu")
        print("PyTorch %s | no CUDA GPU: running on the CPU to check the logic only (timings mean nothing)" % torch.__version__)
        if args.precision == "fp8":
            print("error: --precision fp8 needs a CUDA GPU (torch._scaled_mm with fp8 is a GPU kernel here); "
                  "use --precision bf16 on the CPU")
            print(result_line(args, system, tok_s="FAIL", tflops="FAIL", mem_gib="FAIL"))
            return 1

    return run_and_report(args, system, args.precision, lambda: bench(args, device))


def run_and_report(args, system, what, run):
    """run() -> the RESULT fields; prints the RESULT line, also for an OOM or another failure (what:
    the precision, for the OOM message). Returns the exit status: 0, 3 (out of memory) or 1."""
    try:
        res = run()
    except Exception as e:  # report OOM and other failures as a RESULT line; benchmark.sh tabulates it
        oom = is_oom(e)
        if oom:
            print("OUT OF MEMORY: %s %s B=%d T=%d does not fit (%s). Try a smaller --B or --T."
                  % (args.model, what, args.B, args.T, str(e).splitlines()[0] if str(e) else type(e).__name__))
        else:
            import traceback
            traceback.print_exc()
        tag = "OOM" if oom else "FAIL"
        sys.stdout.flush()
        print(result_line(args, system, tok_s=tag, tflops=tag, mem_gib=tag), flush=True)
        return 3 if oom else 1
    print(result_line(args, system, **res), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
