"""Decodes token shards back to text with their decode table, one document per document-start
token: to recover a corpus that exists only as shards (../shared/data's TinyShakespeare and Gutenberg
shards, Llama 2) and retokenize it with another tokenizer (dev/data/tokenize_text.py).

    python3 dev/data/shards_to_text.py --table ../shared/data/llama2_tokenizer.bin --strip_prefix_space \\
        --out /tmp/gutenberg.jsonl ../shared/data/gutenberg_llama2_train_*.bin

OUT.jsonl: one {"text": ...} object per document (read back by tokenize_text.py as is).
OUT.txt: the documents, each followed by a blank line (read back with --split para, which gives the
same documents when none holds a blank line, as TinyShakespeare's paragraphs).
The shards are one stream, in the order given: a document may continue from one shard into the next.
OUT is written under a temporary name and renamed when complete; an existing OUT is refused unless
--force, and OUT is never one of the inputs.
"""
import argparse
import importlib.util
import json
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats
from llama_fp8.formats import FormatError, shard_documents


def check_out(out, inputs, force):
    """Refuses an --out that is one of the inputs (it would be replaced before it is read), or that
    exists without --force."""
    if not os.path.exists(out):
        return
    for path in inputs:
        if os.path.exists(path) and os.path.samefile(out, path):
            raise FormatError(out, f"is an input ({path}): write the text to another file")
    if not force:
        raise FormatError(out, "exists; pass --force to replace it")


@formats.tool_main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="python3 dev/data/shards_to_text.py --table TABLE.bin --out OUT.{jsonl,txt} SHARD...",
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("shards", nargs="+", metavar="SHARD")
    p.add_argument("--table", required=True, help="the shards' decode table (NAME_tokenizer.bin)")
    p.add_argument("--out", required=True, help="the text: .jsonl (a document per line) or .txt (documents separated by a blank line)")
    p.add_argument("--strip_prefix_space", action="store_true",
                   help="drop one leading space from every document: the one SentencePiece's add_dummy_prefix"
                        " put there (Llama 2 shards)")
    p.add_argument("--force", action="store_true", help="replace an existing --out (never one of the inputs)")
    args = p.parse_args(argv)
    if not args.out.endswith((".jsonl", ".txt")):
        p.error("--out must end in .jsonl or .txt")
    jsonl = args.out.endswith(".jsonl")
    count = {"docs": 0, "bytes": 0}

    def records(pieces, doc_start):
        for doc, shard in shard_documents(args.shards, pieces, doc_start):
            if args.strip_prefix_space and doc.startswith(b" "):
                doc = doc[1:]
            try:
                text = doc.decode("utf-8")
            except UnicodeDecodeError as e:
                raise FormatError(shard, f"document {count['docs']} is not UTF-8 at its byte {e.start}:"
                                         " is the table the shards' own?") from None
            count["docs"] += 1
            count["bytes"] += len(doc)
            yield (json.dumps({"text": text}, ensure_ascii=False) + "\n").encode("utf-8") if jsonl else doc + b"\n\n"

    check_out(args.out, [args.table] + args.shards, args.force)
    pieces, doc_start = formats.read_decode_table(args.table)
    formats.write_atomic(args.out, records(pieces, doc_start))
    print(f"{count['docs']:,} documents, {count['bytes']:,} bytes of text from {len(args.shards)} shard(s) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
