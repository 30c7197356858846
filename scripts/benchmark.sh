#!/usr/bin/env bash
# Speed benchmark on one GPU: our trainer (bf16 and fp8) against the PyTorch reference
# (dev/reference/bench_torch.py, bf16 and fp8 tensorwise, torch.compile) and against transformers'
# own training step (dev/reference/bench_hf.py: LlamaForCausalLM, sdpa, fused AdamW, torch.compile:
# the peer a fine-tuner would otherwise use) on the same model, B and T.
# Builds the trainer if needed, runs each system as its own process (one after the other, so no
# memory is shared or leaked between them), then prints one markdown table and writes it to --out.
# A run that fails, runs out of memory or times out shows as such in the table; the others still run.
#
#   bash scripts/benchmark.sh                                  # llama2-7b, B 2, T 4096 (docs/baselines.md's row)
#   bash scripts/benchmark.sh --model llama3-8b --B 1 --T 8192 --trainer-args '-r 1' \
#       --systems ours-bf16,ours-fp8,torch-bf16,torch-fp8     # the README's second headline row (fp32
#                                                            # moments, ours-*-fp32m, do not fit at 8B)
#   bash scripts/benchmark.sh --model 1b --B 4 --T 2048 --steps 20 --out /tmp/b.md
#   bash scripts/benchmark.sh --systems ours-fp8,ours-fp8-current,torch-fp8
#   bash scripts/benchmark.sh --model smollm2-135m --B 16 --T 2048 --systems ours-bf16,ours-fp8,hf-bf16
#   bash scripts/benchmark.sh --table-only                     # rebuild the table from the logs
#
# Options (environment variable in brackets; the flag wins):
#   --model NAME      tiny, 125m, 1b, llama2-7b, llama3-8b, smollm2-135m [BENCH_MODEL, default llama2-7b]
#                     (smollm2-135m has tied embeddings; llama3.1-8b and llama3.2-1b, whose RoPE
#                     scaling PyTorch's and transformers' scripts lack, run ours only)
#   --B N, --T N      micro-batch (sequences) and sequence length       [BENCH_B 2, BENCH_T 4096]
#   --accum N         micro-steps per optimizer step (gradient accumulation; ours: -d B*T*N, PyTorch
#                     and transformers: --accum N), the global batch of a real run [BENCH_ACCUM, default 1]
#   --steps N         timed steps per run; the median is reported       [BENCH_STEPS, default 10]
#   --warmup N        untimed PyTorch and transformers steps first      [BENCH_WARMUP, default 5]
#                     (torch.compile compiles there); our trainer always leaves out its first 3
#   --systems LIST    comma-separated, in table order, from ours-bf16 ours-fp8 ours-fp8-current
#                     (our trainer with its default bf16 AdamW moments), ours-bf16-fp32m
#                     ours-fp8-fp32m (the same with -adam_moments fp32), torch-bf16 torch-fp8,
#                     hf-bf16 (transformers, bf16 weights and AdamW state) and hf-amp (transformers,
#                     fp32 master weights, forward under bf16 autocast: Trainer(bf16=True) on fp32)
#                     [BENCH_SYSTEMS, default ours-bf16,ours-fp8,ours-fp8-fp32m,torch-bf16,torch-fp8]
#   --out FILE        where the table goes                              [BENCH_OUT, default bench_results.md]
#   --logdir DIR      one log per system, DIR/<system>.log              [BENCH_LOGDIR, default log_bench]
#   --timeout S       kill a run after S seconds (0: never)             [BENCH_TIMEOUT, default 0]
#   --trainer-args S  extra flags for ./train_llama_fp8, e.g. '-r 1'    [BENCH_TRAINER_ARGS]
#   --torch-args S    extra flags for bench_torch.py, e.g. '--no-compile' [BENCH_TORCH_ARGS]
#   --hf-args S       extra flags for bench_hf.py, e.g. '--no-compile'  [BENCH_HF_ARGS]
#   --table-only      run nothing; tabulate the existing logs of --systems
#   PYTHON=...        the Python with PyTorch (and transformers for hf-*; default python3, .venv's when made)
# Relative paths (--out, --logdir) are taken from the repository root. The table's speedup column is
# against torch-bf16, or hf-bf16 where torch-bf16 gave no number.
# Exit status: 0 when every system produced a number, 1 otherwise (the table is written either way).
set -u
cd "$(dirname "$0")/.." || exit 2
[ -x .venv/bin/python3 ] && PATH="$PWD/.venv/bin:$PATH" # python3: .venv's, with llama_fp8 (make venv), when made

MODEL=${BENCH_MODEL:-llama2-7b}
BATCH=${BENCH_B:-2}
SEQ=${BENCH_T:-4096}
ACCUM=${BENCH_ACCUM:-1}
STEPS=${BENCH_STEPS:-10}
WARMUP=${BENCH_WARMUP:-5}
SYSTEMS=${BENCH_SYSTEMS:-ours-bf16,ours-fp8,ours-fp8-fp32m,torch-bf16,torch-fp8}
OUTFILE=${BENCH_OUT:-bench_results.md}
LOGDIR=${BENCH_LOGDIR:-log_bench}
TIMEOUT=${BENCH_TIMEOUT:-0}
TRAINER_ARGS=${BENCH_TRAINER_ARGS:-}
TORCH_ARGS=${BENCH_TORCH_ARGS:-}
HF_ARGS=${BENCH_HF_ARGS:-}
PYTHON=${PYTHON:-python3}
TABLE_ONLY=0

usage() { sed -n '2,/^set -u/p' "$0" | grep '^#' | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
    case $1 in
        -h|--help) usage; exit 0 ;;
        --table-only) TABLE_ONLY=1; shift; continue ;;
    esac
    [ $# -ge 2 ] || { echo "option $1 needs a value (see --help)" >&2; exit 2; }
    case $1 in
        --model) MODEL=$2 ;;
        --B|-b) BATCH=$2 ;;
        --T|-t) SEQ=$2 ;;
        --accum) ACCUM=$2 ;;
        --steps) STEPS=$2 ;;
        --warmup) WARMUP=$2 ;;
        --systems) SYSTEMS=$2 ;;
        --out) OUTFILE=$2 ;;
        --logdir) LOGDIR=$2 ;;
        --timeout) TIMEOUT=$2 ;;
        --trainer-args) TRAINER_ARGS=$2 ;;
        --torch-args) TORCH_ARGS=$2 ;;
        --hf-args) HF_ARGS=$2 ;;
        *) echo "unknown option '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift 2
done
for v in BATCH SEQ STEPS WARMUP TIMEOUT ACCUM; do
    [[ ${!v} =~ ^[0-9]+$ ]] || { echo "$v must be a non-negative integer, got '${!v}'" >&2; exit 2; }
done
[ "$ACCUM" -ge 1 ] || { echo "--accum must be at least 1, got $ACCUM" >&2; exit 2; }
IFS=, read -r -a SYS_LIST <<<"$SYSTEMS"
for s in "${SYS_LIST[@]}"; do
    case $s in ours-bf16|ours-fp8|ours-fp8-current|ours-bf16-fp32m|ours-fp8-fp32m|torch-bf16|torch-fp8|hf-bf16|hf-amp) ;;
        *) echo "unknown system '$s' (ours-bf16 ours-fp8 ours-fp8-current ours-bf16-fp32m ours-fp8-fp32m torch-bf16 torch-fp8 hf-bf16 hf-amp)" >&2; exit 2 ;;
    esac
done
# the table (and the PyTorch and transformers systems) need the llama_fp8 package: checked before any run
# holds the GPU for minutes (without the current folder on its path: the checkout's own llama_fp8/ folder is
# no install, and the tools, run as scripts, would not see it)
if ! "$PYTHON" -c 'import sys; sys.path.remove(""); import llama_fp8' 2>/dev/null; then
    echo "error: $(command -v "$PYTHON" || echo "$PYTHON") has no llama_fp8 package, which the table needs:" \
         "run make venv (benchmark.sh then uses .venv/bin/python3) or name a Python that has it with PYTHON=" >&2
    exit 2
fi
mkdir -p "$LOGDIR"

# run_one NAME COMMAND...: runs the command, its output to the screen and to LOGDIR/NAME.log, and
# appends "BENCH_EXIT rc" to the log (the table reads the logs, never this shell's state).
run_one() {
    local name=$1; shift
    local log="$LOGDIR/$name.log"
    [ "$TIMEOUT" -gt 0 ] && set -- timeout -k 30 "$TIMEOUT" "$@"
    echo
    local cmd; cmd=$(printf '%q ' "$@")   # quoted, so empty arguments show as ''
    echo "=== $name: $cmd"
    echo "BENCH_CMD $cmd" >"$log"
    "$@" 2>&1 | tee -a "$log"
    echo "BENCH_EXIT ${PIPESTATUS[0]}" >>"$log"
}

# While each system runs, nvidia-smi samples the GPU every 250 ms into LOGDIR/NAME.smi.csv
# (utilization, SM clock, power, clock-limit reasons): the table reports the clock and power while
# the GPU is busy, since at its power cap the clock, not only the kernels, sets the speed.
SAMPLER=""
start_sampler() {
    command -v nvidia-smi >/dev/null || return 0
    local dev=${CUDA_VISIBLE_DEVICES:-0}
    nvidia-smi -i "${dev%%,*}" --query-gpu=timestamp,utilization.gpu,clocks.sm,power.draw,clocks_event_reasons.active         --format=csv,noheader,nounits -lms 250 >"$LOGDIR/$1.smi.csv" 2>/dev/null &
    SAMPLER=$!
}
stop_sampler() {
    [ -n "$SAMPLER" ] || return 0
    kill "$SAMPLER" 2>/dev/null
    wait "$SAMPLER" 2>/dev/null
    SAMPLER=""
}

if [ "$TABLE_ONLY" = 0 ]; then
    if ! nvidia-smi -L >/dev/null 2>&1 && [ "${BENCH_ALLOW_NO_GPU:-0}" != 1 ]; then
        echo "no NVIDIA GPU answers nvidia-smi: this benchmark needs one (BENCH_ALLOW_NO_GPU=1 runs anyway)" >&2
        exit 2
    fi
    echo "benchmark: model $MODEL, B $BATCH, T $SEQ, $STEPS timed steps | systems: ${SYS_LIST[*]} | logs in $LOGDIR/"
    built=unknown
    LINEBUF=""   # line-buffered trainer output, so a crash still leaves its last lines in the log
    command -v stdbuf >/dev/null && LINEBUF="stdbuf -oL -eL"
    for s in "${SYS_LIST[@]}"; do
        case $s in
            ours-*)
                if [ "$built" = unknown ]; then
                    echo "=== building train_llama_fp8 (make train_llama_fp8)"
                    if make train_llama_fp8; then built=yes; else built=no; fi
                fi
                if [ "$built" = no ]; then
                    printf 'BENCH_CMD make train_llama_fp8\nerror: building train_llama_fp8 failed (run make train_llama_fp8)\nBENCH_EXIT 1\n' >"$LOGDIR/$s.log"
                    continue
                fi
                prec=${s#ours-}; flags=""
                [ "$prec" = fp8-current ] && { prec=fp8; flags="-fp8_recipe current"; }
                case $prec in *-fp32m) prec=${prec%-fp32m}; flags="-adam_moments fp32" ;; esac
                # no logs, checkpoints, val, samples or tokenizer (so V stays the preset's); the
                # trainer's median leaves out its first 3 steps, so run 3 more than STEPS.
                start_sampler "$s"
                # shellcheck disable=SC2086  # flags and TRAINER_ARGS are split on spaces on purpose
                run_one "$s" $LINEBUF ./train_llama_fp8 -e "$MODEL" -b "$BATCH" -t "$SEQ" -d $((BATCH * SEQ * ACCUM)) \
                    -x $((STEPS + 3)) -precision "$prec" $flags -o '' -j '' -tok '' -v 0 -m 0 -s 0 $TRAINER_ARGS
                stop_sampler
                ;;
            torch-*)
                start_sampler "$s"
                # shellcheck disable=SC2086
                run_one "$s" "$PYTHON" -u dev/reference/bench_torch.py --model "$MODEL" --B "$BATCH" \
                    --T "$SEQ" --accum "$ACCUM" --steps "$STEPS" --warmup "$WARMUP" --precision "${s#torch-}" \
                    $TORCH_ARGS
                stop_sampler
                ;;
            hf-*)
                weights=bf16; [ "$s" = hf-amp ] && weights=fp32
                start_sampler "$s"
                # shellcheck disable=SC2086
                run_one "$s" "$PYTHON" -u dev/reference/bench_hf.py --model "$MODEL" --B "$BATCH" \
                    --T "$SEQ" --accum "$ACCUM" --steps "$STEPS" --warmup "$WARMUP" --weights "$weights" $HF_ARGS
                stop_sampler
                ;;
        esac
    done
    echo
fi

# The table, from the logs.
"$PYTHON" scripts/benchmark_table.py "$LOGDIR" "$OUTFILE" "$SYSTEMS" "$MODEL" "$BATCH" "$SEQ" "$STEPS" "$WARMUP" \
    "$TRAINER_ARGS" "$TORCH_ARGS" "$HF_ARGS" "$ACCUM"
