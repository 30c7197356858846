"""Model FLOPs per token, the Python twin of llmc/mfu.h's model_flops_per_token (the trainer's MFU).

docs/baselines.md: 6 * (params - embedding) per token for forward + backward, plus causal
attention counted half (QK^T and PV: 6 * L * T * C per token). The parameter count is
llmc/llama_config.h's param_sizes: with tied embeddings there is no lm_head, so only the untied
lm_head counts as a non-embedding matrix. scripts/benchmark.sh (model TFLOP/s of every system) and
dev/reference/bench_torch.py use this; dev/test/test_model_flops.py checks it against the C one.
Standard library only.
"""


def num_params(V, L, C, NH, NKV, FF, tied=False):
    """Elements of every parameter tensor together (llama_config.h's param_sizes total)."""
    qkv = (NH + 2 * NKV) * (C // NH)
    per_layer = C + qkv * C + C * C + C + 2 * FF * C + C * FF   # ln1w wqkv wo ln2w w13 w2
    return V * C + L * per_layer + C + (0 if tied else V * C)   # wte, the layers, lnfw, lm_head


def flops_per_token(V, L, C, NH, NKV, FF, T, tied=False):
    """Training FLOPs per token at sequence length T (mfu.h's model_flops_per_token)."""
    non_embedding = num_params(V, L, C, NH, NKV, FF, tied) - V * C
    return 6.0 * non_embedding + 6.0 * L * T * C
