"""Writes our model file (a checkpoint of train_llama_fp8, or what scripts/hf_import.py made) as a
Hugging Face model folder: config.json (LlamaForCausalLM), model.safetensors (or shards with
model.safetensors.index.json past --max_shard_size), generation_config.json, and the tokenizer's
files when --tokenizer is given, so that transformers' AutoModelForCausalLM.from_pretrained(OUT_DIR)
loads it with every weight in place.

    python3 scripts/hf_export.py log/model_00000300.bin smollm2-tuned --tokenizer ~/models/SmolLM2-135M-Instruct

--tokenizer is a Hugging Face folder (its tokenizer files are copied), a tokenizer.json or a
SentencePiece .model. The BOS, EOS and padding ids written into config.json and generation_config.json
come from, first to last: --special_tokens FILE (the OUT_special_tokens.json scripts/hf_import.py writes
beside its model file; by default the one beside MODEL.bin if there is one), then the --tokenizer
folder's generation_config.json and config.json, then the tokenizer itself (tokenizer_config.json's
bos_token / eos_token, a SentencePiece model's ids). A later source that names another id is reported;
with none at all, transformers' LlamaConfig defaults (BOS 1, EOS 2) are written, with a warning; a
padding id no source names is left out (LlamaConfig's default: none).

Tensors are read from the model file as they are written, so memory holds one shard at most. OUT_DIR
appears complete or not at all (it is written under a temporary name, then renamed); an existing
non-empty OUT_DIR is refused unless --force. Errors print `error: <file>: <problem>` and exit 1.
"""
import argparse
import importlib.util
import json
import os
import re
import shutil
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats  # first, so that a missing package is named

with formats.required_packages():
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import save_file
    from tqdm import tqdm
    from llama_fp8 import model_file
    from llama_fp8.hf_layout import HF, folder_special_ids, pick_special_ids, rope_permute, source_tensors, tokenizer_special_ids
from llama_fp8.model_file import FormatError, ROPE_LLAMA3  # noqa: E402

TOKENIZER_FILES = ["tokenizer.json", "tokenizer.model", "tokenizer_config.json", "special_tokens_map.json",
                   "added_tokens.json", "vocab.json", "merges.txt", "chat_template.jinja", "chat_template.json"]
DTYPES = {"bf16": "bfloat16", "fp32": "float32"}  # --dtype: torch_dtype
LLAMA_DEFAULT_IDS = {"bos_token_id": 1, "eos_token_id": 2}  # transformers' LlamaConfig, where a config leaves them out
UNITS = {"": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "KIB": 2**10, "MIB": 2**20, "GIB": 2**30}


def parse_size(text):
    """Bytes of a size such as 5GB (decimal, as transformers' max_shard_size), 500MiB or 1000000."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMG]i?B)?\s*", text, re.IGNORECASE)
    if not m:
        raise argparse.ArgumentTypeError(f"{text!r} is not a size like 5GB, 500MB or 1000000")
    return int(float(m.group(1)) * UNITS[(m.group(2) or "").upper()])


def hf_config(c, dtype, ids):
    config = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": c["V"], "hidden_size": c["C"], "intermediate_size": c["FF"], "num_hidden_layers": c["L"],
        "num_attention_heads": c["NH"], "num_key_value_heads": c["NKV"], "head_dim": c["C"] // c["NH"],
        "hidden_act": "silu", "rms_norm_eps": c["norm_eps"], "rope_theta": c["rope_theta"], "rope_scaling": None,
        "tie_word_embeddings": bool(c["tied_embeddings"]), "attention_bias": False, "mlp_bias": False,
        "torch_dtype": DTYPES[dtype], **special_config(ids),
    }
    if c["max_T"] > 0:  # else transformers' default applies: a version-1 file does not say
        config["max_position_embeddings"] = c["max_T"]
    if c["rope_scaling"] == ROPE_LLAMA3:
        config["rope_scaling"] = {"rope_type": "llama3", "factor": c["rope_factor"],
                                  "low_freq_factor": c["rope_low_freq_factor"],
                                  "high_freq_factor": c["rope_high_freq_factor"],
                                  "original_max_position_embeddings": c["rope_original_T"]}
    return config


def special_config(ids):
    """The ids' entries of config.json and generation_config.json: BOS and EOS always, the padding id when known."""
    return {k: ids[k] for k in model_file.SPECIAL_KEYS if ids[k] is not None}


def hf_rows(c):
    """The Hugging Face tensors (hf_layout.Source rows) in the order transformers writes them: the
    embedding, then layer by layer, then the final norm and lm_head."""
    def key(r):
        return (r.layer if r.layer is not None else -1 if r.ours == "wte" else c["L"], r.rank)
    return sorted(source_tensors(c, HF), key=key)


def hf_tensor(c, tensors, r, dtype):
    """Tensor r cut out of our stacked tensors (wqkv -> q, k, v; w13 -> gate, up), q and k permuted back
    to the Hugging Face RoPE layout, cast to dtype (bf16: rounded to nearest even)."""
    w = tensors[r.ours] if r.layer is None else tensors[r.ours][r.layer]
    if r.part:
        w = w[r.row0:r.row0 + r.shape[0]]
    if r.part in ("q", "k"):
        w = rope_permute(np.asarray(w), c["NH"] if r.part == "q" else c["NKV"], inverse=True)
    return np.ascontiguousarray(w, dtype=ml_dtypes.bfloat16 if dtype == "bf16" else np.float32)


def shard_plan(rows, itemsize, max_shard):
    """Rows split in order into shards of at most max_shard bytes (a larger tensor gets one alone)."""
    shards, used = [[]], 0
    for r in rows:
        nbytes = int(np.prod(r.shape)) * itemsize
        if shards[-1] and used + nbytes > max_shard:
            shards.append([])
            used = 0
        shards[-1].append(r)
        used += nbytes
    return shards


def tokenizer_files(src):
    """(tokenizer file for formats, [(source path, name in OUT_DIR)]) of --tokenizer SRC."""
    path = formats.tokenizer_file(src)
    if os.path.isdir(src):
        return path, [(os.path.join(src, f), f) for f in TOKENIZER_FILES if os.path.isfile(os.path.join(src, f))]
    files = [(path, "tokenizer.model" if formats.is_sentencepiece(path) else "tokenizer.json")]
    beside = os.path.join(os.path.dirname(path), "tokenizer_config.json")  # where formats.special_ids looks
    return path, files + ([(beside, "tokenizer_config.json")] if os.path.isfile(beside) else [])


def special_ids(c, model_path, special_tokens, tokenizer):
    """({bos_token_id, eos_token_id, pad_token_id}, {key: where it came from}, [warnings]) for the configs: the
    first source (module docstring) that names each, transformers' default where none does (for the
    padding id: none)."""
    found = []
    record = special_tokens or model_file.special_tokens_path(model_path)
    if special_tokens or os.path.isfile(record):
        ids = model_file.read_special_tokens(record, c["V"])
        found += [(k, ids[k], f"{k} of {record}", record) for k in model_file.SPECIAL_KEYS]
    if tokenizer and os.path.isdir(tokenizer):
        found += folder_special_ids(tokenizer)
    elif tokenizer:
        found += tokenizer_special_ids(formats.tokenizer_file(tokenizer))
    ids, where, warnings = pick_special_ids(found, c["V"])
    for k in model_file.SPECIAL_KEYS:
        if ids[k] is None and k in LLAMA_DEFAULT_IDS:
            ids[k], where[k] = LLAMA_DEFAULT_IDS[k], "transformers' LlamaConfig default"
            warnings.append(f"no source names {k} (give --special_tokens or --tokenizer): writing transformers' default"
                            f" {ids[k]}, which may not be this model's")
    return ids, where, warnings


def write_json(path, obj):
    with open(path, "w") as f:
        json.dump(obj, f, indent=2)
        f.write("\n")


def write_folder(tmp, c, tensors, dtype, max_shard, tok, ids):
    if tok:
        tok_path, files = tok
        pieces = formats.decode_table_from_tokenizer(tok_path)
        if len(pieces) > c["V"]:
            raise FormatError(tok_path, f"the tokenizer has {len(pieces)} tokens, more than the model's vocabulary of {c['V']}")
        for path, name in files:
            shutil.copyfile(path, os.path.join(tmp, name))
        if not any(name == "tokenizer_config.json" for _, name in files):
            # so that AutoTokenizer takes the file as it is rather than guessing from model_type
            cls = "LlamaTokenizer" if formats.is_sentencepiece(tok_path) else "PreTrainedTokenizerFast"
            write_json(os.path.join(tmp, "tokenizer_config.json"), {"tokenizer_class": cls})
    write_json(os.path.join(tmp, "config.json"), hf_config(c, dtype, ids))
    write_json(os.path.join(tmp, "generation_config.json"), special_config(ids))
    rows = hf_rows(c)
    itemsize = 2 if dtype == "bf16" else 4
    shards = shard_plan(rows, itemsize, max_shard)
    n = len(shards)
    umask = os.umask(0)
    os.umask(umask)
    names = ["model.safetensors"] if n == 1 else [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    with tqdm(total=len(rows), unit="tensor", desc="export", disable=None) as bar:
        for name, shard in zip(names, shards):
            arrays = {}
            for r in shard:
                arrays[r.name] = hf_tensor(c, tensors, r, dtype)
                bar.update(1)
            save_file(arrays, os.path.join(tmp, name), metadata={"format": "pt"})  # transformers wants "pt"
            # the library creates its files 0600; the others in the folder get the umask's mode
            os.chmod(os.path.join(tmp, name), 0o666 & ~umask)
    if n > 1:
        total = sum(int(np.prod(r.shape)) * itemsize for r in rows)
        write_json(os.path.join(tmp, "model.safetensors.index.json"),
                   {"metadata": {"total_size": total}, "weight_map": {r.name: names[k] for k, s in enumerate(shards) for r in s}})
    return names


def export(model_path, out, tokenizer, dtype, max_shard, force, special_tokens=None):
    c, step, tensors = model_file.read_model_file(model_path)
    print(f"{model_path}: step {step}, {model_file.config_summary(c)}")
    tok = tokenizer_files(tokenizer) if tokenizer else None
    ids, id_from, warnings = special_ids(c, model_path, special_tokens, tokenizer)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    out = out.rstrip("/") or out
    if os.path.exists(out) and not os.path.isdir(out):
        raise FormatError(out, "exists and is not a folder")
    replace = os.path.isdir(out) and os.listdir(out)
    if replace and not force:
        raise FormatError(out, "exists and is not empty; pass --force to replace it")
    tmp = f"{out}.tmp{os.getpid()}"
    try:
        os.mkdir(tmp)
        names = write_folder(tmp, c, tensors, dtype, max_shard, tok, ids)
        formats.raise_if_interrupted()
        if replace:  # the old folder goes only once the new one is complete
            old = f"{out}.old{os.getpid()}"
            os.rename(out, old)
            os.rename(tmp, out)
            shutil.rmtree(old)
        else:
            if os.path.isdir(out):
                os.rmdir(out)
            os.rename(tmp, out)
    except BaseException as e:
        shutil.rmtree(tmp, ignore_errors=True)
        if isinstance(e, OSError):
            raise FormatError(getattr(e, "filename", None) or out, f"cannot write: {e.strerror or e}") from None
        raise
    pad = f", padding {ids['pad_token_id']}" if ids["pad_token_id"] is not None else ""
    print(f"wrote {out}: config.json ({DTYPES[dtype]}, tie_word_embeddings {bool(c['tied_embeddings'])},"
          f" BOS {ids['bos_token_id']}, EOS {ids['eos_token_id']}{pad}), {', '.join(names)}"
          f"{', model.safetensors.index.json' if len(names) > 1 else ''}, generation_config.json"
          f"{', the tokenizer files' if tok else ''}")
    for k in model_file.SPECIAL_KEYS:
        print(f"  {k} {ids[k]}: {id_from[k]}" if ids[k] is not None else f"  {k}: no source names it, left out")


def main():
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="example:\n  python3 scripts/hf_export.py log/model_00000300.bin smollm2-tuned"
               " --tokenizer ~/models/SmolLM2-135M-Instruct --special_tokens smollm2_special_tokens.json")
    parser.add_argument("model", metavar="MODEL.bin", help="our model file")
    parser.add_argument("out", metavar="OUT_DIR", help="the Hugging Face folder to write")
    parser.add_argument("--tokenizer", metavar="SRC", help="HF folder, tokenizer.json or .model whose tokenizer to include")
    parser.add_argument("--special_tokens", metavar="FILE", help="BOS/EOS record hf_import wrote (OUT_special_tokens.json;"
                        " default: the one beside MODEL.bin, if any)")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="dtype of the safetensors weights (default bf16)")
    parser.add_argument("--max_shard_size", type=parse_size, default="5GB", metavar="SIZE",
                        help="start a new shard past this size, e.g. 5GB (default), 500MB, 2GiB")
    parser.add_argument("--force", action="store_true", help="replace an existing non-empty OUT_DIR")
    args = parser.parse_args()
    formats.note_interrupts()
    try:
        export(args.model, args.out, args.tokenizer, args.dtype, args.max_shard_size, args.force, args.special_tokens)
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(1)
    except KeyboardInterrupt:  # the folder is written under a temporary name, removed again on any exception
        print("interrupted: no files written", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
