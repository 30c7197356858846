"""Writes the Hugging Face fixtures of dev/test/test_hf.py: random tiny LlamaForCausalLM models saved
by transformers' save_pretrained, each with fixed tokens and transformers' own fp32 logits for them,
so the test can check scripts/hf_import.py + the C reference (dev/test/llama_ref.h) against
transformers without having torch or transformers itself.

    python3 dev/reference/make_hf_fixtures.py --out dev/test/fixtures/hf

Needs torch and transformers (CPU is enough); run once, commit the output (2.0 MB; the same
bytes on every run: seeded, one thread).

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
Weights are not transformers' 0.02 init, under which attention is nearly uniform and logits nearly
flat (a wrong RoPE layout would hardly show): every matrix, the embedding included, N(0, 1/C) or
N(0, 1/FF) (1/fan_in), norm weights 1 + 0.3 N(0, 1).
"""
import argparse
import math
import os
import shutil
import sys

import numpy as np
import torch
from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "dev", "data"))
import formats  # noqa: E402

BASE = dict(vocab_size=128, hidden_size=64, intermediate_size=80, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, rms_norm_eps=1e-5, max_position_embeddings=128, rope_theta=10000.0)
LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 32}
# name: (config overrides, saved dtype, max_shard_size, B, T)
FIXTURES = {
    "mha": (dict(num_key_value_heads=4), torch.float32, None, 2, 16),
    "gqa": (dict(rope_theta=500000.0), torch.float32, None, 2, 16),
    "tied": (dict(vocab_size=320, tie_word_embeddings=True, bos_token_id=1, eos_token_id=2), torch.float32, None, 2, 16),
    "llama3": (dict(rope_scaling=LLAMA3), torch.float32, None, 1, 64),
    "sharded": (dict(rope_theta=500000.0), torch.float32, "100KB", 2, 16),
    "bf16": (dict(rope_theta=500000.0), torch.bfloat16, None, 2, 16),
    "fp16": (dict(rope_theta=500000.0), torch.float16, None, 2, 16),
}
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


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="example: python3 dev/reference/make_hf_fixtures.py --out dev/test/fixtures/hf")
    parser.add_argument("--out", required=True, help="folder to write the fixture folders into")
    args = parser.parse_args()
    torch.set_num_threads(1)  # deterministic sums
    os.makedirs(args.out, exist_ok=True)
    for seed, name in enumerate(FIXTURES):
        make(args.out, name, 1000 + seed)


if __name__ == "__main__":
    main()
