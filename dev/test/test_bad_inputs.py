"""Every bad input of the Python tools, one row each: the tool must exit 1 (or the row's status) with
one `error: <file>: <problem>` line naming what the row names, no traceback, and leave no output
(the row's paths must not exist afterwards, and the files it keeps must be as they were).

A row whose `hide` names a package runs the tool with that package hidden (a sitecustomize.py that
puts None in sys.modules for it, as if it were not installed): the tool must say which package is
missing and the command that installs the project's packages.

The inputs: a byte-level BPE tokenizer trained here, the gqa Hugging Face fixture (dev/test/fixtures/hf)
and the model file hf_import makes of it, and small files written here. Needs numpy tokenizers
sentencepiece safetensors ml_dtypes gguf tqdm pyarrow zstandard jinja2. Last line: "N passed, N failed".

    python3 dev/test/test_bad_inputs.py
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections import namedtuple

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DATA = os.path.join(ROOT, "dev", "data")
FIXTURES = os.path.join(ROOT, "dev", "test", "fixtures", "hf")

from checks import check, load_tool, summary  # dev/test/checks.py

try:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
except ImportError as e:
    check(False, f"Python packages: {e}; install with: python3 -m pip install -r requirements.txt")
    sys.exit(summary())

tokenize_text = load_tool("dev/data/tokenize_text.py")  # its CHUNK_BYTES: how much text one worker task holds

TMP = tempfile.mkdtemp(prefix="test_bad_inputs_")
TOOLS = {"tokenize_text": "dev/data/tokenize_text.py", "shards_to_text": "dev/data/shards_to_text.py",
         "shakespeare_chat": "dev/data/shakespeare_chat.py", "synthetic_documents": "dev/data/synthetic_documents.py",
         "hf_import": "scripts/hf_import.py", "hf_export": "scripts/hf_export.py",
         "plot_log": "scripts/plot_log.py", "plot_fp8": "scripts/plot_fp8.py", "to_tensorboard": "scripts/to_tensorboard.py"}


def path(*parts):
    return os.path.join(TMP, *parts)


def write(name, data):
    os.makedirs(os.path.dirname(path(name)), exist_ok=True)
    with open(path(name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode("utf-8"))
    return path(name)


def read(p):
    with open(p, "rb") as f:
        return f.read()


def run(tool, args, hide=None):
    env = dict(os.environ)
    if hide:
        env["PYTHONPATH"] = os.pathsep.join([path("hide")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
        env["HIDE_PACKAGES"] = hide
    p = subprocess.run([sys.executable, TOOLS[tool]] + args, cwd=ROOT, env=env, capture_output=True)
    return p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace")


def install_command():
    """What the tools must say installs the packages, run from the repository root: the virtual
    environment's pip when this Python is one (make test's .venv), else python3's."""
    if sys.prefix != sys.base_prefix:
        return f"{os.path.relpath(os.path.join(sys.prefix, 'bin', 'pip'), ROOT)} install -r requirements.txt"
    return "python3 -m pip install -r requirements.txt"


# --- inputs ---

write("hide/sitecustomize.py", "import os, sys\n"
      "for name in os.environ.get('HIDE_PACKAGES', '').split(','):\n"
      "    sys.modules[name] = None  # import raises ModuleNotFoundError, as for a package not installed\n")

DOCS = ["First Citizen: Before we proceed any further, hear me speak.", "All: Speak, speak.",
        "Caf\u00e9 na\u00efve fa\u00e7ade \u2014 \u201cquoted\u201d", "You are all resolved rather to die than to famish?"]
tok = Tokenizer(models.BPE())
tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tok.decoder = decoders.ByteLevel()
tok.train_from_iterator(DOCS * 20, trainers.BpeTrainer(vocab_size=300, special_tokens=["<|bos|>", "<|eos|>"], show_progress=False,
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
bpe_dir = os.path.dirname(write("bpe/tokenizer.json", tok.to_str()))
write("bpe/tokenizer_config.json", json.dumps({"bos_token": "<|bos|>", "eos_token": "<|eos|>"}))
list_config_dir = os.path.dirname(write("listcfg/tokenizer.json", tok.to_str()))
write("listcfg/tokenizer_config.json", json.dumps([{"bos_token": "<|bos|>"}]))

docs_jsonl = write("docs.jsonl", "".join(json.dumps({"text": d}) + "\n" for d in DOCS))
txt = write("paras.txt", "first para\nline two\n\n\n  \nsecond para\r\n\nthird\n")
os.makedirs(path("tree", "b"))
write("tree/b/2.txt", "in b")
os.symlink(path("gone.txt"), path("tree", "dangling.txt"))
# more than one worker task of text before the bad line, so shards are staged when it is read
big = "".join(json.dumps({"text": f"{i}: " + " ".join(DOCS)}) + "\n" for i in range(tokenize_text.CHUNK_BYTES // 150))
later_bad = write("later_bad.jsonl", big + "{not json\n")
check(len(big) > tokenize_text.CHUNK_BYTES, f"the text before the bad line ({len(big):,} bytes) is more than one worker task"
                                            f" ({tokenize_text.CHUNK_BYTES:,})")
a_file = write("a_file", "not a folder")

# parquet, zstd and chat inputs
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402
import zstandard  # noqa: E402
pq.write_table(pa.table({"url": ["u1", "u2"], "content": DOCS[:2]}), path("nocol.parquet"))
pq.write_table(pa.table({"text": [1, 2]}), path("ints.parquet"))
pq.write_table(pa.table({"text": [DOCS[0], None]}), path("null.parquet"))
good_parquet = read(path("nocol.parquet"))
corrupt_parquet = write("corrupt.parquet", good_parquet[:len(good_parquet) // 2] + b"\0" * 64 + good_parquet[-64:])
# varied lines, so the frame has several blocks and the cut leaves whole lines decoded before it
zst_data = zstandard.ZstdCompressor().compress("".join(json.dumps({"text": f"{i * 7919 % 100003}: {DOCS[i % 4]}"}) + "\n"
                                                       for i in range(20000)).encode())
truncated_zst = write("cut.jsonl.zst", zst_data[:len(zst_data) * 2 // 3])
CHAT = os.path.join(ROOT, "dev", "test", "fixtures", "chat")


def chat_tokenizer(name, template, eos="<|im_end|>"):
    """The chat fixture tokenizer with another chat_template."""
    shutil.copytree(os.path.join(CHAT, "smollm2"), path(name))
    write(f"{name}/tokenizer_config.json", json.dumps({"bos_token": "<|im_start|>", "eos_token": eos, "chat_template": template}))
    return path(name)


# the last message is marked, so the rendering of a conversation's first messages is no prefix of the whole's
not_prefix = chat_tokenizer("notprefix", "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
                                         "{% if loop.last %} (end){% endif %}<|im_end|>\n{% endfor %}")
no_eos = chat_tokenizer("noeos", "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}")
raises = chat_tokenizer("raises", "{% for m in messages %}{% if m['role'] == 'user' %}{{ raise_exception('no user"
                                  " turns here') }}{% endif %}{{ m['content'] }}<|im_end|>{% endfor %}")
no_template = chat_tokenizer("notemplate", None)
bad_syntax = chat_tokenizer("badsyntax", "{% for m in messages %}{{ m['content'] }")
chat_ok = write("chat.jsonl", json.dumps({"prompt": "Who speaks?", "completion": "HAMLET"}) + "\n")

# shards and a decode table, and a model file, for the tools that read them
rc, _, se = run("tokenize_text", ["--tokenizer", bpe_dir, "--out", path("shards"), "--name", "s", "--val_tokens", "0",
                                  "--workers", "1", docs_jsonl])
check(rc == 0, f"setup: tokenize the documents {se.strip()[-200:]}")
shard, table = path("shards", "s_train_000.bin"), path("shards", "s_tokenizer.bin")
shard_txt = path("shards", "shard.txt")  # a shard under a text name: shards_to_text must not write over it
shutil.copy(shard, shard_txt)
table_txt = path("shards", "table.txt")
shutil.copy(table, table_txt)
existing_txt = write("existing.txt", "keep me")
model = path("gqa.bin")
rc, _, se = run("hf_import", [os.path.join(FIXTURES, "gqa"), model])
check(rc == 0, f"setup: import the gqa fixture {se.strip()[-200:]}")
hf_list_config = path("gqa_listcfg")
shutil.copytree(os.path.join(FIXTURES, "gqa"), hf_list_config)
shutil.copy(path("bpe", "tokenizer.json"), hf_list_config)
shutil.copy(path("listcfg", "tokenizer_config.json"), hf_list_config)
main_log = write("main.log", "".join(f"s:{s} trl:{5 - s / 10} norm:1.0 lr:1e-4 ms:10 tok/s:1000\n" for s in range(1, 11)))
fp8_log = write("fp8.log", "".join(f"s:{s} layer:0 linear:qkv x_amax:1.5 x_scale:298.7 w_amax:0.04 w_scale:11200 dy_amax:2e-5"
                                   f" dy_scale:2.8e9\n" for s in (10, 20)))
fake_model = write("fake.model", "not read: the package is imported first")
fake_gguf = write("fake.gguf", "not read: the package is imported first")

# --- the table ---

# tool, its arguments, what stderr must hold, the paths that must not exist after, the files that must
# be as they were, the package hidden, the exit status
Row = namedtuple("Row", "what tool args needles absent keep hide status", defaults=((), (), None, 1))
TOKENIZE = ["--workers", "1", "--val_tokens", "0", "--out", path("o_bad")]  # every tokenize_text row writes here
TOK_OUT = [path("o_bad")]
ROWS = [
    # tokenize_text: inputs
    Row("missing input", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, path("nope.txt")], [path("nope.txt")], TOK_OUT),
    Row("unreadable input (dangling link in a folder)", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, path("tree")],
        [path("tree", "dangling.txt")], TOK_OUT),
    Row("jsonl line not JSON", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("b1.jsonl", '{"text": "a"}\n{"text": \n')],
        [path("b1.jsonl"), "line 2"], TOK_OUT),
    Row("jsonl line lacking the field", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("b2.jsonl", '{"text": "a"}\n{"txt": "b"}\n')],
        ["line 2", "--field"], TOK_OUT),
    Row("jsonl field not a string", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("b3.jsonl", '{"text": 5}\n')],
        ["line 1", "int"], TOK_OUT),
    Row("not UTF-8 (byte offset)", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("b4.txt", b"caf\xc3\xa9\nab\xff\xfe\n")],
        ["byte 8", "--errors replace"], TOK_OUT),
    Row("not UTF-8 in jsonl", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("b5.jsonl", b'{"text": "a"}\n{"text": "\xff"}\n')],
        ["line 2"], TOK_OUT),
    Row("lone surrogate escape", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("b6.jsonl", '{"text": "a\\ud800"}\n')],
        ["line 1", "surrogate"], TOK_OUT),
    Row("not gzip", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("b7.jsonl.gz", "plain")], [path("b7.jsonl.gz")], TOK_OUT),
    Row("empty corpus", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("empty.txt", "")], [path("empty.txt"), "empty"], TOK_OUT),
    Row("fewer tokens than --val_tokens", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, "--val_tokens", "100000", docs_jsonl],
        ["--val_tokens 100,000"], TOK_OUT),
    Row("val takes every token", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, "--val_tokens", "1", write("one.txt", "one doc")],
        ["no tokens left for training"], TOK_OUT),
    Row("bad line after shards were staged", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, "--shard_tokens", "500", later_bad],
        [later_bad, "not JSON"], TOK_OUT),
    Row("parquet: no such column", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, path("nocol.parquet")],
        [path("nocol.parquet"), "no column 'text'", "--field", "url, content"], TOK_OUT),
    Row("parquet: column not strings", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, path("ints.parquet")],
        [path("ints.parquet"), "'text' holds int64"], TOK_OUT),
    Row("parquet: a null text", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, path("null.parquet")],
        [path("null.parquet"), "row group 0, row 1", "null"], TOK_OUT),
    Row("parquet: corrupt file", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, corrupt_parquet],
        [corrupt_parquet, "not a readable Parquet file"], TOK_OUT),
    Row("jsonl.zst: truncated", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, truncated_zst],
        [truncated_zst, "truncated", "zstd"], TOK_OUT),
    Row("jsonl.zst: not zstd", "tokenize_text", TOKENIZE + ["--tokenizer", bpe_dir, write("plain.jsonl.zst", docs_jsonl * 3)],
        [path("plain.jsonl.zst"), "not zstd-compressed"], TOK_OUT),
    # tokenize_text --chat
    Row("chat: a line neither messages nor prompt/completion", "tokenize_text",
        TOKENIZE + ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"), write("c1.jsonl", '{"text": "a"}\n')],
        [path("c1.jsonl"), "line 1", "neither 'messages' nor 'prompt' and 'completion'"], TOK_OUT),
    Row("chat: a message without content", "tokenize_text",
        TOKENIZE + ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"),
                    write("c2.jsonl", json.dumps({"prompt": "p", "completion": "c"}) + "\n" + '{"messages": [{"role": "user"}]}\n')],
        [path("c2.jsonl"), "line 2", "string 'content'"], TOK_OUT),
    Row("chat: a completion not a string", "tokenize_text",
        TOKENIZE + ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"), write("c3.jsonl", '{"prompt": "p", "completion": 3}\n')],
        [path("c3.jsonl"), "line 1", "must be strings"], TOK_OUT),
    Row("chat: a template whose prefix rendering is not a prefix", "tokenize_text",
        TOKENIZE + ["--chat", "--tokenizer", not_prefix, chat_ok], [chat_ok, "line 1", "not a prefix"], TOK_OUT),
    Row("chat: a template that puts no eos_token in the assistant's turn", "tokenize_text",
        TOKENIZE + ["--chat", "--tokenizer", no_eos, chat_ok], [chat_ok, "line 1", "no end-of-turn token"], TOK_OUT),
    Row("chat: the template raises", "tokenize_text", TOKENIZE + ["--chat", "--tokenizer", raises, chat_ok],
        [chat_ok, "line 1", "no user turns here"], TOK_OUT),
    Row("chat: no chat_template", "tokenize_text", TOKENIZE + ["--chat", "--tokenizer", no_template, chat_ok],
        [os.path.join(no_template, "tokenizer_config.json"), "no chat_template"], TOK_OUT),
    Row("chat: a template that does not parse", "tokenize_text", TOKENIZE + ["--chat", "--tokenizer", bad_syntax, chat_ok],
        [os.path.join(bad_syntax, "tokenizer_config.json"), "does not parse"], TOK_OUT),
    Row("chat: a .txt input", "tokenize_text", TOKENIZE + ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"), txt],
        [txt, "--chat reads conversations"], TOK_OUT),
    Row("chat: no assistant message", "tokenize_text", TOKENIZE + ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"),
        write("c4.jsonl", json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n")],
        [path("c4.jsonl"), "no messages of the learned roles (assistant)"], TOK_OUT),
    Row("chat: a role the template does not know ('Assistant')", "tokenize_text",
        TOKENIZE + ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"), write("c5.jsonl", json.dumps(
            {"prompt": "p", "completion": "c"}) + "\n" + json.dumps({"messages": [{"role": "user", "content": "hi"},
                                                                                  {"role": "Assistant", "content": "x"}]}) + "\n")],
        [path("c5.jsonl"), "line 2: message 2 has role 'Assistant'", "assistant, system, user"], TOK_OUT),
    Row("chat: --learn_roles names a role the template does not know", "tokenize_text",
        TOKENIZE + ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"), "--learn_roles", "assistant,tool", chat_ok],
        [os.path.join(CHAT, "smollm2", "tokenizer_config.json"), "--learn_roles", "role 'tool'"], TOK_OUT),
    # tokenize_text: tokenizers
    Row("tokenizer.json that is not one", "tokenize_text", TOKENIZE + ["--tokenizer", write("bad.json", '{"a": 1}'), txt],
        [path("bad.json"), "not a tokenizer.json"], TOK_OUT),
    Row(".model that is not one", "tokenize_text", TOKENIZE + ["--tokenizer", write("bad.model", "nope"), txt],
        [path("bad.model"), "not a SentencePiece model"], TOK_OUT),
    Row("no tokenizer in the folder", "tokenize_text", TOKENIZE + ["--tokenizer", path("tree"), txt], [path("tree")], TOK_OUT),
    Row("tokenizer_config.json a JSON list", "tokenize_text", TOKENIZE + ["--tokenizer", list_config_dir, txt],
        [path("listcfg", "tokenizer_config.json"), "not an object"], TOK_OUT),
    # tokenize_text: the output folder
    Row("--out an existing file", "tokenize_text", ["--workers", "1", "--val_tokens", "0", "--tokenizer", bpe_dir, "--out", a_file, txt],
        [a_file, "not a folder"], keep=[a_file]),
    Row("--out under a file (the folder cannot be made)", "tokenize_text",
        ["--workers", "1", "--val_tokens", "0", "--tokenizer", bpe_dir, "--out", os.path.join(a_file, "sub"), txt],
        [os.path.join(a_file, "sub"), "cannot create the output folder"], keep=[a_file]),
    Row("outputs of this --name exist, no --force", "tokenize_text",
        ["--workers", "1", "--val_tokens", "0", "--tokenizer", bpe_dir, "--out", path("shards"), "--name", "s", txt],
        [table, "--force"], keep=[shard, table]),
    # shards_to_text
    Row("--out exists, no --force", "shards_to_text", ["--table", table, "--out", existing_txt, shard], [existing_txt, "--force"],
        keep=[existing_txt]),
    Row("--out is the input shard (even with --force)", "shards_to_text", ["--table", table, "--out", shard_txt, "--force", shard_txt],
        [shard_txt, "is an input"], keep=[shard_txt]),
    Row("--out is the decode table (even with --force)", "shards_to_text", ["--table", table_txt, "--out", table_txt, "--force", shard],
        [table_txt, "is an input"], keep=[table_txt]),
    Row("a shard that is not one", "shards_to_text", ["--table", table, "--out", path("o.txt"), txt], [txt, "token shard"], [path("o.txt")]),
    Row("a decode table that is not one", "shards_to_text", ["--table", shard, "--out", path("o.txt"), shard], [shard, "decode table"],
        [path("o.txt")]),
    Row("a shard of another tokenizer than --table (its record)", "shards_to_text",
        ["--table", os.path.join(DATA, "tinyshakespeare", "llama2_tokenizer.bin"), "--out", path("o.txt"), shard],
        [shard, "made with another tokenizer"], [path("o.txt")]),
    Row("a decode table changed after it was written (its recorded fingerprint)", "shards_to_text",
        ["--table", write("edited_table.bin", read(table)[:1025] + bytes([read(table)[1025] ^ 1]) + read(table)[1026:]),
         "--out", path("o.txt"), shard], [path("edited_table.bin"), "changed after it was written"], [path("o.txt")]),
    # shakespeare_chat
    Row("no such text", "shakespeare_chat", [path("nope.txt"), "--out", path("sc.jsonl")], [path("nope.txt")], [path("sc.jsonl")]),
    Row("a text without speeches", "shakespeare_chat", [txt, "--out", path("sc.jsonl")], [txt, "no speeches"], [path("sc.jsonl")]),
    Row("--out exists, no --force", "shakespeare_chat", [txt, "--out", existing_txt], [existing_txt, "--force"], keep=[existing_txt]),
    # synthetic_documents
    Row("--out exists, no --force", "synthetic_documents", ["--out", existing_txt, "--tokens", "100"], [existing_txt, "--force"],
        keep=[existing_txt]),
    Row("--out in a folder that does not exist", "synthetic_documents", ["--out", path("nodir", "d.bin"), "--tokens", "100"],
        [path("nodir", "d.bin"), "cannot write"], [path("nodir")]),
    # hf_import and hf_export
    Row("hf_import: tokenizer_config.json a JSON list", "hf_import", [hf_list_config, path("list.bin")],
        [os.path.join(hf_list_config, "tokenizer_config.json"), "not an object"], [path("list.bin"), path("list_tokenizer.bin")]),
    Row("hf_export: --tokenizer whose tokenizer_config.json is a JSON list", "hf_export",
        [model, path("export_list"), "--tokenizer", list_config_dir], [path("listcfg", "tokenizer_config.json"), "not an object"],
        [path("export_list")]),
]
metrics = write("metrics.jsonl", json.dumps({"step": 1, "loss": 5.0, "lr": 1e-4}) + "\n")
# every tool, and each package it imports where a user meets it
MISSING = [
    ("tokenize_text", ["--tokenizer", bpe_dir, "--out", path("o_bad"), txt], "numpy"),
    ("tokenize_text", ["--tokenizer", bpe_dir, "--out", path("o_bad"), txt], "tqdm"),
    ("tokenize_text", ["--tokenizer", bpe_dir, "--out", path("o_bad"), txt], "tokenizers"),
    ("tokenize_text", ["--tokenizer", fake_model, "--out", path("o_bad"), txt], "sentencepiece"),
    ("tokenize_text", ["--tokenizer", bpe_dir, "--out", path("o_bad"), path("nocol.parquet")], "pyarrow"),
    ("tokenize_text", ["--tokenizer", bpe_dir, "--out", path("o_bad"), truncated_zst], "zstandard"),
    ("tokenize_text", ["--chat", "--tokenizer", os.path.join(CHAT, "smollm2"), "--out", path("o_bad"), chat_ok], "jinja2"),
    ("shards_to_text", ["--table", table, "--out", path("o.txt"), shard], "numpy"),
    ("hf_import", [os.path.join(FIXTURES, "gqa"), path("m.bin")], "numpy"),
    ("hf_import", [os.path.join(FIXTURES, "gqa"), path("m.bin")], "tqdm"),
    ("hf_import", [os.path.join(FIXTURES, "gqa"), path("m.bin")], "safetensors"),
    ("hf_import", [os.path.join(FIXTURES, "gqa"), path("m.bin")], "ml_dtypes"),
    ("hf_import", [fake_gguf, path("m.bin")], "gguf"),
    ("hf_export", [model, path("export_m")], "numpy"),
    ("hf_export", [model, path("export_m")], "safetensors"),
    ("hf_export", [model, path("export_m")], "ml_dtypes"),
    ("plot_log", [main_log, "--out", path("loss.png")], "matplotlib"),
    ("plot_fp8", [fp8_log, "--linears", "qkv", "--out", path("fp8.png")], "matplotlib"),
    ("to_tensorboard", [metrics, "--out", path("tb")], "tensorboardX"),
]
ROWS += [Row(f"{package} not installed", tool, args, [f"error: missing Python package '{package}': install it with: {install_command()}"],
             [path("o_bad"), path("o.txt"), path("m.bin"), path("export_m"), path("loss.png"), path("fp8.png"), path("tb")], hide=package)
         for tool, args, package in MISSING]

for row in ROWS:
    kept = {p: read(p) for p in row.keep}
    rc, _, se = run(row.tool, row.args, row.hide)
    missing = [n for n in row.needles if n not in se]
    left = [p for p in row.absent if os.path.exists(p)]
    changed = [p for p, data in kept.items() if not os.path.exists(p) or read(p) != data]
    ok = (rc == row.status and se.startswith("error: ") and len(se.strip().splitlines()) == 1 and "Traceback" not in se
          and not missing and not left and not changed)
    check(ok, f"{row.tool}: {row.what}: exit {rc}, {se.strip()[:200]!r}")
    if not ok:
        print(f"    not in stderr: {missing}; left behind: {left}; changed: {changed}\n{se}")
    for p in left:  # the next row starts clean even when this one failed
        if os.path.isdir(p):
            shutil.rmtree(p)
        else:
            os.remove(p)

shutil.rmtree(TMP)
sys.exit(summary())
