#!/usr/bin/env bash
# Copies the tokenized corpora and decode tables this project ships with (../shared/data, see its
# README) into data/, where the trainer's defaults and the scripts look for them. data/ is ignored
# by git; it is also the folder to carry to a GPU machine.
#   bash dev/data/get_data.sh [SOURCE_DIR]      (default: ../shared/data beside the repository)
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${1:-../shared/data}
if [ ! -d "$src" ]; then
    echo "error: no data folder at '$src'. Pass the folder holding the .bin shards as the first argument." >&2
    exit 1
fi
mkdir -p data
n=0
for f in "$src"/*.bin; do
    [ -e "$f" ] || continue
    cp -u "$f" data/ && n=$((n + 1))
done
[ "$n" -gt 0 ] || { echo "error: no .bin files in '$src'" >&2; exit 1; }
echo "copied $n files from $src into data/:"
ls -la data/
