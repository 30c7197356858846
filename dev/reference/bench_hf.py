#!/usr/bin/env python3
"""
The fine-tuner's peer for train_llama_fp8: transformers' own LlamaForCausalLM, trained the way a
Hugging Face fine-tune trains it, timed per step. The model is built from a LlamaConfig equal to a
preset of llmc/llama_config.h (bench_torch.py's table: V, L, C, NH, NKV, FF, rope_theta,
max_position_embeddings, tie_word_embeddings; RMSNorm eps 1e-5, no biases, attn_implementation
"sdpa"), randomly initialized by transformers (the speed does not depend on the weights). One step:
model(input_ids=x, labels=x).loss (transformers shifts the labels and computes the loss in fp32
itself), backward, torch.nn.utils.clip_grad_norm_(1.0), torch.optim.AdamW(fused=True), zero_grad;
the model wrapped in torch.compile (--no-compile: eager), as Trainer(torch_compile=True) does.

  --weights bf16   (the default) bf16 weights, gradients and AdamW state: a model loaded with
                   dtype=torch.bfloat16 and trained as it is (what Trainer(bf16=True) then does, and
                   what bench_torch.py --precision bf16 does). Expected to be the faster of the two
                   (every tensor the memory-bound kernels touch is half the size); benchmark.sh's
                   hf-amp system measures the other.
  --weights fp32   fp32 master weights, gradients and AdamW state, forward under
                   torch.autocast("cuda", bfloat16): Trainer(bf16=True) on a model loaded in fp32.
                   The matmuls run in bf16, but the residual stream stays fp32 (the embedding and
                   LlamaRMSNorm's fp32 weight keep it there), and every step re-casts the weights.

  python3 dev/reference/bench_hf.py --model smollm2-135m --B 16 --T 2048
  python3 dev/reference/bench_hf.py --model tiny --B 2 --T 64 --steps 3 --warmup 1 --no-compile   # CPU logic check

Timing, model FLOPs and memory as bench_torch.py (whose timing loop and result line this uses): the
median of --steps steps after --warmup untimed ones, each bracketed by CUDA events; the FLOPs per
token of llama_fp8/model_flops.py, counted as the trainer counts them (with tied embeddings the
lm_head is the embedding, so not counted). The last line is machine-readable, the format of
bench_torch.py, which scripts/benchmark.sh tabulates:

  RESULT system=hf-bf16 model=smollm2-135m B=16 T=2048 tok_s=... tflops=... mem_gib=... dev_gib=... ms=... flops_tok=...

system: hf-bf16 or hf-amp (--weights fp32), with -eager appended under --no-compile; tok_s=OOM
(out of memory) or tok_s=FAIL (any other error) when the run did not finish. No data is read: the
batch is random tokens.
"""
import argparse
import contextlib
import sys

import torch

import bench_torch  # dev/reference/bench_torch.py: the preset table, the timing loop, the RESULT line

WEIGHTS = {  # --weights: (system name, parameter dtype, autocast, what the output says)
    "bf16": ("hf-bf16", torch.bfloat16, False, "bf16 weights, gradients and AdamW state"),
    "fp32": ("hf-amp", torch.float32, True, "fp32 master weights, gradients and AdamW state, forward under bf16 autocast"),
}


def hf_config(cfg, T):
    """transformers' LlamaConfig for one of our presets (bench_torch.Cfg); the context at least T, as
    the trainer sets it."""
    from transformers import LlamaConfig
    return LlamaConfig(vocab_size=cfg.V, hidden_size=cfg.C, intermediate_size=cfg.FF, num_hidden_layers=cfg.L,
                       num_attention_heads=cfg.NH, num_key_value_heads=cfg.NKV, head_dim=cfg.HS,
                       max_position_embeddings=max(cfg.max_T, T), rope_theta=cfg.rope_theta, rms_norm_eps=bench_torch.NORM_EPS,
                       tie_word_embeddings=cfg.tied, hidden_act="silu", attention_bias=False, mlp_bias=False,
                       attention_dropout=0.0, use_cache=False, attn_implementation="sdpa")


def check_model(model, cfg, dtype):
    """The model transformers built is our preset: parameter count (tied shares one tensor) and dtype,
    tying, RoPE frequencies (however this transformers version stores rope_theta) and the attention."""
    nparams = sum(p.numel() for p in model.parameters())
    if nparams != cfg.num_params():
        raise RuntimeError("transformers' model has %d parameters, the preset %d" % (nparams, cfg.num_params()))
    dtypes = {p.dtype for p in model.parameters()}
    if dtypes != {dtype}:
        raise RuntimeError("transformers' model has parameters in %s, not only %s" % (sorted(map(str, dtypes)), dtype))
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    if tied != cfg.tied:
        raise RuntimeError("transformers' model is %stied, the preset %stied" % ("" if tied else "not ", "" if cfg.tied else "not "))
    inv_freq = model.model.rotary_emb.inv_freq.double().cpu()
    want = cfg.rope_theta ** (-2.0 * torch.arange(cfg.HS // 2, dtype=torch.float64) / cfg.HS)
    if inv_freq.shape != want.shape or ((inv_freq - want).abs() / want).max().item() > 1e-6:
        raise RuntimeError("transformers' RoPE frequencies are not theta %g's" % cfg.rope_theta)
    attn = model.config._attn_implementation
    if attn != "sdpa":
        raise RuntimeError("transformers chose attention '%s', not sdpa" % attn)
    return nparams


def bench(args, device):
    import transformers
    from transformers import LlamaForCausalLM
    cfg = bench_torch.Cfg(args.model)
    on_gpu = device.type == "cuda"
    system, dtype, amp, what = WEIGHTS[args.weights]
    torch.manual_seed(1337)
    default_dtype = torch.get_default_dtype()
    torch.set_default_dtype(dtype)   # built (and initialized) directly in its dtype, on the device
    try:
        with device:
            model = LlamaForCausalLM(hf_config(cfg, args.T))
    finally:
        torch.set_default_dtype(default_dtype)
    model.train()
    nparams = check_model(model, cfg, dtype)
    opt = bench_torch.adamw(model, args, on_gpu)
    fwd = torch.compile(model) if args.compile else model
    micro = " x %d micro-steps" % args.accum if args.accum > 1 else ""
    print("%s | B %d T %d%s | transformers %s LlamaForCausalLM, %s attention | %s | %s"
          % (cfg.model_line(nparams), args.B, args.T, micro, transformers.__version__,
             model.config._attn_implementation,
             what, "torch.compile" if args.compile else "eager"), flush=True)

    g = torch.Generator(device=device).manual_seed(1234)
    x = torch.randint(0, cfg.V, (args.accum, args.B, args.T), device=device, generator=g)
    autocast = (lambda: torch.autocast(device.type, dtype=torch.bfloat16)) if amp else contextlib.nullcontext

    def step():
        total = 0.0
        for i in range(args.accum):
            with autocast():   # the forward only, as Trainer does; backward runs outside it
                loss = fwd(input_ids=x[i], labels=x[i], use_cache=False).loss
            (loss / args.accum).backward()
            total = total + loss.detach()
        if args.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total / args.accum

    return bench_torch.time_steps(step, args, on_gpu, cfg.flops_per_token(args.T))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    bench_torch.add_run_args(ap, "smollm2-135m", 16, 2048)
    ap.add_argument("--weights", default="bf16", choices=sorted(WEIGHTS), help="bf16: bf16 weights and AdamW state; "
                    "fp32: fp32 master weights, forward under bf16 autocast")
    args = bench_torch.parse_run_args(ap)
    system = WEIGHTS[args.weights][0] + ("" if args.compile else "-eager")
    try:
        import transformers
    except ImportError as e:
        print("error: bench_hf.py needs transformers, which does not import here: %s" % e)
        print(bench_torch.result_line(args, system, tok_s="FAIL", tflops="FAIL", mem_gib="FAIL"))
        return 1
    if torch.cuda.is_available():
        device = torch.device("cuda")
        name, cap = torch.cuda.get_device_name(), torch.cuda.get_device_capability()
        print("PyTorch %s | %s (sm_%d%d) | transformers %s" % (torch.__version__, name, cap[0], cap[1], transformers.__version__))
    else:
        device = torch.device("cpu")
        print("PyTorch %s | no CUDA GPU: running on the CPU to check the logic only (timings mean nothing) | transformers %s"
              % (torch.__version__, transformers.__version__))
    return bench_torch.run_and_report(args, system, "transformers, %s weights" % args.weights, lambda: bench(args, device))


if __name__ == "__main__":
    sys.exit(main())
