"""Tokenizes the HellaSwag validation items with a model's own tokenizer into the trainer's eval file
(`-hs FILE`; the layout: write_hellaswag in llama_fp8/formats.py), as lm-evaluation-harness scores it.

    python3 dev/data/prepare_hellaswag.py --tokenizer smollm2/ --out data/hellaswag_smollm2.bin \\
        ../shared/data/hellaswag/hellaswag_val_full.txt.bz2

Inputs (.bz2 / .gz compressed or not):
  .txt    6 lines per item: "activity_label: context", the label (0-3), the 4 endings, already
          preprocessed (../shared/data/hellaswag/hellaswag_val_full.txt.bz2, llama.cpp's layout)
  .jsonl  the official hellaswag_val.jsonl (ctx_a, ctx_b, activity_label, endings, label), with
          lm-eval's preprocessing (lm_eval/tasks/hellaswag/utils.py): query = activity_label + ": " +
          ctx_a + " " + ctx_b.capitalize(), " [title]" -> ". ", "[...]" removed, a double space made
          one, stripped; the same for each ending. (The .txt file was made the same way except that
          ctx_b is not capitalized, so its contexts differ from lm-eval's in that one letter.)
Each ending is scored as lm-eval's continuation " " + ending: the context and context + continuation
are encoded and the continuation's tokens are what follows the context's (lm-eval's _encode_pair),
with the same encoder as tokenize_text.py (formats.text_encoder: special-token text is text, no added
BOS/EOS; --bos adds the tokenizer's BOS before each context, as lm-eval's add_bos_token=True does).
"""
import argparse
import bz2
import gzip
import importlib.util
import json
import os
import re
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats
from llama_fp8.formats import FormatError

ENDINGS = formats.HELLASWAG_ENDINGS


def preprocess(text):
    """lm-eval's HellaSwag text preprocessing (brackets are WikiHow artifacts)."""
    text = text.strip()
    text = text.replace(" [title]", ". ")
    text = re.sub("\\[.*?\\]", "", text)
    return text.replace("  ", " ")


def read_lines(path):
    opener = bz2.open if path.endswith(".bz2") else gzip.open if path.endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            data = f.read()
    except (OSError, EOFError) as e:
        raise FormatError(path, f"cannot read: {getattr(e, 'strerror', None) or e}") from None
    try:
        return data.decode("utf-8").split("\n")
    except UnicodeDecodeError as e:
        raise FormatError(path, f"not UTF-8 (byte offset {e.start})") from None


def parse_label(path, where, value):
    if isinstance(value, str) and value.strip() in ("0", "1", "2", "3"):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < ENDINGS:
        return value
    raise FormatError(path, f"{where}: label {value!r} is not 0, 1, 2 or 3")


def txt_items(path, lines):
    """(context, label, endings) of the 6-line layout."""
    if lines and lines[-1] == "":
        lines = lines[:-1]
    if len(lines) % (2 + ENDINGS):
        raise FormatError(path, f"{len(lines)} lines: not a whole number of items of {2 + ENDINGS} lines"
                                f" (context, label, {ENDINGS} endings)")
    items = []
    for at in range(0, len(lines), 2 + ENDINGS):
        ctx, label, endings = lines[at], lines[at + 1], lines[at + 2:at + 2 + ENDINGS]
        if ": " not in ctx:
            raise FormatError(path, f"line {at + 1}: the context line of item {at // 6} is not 'activity_label: context'")
        label = parse_label(path, f"line {at + 2}", label)
        for k, e in enumerate(endings):
            if not e.strip():
                raise FormatError(path, f"line {at + 3 + k}: ending {k} of item {at // 6} is empty")
        items.append((ctx, label, endings))
    return items


def jsonl_items(path, lines):
    items = []
    for n, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
            ctx = doc["ctx_a"] + " " + doc["ctx_b"].capitalize()
            query = preprocess(doc["activity_label"] + ": " + ctx)
            endings = doc["endings"]
            label = doc["label"]
        except json.JSONDecodeError as e:
            raise FormatError(path, f"line {n}: not JSON ({e.msg})") from None
        except (KeyError, TypeError, AttributeError) as e:
            raise FormatError(path, f"line {n}: not a HellaSwag record (needs string fields ctx_a, ctx_b,"
                                    f" activity_label, a list of endings and a label; {type(e).__name__}: {e})") from None
        if not isinstance(endings, list) or len(endings) != ENDINGS or not all(isinstance(e, str) for e in endings):
            raise FormatError(path, f"line {n}: endings must be a list of {ENDINGS} strings")
        endings = [preprocess(e) for e in endings]
        for k, e in enumerate(endings):
            if not e:
                raise FormatError(path, f"line {n}: ending {k} is empty after preprocessing")
        items.append((query, parse_label(path, f"line {n}", label), endings))
    return items


def read_items(path):
    lines = read_lines(path)
    stem = path[:-4] if path.endswith(".bz2") else path[:-3] if path.endswith(".gz") else path
    if stem.endswith(".jsonl"):
        items = jsonl_items(path, lines)
    elif stem.endswith(".txt"):
        items = txt_items(path, lines)
    else:
        raise FormatError(path, "name a .txt (6 lines per item) or .jsonl (hellaswag_val.jsonl) file, optionally .bz2 or .gz")
    if not items:
        raise FormatError(path, "no items")
    return items


def encode_items(items, tok_path, bos):
    """(label, context ids, ending ids, ending characters) per item, as lm-eval's _encode_pair splits
    context + continuation."""
    encode = formats.text_encoder(tok_path)
    contexts, wholes = [], []
    for ctx, _, endings in items:
        # lm-eval moves a context's trailing spaces onto the continuation: the whole text stays the same
        contexts.append(ctx.rstrip())
        wholes += [ctx + " " + e for e in endings]
    ctx_ids, whole_ids = encode(contexts), encode(wholes)
    out = []
    for i, (_, label, endings) in enumerate(items):
        c = ctx_ids[i]
        conts = [whole_ids[ENDINGS * i + k][len(c):] for k in range(ENDINGS)]
        for k, cont in enumerate(conts):
            if not cont:
                raise FormatError(tok_path, f"item {i}: ending {k} ({endings[k]!r}) encodes to no tokens after the context")
        out.append((label, ([bos] if bos is not None else []) + c, conts, [len(e) for e in endings]))
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="python3 dev/data/prepare_hellaswag.py --tokenizer TOK --out FILE INPUT")
    p.add_argument("input", metavar="INPUT", help="hellaswag_val_full.txt(.bz2) or hellaswag_val.jsonl(.gz)")
    p.add_argument("--tokenizer", required=True, metavar="TOK",
                   help="a tokenizer.json, a SentencePiece .model, or a folder holding either (the model's own)")
    p.add_argument("--out", required=True, metavar="FILE", help="the eval file to write")
    p.add_argument("--max_items", type=int, default=0, metavar="N", help="only the first N items (default 0: all)")
    p.add_argument("--bos", action="store_true", help="start every context with the tokenizer's BOS")
    p.add_argument("--force", action="store_true", help="replace an existing --out")
    args = p.parse_args(argv)
    if args.max_items < 0:
        p.error("--max_items must not be negative")
    return args


@formats.tool_main
def main(argv=None):
    args = parse_args(argv)
    if os.path.exists(args.out) and not args.force:
        raise FormatError(args.out, "exists; pass --force to replace it")
    tok_path = formats.tokenizer_file(args.tokenizer)
    items = read_items(args.input)
    if args.max_items:
        items = items[:args.max_items]
    bos = None
    if args.bos:
        bos = formats.special_ids(tok_path)[0]
        if bos is None:
            raise FormatError(tok_path, "--bos: the tokenizer names no BOS token")
    vocab = len(formats.decode_table_from_tokenizer(tok_path))
    encoded = encode_items(items, tok_path, bos)
    formats.write_hellaswag(args.out, encoded, vocab)
    ntok = sum(len(c) + sum(map(len, e)) for _, c, e, _ in encoded)
    longest = max(len(c) + max(map(len, e)) for _, c, e, _ in encoded)
    print(f"{len(encoded):,} items, {ntok:,} tokens (longest context + ending {longest}) -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
