"""Writes the Hugging Face fixtures of dev/test/test_hf.py: random tiny LlamaForCausalLM models saved
by transformers' save_pretrained, each with fixed tokens and transformers' own fp32 logits for them,
so the test can check scripts/hf_import.py + the C reference (dev/test/llama_ref.h) against
transformers without having torch or transformers itself.

    python3 dev/reference/make_hf_fixtures.py --out dev/test/fixtures/hf

Needs torch, transformers and gguf (CPU is enough); run once, commit the output (2.1 MB; the same
bytes on every run: seeded, one thread). --names remakes only some fixtures (each keeps its seed).

Each fixture is a folder OUT/<name>/: what save_pretrained writes (config.json,
generation_config.json, model.safetensors or model-0000i-of-0000n.safetensors +
model.safetensors.index.json), plus
  tokens.npy  int32 (B, T)     fixed random token ids
  logits.npy  float32 (B, T, V) transformers' logits for them: the model in float32 (a bf16 or fp16
              file is loaded as float32, so the logits are of the rounded weights), eager attention
The fixtures (V 128, C 64, NH 4, L 2, FF 80 unless said):
  mha      NKV 4, rope_theta 10000
  gqa      NKV 2, rope_theta 500000
  tied     NKV 2, tied embeddings, V 320 with a byte-level BPE tokenizer of 300 tokens (trained here
           on TinyShakespeare, SmolLM2's kind, BOS <|im_start|> = 1): the decode table is padded to V
  llama3   NKV 2, llama3 RoPE scaling (factor 8, low 1, high 4, original context 32), rope_theta
           10000 so the 8 frequencies of a 16-wide head fall in all three bands; T 64 > 32
  sharded  the gqa shape saved with max_shard_size 100KB: several shards and the index
  bf16     the gqa shape in a bfloat16 file
  fp16     the gqa shape in a float16 file
  llama32  Llama 3.2's kind, small (V 64, C 32, NH 2, NKV 1, L 1, FF 48, T 32): tied embeddings, rope_theta
           500000 and llama3 scaling with Llama 3.2's published parameters (factor 32, low 1, high 4,
           original context 8192; the 8 frequencies fall 4 kept, 1 interpolated, 3 divided). Also
           written as OUT/llama32.gguf as llama.cpp's convert_hf_to_gguf.py writes it (--outtype f32):
           its metadata, q and k permuted, no output.weight (tied), tokenizer.ggml.bos/eos_token_id,
           and the scaling only as rope_freqs.weight, the factors computed by llama.cpp's own code.
Weights are not transformers' 0.02 init, under which attention is nearly uniform and logits nearly
flat (a wrong RoPE layout would hardly show): every matrix, the embedding included, N(0, 1/C) or
N(0, 1/FF) (1/fan_in), norm weights 1 + 0.3 N(0, 1).
"""
import argparse
import importlib.util
import math
import os
import shutil
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

import gguf
import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from llama_fp8 import formats  # noqa: E402

BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=128, rope_theta=10000.0)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
LLAMA32 = {"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 8192}
SMALL = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=1, num_attention_heads=2,
             num_key_value_heads=1, max_position_embeddings=131072)
# name: (config overrides, saved dtype, max_shard_size, B, T)
FIXTURES = {
    "mha": (dict(num_key_value_heads=4), torch.float32, None, 2, 16),
    "gqa": (dict(rope_theta=500000.0), torch.float32, None, 2, 16),
    "tied": (dict(vocab_size=320, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2), torch.float32, None, 2, 16),
    "llama3": (dict(rope_scaling=LLAMA3), torch.float32, None, 1, 64),
    "sharded": (dict(rope_theta=500000.0), torch.float32, "100KB", 2, 16),
    "bf16": (dict(rope_theta=500000.0), torch.bfloat16, None, 2, 16),
    "fp16": (dict(rope_theta=500000.0), torch.float16, None, 2, 16),
    "llama32": (dict(SMALL, rope_theta=500000.0, tie_word_embeddings=True, rope_scaling=LLAMA32), torch.float32, None, 1, 32),
}
GGUF_FIXTURES = {"llama32"}
TOKENIZER_VOCAB = 300
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def shakespeare_text():
    """TinyShakespeare's val text, decoded from the repository's Llama 2 shard."""
    data = os.path.join(ROOT, "dev", "data", "tinyshakespeare")
    pieces, _ = formats.read_decode_table(os.path.join(data, "llama2_tokenizer.bin"))
    ids = formats.read_shard(os.path.join(data, "tinyshakespeare_llama2_val.bin"))
    return b"".join(pieces[i] for i in ids).decode("utf-8", "replace")


def byte_level_tokenizer():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=TOKENIZER_VOCAB, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(shakespeare_text().split("\n\n"), trainer)
    assert tok.get_vocab_size() == TOKENIZER_VOCAB, tok.get_vocab_size()
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=SPECIAL_TOKENS[1], eos_token=SPECIAL_TOKENS[2])


def llama3_bands(cfg):
    """How many of the head's RoPE frequencies are kept, interpolated and divided by the factor."""
    hs, r = cfg["hidden_size"] // cfg["num_attention_heads"], cfg["rope_scaling"]
    bands = [0, 0, 0]
    for i in range(hs // 2):
        wavelen = 2 * math.pi * cfg["rope_theta"] ** (2 * i / hs)
        old = r["original_max_position_embeddings"]
        bands[0 if wavelen < old / r["high_freq_factor"] else 2 if wavelen > old / r["low_freq_factor"] else 1] += 1
    return bands


def random_weights(model, gen):
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("norm.weight"):
                p.copy_(1 + 0.3 * torch.randn(p.shape, generator=gen))
            else:
                p.copy_(torch.randn(p.shape, generator=gen) / math.sqrt(p.shape[1]))


def llama_cpp_rope_factors(hparams):
    """rope_freqs.weight as llama.cpp's convert_hf_to_gguf.py (LlamaModel.generate_extra_tensors)
    computes it, its code kept as it is there: torch float32 frequencies, the parameters read with
    its defaults, original_max_position_embeddings looked up at the top level of config.json (where
    transformers does not put it: llama.cpp always uses 8192, which is Llama 3.1's and 3.2's)."""
    rope_params = hparams.get("rope_parameters", hparams.get("rope_scaling")) or {}
    base = rope_params.get("rope_theta", 10000.0)
    if (dim := hparams.get("head_dim")) is None:
        dim = hparams["hidden_size"] // hparams["num_attention_heads"]
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor = rope_params.get("factor", 8.0)
    low_freq_factor = rope_params.get("low_freq_factor", 1.0)
    high_freq_factor = rope_params.get("high_freq_factor", 4.0)
    old_context_len = hparams.get("original_max_position_embeddings", 8192)
    assert old_context_len == rope_params["original_max_position_embeddings"], "llama.cpp would convert another model"
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    rope_factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_freq_wavelen:
            rope_factors.append(1)
        elif wavelen > low_freq_wavelen:
            rope_factors.append(factor)
        else:
            smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
            rope_factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(rope_factors, dtype=torch.float32)


LLAMA_CPP_NAMES = {"model.embed_tokens.weight": "token_embd.weight", "model.norm.weight": "output_norm.weight",
                   "lm_head.weight": "output.weight", "input_layernorm": "attn_norm", "self_attn.q_proj": "attn_q",
                   "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output",
                   "post_attention_layernorm": "ffn_norm", "mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up",
                   "mlp.down_proj": "ffn_down"}


def write_gguf(folder, path):
    """The saved fixture folder as llama.cpp's converter writes it with --outtype f32 (metadata,
    rope_freqs first, then the model's tensors, q and k permuted by its LlamaModel.permute)."""
    import json
    from safetensors.torch import load_file
    with open(os.path.join(folder, "config.json")) as f:
        hp = json.load(f)
    nh, nkv = hp["num_attention_heads"], hp["num_key_value_heads"]
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(hp["num_hidden_layers"])
    w.add_context_length(hp["max_position_embeddings"])
    w.add_embedding_length(hp["hidden_size"])
    w.add_feed_forward_length(hp["intermediate_size"])
    w.add_head_count(nh)
    w.add_head_count_kv(nkv)
    w.add_rope_freq_base(hp["rope_parameters"]["rope_theta"])
    w.add_layer_norm_rms_eps(hp["rms_norm_eps"])
    w.add_key_length(hp["head_dim"])
    w.add_value_length(hp["head_dim"])
    w.add_file_type(gguf.LlamaFileType.ALL_F32)
    w.add_vocab_size(hp["vocab_size"])
    w.add_rope_dimension_count(hp["head_dim"])
    w.add_bos_token_id(hp["bos_token_id"])
    w.add_eos_token_id(hp["eos_token_id"])
    w.add_tensor("rope_freqs.weight", llama_cpp_rope_factors(hp).numpy())
    for name, t in load_file(os.path.join(folder, "model.safetensors")).items():
        if name.endswith(("q_proj.weight", "k_proj.weight")):
            n = nh if "q_proj" in name else nkv
            t = t.reshape(n, 2, t.shape[0] // n // 2, *t.shape[1:]).swapaxes(1, 2).reshape(t.shape)
        if name in LLAMA_CPP_NAMES:
            gname = LLAMA_CPP_NAMES[name]
        else:
            _, _, layer, rest = name.split(".", 3)
            gname = f"blk.{layer}.{LLAMA_CPP_NAMES[rest.removesuffix('.weight')]}.weight"
        w.add_tensor(gname, t.to(torch.float32).numpy())
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{path}: {os.path.getsize(path) / 1024:.0f} KB, rope_freqs {llama_cpp_rope_factors(hp).tolist()}")


def make(out, name, seed):
    overrides, dtype, shard, B, T = FIXTURES[name]
    cfg = dict(BASE, **overrides)
    if "rope_scaling" in cfg:
        assert all(llama3_bands(cfg)), llama3_bands(cfg)
    gen = torch.Generator().manual_seed(seed)
    model = LlamaForCausalLM(LlamaConfig(**cfg))
    random_weights(model, gen)
    folder = os.path.join(out, name)
    shutil.rmtree(folder, ignore_errors=True)
    model.to(dtype).save_pretrained(folder, **({"max_shard_size": shard} if shard else {}))
    if name == "tied":
        byte_level_tokenizer().save_pretrained(folder)
    # the saved file, read back as float32: the logits are those of the weights as stored
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="eager").eval()
    tokens = torch.randint(0, cfg["vocab_size"], (B, T), generator=gen, dtype=torch.int64)
    with torch.no_grad():
        logits = model(tokens).logits
    np.save(os.path.join(folder, "tokens.npy"), tokens.numpy().astype(np.int32))
    np.save(os.path.join(folder, "logits.npy"), logits.numpy().astype(np.float32))
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    print(f"{folder}: {sorted(os.listdir(folder))}, {size / 1024:.0f} KB, logits max |.| {logits.abs().max():.3g}")
    if name in GGUF_FIXTURES:
        write_gguf(folder, os.path.join(out, f"{name}.gguf"))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="example: python3 dev/reference/make_hf_fixtures.py --out dev/test/fixtures/hf")
    parser.add_argument("--out", required=True, help="folder to write the fixture folders into")
    parser.add_argument("--names", nargs="+", choices=list(FIXTURES), default=list(FIXTURES), help="the fixtures to make (default all)")
    args = parser.parse_args()
    torch.set_num_threads(1)  # deterministic sums
    os.makedirs(args.out, exist_ok=True)
    for seed, name in enumerate(FIXTURES):
        if name in args.names:
            make(args.out, name, 1000 + seed)


if __name__ == "__main__":
    main()
