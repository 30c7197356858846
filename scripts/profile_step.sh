#!/usr/bin/env bash
# Where one training step's GPU time goes, per kernel: runs the trainer under Nsight Compute twice,
# with 1 and with 2 layers (-L), for 2 steps each, takes every kernel's duration in the last step,
# and prints a markdown table for a model of --layers layers: per kernel, the time per layer (the
# 2-layer step minus the 1-layer one), the time outside the layers (lm_head, classifier, embedding,
# AdamW of those) and the total, with the sum of all kernels.
#
#   bash scripts/profile_step.sh --layers 32 -- -e llama2-7b -b 2 -t 4096 -r 1 -precision fp8
#
# Options:
#   --layers N   layers of the model the table is for (llama2-7b and llama3-8b: 32)   [required]
#   --out DIR    where the two ncu CSVs and the table go                      [default log_profile]
#   after --     the trainer's options (-L, -x, -v, -s, -o, -j and -deterministic 1 are set by the
#                script: the 1- and 2-layer runs must pick the same GEMM algorithms, so the table
#                shows the heuristic's GEMMs and cuDNN's deterministic attention backward, not the
#                tuned GEMMs and fast backward of the default -deterministic 0)
# Needs ncu (Nsight Compute) on PATH and a GPU. Kernels run one at a time under ncu, at whatever
# clock the idle GPU gives them (--clock-control none): in training the GPU may run slower, e.g. at
# its power cap (dev/cuda/README.md), so the sum is below the measured step time.
set -u
cd "$(dirname "$0")/.." || exit 2
LAYERS=0
OUT=log_profile
while [ $# -gt 0 ]; do
    case $1 in
        --layers) LAYERS=${2:-}; shift 2 ;;
        --out) OUT=${2:-}; shift 2 ;;
        --) shift; break ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case $LAYERS in ''|*[!0-9]*|0) echo "--layers N (N >= 1) is required: the model's number of layers" >&2; exit 2 ;; esac
command -v ncu > /dev/null || { echo "ncu (Nsight Compute) not found on PATH" >&2; exit 1; }
make train_llama_fp8 > /dev/null || { echo "building train_llama_fp8 failed (run make train_llama_fp8)" >&2; exit 1; }
mkdir -p "$OUT" || exit 1
for l in 1 2; do
    echo "profiling with $l layer(s) ..."
    if ! ncu --clock-control none --metrics gpu__time_duration.sum --csv --print-units base \
        ./train_llama_fp8 "$@" -L $l -x 3 -v 0 -s 0 -o '' -j '' -deterministic 1 > "$OUT/ncu_L$l.csv" 2> "$OUT/ncu_L$l.err"; then
        echo "the profiled run failed: $OUT/ncu_L$l.csv, $OUT/ncu_L$l.err" >&2
        tail -n 5 "$OUT/ncu_L$l.csv" "$OUT/ncu_L$l.err" >&2
        exit 1
    fi
done
python3 scripts/ncu_step_table.py --layers "$LAYERS" "$OUT/ncu_L1.csv" "$OUT/ncu_L2.csv" > "$OUT/step_profile.md" || {
    tail -n 5 "$OUT/ncu_L1.err" "$OUT/ncu_L2.err" >&2; exit 1; }
cat "$OUT/step_profile.md"
