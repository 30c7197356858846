#!/usr/bin/env bash
# Copies the tokenized corpora and decode tables this project ships with (../shared/data, see its
# README) into data/, where the trainer's defaults and the scripts look for them. data/ is ignored
# by git; it is also the folder to carry to a GPU machine.
#   bash dev/data/get_data.sh [SOURCE_DIR [DEST_DIR]]   (defaults: ../shared/data beside the repository, data)
# Every file of the list below must arrive whole: each is copied under a temporary name, checked
# against its size and md5 (those of the corpus this project's results were measured on) and only
# then renamed into place; a file already in DEST_DIR with the right md5 is kept. A file missing from
# SOURCE_DIR, of another size or md5, or that cannot be written is named on stderr and the script
# exits 1: it never reports a partial corpus as done.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-../shared/data}
dest=${2:-data}
# md5, bytes (a 1024-byte header + 2 bytes a token: the token counts of ../shared/data/README.md), name
files="
8493de4a9527c90ab4599d87f79ac0eb 10001024 gutenberg_llama2_train_000.bin
6c6e330cba1d7624219f10f14cfacf3f 10001024 gutenberg_llama2_train_001.bin
4da030be7443b26393ada836e8e1b7e0 10001024 gutenberg_llama2_train_002.bin
b5d6339b8c0de5346bdab1ed4c07b3b4 10001024 gutenberg_llama2_train_003.bin
7469c3ca6e430684223eeee553cb3db1 10001024 gutenberg_llama2_train_004.bin
e3c3f1b23514d88845e8dedf3c90caa0 308832 gutenberg_llama2_train_005.bin
52e6e703fd0221dbccd114aa29c71ede 1647186 gutenberg_llama2_val.bin
dfb17cbf890d18d3574a35008ccf82c1 209593 llama2_tokenizer.bin
744d8fbc42b5d02345a8dcce40a5bc9c 968048 llama3_tokenizer.bin
1c1b9abbea643576716a367361bfc811 659924 tinyshakespeare_llama2_train.bin
38396595ac05d6a63c379c4a2003f9c0 66560 tinyshakespeare_llama2_val.bin
8fa1b0962e638bcc3d8161d2ee7a07d1 1105704 tinyshakespeare_llama3_train.bin
9aa532e219cc16dbf1b1fda13d624295 132096 tinyshakespeare_llama3_val.bin
"
if [ ! -d "$src" ]; then
    echo "error: $src: no such folder: pass the folder holding the corpus's .bin files as the first argument" >&2
    exit 1
fi
mkdir -p "$dest" || { echo "error: $dest: cannot make the folder" >&2; exit 1; }
md5() { md5sum < "$1" | cut -d' ' -f1; }
partial=
trap '[ -z "$partial" ] || rm -f "$partial"' EXIT # a copy cut short never stays behind
total=0 copied=0 kept=0 failed=0
while read -r sum bytes name; do
    [ -n "$name" ] || continue
    total=$((total + 1))
    if [ -f "$dest/$name" ] && [ "$(md5 "$dest/$name")" = "$sum" ]; then
        kept=$((kept + 1))
        continue
    fi
    problem=
    if [ ! -f "$src/$name" ]; then
        problem="missing"
    elif [ "$(stat -c %s "$src/$name")" != "$bytes" ]; then
        problem="$(stat -c %s "$src/$name") bytes, the corpus's file has $bytes"
    else
        partial="$dest/$name.partial"
        if ! cp "$src/$name" "$partial" 2>/dev/null; then
            problem="cannot copy it to $partial"
        elif [ "$(md5 "$partial")" != "$sum" ]; then
            problem="md5 $(md5 "$partial") after the copy, the corpus's file has $sum"
        elif ! mv -f "$partial" "$dest/$name"; then
            problem="cannot rename $partial to $dest/$name"
        fi
        rm -f "$partial"
        partial=
    fi
    if [ -n "$problem" ]; then
        echo "error: $src/$name: $problem" >&2
        failed=$((failed + 1))
    else
        copied=$((copied + 1))
    fi
done <<< "$files"
if [ "$failed" -gt 0 ]; then
    echo "error: $src: incomplete corpus: $failed of its $total files missing or wrong (named above); $dest/ holds the other $((total - failed)), checked" >&2
    exit 1
fi
echo "$dest/ holds all $total files of the corpus, each checked against its size and md5 ($copied copied from $src, $kept already there):"
ls -la "$dest/"
