"""Tokenizes text with a model's own tokenizer into the trainer's shards and decode table
(docs/formats.md), in parallel, deterministically, with no partial output on failure.

    python3 dev/data/tokenize_text.py --tokenizer SmolLM2-135M --out data --name gutenberg_smollm2 \\
        --val_tokens 1000000 books.jsonl

writes data/gutenberg_smollm2_val.bin (the first documents, at least --val_tokens tokens),
data/gutenberg_smollm2_train_000.bin, _001, ... (--shard_tokens each) and
data/gutenberg_smollm2_tokenizer.bin (the decode table). See --help for the inputs and options.
"""
import argparse
import glob
import gzip
import json
import os
import sys
import time
import zlib
from collections import deque

# --workers is the one knob of parallelism: each worker process encodes on one thread, so N workers
# use N cores and the tokenizers library's own thread pool does not oversubscribe them.
os.environ["TOKENIZERS_PARALLELISM"] = "false"

from llama_fp8 import formats  # noqa: E402  (after the environment variable above)
from llama_fp8.formats import FormatError  # noqa: E402

with formats.required_packages():
    import numpy as np
    from tqdm import tqdm

CHUNK_BYTES = 1 << 20  # text per task sent to a worker: large enough to amortize the pickling


# --- reading documents ---

def input_files(inputs):
    """The files to read, in order: folders expand to their .txt / .jsonl / .jsonl.gz files,
    recursively, sorted by path so any machine reads them in the same order."""
    files = []
    for path in inputs:
        if path == "-":
            files.append(path)
        elif os.path.isdir(path):
            found = sorted(os.path.join(root, f) for root, _, names in os.walk(path) for f in names
                           if f.endswith((".txt", ".jsonl", ".jsonl.gz")))
            if not found:
                raise FormatError(path, "folder holds no .txt, .jsonl or .jsonl.gz files")
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
    """(document, bytes read) from a text file: the whole file (doc), each non-empty line without its
    line ending (line), or each run of non-blank lines without the last line ending (para)."""
    offset, parts, used = 0, [], 0
    for lineno, line in enumerate(lines, 1):
        text = decode_utf8(path, line, offset, lineno, errors)
        offset += len(line)
        used += len(line)
        if split == "doc":
            parts.append(text)
        elif split == "line":
            text = text.rstrip("\r\n")
            if text:
                yield text, used
                used = 0
        elif text.strip():
            parts.append(text)
        elif parts:
            yield "".join(parts).rstrip("\r\n"), used
            parts, used = [], 0
    text = "".join(parts)
    if split == "para":
        text = text.rstrip("\r\n")
    if text:
        yield text, used


def jsonl_documents(path, lines, field, errors):
    offset = 0
    for lineno, line in enumerate(lines, 1):
        text = decode_utf8(path, line, offset, lineno, errors)
        offset += len(line)
        if not text.strip():
            continue
        try:
            record = json.loads(text)
        except ValueError as e:
            raise FormatError(path, f"line {lineno}: not JSON ({e})") from None
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
            yield doc, len(line)


def documents(files, args):
    """(document, bytes read) of every input, in order."""
    for path in files:
        label = "<stdin>" if path == "-" else path
        try:
            if path == "-":
                f = sys.stdin.buffer
            elif path.endswith(".gz"):
                f = gzip.open(path, "rb")
            else:
                f = open(path, "rb")
            with f:
                if path.endswith((".jsonl", ".jsonl.gz")):
                    yield from jsonl_documents(label, f, args.field, args.errors)
                else:
                    yield from text_documents(label, f, args.split, args.errors)
        except (OSError, EOFError, zlib.error) as e:
            raise FormatError(label, f"cannot read: {getattr(e, 'strerror', None) or e}") from None


def chunks(docs):
    """Lists of documents of about CHUNK_BYTES each, with their bytes read."""
    batch, size = [], 0
    for doc, nbytes in docs:
        batch.append(doc)
        size += nbytes
        if size >= CHUNK_BYTES:
            yield batch, size
            batch, size = [], 0
    if batch:
        yield batch, size


# --- encoding (in each worker) ---

_encoder = None


def init_encoder(tok_path, bos, eos):
    """Loads the tokenizer in this process (formats.text_encoder); bos / eos are the ids to put around
    each document, or None."""
    global _encoder
    _encoder = (formats.text_encoder(tok_path), bos, eos)


def encode_chunk(texts):
    """(the chunk's tokens with each document's BOS / EOS, as uint32; each document's token count)."""
    encode, bos, eos = _encoder
    flat, lengths = [], []
    for ids in encode(texts):
        if bos is not None:
            flat.append(bos)
        flat += ids
        if eos is not None:
            flat.append(eos)
        lengths.append(len(ids) + (bos is not None) + (eos is not None))
    return np.array(flat, dtype=np.uint32), np.array(lengths, dtype=np.int64)


def encoded(tasks, pool, window):
    """encode_chunk of every chunk, in order. At most `window` chunks are in flight, so reading stays
    just ahead of the workers (Pool.imap would read the whole corpus into its queue)."""
    if pool is None:
        for texts, nbytes in tasks:
            yield encode_chunk(texts) + (len(texts), nbytes)
        return
    pending = deque()
    for texts, nbytes in tasks:
        pending.append((pool.apply_async(encode_chunk, (texts,)), len(texts), nbytes))
        if len(pending) >= window:
            result, ndocs, nb = pending.popleft()
            yield result.get() + (ndocs, nb)
    while pending:
        result, ndocs, nb = pending.popleft()
        yield result.get() + (ndocs, nb)


# --- output ---

class Outputs:
    """The run's output files, each written under a temporary name and renamed into place only when
    every one is done: a failed run leaves nothing, a finished one a complete set."""

    def __init__(self, out_dir, name, force):
        self.prefix = os.path.join(out_dir, name)
        self.staged = []  # (temporary path, final path)
        existing = [p for p in [self.path("val"), self.path("tokenizer")] if os.path.exists(p)]
        existing += sorted(glob.glob(glob.escape(self.prefix) + "_train_*.bin"))
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

    def stage(self, what):
        final = self.path(what)
        self.staged.append((final + ".partial", final))
        return final + ".partial"

    def commit(self):
        finals = {final for _, final in self.staged}
        for old in self.old:
            if old not in finals:
                os.remove(old)
        for tmp, final in self.staged:
            os.replace(tmp, final)
        self.staged, self.made_dir = [], None

    def discard(self):
        for tmp, _ in self.staged:
            if os.path.exists(tmp):
                os.remove(tmp)
        self.staged = []
        if self.made_dir is not None and not os.listdir(self.made_dir):
            os.rmdir(self.made_dir)


def tokenize(args, files, tok_path, outputs):
    """Reads, encodes and writes; returns (documents, val tokens, train tokens, train shards)."""
    pieces = formats.decode_table_from_tokenizer(tok_path)
    bos_known, eos_known, _ = formats.special_ids(tok_path)
    bos = args.bos_id if args.bos_id is not None else bos_known
    if args.bos and bos is None:
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

    encoder_args = (tok_path, bos if args.bos else None, eos_known if args.eos else None)
    pool = None
    if args.workers > 1:
        import multiprocessing
        pool = multiprocessing.Pool(args.workers, init_encoder, encoder_args)
    else:
        init_encoder(*encoder_args)
    try:  # no total for stdin or gzip; a file that cannot be read is reported when it is read
        total = None if any(f == "-" or f.endswith(".gz") for f in files) else sum(map(os.path.getsize, files))
    except OSError:
        total = None
    bar = tqdm(total=total, unit="B", unit_scale=True, desc="tokenizing", disable=None)
    ndocs = nval = ntrain = nshards = 0
    val = []
    shard = np.empty(args.shard_tokens, dtype=dtype)
    fill = 0
    try:
        for tokens, lengths, docs_in_chunk, nbytes in encoded(chunks(documents(files, args)), pool, 4 * args.workers):
            ndocs += docs_in_chunk
            if nval < args.val_tokens:
                # whole documents, until val has at least val_tokens
                ends = np.cumsum(lengths)
                take = int(ends[min(np.searchsorted(ends, args.val_tokens - nval), len(ends) - 1)])
                val.append(tokens[:take])
                nval += take
                tokens = tokens[take:]
                if nval >= args.val_tokens:
                    formats.write_shard(outputs.stage("val"), np.concatenate(val), dtype)
                    val = None
            while len(tokens):
                n = min(len(tokens), args.shard_tokens - fill)
                shard[fill:fill + n] = tokens[:n]
                fill += n
                tokens = tokens[n:]
                if fill == args.shard_tokens:
                    formats.write_shard(outputs.stage(f"train_{nshards:03d}"), shard, dtype)
                    ntrain, nshards, fill = ntrain + fill, nshards + 1, 0
            bar.update(nbytes)
            bar.set_postfix_str(f"{ndocs:,} docs, {nval + ntrain + fill:,} tokens", refresh=False)
    finally:
        bar.close()
        if pool is not None:
            pool.terminate()
    where = ", ".join(files) if len(files) <= 3 else f"{files[0]} ... ({len(files)} inputs)"
    if ndocs == 0:
        raise FormatError(where, "no documents: the corpus is empty")
    if nval < args.val_tokens:
        raise FormatError(where, f"the corpus has {nval:,} tokens, fewer than --val_tokens {args.val_tokens:,}")
    if fill:
        formats.write_shard(outputs.stage(f"train_{nshards:03d}"), shard[:fill], dtype)
        ntrain, nshards = ntrain + fill, nshards + 1
    if ntrain == 0:
        raise FormatError(where, f"no tokens left for training: the val split's whole documents took all"
                                 f" {nval:,}; lower --val_tokens or add text")
    formats.write_decode_table(outputs.stage("tokenizer"), pieces, doc_start)
    return ndocs, nval, ntrain, nshards


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
               "Nothing is written unless the whole run succeeds; a bad input exits 1 with 'error: <file>: <problem>'.")
    p.add_argument("inputs", nargs="+", metavar="INPUT",
                   help=".txt file (documents per --split), .jsonl or .jsonl.gz (one JSON object per line, its text in"
                        " --field), a folder (its .txt/.jsonl/.jsonl.gz files, recursively, in sorted order), or - for"
                        " standard input (text)")
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
    p.add_argument("--field", default="text", help="the text's field in .jsonl records (default text)")
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
    return args


def main(argv=None):
    args = parse_args(argv)
    start = time.time()
    outputs = None
    try:
        tok_path = formats.tokenizer_file(args.tokenizer)
        files = input_files(args.inputs)
        name = args.name or default_name(tok_path)
        outputs = Outputs(args.out, name, args.force)
        ndocs, nval, ntrain, nshards = tokenize(args, files, tok_path, outputs)
        outputs.commit()
    except FormatError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("interrupted: nothing written", file=sys.stderr)
        return 130
    finally:
        if outputs is not None:
            outputs.discard()
    secs = time.time() - start
    print(f"{ndocs:,} documents, {nval + ntrain:,} tokens ({nval:,} val, {ntrain:,} train in {nshards} shard(s))"
          f" -> {outputs.prefix}_*.bin in {secs:.1f} s, {(nval + ntrain) / secs:,.0f} tokens/s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
