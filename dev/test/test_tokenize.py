"""CPU checks of dev/data/tokenize_text.py, llama_fp8/formats.py, dev/data/shards_to_text.py and the C
decode (dev/data/decode_shard.c through llmc/tokenizer.h).

Tokenizers are trained here on a small text (TinyShakespeare paragraphs recovered from
dev/data/tinyshakespeare's Llama 2 val shard, plus documents of non-ASCII text none of them was trained
on): a byte-level BPE tokenizer.json, a SentencePiece-style (Metaspace, byte fallback) BPE
tokenizer.json, and a SentencePiece .model (byte_fallback). For each, the text is tokenized and the
shards' headers, document-start tokens and val split are checked, and decoding the shards with the
C program must give the text back byte for byte (with the BOS pieces where documents start);
--workers 1 and 4 must write identical files, also on a corpus of several worker tasks in flight;
the val split must end at the document that reaches --val_tokens, exactly at the boundary; ids past
65535 must give 32-bit shards. The same documents as .txt, .jsonl, .parquet (several row groups, the
text not the first column) and .jsonl.zst (two frames) must give identical files, and a .parquet must
be read one row group at a time (pyarrow's peak memory stays near one row group's). A long document
must be encoded in pieces with the ids of the whole (byte-level BPE, Metaspace BPE with and without
merges across line ends, SentencePiece with and without the dummy prefix, 1 and 3 workers), and an
8 MB one in under 500 MB of memory; a SIGINT during the final renames must leave the new outputs
complete, a SIGTERM while shards are staged the old ones, no .partial file and no traceback. --chat must give
the ids and loss masks transformers' apply_chat_template gives (dev/test/fixtures/chat/expected.json,
made by dev/reference/make_chat_fixture.py) for SmolLM2's and Llama 3's templates, split across train
shards (the val shard has none), with any number of workers; an assistant message holding the
end-of-turn text must be learned through its turn's last one; a token across a learned turn's start or
end must be refused; --learn_roles must learn the named roles' turns from their content through their
end of turn. The bad inputs are rows of dev/test/test_bad_inputs.py.
Needs gcc and the Python packages of requirements.txt. Last line: "N passed, N failed".

    python3 dev/test/test_tokenize.py
"""
import gzip
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "dev", "data")
SHAKESPEARE = os.path.join(DATA, "tinyshakespeare")  # the repo's copy of ../shared/data's files

from checks import check, load_tool, summary  # dev/test/checks.py


try:
    import numpy as np
    import sentencepiece as spm
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    import tqdm  # noqa: F401 (tokenize_text.py needs it)
    import pyarrow as pa
    import pyarrow.parquet as pq
    import zstandard
    import jinja2  # noqa: F401 (tokenize_text.py --chat needs it)
except ImportError as e:
    check(False, f"Python packages: {e}; install with: pip install -r requirements.txt")
    sys.exit(summary())

from llama_fp8 import formats  # noqa: E402
from llama_fp8.formats import shard_documents  # noqa: E402
CHUNK_BYTES = load_tool("dev/data/tokenize_text.py").CHUNK_BYTES  # the text of one worker task

TMP = tempfile.mkdtemp(prefix="test_tokenize_")
NON_ASCII = ["Caf\u00e9 na\u00efve fa\u00e7ade \u2014 \u201cquoted\u201d \u00dcn\u00efc\u00f6d\u00e9",
             "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3002\n\u0417\u0434\u0440\u0430\u0432\u0441\u0442\u0432\u0443\u0439, \u043c\u0438\u0440!",
             "emoji \U0001F600\U0001F389 and a tab\there, then trailing spaces   ",
             "  two leading spaces, a CR\r\nand {braces} <0x41> <|bos|>-like text"]


def path(*parts):
    return os.path.join(TMP, *parts)


def write(name, data):
    with open(path(name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path(name)


def run(args, stdin=None):
    p = subprocess.run([sys.executable, os.path.join(DATA, "tokenize_text.py")] + args, input=stdin,
                       capture_output=True)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def outputs(out, name):
    """{'val': path, 'train': [paths], 'tokenizer': path} of a run's files."""
    train = sorted(os.path.join(out, f) for f in os.listdir(out) if f.startswith(name + "_train_"))
    return {"val": os.path.join(out, name + "_val.bin"), "train": train,
            "tokenizer": os.path.join(out, name + "_tokenizer.bin")}


def header(p):
    return [int(x) for x in np.fromfile(p, dtype="<i4", count=256)]


def read(p):
    with open(p, "rb") as f:
        return f.read()


def c_decode(table, shards):
    p = subprocess.run([DECODER, table] + shards, capture_output=True)
    return p.stdout if p.returncode == 0 else None


# --- the text and the tokenizers ---

table, doc_start = formats.read_decode_table(os.path.join(SHAKESPEARE, "llama2_tokenizer.bin"))
shakespeare = []
for doc, _ in shard_documents([os.path.join(SHAKESPEARE, "tinyshakespeare_llama2_val.bin")], table, doc_start):
    shakespeare.append(doc.decode("utf-8")[1:])  # [1:]: SentencePiece's dummy-prefix space
    if len(shakespeare) == 120:
        break
check(shakespeare[0].startswith("First Citizen:\nBefore we proceed"), "shards_to_text recovers TinyShakespeare from the Llama 2 shard")
DOCS = shakespeare + NON_ASCII
train_text = write("train.txt", "\n".join(shakespeare))


def bpe_json(byte_level):
    """A BPE tokenizer.json trained on the Shakespeare text: byte-level (GPT-2 style) or
    SentencePiece-style (Metaspace with byte fallback, as Llama 2's tokenizer.json)."""
    tok = Tokenizer(models.BPE(byte_fallback=not byte_level))
    specials = ["<|bos|>", "<|eos|>"]
    if byte_level:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                      show_progress=False)
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="never")
        tok.decoder = decoders.Sequence([decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()])
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials, show_progress=False)
    tok.train([train_text], trainer)
    spec = json.loads(tok.to_str())
    if not byte_level:  # byte-fallback pieces <0x00>..<0xFF> as ordinary vocabulary, as in Llama 2's
        vocab = spec["model"]["vocab"]
        for b in range(256):
            vocab.setdefault(f"<0x{b:02X}>", len(vocab))
    return spec


def save_json(spec, *where):
    os.makedirs(os.path.dirname(path(*where)), exist_ok=True)
    with open(path(*where), "w") as f:
        json.dump(spec, f, ensure_ascii=False)
    return path(*where)


byte_spec = bpe_json(byte_level=True)
bpe_dir = os.path.dirname(save_json(byte_spec, "bpe", "tokenizer.json"))
save_json({"bos_token": "<|bos|>", "eos_token": {"content": "<|eos|>"}}, "bpe", "tokenizer_config.json")
nobos_json = save_json(byte_spec, "nobos", "tokenizer.json")
meta_spec = bpe_json(byte_level=False)
meta_spec["post_processor"] = json.loads(processors.TemplateProcessing(
    single="<|bos|> $A <|eos|>", special_tokens=[("<|bos|>", 0), ("<|eos|>", 1)]).__getstate__())
meta_json = save_json(meta_spec, "meta", "meta.json")

sp_model = path("sp.model")
with open(train_text, encoding="utf-8") as f:
    sp_lines = [line for line in f.read().split("\n") if line]
sp_buf = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(sp_lines), model_writer=sp_buf, vocab_size=500, model_type="bpe",
                               byte_fallback=True, normalization_rule_name="identity", add_dummy_prefix=False,
                               remove_extra_whitespaces=False, character_coverage=1.0, minloglevel=2)
with open(sp_model, "wb") as f:
    f.write(sp_buf.getvalue())
sp = spm.SentencePieceProcessor(model_file=sp_model)

DECODER = path("decode_shard")
cc = subprocess.run(["gcc", "-O2", "-Wall", "-Wno-unused-function", "-I" + ROOT, os.path.join(DATA, "decode_shard.c"),
                     "-o", DECODER], capture_output=True, text=True)
check(cc.returncode == 0 and not cc.stderr, f"decode_shard.c compiles without warnings {cc.stderr.strip()}")

docs_jsonl = write("docs.jsonl", "".join(json.dumps({"id": i, "text": d}) + "\n" for i, d in enumerate(DOCS)))

# --- each tokenizer: headers, document starts, val split, C round trip, workers ---
# (TOK, name, BOS id, its decode-table piece, vocabulary size)
KINDS = [(bpe_dir, "bpe", 0, b"<|bos|>", Tokenizer.from_file(path("bpe", "tokenizer.json")).get_vocab_size()),
         (meta_json, "meta", 0, b"<|bos|>", len(meta_spec["model"]["vocab"])),
         (sp_model, "sp", sp.bos_id(), b"", sp.get_piece_size())]
VAL, SHARD = 1000, 1500
for tok, name, bos, bos_piece, vocab in KINDS:
    out = path("out_" + name)
    rc, so, se = run(["--tokenizer", tok, "--out", out, "--val_tokens", str(VAL), "--shard_tokens", str(SHARD),
                      "--workers", "1", docs_jsonl])
    if not check(rc == 0, f"{name}: tokenize_text exits 0 {se.strip()[-300:]}"):
        continue
    check(f"{len(DOCS):,} documents" in so and "tokens/s" in so, f"{name}: summary line: {so.strip()}")
    o = outputs(out, name)  # default --name: the folder of a tokenizer.json, or the file's stem
    files = [o["val"]] + o["train"]
    check(all(os.path.exists(f) for f in files + [o["tokenizer"]]) and len(o["train"]) >= 2,
          f"{name}: val, {len(o['train'])} train shards and the decode table written")
    check(all(header(f)[:2] == [20240520, 1] for f in files), f"{name}: 16-bit shard headers (magic 20240520, version 1)")
    shards = [formats.read_shard(f) for f in files]
    check(all(len(s) == SHARD for s in shards[1:-1]) and 0 < len(shards[-1]) <= SHARD,
          f"{name}: train shards hold --shard_tokens {SHARD} each, the last the rest ({[len(s) for s in shards[1:]]})")
    th = header(o["tokenizer"])
    check(th[:4] == [20240328, 2, vocab, bos], f"{name}: decode table header {th[:4]}, expected [20240328, 2, {vocab}, {bos}]")
    stream = np.concatenate(shards)
    starts = np.flatnonzero(stream == bos)
    check(len(starts) == len(DOCS) and starts[0] == 0, f"{name}: every document starts with BOS {bos} ({len(starts)} of {len(DOCS)})")
    val = shards[0]
    val_docs = int((val == bos).sum())
    last_start = np.flatnonzero(val == bos)[-1]
    check(len(val) >= VAL and last_start < VAL and shards[1][0] == bos,
          f"{name}: val is whole documents, the fewest holding >= {VAL} tokens ({len(val)} tokens, {val_docs} documents)")
    expected = b"".join(bos_piece + d.encode("utf-8") for d in DOCS)
    got = c_decode(o["tokenizer"], files)
    check(got == expected, f"{name}: the C decode of every shard gives the text back byte for byte ({len(expected)} bytes)")
    if name != "meta":
        out4 = path("out4_" + name)
        rc, _, se = run(["--tokenizer", tok, "--out", out4, "--val_tokens", str(VAL), "--shard_tokens", str(SHARD),
                         "--workers", "4", docs_jsonl])
        o4 = outputs(out4, name)
        same = rc == 0 and all(open(a, "rb").read() == open(b, "rb").read()
                               for a, b in zip(files + [o["tokenizer"]], [o4["val"]] + o4["train"] + [o4["tokenizer"]]))
        check(same and len(o4["train"]) == len(o["train"]), f"{name}: --workers 1 and 4 write identical files {se.strip()[-200:]}")

# the library's own special tokens and decoding agree with the table
bpe_table, _ = formats.read_decode_table(outputs(path("out_bpe"), "bpe")["tokenizer"])
lib = Tokenizer.from_file(path("bpe", "tokenizer.json"))
ids = lib.encode(NON_ASCII[0] + NON_ASCII[2], add_special_tokens=False).ids
check(b"".join(bpe_table[i] for i in ids).decode("utf-8") == lib.decode(ids), "bpe: table decodes as the tokenizers library does")
sp_table, _ = formats.read_decode_table(outputs(path("out_sp"), "sp")["tokenizer"])
ids = sp.encode(NON_ASCII[1])
check(b"".join(sp_table[i] for i in ids).decode("utf-8") == sp.decode(ids) and sp_table[sp.bos_id()] == b"",
      "sp: table decodes as sentencepiece does; control tokens decode to nothing")
check(formats.special_ids(meta_json) == (0, 1, None) and formats.special_ids(path("bpe", "tokenizer.json")) == (0, 1, None)
      and formats.special_ids(nobos_json) == (None, None, None),
      "BOS/EOS from tokenizer_config.json, from the post-processor template, or none; no padding token named")

# --- the val split's boundary: a document that ends exactly at --val_tokens is the last one in val ---

lengths = [len(lib.encode(d, add_special_tokens=False).ids) + 1 for d in shakespeare[:4]]  # + its BOS
three = sum(lengths[:3])
val_jsonl = write("val.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in shakespeare[:6]))
for val_tokens, docs in ((three, 3), (three + 1, 4), (three - 1, 3)):
    rc, _, se = run(["--tokenizer", bpe_dir, "--out", path("o_val"), "--name", f"v{val_tokens}", "--val_tokens", str(val_tokens),
                     "--workers", "1", val_jsonl])
    val = formats.read_shard(os.path.join(path("o_val"), f"v{val_tokens}_val.bin")) if rc == 0 else np.zeros(0)
    check(len(val) == sum(lengths[:docs]) and (val == 0).sum() == docs,
          f"--val_tokens {val_tokens} (the first 3 documents hold {three}): val is the first {docs} documents,"
          f" {sum(lengths[:docs])} tokens (got {len(val)}, {(val == 0).sum()} documents) {se.strip()[-200:]}")

# --- several tasks in flight: 4 workers must write what 1 writes ---
# The first document alone is a task twice the size of the others, so with 4 workers the next tasks
# finish before it: taken in the order they finish, the shards would come out of order.
paragraphs = [json.dumps({"text": f"{i}: {d}"}) + "\n" for i, d in enumerate(shakespeare * 150)]
first_doc = json.dumps({"text": " ".join(shakespeare * 130)}) + "\n"
many = write("many.jsonl", first_doc + "".join(paragraphs))
check(len(first_doc) > 2 * CHUNK_BYTES and os.path.getsize(many) > 5 * CHUNK_BYTES,
      f"the corpus is {os.path.getsize(many) / CHUNK_BYTES:.1f} worker tasks ({CHUNK_BYTES:,} bytes each), its first document"
      f" {len(first_doc) / CHUNK_BYTES:.1f} of them alone")
files = {}
for workers in (1, 4):
    out = path(f"o_many{workers}")
    rc, _, se = run(["--tokenizer", bpe_dir, "--out", out, "--name", "m", "--val_tokens", "1000", "--shard_tokens", "300000",
                     "--workers", str(workers), many])
    files[workers] = [read(os.path.join(out, f)) for f in sorted(os.listdir(out))] if rc == 0 else [se]
o = outputs(path("o_many1"), "m")
expected = b"".join(b"<|bos|>" + json.loads(line)["text"].encode("utf-8") for line in [first_doc] + paragraphs)
check(c_decode(o["tokenizer"], [o["val"]] + o["train"]) == expected, f"{len(paragraphs) + 1:,} documents, 1 worker: the C decode"
      f" gives the corpus back ({len(o['train'])} train shards)")
check(files[1] == files[4] and len(files[4]) > 3, f"several tasks in flight: --workers 1 and 4 write identical files"
      f" ({len(files[4])} files) {files[4][0][-200:] if len(files[4]) == 1 else ''}")

# --- inputs: splits, folders, stdin, gzip, --eos, --no-bos, --bos_id ---

def run_docs(args, name="t"):
    """Runs tokenize_text with the byte-level tokenizer; the documents it wrote (decoded), or the error."""
    out = path("o_" + name)
    shutil.rmtree(out, ignore_errors=True)
    rc, _, se = run(["--tokenizer", bpe_dir, "--out", out, "--name", name, "--val_tokens", "0"] + args)
    if rc != 0:
        return se
    o = outputs(out, name)
    pieces, start = formats.read_decode_table(o["tokenizer"])
    return [d.decode("utf-8") for d, _ in shard_documents(o["train"], pieces, start)]


txt = write("paras.txt", "first para\nline two\n\n\n  \nsecond para\r\n\nthird\n")
check(run_docs(["--split", "para", txt]) == ["first para\nline two", "second para", "third"], "--split para: blank-line-separated paragraphs")
check(run_docs(["--split", "line", txt]) == ["first para", "line two", "  ", "second para", "third"], "--split line: each non-empty line")
check(run_docs([txt]) == ["first para\nline two\n\n\n  \nsecond para\r\n\nthird\n"], "--split doc (default): the whole file")
os.makedirs(path("tree", "b"))
write("tree/b/2.txt", "in b")
write("tree/a.txt", "in a")
write("tree/skip.md", "not an input")
with gzip.open(path("tree", "c.jsonl.gz"), "wt") as f:
    f.write('{"text": "gz one"}\n\n{"text": "gz two"}\n')
check(run_docs([path("tree"), txt]) == ["in a", "in b", "gz one", "gz two", open(txt, newline="").read()],
      "a folder: its .txt/.jsonl.gz files recursively, in sorted order, then the next input")
rc, so, se = run(["--tokenizer", bpe_dir, "--out", path("o_stdin"), "--val_tokens", "0", "--split", "line", "-"], stdin=b"one\ntwo\n")
check(rc == 0 and "2 documents" in so, f"- reads standard input {se.strip()[-200:]}")
rc, _, se = run(["--tokenizer", bpe_dir, "--out", path("o_eos"), "--val_tokens", "0", "--eos", "--split", "line", txt])
s = formats.read_shard(outputs(path("o_eos"), "bpe")["train"][0]) if rc == 0 else np.zeros(0)
check(rc == 0 and (s == 1).sum() == 5 and s[-1] == 1 and all(s[np.flatnonzero(s == 0)[1:] - 1] == 1), "--eos ends every document with EOS")
rc, _, se = run(["--tokenizer", nobos_json, "--out", path("o_nb"), "--val_tokens", "0", txt])
check(rc == 1 and "--bos_id" in se and nobos_json in se, f"a tokenizer without BOS is refused, naming --bos_id: {se.strip()}")
rc, _, _ = run(["--tokenizer", nobos_json, "--out", path("o_nb"), "--name", "n", "--val_tokens", "0", "--bos_id", "1", txt])
s = formats.read_shard(os.path.join(path("o_nb"), "n_train_000.bin")) if rc == 0 else np.zeros(0)
check(rc == 0 and s[0] == 1 and header(os.path.join(path("o_nb"), "n_tokenizer.bin"))[3] == 1, "--bos_id N starts documents with N")
rc, _, _ = run(["--tokenizer", nobos_json, "--out", path("o_nb"), "--name", "m", "--val_tokens", "0", "--no-bos", txt])
s = formats.read_shard(os.path.join(path("o_nb"), "m_train_000.bin")) if rc == 0 else np.zeros(0)
check(rc == 0 and len(s) and not (s < 2).any(), "--no-bos: no BOS tokens")

# --- a long document: encoded in pieces (bounded memory), with the ids of the whole ---
# In a child with PIECE_CHARS and CHUNK_BYTES made small, so each document below is cut ~15 times and
# spans several worker tasks: each tokenizer (byte-level BPE; Metaspace BPE, which merges line ends
# with the next line's word, so find_cut must refuse some line ends; SentencePiece without and with
# the dummy prefix that marks where a text starts), --split doc, --eos, 1 and 3 workers, the first
# document the val split. The ids must be BOS, the whole document's (formats.text_encoder), EOS.
long_docs = ["\n\n".join(shakespeare + NON_ASCII) + "\n", "\n".join(shakespeare[::-1])]
long_txt = [write(f"long{i}.txt", d) for i, d in enumerate(long_docs)]
# the Metaspace BPE with merges of a line end and the capital letter after it, first in priority (as
# SentencePiece-style vocabularies without a newline split may have): find_cut must pass over those
# line ends (most of the text's), else their tokens would differ from the whole document's
nl_spec = json.loads(json.dumps(meta_spec))
capitals = [c for c in "ABCDEFGHIJKLMNOPQRSTUVWXYZ" if c in nl_spec["model"]["vocab"]]
for c in capitals:
    nl_spec["model"]["vocab"]["\n" + c] = len(nl_spec["model"]["vocab"])
nl_spec["model"]["merges"] = [["\n", c] for c in capitals] + nl_spec["model"]["merges"]
nl_json = save_json(nl_spec, "nl", "nl.json")
nl = formats.text_encoder(nl_json)
check(nl(["speak.\nFirst"])[0] != nl(["speak.\n"])[0] + nl(["First"])[0], "the line-end-merging BPE: 'speak.\\nFirst' is not"
      " 'speak.\\n' and 'First' encoded apart")
dp_buf = io.BytesIO()
spm.SentencePieceTrainer.train(sentence_iterator=iter(sp_lines), model_writer=dp_buf, vocab_size=500, model_type="bpe",
                               byte_fallback=True, normalization_rule_name="identity", remove_extra_whitespaces=False,
                               character_coverage=1.0, minloglevel=2)  # add_dummy_prefix on, as Llama 2's
with open(path("dp.model"), "wb") as f:
    f.write(dp_buf.getvalue())
PIECE_TOKS = [(bpe_dir, 0, 1), (meta_json, 0, 1), (nl_json, 0, 1), (sp_model, sp.bos_id(), sp.eos_id()), (path("dp.model"), sp.bos_id(), sp.eos_id())]
check(spm.SentencePieceProcessor(model_file=path("dp.model")).encode("And", out_type=str)[0].startswith("\u2581"),
      "the dummy-prefix SentencePiece model marks where a text starts ('And' as '\u2581And')")
probe = subprocess.run([sys.executable, "-c", f"""
import sys; sys.path.insert(0, {DATA!r})
import tokenize_text as tool  # imported by name, so the workers find its functions
tool.PIECE_CHARS, tool.CHUNK_BYTES = 2048, 4096
cuts = []
find_cut = tool.find_cut
tool.find_cut = lambda *args: cuts.append(find_cut(*args)) or cuts[-1]
for i, tok in enumerate({[t for t, _, _ in PIECE_TOKS]!r}):
    for workers in ("1", "3"):
        rc = tool.main(["--tokenizer", tok, "--out", {path('o_long')!r} + f"/{{i}}_{{workers}}", "--name", "l", "--eos",
                        "--val_tokens", "1", "--workers", workers] + {long_txt!r})
        print("ran", i, workers, rc, sum(c is not None for c in cuts))
        cuts.clear()
"""], capture_output=True, text=True)
ran = {}
for line in probe.stdout.splitlines():
    if line.startswith("ran "):
        _, i, workers, rc, made = line.split()
        ran[int(i), workers] = (int(rc), int(made))
for i, (tok, bos, eos) in enumerate(PIECE_TOKS):
    encode = formats.text_encoder(formats.tokenizer_file(tok))
    want = [[bos] + encode([d])[0] + [eos] for d in long_docs]
    for workers in ("1", "3"):
        rc, made = ran.get((i, workers), (None, 0))
        o = outputs(path("o_long", f"{i}_{workers}"), "l") if rc == 0 else {"val": None, "train": []}
        got = [[int(t) for t in formats.read_shard(f)] for f in [o["val"]] + o["train"]] if rc == 0 else []
        check(got == want and made >= 4, f"{os.path.basename(tok)}, {workers} worker(s):"
              f" two documents of {len(long_docs[0]):,} and {len(long_docs[1]):,} characters in {made} cuts: val and train are"
              f" BOS, the whole document's ids, EOS {probe.stderr.strip()[-300:]}")
# --- memory: a document of 8 MB (one .txt, --split doc) stays under the README's bound of 500 MB ---
# (encoded whole, it took ~185 bytes a character: 1.5 GB here; the bound holds whatever the length,
# the 2 GB benchmark in the README being the long measurement); ru_maxrss of a wrapper's one child
big_txt = path("big_doc.txt")
with open(big_txt, "w", encoding="utf-8") as f:
    for i in range(8_000_000 // len("\n".join(shakespeare)) + 1):
        f.write(f"{i}\n" + "\n".join(shakespeare) + "\n")
probe = subprocess.run([sys.executable, "-c", f"""
import resource, subprocess, sys
p = subprocess.run([sys.executable, {os.path.join(DATA, 'tokenize_text.py')!r}, "--tokenizer", {bpe_dir!r}, "--out",
                    {path('o_bigdoc')!r}, "--val_tokens", "0", "--shard_tokens", "1000000", "--workers", "1", {big_txt!r}],
                   capture_output=True, text=True)
print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024, p.stdout.strip(), p.stderr.strip()[-300:])
"""], capture_output=True, text=True)
rc, peak, said = (probe.stdout.split(" ", 2) + ["", "", ""])[:3] if probe.returncode == 0 else ("", "0", probe.stderr)
check(rc == "0" and "1 documents" in said and 0 < int(peak) < 500e6, f"one document of {os.path.getsize(big_txt) / 1e6:.1f} MB:"
      f" peak RSS {int(peak) / 1e6:.0f} MB, under 500 MB: {said.strip()[-200:]}")

# --- stops: a SIGINT during the final renames, a SIGTERM while shards are staged ---

def snapshot(folder):
    return {n: read(os.path.join(folder, n)) for n in sorted(os.listdir(folder))}


# the old outputs (--shard_tokens 1500) and a reference of the new (--shard_tokens 700: other names too)
old_args = ["--tokenizer", bpe_dir, "--name", "s", "--val_tokens", "500", "--workers", "1", docs_jsonl]
for folder, shard_tokens in (("o_stop", "1500"), ("o_stop_new", "700")):
    rc, _, se = run(["--out", path(folder), "--shard_tokens", shard_tokens] + old_args)
    check(rc == 0, f"stops: setup {folder} {se.strip()[-200:]}")
old, new = snapshot(path("o_stop")), snapshot(path("o_stop_new"))
check(len(new) > len(old) > 3 and set(old) & set(new), f"stops: the old outputs ({len(old)} files) and the new ({len(new)})"
      " share names and differ in number")
# SIGINT to itself from os.replace as it renames the second staged file into place
probe = subprocess.run([sys.executable, "-c", f"""
import os, signal, sys; sys.path.insert(0, {DATA!r})
import tokenize_text as tool
replace, renames = os.replace, []
def interrupted_replace(src, dst):
    renames.append(src)  # the staged files' (formats' writers rename their own temporary files too)
    if sum(r.endswith(".partial") for r in renames) == 2 and src.endswith(".partial"):
        os.kill(os.getpid(), signal.SIGINT)
    replace(src, dst)
os.replace = interrupted_replace
sys.exit(tool.main(["--out", {path('o_stop')!r}, "--shard_tokens", "700", "--force"] + {old_args!r}))
"""], capture_output=True, text=True)
check(probe.returncode == 130 and "stopped by SIGINT while the outputs were put in place: they are complete" in probe.stderr
      and "Traceback" not in probe.stderr and snapshot(path("o_stop")) == new,
      f"SIGINT during the final renames: exit {probe.returncode} (want 130), the new outputs complete ({len(new)} files), no mix"
      f" {probe.stderr.strip()[-300:]!r}")

# SIGTERM to a run of 2 workers once it has staged a shard (of ~500 to come: seconds before its end):
# the old outputs stay, nothing of the run is left
rc, _, se = run(["--out", path("o_stop"), "--shard_tokens", "1500", "--force"] + old_args)
old = snapshot(path("o_stop"))
stopped = write("stopped.jsonl", "".join(paragraphs) * 4)
p = subprocess.Popen([sys.executable, os.path.join(DATA, "tokenize_text.py"), "--tokenizer", bpe_dir, "--out", path("o_stop"),
                      "--name", "s", "--val_tokens", "500", "--shard_tokens", "10000", "--workers", "2", "--force", stopped],
                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
for _ in range(1200):  # 60 s at most
    if p.poll() is not None or any(".partial" in n for n in os.listdir(path("o_stop"))):
        break
    time.sleep(0.05)
staged = sorted(n for n in os.listdir(path("o_stop")) if ".partial" in n)
p.send_signal(signal.SIGTERM)
so, se = p.communicate()
check(staged and "s_tokenizer.bin.partial" not in staged and p.returncode == 143 and se.strip().endswith("stopped by SIGTERM: nothing written (the files of this --name, if"
      " any, are as they were)") and "Traceback" not in se and snapshot(path("o_stop")) == old,
      f"SIGTERM with {staged[:2]} staged: exit {p.returncode} (want 143), no traceback, the old files as they were and nothing"
      f" else: {sorted(set(os.listdir(path('o_stop'))) - set(old))} {se.strip()[-300:]!r}")

# --- 16 / 32 bits ---

for ids, magic in [([0, 7, 65535], 20240520), ([0, 7, 65536], 20240801), ([5, 2**32 - 1], 20240801)]:
    formats.write_shard(path("w.bin"), ids)
    back = formats.read_shard(path("w.bin"))
    check(header(path("w.bin"))[0] == magic and list(back) == ids and header(path("w.bin"))[2] == len(ids),
          f"write_shard {ids}: magic {magic}, read back")
big = json.loads(json.dumps(byte_spec))
for i in range(len(big["model"]["vocab"]), 70000):  # pieces no merge makes, so the BOS gets id 70000
    big["model"]["vocab"][f"<unused{i}>"] = i
big["added_tokens"].append({"id": 70000, "content": "<|bos70k|>", "single_word": False, "lstrip": False, "rstrip": False,
                            "normalized": False, "special": True})
save_json(big, "big", "tokenizer.json")
save_json({"bos_token": "<|bos70k|>"}, "big", "tokenizer_config.json")
rc, _, se = run(["--tokenizer", path("big"), "--out", path("o_big"), "--val_tokens", "200", docs_jsonl])
if check(rc == 0, f"a tokenizer with an added token id 70000 tokenizes {se.strip()[-300:]}"):
    o = outputs(path("o_big"), "big")
    files = [o["val"]] + o["train"]
    stream = np.concatenate([formats.read_shard(f) for f in files])
    check(all(header(f)[:2] == [20240801, 7] for f in files) and stream.dtype == np.uint32,
          "vocabulary past 65536: 32-bit shards (magic 20240801, version 7)")
    check(header(o["tokenizer"])[2:4] == [70001, 70000] and (stream == 70000).sum() == len(DOCS),
          "32-bit: table vocab 70001, BOS 70000 starts every document")
    check(c_decode(o["tokenizer"], files) == b"".join(b"<|bos70k|>" + d.encode("utf-8") for d in DOCS),
          "32-bit: the C decode gives the text back byte for byte")

# --- decode tables ---

try:
    formats.write_decode_table(path("t.bin"), [b"a", b"x" * 256], 0)
    check(False, "a 256-byte piece is refused")
except formats.FormatError as e:
    check("token 1" in str(e) and "255" in str(e) and not os.path.exists(path("t.bin")), f"a 256-byte piece is refused: {e}")
formats.write_decode_table(path("t.bin"), [b"", b"\xff\xfe", b"x" * 255], 2)
check(formats.read_decode_table(path("t.bin")) == ([b"", b"\xff\xfe", b"x" * 255], 2), "decode table write / read round trip")
rc = subprocess.run([sys.executable, os.path.join(DATA, "shards_to_text.py"), "--table", outputs(path("out_sp"), "sp")["tokenizer"],
                     "--out", path("back.jsonl")] + [outputs(path("out_sp"), "sp")["val"]] + outputs(path("out_sp"), "sp")["train"],
                    capture_output=True).returncode
back = [json.loads(line)["text"] for line in open(path("back.jsonl"), encoding="utf-8")] if rc == 0 else []
check(back == DOCS, "shards_to_text.py gives the documents back (.jsonl)")
rc = subprocess.run([sys.executable, os.path.join(DATA, "shards_to_text.py"), "--table", os.path.join(SHAKESPEARE, "llama2_tokenizer.bin"),
                     "--strip_prefix_space", "--out", path("back.txt"), os.path.join(SHAKESPEARE, "tinyshakespeare_llama2_val.bin")],
                    capture_output=True).returncode
back = open(path("back.txt"), "rb").read() if rc == 0 else b""
check(back.startswith("".join(d + "\n\n" for d in shakespeare).encode("utf-8")),
      "shards_to_text.py --strip_prefix_space: Llama 2 shards as .txt documents, each followed by a blank line")

# --- input formats: .txt, .jsonl, .parquet, .jsonl.zst and folders give the same files ---

def same_files(a, b):
    names = sorted(os.listdir(a))
    return names == sorted(os.listdir(b)) and all(read(os.path.join(a, n)) == read(os.path.join(b, n)) for n in names)


def write_parquet(name, docs, row_group, field="text"):
    """docs as a Parquet file of row groups of `row_group` rows, the text after a url column (as FineWeb)."""
    pq.write_table(pa.table({"url": [f"https://example.com/{i}" for i in range(len(docs))], field: docs}), path(name),
                   row_group_size=row_group)
    return path(name)


formats_docs = DOCS * 3
check(all("\n\n" not in d and d.strip() for d in formats_docs), "the documents hold no blank line (a .txt of paragraphs can hold them)")
fmt_inputs = {"txt": write("f.txt", "\n\n".join(formats_docs) + "\n"),
              "jsonl": write("f.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in formats_docs)),
              "parquet": write_parquet("f.parquet", formats_docs, 50)}
half = len(formats_docs) // 2
zst = zstandard.ZstdCompressor()
fmt_inputs["jsonl.zst"] = write("f.jsonl.zst", zst.compress("".join(
    json.dumps({"text": d}) + "\n" for d in formats_docs[:half]).encode()) + zst.compress("".join(
        json.dumps({"text": d}) + "\n" for d in formats_docs[half:]).encode()))
check(pq.ParquetFile(fmt_inputs["parquet"]).num_row_groups == 8, "the .parquet has 8 row groups")
for kind, f in fmt_inputs.items():
    for workers in ("1", "4"):
        out = path(f"o_fmt_{kind}_{workers}")
        rc, so, se = run(["--tokenizer", bpe_dir, "--out", out, "--name", "f", "--val_tokens", "700", "--shard_tokens", "2000",
                          "--workers", workers] + (["--split", "para"] if kind == "txt" else []) + [f])
        check(rc == 0 and f"{len(formats_docs):,} documents" in so, f".{kind}, {workers} worker(s): tokenized {se.strip()[-300:]}")
ref = path("o_fmt_jsonl_1")
o = outputs(ref, "f")
check(len(o["train"]) >= 3 and c_decode(o["tokenizer"], [o["val"]] + o["train"]) == b"".join(b"<|bos|>" + d.encode() for d in formats_docs),
      f".jsonl: the C decode gives the documents back ({len(o['train'])} train shards)")
for kind in fmt_inputs:
    for workers in ("1", "4"):
        if (kind, workers) != ("jsonl", "1"):
            check(same_files(ref, path(f"o_fmt_{kind}_{workers}")), f".{kind}, {workers} worker(s): the same files as .jsonl, 1 worker")

# a FineWeb-style folder: numbered .parquet files, read in sorted order, the text in --field
os.makedirs(path("fineweb", "data", "CC-MAIN-2024-10"))
write_parquet("fineweb/data/CC-MAIN-2024-10/000_00001.parquet", formats_docs[half:], 40, "content")
write_parquet("fineweb/data/CC-MAIN-2024-10/000_00000.parquet", formats_docs[:half], 40, "content")
rc, _, se = run(["--tokenizer", bpe_dir, "--out", path("o_fineweb"), "--name", "f", "--val_tokens", "700", "--shard_tokens", "2000",
                 "--workers", "2", "--field", "content", path("fineweb")])
check(rc == 0 and same_files(ref, path("o_fineweb")), f"a folder of .parquet files (FineWeb's layout), --field content: the same files {se.strip()[-300:]}")

# one row group at a time: pyarrow's peak allocation while reading 32 row groups of ~1 MB each stays
# under half the text (reading the whole file holds all of it at once)
big_docs = [f"{i} " + "word " * 2000 for i in range(3200)]
big_parquet = write_parquet("big.parquet", big_docs, 100)
probe = subprocess.run([sys.executable, "-c", f"""
import sys; sys.path.insert(0, {os.path.join(ROOT, 'dev', 'test')!r})
from checks import load_tool
import pyarrow as pa
tool = load_tool("dev/data/tokenize_text.py")
with open({big_parquet!r}, "rb") as f:
    n = sum(1 for _ in tool.parquet_documents({big_parquet!r}, f, "text"))
print(n, pa.default_memory_pool().max_memory())
"""], capture_output=True, text=True)
n, peak = (int(x) for x in probe.stdout.split()) if probe.returncode == 0 else (0, 0)
text_bytes = sum(map(len, big_docs))
check(n == len(big_docs) and 0 < peak < text_bytes / 2, f".parquet read one row group at a time: pyarrow's peak {peak / 1e6:.1f} MB"
      f" for {text_bytes / 1e6:.1f} MB of text in 32 row groups {probe.stderr.strip()[-300:]}")

# --- --chat: token for token what transformers' apply_chat_template gives ---

CHAT = os.path.join(ROOT, "dev", "test", "fixtures", "chat")
with open(os.path.join(CHAT, "expected.json")) as f:
    chat_expected = json.load(f)
conversations = os.path.join(CHAT, "conversations.jsonl")
for name in ("smollm2", "llama3"):
    want_ids = [t for r in chat_expected[name] for t in r["ids"]]
    want_mask = [m for r in chat_expected[name] for m in r["mask"]]
    first = len(chat_expected[name][0]["ids"])
    runs = {}
    for workers in ("1", "3"):
        out = path(f"o_chat_{name}_{workers}")
        rc, so, se = run(["--chat", "--tokenizer", os.path.join(CHAT, name), "--out", out, "--name", "c", "--val_tokens", "1",
                          "--shard_tokens", "100", "--workers", workers, conversations])
        runs[workers] = rc == 0
        if not check(rc == 0 and "5 conversations" in so and f"{sum(want_mask[first:]):,} of the train tokens learned" in so,
                     f"--chat {name}, {workers} worker(s): tokenized: {so.strip()} {se.strip()[-300:]}"):
            continue
    if not runs["1"]:
        continue
    o = outputs(path(f"o_chat_{name}_1"), "c")
    o["train"] = [t for t in o["train"] if t.endswith(".bin")]
    ids = [int(t) for s_ in [o["val"]] + o["train"] for t in formats.read_shard(s_)]
    mask = [int(m) for s_ in o["train"] for m in formats.read_loss_mask(formats.mask_path(s_), len(formats.read_shard(s_)))]
    val_mask = ([int(m) for m in formats.read_loss_mask(formats.mask_path(o["val"]), first)]
                if os.path.exists(formats.mask_path(o["val"])) else None)
    check(len(formats.read_shard(o["val"])) == first and len(o["train"]) >= 3 and val_mask == want_mask[:first],
          f"--chat {name}: val is the first conversation ({first} tokens), with its loss mask (the trainer's val loss is over its"
          f" {sum(want_mask[:first])} learned tokens); the rest in {len(o['train'])} train shards")
    check(ids == want_ids, f"--chat {name}: the ids are apply_chat_template's, token for token ({len(want_ids)} tokens)")
    check(mask == want_mask[first:], f"--chat {name}: each train shard's loss mask is 1 exactly on the assistant's tokens"
                                     f" through its end-of-turn token ({sum(want_mask[first:])} of {len(want_mask) - first})")
    if runs["3"]:
        check(same_files(path(f"o_chat_{name}_1"), path(f"o_chat_{name}_3")), f"--chat {name}: --workers 1 and 3 write identical files")

# --- --chat: a learned turn ends at its last end-of-turn text, no token across its ends, --learn_roles ---

def chat_fixture(name, template=None, added=()):
    """A copy of the smollm2 chat fixture, with another chat_template and/or more (non-special) added tokens."""
    shutil.copytree(os.path.join(CHAT, "smollm2"), path(name))
    spec = json.loads(read(path(name, "tokenizer.json")))
    for content in added:
        spec["added_tokens"].append({"id": len(spec["model"]["vocab"]) + len(spec["added_tokens"]), "content": content,
                                     "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                                     "special": False})
    save_json(spec, name, "tokenizer.json")
    if template is not None:
        config = json.loads(read(path(name, "tokenizer_config.json")))
        save_json(dict(config, chat_template=template), name, "tokenizer_config.json")
    return path(name)


def chat_run(tok, conversations, args=()):
    """tokenize_text --chat of conversations (lists of (role, content)): (exit status, stderr, the text of
    each run of learned tokens, decoded by the tokenizers library)."""
    jsonl = write("turns.jsonl", "".join(json.dumps({"messages": [{"role": r, "content": c} for r, c in conv]}) + "\n"
                                         for conv in conversations))
    out = path("o_turns")
    shutil.rmtree(out, ignore_errors=True)
    rc, _, se = run(["--chat", "--tokenizer", tok, "--out", out, "--name", "t", "--val_tokens", "0", "--workers", "1"]
                    + list(args) + [jsonl])
    if rc != 0:
        return rc, se, None
    shard = os.path.join(out, "t_train_000.bin")
    ids = formats.read_shard(shard)
    mask = np.concatenate([[0], formats.read_loss_mask(formats.mask_path(shard), len(ids)), [0]])
    starts, ends = np.flatnonzero(np.diff(mask) == 1), np.flatnonzero(np.diff(mask) == -1)
    lib = Tokenizer.from_file(os.path.join(tok, "tokenizer.json"))
    return rc, se, [lib.decode([int(t) for t in ids[a:b]], skip_special_tokens=False) for a, b in zip(starts, ends)]


# an assistant message that holds the end-of-turn text: its turn ends at the last one (the template's),
# also where the message is the conversation's last and is nothing but end-of-turn texts
for name, eos in (("smollm2", "<|im_end|>"), ("llama3", "<|eot_id|>")):
    conversation = [("user", "Say the end marker"), ("assistant", f"It is {eos} here"), ("user", "Twice"),
                    ("assistant", f"{eos}{eos}")]
    rc, se, learned = chat_run(os.path.join(CHAT, name), [conversation])
    want = [c + eos for r, c in conversation if r == "assistant"]
    check(learned == want, f"--chat {name}: an assistant message holding {eos} as text is learned through its turn's last"
                           f" {eos}: {learned}, want {want} {se.strip()[-300:]}")

# a token across a learned turn's end (SmolLM2's '<|im_end|>' and the newline after it as one added
# token) or across its start ('\nHAMLET': the header's newline and the answer's first word) is refused
qa = write("qa.jsonl", json.dumps({"prompt": "Who?", "completion": "HAMLET"}) + "\n")
for where, token in (("end", "<|im_end|>\n"), ("start", "\nHAMLET")):
    tok = chat_fixture(f"straddle_{where}", added=[token])
    out = path(f"o_straddle_{where}")
    rc, _, se = run(["--chat", "--tokenizer", tok, "--out", out, "--val_tokens", "0", "--workers", "1", qa])
    check(rc == 1 and se.startswith(f"error: {qa}: line 1: a token straddles") and len(se.strip().splitlines()) == 1
          and not os.path.exists(out), f"--chat: a token {token!r} across the assistant turn's {where} is refused: {se.strip()!r}")
rc, _, se = run(["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"), "--out", path("o_straddle_none"), "--val_tokens", "0",
                 "--workers", "1", qa])
check(rc == 0, f"--chat: the same conversation without those tokens is tokenized {se.strip()[-300:]}")

# --learn_roles: a template that knows a tool role (SmolLM2's with a branch for it); the turns of the
# roles named are learned from their content through their end of turn, the last message a tool's
tool_template = ("{% for message in messages %}{% if message['role'] == 'tool' %}{{ '<|im_start|>tool\\n<result>' +"
                 " message['content'] + '<|im_end|>\\n' }}{% else %}{{ '<|im_start|>' + message['role'] + '\\n' +"
                 " message['content'] + '<|im_end|>\\n' }}{% endif %}{% endfor %}{% if add_generation_prompt %}"
                 "{{ '<|im_start|>assistant\\n' }}{% endif %}")
tool_tok = chat_fixture("tool", template=tool_template)
conversation = [("system", "Use the tool."), ("user", "Who speaks first?"), ("assistant", "call: first_speaker()"),
                ("tool", "First Citizen"), ("assistant", "First Citizen."), ("tool", "")]
for roles in (None, "assistant,tool", "tool", "user"):
    rc, se, learned = chat_run(tool_tok, [conversation], ["--learn_roles", roles] if roles else [])
    named = (roles or "assistant").split(",")
    want = [c + "<|im_end|>" for r, c in conversation if r in named]
    check(learned == want, f"--chat --learn_roles {roles or '(default)'}: the learned text is the named roles' content through"
                           f" their end of turn: {learned}, want {want} {se.strip()[-300:]}")

# --- bad input: every case is a row of dev/test/test_bad_inputs.py; here what must carry on ---

rc, _, se = run(["--tokenizer", bpe_dir, "--out", path("o_rep"), "--val_tokens", "0", "--errors", "replace",
                 write("b4.txt", b"caf\xc3\xa9\nab\xff\xfe\n")])
check(rc == 0 and c_decode(outputs(path("o_rep"), "bpe")["tokenizer"], outputs(path("o_rep"), "bpe")["train"])
      == "<|bos|>caf\u00e9\nab\ufffd\ufffd\n".encode("utf-8"), "--errors replace carries on with U+FFFD")
rc, _, se = run(["--tokenizer", bpe_dir, "--out", path("out_bpe"), "--val_tokens", "0", "--force", txt])
check(rc == 0 and sorted(os.listdir(path("out_bpe"))) == ["bpe_tokenizer.bin", "bpe_train_000.bin"],
      "existing outputs of this name: --force replaces them, and removes the files of this name the new run does not make")

shutil.rmtree(TMP)
sys.exit(summary())
