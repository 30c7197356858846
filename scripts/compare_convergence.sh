#!/usr/bin/env bash
# Trains the same model from the same initial weights and data order in bf16 and in fp8 (delayed
# scaling; with --current also fp8 with current scaling), then plots and tabulates the losses.
#
#   scripts/compare_convergence.sh [options] -- [trainer flags]
#   e.g. scripts/compare_convergence.sh --out conv125m -- -e 125m -i 'data/gutenberg_llama2_train_*.bin' \
#            -j data/gutenberg_llama2_val.bin -b 16 -t 1024 -d 16384 -x 1500 -v 100 -m 20
#
# Every run gets the same trainer flags (so the same seed, init and data order) plus -o OUT/<run>
# and -precision; the fp8 runs also get -fp8_log N, -fp8_recipe and --fp8-args (fp8-only flags, e.g.
# '-fp8_lm_head 1', which bf16 refuses: bf16 against fp8 with that option). Run it from the repository root
# when the flags use the trainer's relative default paths (data/...).
# Writes into OUT: bf16/, fp8/, fp8_current/ (each: main.log, fp8.log, console.log, checkpoint,
# flags.txt, and DONE once the run finished), loss.png, fp8_scales.png and fp8_health.png
# (fp8_current_*.png), summary.md (with each fp8 run's tensors of most underflow and saturation).
# --eval-bf16 also evaluates each fp8 run's final weights (its last checkpoint) in bf16, with the same
# val data (and -hs): OUT/<run>/bf16_eval.log, a row of the summary. The fp8 run's own val loss is
# measured through fp8's forward, so it holds fp8's rounding at inference as well as what fp8 did to
# training; the bf16 evaluation leaves the first out, as a model exported to bf16 would run.
# Exit status: 0 all runs finished and each fp8 run's final val loss is within --threshold of
# bf16's; 1 an fp8 run is worse than that (or has no finite val loss); 2 bad usage; 3 a run crashed
# or the comparison could not be made.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo_dir=$(dirname "$script_dir")
# python3: .venv's, with llama_fp8 (make venv), when made
[ -x "$repo_dir"/.venv/bin/python3 ] && PATH="$repo_dir/.venv/bin:$PATH"

usage() {
    cat <<EOF
usage: $0 [options] -- [train_llama_fp8 flags]
  --out DIR          output folder (default convergence)
  --current          also train fp8 with -fp8_recipe current
  --threshold X      fail when an fp8 run's final val loss exceeds bf16's by more than X, relative
                     (default 0.01 = 1%)
  --skip-existing    reuse runs that finished before (OUT/<run>/DONE) with the same flags
  --fp8-log N        -fp8_log for the fp8 runs (default 10; 0: no fp8.log, no scale or health plot)
  --fp8-args 'FLAGS' more trainer flags for the fp8 runs only, e.g. '-fp8_lm_head 1' or '-fp8_margin 1'
                     (split at spaces, flag/value pairs)
  --smooth K         train-loss smoothing (trailing mean over K steps) in loss.png (default 20)
  --bin PATH         trainer binary (default: train_llama_fp8 in the repository; built with make if missing)
  --python PATH      python with matplotlib for the plots (default: \$PYTHON or python3, .venv's when made)
  --eval-bf16        also evaluate each fp8 run's final weights in bf16 (-init_from its last checkpoint, -x 0)
  --quiet            trainer output only to OUT/<run>/console.log, not also to the terminal
  -h, --help         this help
Not allowed after -- or in --fp8-args: -o, -precision, -fp8_recipe, -fp8_log, -y (the script sets
them per run).
EOF
}

die_usage() { echo "compare_convergence.sh: $*" >&2; echo "(see $0 --help)" >&2; exit 2; }

out=convergence
current=0
threshold=0.01
skip_existing=0
fp8_log=10
smooth=20
bin="$repo_dir/train_llama_fp8"
bin_given=0
python=${PYTHON:-python3}
quiet=0
eval_bf16=0
trainer_args=()
fp8_args=()

while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || die_usage "--out needs a value"; out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        --current) current=1; shift ;;
        --threshold) [ $# -ge 2 ] || die_usage "--threshold needs a value"; threshold=$2; shift 2 ;;
        --threshold=*) threshold=${1#--threshold=}; shift ;;
        --skip-existing) skip_existing=1; shift ;;
        --fp8-log) [ $# -ge 2 ] || die_usage "--fp8-log needs a value"; fp8_log=$2; shift 2 ;;
        --fp8-log=*) fp8_log=${1#--fp8-log=}; shift ;;
        --fp8-args) [ $# -ge 2 ] || die_usage "--fp8-args needs a value"; read -ra fp8_args <<<"$2"; shift 2 ;;
        --fp8-args=*) read -ra fp8_args <<<"${1#--fp8-args=}"; shift ;;
        --smooth) [ $# -ge 2 ] || die_usage "--smooth needs a value"; smooth=$2; shift 2 ;;
        --smooth=*) smooth=${1#--smooth=}; shift ;;
        --bin) [ $# -ge 2 ] || die_usage "--bin needs a value"; bin=$2; bin_given=1; shift 2 ;;
        --bin=*) bin=${1#--bin=}; bin_given=1; shift ;;
        --python) [ $# -ge 2 ] || die_usage "--python needs a value"; python=$2; shift 2 ;;
        --python=*) python=${1#--python=}; shift ;;
        --quiet) quiet=1; shift ;;
        --eval-bf16) eval_bf16=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; trainer_args=("$@"); break ;;
        *) die_usage "unknown option '$1' (trainer flags go after --)" ;;
    esac
done

[ -n "$out" ] || die_usage "--out must not be empty"
[[ $threshold =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] || die_usage "--threshold wants a non-negative number, got '$threshold'"
[[ $fp8_log =~ ^[0-9]+$ ]] || die_usage "--fp8-log wants a non-negative integer, got '$fp8_log'"
if ! [[ $smooth =~ ^[0-9]+$ ]] || [ "$smooth" -lt 1 ]; then die_usage "--smooth wants a positive integer, got '$smooth'"; fi
# flags that must differ per run (or would break the comparison) are the script's to set; the
# trainer's parser reads flag/value pairs, so only even positions are flags
check_flags() { # WHERE FLAG...: refuses what the script sets and an odd count
    local where=$1; shift
    local a=("$@") i
    for ((i = 0; i < ${#a[@]}; i += 2)); do
        case "${a[i]}" in
            -o) die_usage "don't pass -o ($where): each run logs into --out DIR/<run>" ;;
            -precision) die_usage "don't pass -precision ($where): the script runs bf16 and fp8" ;;
            -fp8_recipe) die_usage "don't pass -fp8_recipe ($where): the fp8 run is delayed scaling; --current adds a current-scaling run" ;;
            -fp8_log) die_usage "don't pass -fp8_log ($where): use --fp8-log N" ;;
            -y) die_usage "don't pass -y ($where): runs start from step 0 (use --skip-existing to reuse finished runs)" ;;
            -h|--help) die_usage "for the trainer's flags run: $bin -h" ;;
        esac
    done
    [ $(( ${#a[@]} % 2 )) -eq 0 ] || die_usage "trainer flags come in pairs (-flag value); got an odd number $where: ${a[*]}"
}
check_flags "after --" "${trainer_args[@]}"
check_flags "in --fp8-args" "${fp8_args[@]}"

if [ ! -x "$bin" ]; then
    if [ "$bin_given" = 1 ]; then
        echo "compare_convergence.sh: trainer '$bin' not found or not executable" >&2; exit 2
    fi
    echo "== $bin not built: make train_llama_fp8"
    make -C "$repo_dir" train_llama_fp8 || { echo "compare_convergence.sh: building the trainer failed" >&2; exit 3; }
fi

mkdir -p -- "$out"

runs=(bf16 fp8)
[ "$current" = 1 ] && runs+=(fp8_current)

run_flags() { # the per-run flags, minus -o
    case "$1" in
        bf16) printf '%s\n' -precision bf16 ;;
        fp8) printf '%s\n' -precision fp8 -fp8_recipe delayed -fp8_log "$fp8_log" "${fp8_args[@]}" ;;
        fp8_current) printf '%s\n' -precision fp8 -fp8_recipe current -fp8_log "$fp8_log" "${fp8_args[@]}" ;;
    esac
}

finished=()
failed=()
for run in "${runs[@]}"; do
    dir="$out/$run"
    mapfile -t extra < <(run_flags "$run")
    args=("${trainer_args[@]}" "${extra[@]}")
    flags_now=$(printf '%q ' "${args[@]}")
    if [ "$skip_existing" = 1 ] && [ -f "$dir/DONE" ]; then
        flags_then=$(cat "$dir/flags.txt" 2>/dev/null || true)
        if [ "$flags_then" = "$flags_now" ]; then
            echo "== $run: reusing the finished run in $dir"
            finished+=("$run")
            continue
        fi
        echo "compare_convergence.sh: $dir holds a finished run with other flags:" >&2
        echo "  then: $flags_then" >&2
        echo "  now:  $flags_now" >&2
        echo "  use another --out, or delete $dir to re-run it" >&2
        exit 2
    fi
    mkdir -p -- "$dir"
    # an unfinished run starts over: its checkpoints go too (the trainer refuses a fresh run beside another run's)
    rm -f -- "$dir/DONE" "$dir/main.log" "$dir/fp8.log" "$dir/metrics.jsonl" "$dir/run_id" "$dir"/model_*.bin "$dir"/state_*.bin "$dir"/done_*
    printf '%s' "$flags_now" >"$dir/flags.txt"
    echo "== $run: $bin $flags_now-o $(printf '%q' "$dir")"
    set +e
    if [ "$quiet" = 1 ]; then
        "$bin" "${args[@]}" -o "$dir" >"$dir/console.log" 2>&1
        rc=$?
    else
        "$bin" "${args[@]}" -o "$dir" 2>&1 | tee "$dir/console.log"
        rc=${PIPESTATUS[0]}
    fi
    set -e
    if [ "$rc" -eq 130 ] || [ "$rc" -eq 143 ]; then
        echo "compare_convergence.sh: $run interrupted (exit $rc); stopping" >&2
        exit "$rc"
    fi
    if [ "$rc" -ne 0 ]; then
        echo "" >&2
        echo "compare_convergence.sh: RUN FAILED: $run exited with status $rc. Last lines of $dir/console.log:" >&2
        tail -n 15 -- "$dir/console.log" | sed 's/^/  | /' >&2
        failed+=("$run")
        continue
    fi
    if ! grep -q '^s:[0-9]* trl:' "$dir/main.log" 2>/dev/null; then
        echo "compare_convergence.sh: RUN FAILED: $run exited 0 but wrote no training steps to $dir/main.log" >&2
        failed+=("$run")
        continue
    fi
    date -u '+%Y-%m-%dT%H:%M:%SZ' >"$dir/DONE"
    finished+=("$run")
done

if [ ${#finished[@]} -eq 0 ]; then
    echo "compare_convergence.sh: every run failed (${failed[*]}); nothing to compare" >&2
    exit 3
fi

# --eval-bf16: the trainer flags without those of the model's start and shape (the checkpoint is the
# start and holds the shape), the step count and the fp8 ones (bf16 refuses them)
eval_flags() {
    local i
    for ((i = 0; i < ${#trainer_args[@]}; i += 2)); do
        case "${trainer_args[i]}" in
            -e|-init_from|-V|-L|-C|-NH|-NKV|-FF|-rope_theta|-x|-fp8_*) ;;
            *) printf '%s\n' "${trainer_args[i]}" "${trainer_args[i + 1]}" ;;
        esac
    done
}
if [ "$eval_bf16" = 1 ]; then
    mapfile -t eargs < <(eval_flags)
    for run in "${finished[@]}"; do
        case "$run" in fp8*) ;; *) continue ;; esac
        rm -f -- "$out/$run/bf16_eval.log"
        model=$(find "$out/$run" -maxdepth 1 -name 'model_*.bin' | sort | tail -n 1)
        if [ -z "$model" ]; then
            echo "compare_convergence.sh: WARNING: $run wrote no checkpoint (model_*.bin): its weights are not evaluated in bf16" >&2
            continue
        fi
        echo "== $run's weights in bf16: $bin $(printf '%q ' "${eargs[@]}")-init_from $model -precision bf16 -x 0"
        "$bin" "${eargs[@]}" -init_from "$model" -precision bf16 -x 0 >"$out/$run/bf16_eval.log" 2>&1 \
            || echo "compare_convergence.sh: WARNING: evaluating $run's weights in bf16 failed (see $out/$run/bf16_eval.log)" >&2
    done
fi

# plots: a missing matplotlib costs the pictures, not the comparison
plot_failed=()
rm -f -- "$out/loss.png" "$out"/fp8*_scales.png "$out"/fp8*_health.png
logs=()
for run in "${finished[@]}"; do logs+=("$out/$run/main.log"); done
"$python" "$script_dir/plot_log.py" "${logs[@]}" --labels "${finished[@]}" --smooth "$smooth" \
    --threshold "$threshold" --title "convergence: ${finished[*]} ($out)" --out "$out/loss.png" \
    || plot_failed+=(loss.png)
for run in "${finished[@]}"; do
    case "$run" in fp8*) ;; *) continue ;; esac
    [ -s "$out/$run/fp8.log" ] || continue
    "$python" "$script_dir/plot_fp8.py" "$out/$run/fp8.log" --title "fp8 scales: $run ($out)" \
        --out "$out/${run}_scales.png" || plot_failed+=("${run}_scales.png")
    # an fp8.log of a trainer before the fp8 health counts has none: the summary notes it
    grep -q ' x_under:' "$out/$run/fp8.log" || continue
    "$python" "$script_dir/plot_fp8.py" "$out/$run/fp8.log" --health --title "fp8 health: $run ($out)" \
        --out "$out/${run}_health.png" || plot_failed+=("${run}_health.png")
done

# summary table, fp8 health and the threshold check (scripts/convergence_summary.py: standard
# library only, so it runs where matplotlib is missing)
rm -f -- "$out/summary.md"
set +e
"$python" "$script_dir/convergence_summary.py" "$out" "$threshold" "$(printf '%q ' "${trainer_args[@]}")" "${fp8_args[*]}" "${failed[*]}" "${finished[@]}"
gate=$?
set -e

if [ -f "$out/summary.md" ]; then echo "summary written to $out/summary.md"; fi
if [ ${#plot_failed[@]} -gt 0 ]; then
    echo "compare_convergence.sh: WARNING: plotting failed for: ${plot_failed[*]} (needs matplotlib: --python /path/to/python)" >&2
fi
if [ ${#failed[@]} -gt 0 ]; then
    echo "compare_convergence.sh: FAILED: run(s) crashed: ${failed[*]} (see $out/<run>/console.log)" >&2
    exit 3
fi
case "$gate" in
    0) ;;
    4) echo "compare_convergence.sh: FAILED: fp8 final val loss worse than bf16's by more than the threshold ($threshold)" >&2
       exit 1 ;;
    5) echo "compare_convergence.sh: FAILED: could not compare (see the summary above)" >&2
       exit 3 ;;
    *) echo "compare_convergence.sh: FAILED: writing the summary failed (exit $gate of $python)" >&2
       exit 3 ;;
esac
echo "compare_convergence.sh: OK"
