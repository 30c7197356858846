"""Converts a Llama model from Hugging Face or llama.cpp into our model file (fp32 weights, the config
in its header; llmc/model_file.h), and its tokenizer into a decode table beside it, so that
`train_llama_fp8 -init_from OUT.bin -tok OUT_tokenizer.bin` fine-tunes it.

    python3 scripts/hf_import.py ~/models/SmolLM2-135M-Instruct smollm2.bin
    python3 scripts/hf_import.py SmolLM2-135M-Instruct.Q4_1.gguf smollm2.bin

SRC is a Hugging Face model folder (config.json and model.safetensors, or shards with
model.safetensors.index.json; float32, float16 or bfloat16) or a GGUF file of the llama architecture
(any type the gguf package dequantizes, e.g. Q4_1, Q8_0). The tokenizer (tokenizer.json or
tokenizer.model in the folder; tokenizer.ggml.* in a GGUF) becomes OUT_tokenizer.bin: OUT with its
.bin replaced by _tokenizer.bin, its document-start id the model's BOS, padded with empty pieces to
the model's vocabulary if the tokenizer has fewer tokens. The model's BOS, EOS and padding ids go
into OUT_special_tokens.json beside it (llama_fp8/model_file.py), where scripts/hf_export.py finds
them: a folder's generation_config.json, else its config.json, else its tokenizer's
(tokenizer_config.json's bos_token / eos_token / pad_token); a GGUF's tokenizer.ggml.bos_token_id,
eos_token_id and padding_token_id.

From a GGUF, the Hugging Face tokenizer folder OUT_hf_tokenizer/ too (for dev/data/tokenize_text.py and
scripts/hf_export.py --tokenizer), rebuilt from tokenizer.ggml.*: a byte-level BPE tokenizer.json
(tokenizer.ggml.model gpt2, with the tokenizers library) or a SentencePiece tokenizer.model (llama,
from its pieces, scores and types), and tokenizer_config.json. --tokenizer_only writes the tokenizer's
files alone, for a GGUF that holds only a vocabulary:

    python3 scripts/hf_import.py --tokenizer_only llama.cpp/models/ggml-vocab-llama-spm.gguf llama2.bin

Llama 3.1 / 3.2 RoPE scaling comes from config.json's rope_scaling (rope_parameters), or in a GGUF from
rope_freqs.weight, llama.cpp's per-frequency factors: they are read as llama3 scaling if they are
those of the file's rope.scaling keys or of Llama 3.1's or 3.2's published parameters, and refused
otherwise.

Tensors stream one at a time (a 16 GB checkpoint never sits in memory twice). What the trainer
cannot represent is refused with the field named: biases, a head_dim other than C/NH, RoPE other
than default and llama3, sliding windows, mixtures of experts, and any missing, extra or misshapen
tensor. Errors print `error: <file>: <problem>`, exit 1 and leave no output.
"""
import argparse
import contextlib
import importlib.util
import json
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats  # first, so that a missing package is named

with formats.required_packages():
    import numpy as np
    from tqdm import tqdm
    from llama_fp8 import model_file
    from llama_fp8.hf_layout import (GGUF, HF, folder_special_ids, has_tokenizer, pick_special_ids, read_json,
                                     rope_permute, source_tensors)
from llama_fp8.model_file import FormatError, ROPE_LLAMA3  # noqa: E402


# --- Hugging Face folders ---

def _get(path, hf, key, kind=int, default=None, within=""):
    """hf[key] as a kind (int or float); within names the dict hf is in config.json, for messages."""
    value = hf.get(key)
    if value is None:  # absent or null: transformers' default
        value = default
    if value is None:
        raise FormatError(path, f"{within}{key} is missing")
    try:
        if kind is int and (isinstance(value, bool) or int(value) != value):
            raise ValueError
        return kind(value)
    except (TypeError, ValueError):
        raise FormatError(path, f"{within}{key} = {value!r} is not a{'n integer' if kind is int else ' number'}") from None


MOE_KEYS = ["num_local_experts", "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_intermediate_size"]


def config_from_hf(path, hf):
    """Our config from a parsed config.json, or FormatError naming the field it cannot represent."""
    if hf.get("model_type") != "llama":
        raise FormatError(path, f"model_type is {hf.get('model_type')!r}: only 'llama' (LlamaForCausalLM) is supported")
    if hf.get("architectures") not in (None, ["LlamaForCausalLM"]):
        raise FormatError(path, f"architectures is {hf['architectures']}: only LlamaForCausalLM is supported")
    for key in ("attention_bias", "mlp_bias"):
        if hf.get(key):
            raise FormatError(path, f"{key} is true: this trainer's linears have no biases")
    if hf.get("hidden_act", "silu") != "silu":
        raise FormatError(path, f"hidden_act is {hf['hidden_act']!r}: the MLP here is SwiGLU (silu)")
    for key in MOE_KEYS:
        if hf.get(key):
            raise FormatError(path, f"{key} = {hf[key]}: mixtures of experts are not supported")
    if hf.get("sliding_window") is not None or hf.get("use_sliding_window"):
        raise FormatError(path, f"sliding_window = {hf.get('sliding_window')}: attention here is full causal")
    if any(t != "full_attention" for t in hf.get("layer_types") or []):
        raise FormatError(path, f"layer_types {sorted(set(hf['layer_types']))}: attention here is full causal in every layer")
    C, NH = _get(path, hf, "hidden_size"), _get(path, hf, "num_attention_heads")
    c = model_file.new_config(
        V=_get(path, hf, "vocab_size"), L=_get(path, hf, "num_hidden_layers"), C=C, NH=NH,
        NKV=_get(path, hf, "num_key_value_heads", default=NH), FF=_get(path, hf, "intermediate_size"),
        norm_eps=_get(path, hf, "rms_norm_eps", float, 1e-6),  # LlamaConfig's defaults where a key may be left out
        tied_embeddings=int(bool(hf.get("tie_word_embeddings", False))),
        max_T=_get(path, hf, "max_position_embeddings", default=0))
    # transformers 4.x: rope_theta at the top, rope_scaling a dict or null; 5.x: both inside rope_parameters
    rope_key = next((k for k in ("rope_parameters", "rope_scaling") if isinstance(hf.get(k), dict)), None)
    rope = hf[rope_key] if rope_key else {}
    type_key = "type" if "type" in rope and "rope_type" not in rope else "rope_type"  # 4.x wrote either
    rope_type = rope.get(type_key, "default")
    within = f"{rope_key}."
    if hf.get("rope_theta") is not None:
        c["rope_theta"] = _get(path, hf, "rope_theta", float)
    else:
        c["rope_theta"] = _get(path, rope, "rope_theta", float, 10000.0, within)
    if rope_type == "llama3":
        c.update(rope_scaling=ROPE_LLAMA3, rope_factor=_get(path, rope, "factor", float, within=within),
                 rope_low_freq_factor=_get(path, rope, "low_freq_factor", float, within=within),
                 rope_high_freq_factor=_get(path, rope, "high_freq_factor", float, within=within),
                 rope_original_T=_get(path, rope, "original_max_position_embeddings", within=within))
    elif rope_type != "default":
        raise FormatError(path, f"{rope_key}.{type_key} is {rope_type!r}: only 'default' and 'llama3' RoPE are supported")
    bad = model_file.config_problem(c)
    if bad:
        raise FormatError(path, bad)
    if hf.get("head_dim") is not None and hf["head_dim"] != C // NH:
        raise FormatError(path, f"head_dim is {hf['head_dim']}, not hidden_size / num_attention_heads = {C} / {NH}:"
                                " this trainer's head size is C / NH")
    return c


SAFETENSORS_DTYPES = ("F32", "F16", "BF16")


class HFFolder:
    """A Hugging Face model folder: its config and its tensors across one or many safetensors files."""

    def __init__(self, folder, stack):
        with formats.required_packages():
            from safetensors import safe_open
            import ml_dtypes  # noqa: F401  (safetensors hands out bfloat16 tensors as ml_dtypes arrays)
        self.folder = folder
        self.config_path = os.path.join(folder, "config.json")
        self.hf = read_json(self.config_path)
        if not isinstance(self.hf, dict):
            raise FormatError(self.config_path, "is not a JSON object")
        self.config = config_from_hf(self.config_path, self.hf)
        index_path, single = os.path.join(folder, "model.safetensors.index.json"), os.path.join(folder, "model.safetensors")
        if os.path.isfile(index_path):
            index = read_json(index_path)
            weight_map = index.get("weight_map") if isinstance(index, dict) else None
            if not isinstance(weight_map, dict):
                raise FormatError(index_path, "no weight_map")
            self.source = index_path
        elif os.path.isfile(single):
            weight_map, self.source = None, single
        else:
            raise FormatError(folder, "no model.safetensors or model.safetensors.index.json in this folder"
                                      " (a pytorch_model.bin checkpoint must be saved as safetensors first)")
        files = sorted(set(weight_map.values())) if weight_map else ["model.safetensors"]
        self.handles, self.file_of, self.shapes, self.dtypes = {}, {}, {}, {}
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                holds = next(t for t, f in weight_map.items() if f == name)
                raise FormatError(index_path, f"names shard {name} (holding {holds}), which is not in {folder}")
            try:
                handle = stack.enter_context(safe_open(path, framework="numpy"))
                for t in handle.keys():
                    s = handle.get_slice(t)
                    self.file_of[t], self.shapes[t], self.dtypes[t] = path, tuple(s.get_shape()), s.get_dtype()
            except Exception as e:  # the library's SafetensorError: truncated, bad header
                raise FormatError(path, f"not a readable safetensors file ({e})") from None
            self.handles[path] = handle
        if weight_map:
            for t, name in weight_map.items():
                if self.file_of.get(t) != os.path.join(folder, name):
                    raise FormatError(index_path, f"says {t} is in {name}, which does not hold it")
            # a shard's tensors that the index leaves out are not part of the model for transformers either
            self.shapes = {t: self.shapes[t] for t in weight_map}
        self.rope_note = None
        # old checkpoints saved RoPE's inverse frequencies, which are computed from the config instead
        self.shapes = {t: s for t, s in self.shapes.items() if not t.endswith("rotary_emb.inv_freq")}
        self.column = HF

    def describe(self):
        counts = {}
        for t in self.shapes:
            counts[self.dtypes[t]] = counts.get(self.dtypes[t], 0) + 1
        return ", ".join(f"{n} {d}" for d, n in sorted(counts.items())) + " tensors"

    def load(self, name, part):
        path, dtype = self.file_of[name], self.dtypes[name]
        if dtype not in SAFETENSORS_DTYPES:
            raise FormatError(path, f"{name} is {dtype}: only F32, F16 and BF16 tensors are read")
        try:
            w = self.handles[path].get_tensor(name).astype(np.float32)
        except Exception as e:
            raise FormatError(path, f"cannot read tensor {name} ({e})") from None
        if part in ("q", "k"):
            w = rope_permute(w, self.config["NH"] if part == "q" else self.config["NKV"])
        return w

    def special_ids(self):
        return folder_special_ids(self.folder)

    def decode_table(self):
        """(where, pieces) of the folder's tokenizer, or None if it has none."""
        if not has_tokenizer(self.folder):
            return None
        path = formats.tokenizer_file(self.folder)
        return path, formats.decode_table_from_tokenizer(path)


# --- GGUF files ---

# tokenizers' decoder specs that decode a GGUF's tokens as formats decodes a tokenizer.json's: gpt2 is
# byte-level BPE (SmolLM2, Llama 3), llama is SentencePiece-style (Llama 2: '▁' a space, <0xNN> a byte)
GGUF_DECODERS = {
    "gpt2": {"type": "ByteLevel"},
    "llama": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"}, "content": " "},
                                               {"type": "ByteFallback"}]},
}
# tokenizer.ggml.token_type values, SentencePiece's own (5 is unused): user-defined is an added token
# that is not special, byte a <0xNN> piece
GGUF_NORMAL, GGUF_UNKNOWN, GGUF_CONTROL, GGUF_USER_DEFINED, GGUF_BYTE = 1, 2, 3, 4, 6
GGUF_TYPES_SENTENCEPIECE = range(1, 7)


class GGUFFile:
    def __init__(self, path, stack):
        with formats.required_packages():
            import gguf
        self.path, self.source = path, path
        try:
            self.reader = gguf.GGUFReader(path)
        except (ValueError, OSError, IndexError) as e:  # bad magic or version, or a file cut short
            raise FormatError(path, f"not a readable GGUF file ({e})") from None
        arch = self.field("general.architecture")
        if arch != "llama":
            raise FormatError(path, f"general.architecture is {arch!r}: only llama is supported")
        self.tensors = {t.name: t for t in self.reader.tensors}
        for key in ("llama.expert_count", "llama.expert_used_count"):
            if self.field(key):
                raise FormatError(path, f"{key} = {self.field(key)}: mixtures of experts are not supported")
        if self.field("llama.rope.scaling.type") not in (None, "none"):
            raise FormatError(path, f"llama.rope.scaling.type is {self.field('llama.rope.scaling.type')!r}: only unscaled"
                                    " RoPE is read from a GGUF")
        C, NH = self.int_field("llama.embedding_length"), self.int_field("llama.attention.head_count")
        embd = self.tensors.get("token_embd.weight")
        self.config = model_file.new_config(
            V=self.int_field("llama.vocab_size", int(embd.shape[1]) if embd is not None else None),
            L=self.int_field("llama.block_count"), C=C, NH=NH,
            NKV=self.int_field("llama.attention.head_count_kv", NH), FF=self.int_field("llama.feed_forward_length"),
            rope_theta=float(self.field("llama.rope.freq_base", 10000.0)),
            norm_eps=float(self.field("llama.attention.layer_norm_rms_epsilon", 1e-5)),
            tied_embeddings=int("output.weight" not in self.tensors),
            max_T=self.int_field("llama.context_length", 0))
        for key in ("llama.rope.dimension_count", "llama.attention.key_length", "llama.attention.value_length"):
            if self.field(key) not in (None, C // NH):
                raise FormatError(path, f"{key} is {self.field(key)}, not the head size embedding_length / head_count ="
                                        f" {C // NH}")
        # ggml lists dimensions fastest first: [cols, rows] is numpy's (rows, cols)
        self.shapes = {name: tuple(int(d) for d in reversed(t.shape)) for name, t in self.tensors.items()}
        self.column = GGUF
        bad = model_file.config_problem(self.config)
        if bad:
            raise FormatError(path, bad)
        self.rope_note = None
        if ROPE_FREQS in self.tensors:
            self.rope_scaling_from_factors()
            del self.shapes[ROPE_FREQS]

    def rope_scaling_from_factors(self):
        """Sets the config's RoPE scaling from rope_freqs.weight, or refuses the file naming the
        mismatch (see llama3_candidates)."""
        c, HS = self.config, self.config["C"] // self.config["NH"]
        if self.shapes[ROPE_FREQS] != (HS // 2,):
            raise FormatError(self.path, f"{ROPE_FREQS} has shape {list(self.shapes[ROPE_FREQS])}, expected [{HS // 2}]"
                                         " (one factor per frequency of a head)")
        factors = self.load(ROPE_FREQS, None).astype(np.float64)
        if not (np.isfinite(factors).all() and (factors > 0).all()):
            raise FormatError(self.path, f"{ROPE_FREQS} holds factors that are not positive numbers: {factors.tolist()}")
        f = model_file.rope_inv_freq(c, HS)
        if (factors == 1).all():  # llama.cpp divides each frequency by its factor: all ones is plain RoPE
            self.rope_note = f"{ROPE_FREQS}: every factor 1, plain RoPE"
            return
        closest = None
        for name, factor, low, high, old_T in llama3_candidates(self, float(factors.max())):
            trial = dict(c, rope_scaling=ROPE_LLAMA3, rope_factor=factor, rope_low_freq_factor=low,
                         rope_high_freq_factor=high, rope_original_T=old_T)
            if model_file.config_problem(trial):
                continue
            # the file's scaled frequencies f / factor against ours (llmc/llama_config.h) with these parameters
            want = model_file.rope_inv_freq(trial, HS)
            rel = np.abs(f / factors - want) / want
            what = (f"llama3 scaling with factor {factor:g}, low_freq_factor {low:g}, high_freq_factor {high:g}, original"
                    f" context {old_T} ({name})")
            if rel.max() <= ROPE_FREQS_RTOL:
                c.update(trial)
                self.rope_note = f"{ROPE_FREQS}: {what}, max relative difference {rel.max():.2g}"
                return
            i = int(rel.argmax())
            if closest is None or rel.max() < closest[0]:
                closest = (rel.max(), f"{what} gives {f[i] / want[i]:.7g} for frequency {i}, the file {factors[i]:.7g}"
                                      f" (relative difference of the frequency {rel[i]:.2g})")
        raise FormatError(self.path, f"{ROPE_FREQS}: the RoPE factors {np.round(factors, 6).tolist()} are not llama3 scaling"
                                     f" with any parameters tried: closest, {closest[1]}; only llama3 scaling is supported")

    def field(self, key, default=None):
        f = self.reader.get_field(key)
        return default if f is None else f.contents()

    def int_field(self, key, default=None):
        value = self.field(key, default)
        if not isinstance(value, int) or isinstance(value, bool):
            raise FormatError(self.path, f"{key} is {'missing' if value is None else repr(value)}: a number is needed"
                                         f"{' (per-layer values are not supported)' if isinstance(value, list) else ''}")
        return value

    def describe(self):
        counts = {}
        for t in self.tensors.values():
            counts[t.tensor_type.name] = counts.get(t.tensor_type.name, 0) + 1
        return ", ".join(f"{n} {d}" for d, n in sorted(counts.items())) + " tensors" if counts else "no tensors (a vocabulary only)"

    def load(self, name, part):
        import gguf
        t = self.tensors[name]
        try:
            w = gguf.quants.dequantize(t.data, t.tensor_type)
        except NotImplementedError:
            raise FormatError(self.path, f"{name} is {t.tensor_type.name}, which the gguf package cannot dequantize") from None
        return np.asarray(w, dtype=np.float32).reshape(self.shapes[name])

    def special_ids(self):
        import gguf
        keys = {"bos_token_id": gguf.Keys.Tokenizer.BOS_ID, "eos_token_id": gguf.Keys.Tokenizer.EOS_ID,
                "pad_token_id": gguf.Keys.Tokenizer.PAD_ID}
        return [(k, self.field(keys[k]), f"{keys[k]} of {self.path}", self.path) for k in model_file.SPECIAL_KEYS]

    def decode_table(self):
        tokens = self.field("tokenizer.ggml.tokens")
        if tokens is None:
            return None
        kind = self.field("tokenizer.ggml.model")
        if kind not in GGUF_DECODERS:
            raise FormatError(self.path, f"tokenizer.ggml.model is {kind!r}: this tool decodes 'gpt2' (byte-level BPE)"
                                         " and 'llama' (SentencePiece) tokenizers")
        # formats' own rule for a tokenizer.json with this decoder, so both sources give one table
        piece_bytes = formats.json_piece_decoder(self.path, {"decoder": GGUF_DECODERS[kind]})
        types = self.field("tokenizer.ggml.token_type") or [0] * len(tokens)
        # as sentencepiece decodes them, control and unknown tokens (<s>, </s>, <unk>) are empty; byte-level
        # BPE's specials stay their text, as formats' tokenizer.json rule has it
        blank = (GGUF_UNKNOWN, GGUF_CONTROL) if kind == "llama" else ()
        pieces = [b"" if ty in blank else piece_bytes(tok) for tok, ty in zip(tokens, types)]
        return "tokenizer.ggml.tokens", pieces


# llama.cpp's converter (convert_hf_to_gguf.py, LlamaModel.generate_extra_tensors) writes Llama 3.1 /
# 3.2 RoPE scaling as rope_freqs.weight, one factor per frequency of a head: 1 where the wavelength
# 2 pi / f is short, factor where long, 1 / ((1 - s) / factor + s) between (llama.cpp divides f by it,
# which gives transformers' and our scaled frequency), and writes no metadata for it. The parameters
# are known only as those that reproduce the factors: the file's rope.scaling keys if it has any,
# Llama 3.1's and 3.2's published values, and Llama 3's low 1, high 4 and context 8192 (llama.cpp's
# defaults) with the file's largest factor as the factor. llama.cpp computes them in float32 (newer
# versions partly in float64): 8 float32 ulps allow for that (measured: 2.7e-7 at most, Llama 3.1 and
# 3.2 heads); another parameter moves some factor by far more.
ROPE_FREQS = "rope_freqs.weight"
ROPE_FREQS_RTOL = 1e-6
LLAMA3_PUBLISHED = [("Llama 3.1's published parameters", 8.0, 1.0, 4.0, 8192),
                    ("Llama 3.2's published parameters", 32.0, 1.0, 4.0, 8192)]


def llama3_candidates(gguf_file, largest):
    """[(what, factor, low_freq_factor, high_freq_factor, original context)] to try for rope_freqs.weight."""
    factor, old_T = (gguf_file.field(f"llama.rope.scaling.{k}") for k in ("factor", "original_context_length"))
    tried = []
    if factor is not None or old_T is not None:
        tried.append(("the file's llama.rope.scaling keys, low and high Llama 3's", float(factor or largest), 1.0, 4.0,
                      int(old_T or 8192)))
    tried += LLAMA3_PUBLISHED + [("the file's largest factor, low, high and context Llama 3's", largest, 1.0, 4.0, 8192)]
    return tried


# --- the Hugging Face tokenizer folder of a GGUF ---

# tokenizer.ggml.pre values whose pre-tokenizer is rebuilt here, as llama.cpp's llama-vocab.cpp splits
# text for them: GPT-2's regex (tokenizers' ByteLevel), or that regex after every digit is split off
# on its own (tokenizers' Digits(individual_digits=True) first: SmolLM2, StarCoder). transformers' GGUF
# loader ignores the key and splits digits as GPT-2 does, unlike the model's own tokenizer.
GGUF_PRE_DIGITS = {None: False, "default": False, "gpt-2": False, "smollm": True, "starcoder": True, "refact": True}


def gpt2_tokenizer(gguf_file, folder):
    """Writes folder/tokenizer.json: the byte-level BPE tokenizer of tokenizer.ggml.*, built with the
    tokenizers library."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    tokens = gguf_file.field("tokenizer.ggml.tokens")
    merges = [tuple(m.split(" ", 1)) for m in gguf_file.field("tokenizer.ggml.merges") or []]
    types = gguf_file.field("tokenizer.ggml.token_type") or [0] * len(tokens)
    tok = Tokenizer(models.BPE({t: i for i, t in enumerate(tokens)}, merges))
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.pre_tokenizer = (pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
                         if GGUF_PRE_DIGITS[gguf_file.field("tokenizer.ggml.pre")] else byte_level)
    tok.decoder = decoders.ByteLevel()
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, ty in zip(tokens, types) if ty == GGUF_CONTROL])
    tok.add_tokens([AddedToken(t, normalized=False) for t, ty in zip(tokens, types) if ty == GGUF_USER_DEFINED])
    tok.save(os.path.join(folder, "tokenizer.json"))
    return f"tokenizer.json ({len(tokens)} tokens, {len(merges)} merges, pre {gguf_file.field('tokenizer.ggml.pre')!r})"


def sentencepiece_tokenizer(gguf_file, folder):
    """Writes folder/tokenizer.model: the SentencePiece BPE model of a llama GGUF's tokenizer.ggml.*
    (pieces, scores and types are the .model's own, which llama.cpp's converter copied; its token
    types are SentencePiece's), normalized as llama.cpp tokenizes it: a space prefix unless
    tokenizer.ggml.add_space_prefix is false, spaces as '▁', nothing else changed."""
    with formats.required_packages():
        from sentencepiece import sentencepiece_model_pb2 as spm_pb2
    tokens, scores = gguf_file.field("tokenizer.ggml.tokens"), gguf_file.field("tokenizer.ggml.scores")
    types = gguf_file.field("tokenizer.ggml.token_type") or [GGUF_NORMAL] * len(tokens)
    m = spm_pb2.ModelProto()
    for token, score, ty in zip(tokens, scores, types):
        m.pieces.add(piece=token, score=score, type=ty if ty in GGUF_TYPES_SENTENCEPIECE else GGUF_NORMAL)
    t = m.trainer_spec
    t.model_type, t.vocab_size, t.byte_fallback = spm_pb2.TrainerSpec.BPE, len(tokens), GGUF_BYTE in types
    for name, key in (("unk", "unknown"), ("bos", "bos"), ("eos", "eos"), ("pad", "padding")):
        i = gguf_file.field(f"tokenizer.ggml.{key}_token_id")
        setattr(t, f"{name}_id", i if i is not None and 0 <= i < len(tokens) else -1)
    n = m.normalizer_spec
    n.name, n.escape_whitespaces, n.remove_extra_whitespaces = "identity", True, False
    n.add_dummy_prefix = bool(gguf_file.field("tokenizer.ggml.add_space_prefix", True))
    with open(os.path.join(folder, "tokenizer.model"), "wb") as f:
        f.write(m.SerializeToString())
    return f"tokenizer.model (SentencePiece BPE, {len(tokens)} pieces, space prefix {n.add_dummy_prefix})"


def write_hf_tokenizer(gguf_file, folder):
    """Writes folder/: the Hugging Face tokenizer that tokenizer.ggml.* describes (a gpt2 GGUF's
    tokenizer.json, a llama GGUF's SentencePiece tokenizer.model) and tokenizer_config.json, through a
    temporary folder renamed into place. Returns what it wrote, or why it wrote nothing (another
    tokenizer kind or pre-tokenizer, no scores: tokenize with the model's own tokenizer then)."""
    import shutil
    kind, pre = gguf_file.field("tokenizer.ggml.model"), gguf_file.field("tokenizer.ggml.pre")
    why_not = None
    if kind == "gpt2" and pre not in GGUF_PRE_DIGITS:
        why_not = f"pre {pre!r} (this tool rebuilds 'gpt2' with pre {', '.join(repr(k) for k in GGUF_PRE_DIGITS if k)})"
    elif kind == "llama" and gguf_file.field("tokenizer.ggml.scores") is None:
        why_not = "no tokenizer.ggml.scores (the SentencePiece merge order)"
    elif kind not in ("gpt2", "llama"):
        why_not = "only 'gpt2' and 'llama' are rebuilt"
    if why_not:
        if os.path.isdir(folder):  # --force: a stale folder would be taken for this model's
            shutil.rmtree(folder)
        return f"no Hugging Face tokenizer folder written: tokenizer.ggml.model {kind!r}, {why_not}"
    config = {"tokenizer_class": "PreTrainedTokenizerFast" if kind == "gpt2" else "LlamaTokenizer",
              "model_max_length": gguf_file.field("llama.context_length")}
    tokens = gguf_file.field("tokenizer.ggml.tokens")
    for name, key in (("bos_token", "bos"), ("eos_token", "eos"), ("unk_token", "unknown"), ("pad_token", "padding")):
        i = gguf_file.field(f"tokenizer.ggml.{key}_token_id")
        if i is not None and 0 <= i < len(tokens):
            config[name] = tokens[i]
    if gguf_file.field("tokenizer.chat_template") is not None:
        config["chat_template"] = gguf_file.field("tokenizer.chat_template")
    if kind == "llama":  # LlamaTokenizer's own switches, which the GGUF records (Llama 2: BOS yes, EOS no)
        for key in ("add_bos_token", "add_eos_token"):
            config[key] = gguf_file.field(f"tokenizer.ggml.{key}")
    tmp = folder + ".tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    os.makedirs(tmp)
    try:
        what = (gpt2_tokenizer if kind == "gpt2" else sentencepiece_tokenizer)(gguf_file, tmp)
        with open(os.path.join(tmp, "tokenizer_config.json"), "w") as f:
            json.dump({k: v for k, v in config.items() if v is not None}, f, indent=2)
        formats.raise_if_interrupted()
        if os.path.isdir(folder):  # --force
            shutil.rmtree(folder)
        os.rename(tmp, folder)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return f"wrote {folder}/: {what} and tokenizer_config.json, the Hugging Face tokenizer of tokenizer.ggml.*"


# --- the import ---

def open_source(src, stack):
    if os.path.isdir(src):
        return HFFolder(src, stack)
    if src.endswith(".gguf") and os.path.isfile(src):
        return GGUFFile(src, stack)
    raise FormatError(src, "not a Hugging Face model folder (config.json + safetensors) nor a .gguf file")


def check_tensors(src, rows):
    """Every tensor the config needs is there with its shape, and there are no others."""
    want = {r.name: r.shape for r in rows}
    problems = [f"missing tensor {n} (expected shape {list(s)})" for n, s in want.items() if n not in src.shapes]
    problems += [f"tensor {n} has shape {list(src.shapes[n])}, expected {list(s)}" for n, s in want.items()
                 if n in src.shapes and src.shapes[n] != s]
    tied = src.config["tied_embeddings"]
    for n in (n for n in src.shapes if n not in want):
        hint = " (the config ties the embeddings: there is no output layer)" if tied and n in ("lm_head.weight", "output.weight") else ""
        problems.append(f"unexpected tensor {n} (shape {list(src.shapes[n])}){hint}")
    if problems:
        more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
        raise FormatError(src.source, "; ".join(problems[:5]) + more)


def padded_table(table, V):
    where, pieces = table
    if len(pieces) > V:
        raise FormatError(where, f"the tokenizer has {len(pieces)} tokens, more than the model's vocabulary of {V}")
    return pieces + [b""] * (V - len(pieces))


def first_id(i):
    return i[0] if isinstance(i, list) else i


def write_weights(src, rows, out):
    n_params = sum(int(np.prod(r.shape)) for r in rows)
    with tqdm(total=n_params, unit="param", unit_scale=True, desc="import", disable=None) as bar:
        def pieces_in_order():
            for r in rows:
                w = src.load(r.name, r.part)
                bar.update(w.size)
                yield r.ours, w
        model_file.write_model_file(out, src.config, pieces_in_order())
    print(f"wrote {out} ({os.path.getsize(out) / 1e6:.1f} MB, {n_params} parameters)")


def import_model(src_path, out, force=False, tokenizer_only=False):
    table_out, special_out = model_file.table_path(out), model_file.special_tokens_path(out)
    written = []

    def remove_written(exc_type, exc, tb):  # all or nothing, on an error and on Ctrl-C alike
        if exc_type is not None:
            for path in written:
                os.remove(path)

    with contextlib.ExitStack() as stack:
        stack.push(remove_written)  # first in, so it runs last, after the source files are closed
        src = open_source(src_path, stack)
        c = src.config
        print(f"{src_path}: {model_file.config_summary(c)}")
        print(f"  {src.describe()}")
        if src.rope_note:
            print(f"  {src.rope_note}")
        if not tokenizer_only:
            rows = source_tensors(c, src.column)
            check_tensors(src, rows)
        ids, id_from, warnings = pick_special_ids(src.special_ids(), c["V"])
        table = src.decode_table()
        if table is not None:
            pieces = padded_table(table, c["V"])
            # the decode table's document start: BOS, else EOS, else 0
            start = next((first_id(i) for i in (ids["bos_token_id"], ids["eos_token_id"]) if i is not None), 0)
        hf_tok = model_file.hf_tokenizer_path(out) if isinstance(src, GGUFFile) and table is not None else None
        if tokenizer_only and table is None:
            raise FormatError(src_path, "--tokenizer_only: the source has no tokenizer")
        outputs = ([] if tokenizer_only else [out]) + ([table_out] if table is not None else []) + [special_out] + \
            ([hf_tok] if hf_tok else [])
        for path in outputs:
            if os.path.exists(path) and not force:
                raise FormatError(path, "exists; pass --force to replace it")
        if not tokenizer_only:
            write_weights(src, rows, out)
            written.append(out)
        if table is not None:
            formats.write_decode_table(table_out, pieces, start)
            written.append(table_out)
            padded = len(pieces) - len(table[1])
            print(f"wrote {table_out}: decode table of {table[0]} ({len(pieces)} tokens"
                  f"{f', {padded} empty ones padding it to V' if padded else ''}; document start {start})")
        else:
            print("no tokenizer in the source: no decode table written")
        for w in warnings:
            print(f"warning: {w}", file=sys.stderr)
        if any(i is not None for i in ids.values()):
            model_file.write_special_tokens(special_out, ids, id_from)
            written.append(special_out)
            print(f"wrote {special_out}: " + ", ".join(f"{k} {ids[k]} ({id_from[k]})" if ids[k] is not None else f"{k} unknown"
                                                        for k in model_file.SPECIAL_KEYS))
        else:
            if os.path.exists(special_out):  # --force: a stale record would be read for this model
                os.remove(special_out)
            print("the source names no BOS, EOS or padding id: no special tokens record written")
        if hf_tok:
            print(write_hf_tokenizer(src, hf_tok))


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python3 scripts/hf_import.py ~/models/SmolLM2-135M-Instruct smollm2.bin\n"
               "  writes smollm2.bin, smollm2_tokenizer.bin (the decode table, when the source has a tokenizer) and\n"
               "  smollm2_special_tokens.json (the BOS, EOS and padding ids, which scripts/hf_export.py reads)")
    parser.add_argument("src", metavar="SRC", help="Hugging Face model folder, or a .gguf file")
    parser.add_argument("out", metavar="OUT.bin", help="our model file to write; beside it OUT_tokenizer.bin and"
                        " OUT_special_tokens.json")
    parser.add_argument("--force", action="store_true",
                        help="replace OUT.bin, OUT_tokenizer.bin and OUT_special_tokens.json if they exist")
    parser.add_argument("--tokenizer_only", action="store_true",
                        help="write the tokenizer's files alone (the decode table, the special tokens record, a GGUF's"
                        " OUT_hf_tokenizer/), not OUT.bin: for a GGUF that holds only a vocabulary, such as llama.cpp's"
                        " models/ggml-vocab-*.gguf")
    args = parser.parse_args()
    formats.note_interrupts()
    try:
        import_model(args.src, args.out, args.force, args.tokenizer_only)
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # every output is written under a temporary name or removed again
        print("interrupted: no files written", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
