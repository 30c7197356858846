"""The project's file formats (docs/formats.md), read and written in one place: token
shards and tokenizer decode tables, plus building a decode table from a Hugging Face tokenizer.json
or a SentencePiece .model. Every script and test uses these; nothing else writes the formats.

Token shard: 256 x int32 header (magic, version, token count), then the ids, uint16 (magic 20240520,
version 1) when every id fits, else uint32 (magic 20240801, version 7). Words 3-6 may hold the shard's
record (SHARD_RECORD_MAGIC, role, the tokenizer's token count and fingerprint); llm.c's shards have none.
Decode table: 256 x int32 header (magic 20240328, version 2, vocab size, document-start id, then
SHARD_RECORD_MAGIC and the tokenizer fingerprint), then per token a uint8 length and that many raw bytes.
Loss mask: 256 x int32 header (magic 20261206, version 1, token count), then one uint8 per token of
its shard, 1 where the token is learned as a target; beside shard X as X.mask (write_loss_mask).
HellaSwag eval file: below (write_hellaswag).

Problems with a file raise FormatError(path, problem); the scripts print it as
`error: <path>: <problem>` and exit 1 (tool_main). A tool imports this module before any third-party package
and imports those inside `with formats.required_packages():`, so that a missing one stops it with
the package named and the command that installs it.
"""
import contextlib
import functools
import json
import os
import signal
import sys
import zlib

# the repository: the package is installed editable (pyproject.toml), so its files are the tree's own
ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__)))


def install_command():
    """The command that installs the project's packages (requirements.txt) for this interpreter: the
    virtual environment's own pip when it runs in one (`make test` makes .venv), else python3's."""
    requirements = os.path.relpath(os.path.join(ROOT, "requirements.txt"))
    if sys.prefix != sys.base_prefix:
        return f"{os.path.relpath(os.path.join(sys.prefix, 'bin', 'pip'))} install -r {requirements}"
    return f"python3 -m pip install -r {requirements}"


@contextlib.contextmanager
def required_packages():
    """Imports of third-party packages go in this block: one that is not installed exits 1 with
    `error: missing Python package 'NAME': install it with: <command>` rather than a traceback."""
    try:
        yield
    except ModuleNotFoundError as e:
        package = (e.name or str(e)).split(".")[0]
        sys.exit(f"error: missing Python package '{package}': install it with: {install_command()}")


with required_packages():
    import numpy as np

HEADER_INTS = 256
SHARD_MAGIC_U16, SHARD_VERSION_U16 = 20240520, 1
SHARD_MAGIC_U32, SHARD_VERSION_U32 = 20240801, 7
TABLE_MAGIC, TABLE_VERSION = 20240328, 2
MAX_PIECE_BYTES = 255  # the table's length field is one byte
# Words 3.. of a shard's or decode table's header, where this marker opens them (docs/formats.md):
# a shard's [4] role, [5] its tokenizer's token count, [6] the tokenizer fingerprint; a table's [5]
# the fingerprint. llm.c's files leave the words 0, and both read ours (same magic and version).
SHARD_RECORD_MAGIC = 20261207
ROLES = {"train": 1, "val": 2}


class FormatError(Exception):
    """A file that cannot be read, is not what it should be, or cannot be written."""

    def __init__(self, path, problem):
        super().__init__(f"{path}: {problem}")
        self.path, self.problem = path, problem


def tool_main(main):
    """Decorates a tool's main(argv=None), which returns its exit status: a FormatError it raises is
    printed as `error: <path>: <problem>` on stderr and the status is 1, never a traceback."""
    @functools.wraps(main)
    def run(argv=None):
        try:
            return main(argv)
        except FormatError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
    return run


_INTERRUPTS = []  # the SIGINTs _on_interrupt saw


def _on_interrupt(signum, frame):
    _INTERRUPTS.append(signum)
    raise KeyboardInterrupt


def note_interrupts():
    """Ctrl-C in a tool that writes files: KeyboardInterrupt, as Python's own handler raises, noted first,
    since Python swallows the exception where the signal lands inside an import's module-lock callback
    ("Exception ignored") and the tool would then finish (hf_export did, once in CI). atomic_file and
    the tools' folder writers call raise_if_interrupted before a written file takes its name. Not where
    SIGINT is ignored (a shell's background job)."""
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _on_interrupt)


def raise_if_interrupted():
    if _INTERRUPTS:
        raise KeyboardInterrupt


@contextlib.contextmanager
def atomic_file(path):
    """A binary file to write that appears under `path` only when the with-block ends without an
    error: it is written under a temporary name, renamed at the end, and removed on any error, so a
    reader never sees a half-written file."""
    tmp = f"{path}.tmp{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            yield f
        raise_if_interrupted()
        os.replace(tmp, path)
    except BaseException as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError):
            raise FormatError(path, f"cannot write: {e.strerror or e}") from None
        raise


def write_atomic(path, parts):
    """Writes the byte strings (or arrays) `parts`, an iterable, to path through atomic_file: an error,
    in writing or in making the parts, leaves nothing behind."""
    with atomic_file(path) as f:
        for part in parts:
            f.write(part)


def _header(magic, version, *fields):
    h = np.zeros(HEADER_INTS, dtype="<u4")  # unsigned: the loader reads the token count as uint32
    h[:2 + len(fields)] = (magic, version) + fields
    return h.tobytes()


def _read_header(path, data, what, magic=None, version=None):
    """The int32 header of a file of kind `what`; with magic (and version) given, refuses others."""
    if len(data) < HEADER_INTS * 4:
        raise FormatError(path, f"truncated: {len(data)} bytes, shorter than the {HEADER_INTS * 4}-byte header of a {what}")
    h = np.frombuffer(data, dtype="<i4", count=HEADER_INTS)
    if magic is not None and h[0] != magic:
        raise FormatError(path, f"bad magic {h[0]}, expected {magic}; is it a {what}?")
    if version is not None and h[1] != version:
        raise FormatError(path, f"version {h[1]}, expected {version}")
    return h


def _read_bytes(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None


def shard_dtype(max_id):
    """The narrowest shard id type that holds max_id."""
    return np.dtype("<u2") if max_id <= 0xFFFF else np.dtype("<u4")


def tokenizer_fingerprint(pieces):
    """The tokenizer fingerprint of a decode table's pieces: zlib's CRC-32 of the table's body (a length
    byte, then the bytes, per token) up to its last non-empty piece, so a table padded with empty
    pieces up to a model's vocabulary (hf_import's) has its tokenizer's fingerprint. llmc/tokenizer.h
    computes the same (tokenizer_fingerprint)."""
    n = len(pieces)
    while n and not pieces[n - 1]:
        n -= 1
    return zlib.crc32(b"".join(bytes([len(p)]) + bytes(p) for p in pieces[:n]))


def write_shard(path, tokens, dtype=None, tokenizer=None, role="train"):
    """Writes a token shard. dtype (<u2 or <u4) defaults to the narrowest that holds every id; a caller
    writing many shards of one vocabulary passes shard_dtype(vocab_size - 1) so they all agree.
    tokenizer: the pieces of the decode table the ids are of; the header then records their count and
    fingerprint and the shard's role ("train" or "val"), which the trainer checks. Without it the
    shard is llm.c's format, with no record."""
    tokens = np.asarray(tokens)
    if tokens.size and (tokens.min() < 0 or tokens.max() > 0xFFFFFFFF):
        raise FormatError(path, f"token ids must be in [0, 2^32), got {tokens.min()}..{tokens.max()}")
    if tokens.size >= 2**32:
        raise FormatError(path, f"{tokens.size} tokens: a shard holds at most 2^32 - 1")
    dtype = np.dtype(dtype) if dtype is not None else shard_dtype(int(tokens.max()) if tokens.size else 0)
    if tokens.size and int(tokens.max()) > np.iinfo(dtype).max:
        raise FormatError(path, f"token id {int(tokens.max())} does not fit in a {dtype.itemsize * 8}-bit shard")
    magic, version = (SHARD_MAGIC_U16, SHARD_VERSION_U16) if dtype.itemsize == 2 else (SHARD_MAGIC_U32, SHARD_VERSION_U32)
    record = ()
    if tokenizer is not None:
        if role not in ROLES:
            raise FormatError(path, f"role {role!r}: a shard is one of {', '.join(ROLES)}")
        if tokens.size and int(tokens.max()) >= len(tokenizer):
            raise FormatError(path, f"token id {int(tokens.max())} is outside its tokenizer's {len(tokenizer)} tokens")
        record = (SHARD_RECORD_MAGIC, ROLES[role], len(tokenizer), tokenizer_fingerprint(tokenizer))
    write_atomic(path, [_header(magic, version, tokens.size, *record), tokens.astype(dtype, copy=False).tobytes()])


def read_shard(path):
    """The ids of a token shard, as a numpy array (uint16 or uint32, as stored)."""
    data = _read_bytes(path)
    h = _read_header(path, data, "token shard")
    widths = {SHARD_MAGIC_U16: (SHARD_VERSION_U16, "<u2"), SHARD_MAGIC_U32: (SHARD_VERSION_U32, "<u4")}
    if h[0] not in widths:
        raise FormatError(path, f"bad magic {h[0]}, expected {SHARD_MAGIC_U16} or {SHARD_MAGIC_U32}; is it a token shard?")
    version, dtype = widths[h[0]]
    if h[1] != version:
        raise FormatError(path, f"version {h[1]}, expected {version} for magic {h[0]}")
    count = int(np.uint32(h[2]))
    expected = HEADER_INTS * 4 + count * np.dtype(dtype).itemsize
    if len(data) != expected:
        raise FormatError(path, f"header says {count} tokens ({expected} bytes) but the file has {len(data)} bytes")
    return np.frombuffer(data, dtype=dtype, offset=HEADER_INTS * 4)


def read_shard_record(path):
    """(role, tokenizer token count, tokenizer fingerprint) of a token shard, or None for a shard
    without a record (llm.c's format)."""
    try:
        with open(path, "rb") as f:
            data = f.read(HEADER_INTS * 4)
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    h = _read_header(path, data, "token shard").view("<u4")
    if h[3] != SHARD_RECORD_MAGIC:
        return None
    role = next((name for name, code in ROLES.items() if code == h[4]), None)
    if role is None:
        raise FormatError(path, f"role {h[4]} in its header, expected {' or '.join(f'{c} ({n})' for n, c in ROLES.items())}")
    return role, int(h[5]), int(h[6])


def check_shard_tokenizer(path, pieces):
    """Refuses a shard whose record names another tokenizer than the decode table's pieces."""
    record = read_shard_record(path)
    if record is not None and record[2] != tokenizer_fingerprint(pieces):
        raise FormatError(path, f"made with another tokenizer (fingerprint {record[2]:08x}, {record[1]} tokens) than the"
                                f" decode table's ({tokenizer_fingerprint(pieces):08x}, {len(pieces)} tokens)")


def write_decode_table(path, pieces, doc_start_id):
    """Writes a decode table: pieces[i] is the bytes token i stands for."""
    if not 0 <= doc_start_id < len(pieces):
        raise FormatError(path, f"document-start id {doc_start_id} is outside the vocabulary of {len(pieces)}")
    body = bytearray()
    for i, piece in enumerate(pieces):
        if len(piece) > MAX_PIECE_BYTES:
            raise FormatError(path, f"token {i} ({bytes(piece[:40])!r}...) is {len(piece)} bytes long;"
                                    f" the decode table holds at most {MAX_PIECE_BYTES} bytes per token")
        body.append(len(piece))
        body += piece
    write_atomic(path, [_header(TABLE_MAGIC, TABLE_VERSION, len(pieces), doc_start_id, SHARD_RECORD_MAGIC,
                                tokenizer_fingerprint(pieces)), bytes(body)])


def read_decode_table(path):
    """(pieces, doc_start_id) of a decode table; pieces[i] is token i's bytes."""
    data = _read_bytes(path)
    h = _read_header(path, data, "tokenizer decode table", TABLE_MAGIC, TABLE_VERSION)
    pieces, at = [], HEADER_INTS * 4
    for i in range(int(h[2])):
        if at >= len(data) or at + 1 + data[at] > len(data):
            raise FormatError(path, f"truncated: it ends inside token {i} of the {h[2]} its header says")
        pieces.append(data[at + 1:at + 1 + data[at]])
        at += 1 + data[at]
    if at != len(data):
        raise FormatError(path, f"{len(data) - at} bytes after its {h[2]} tokens")
    recorded = h.view("<u4")[5]
    if h[4] == SHARD_RECORD_MAGIC and recorded != tokenizer_fingerprint(pieces):
        raise FormatError(path, f"its header records tokenizer fingerprint {recorded:08x}, its pieces give"
                                f" {tokenizer_fingerprint(pieces):08x}: the file was changed after it was written")
    return pieces, int(h[3])


def shard_documents(shards, pieces, doc_start):
    """(bytes, shard) of each non-empty document of token shards decoded with a decode table's
    pieces, without its document-start piece; the shards are one stream, so text before a shard's
    first document-start token ends the previous document."""
    doc = []  # pieces of the document being read
    for path in shards:
        check_shard_tokenizer(path, pieces)
        ids = read_shard(path)
        if len(ids) and int(ids.max()) >= len(pieces):
            raise FormatError(path, f"token id {int(ids.max())} is outside the table's vocabulary of {len(pieces)}")
        # every run but the first starts with a document-start token, which ends the document before it
        for i, run in enumerate(np.split(ids, (ids == doc_start).nonzero()[0])):
            if i > 0:
                if b"".join(doc):
                    yield b"".join(doc), path
                doc, run = [], run[1:]
            doc.append(b"".join(map(pieces.__getitem__, run.tolist())))
    if b"".join(doc):
        yield b"".join(doc), shards[-1]


# --- loss masks (llmc/dataloader.h reads one beside each shard of a set; docs/formats.md) ---

MASK_MAGIC, MASK_VERSION = 20261206, 1
MASK_SUFFIX = ".mask"


def mask_path(shard_path):
    """The loss mask's name for a token shard: the shard's path with MASK_SUFFIX appended (so a glob
    of *.bin never matches a mask)."""
    return shard_path + MASK_SUFFIX


def write_loss_mask(path, mask):
    """Writes a loss mask: mask[i] is 1 if token i of its shard is learned as a target (the trainer's
    target t of a batch is a token t + 1 of the run: its flag is that token's), 0 if not."""
    mask = np.asarray(mask)
    if mask.size and (mask.min() < 0 or mask.max() > 1):
        raise FormatError(path, f"mask values must be 0 or 1, got {mask.min()}..{mask.max()}")
    if mask.size >= 2**32:
        raise FormatError(path, f"{mask.size} tokens: a mask holds at most 2^32 - 1")
    write_atomic(path, [_header(MASK_MAGIC, MASK_VERSION, mask.size), mask.astype("u1").tobytes()])


def read_loss_mask(path, tokens=None):
    """The uint8 flags of a loss mask; `tokens`, if given, is its shard's token count, which the
    header must give."""
    data = _read_bytes(path)
    h = _read_header(path, data, "loss mask", MASK_MAGIC, MASK_VERSION)
    count = int(np.uint32(h[2]))
    if len(data) != HEADER_INTS * 4 + count:
        raise FormatError(path, f"header says {count} tokens but the file has {len(data) - HEADER_INTS * 4} mask bytes")
    if tokens is not None and count != tokens:
        raise FormatError(path, f"a mask of {count} tokens, its shard has {tokens}")
    mask = np.frombuffer(data, dtype="u1", offset=HEADER_INTS * 4)
    if mask.size and mask.max() > 1:
        at = int(np.argmax(mask > 1))
        raise FormatError(path, f"byte {mask[at]} at token {at} is neither 0 nor 1")
    return mask


# --- HellaSwag eval files (dev/data/prepare_hellaswag.py writes them, llmc/hellaswag.h reads them) ---
# Little-endian int32 throughout, so ids of any vocabulary fit:
#   header int32[256]: [0] magic 20261205, [1] version 1, [2] items, [3] vocabulary size of the
#     tokenizer (every id is below it), [4] endings per item (4), [5] the longest context + ending
#     in tokens; rest 0
#   per item: label (0-3), context length in tokens, the 4 endings' lengths in tokens, the 4
#     endings' lengths in characters (what lm-eval's acc_norm divides by), then the context's
#     tokens and each ending's tokens in order.
HELLASWAG_MAGIC, HELLASWAG_VERSION, HELLASWAG_ENDINGS = 20261205, 1, 4


def write_hellaswag(path, items, vocab_size):
    """items: (label, context ids, [4 ending id lists], [4 ending lengths in characters]) each."""
    if not items:
        raise FormatError(path, "no items to write")
    body, longest = [], 0
    for label, ctx, endings, chars in items:
        body.append(np.array([label, len(ctx)] + [len(e) for e in endings] + list(chars), dtype="<i4"))
        body.append(np.array(list(ctx) + [t for e in endings for t in e], dtype="<i4"))
        longest = max(longest, len(ctx) + max(len(e) for e in endings))
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:6] = (HELLASWAG_MAGIC, HELLASWAG_VERSION, len(items), vocab_size, HELLASWAG_ENDINGS, longest)
    write_atomic(path, [header.tobytes()] + [b.tobytes() for b in body])


def read_hellaswag(path):
    """(items as write_hellaswag takes them, vocabulary size) of a HellaSwag eval file."""
    data = _read_bytes(path)
    h = _read_header(path, data, "HellaSwag eval file", HELLASWAG_MAGIC)
    if h[1] != HELLASWAG_VERSION or h[4] != HELLASWAG_ENDINGS:
        raise FormatError(path, f"version {h[1]} with {h[4]} endings, expected version {HELLASWAG_VERSION} with {HELLASWAG_ENDINGS}")
    if (len(data) - HEADER_INTS * 4) % 4:
        raise FormatError(path, "its size is not a whole number of int32 values")
    ints, at, items = np.frombuffer(data, dtype="<i4", offset=HEADER_INTS * 4), 0, []
    for i in range(int(h[2])):
        if at + 10 > len(ints):
            raise FormatError(path, f"truncated: it ends inside item {i} of the {h[2]} its header says")
        label, ctx_len, lens, chars = int(ints[at]), int(ints[at + 1]), ints[at + 2:at + 6].tolist(), ints[at + 6:at + 10].tolist()
        at += 10
        if at + ctx_len + sum(lens) > len(ints):
            raise FormatError(path, f"truncated: it ends inside item {i} of the {h[2]} its header says")
        ctx = ints[at:at + ctx_len].tolist()
        at += ctx_len
        endings = []
        for n in lens:
            endings.append(ints[at:at + n].tolist())
            at += n
        items.append((label, ctx, endings, chars))
    if at != len(ints):
        raise FormatError(path, f"{(len(ints) - at) * 4} bytes after its {h[2]} items")
    return items, int(h[3])


# --- tokenizers: finding the file, special tokens, the decode table ---

def tokenizer_file(path):
    """The tokenizer file that TOK names: a tokenizer.json or SentencePiece .model, or a folder holding
    a tokenizer.json (else a tokenizer.model)."""
    if os.path.isdir(path):
        json_path, model_path = os.path.join(path, "tokenizer.json"), os.path.join(path, "tokenizer.model")
        path = model_path if os.path.isfile(model_path) and not os.path.isfile(json_path) else json_path
    if not os.path.isfile(path):
        raise FormatError(path, "no such tokenizer file (give a tokenizer.json, a SentencePiece .model, or a folder"
                                " holding either)")
    return path


def is_sentencepiece(path):
    return path.endswith(".model")


# tokenizers and sentencepiece are imported where used: reading and writing shards and tables needs
# numpy alone.
def load_sentencepiece(path):
    with required_packages():
        import sentencepiece as spm
    try:
        return spm.SentencePieceProcessor(model_file=path)
    except (RuntimeError, OSError) as e:
        raise FormatError(path, f"not a SentencePiece model ({str(e).strip()})") from None


def load_tokenizer_json(path):
    """(tokenizers.Tokenizer, the parsed JSON): the library encodes, the JSON says how pieces decode."""
    with required_packages():
        from tokenizers import Tokenizer
    try:
        with open(path, "rb") as f:
            text = f.read().decode("utf-8")
        return Tokenizer.from_str(text), json.loads(text)
    except OSError as e:
        raise FormatError(path, f"cannot read: {e.strerror or e}") from None
    except Exception as e:  # not UTF-8 or JSON, or the library's own error for a JSON that is no tokenizer
        raise FormatError(path, f"not a tokenizer.json ({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None


def text_encoder(path):
    """A function [text] -> [[token id]] of tokenizer file `path` (tokenizer_file() resolves TOK to
    one) that encodes a document as the tools do: its text is only text ("<|endoftext|>" written in
    it is not the special token, which would split the document) and nothing is added around it
    (the caller places BOS / EOS), so every tokenizer gets the same document layout. It encodes on
    one thread: dev/data/tokenize_text.py runs one per worker process."""
    if is_sentencepiece(path):
        sp = load_sentencepiece(path)
        return lambda texts: sp.encode(texts, out_type=int, num_threads=1)
    tok, _ = load_tokenizer_json(path)
    tok.encode_special_tokens = True
    return lambda texts: [e.ids for e in tok.encode_batch_fast(texts, add_special_tokens=False)]


def _special_from_config(path, key, token_to_id):
    """The id of tokenizer_config.json's bos_token / eos_token / pad_token beside a tokenizer.json, or None."""
    config = os.path.join(os.path.dirname(path), "tokenizer_config.json")
    if not os.path.isfile(config):
        return None
    try:
        with open(config, "rb") as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise FormatError(config, f"cannot read it ({e})") from None
    if not isinstance(spec, dict):
        raise FormatError(config, f"is a JSON {type(spec).__name__}, not an object of the tokenizer's settings")
    value = spec.get(key)
    if isinstance(value, dict):  # older configs write {"content": "<s>", ...}
        value = value.get("content")
    return token_to_id(value) if isinstance(value, str) else None


def _special_from_template(spec, first):
    """The id of the special token a TemplateProcessing post-processor puts first (BOS) or last (EOS)
    around a single sequence, as Llama 2 and 3's tokenizer.json do; None if there is none."""
    post = spec.get("post_processor") or {}
    steps = post.get("processors", [post]) if post.get("type") == "Sequence" else [post]
    for step in steps:
        if step.get("type") != "TemplateProcessing" or not step.get("single"):
            continue
        item = step["single"][0 if first else -1]
        if "SpecialToken" in item:
            ids = step.get("special_tokens", {}).get(item["SpecialToken"]["id"], {}).get("ids", [])
            if len(ids) == 1:
                return ids[0]
    return None


def special_ids(path):
    """(bos_id, eos_id, pad_id) of tokenizer file `path`, each None if the tokenizer names none.
    SentencePiece: the model's own. tokenizer.json: tokenizer_config.json's bos_token / eos_token /
    pad_token beside it (a Hugging Face model folder), else, for BOS and EOS, the tokens its
    post-processor adds."""
    if is_sentencepiece(path):
        sp = load_sentencepiece(path)
        return tuple(i if i >= 0 else None for i in (sp.bos_id(), sp.eos_id(), sp.pad_id()))
    tok, spec = load_tokenizer_json(path)
    found = []
    for key, first in (("bos_token", True), ("eos_token", False)):
        i = _special_from_config(path, key, tok.token_to_id)
        found.append(i if i is not None else _special_from_template(spec, first))
    return tuple(found) + (_special_from_config(path, "pad_token", tok.token_to_id),)


def gpt2_byte_decoder():
    """Byte-level BPE's alphabet, char -> byte: GPT-2's rule maps the printable bytes to themselves and
    the other 68 to U+0100 onwards, so every byte is a visible character (tokenizers' ByteLevel)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars, extra = {}, 0
    for b in range(256):
        if b in keep:
            chars[chr(b)] = b
        else:
            chars[chr(256 + extra)] = b
            extra += 1
    return chars


def _decoder_steps(decoder):
    if not decoder:
        return []
    if decoder.get("type") == "Sequence":
        return [d for sub in decoder["decoders"] for d in _decoder_steps(sub)]
    return [decoder]


def json_piece_decoder(path, spec):
    """A function piece (str) -> bytes, from the tokenizer.json's decoder: ByteLevel maps the GPT-2
    alphabet back to bytes; Metaspace / Replace('▁', ' ') + ByteFallback (SentencePiece-style, Llama 2)
    turns '▁' into a space and <0xNN> into that byte. Whole-text steps (Strip, the Metaspace decoder's
    dropping of the first space, Fuse) are left out: they act on a decoded text, not on one token."""
    steps = _decoder_steps(spec.get("decoder"))
    types = [d.get("type") for d in steps]
    if "ByteLevel" in types:
        byte_of = gpt2_byte_decoder()

        def piece_bytes(piece):
            # as tokenizers' ByteLevel decoder: a token with a character outside the alphabet (an
            # added token such as "<|im start|>" with a space) is taken as its UTF-8 text
            if all(c in byte_of for c in piece):
                return bytes(byte_of[c] for c in piece)
            return piece.encode("utf-8")
        return piece_bytes
    space_mark = None
    for d in steps:
        if d.get("type") == "Metaspace":
            space_mark = d.get("replacement", "\u2581")
        elif d.get("type") == "Replace" and d.get("content") == " " and "String" in d.get("pattern", {}):
            space_mark = d["pattern"]["String"]
    if space_mark is None:
        raise FormatError(path, f"decoder {types or 'none'} is not one this tool decodes: it knows byte-level BPE"
                                " (ByteLevel) and SentencePiece-style (Metaspace, or Replace '\u2581' by ' ')")
    byte_fallback = "ByteFallback" in types

    def piece_bytes(piece):
        if byte_fallback and len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):
            return bytes([int(piece[3:5], 16)])
        return piece.replace(space_mark, " ").encode("utf-8")
    return piece_bytes


def decode_table_from_tokenizer(path):
    """The bytes of every token id of tokenizer file `path` (tokenizer_file() resolves TOK to one).
    tokenizer.json: pieces decoded as its decoder would a lone token, added and special tokens
    included (specials as their text, as the library's decode shows them); ids the vocabulary skips
    decode to nothing. SentencePiece: '▁' is a space, <0xNN> byte pieces are that byte, control and
    unknown tokens (<s>, </s>, <unk>) decode to nothing, as sentencepiece's decode does."""
    if is_sentencepiece(path):
        sp = load_sentencepiece(path)
        pieces = []
        for i in range(sp.get_piece_size()):
            piece = sp.id_to_piece(i)
            if sp.is_control(i) or sp.is_unknown(i):
                pieces.append(b"")
            elif sp.is_byte(i):
                pieces.append(bytes([int(piece[3:5], 16)]))
            else:
                pieces.append(piece.replace("\u2581", " ").encode("utf-8"))
        return pieces
    tok, spec = load_tokenizer_json(path)
    piece_bytes = json_piece_decoder(path, spec)
    vocab = tok.get_vocab(with_added_tokens=True)
    pieces = [b""] * (max(vocab.values()) + 1)
    for piece, i in vocab.items():
        pieces[i] = piece_bytes(piece)
    return pieces
