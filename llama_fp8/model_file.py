"""Reader and writer of our model file (llmc/model_file.h is the C side): int32 header[256], then the
fp32 weights in the order of llmc/llama_config.h, each tensor contiguous with all layers of one kind
together; with tied embeddings there is no lm_head tensor. Version 3 (written here) carries zlib's
CRC-32 of the header (its checksum words as 0) and the weights; version 2 (the CRC-32 of the weights
alone) is read with a notice; version 1 (FNV-1a 64, which Python computes at ~5 MB/s) is refused,
naming dev/data/upgrade_model_file, the C tool that rewrites version 1 and 2 as 3. Words 252-253 hold
the run id of a trainer's checkpoint (low word first; llmc/checkpoint.h), 0 in a file no training run
wrote, as the ones written here by default (an import).

The config is a dict keyed by LlamaConfig's field names (V L C NH NKV FF max_T rope_theta norm_eps
tied_embeddings rope_scaling rope_factor rope_low_freq_factor rope_high_freq_factor rope_original_T);
tensors are numpy float32 arrays keyed by our names (wte, ln1w, wqkv, ...) with the shapes of
param_shapes(). Problems raise formats.FormatError(path, problem), which the scripts print as
`error: <path>: <problem>` and exit 1.

Beside a model file that scripts/hf_import.py wrote, OUT_special_tokens.json records the model's BOS,
EOS and padding ids and where they were read (the header has no place for them), for scripts/hf_export.py:
    {"bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
     "from": {"bos_token_id": "<file>: <key>", "eos_token_id": "<file>: <key>", "pad_token_id": "<file>: <key>"}}
an id is an integer or null (unknown); eos_token_id may be a list (Llama 3.1 Instruct stops on any).
"""
import json
import math
import os
import sys
import zlib

import numpy as np

from . import formats
from .formats import FormatError  # one error type for every format the tools touch

MAGIC, VERSION, HEADER_INTS = 20261201, 3, 256
HDR_STEP, HDR_MAX_T, HDR_RUN_ID, HDR_CHECKSUM = 8, 17, 252, 254
HEADER_BYTES = HEADER_INTS * 4
CHUNK = 64 << 20
ROPE_DEFAULT, ROPE_LLAMA3 = 0, 1

# llmc/model_file.h's MODEL_HEADER_FIELDS: (word, LlamaConfig field, stored as float bits, name)
HEADER_FIELDS = [
    (2, "V", False, "vocab size V"),
    (3, "L", False, "layers L"),
    (4, "C", False, "width C"),
    (5, "NH", False, "heads NH"),
    (6, "NKV", False, "kv heads NKV"),
    (7, "FF", False, "MLP width FF"),
    (9, "rope_theta", True, "rope_theta"),
    (10, "norm_eps", True, "norm eps"),
    (11, "tied_embeddings", False, "tied embeddings"),
    (12, "rope_scaling", False, "RoPE scaling (0 none, 1 llama3)"),
    (13, "rope_factor", True, "RoPE scaling factor"),
    (14, "rope_low_freq_factor", True, "RoPE low_freq_factor"),
    (15, "rope_high_freq_factor", True, "RoPE high_freq_factor"),
    (16, "rope_original_T", False, "RoPE original context"),
]
CONFIG_KEYS = [key for _, key, _, _ in HEADER_FIELDS] + ["max_T"]
PARAM_NAMES = ["wte", "ln1w", "wqkv", "wo", "ln2w", "w13", "w2", "lnfw", "lm_head"]


def param_shapes(c):
    """[(name, shape)] of the tensors a file of config c holds, in file order (llama_config.h's
    param_sizes; a tied lm_head has no elements and is left out)."""
    V, L, C, FF = c["V"], c["L"], c["C"], c["FF"]
    qkv = (c["NH"] + 2 * c["NKV"]) * (C // c["NH"])
    shapes = [("wte", (V, C)), ("ln1w", (L, C)), ("wqkv", (L, qkv, C)), ("wo", (L, C, C)), ("ln2w", (L, C)),
              ("w13", (L, 2 * FF, C)), ("w2", (L, C, FF)), ("lnfw", (C,)), ("lm_head", (V, C))]
    return shapes[:-1] if c["tied_embeddings"] else shapes


def config_problem(c):
    """None if config c is one the trainer accepts, else what is wrong (llama_config.h's config_check)."""
    if min(c["V"], c["L"], c["C"], c["NH"], c["NKV"], c["FF"]) <= 0 or c["max_T"] < 0:
        return "every dimension (V, L, C, NH, NKV, FF) must be positive, and max_T not negative"
    if c["C"] % c["NH"]:
        return f"C {c['C']} is not a multiple of NH {c['NH']}"
    if c["NH"] % c["NKV"]:
        return f"NH {c['NH']} is not a multiple of NKV {c['NKV']}"
    if (c["C"] // c["NH"]) % 2:
        return f"head size C / NH = {c['C'] // c['NH']} is odd (RoPE rotates pairs)"
    if not c["rope_theta"] > 0:
        return f"rope_theta {c['rope_theta']} must be positive"
    if c["tied_embeddings"] not in (0, 1):
        return f"tied embeddings {c['tied_embeddings']} must be 0 or 1"
    if c["rope_scaling"] not in (ROPE_DEFAULT, ROPE_LLAMA3):
        return f"RoPE scaling {c['rope_scaling']} must be 0 (default) or 1 (llama3)"
    if c["rope_scaling"] == ROPE_LLAMA3 and not (c["rope_factor"] > 0 and 0 < c["rope_low_freq_factor"] < c["rope_high_freq_factor"]
                                                 and c["rope_original_T"] > 0):
        return "llama3 RoPE scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and original context > 0"
    return None


def new_config(**fields):
    """A config with every key: the given fields, the rest untied, unscaled, max_T unknown (0)."""
    c = {"tied_embeddings": 0, "rope_scaling": ROPE_DEFAULT, "rope_factor": 0.0, "rope_low_freq_factor": 0.0,
         "rope_high_freq_factor": 0.0, "rope_original_T": 0, "max_T": 0}
    c.update(fields)
    return c


def _float32(x):
    """The shortest decimal of x as a float32, as the header stores it (1e-5, not 9.99999974e-06)."""
    return float(str(np.float32(x)))


def _header(c, step, checksum, run_id):
    h = np.zeros(HEADER_INTS, dtype="<i4")
    h[0], h[1], h[HDR_STEP], h[HDR_MAX_T] = MAGIC, VERSION, step, c["max_T"]
    for word, key, is_float, _ in HEADER_FIELDS:
        h[word] = np.float32(c[key]).view(np.int32) if is_float else c[key]
    h[HDR_RUN_ID:HDR_RUN_ID + 2] = np.array([run_id], dtype="<u8").view("<i4")  # low word, then high
    h[HDR_CHECKSUM:] = np.array([checksum], dtype="<u8").view("<i4")
    return h.tobytes()


UPGRADE = "make dev/data/upgrade_model_file && ./dev/data/upgrade_model_file OLD.bin NEW.bin"


def _header_checksum(h):
    """Where a file's CRC-32 starts before its weights: version 3 covers the header, its checksum
    words as 0 (llmc/model_file.h's checksum_of_header); version 2 starts from 0."""
    if h[1] < 3:
        return 0
    zeroed = h.copy()
    zeroed[HDR_CHECKSUM:] = 0
    return zlib.crc32(zeroed.tobytes())


def read_model_file(path):
    """(config, step, tensors) of model file `path`. The magic, version, config, size and checksum are
    checked first, streaming; the tensors are then read-only views of the file (np.memmap), so a large
    model is read from disk as it is used rather than loaded whole."""
    try:
        size = os.path.getsize(path)
        with open(path, "rb") as f:
            h = np.frombuffer(f.read(HEADER_BYTES), dtype="<i4")
            if len(h) < HEADER_INTS:
                raise FormatError(path, f"truncated: {size} bytes, shorter than the {HEADER_BYTES}-byte header")
            if h[0] != MAGIC:
                raise FormatError(path, f"bad magic {h[0]}, expected {MAGIC}: not a train_llama_fp8 model file")
            if h[1] == 1:
                raise FormatError(path, "a version-1 model file (an FNV-1a checksum, which Python checks at ~5 MB/s): rewrite it"
                                        f" as version {VERSION} with the C tool: {UPGRADE}")
            if h[1] not in (2, VERSION):
                raise FormatError(path, f"version {h[1]}: this tool reads model files of versions 2 and {VERSION}")
            c = {key: _float32(h[word:word + 1].view("<f4")[0]) if is_float else int(h[word])
                 for word, key, is_float, _ in HEADER_FIELDS}
            c["max_T"] = int(h[HDR_MAX_T])
            bad = config_problem(c)
            if bad:
                raise FormatError(path, f"bad config in the header: {bad}")
            shapes = param_shapes(c)
            want = HEADER_BYTES + 4 * sum(int(np.prod(s)) for _, s in shapes)
            if size != want:
                raise FormatError(path, f"{size} bytes, but its header's config needs {want}: truncated, not this config, or the"
                                        " header is corrupt")
            crc = _header_checksum(h)
            while chunk := f.read(CHUNK):
                crc = zlib.crc32(chunk, crc)
            stored = int(h[HDR_CHECKSUM:].view("<u8")[0])
            if crc != stored:
                raise FormatError(path, f"checksum mismatch (stored {stored:#x}, computed {crc:#x}): the file is corrupt")
            if h[1] == 2:
                print(f"notice: {path}: a version-2 model file: its checksum covers the weights, not the header; {UPGRADE}"
                      f" rewrites it as version {VERSION}", file=sys.stderr)
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    tensors, offset = {}, HEADER_BYTES
    for name, shape in shapes:
        tensors[name] = np.memmap(path, dtype="<f4", mode="r", offset=offset, shape=shape)
        offset += 4 * int(np.prod(shape))
    return c, int(h[HDR_STEP]), tensors


def write_model_file(path, c, tensors, step=0, run_id=0):
    """Writes model file `path` (version 3) from `tensors`, an iterable of (name, array) in file order,
    with the step and run id of the training run it belongs to (0: none).
    A tensor may come in pieces: consecutive pairs with the same name fill it in row-major order, so
    an importer can hand over one source tensor at a time and never hold a whole model. The CRC-32 is
    computed over the header and then the body as it streams out, and the header is written last; the
    file appears under its name only when complete."""
    bad = config_problem(c)
    if bad:
        raise FormatError(path, f"cannot write this config: {bad}")
    with formats.atomic_file(path) as f:
        f.write(bytes(HEADER_BYTES))
        crc, expected = _header_checksum(np.frombuffer(_header(c, step, 0, run_id), dtype="<i4")), iter(param_shapes(c))
        name, shape = next(expected)
        left = int(np.prod(shape))
        for piece_name, piece in tensors:
            while left == 0:  # the previous tensor is complete: the piece must start the next one
                name, shape = next(expected, (None, None))
                if name is None:
                    raise FormatError(path, f"tensor {piece_name} after the last tensor")
                left = int(np.prod(shape))
            if piece_name != name:
                raise FormatError(path, f"got tensor {piece_name} where {name} {shape} comes")
            data = np.ascontiguousarray(piece, dtype="<f4")
            if data.size > left:
                raise FormatError(path, f"{name}: {data.size} values given where {left} are left of {shape}")
            left -= data.size
            crc = zlib.crc32(data, crc)
            f.write(data)
        missing = [n for n, _ in expected] if left == 0 else [f"{name} (incomplete)"] + [n for n, _ in expected]
        if missing:
            raise FormatError(path, f"tensors missing: {', '.join(missing)}")
        f.seek(0)
        f.write(_header(c, step, crc, run_id))


def rope_inv_freq(c, HS):
    """RoPE's inverse frequencies of a head of size HS (float64, HS/2 of them) as llmc/llama_config.h's
    rope_inv_freq computes them: theta^(-2i/HS), and with llama3 scaling long wavelengths divided by
    the factor, short ones kept, the band between interpolated."""
    f = np.float64(np.float32(c["rope_theta"])) ** (-2.0 * np.arange(HS // 2) / HS)
    if c["rope_scaling"] != ROPE_LLAMA3:
        return f
    wavelen, old_T = 2.0 * math.pi / f, float(c["rope_original_T"])
    low, high, factor = (float(np.float32(c[k])) for k in ("rope_low_freq_factor", "rope_high_freq_factor", "rope_factor"))
    s = (old_T / wavelen - low) / (high - low)
    return np.where(wavelen < old_T / high, f, np.where(wavelen > old_T / low, f / factor, (1.0 - s) * f / factor + s * f))


def table_path(model_path):
    """Where the decode table of model file OUT.bin goes: OUT_tokenizer.bin."""
    return (model_path[:-4] if model_path.endswith(".bin") else model_path) + "_tokenizer.bin"


def hf_tokenizer_path(model_path):
    """Where a GGUF import writes its Hugging Face tokenizer folder: OUT.bin -> OUT_hf_tokenizer/."""
    return (model_path[:-4] if model_path.endswith(".bin") else model_path) + "_hf_tokenizer"


def special_tokens_path(model_path):
    """Where the BOS/EOS record of model file OUT.bin goes: OUT_special_tokens.json."""
    return (model_path[:-4] if model_path.endswith(".bin") else model_path) + "_special_tokens.json"


SPECIAL_KEYS = ("bos_token_id", "eos_token_id", "pad_token_id")


def token_id_problem(key, value, V=None):
    """None if value is a usable id for key (an integer, or for eos_token_id a non-empty list of them,
    within [0, V) if V is given), else what is wrong with it."""
    ids = value if isinstance(value, list) and key == "eos_token_id" and value else [value]
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
        return f"{key} = {value!r} is not a token id"
    if V is not None and max(ids) >= V:
        return f"{key} = {value!r} is outside the model's vocabulary of {V}"
    return None


def write_special_tokens(path, ids, sources):
    """Writes the record: ids {bos_token_id, eos_token_id: id or None}, sources {key: where it was read}."""
    text = json.dumps({**{k: ids.get(k) for k in SPECIAL_KEYS},
                       "from": {k: sources[k] for k in SPECIAL_KEYS if ids.get(k) is not None}}, indent=2) + "\n"
    formats.write_atomic(path, [text.encode()])


def read_special_tokens(path, V=None):
    """{bos_token_id, eos_token_id: id or None} of a record write_special_tokens wrote."""
    try:
        with open(path, "rb") as f:
            record = json.load(f)
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    except ValueError as e:
        raise FormatError(path, f"not valid JSON ({e})") from None
    if not isinstance(record, dict) or not any(k in record for k in SPECIAL_KEYS):
        raise FormatError(path, f"not a BOS/EOS record: it has neither {' nor '.join(SPECIAL_KEYS)}")
    for k in SPECIAL_KEYS:
        bad = record.get(k) is not None and token_id_problem(k, record[k], V)
        if bad:
            raise FormatError(path, bad)
    return {k: record.get(k) for k in SPECIAL_KEYS}


def config_summary(c):
    """One line a user can check against the model card."""
    s = (f"V {c['V']} L {c['L']} C {c['C']} NH {c['NH']} NKV {c['NKV']} FF {c['FF']} head size {c['C'] // c['NH']}"
         f" rope_theta {c['rope_theta']:g} eps {c['norm_eps']:g} tied {c['tied_embeddings']}")
    if c["rope_scaling"] == ROPE_LLAMA3:
        s += (f" llama3 RoPE scaling (factor {c['rope_factor']:g}, low {c['rope_low_freq_factor']:g},"
              f" high {c['rope_high_freq_factor']:g}, original context {c['rope_original_T']})")
    return s + f" max_position_embeddings {c['max_T'] or 'unknown'}"
