"""Records the tokenizer in token shards written without one (llm.c's format, or this project's before
shards carried it): each shard is rewritten with its role and its decode table's fingerprint in the
header, so the trainer checks it against -tok and the run's other shards instead of warning that it
cannot.

    python3 dev/data/record_tokenizer.py --table data/llama2_tokenizer.bin --role train data/my_train_*.bin
    python3 dev/data/record_tokenizer.py --table data/llama2_tokenizer.bin --role val data/my_val.bin

Every id must be inside the table's vocabulary. A shard that already records this table in this role is
left as it is; one that records another table or role is refused (retokenize it instead). Each shard is
written under a temporary name and renamed, its ids and their width unchanged (a loss mask beside it
stays valid); on an error the shards before the bad one are done and the rest untouched.
"""
import argparse
import importlib.util
import sys

if importlib.util.find_spec("llama_fp8") is None:  # pyproject.toml; make venv installs it into .venv/
    sys.exit(f"error: {sys.executable} has no llama_fp8 package: run make venv, then use .venv/bin/python3")

from llama_fp8 import formats
from llama_fp8.formats import FormatError


def record(path, pieces, role):
    """Rewrites one shard with the record; returns whether it changed."""
    fingerprint = formats.tokenizer_fingerprint(pieces)
    had = formats.read_shard_record(path)
    if had == (role, len(pieces), fingerprint):
        return False
    if had is not None:
        raise FormatError(path, f"already records {had[0]} with tokenizer fingerprint {had[2]:08x} ({had[1]} tokens); asked for"
                                f" {role} with {fingerprint:08x} ({len(pieces)} tokens): retokenize it rather than relabel it")
    tokens = formats.read_shard(path)
    formats.write_shard(path, tokens, dtype=tokens.dtype, tokenizer=pieces, role=role)
    return True


@formats.tool_main
def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
                                usage="python3 dev/data/record_tokenizer.py --table TABLE.bin --role {train,val} SHARD...",
                                epilog=__doc__.split("\n\n", 1)[1])
    p.add_argument("shards", nargs="+", metavar="SHARD")
    p.add_argument("--table", required=True, help="the decode table the shards' ids are of (NAME_tokenizer.bin)")
    p.add_argument("--role", required=True, choices=sorted(formats.ROLES), help="train shards, or a val shard")
    args = p.parse_args(argv)
    changed = 0
    pieces, _ = formats.read_decode_table(args.table)
    for path in args.shards:
        changed += record(path, pieces, args.role)
    print(f"{changed} of {len(args.shards)} shard(s) now record {args.role} and tokenizer"
          f" {formats.tokenizer_fingerprint(pieces):08x} ({len(pieces)} tokens) of {args.table}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
