#!/usr/bin/env bash
# HellaSwag of a real model, ours (GPU, bf16 and fp8) against transformers (CPU, fp32), on the same
# tokens: SmolLM2-135M-Instruct from its GGUF, the first N items of ../shared's HellaSwag file.
# Prints both runs' acc and acc_norm and the share of items predicted alike (the bar: 99%, bf16).
# usage: bash scripts/hellaswag_check.sh GGUF [N (default 1000)] [WORK (default /tmp/hellaswag_check)] [ITEMS]
# ITEMS: the HellaSwag file (default ../shared/data/hellaswag/hellaswag_val_full.txt.bz2; the official
# hellaswag_val.jsonl works too).
# Needs a GPU, torch, transformers, gguf, tokenizers, numpy; builds train_llama_fp8 if missing.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -x .venv/bin/python3 ] && PATH="$PWD/.venv/bin:$PATH" # python3: .venv's, with llama_fp8 (make venv), when made
gguf=${1:?usage: bash scripts/hellaswag_check.sh GGUF [N] [WORK] [ITEMS]}
n=${2:-1000}
work=${3:-/tmp/hellaswag_check}
data=${4:-../shared/data/hellaswag/hellaswag_val_full.txt.bz2}
mkdir -p "$work"
[ -x train_llama_fp8 ] || make -j train_llama_fp8
python3 scripts/hf_import.py "$gguf" "$work/smollm2.bin"
python3 dev/data/prepare_hellaswag.py --tokenizer "$work/smollm2_hf_tokenizer" --out "$work/hs.bin" --max_items "$n" --force "$data"
for prec in bf16 fp8; do
    ./train_llama_fp8 -init_from "$work/smollm2.bin" -tok "$work/smollm2_tokenizer.bin" -i synthetic -j '' -x 0 -s 0 \
        -b 16 -t 512 -precision "$prec" -hs "$work/hs.bin" -hs_preds "$work/ours_$prec.txt" | tee "$work/ours_$prec.log"
done
python3 dev/reference/hellaswag_hf.py --model "$gguf" --eval "$work/hs.bin" --out "$work/hf.txt" --compare "$work/ours_bf16.txt"
echo "fp8 against transformers (no bar: fp8 noise):"
python3 scripts/compare_hellaswag.py "$work/hf.txt" "$work/ours_fp8.txt" --name "ours fp8"
