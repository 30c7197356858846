#!/usr/bin/env bash
# Runs scripts/compare_convergence.sh once per seed (bf16 and fp8 from the same initial weights and
# data order, for each of several initial weights), then tabulates them in DIR/seeds.md.
#
#   scripts/convergence_seeds.sh [--seeds 1337,0,1,2] [--out DIR] [--compare REF] [options] -- [trainer flags]
#   e.g. scripts/convergence_seeds.sh --out conv125m_seeds -- -e 125m -i 'data/gutenberg_llama2_train_*.bin' \
#            -j data/gutenberg_llama2_val.bin -b 16 -t 1024 -d 16384 -x 1500 -v 100 -m 10
#
# Seed N's runs go into DIR/seed<N>/ (compare_convergence.sh's bf16/, fp8/, loss.png, summary.md),
# with the same trainer flags plus -seed N. DIR/flags.txt keeps the flags and DIR/seeds.md (written
# by scripts/convergence_seeds.py) has, per seed, bf16's and fp8's val loss at the last val step,
# their relative difference and compare_convergence.sh's verdict; the mean and sample standard
# deviation of the differences; bf16's spread across the seeds. --compare REF (an earlier output of
# this script, e.g. the same seeds with other -adam_moments) adds this run's val against REF's, per
# seed and on average; REF's logs are checked before anything trains.
# Exit status: 0 every seed's runs finished (whatever their verdict: it is in the table); 2 bad usage
# (here or in compare_convergence.sh, e.g. --skip-existing with other flags); 3 a run crashed (the
# other seeds still run and the table is still written) or the table could not be made.
set -euo pipefail

script_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# python3: .venv's, with llama_fp8 (make venv), when made
[ -x "$script_dir"/../.venv/bin/python3 ] && PATH="$script_dir/../.venv/bin:$PATH"

usage() {
    cat <<EOF
usage: $0 [options] -- [train_llama_fp8 flags]
  --seeds LIST       comma-separated seeds, each run as -seed N (default 1337,0,1,2; 1337 is the trainer's default)
  --out DIR          output folder: DIR/seed<N>/ per seed, DIR/seeds.md (default convergence_seeds)
  --compare REF      an earlier output of this script (the same seeds): this run's val loss against REF's
  --skip-existing    reuse runs that finished before with the same flags (compare_convergence.sh's);
                     with every run finished nothing trains: the tables are made again
  --quiet            trainer output only to the runs' console.log (compare_convergence.sh's)
  --threshold X      compare_convergence.sh's verdict threshold (default 0.01 = 1%)
  --fp8-args 'FLAGS' trainer flags for the fp8 runs only (compare_convergence.sh's), e.g. '-fp8_lm_head 1';
                     kept in DIR/fp8_args.txt
  --bin PATH         trainer binary (compare_convergence.sh's --bin)
  --python PATH      python for the plots and the tables (default: \$PYTHON or python3, .venv's when made)
  -h, --help         this help
Not allowed after --: -seed (set per seed) and what compare_convergence.sh sets per run (-o,
-precision, -fp8_recipe, -fp8_log, -y).
EOF
}

die_usage() { echo "convergence_seeds.sh: $*" >&2; echo "(see $0 --help)" >&2; exit 2; }

seeds_arg=1337,0,1,2
out=convergence_seeds
compare=
python=${PYTHON:-python3}
cc_opts=()   # passed through to compare_convergence.sh
threshold=0.01
fp8_args=
trainer_args=()

while [ $# -gt 0 ]; do
    case "$1" in
        --seeds) [ $# -ge 2 ] || die_usage "--seeds needs a value"; seeds_arg=$2; shift 2 ;;
        --seeds=*) seeds_arg=${1#--seeds=}; shift ;;
        --out) [ $# -ge 2 ] || die_usage "--out needs a value"; out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        --compare) [ $# -ge 2 ] || die_usage "--compare needs a value"; compare=$2; shift 2 ;;
        --compare=*) compare=${1#--compare=}; shift ;;
        --skip-existing|--quiet) cc_opts+=("$1"); shift ;;
        --threshold) [ $# -ge 2 ] || die_usage "--threshold needs a value"; threshold=$2; shift 2 ;;
        --threshold=*) threshold=${1#--threshold=}; shift ;;
        --bin) [ $# -ge 2 ] || die_usage "--bin needs a value"; cc_opts+=(--bin "$2"); shift 2 ;;
        --bin=*) cc_opts+=(--bin "${1#--bin=}"); shift ;;
        --fp8-args) [ $# -ge 2 ] || die_usage "--fp8-args needs a value"; fp8_args=$2; shift 2 ;;
        --fp8-args=*) fp8_args=${1#--fp8-args=}; shift ;;
        --python) [ $# -ge 2 ] || die_usage "--python needs a value"; python=$2; shift 2 ;;
        --python=*) python=${1#--python=}; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; trainer_args=("$@"); break ;;
        *) die_usage "unknown option '$1' (trainer flags go after --)" ;;
    esac
done

[ -n "$out" ] || die_usage "--out must not be empty"
[[ $seeds_arg =~ ^[0-9]+(,[0-9]+)*$ ]] || die_usage "--seeds wants comma-separated non-negative integers, got '$seeds_arg'"
IFS=, read -ra seeds <<<"$seeds_arg"
declare -A seen=()
for seed in "${seeds[@]}"; do
    [ -z "${seen[$seed]:-}" ] || die_usage "--seeds lists $seed twice"
    seen[$seed]=1
done
[[ $threshold =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] || die_usage "--threshold wants a non-negative number, got '$threshold'"
# the trainer reads flag/value pairs: only even positions are flags (compare_convergence.sh checks the rest)
for ((i = 0; i < ${#trainer_args[@]}; i += 2)); do
    [ "${trainer_args[i]}" != -seed ] || die_usage "don't pass -seed: each seed of --seeds is run as -seed N"
done
if [ -n "$compare" ]; then
    [ -d "$compare" ] || die_usage "--compare $compare: not a folder (an earlier convergence_seeds.sh --out DIR)"
    if [ -d "$out" ] && [ "$(cd "$compare" && pwd -P)" = "$(cd "$out" && pwd -P)" ]; then
        die_usage "--compare $compare is the --out folder itself"
    fi
    # before anything trains: REF must have every seed's logs
    "$python" "$script_dir/convergence_seeds.py" --check-compare "$compare" --seeds "$seeds_arg" \
        || die_usage "--compare $compare lacks what is named above (it must hold the finished runs seed<N>/bf16 and seed<N>/fp8, each with its DONE, of every seed of --seeds $seeds_arg)"
fi

flags=
if [ ${#trainer_args[@]} -gt 0 ]; then flags=$(printf '%q ' "${trainer_args[@]}"); flags=${flags% }; fi
mkdir -p -- "$out"

status=()
crashed=()
for seed in "${seeds[@]}"; do
    echo "== seed $seed: compare_convergence.sh into $out/seed$seed"
    set +e
    bash "$script_dir/compare_convergence.sh" "${cc_opts[@]}" --threshold "$threshold" --python "$python" \
        --fp8-args "$fp8_args" --out "$out/seed$seed" -- "${trainer_args[@]}" -seed "$seed"
    rc=$?
    set -e
    case "$rc" in
        0|1) ;;   # finished; 1: fp8 over the threshold, which the table reports
        2) echo "convergence_seeds.sh: compare_convergence.sh refused seed $seed's runs (bad usage, above); stopping" >&2
           exit 2 ;;
        130|143) echo "convergence_seeds.sh: interrupted at seed $seed (exit $rc); stopping" >&2
           exit "$rc" ;;
        *) echo "convergence_seeds.sh: seed $seed: compare_convergence.sh exited $rc (a run crashed, or no comparison could be made); going on with the other seeds" >&2
           crashed+=("$seed") ;;
    esac
    status+=("$rc")
done

for f in flags fp8_args; do
    tmp_flags=$(mktemp "$out/.$f.XXXXXX")
    printf '%s\n' "${!f}" >"$tmp_flags"
    mv -f -- "$tmp_flags" "$out/$f.txt"
done

status_arg=$(IFS=,; echo "${status[*]}")
table_args=(--out "$out" --seeds "$seeds_arg" --status "$status_arg" --flags "$flags" "--fp8-args=$fp8_args" --threshold "$threshold")
[ -z "$compare" ] || table_args+=(--compare "$compare")
echo "== seeds table: $out/seeds.md"
set +e
"$python" "$script_dir/convergence_seeds.py" "${table_args[@]}"
table_rc=$?
set -e
if [ "$table_rc" -ne 0 ]; then
    echo "convergence_seeds.sh: FAILED: the seeds table is missing or incomplete (the errors above; exit $table_rc of $python)" >&2
    exit 3
fi
if [ ${#crashed[@]} -gt 0 ]; then
    echo "convergence_seeds.sh: FAILED: seed(s) ${crashed[*]} had a run that crashed or no comparison (see $out/seed<N>/summary.md and <run>/console.log)" >&2
    exit 3
fi
echo "convergence_seeds.sh: OK (every seed's runs finished; verdicts in $out/seeds.md)"
