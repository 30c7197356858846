"""Makes a small chat set from TinyShakespeare for the SFT example (README "Chat / SFT data"): for each
speech ("NAME:" then its lines) two conversations, as .jsonl lines of "messages":
  user "Who speaks the line: <a line of the speech>"  ->  assistant "<NAME>"
  user "Continue: <a line>"                           ->  assistant "<the speech's next line>"
in the text's order (the first speeches are the val split tokenize_text.py takes).

    python3 dev/data/shakespeare_chat.py /tmp/tinyshakespeare.txt --out /tmp/shakespeare_chat.jsonl

The text: dev/data/shards_to_text.py recovers it from the repository's shards (README "Fine-tune a
Hugging Face model").
"""
import argparse
import importlib.util
import json
import os
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats
from llama_fp8.formats import FormatError


def speeches(path):
    """(speaker, [lines]) of each paragraph of the text whose first line is "NAME:"."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise FormatError(path, f"cannot read it as UTF-8 text ({getattr(e, 'strerror', None) or e})") from None
    for para in text.split("\n\n"):
        lines = [line.strip() for line in para.strip().split("\n")]
        if len(lines) >= 2 and lines[0].endswith(":") and all(lines[1:]):
            yield lines[0][:-1], lines[1:]


def conversations(path):
    for speaker, lines in speeches(path):
        yield [{"role": "user", "content": f"Who speaks the line: {lines[0]}"}, {"role": "assistant", "content": speaker}]
        if len(lines) >= 2:
            yield [{"role": "user", "content": f"Continue: {lines[0]}"}, {"role": "assistant", "content": lines[1]}]


@formats.tool_main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="python3 dev/data/shakespeare_chat.py TEXT --out OUT.jsonl [--force]")
    p.add_argument("text", help="TinyShakespeare as text (paragraphs separated by blank lines)")
    p.add_argument("--out", required=True, help="the .jsonl of conversations to write")
    p.add_argument("--force", action="store_true", help="replace --out if it exists")
    args = p.parse_args(argv)
    if not args.force and os.path.exists(args.out):
        raise FormatError(args.out, "exists; pass --force to replace it")
    chats = [json.dumps({"messages": m}, ensure_ascii=False) + "\n" for m in conversations(args.text)]
    if not chats:
        raise FormatError(args.text, "no speeches (a 'NAME:' line and the speech's lines, paragraphs apart)")
    formats.write_atomic(args.out, [c.encode("utf-8") for c in chats])
    print(f"{len(chats):,} conversations -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
