"""How a Llama model of Hugging Face or llama.cpp is laid out against our model file, for
scripts/hf_import.py (in) and scripts/hf_export.py (out): the one table of tensor names (TENSOR_MAP)
and the rows each source tensor fills in ours, RoPE's row order in q_proj / k_proj, and where a
Hugging Face folder records its BOS, EOS and padding ids (docs/hf_interop.md). Problems raise
formats.FormatError(path, problem).
"""
import collections
import json
import os

from . import formats, model_file
from .formats import FormatError

# One row per source tensor, in our file's order; a tensor of ours with several rows stacks their rows
# (wqkv: q, k, v; w13: gate, up), {i} is the layer. part names the rows a source tensor has in ours
# (part_rows); q and k are the ones whose rows the Hugging Face layout permutes (rope_permute).
# GGUF stores q and k in our adjacent-pairs RoPE layout already.
TENSOR_MAP = [  # (ours, Hugging Face, GGUF, part)
    ("wte", "model.embed_tokens.weight", "token_embd.weight", None),
    ("ln1w", "model.layers.{i}.input_layernorm.weight", "blk.{i}.attn_norm.weight", None),
    ("wqkv", "model.layers.{i}.self_attn.q_proj.weight", "blk.{i}.attn_q.weight", "q"),
    ("wqkv", "model.layers.{i}.self_attn.k_proj.weight", "blk.{i}.attn_k.weight", "k"),
    ("wqkv", "model.layers.{i}.self_attn.v_proj.weight", "blk.{i}.attn_v.weight", "v"),
    ("wo", "model.layers.{i}.self_attn.o_proj.weight", "blk.{i}.attn_output.weight", None),
    ("ln2w", "model.layers.{i}.post_attention_layernorm.weight", "blk.{i}.ffn_norm.weight", None),
    ("w13", "model.layers.{i}.mlp.gate_proj.weight", "blk.{i}.ffn_gate.weight", "gate"),
    ("w13", "model.layers.{i}.mlp.up_proj.weight", "blk.{i}.ffn_up.weight", "up"),
    ("w2", "model.layers.{i}.mlp.down_proj.weight", "blk.{i}.ffn_down.weight", None),
    ("lnfw", "model.norm.weight", "output_norm.weight", None),
    ("lm_head", "lm_head.weight", "output.weight", None),
]
HF, GGUF = 1, 2  # columns of TENSOR_MAP
LAYERED = {"ln1w", "wqkv", "wo", "ln2w", "w13", "w2"}  # (L, ...) in our file, one source tensor per layer


def part_rows(c, part):
    hs = c["C"] // c["NH"]
    return {"q": c["NH"] * hs, "k": c["NKV"] * hs, "v": c["NKV"] * hs, "gate": c["FF"], "up": c["FF"]}[part]


# One source tensor: where it goes in ours (tensor, layer or None, first row), its name and shape in
# the source, its part (TENSOR_MAP), and its rank in TENSOR_MAP (the Hugging Face order within a layer)
Source = collections.namedtuple("Source", "ours layer row0 name shape part rank")


def source_tensors(c, column):
    """[Source] in our file's order for config c; column picks the names (HF or GGUF)."""
    rows = []
    for ours, shape in model_file.param_shapes(c):
        per_layer = shape[1:] if ours in LAYERED else shape
        for i in range(c["L"]) if ours in LAYERED else [None]:
            row0 = 0
            for rank, row in enumerate(TENSOR_MAP):
                if row[0] == ours:
                    part = row[3]
                    src_shape = (part_rows(c, part), per_layer[1]) if part else per_layer
                    rows.append(Source(ours, i, row0, row[column].format(i=i), tuple(src_shape), part, rank))
                    row0 += src_shape[0]
    return rows


def rope_permute(w, heads, inverse=False):
    """Rows of q_proj / k_proj between Hugging Face's RoPE layout (dimension j of a head pairs with
    j + HS/2, rotate_half) and ours (pairs 2i, 2i+1): HF row a*HS/2 + b is our row 2b + a. inverse
    goes from ours to HF (export)."""
    n, cols = w.shape
    half = n // heads // 2
    order = (heads, half, 2, cols) if inverse else (heads, 2, half, cols)
    return w.reshape(order).transpose(0, 2, 1, 3).reshape(n, cols)




# --- the special token ids of a Hugging Face folder ---

def read_json(path):
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise FormatError(path, f"not valid JSON ({e})") from None



def has_tokenizer(folder):
    return any(os.path.isfile(os.path.join(folder, f)) for f in ("tokenizer.json", "tokenizer.model"))


def folder_special_ids(folder):
    """[(key, id, where, file)] of a Hugging Face folder's BOS, EOS and padding ids (model_file.SPECIAL_KEYS), in
    the order pick_special_ids prefers them: generation_config.json's (what transformers' generate() stops
    on), config.json's, then the tokenizer's own (tokenizer_config.json's bos_token / eos_token / pad_token,
    a SentencePiece model's ids; formats.special_ids)."""
    found = []
    for name in ("generation_config.json", "config.json"):
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            config = read_json(path)
            if not isinstance(config, dict):
                raise FormatError(path, "is not a JSON object")
            found += [(k, config.get(k), f"{k} of {path}", path) for k in model_file.SPECIAL_KEYS]
    if has_tokenizer(folder):
        found += tokenizer_special_ids(formats.tokenizer_file(folder))
    return found


def tokenizer_special_ids(path):
    """[(key, id, where, file)] of a tokenizer file's own BOS, EOS and padding ids (formats.special_ids)."""
    ids = formats.special_ids(path)
    how = "" if formats.is_sentencepiece(path) else " (its tokenizer_config.json, or its post-processor)"
    return [(k, i, f"the {k[:3]} token of {path}{how}", path) for k, i in zip(model_file.SPECIAL_KEYS, ids)]


def same_ids(a, b):
    """Whether two records of one special token agree: equal, or one of an EOS list."""
    a, b = (x if isinstance(x, list) else [x] for x in (a, b))
    return set(a) <= set(b) or set(b) <= set(a)


def pick_special_ids(found, V):
    """({key: id or None}, {key: where}, [warnings]) from [(key, id, where, file)]: for each key the
    first one that names an id; a later one that names another id is a warning."""
    ids, where, warnings = {}, {}, []
    for key, value, source, path in found:
        if value is None:
            continue
        bad = model_file.token_id_problem(key, value, V)
        if bad:
            raise FormatError(path, bad)
        if key not in ids:
            ids[key], where[key] = value, source
        elif not same_ids(ids[key], value):
            warnings.append(f"{key}: {source} is {value}, but {where[key]} is {ids[key]}: using {ids[key]}")
    return {k: ids.get(k) for k in model_file.SPECIAL_KEYS}, where, warnings

