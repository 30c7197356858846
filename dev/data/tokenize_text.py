"""Tokenizes text with a model's own tokenizer into the trainer's shards and decode table
(docs/formats.md), in parallel, deterministically, in bounded memory (a long document is read a line
at a time and encoded in pieces with the ids of the whole: document_pieces), with no partial output
on failure or on a stop (SIGINT, SIGTERM: the old outputs stay, or the new are complete).

    python3 dev/data/tokenize_text.py --tokenizer SmolLM2-135M --out data --name gutenberg_smollm2 \\
        --val_tokens 1000000 books.jsonl

writes data/gutenberg_smollm2_val.bin (the first documents, at least --val_tokens tokens),
data/gutenberg_smollm2_train_000.bin, _001, ... (--shard_tokens each) and
data/gutenberg_smollm2_tokenizer.bin (the decode table). See --help for the inputs and options.

--chat reads conversations instead and renders each with the model's chat template
(tokenizer_config.json's chat_template, as transformers' apply_chat_template renders and tokenizes
it), and writes beside each shard X (val and train) its loss mask X.mask (docs/formats.md): 1 on the
tokens of the assistant's turns, or of --learn_roles' (the trainer's loss and val loss are over
those). Every message's role must be one the template knows (template_roles). The rule: the
assistant's message k is the text between the rendering of messages[:k] with
add_generation_prompt=True and the rendering of messages[:k+1], up to and including the last
eos_token in it (its end of turn: generation stops there, so what the template puts after it,
SmolLM2's newline, is not learned; an eos_token's text inside the message is the message's). A
learned message of another role starts where its content does (no generation prompt names it). Both
renderings must be prefixes of the whole conversation's, and no token may straddle the turn's ends;
a template for which they are not is refused.
"""
import argparse
import glob
import gzip
import importlib.util
import io
import json
import os
import signal
import sys
import time
import zlib
from collections import deque, namedtuple

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

# --workers is the one knob of parallelism: each worker process encodes on one thread, so N workers
# use N cores and the tokenizers library's own thread pool does not oversubscribe them.
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from llama_fp8 import formats  # noqa: E402  (after the environment variable above)
from llama_fp8.formats import FormatError  # noqa: E402

with formats.required_packages():
    import numpy as np
    from tqdm import tqdm

CHUNK_BYTES = 1 << 20  # text per task sent to a worker: large enough to amortize the pickling
# A document is held at most PIECE_CHARS characters (and a line) at a time and encoded in pieces of
# about half that (document_pieces): the tokenizers library takes ~185 bytes of memory per character
# it encodes at once, so memory stays bounded whatever a document's length.
PIECE_CHARS = 1 << 20
CONTEXT_CHARS = 1024  # the text each side of a cut that find_cut checks, and a piece is encoded after
INPUT_SUFFIXES = (".txt", ".jsonl", ".jsonl.gz", ".jsonl.zst", ".parquet")
JSONL_SUFFIXES = (".jsonl", ".jsonl.gz", ".jsonl.zst")


# --- reading documents ---

def input_files(inputs):
    """The files to read, in order: folders expand to their .txt / .jsonl / .jsonl.gz / .jsonl.zst /
    .parquet files, recursively, sorted by path so any machine reads them in the same order (FineWeb's
    000_00000.parquet, 000_00001.parquet, ... in their numbered order)."""
    files = []
    for path in inputs:
        if path == "-":
            files.append(path)
        elif os.path.isdir(path):
            found = sorted(os.path.join(root, f) for root, _, names in os.walk(path) for f in names
                           if f.endswith(INPUT_SUFFIXES))
            if not found:
                raise FormatError(path, "folder holds no .txt, .jsonl, .jsonl.gz, .jsonl.zst or .parquet files")
            files += found
        elif os.path.exists(path):
            files.append(path)
        else:
            raise FormatError(path, "no such file or directory")
    return files


def decode_utf8(path, line, offset, lineno, errors):
    try:
        return line.decode("utf-8", errors)
    except UnicodeDecodeError as e:
        raise FormatError(path, f"line {lineno}: not UTF-8 at byte {offset + e.start} ({e.reason});"
                                " --errors replace substitutes U+FFFD and carries on") from None


def text_documents(path, lines, split, errors):
    """(text, bytes read, whether it ends a document) of a text file, a line at a time (a whole file is
    never held): its documents are the whole file (doc), each non-empty line without its line ending
    (line), or each run of non-blank lines without the last line ending (para)."""
    offset, pending, used = 0, None, 0  # pending: the document's latest line, held until it is known
    for lineno, line in enumerate(lines, 1):  # whether it is the last (whose line ending para drops)
        text = decode_utf8(path, line, offset, lineno, errors)
        offset += len(line)
        used += len(line)
        if split == "line":
            text = text.rstrip("\r\n")
            if text:
                yield text, used, True
                used = 0
        elif split == "doc" or text.strip():
            if pending is not None:
                yield pending, used, False
                used = 0
            pending = text
        elif pending is not None:
            yield pending.rstrip("\r\n"), used, True
            pending, used = None, 0
    if pending is not None:
        yield pending if split == "doc" else pending.rstrip("\r\n"), used, True


def jsonl_records(path, lines, errors):
    """(line number, JSON value, bytes read) of each non-blank line."""
    offset = 0
    for lineno, line in enumerate(lines, 1):
        text = decode_utf8(path, line, offset, lineno, errors)
        offset += len(line)
        if not text.strip():
            continue
        try:
            yield lineno, json.loads(text), len(line)
        except ValueError as e:
            raise FormatError(path, f"line {lineno}: not JSON ({e})") from None


def jsonl_documents(path, lines, field, errors):
    for lineno, record, nbytes in jsonl_records(path, lines, errors):
        if not isinstance(record, dict) or field not in record:
            raise FormatError(path, f"line {lineno}: no field '{field}' (choose the text's field with --field)")
        doc = record[field]
        if not isinstance(doc, str):
            raise FormatError(path, f"line {lineno}: field '{field}' is a {type(doc).__name__}, not a string")
        try:
            doc.encode("utf-8")
        except UnicodeEncodeError:  # JSON can escape a lone surrogate (\ud800), which is no character
            if errors == "strict":
                raise FormatError(path, f"line {lineno}: field '{field}' holds a lone surrogate escape, not"
                                        " text; --errors replace substitutes '?' and carries on") from None
            doc = doc.encode("utf-8", "replace").decode("utf-8")
        if doc:
            yield doc, nbytes


def parquet_documents(path, f, field):
    """The strings of column `field`, one row group at a time (a FineWeb file holds 1 to 2 GB of text,
    its row groups some tens of MB), so memory stays bounded by the largest row group."""
    with formats.required_packages():
        import pyarrow as pa
        import pyarrow.parquet as pq
    try:
        pf = pq.ParquetFile(f)
        schema = pf.schema_arrow
        if field not in schema.names:
            raise FormatError(path, f"no column '{field}' (choose the text's column with --field); its columns:"
                                    f" {', '.join(schema.names)}")
        kind = schema.field(field).type
        if not (pa.types.is_string(kind) or pa.types.is_large_string(kind)):
            raise FormatError(path, f"column '{field}' holds {kind}, not strings")
        size, used = os.path.getsize(path), 0
        for g in range(pf.num_row_groups):
            # one thread: --workers is the one knob of parallelism
            texts = pf.read_row_group(g, columns=[field], use_threads=False).column(0).to_pylist()
            # the row group's share of the file (the last takes the footer too), shared among its
            # documents by length: the progress bar's bytes, and what sizes the workers' tasks
            nbytes = size - used if g == pf.num_row_groups - 1 else \
                sum(pf.metadata.row_group(g).column(c).total_compressed_size for c in range(pf.metadata.num_columns))
            used += nbytes
            chars = sum(len(doc) for doc in texts if doc) or 1
            for row, doc in enumerate(texts):
                if doc is None:
                    raise FormatError(path, f"row group {g}, row {row}: column '{field}' is null")
                if doc:
                    yield doc, nbytes * len(doc) // chars
    except (pa.ArrowException, OSError) as e:
        raise FormatError(path, f"not a readable Parquet file ({str(e).splitlines()[0]})") from None


def zstd_lines(path, f):
    """The lines of a zstd-compressed file, decompressed as they are read. python-zstandard's stream
    reader ends quietly at a cut-off frame, so the frames are tracked here: a file that ends inside
    one is an error, not a shorter corpus."""
    with formats.required_packages():
        import zstandard
    dctx = zstandard.ZstdDecompressor()
    d, in_frame, pending = dctx.decompressobj(), False, b""
    try:
        for block in iter(lambda: f.read(CHUNK_BYTES), b""):
            while block:
                pending += d.decompress(block)
                in_frame, block = True, b""
                if d.eof:  # a file may hold several frames, one after another
                    block, d, in_frame = d.unused_data, dctx.decompressobj(), False
            *lines, pending = pending.split(b"\n")
            for line in lines:
                yield line + b"\n"
    except zstandard.ZstdError as e:
        raise FormatError(path, f"not zstd-compressed or corrupt ({e})") from None
    if in_frame:
        raise FormatError(path, "truncated: the zstd stream ends inside a frame")
    if pending:
        yield pending


def open_input(path):
    """The input as a binary file, and a function that gives its lines."""
    if path == "-":
        return sys.stdin.buffer, iter
    if path.endswith(".gz"):
        return gzip.open(path, "rb"), iter
    f = open(path, "rb")
    return f, (lambda f: zstd_lines(path, f)) if path.endswith(".zst") else iter


def documents(files, args, roles, encode):
    """(item, bytes read) of every input, in order: with --chat the conversations of its jsonl files
    (chat_conversations; `roles`, the template's), else the Pieces (document_pieces; `encode` checks
    the cuts) of the documents of jsonl files (jsonl_documents), .parquet files' column
    (parquet_documents) and text files (text_documents)."""
    for path in files:
        label = "<stdin>" if path == "-" else path
        if args.chat and not path.endswith(JSONL_SUFFIXES):
            raise FormatError(label, "--chat reads conversations from .jsonl, .jsonl.gz or .jsonl.zst files")
        try:
            f, lines = open_input(path)
            with f:
                if args.chat:
                    yield from chat_conversations(label, lines(f), args.errors, roles)
                    continue
                if path.endswith(".parquet"):
                    segments = ((doc, n, True) for doc, n in parquet_documents(label, f, args.field))
                elif path.endswith(JSONL_SUFFIXES):
                    segments = ((doc, n, True) for doc, n in jsonl_documents(label, lines(f), args.field, args.errors))
                else:
                    segments = text_documents(label, lines(f), args.split, args.errors)
                yield from document_pieces(label, segments, encode)
        except (OSError, EOFError, zlib.error) as e:
            raise FormatError(label, f"cannot read: {getattr(e, 'strerror', None) or e}") from None


# A document's piece: its text, the CONTEXT_CHARS before it in the document ("" for the first piece),
# whether it is the document's first and last piece, and its file.
Piece = namedtuple("Piece", "text context first last path")


def document_pieces(path, segments, encode):
    """(Piece, bytes read) of the documents made of (text, bytes read, ends the document) segments. A
    document is held PIECE_CHARS at a time: past that, its first piece is cut off where find_cut
    allows, and each later piece carries its context, which its worker encodes before it and whose
    tokens it drops (tokens must not depend on what a cut took away). Where find_cut finds no cut, the
    piece grows until it does (memory then follows the text between line ends the tokenizer merges
    across, ~185 bytes a character)."""
    parts, size, nbytes, first, context, attempt, scanned = [], 0, 0, True, "", PIECE_CHARS, PIECE_CHARS // 2
    for text, used, ends in segments:
        parts.append(text)
        size, nbytes = size + len(text), nbytes + used
        while size >= attempt:
            held = "".join(parts)
            cut = find_cut(held, scanned, encode)
            if cut is None:  # look on from here when twice as much is held: a long stretch costs O(n)
                parts, attempt, scanned = [held], 2 * size, max(scanned, len(held) - CONTEXT_CHARS)
                break
            yield Piece(held[:cut], context, first, False, path), nbytes
            parts, size, nbytes = [held[cut:]], len(held) - cut, 0
            context, first, attempt, scanned = held[cut - CONTEXT_CHARS:cut], False, PIECE_CHARS, PIECE_CHARS // 2
        if ends and size:
            yield Piece("".join(parts), context, first, True, path), nbytes
            parts, size, nbytes, first, context, attempt, scanned = [], 0, 0, True, "", PIECE_CHARS, PIECE_CHARS // 2


def find_cut(text, start, encode):
    """Where a document's held `text` may be cut, or None: the first line end at or past `start` (and
    CONTEXT_CHARS before the end) with a non-space character on either side (where the
    pre-tokenizers of byte-level BPE, GPT-2's, Llama 3's, SmolLM2's, start a new word) where the
    tokenizer encodes the CONTEXT_CHARS before it the same alone as followed by the CONTEXT_CHARS
    after it. So no token crosses the cut (a SentencePiece-style tokenizer may merge a line end with
    the next line's word), and the text after it, encoded after those CONTEXT_CHARS, gets the ids
    the whole document gives it, where no token depends on text further away than CONTEXT_CHARS."""
    at = start
    while True:
        at = text.find("\n", at, len(text) - CONTEXT_CHARS) + 1
        if at == 0:
            return None
        if not (text[at - 2].isspace() or text[at].isspace()):
            alone, followed = encode([text[at - CONTEXT_CHARS:at], text[at - CONTEXT_CHARS:at + CONTEXT_CHARS]])
            if followed[:len(alone)] == alone:
                return at


# --- conversations (--chat) ---

def chat_conversations(path, lines, errors, roles):
    """((file, line number, messages), bytes read) of each line of a chat jsonl file: "messages", a list
    of {"role", "content"} objects (other keys pass to the template as they are), or "prompt" and
    "completion", which become a user message and an assistant message. Every role must be one of
    `roles`, the template's."""
    for lineno, record, nbytes in jsonl_records(path, lines, errors):
        if isinstance(record, dict) and "messages" in record:
            messages = record["messages"]
            if not isinstance(messages, list) or not messages or not all(
                    isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                    for m in messages):
                raise FormatError(path, f"line {lineno}: 'messages' must be a non-empty list of objects with a string"
                                        " 'role' and a string 'content'")
        elif isinstance(record, dict) and "prompt" in record and "completion" in record:
            if not isinstance(record["prompt"], str) or not isinstance(record["completion"], str):
                raise FormatError(path, f"line {lineno}: 'prompt' and 'completion' must be strings")
            messages = [{"role": "user", "content": record["prompt"]},
                        {"role": "assistant", "content": record["completion"]}]
        else:
            raise FormatError(path, f"line {lineno}: neither 'messages' nor 'prompt' and 'completion' (--chat reads"
                                    " conversations)")
        for i, m in enumerate(messages):
            if m["role"] not in roles:
                raise FormatError(path, f"line {lineno}: message {i + 1} has role {m['role']!r}, which the chat template"
                                        f" does not know (its roles: {', '.join(sorted(roles))}; roles are case-sensitive)")
        yield (path, lineno, messages), nbytes


class RenderError(Exception):
    """A conversation that a worker could not render or mask: (file, problem). Unlike FormatError its
    arguments are its constructor's, so it pickles back from a worker process."""


def chat_template(tok_path):
    """(compiled template, the variables transformers passes it, the roles it knows (template_roles),
    the config's path) of the tokenizer_config.json beside a tokenizer.json. The environment is
    transformers' (utils/chat_template_utils.py, _cached_compile_jinja_template): sandboxed,
    trim_blocks and lstrip_blocks, the loopcontrols extension, raise_exception, a tojson that does
    not escape HTML, strftime_now; the variables are its special_tokens_map (bos_token, eos_token,
    unk_token, pad_token as strings)."""
    config = os.path.join(os.path.dirname(tok_path), "tokenizer_config.json")
    if formats.is_sentencepiece(tok_path) or not os.path.isfile(config):
        raise FormatError(tok_path, "--chat needs a Hugging Face tokenizer folder: a tokenizer.json with a"
                                    " tokenizer_config.json beside it that holds the chat_template")
    try:
        with open(config, "rb") as f:
            spec = json.load(f)
    except (OSError, ValueError) as e:
        raise FormatError(config, f"cannot read it ({e})") from None
    template = spec.get("chat_template") if isinstance(spec, dict) else None
    if isinstance(template, list):  # several named templates: transformers' default is the one named "default"
        template = next((t.get("template") for t in template if isinstance(t, dict) and t.get("name") == "default"), None)
    if not isinstance(template, str):
        raise FormatError(config, "no chat_template (a string, or a list holding one named 'default'): --chat renders"
                                  " conversations with the model's own template")
    with formats.required_packages():
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    from datetime import datetime

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        compiled, roles = env.from_string(template), template_roles(env.parse(template))
    except jinja2.TemplateError as e:
        raise FormatError(config, f"its chat_template does not parse ({e}); {{% generation %}} markers are not"
                                  " supported: --chat finds the assistant's turns by rendering prefixes") from None
    variables = {}
    for key in ("bos_token", "eos_token", "unk_token", "pad_token"):
        value = spec.get(key)
        value = value.get("content") if isinstance(value, dict) else value
        if isinstance(value, str):
            variables[key] = value
    if "eos_token" not in variables:
        raise FormatError(config, "no eos_token: --chat learns each assistant turn up to its end-of-turn token, the eos_token")
    return compiled, variables, roles, config


def template_roles(ast):
    """The roles a chat template is written for: system, user and assistant (the roles of every chat
    template; many, SmolLM2's and Llama 3's among them, write any role's name as it is, so a role
    `Assistant` would render and silently not be learned), and each role its source compares a
    message's role with (Llama 3.1's 'ipython', Qwen2.5's 'tool', ...)."""
    from jinja2 import nodes
    roles = {"system", "user", "assistant"}
    for compare in ast.find_all(nodes.Compare):
        subscripts = list(compare.find_all(nodes.Getitem))
        keys = {id(g.arg) for g in subscripts}  # the 'role' of message['role'] is no role
        if any(isinstance(g.arg, nodes.Const) and g.arg.value == "role" for g in subscripts) or \
                any(a.attr == "role" for a in compare.find_all(nodes.Getattr)) or \
                any(n.name == "role" for n in compare.find_all(nodes.Name)):
            roles |= {c.value for c in compare.find_all(nodes.Const) if isinstance(c.value, str) and id(c) not in keys}
    return roles


def render_chat(template, variables, learn, path, lineno, messages):
    """(the conversation's text, the [start, end) character spans of its turns whose role is in
    `learn`; see the module's docstring for the rule)."""
    import jinja2

    def render(msgs, generation_prompt):
        try:
            return template.render(messages=msgs, tools=None, documents=None,
                                   add_generation_prompt=generation_prompt, **variables)
        except jinja2.TemplateError as e:
            raise RenderError(path, f"line {lineno}: the chat template fails: {e}") from None

    text, spans, eos = render(messages, False), [], variables["eos_token"]
    for k, m in enumerate(messages):
        if m["role"] not in learn:
            continue
        through = render(messages[:k + 1], False)
        if m["role"] == "assistant":  # its turn starts where generation does, after the generation prompt
            before = render(messages[:k], True)
        else:  # no generation prompt starts another role's turn: it starts where its content does, where a
            # rendering with other content (a first character it does not have) departs from this one
            other = dict(m, content="\1" if m["content"].startswith("\0") else "\0")
            before = os.path.commonprefix([through, render(messages[:k] + [other], False)])
        if not (text.startswith(before) and text.startswith(through) and len(before) <= len(through)):
            raise RenderError(path, f"line {lineno}: the chat template's rendering of messages 1..{k} (with the"
                                    f" generation prompt) or 1..{k + 1} is not a prefix of the whole conversation's,"
                                    f" so --chat cannot tell which tokens are the {m['role']}'s")
        end = text.rfind(eos, len(before), len(through))
        if end < 0:
            raise RenderError(path, f"line {lineno}: {m['role']} message {k + 1} holds no end-of-turn token (eos_token"
                                    f" {eos!r}) in its rendering")
        spans.append((len(before), end + len(eos)))
    return text, spans


def chat_mask(path, lineno, offsets, spans):
    """1 for each token whose text starts inside a learned turn's span; a token across a span's end is
    refused (its loss would be half prompt, half answer)."""
    starts, ends = (np.array([o[i] for o in offsets], dtype=np.int64).reshape(-1) for i in (0, 1))
    mask = np.zeros(len(offsets), dtype=np.uint8)
    for a, b in spans:
        if ((starts < a) & (ends > a)).any() or ((starts < b) & (ends > b)).any():
            raise RenderError(path, f"line {lineno}: a token straddles the start or end of a learned turn (characters"
                                    f" {a}..{b} of the rendering)")
        mask[(starts >= a) & (starts < b)] = 1
    return mask


def chunks(items):
    """Lists of items (pieces or conversations) of about CHUNK_BYTES each, with their bytes read."""
    batch, size = [], 0
    for item, nbytes in items:
        batch.append(item)
        size += nbytes
        if size >= CHUNK_BYTES:
            yield batch, size
            batch, size = [], 0
    if batch:
        yield batch, size


# --- stopping ---

STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


class Stopped(BaseException):
    """A stop signal (args: its number). A BaseException, as KeyboardInterrupt, so that no `except
    Exception` on the way takes it for an error."""


class StopSignals:
    """SIGINT and SIGTERM raise Stopped in the main process, once: from then on, and while `held` is
    set (the final renames), a signal is only noted in `pending`, so the cleanup after a stop and the
    renames run to their end."""

    def __init__(self):
        self.held, self.pending = False, None
        for signum in STOP_SIGNALS:
            signal.signal(signum, self.take)

    def take(self, signum, frame):
        if self.held:
            self.pending = self.pending or signum
            return
        self.held = True
        raise Stopped(signum)


# --- encoding (in each worker) ---

_encoder = None


def init_worker(*encoder_args):
    """A worker process, started with the stop signals blocked: a stop is the main process's to take
    (Ctrl-C reaches the whole process group; the main process ends the workers with SIGTERM, whose
    default action ends them quietly, without the main process's handler and its traceback)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    init_encoder(*encoder_args)


def init_encoder(tok_path, bos, eos, learn):
    """Loads the tokenizer in this process (formats.text_encoder); bos / eos are the ids to put around
    each document, or None. learn: --chat's roles learned (else None): conversations are rendered by
    the template and tokenized as apply_chat_template does (special tokens in the text are the tokens,
    nothing added)."""
    global _encoder
    if learn is not None:
        tok, _ = formats.load_tokenizer_json(tok_path)
        _encoder = (tok, learn) + chat_template(tok_path)[:2]
    else:
        _encoder = (formats.text_encoder(tok_path), bos, eos)


def encode_chunk(pieces):
    """(the chunk's tokens, each document's with its BOS / EOS, as uint32; the offsets in them where its
    documents end; None, no mask). A piece with a context is encoded after it, the context's tokens
    dropped: a tokenizer that marks where a text starts (SentencePiece's dummy prefix) marks the
    context's start, as the whole document's."""
    encode, bos, eos = _encoder
    contexts = iter(encode([p.context for p in pieces if p.context]))
    flat, ends = [], []
    for p, ids in zip(pieces, encode([p.context + p.text for p in pieces])):
        if p.context:
            head = next(contexts)
            if ids[:len(head)] != head:
                raise RenderError(p.path, f"the tokenizer encodes the {CONTEXT_CHARS} characters before a cut in a long"
                                          " document differently when the rest of the piece follows: its tokens depend on"
                                          " text further away; split such documents")
            ids = ids[len(head):]
        if p.first and bos is not None:
            flat.append(bos)
        flat += ids
        if p.last:
            if eos is not None:
                flat.append(eos)
            ends.append(len(flat))
    return np.array(flat, dtype=np.uint32), np.array(ends, dtype=np.int64), None


def encode_chat_chunk(conversations):
    """encode_chunk for (file, line, messages) conversations, each a document, with the loss mask of the
    tokens."""
    tok, learn, template, variables = _encoder
    rendered = [render_chat(template, variables, learn, *c) for c in conversations]
    flat, ends, masks = [], [], []
    for (path, lineno, _), (_, spans), e in zip(conversations, rendered,
                                                tok.encode_batch([t for t, _ in rendered], add_special_tokens=False)):
        flat += e.ids
        ends.append(len(flat))
        masks.append(chat_mask(path, lineno, e.offsets, spans))
    return np.array(flat, dtype=np.uint32), np.array(ends, dtype=np.int64), \
        np.concatenate(masks) if masks else np.zeros(0, np.uint8)


def encoded(tasks, pool, window, encode):
    """encode(chunk) of every chunk, in order. At most `window` chunks are in flight, so reading stays
    just ahead of the workers (the pool's map would read the whole corpus into its queue)."""
    try:
        if pool is None:
            for items, nbytes in tasks:
                yield encode(items) + (nbytes,)
            return
        pending = deque()
        for items, nbytes in tasks:
            pending.append((pool.submit(encode, items), nbytes))
            if len(pending) >= window:
                result, nb = pending.popleft()
                yield result.result() + (nb,)
        while pending:
            result, nb = pending.popleft()
            yield result.result() + (nb,)
    except RenderError as e:
        raise FormatError(*e.args) from None


# --- output ---

class Outputs:
    """The run's output files, each written under a temporary name and renamed into place only when
    every one is done: a failed run leaves nothing, a finished one a complete set."""

    def __init__(self, out_dir, name, force):
        self.prefix = os.path.join(out_dir, name)
        self.staged = []  # (temporary path, final path)
        existing = [p for p in [self.path("val"), self.path("tokenizer")] if os.path.exists(p)]
        existing += sorted(glob.glob(glob.escape(self.prefix) + "_train_*.bin"))
        existing += sorted(glob.glob(glob.escape(self.prefix) + "_train_*.bin" + formats.MASK_SUFFIX))
        if existing and not force:
            raise FormatError(existing[0], "exists; choose another --out / --name, or pass --force to replace"
                                           f" the {len(existing)} file(s) of this name")
        self.old = existing  # replaced or, when this run does not make them, removed at commit
        self.made_dir = None if os.path.isdir(out_dir) else out_dir  # removed again if the run fails
        if os.path.exists(out_dir) and not os.path.isdir(out_dir):
            raise FormatError(out_dir, "exists and is not a folder: --out names the folder to write into")
        try:
            os.makedirs(out_dir, exist_ok=True)
        except OSError as e:
            raise FormatError(out_dir, f"cannot create the output folder: {e.strerror or e}") from None

    def path(self, what):
        return f"{self.prefix}_{what}.bin"

    def stage(self, what, suffix=""):
        final = self.path(what) + suffix
        self.staged.append((final + ".partial", final))
        return final + ".partial"

    def commit(self):
        """Puts the staged files in place of the old ones. A stop must not come in the middle (main
        holds SIGINT and SIGTERM off); a failing rename leaves a mix, and says so."""
        finals = {final for _, final in self.staged}
        try:
            for old in self.old:
                if old not in finals:
                    os.remove(old)
            for tmp, final in self.staged:
                os.replace(tmp, final)
        except OSError as e:
            raise FormatError(e.filename, f"cannot replace it ({e.strerror or e}): the files of this --name are now part"
                                          " old, part new; run again with --force") from None
        self.staged, self.made_dir = [], None

    def discard(self):
        for tmp, _ in self.staged:
            if os.path.exists(tmp):
                os.remove(tmp)
        self.staged = []
        if self.made_dir is not None and not os.listdir(self.made_dir):
            os.rmdir(self.made_dir)


def tokenize(args, files, tok_path, outputs):
    """Reads, encodes and writes; returns (documents, val tokens, train tokens, train shards, learned
    tokens or None without --chat)."""
    pieces = formats.decode_table_from_tokenizer(tok_path)
    bos_known, eos_known, _ = formats.special_ids(tok_path)
    bos = args.bos_id if args.bos_id is not None else bos_known
    if args.chat:  # the template's problems stop the run here, before any worker starts
        _, _, roles, config = chat_template(tok_path)
        for role in args.learn_roles:
            if role not in roles:
                raise FormatError(config, f"--learn_roles: the chat template does not know role {role!r} (its roles:"
                                          f" {', '.join(sorted(roles))})")
    elif args.bos and bos is None:
        raise FormatError(tok_path, "the tokenizer names no BOS token (tokenizer_config.json bos_token, or a"
                                    " post-processor that adds one): pass --bos_id N, the id every document"
                                    " starts with, or --no-bos")
    if bos is not None and not 0 <= bos < len(pieces):
        raise FormatError(tok_path, f"--bos_id {bos} is outside the vocabulary of {len(pieces)} tokens")
    if args.eos and eos_known is None:
        raise FormatError(tok_path, "--eos: the tokenizer names no EOS token (tokenizer_config.json eos_token)")
    # the table's document-start id is the trainer's sampling prompt, so it needs some real token
    # even when the documents start with none
    doc_start = next((i for i in (bos, eos_known) if i is not None), 0)
    dtype = formats.shard_dtype(len(pieces) - 1)  # from the vocabulary, so every shard has one width

    # --chat: the template alone decides the tokens, as apply_chat_template does (SmolLM2's starts
    # every conversation with <|im_start|>, its BOS; Llama 3's writes bos_token itself)
    encoder_args = (tok_path, bos if args.bos and not args.chat else None,
                    eos_known if args.eos and not args.chat else None, args.learn_roles if args.chat else None)
    encode = encode_chat_chunk if args.chat else encode_chunk
    items = documents(files, args, roles if args.chat else None, None if args.chat else formats.text_encoder(tok_path))
    pool = None
    if args.workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor
        # not multiprocessing.Pool, whose terminate() can wait for good on its task thread, caught
        # sending a task of ~1 MB to workers it has just killed (seen when stopped mid-run)
        pool = ProcessPoolExecutor(args.workers, multiprocessing.get_context("fork"), init_worker, encoder_args)
        # the first task starts every worker (and the pool's thread) with the stop signals blocked:
        # until init_worker, a worker would run the main process's handler
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        try:
            pool.submit(int).result()
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
    else:
        init_encoder(*encoder_args)
    try:  # no total for stdin or gzip; a file that cannot be read is reported when it is read
        total = None if any(f == "-" or f.endswith(".gz") for f in files) else sum(map(os.path.getsize, files))
    except OSError:
        total = None
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="tokenizing", disable=None)
    ndocs = nval = ntrain = nshards = learned = 0
    val, val_mask, val_open = [], [], args.val_tokens > 0  # open until the document reaching --val_tokens ends
    shard = np.empty(args.shard_tokens, dtype=dtype)
    shard_mask = np.empty(args.shard_tokens, dtype=np.uint8) if args.chat else None
    fill = 0

    def write(what, tokens, mask):
        formats.write_shard(outputs.stage(what), tokens, dtype, tokenizer=pieces, role="val" if what == "val" else "train")
        if mask is not None:
            formats.write_loss_mask(outputs.stage(what, formats.MASK_SUFFIX), mask)

    try:
        for tokens, ends, mask, nbytes in encoded(chunks(items), pool, 4 * args.workers, encode):
            ndocs += len(ends)
            if val_open:
                # whole documents, until val has at least val_tokens: through the first document end
                # that reaches it, or the whole chunk where none does (a long document spans chunks)
                reach = np.searchsorted(ends, args.val_tokens - nval)
                val_open = reach == len(ends)
                take = len(tokens) if val_open else int(ends[reach])
                val.append(tokens[:take])
                nval += take
                tokens = tokens[take:]
                if mask is not None:
                    val_mask.append(mask[:take])
                    mask = mask[take:]
                if not val_open:
                    write("val", np.concatenate(val), np.concatenate(val_mask) if val_mask else None)
                    val = None
            if mask is not None:
                learned += int(mask.sum())
            while len(tokens):
                n = min(len(tokens), args.shard_tokens - fill)
                shard[fill:fill + n] = tokens[:n]
                tokens = tokens[n:]
                if mask is not None:
                    shard_mask[fill:fill + n] = mask[:n]
                    mask = mask[n:]
                fill += n
                if fill == args.shard_tokens:
                    write(f"train_{nshards:03d}", shard, shard_mask)
                    ntrain, nshards, fill = ntrain + fill, nshards + 1, 0
            bar.update(nbytes)
            bar.set_postfix_str(f"{ndocs:,} docs, {nval + ntrain + fill:,} tokens", refresh=False)
    finally:
        bar.close()
        if pool is not None:  # the tasks started run to their end (a few seconds), the rest are dropped
            pool.shutdown(cancel_futures=True)
    where = ", ".join(files) if len(files) <= 3 else f"{files[0]} ... ({len(files)} inputs)"
    if ndocs == 0:
        raise FormatError(where, "no documents: the corpus is empty")
    if val_open:
        raise FormatError(where, f"the corpus has {nval:,} tokens, fewer than --val_tokens {args.val_tokens:,}")
    if fill:
        write(f"train_{nshards:03d}", shard[:fill], shard_mask[:fill] if args.chat else None)
        ntrain, nshards = ntrain + fill, nshards + 1
    if ntrain == 0:
        raise FormatError(where, f"no tokens left for training: the val split's whole documents took all"
                                 f" {nval:,}; lower --val_tokens or add text")
    if args.chat and learned == 0:
        raise FormatError(where, f"no messages of the learned roles ({', '.join(args.learn_roles)}): every token would"
                                 " be masked, nothing learned")
    formats.write_decode_table(outputs.stage("tokenizer"), pieces, doc_start)
    return ndocs, nval, ntrain, nshards, learned if args.chat else None


def default_name(tok_path):
    """The tokenizer's name: a .model's or .json's file name, or the folder of a tokenizer.json."""
    stem = os.path.basename(os.path.dirname(os.path.abspath(tok_path))) if os.path.basename(tok_path) == "tokenizer.json" \
        else os.path.splitext(os.path.basename(tok_path))[0]
    return "".join(c if c.isalnum() or c in "-." else "_" for c in stem)


def parse_args(argv):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="python3 dev/data/tokenize_text.py --tokenizer TOK --out DIR [options] INPUT...",
        epilog="example (TinyShakespeare, one paragraph per document, with SmolLM2's tokenizer):\n"
               "  python3 dev/data/tokenize_text.py --tokenizer SmolLM2-135M --out data --name tinyshakespeare_smollm2 \\\n"
               "      --split para --val_tokens 32768 tinyshakespeare.txt\n"
               "writes data/tinyshakespeare_smollm2_{val,train_000,tokenizer}.bin; then train with\n"
               "  -i 'data/tinyshakespeare_smollm2_train_*.bin' -j data/tinyshakespeare_smollm2_val.bin"
               " -tok data/tinyshakespeare_smollm2_tokenizer.bin\n"
               "Nothing is written unless the whole run succeeds; a bad input exits 1 with 'error: <file>: <problem>',"
               " a stop (SIGINT, SIGTERM) 128 + the signal, leaving the old files of this --name or the new, complete.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help=".txt file (documents per --split), .jsonl, .jsonl.gz or .jsonl.zst (one JSON object per line,"
                        " its text in --field), .parquet (its --field column, one row group at a time), a folder (those"
                        " files, recursively, in sorted order, as FineWeb ships), or - for standard input (text)")
    p.add_argument("--tokenizer", required=True, metavar="TOK",
                   help="a tokenizer.json, a SentencePiece .model, or a folder holding either (a Hugging Face model"
                        " folder, whose tokenizer_config.json names BOS and EOS)")
    p.add_argument("--out", required=True, metavar="DIR", help="output folder (made if missing)")
    p.add_argument("--name", help="output file prefix (default: the tokenizer's name: the .model / .json file's, or"
                                  " the folder's of a tokenizer.json)")
    p.add_argument("--val_tokens", type=int, default=1_000_000, metavar="N",
                   help="the val split: the first documents until they hold at least N tokens (default 1000000; 0: no val file)")
    p.add_argument("--shard_tokens", type=int, default=100_000_000, metavar="N",
                   help="tokens per train shard, the last one holding the rest (default 100000000); a document may"
                        " continue into the next shard")
    p.add_argument("--field", default="text", help="the text's field in .jsonl records, or column in .parquet files"
                                                   " (default text)")
    p.add_argument("--chat", action="store_true",
                   help="the inputs are conversations (.jsonl/.jsonl.gz/.jsonl.zst lines with \"messages\": [{role,"
                        " content}, ...], or \"prompt\" and \"completion\"), rendered with the tokenizer folder's"
                        " chat_template; writes a loss mask X.mask beside each shard X, 1 on the turns of --learn_roles"
                        " through their end-of-turn token; --bos, --eos and --split do not apply (the template decides)")
    p.add_argument("--learn_roles", default="assistant", metavar="ROLE,...",
                   help="--chat: the roles whose turns are learned, each one the template knows (default assistant;"
                        " e.g. assistant,tool); a turn of another role than assistant is learned from its content on")
    p.add_argument("--split", choices=["doc", "para", "line"], default="doc",
                   help=".txt documents: the whole file (doc, default), each blank-line-separated paragraph (para), or"
                        " each non-empty line (line); the separators are not part of the documents")
    p.add_argument("--bos", action=argparse.BooleanOptionalAction, default=True,
                   help="start every document with the tokenizer's BOS, or --bos_id (default: on)")
    p.add_argument("--bos_id", type=int, metavar="N",
                   help="the document-start id for a tokenizer that names no BOS (or to override it)")
    p.add_argument("--eos", action="store_true", help="also end every document with the tokenizer's EOS")
    p.add_argument("--workers", type=int, default=os.cpu_count(), metavar="N",
                   help=f"encoding processes (default: the CPU count, {os.cpu_count()}); the output is the same for any N")
    p.add_argument("--errors", choices=["strict", "replace"], default="strict",
                   help="text that is not UTF-8: stop with its file and byte offset (strict, default) or replace the"
                        " bad bytes with U+FFFD and carry on")
    p.add_argument("--force", action="store_true", help="replace existing output files of this --name")
    args = p.parse_args(argv)
    for flag in ("val_tokens", "shard_tokens", "workers"):
        minimum = 0 if flag == "val_tokens" else 1
        if getattr(args, flag) < minimum:
            p.error(f"--{flag} must be at least {minimum}")
    if args.shard_tokens >= 2**32:
        p.error("--shard_tokens must be below 2^32 (the shard header's count)")
    args.learn_roles = tuple(r.strip() for r in args.learn_roles.split(","))
    if not all(args.learn_roles):
        p.error("--learn_roles: a comma-separated list of roles, e.g. assistant,tool")
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.time()
    stops = StopSignals()
    outputs = None
    try:
        tok_path = formats.tokenizer_file(args.tokenizer)
        files = input_files(args.inputs)
        name = args.name or default_name(tok_path)
        outputs = Outputs(args.out, name, args.force)
        ndocs, nval, ntrain, nshards, learned = tokenize(args, files, tok_path, outputs)
        stops.held = True  # from here a stop leaves the new outputs, complete
        outputs.commit()
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except Stopped as e:
        print(f"stopped by {signal.Signals(e.args[0]).name}: nothing written (the files of this --name, if any, are"
              " as they were)", file=sys.stderr)
        return 128 + e.args[0]
    finally:
        if outputs is not None:
            outputs.discard()
    if stops.pending:
        print(f"stopped by {signal.Signals(stops.pending).name} while the outputs were put in place: they are complete,"
              f" {outputs.prefix}_*.bin", file=sys.stderr)
        return 128 + stops.pending
    secs = time.time() - start
    masks = "" if learned is None else f", {learned:,} of the train tokens learned ({learned / ntrain:.1%}; loss masks *.bin.mask)"
    print(f"{ndocs:,} {'conversations' if args.chat else 'documents'}, {nval + ntrain:,} tokens ({nval:,} val,"
          f" {ntrain:,} train in {nshards} shard(s)){masks} -> {outputs.prefix}_*.bin in {secs:.1f} s,"
          f" {(nval + ntrain) / secs:,.0f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
