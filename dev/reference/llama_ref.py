#!/usr/bin/env python3
"""
Independent PyTorch reference for train_llama_fp8 (written from dev/test/README.md,
llmc/llama_config.h and llmc/fp8_layout.h only). It builds a tiny Llama from a seed, runs forward + backward and nsteps
AdamW steps (global-norm clipping, gradient accumulation, constant lr), optionally with every block
linear in fp8 emulation (per-tensor delayed scaling, E4M3 for X and W, E5M2 for dY), and writes the
fixture files that the C tests read (binary format: dev/test/README.md). The model also has tied
embeddings (lm_head = wte, no lm_head tensor) and llama3 RoPE scaling (llama_config.h's
rope_inv_freq), as the C reference; the fixture format has no field for either yet, so those are
checked by --selftest (against transformers' own llama3 frequencies, and tied = untied with shared
weights), not written.

  python3 dev/reference/llama_ref.py --out dev/test/fixtures     # writes llama_fp32.bin, llama_fp8.bin
  python3 dev/reference/llama_ref.py --fp8 1 --grad_accum 2 --out-file /tmp/x.bin   # one custom fixture
  python3 dev/reference/llama_ref.py --check dev/test/fixtures/llama_fp8.bin        # re-verify a fixture
  python3 dev/reference/llama_ref.py --selftest    # fp8 cast vs a pure-Python encoder; model vs built-ins

Precision: the fp32 fixture (fp8=0) is computed in float64 and stored as float32; the fp8 fixture is
computed in float32 like the C reference, so fp8 rounding-boundary flips between the two stay rare.
CPU only, one thread, deterministic.
"""
import argparse
import math
import os
import sys

import numpy as np
import torch

MAGIC = 20261130
VERSION = 1
HEADER_INTS = 256
FHEADER_FLOATS = 16

PARAM_NAMES = ["wte", "ln1w", "wqkv", "wo", "ln2w", "w13", "w2", "lnfw", "lm_head"]
DECAYED = {"wte": True, "ln1w": False, "wqkv": True, "wo": True, "ln2w": False,
           "w13": True, "w2": True, "lnfw": False, "lm_head": True}
LINS = ["qkv", "wo", "w13", "w2"]          # lin index within a layer
KINDS = ["x", "w", "dy"]                    # kind index
E4M3_MAX = 448.0
E5M2_MAX = 57344.0
FLT_MAX = float(np.finfo(np.float32).max)


# ----------------------------------------------------------------------------------------------
# config

class Config:
    def __init__(self, V=96, L=2, C=32, NH=4, NKV=2, FF=64, B=2, T=16, nsteps=5, fp8=0,
                 history=4, margin=0, grad_accum=1, rope_theta=10000.0, norm_eps=1e-5, lr=1e-3,
                 beta1=0.9, beta2=0.95, adam_eps=1e-8, weight_decay=0.1, grad_clip=1.0,
                 tied_embeddings=0, rope_scaling=None):
        self.V, self.L, self.C, self.NH, self.NKV, self.FF = V, L, C, NH, NKV, FF
        self.B, self.T, self.nsteps, self.fp8 = B, T, nsteps, fp8
        self.history, self.margin, self.grad_accum = history, margin, grad_accum
        # float hyperparameters are used at their float32 values: the ones the fixture header stores
        f = lambda x: float(np.float32(x))
        self.rope_theta, self.norm_eps, self.lr = f(rope_theta), f(norm_eps), f(lr)
        self.beta1, self.beta2, self.adam_eps = f(beta1), f(beta2), f(adam_eps)
        self.weight_decay, self.grad_clip = f(weight_decay), f(grad_clip)
        # tied: lm_head is wte. rope_scaling: None, or llama3's {factor, low_freq_factor,
        # high_freq_factor (float32, as the model file stores them), original_T}
        self.tied_embeddings = tied_embeddings
        self.rope_scaling = None if rope_scaling is None else {
            "factor": f(rope_scaling["factor"]), "low_freq_factor": f(rope_scaling["low_freq_factor"]),
            "high_freq_factor": f(rope_scaling["high_freq_factor"]), "original_T": int(rope_scaling["original_T"])}
        assert tied_embeddings in (0, 1)
        assert rope_scaling is None or (0 < self.rope_scaling["low_freq_factor"] < self.rope_scaling["high_freq_factor"]
                                        and self.rope_scaling["factor"] > 0 and self.rope_scaling["original_T"] > 0)
        assert C % NH == 0 and NH % NKV == 0 and (C // NH) % 2 == 0, "bad head config"
        assert fp8 in (0, 1) and grad_accum >= 1 and nsteps >= 1
        assert history >= 1 or not fp8

    @property
    def HS(self):
        return self.C // self.NH

    @property
    def QKV(self):
        return (self.NH + 2 * self.NKV) * self.HS

    def param_shapes(self):
        """Shapes of param_names(), in that order (a tied model has no lm_head: llama_config.h gives it 0 elements)."""
        V, L, C, FF, QKV = self.V, self.L, self.C, self.FF, self.QKV
        shapes = [(V, C), (L, C), (L, QKV, C), (L, C, self.NH * self.HS), (L, C), (L, 2 * FF, C),
                  (L, C, FF), (C,), (V, C)]
        return shapes[:-1] if self.tied_embeddings else shapes

    def param_names(self):
        return PARAM_NAMES[:-1] if self.tied_embeddings else PARAM_NAMES

    def num_params(self):
        return sum(int(np.prod(s)) for s in self.param_shapes())

    # fp8 state layout (llmc/fp8_layout.h, fp8_lm_head 0)
    def num_fp8_tensors(self):
        return 3 * 4 * self.L

    def fp8_state_total(self):
        NT, H = self.num_fp8_tensors(), self.history
        return NT + NT * H + NT + NT


def fp8_tensor_index(layer, lin, kind):
    return 3 * (4 * layer + lin) + kind


# ----------------------------------------------------------------------------------------------
# fp8 emulation

def fp8_quantize(v32, scale32, fmt):
    """encode(value * scale) with RNE + saturation, decoded back to float32 (the code's value)."""
    dt, mx = (torch.float8_e4m3fn, E4M3_MAX) if fmt == "e4m3" else (torch.float8_e5m2, E5M2_MAX)
    assert v32.dtype == torch.float32
    s = v32 * scale32                      # fp32 multiply (scale32 is a 0-dim float32 tensor)
    s = torch.clamp(s, -mx, mx)            # saturate: torch's cast itself does not
    return s.to(dt).to(torch.float32)      # torch rounds to nearest even


def compute_scale(amax, fmt_max, margin, old_scale):
    """scale from an amax (np.float32); keeps old_scale if amax is not a positive finite number."""
    amax = np.float32(amax)
    if not (np.isfinite(amax) and amax > 0):
        return np.float32(old_scale)
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        s = np.float32(fmt_max) / amax
        s = s / np.float32(2.0 ** margin)
    if not np.isfinite(s):
        s = np.float32(FLT_MAX)
    return np.float32(s)


class Fp8State:
    """amax_slot[NT], amax_history[NT][H], scale[NT], scale_inv[NT] (np.float32), + live flags."""

    def __init__(self, cfg):
        self.cfg = cfg
        NT, H = cfg.num_fp8_tensors(), cfg.history
        self.slot = np.zeros(NT, np.float32)
        self.hist = np.zeros((NT, H), np.float32)
        self.scale = np.ones(NT, np.float32)
        self.scale_inv = np.ones(NT, np.float32)
        self.live_pending = np.ones(NT, bool)   # first cast of each tensor in step 0 sets its scale
        self.step = 0

    @staticmethod
    def fmt_of(t):
        return "e5m2" if t % 3 == 2 else "e4m3"

    @staticmethod
    def max_of(t):
        return E5M2_MAX if t % 3 == 2 else E4M3_MAX

    def cast(self, t, v32):
        """Cast tensor t: record amax into its slot (live scale first if pending), quantize.
        Returns (decoded codes float32, scale_inv used as a 0-dim float32 tensor)."""
        v32 = v32.detach()
        amax = np.float32(v32.abs().max().item()) if v32.numel() else np.float32(0)
        if self.step == 0 and self.live_pending[t]:
            self.live_pending[t] = False
            self.scale[t] = compute_scale(amax, self.max_of(t), self.cfg.margin, self.scale[t])
            self.scale_inv[t] = np.float32(1.0) / self.scale[t]
        self.slot[t] = max(self.slot[t], amax) if not np.isnan(amax) else amax
        sc = torch.tensor(self.scale[t], dtype=torch.float32)
        q = fp8_quantize(v32, sc, self.fmt_of(t))
        return q, torch.tensor(self.scale_inv[t], dtype=torch.float32)

    def update(self):
        """After the last backward of a step: roll history, zero slot, recompute scales."""
        H = self.cfg.history
        for t in range(self.slot.shape[0]):
            self.hist[t, 1:H] = self.hist[t, 0:H - 1].copy()
            self.hist[t, 0] = self.slot[t]
            self.slot[t] = 0
            h = self.hist[t]
            fin = h[np.isfinite(h)]
            amax = np.float32(fin.max()) if fin.size else np.float32(0)
            self.scale[t] = compute_scale(amax, self.max_of(t), self.cfg.margin, self.scale[t])
            self.scale_inv[t] = np.float32(1.0) / self.scale[t]
        self.step += 1

    def flat(self):
        return np.concatenate([self.slot, self.hist.reshape(-1), self.scale, self.scale_inv]).astype(np.float32)


class Fp8Linear(torch.autograd.Function):
    """Y = X W^T in fp8 emulation. W's fp8 copy (cast once per step) comes from `lin`."""

    @staticmethod
    def forward(ctx, x, w, lin):
        st, tx, tdy = lin["state"], lin["tx"], lin["tdy"]
        shp = x.shape
        x2 = x.reshape(-1, shp[-1])
        xq, sx_inv = st.cast(tx, x2)
        wq, sw_inv = lin["wq"], lin["sw_inv"]
        y = (xq @ wq.t()) * (sx_inv * sw_inv)
        ctx.save_for_backward(xq, wq, sx_inv, sw_inv)
        ctx.st, ctx.tdy, ctx.shp = st, tdy, shp
        return y.reshape(*shp[:-1], wq.shape[0])

    @staticmethod
    def backward(ctx, dy):
        xq, wq, sx_inv, sw_inv = ctx.saved_tensors
        dy2 = dy.reshape(-1, dy.shape[-1]).contiguous()
        dyq, sdy_inv = ctx.st.cast(ctx.tdy, dy2)
        dx = (dyq @ wq) * (sdy_inv * sw_inv)
        dw = (dyq.t() @ xq) * (sdy_inv * sx_inv)
        return dx.reshape(ctx.shp), dw, None


# ----------------------------------------------------------------------------------------------
# model

def rmsnorm(x, w, eps):
    return x / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + eps) * w


def rope_inv_freq(cfg):
    """(HS/2,) float64: theta^(-2i/HS), and with llama3 scaling (Llama 3.1/3.2; llama_config.h's
    rope_inv_freq) a wavelength 2 pi / f shorter than original_T / high_freq_factor kept, one longer
    than original_T / low_freq_factor divided by the factor, and between them with
    s = (original_T / wavelength - low) / (high - low): (1 - s) f / factor + s f."""
    HS, r = cfg.HS, cfg.rope_scaling
    freqs = []
    for i in range(HS // 2):
        f = cfg.rope_theta ** (-2.0 * i / HS)
        if r is not None:
            wavelen, old_T = 2.0 * math.pi / f, float(r["original_T"])
            low, high, factor = r["low_freq_factor"], r["high_freq_factor"], r["factor"]
            if wavelen < old_T / high:
                pass
            elif wavelen > old_T / low:
                f = f / factor
            else:
                s = (old_T / wavelen - low) / (high - low)
                f = (1.0 - s) * f / factor + s * f
        freqs.append(f)
    return torch.tensor(freqs, dtype=torch.float64)


def rope_tables(cfg, dtype):
    ang = torch.arange(cfg.T, dtype=torch.float64)[:, None] * rope_inv_freq(cfg)[None, :]   # (T, HS/2)
    return torch.cos(ang).to(dtype), torch.sin(ang).to(dtype)


def rope(x, cos, sin):
    """x (B, T, nh, HS): adjacent pairs (2i, 2i+1) rotate by angle t * theta^(-2i/HS)."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    y0 = x0 * c - x1 * s
    y1 = x0 * s + x1 * c
    return torch.stack([y0, y1], dim=-1).flatten(-2)


def linear(x, w, lin):
    if lin is None:
        return x @ w.t()
    return Fp8Linear.apply(x, w, lin)


def forward(cfg, P, tokens, targets, lins, rope_cs):
    """P: dict name -> param tensor. lins: per (layer, lin) dict for fp8 or None. Returns logits, loss."""
    B, T, C, NH, NKV, HS, FF = cfg.B, cfg.T, cfg.C, cfg.NH, cfg.NKV, cfg.HS, cfg.FF
    cos, sin = rope_cs
    eps = cfg.norm_eps
    x = P["wte"][tokens]                                       # (B, T, C)
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    rep = NH // NKV
    for l in range(cfg.L):
        lin = (lambda k: None) if lins is None else (lambda k: lins[(l, k)])
        xn = rmsnorm(x, P["ln1w"][l], eps)
        qkv = linear(xn, P["wqkv"][l], lin(0))                 # (B, T, QKV)
        q = qkv[..., :NH * HS].reshape(B, T, NH, HS)
        k = qkv[..., NH * HS:(NH + NKV) * HS].reshape(B, T, NKV, HS)
        v = qkv[..., (NH + NKV) * HS:].reshape(B, T, NKV, HS)
        q, k = rope(q, cos, sin), rope(k, cos, sin)
        kv_of = torch.arange(NH) // rep                        # query head h reads kv head h // rep
        k, v = k[:, :, kv_of, :], v[:, :, kv_of, :]            # (B, T, NH, HS)
        q, k, v = (a.permute(0, 2, 1, 3) for a in (q, k, v))   # (B, NH, T, HS)
        att = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(HS))
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).permute(0, 2, 1, 3).reshape(B, T, NH * HS)
        h = x + linear(y, P["wo"][l], lin(1))
        hn = rmsnorm(h, P["ln2w"][l], eps)
        gu = linear(hn, P["w13"][l], lin(2))                   # (B, T, 2FF): [g | u]
        g, u = gu[..., :FF], gu[..., FF:]
        m = torch.nn.functional.silu(g) * u
        x = h + linear(m, P["w2"][l], lin(3))
    xf = rmsnorm(x, P["lnfw"], eps)
    lm_head = P["wte"] if cfg.tied_embeddings else P["lm_head"]  # tied: autograd sums both uses into wte
    logits = xf @ lm_head.t()                                  # (B, T, V)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg.V), targets.reshape(-1))
    return logits, loss


# ----------------------------------------------------------------------------------------------
# data / init

def make_init(cfg, seed):
    """Returns (params flat float32 numpy, inputs int32 (A*B*T), targets int32 (A*B*T))."""
    g = torch.Generator().manual_seed(seed)
    parts = []
    for name, shp in zip(cfg.param_names(), cfg.param_shapes()):
        if name in ("ln1w", "ln2w", "lnfw"):
            t = 1.0 + 0.1 * torch.randn(shp, generator=g, dtype=torch.float32)
        elif name == "wte":
            t = torch.randn(shp, generator=g, dtype=torch.float32)
        else:
            t = torch.randn(shp, generator=g, dtype=torch.float32) / math.sqrt(shp[-1])
        parts.append(t.reshape(-1))
    params = torch.cat(parts).numpy().astype(np.float32)
    A, B, T = cfg.grad_accum, cfg.B, cfg.T
    seq = torch.randint(0, cfg.V, (A, B, T + 1), generator=g)
    inputs = seq[:, :, :T].reshape(-1).numpy().astype(np.int32)
    targets = seq[:, :, 1:].reshape(-1).numpy().astype(np.int32)
    return params, inputs, targets


def unflatten(cfg, flat, dtype):
    P, off = {}, 0
    for name, shp in zip(cfg.param_names(), cfg.param_shapes()):
        n = int(np.prod(shp))
        P[name] = torch.tensor(flat[off:off + n], dtype=dtype).reshape(shp).clone().requires_grad_(True)
        off += n
    return P


def flatten(cfg, tensors):
    return np.concatenate([tensors[n].detach().to(torch.float64).reshape(-1).numpy() for n in cfg.param_names()]).astype(np.float32)


# ----------------------------------------------------------------------------------------------
# training run

def run(cfg, params0, inputs, targets, dtype=None, verbose=True):
    """Runs nsteps; returns dict with logits, loss, grads, losses, fp8_state (or None)."""
    if dtype is None:
        dtype = torch.float32 if cfg.fp8 else torch.float64
    if cfg.fp8:
        assert dtype == torch.float32, "fp8 emulation runs in float32"
    A, B, T = cfg.grad_accum, cfg.B, cfg.T
    P = unflatten(cfg, params0, dtype)
    toks = torch.tensor(inputs, dtype=torch.int64).reshape(A, B, T)
    tgts = torch.tensor(targets, dtype=torch.int64).reshape(A, B, T)
    rope_cs = rope_tables(cfg, dtype)
    names = cfg.param_names()
    m = {n: torch.zeros_like(P[n]) for n in names}
    v = {n: torch.zeros_like(P[n]) for n in names}
    st = Fp8State(cfg) if cfg.fp8 else None
    out = {"losses": [], "fp8_state": None}
    b1, b2 = cfg.beta1, cfg.beta2

    for step in range(cfg.nsteps):
        lins = None
        if cfg.fp8:
            # W: cast once per optimizer step, before the first forward, with the scale current now
            lins = {}
            pname = ["wqkv", "wo", "w13", "w2"]
            for l in range(cfg.L):
                for k in range(4):
                    tw = fp8_tensor_index(l, k, 1)
                    wq, sw_inv = st.cast(tw, P[pname[k]][l].detach())
                    lins[(l, k)] = {"state": st, "wq": wq, "sw_inv": sw_inv,
                                    "tx": fp8_tensor_index(l, k, 0), "tdy": fp8_tensor_index(l, k, 2)}
        for n in names:
            P[n].grad = None
        step_loss = 0.0
        for a in range(A):
            logits, loss = forward(cfg, P, toks[a], tgts[a], lins, rope_cs)
            (loss / A).backward()
            step_loss += loss.item()
            if step == 0 and a == 0:
                out["logits"] = logits.detach().to(torch.float64).numpy().reshape(-1).astype(np.float32)
        step_loss /= A
        out["losses"].append(step_loss)
        if step == 0:
            out["loss"] = step_loss
            out["grads"] = flatten(cfg, {n: P[n].grad for n in names})
        if cfg.fp8:
            st.update()          # after the last backward, before clipping and AdamW
        with torch.no_grad():
            grads = {n: P[n].grad for n in names}
            norm = torch.sqrt(sum((grads[n].to(torch.float64) ** 2).sum() for n in names)).item()
            if norm > cfg.grad_clip:
                c = torch.tensor(cfg.grad_clip / norm, dtype=dtype)
                for n in names:
                    grads[n] = grads[n] * c
            t = step + 1
            bc1 = torch.tensor(1.0 - b1 ** t, dtype=dtype)
            bc2 = torch.tensor(1.0 - b2 ** t, dtype=dtype)
            for n in names:
                g_ = grads[n]
                m[n] = b1 * m[n] + (1 - b1) * g_
                v[n] = b2 * v[n] + (1 - b2) * g_ * g_
                upd = (m[n] / bc1) / (torch.sqrt(v[n] / bc2) + cfg.adam_eps)
                if DECAYED[n]:
                    upd = upd + cfg.weight_decay * P[n]
                P[n] -= cfg.lr * upd
        if verbose:
            msg = "step %d loss %.6f  grad norm %.6f" % (step, step_loss, norm)
            print(msg)
    if cfg.fp8:
        out["fp8_state"] = st.flat()
        out["fp8_obj"] = st
    out["losses"] = np.array(out["losses"], dtype=np.float32)
    return out


# ----------------------------------------------------------------------------------------------
# fixture I/O

def write_fixture(path, cfg, params, inputs, targets, res):
    if cfg.tied_embeddings or cfg.rope_scaling is not None:
        raise ValueError("%s: the fixture format (version %d, dev/test/README.md) has no field for tied embeddings or RoPE"
                         " scaling: writing such a fixture needs them in the format and in dev/test/fixture.h first" % (path, VERSION))
    hdr = np.zeros(HEADER_INTS, dtype="<i4")
    hdr[0:16] = [MAGIC, VERSION, cfg.V, cfg.L, cfg.C, cfg.NH, cfg.NKV, cfg.FF, cfg.B, cfg.T,
                 cfg.nsteps, cfg.fp8, cfg.history if cfg.fp8 else 0, cfg.margin if cfg.fp8 else 0,
                 cfg.grad_accum, cfg.num_params()]
    fh = np.zeros(FHEADER_FLOATS, dtype="<f4")
    fh[0:8] = [cfg.rope_theta, cfg.norm_eps, cfg.lr, cfg.beta1, cfg.beta2, cfg.adam_eps,
               cfg.weight_decay, cfg.grad_clip]
    A, B, T, V = cfg.grad_accum, cfg.B, cfg.T, cfg.V
    assert inputs.size == A * B * T and targets.size == A * B * T
    assert params.size == cfg.num_params() and res["grads"].size == cfg.num_params()
    assert res["logits"].size == B * T * V and res["losses"].size == cfg.nsteps
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "wb") as f:
        f.write(hdr.tobytes())
        f.write(fh.tobytes())
        f.write(inputs.astype("<i4").tobytes())
        f.write(targets.astype("<i4").tobytes())
        f.write(params.astype("<f4").tobytes())
        f.write(res["logits"].astype("<f4").tobytes())
        f.write(np.array([res["loss"]], dtype="<f4").tobytes())
        f.write(res["grads"].astype("<f4").tobytes())
        f.write(res["losses"].astype("<f4").tobytes())
        if cfg.fp8:
            fs = res["fp8_state"]
            assert fs.size == cfg.fp8_state_total()
            f.write(fs.astype("<f4").tobytes())


def read_fixture(path):
    data = open(path, "rb").read()
    off = 0

    def take(dt, n):
        nonlocal off
        nb = np.dtype(dt).itemsize * n
        if off + nb > len(data):
            raise ValueError("%s: truncated (need %d bytes at offset %d, size %d)" % (path, nb, off, len(data)))
        a = np.frombuffer(data, dtype=dt, count=n, offset=off).copy()
        off += nb
        return a

    hdr = take("<i4", HEADER_INTS)
    if hdr[0] != MAGIC or hdr[1] != VERSION:
        raise ValueError("%s: bad magic/version %d %d" % (path, hdr[0], hdr[1]))
    fh = take("<f4", FHEADER_FLOATS)
    cfg = Config(V=int(hdr[2]), L=int(hdr[3]), C=int(hdr[4]), NH=int(hdr[5]), NKV=int(hdr[6]),
                 FF=int(hdr[7]), B=int(hdr[8]), T=int(hdr[9]), nsteps=int(hdr[10]), fp8=int(hdr[11]),
                 history=int(hdr[12]), margin=int(hdr[13]), grad_accum=int(hdr[14]),
                 rope_theta=float(fh[0]), norm_eps=float(fh[1]), lr=float(fh[2]), beta1=float(fh[3]),
                 beta2=float(fh[4]), adam_eps=float(fh[5]), weight_decay=float(fh[6]),
                 grad_clip=float(fh[7]))
    if int(hdr[15]) != cfg.num_params():
        raise ValueError("%s: num_params %d != %d from the shape" % (path, hdr[15], cfg.num_params()))
    n = cfg.grad_accum * cfg.B * cfg.T
    fx = {"cfg": cfg, "header": hdr, "fheader": fh}
    fx["inputs"] = take("<i4", n)
    fx["targets"] = take("<i4", n)
    fx["params"] = take("<f4", cfg.num_params())
    fx["logits"] = take("<f4", cfg.B * cfg.T * cfg.V)
    fx["loss"] = float(take("<f4", 1)[0])
    fx["grads"] = take("<f4", cfg.num_params())
    fx["losses"] = take("<f4", cfg.nsteps)
    fx["fp8_state"] = take("<f4", cfg.fp8_state_total()) if cfg.fp8 else None
    if off != len(data):
        raise ValueError("%s: %d trailing bytes" % (path, len(data) - off))
    return fx


# ----------------------------------------------------------------------------------------------
# printing / checking

def print_summary(cfg, res):
    print("losses: " + " ".join("%.6f" % x for x in res["losses"]))
    if cfg.fp8:
        st = res["fp8_obj"]
        for l in sorted({0, cfg.L - 1}):
            for k, lname in enumerate(LINS):
                s = []
                for kind, kname in enumerate(KINDS):
                    t = fp8_tensor_index(l, k, kind)
                    s.append("%s scale %.6g (amax %.6g)" % (kname, st.scale[t], st.hist[t].max()))
                print("  fp8 layer %d %-4s %s" % (l, lname, ", ".join(s)))


def compare(name, got, want, rtol, atol):
    got = np.asarray(got, np.float64).reshape(-1)
    want = np.asarray(want, np.float64).reshape(-1)
    if got.shape != want.shape:
        print("  %-10s SHAPE MISMATCH %s vs %s" % (name, got.shape, want.shape))
        return False
    diff = np.abs(got - want)
    bad = diff > atol + rtol * np.abs(want)
    exact = int((got == want).sum())
    ok = not bad.any() and np.isfinite(got).all() == np.isfinite(want).all()
    print("  %-10s %s  max abs diff %.3g, %d/%d bit-exact, %d outside tol" %
          (name, "ok  " if ok else "FAIL", diff.max() if diff.size else 0.0, exact, got.size, int(bad.sum())))
    return ok


def check(path):
    fx = read_fixture(path)
    cfg = fx["cfg"]
    print("%s: V=%d L=%d C=%d NH=%d NKV=%d FF=%d B=%d T=%d steps=%d grad_accum=%d fp8=%d history=%d margin=%d" %
          (path, cfg.V, cfg.L, cfg.C, cfg.NH, cfg.NKV, cfg.FF, cfg.B, cfg.T, cfg.nsteps, cfg.grad_accum,
           cfg.fp8, cfg.history, cfg.margin))
    res = run(cfg, fx["params"], fx["inputs"], fx["targets"], verbose=False)
    # same code, same machine: expect bit-exact; different BLAS/CPU may differ slightly
    rtol, atol = (1e-5, 1e-6) if not cfg.fp8 else (1e-3, 1e-5)
    ok = True
    ok &= compare("logits", res["logits"], fx["logits"], rtol, atol)
    ok &= compare("loss", np.float32(res["loss"]), fx["loss"], rtol, atol)
    ok &= compare("grads", res["grads"], fx["grads"], rtol, atol)
    ok &= compare("losses", res["losses"], fx["losses"], rtol, atol)
    if cfg.fp8:
        ok &= compare("fp8_state", res["fp8_state"], fx["fp8_state"], rtol, atol)
    # header round trip: re-write what was read and compare bytes
    tmp = path + ".roundtrip.tmp"
    fres = {"logits": fx["logits"], "loss": fx["loss"], "grads": fx["grads"], "losses": fx["losses"],
            "fp8_state": fx["fp8_state"]}
    write_fixture(tmp, cfg, fx["params"], fx["inputs"], fx["targets"], fres)
    same = open(tmp, "rb").read() == open(path, "rb").read()
    os.remove(tmp)
    print("  %-10s %s" % ("rewrite", "ok   re-written file is byte-identical" if same else "FAIL re-written file differs"))
    ok &= same
    print("losses (fixture): " + " ".join("%.6f" % x for x in fx["losses"]))
    print("CHECK %s" % ("PASSED" if ok else "FAILED"))
    return ok


# ----------------------------------------------------------------------------------------------
# self test of the fp8 cast against a pure-Python encoder (RNE, saturation, subnormals)

def ref_fp8_round(x, mbits, emin, maxv):
    """Nearest representable value (ties to even mantissa), saturating at +-maxv. Python floats."""
    if x != x:
        return x
    sgn = -1.0 if x < 0 else 1.0
    a = abs(x)
    if a >= maxv:
        return sgn * maxv
    if a == 0:
        return sgn * 0.0
    e = max(math.floor(math.log2(a)), emin)
    while 2.0 ** e > a and e > emin:      # guard log2 rounding
        e -= 1
    while 2.0 ** (e + 1) <= a:
        e += 1
    e = max(e, emin)
    quantum = 2.0 ** (e - mbits)
    q = a / quantum                        # exact (power-of-two division)
    fl = math.floor(q)
    r = q - fl
    if r > 0.5 or (r == 0.5 and fl % 2 == 1):
        fl += 1
    return sgn * min(fl * quantum, maxv)


def selftest():
    g = torch.Generator().manual_seed(1)
    ok = True
    for fmt, mbits, emin, mx in (("e4m3", 3, -6, E4M3_MAX), ("e5m2", 2, -14, E5M2_MAX)):
        vals = [0.0, 1.0, -1.0, mx, -mx, mx * 1.01, -mx * 3, 1e30, -1e30, 2.0 ** (emin - mbits),
                2.0 ** (emin - mbits - 1), 2.0 ** (emin - mbits - 1) * 1.0001, 3 * 2.0 ** (emin - mbits - 1),
                1.0 + 2.0 ** (-mbits - 1), 1.0 + 3 * 2.0 ** (-mbits - 1), 1e-30]
        # every tie point between neighbouring codes and points just around them
        codes = sorted({min(m * 2.0 ** (e - mbits), mx) for e in range(emin, 17)
                        for m in range(0 if e == emin else 2 ** mbits, 2 ** (mbits + 1))})
        for lo, hi in zip(codes[:-1], codes[1:]):
            mid = (lo + hi) / 2
            vals += [mid, -mid, float(np.nextafter(np.float32(mid), np.float32(0))),
                     float(np.nextafter(np.float32(mid), np.float32(1e9)))]
        x = torch.tensor(vals, dtype=torch.float32)
        x = torch.cat([x, torch.randn(20000, generator=g) * torch.exp(torch.randn(20000, generator=g) * 4)])
        got = fp8_quantize(x, torch.tensor(1.0), fmt).numpy().astype(np.float64)
        want = np.array([ref_fp8_round(float(v), mbits, emin, mx) for v in x.numpy()])
        nbad = int((got != want).sum())
        print("selftest %s: %d values, %d mismatches" % (fmt, x.numel(), nbad))
        if nbad:
            i = np.nonzero(got != want)[0][:5]
            print("   e.g.", x.numpy()[i], got[i], want[i])
            ok = False
    # scale rule
    assert compute_scale(np.float32(0), E4M3_MAX, 0, np.float32(3)) == np.float32(3)
    assert compute_scale(np.float32(np.inf), E4M3_MAX, 0, np.float32(3)) == np.float32(3)
    assert compute_scale(np.float32(1e-44), E4M3_MAX, 0, np.float32(3)) == np.float32(FLT_MAX)
    assert compute_scale(np.float32(2), E4M3_MAX, 1, np.float32(3)) == np.float32(112)
    print("selftest fp8 cast %s" % ("ok" if ok else "FAIL"))
    return ok


def builtin_model(cfg, P, tok, tgt):
    """The same model written a second way with torch built-ins (rms_norm, complex RoPE, SDPA GQA)."""
    F = torch.nn.functional
    B, T, C, NH, NKV, HS = cfg.B, cfg.T, cfg.C, cfg.NH, cfg.NKV, cfg.HS
    rms = lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps=cfg.norm_eps)
    inv = 1.0 / (cfg.rope_theta ** (torch.arange(0, HS, 2, dtype=torch.float64) / HS))
    if cfg.rope_scaling is not None:  # llama3, as bands of torch.where (transformers' way of writing it)
        r = cfg.rope_scaling
        wavelen, old_T = 2 * math.pi / inv, r["original_T"]
        smooth = (old_T / wavelen - r["low_freq_factor"]) / (r["high_freq_factor"] - r["low_freq_factor"])
        mid = (1 - smooth) * inv / r["factor"] + smooth * inv
        inv = torch.where(wavelen < old_T / r["high_freq_factor"], inv,
                          torch.where(wavelen > old_T / r["low_freq_factor"], inv / r["factor"], mid))
    ang = torch.outer(torch.arange(T, dtype=torch.float64), inv)
    cis = torch.polar(torch.ones_like(ang), ang)

    def rope_c(x):   # pairs (x[2i], x[2i+1]) as the complex number x[2i] + i x[2i+1]
        xc = torch.view_as_complex(x.reshape(*x.shape[:-1], HS // 2, 2).contiguous())
        return torch.view_as_real(xc * cis[None, :, None, :]).flatten(-2)

    x = F.embedding(tok, P["wte"])
    for l in range(cfg.L):
        q, k, v = F.linear(rms(x, P["ln1w"][l]), P["wqkv"][l]).split([NH * HS, NKV * HS, NKV * HS], -1)
        q = rope_c(q.reshape(B, T, NH, HS)).transpose(1, 2)
        k = rope_c(k.reshape(B, T, NKV, HS)).transpose(1, 2)
        v = v.reshape(B, T, NKV, HS).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        x = x + F.linear(y.transpose(1, 2).reshape(B, T, C), P["wo"][l])
        g, u = F.linear(rms(x, P["ln2w"][l]), P["w13"][l]).chunk(2, -1)
        x = x + F.linear(F.silu(g) * u, P["w2"][l])
    logits = F.linear(rms(x, P["lnfw"]), P["wte"] if cfg.tied_embeddings else P["lm_head"])
    return logits, F.cross_entropy(logits.reshape(-1, cfg.V), tgt.reshape(-1))


# a config with tied embeddings and llama3 scaling whose 4 frequencies (HS 8, theta 10000: wavelengths
# 6.3, 63, 628, 6283) fall in all three bands of original_T 1024: kept below 256, divided above 1024
TIED_LLAMA3 = dict(tied_embeddings=1, rope_scaling={"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                                    "original_T": 1024})


def selftest_model():
    """float64: run() vs the built-in model + torch.optim.AdamW + clip_grad_norm_ (which adds 1e-6
    to the norm, hence the tolerance), untied and unscaled, and tied with llama3 scaling; fp8 mode
    with an identity quantizer vs plain float32; a tied model vs the untied one with lm_head = wte."""
    ok = True
    for A, extra in ((1, {}), (2, {}), (1, TIED_LLAMA3)):
        cfg = Config(grad_accum=A, fp8=0, **extra)
        params, inp, tgt = make_init(cfg, 99)
        res = run(cfg, params, inp, tgt, verbose=False)
        P = unflatten(cfg, params, torch.float64)
        names = cfg.param_names()
        toks = torch.tensor(inp, dtype=torch.int64).reshape(A, cfg.B, cfg.T)
        tgts = torch.tensor(tgt, dtype=torch.int64).reshape(A, cfg.B, cfg.T)
        groups = [{"params": [P[n] for n in names if DECAYED[n]], "weight_decay": cfg.weight_decay},
                  {"params": [P[n] for n in names if not DECAYED[n]], "weight_decay": 0.0}]
        opt = torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.adam_eps)
        losses = []
        for s in range(cfg.nsteps):
            opt.zero_grad()
            tot = 0.0
            for a in range(A):
                lg, loss = builtin_model(cfg, P, toks[a], tgts[a])
                (loss / A).backward()
                tot += loss.item()
                if s == 0 and a == 0:
                    lg0 = lg.detach().numpy().reshape(-1)
            losses.append(tot / A)
            if s == 0:
                g0 = np.concatenate([P[n].grad.numpy().reshape(-1) for n in names])
            torch.nn.utils.clip_grad_norm_([P[n] for n in names], cfg.grad_clip)
            opt.step()
        e = (np.abs(lg0 - res["logits"]).max(), np.abs(g0 - res["grads"]).max() / np.abs(g0).max(),
             np.abs(np.array(losses) - res["losses"]).max())
        good = e[0] < 1e-5 and e[1] < 1e-5 and e[2] < 1e-5
        ok &= good
        print("selftest built-in model, grad_accum %d%s: logits %.2g, grads (rel to max) %.2g, losses %.2g  %s"
              % (A, ", tied, llama3 RoPE scaling" if extra else "", e[0], e[1], e[2], "ok" if good else "FAIL"))
    ok &= selftest_tied()
    global fp8_quantize
    saved = fp8_quantize
    fp8_quantize = lambda v, s, f: v * s
    try:
        cfg = Config(grad_accum=2, fp8=1)
        params, inp, tgt = make_init(cfg, 7)
        r8 = run(cfg, params, inp, tgt, verbose=False)
        r32 = run(Config(grad_accum=2, fp8=0), params, inp, tgt, dtype=torch.float32, verbose=False)
    finally:
        fp8_quantize = saved
    e = np.linalg.norm(r8["grads"] - r32["grads"]) / np.linalg.norm(r32["grads"])
    good = e < 1e-5 and np.abs(r8["losses"] - r32["losses"]).max() < 1e-5
    ok &= good
    print("selftest fp8 plumbing with an identity quantizer vs float32: grad rel err %.2g  %s"
          % (e, "ok" if good else "FAIL"))
    return ok


def selftest_tied():
    """Step 0 of a tied model (float64) = the untied model whose lm_head is a copy of wte: the same
    logits and loss, and the tied wte gradient is the sum of the untied wte and lm_head gradients (up
    to the float32 rounding of the stored gradients)."""
    tied = Config(tied_embeddings=1)
    params, inp, tgt = make_init(tied, 5)
    res = run(tied, params, inp, tgt, verbose=False)
    untied = Config()
    nwte = tied.V * tied.C
    r2 = run(untied, np.concatenate([params, params[:nwte]]), inp, tgt, verbose=False)
    g_untied = r2["grads"][:tied.num_params()].astype(np.float64)
    g_untied[:nwte] += r2["grads"][tied.num_params():]
    e = (np.abs(res["logits"] - r2["logits"]).max(), abs(res["loss"] - r2["loss"]),
         np.abs(res["grads"] - g_untied).max() / np.abs(g_untied).max())
    good = e[0] < 1e-6 and e[1] < 1e-6 and e[2] < 1e-6 and tied.num_params() == untied.num_params() - nwte
    print("selftest tied = untied with lm_head = wte: logits %.2g, loss %.2g, wte grad = wte + lm_head grads %.2g  %s"
          % (e[0], e[1], e[2], "ok" if good else "FAIL"))
    return good


# (theta, HS, factor, low_freq_factor, high_freq_factor, original_T): Llama 3.1 8B, Llama 3.2 1B, TIED_LLAMA3,
# dev/test/fixtures/hf/llama3 and llama32
LLAMA3_CONFIGS = [(500000.0, 128, 8.0, 1.0, 4.0, 8192), (500000.0, 64, 32.0, 1.0, 4.0, 8192), (10000.0, 8, 8.0, 1.0, 4.0, 1024),
                  (10000.0, 16, 8.0, 1.0, 4.0, 32), (500000.0, 16, 32.0, 1.0, 4.0, 8192)]


def selftest_rope_vs_transformers():
    """rope_inv_freq with llama3 scaling against transformers' own (modeling_rope_utils'
    ROPE_INIT_FUNCTIONS["llama3"], which LlamaForCausalLM uses) for LLAMA3_CONFIGS. transformers
    computes in float32, rope_inv_freq in float64: they differ by float32 rounding, measured 3.2e-7
    at most; 1e-6 is 8 float32 ulps. Each config must also move some frequency off the unscaled one
    by more than 10%, so the comparison sees the scaling."""
    try:
        from transformers import LlamaConfig
        from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    except ImportError as e:
        print("selftest llama3 frequencies vs transformers: SKIPPED (%s; pip install transformers)" % e)
        return True
    ok = True
    for theta, HS, factor, low, high, old_T in LLAMA3_CONFIGS:
        r = {"factor": factor, "low_freq_factor": low, "high_freq_factor": high, "original_T": old_T}
        cfg = Config(V=8, L=1, C=2 * HS, NH=2, NKV=2, FF=8, rope_theta=theta, rope_scaling=r)
        ours = rope_inv_freq(cfg).numpy()
        plain = rope_inv_freq(Config(V=8, L=1, C=2 * HS, NH=2, NKV=2, FF=8, rope_theta=theta)).numpy()
        hf = LlamaConfig(hidden_size=2 * HS, num_attention_heads=2, head_dim=HS, max_position_embeddings=2 * old_T,
                         rope_parameters={"rope_type": "llama3", "rope_theta": theta, "factor": factor, "low_freq_factor": low,
                                          "high_freq_factor": high, "original_max_position_embeddings": old_T})
        theirs = ROPE_INIT_FUNCTIONS["llama3"](hf, "cpu")[0].double().numpy()
        e, moved = np.abs(ours / theirs - 1).max(), np.abs(ours / plain - 1).max()
        good = e < 1e-6 and moved > 0.1
        ok &= good
        print("selftest llama3 frequencies vs transformers (theta %g, HS %d, factor %g, low %g, high %g, original %d):"
              " max rel diff %.2g, scaling moves them up to %.2g  %s" % (theta, HS, factor, low, high, old_T, e, moved,
                                                                         "ok" if good else "FAIL"))
    return ok


# ----------------------------------------------------------------------------------------------

def make_one(path, cfg, seed):
    params, inputs, targets = make_init(cfg, seed)
    print("== %s (fp8=%d, grad_accum=%d, computed in %s)" % (path, cfg.fp8, cfg.grad_accum,
                                                             "float32" if cfg.fp8 else "float64"))
    res = run(cfg, params, inputs, targets)
    write_fixture(path, cfg, params, inputs, targets, res)
    print_summary(cfg, res)
    print("wrote %s (%d bytes)" % (path, os.path.getsize(path)))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", help="directory: write the two standard fixtures llama_fp32.bin, llama_fp8.bin")
    p.add_argument("--out-file", help="write one fixture with the config given by the options below")
    p.add_argument("--check", metavar="FILE", help="re-read FILE and re-verify it against a fresh run")
    p.add_argument("--selftest", action="store_true", help="check the fp8 cast against a Python encoder and the model against torch built-ins")
    p.add_argument("--V", type=int, default=96)
    p.add_argument("--L", type=int, default=2)
    p.add_argument("--C", type=int, default=32)
    p.add_argument("--NH", type=int, default=4)
    p.add_argument("--NKV", type=int, default=2)
    p.add_argument("--FF", type=int, default=64)
    p.add_argument("--B", type=int, default=2)
    p.add_argument("--T", type=int, default=16)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--grad_accum", type=int, default=1)
    p.add_argument("--fp8", type=int, default=0)
    p.add_argument("--history", type=int, default=4)
    p.add_argument("--margin", type=int, default=0)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument("--seed", type=int, default=1234)
    a = p.parse_args()

    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    if not (a.out or a.out_file or a.check or a.selftest):
        p.error("give --out DIR, --out-file FILE, --check FILE or --selftest")
    ok = True
    if a.selftest:
        ok &= selftest()
        ok &= selftest_model()
        ok &= selftest_rope_vs_transformers()
        print("SELFTEST %s" % ("PASSED" if ok else "FAILED"))
    if a.out:
        base = dict(V=96, L=2, C=32, NH=4, NKV=2, FF=64, B=2, T=16, nsteps=5, lr=1e-3)
        make_one(os.path.join(a.out, "llama_fp32.bin"), Config(**base, grad_accum=1, fp8=0), a.seed)
        make_one(os.path.join(a.out, "llama_fp8.bin"),
                 Config(**base, grad_accum=2, fp8=1, history=4, margin=0), a.seed + 1)
    if a.out_file:
        cfg = Config(V=a.V, L=a.L, C=a.C, NH=a.NH, NKV=a.NKV, FF=a.FF, B=a.B, T=a.T, nsteps=a.steps,
                     grad_accum=a.grad_accum, fp8=a.fp8, history=a.history, margin=a.margin, lr=a.lr)
        make_one(a.out_file, cfg, a.seed)
    if a.check:
        ok &= check(a.check)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
