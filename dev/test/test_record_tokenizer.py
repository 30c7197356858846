"""dev/data/record_tokenizer.py: llm.c-format shards rewritten with their role and decode table's
fingerprint (the ids, their width and every other byte of the body unchanged), a shard already
recording it left alone, another table, another role or an id outside the table refused with the
shard untouched; and the repository's own TinyShakespeare shards record their tables, so the quick
start's run has a tokenizer to check and no warning. Last line: "N passed, N failed".

    python3 dev/test/test_record_tokenizer.py
"""
import contextlib
import io
import os
import sys
import tempfile

from checks import check, load_tool, summary  # dev/test/checks.py

import numpy as np
from llama_fp8 import formats

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

tool = load_tool("dev/data/record_tokenizer.py")
TMP = tempfile.mkdtemp(prefix="test_record_tokenizer_")


def run(*args):
    """(exit status, stdout, stderr) of the tool's main."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = tool.main(list(args))
    return status, out.getvalue(), err.getvalue()


def read(path):
    with open(path, "rb") as f:
        return f.read()


# a table of 300 tokens, non-ASCII pieces among them, and another of the same size
pieces = [bytes([i % 256]) * (1 + i % 3) for i in range(256)] + ["é".encode(), "ß".encode(), "日本".encode()] + [b"x%d" % i for i in range(41)]
other = [b"y%d" % i for i in range(300)]
table, other_table = os.path.join(TMP, "a_tokenizer.bin"), os.path.join(TMP, "b_tokenizer.bin")
formats.write_decode_table(table, pieces, 1)
formats.write_decode_table(other_table, other, 1)
ids = np.array([0, len(pieces) - 1] + list(range(len(pieces))) + [1, 299, 0], dtype="<u2")  # every id, 0 and V-1 first and last

shard = os.path.join(TMP, "a_train_000.bin")
formats.write_shard(shard, ids)  # llm.c's format
before = read(shard)
status, out, err = run("--table", table, "--role", "train", shard)
after = read(shard)
check(status == 0 and formats.read_shard_record(shard) == ("train", len(pieces), formats.tokenizer_fingerprint(pieces)),
      f"an llm.c shard records train and the table's fingerprint (exit {status}; {formats.read_shard_record(shard)}; {err.strip()})")
check(formats.read_shard(shard).dtype == np.dtype("<u2") and np.array_equal(formats.read_shard(shard), ids)
      and after[1024:] == before[1024:] and after[:12] == before[:12],
      "its ids, their width, the body and the header's magic, version and count are unchanged")

status, out, err = run("--table", table, "--role", "train", shard)
check(status == 0 and read(shard) == after and out.startswith("0 of 1"), f"a shard that records it already is left as it is ({out.strip()})")

for args, want, what in [(("--table", other_table, "--role", "train"), "retokenize it", "another table"),
                         (("--table", table, "--role", "val"), "already records train", "another role")]:
    status, out, err = run(*args, shard)
    check(status == 1 and err.startswith(f"error: {shard}: ") and want in err and read(shard) == after,
          f"{what}: refused naming the shard, which is untouched (exit {status}; {err.strip()})")

val = os.path.join(TMP, "a_val.bin")
formats.write_shard(val, np.array([5, 6, 7]), dtype="<u4")  # a 32-bit llm.c shard
status, out, err = run("--table", table, "--role", "val", val)
check(status == 0 and formats.read_shard_record(val)[0] == "val" and formats.read_shard(val).dtype == np.dtype("<u4"),
      f"--role val recorded, a 32-bit shard stays 32-bit ({formats.read_shard_record(val)})")

big = os.path.join(TMP, "big.bin")
formats.write_shard(big, np.array([3, len(pieces)], dtype="<u2"))  # an id one past the table
kept = read(big)
status, out, err = run("--table", table, "--role", "train", big)
check(status == 1 and big in err and "outside its tokenizer's 300 tokens" in err and read(big) == kept
      and not [n for n in os.listdir(TMP) if "tmp" in n or "partial" in n],
      f"an id outside the table refused, the shard untouched, nothing left behind (exit {status}; {err.strip()})")

# the repository's own data: the quick start trains on these with these tables
shipped = os.path.join(ROOT, "dev", "data", "tinyshakespeare")
for name, tok, role in [("tinyshakespeare_llama2_train.bin", "llama2_tokenizer.bin", "train"),
                        ("tinyshakespeare_llama2_val.bin", "llama2_tokenizer.bin", "val"),
                        ("tinyshakespeare_llama3_val.bin", "llama3_tokenizer.bin", "val")]:
    table_pieces, _ = formats.read_decode_table(os.path.join(shipped, tok))
    got = formats.read_shard_record(os.path.join(shipped, name))
    check(got == (role, len(table_pieces), formats.tokenizer_fingerprint(table_pieces)),
          f"dev/data/tinyshakespeare/{name} records {role} and {tok}'s tokenizer ({got})")

sys.exit(summary())
