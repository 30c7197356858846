#!/usr/bin/env bash
# Proves the power of the tests: every dev/test/mutations/*.patch plants one named bug in a copy of the
# tree, and the test on its "Caught by:" line must then fail. The mutants are made and built in
# parallel, then their commands run one after another (with --cpu: in parallel too). Needs a GPU for
# the fp8 ones; a mutation caught by dev/test/test_multi_gpu.sh needs two and is reported as not run
# on one. One line per mutation, then a table: per suite (the program or script a "Caught by:" command
# runs last), how many of the repository's patches name it, how many this run tried and how many it
# caught; then "N passed, N failed". passed: caught, the command exited non-zero and its log shows a
# test failing: for ./test_llama_fp8 'FILTER' a "FAIL <test>" line of a test named by FILTER,
# otherwise a failure summary ("N passed, M failed", M > 0) or a dev/cuda program's verdict
# ("rmsnorm: FAIL (...)", "fp8_block: N FAILED", "fp8_rowwise: N passed, M failed"); a crash or a build error of the command is no catch. failed: missed (the
# command passed), not caught so, or stale (the patch does not apply exactly, no fuzz) or broken (the
# mutant does not build).
# usage: [MUTATIONS='NAME ...'] [MUTATION_SAMPLE=N [MUTATION_SEED=S]] bash dev/test/test_mutations.sh [--cpu | TEST_FILTER]
#   --cpu: only the patches whose suite needs no GPU, make test's CPU suites (dev/test/test_cpu, the
#     host-only dev/test/test_*.cu programs, dev/test/test_*.py), each run by its own command, which
#     builds what it runs. All of them is what to run before a change lands; CI runs a sample
#   MUTATIONS: run only these patches (names without .patch), e.g. the ones a change touched
#   MUTATION_SAMPLE: run only N of the chosen patches, those whose md5 of "SEED NAME" sorts first;
#     SEED is MUTATION_SEED, else today's date (UTC, YYYYMMDD), so that the sample rotates; printed
#   MUTATION_JOBS: how many mutants build (with --cpu: build and run) at a time (default: the cores)
#   TEST_FILTER: run ./test_llama_fp8 TEST_FILTER on every mutant instead of its own command (to see
#   which other tests catch it)
set -u
cd "$(dirname "$0")/../.."
root=$PWD
cpu=0 test_filter=
case "${1:-}" in
    --cpu) cpu=1 ;;
    -*) echo "usage: [MUTATIONS='NAME ...'] [MUTATION_SAMPLE=N [MUTATION_SEED=S]] bash $0 [--cpu | TEST_FILTER]"; exit 2 ;;
    *) test_filter=${1:-} ;;
esac
export MUTATIONS_SOURCE=$root # the copies have no .git: a command comparing with a git revision finds it here (same_bits.sh)
[ -x .venv/bin/python3 ] && PATH="$root/.venv/bin:$PATH" # for the commands that run a Python suite
work=$(mktemp -d /tmp/mutations.XXXXXX)
trap 'rm -rf "$work"' EXIT
all_patches=(dev/test/mutations/*.patch)
patches=("${all_patches[@]}")
if [ -n "${MUTATIONS:-}" ]; then
    patches=()
    for name in $MUTATIONS; do
        [ -f "dev/test/mutations/$name.patch" ] || { echo "MUTATIONS: no dev/test/mutations/$name.patch"; exit 2; }
        patches+=("dev/test/mutations/$name.patch")
    done
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
jobs=${MUTATION_JOBS:-$(nproc)}

caught_by() { sed -n 's/^Caught by: //p' "$1"; }

# suite_of CMD: the program or script CMD runs last ("make -s X && ./X" runs X; "python3 S.py ARGS" S.py)
suite_of() {
    local words
    read -ra words <<<"${1##*&&}"
    case ${words[0]} in python3 | bash | sh) words=("${words[@]:1}") ;; esac
    echo "${words[0]#./}"
}

# needs_no_gpu SUITE: whether SUITE is one of make test's CPU suites (run_tests.sh runs them all)
needs_no_gpu() {
    case $1 in
        dev/test/test_cpu | dev/test/test_*.py) return 0 ;;
        dev/test/test_*) [ -f "$1.cu" ] ;; # a host-only program built from dev/test/test_*.cu
        *) return 1 ;;
    esac
}

if [ "$cpu" = 1 ]; then
    chosen=()
    for p in "${patches[@]}"; do needs_no_gpu "$(suite_of "$(caught_by "$p")")" && chosen+=("$p"); done
    echo "--cpu: ${#chosen[@]} of ${#patches[@]} patches need no GPU"
    patches=("${chosen[@]}")
fi
if [ -n "${MUTATION_SAMPLE:-}" ]; then
    [[ $MUTATION_SAMPLE =~ ^[0-9]+$ ]] || { echo "MUTATION_SAMPLE: '$MUTATION_SAMPLE' is not a number of patches"; exit 2; }
    seed=${MUTATION_SEED:-$(date -u +%Y%m%d)}
    mapfile -t patches < <(for p in "${patches[@]}"; do
        echo "$(echo "$seed $(basename "$p" .patch)" | md5sum | cut -c1-32) $p"
    done | sort | head -n "$MUTATION_SAMPLE" | cut -d' ' -f2)
    echo "sample: ${#patches[@]} patches (MUTATION_SAMPLE=$MUTATION_SAMPLE), seed $seed (MUTATION_SEED=$seed repeats it)"
fi

# failed_as_expected LOG CMD: whether LOG shows a test failing, as the header says
failed_as_expected() {
    local log=$1 cmd=$2 filter
    filter=$(sed -n "s/^.*test_llama_fp8 '\([^']*\)'.*$/\1/p" <<<"$cmd")
    if [ -n "$filter" ]; then
        grep -E '^FAIL ' "$log" | grep -qF -- "$filter"
    else
        grep -qE '^([A-Za-z0-9_]+: )?[0-9]+ passed, [1-9][0-9]* failed$|^[A-Za-z0-9_]+: (FAIL|[0-9]+ FAILED)' "$log"
    fi
}

# build_targets CMD: what a mutant must have built before CMD runs: only the GPU test for a
# ./test_llama_fp8 command (or with TEST_FILTER), nothing for a CPU suite or a dev/cuda program
# (their commands build them), else (the GPU scripts) the trainer and the GPU test
build_targets() {
    if [ -n "$test_filter" ] || [[ "$1" == ./test_llama_fp8* ]]; then echo test_llama_fp8
    elif ! needs_no_gpu "$(suite_of "$1")" && [[ "$1" != *"-C dev/cuda"* ]]; then echo test_llama_fp8 train_llama_fp8; fi
}

# command_of PATCH: the command its mutant runs
command_of() {
    if [ -n "$test_filter" ]; then echo "./test_llama_fp8 '$test_filter'"; else caught_by "$1"; fi
}

# at_most_jobs: waits until fewer than $jobs background jobs run
at_most_jobs() {
    while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do wait -n; done
}

# prepare PATCH DIR: the mutant in DIR (DIR.applied once the patch applies, DIR.built once built).
# The copy hard-links one snapshot of the tree (patch writes each file it changes anew, and builds
# write new files), so a mutant costs its changed files and its build outputs only
prepare() {
    local p=$1 dir=$2 targets
    cp -al "$work/tree" "$dir"
    (cd "$dir" && patch -p1 -f -s --fuzz=0 --no-backup-if-mismatch < "$root/$p") > "$dir.patch.log" 2>&1 || return 0
    touch "$dir.applied"
    targets=$(build_targets "$(command_of "$p")")
    (cd "$dir" && { [ -z "$targets" ] || make -s -B $targets; }) > "$dir.build.log" 2>&1 && touch "$dir.built"
}

# run_mutant CMD DIR: runs CMD in the mutant; its exit status goes to DIR.rc. The mutant's root goes
# first on PYTHONPATH: .venv's llama_fp8 is an editable install of this tree's, and a mutant's
# llama_fp8/*.py must be the one its Python imports. SIGINT and SIGQUIT get their default action back:
# started as a shell's background job, this script and all it starts have them ignored, and suites
# send them (test_hf's Ctrl-C check)
run_mutant() {
    (cd "$2" && PYTHONPATH="$2${PYTHONPATH:+:$PYTHONPATH}" env --default-signal=INT,QUIT bash -c "$1") > "$2.run.log" 2>&1
    echo $? > "$2.rc"
}

t0=$SECONDS
mkdir "$work/tree"
tar -cf - --exclude=./.git --exclude=./scratch --exclude=./.venv . | tar -xf - -C "$work/tree"
for p in "${patches[@]}"; do
    at_most_jobs
    prepare "$p" "$work/$(basename "$p" .patch)" &
done
wait
for p in "${patches[@]}"; do
    dir="$work/$(basename "$p" .patch)" cmd=$(command_of "$p")
    [ -e "$dir.built" ] || continue
    [[ "$cmd" == *test_multi_gpu.sh* ]] && [ "$gpus" -lt 2 ] && continue
    if [ "$cpu" = 1 ]; then at_most_jobs; run_mutant "$cmd" "$dir" & else run_mutant "$cmd" "$dir"; fi
done
wait

passed=0 failed=0
declare -A named tried caught
for p in "${all_patches[@]}"; do
    s=$(suite_of "$(caught_by "$p")")
    named[$s]=$((${named[$s]:-0} + 1))
done
for p in "${patches[@]}"; do
    name=$(basename "$p" .patch) dir="$work/$(basename "$p" .patch)"
    what=$(sed -n 's/^Mutation: //p' "$p")
    cmd=$(command_of "$p")
    s=$(suite_of "$cmd")
    tried[$s]=$((${tried[$s]:-0} + 1))
    if [ ! -e "$dir.applied" ]; then
        echo "STALE  $name: the patch does not apply to this tree:"; tail -5 "$dir.patch.log"
        failed=$((failed + 1))
    elif [ ! -e "$dir.built" ]; then
        echo "BROKEN $name: the mutant does not build:"; tail -5 "$dir.build.log"
        failed=$((failed + 1))
    elif [ ! -e "$dir.rc" ]; then
        echo "not run  $name ($what): $cmd needs 2 GPUs, this machine has $gpus"
    elif [ "$(cat "$dir.rc")" = 0 ]; then
        echo "MISSED $name ($what): $cmd passed"
        failed=$((failed + 1))
    elif failed_as_expected "$dir.run.log" "$cmd"; then
        echo "caught $name ($what) by $cmd: $(grep -m1 -E '^ *FAIL|error:|Error' "$dir.run.log" | sed 's/^ *//' | cut -c1-200)"
        passed=$((passed + 1))
        caught[$s]=$((${caught[$s]:-0} + 1))
    else
        echo "NOT CAUGHT $name ($what): $cmd failed, but no test failed in it (a crash or a build error?):"; tail -5 "$dir.run.log"
        failed=$((failed + 1))
    fi
done
echo
echo "| suite | patches naming it | tried | caught |"
echo "|---|---|---|---|"
for s in $(printf '%s\n' "${!named[@]}" "${!tried[@]}" | sort -u); do
    echo "| $s | ${named[$s]:-0} | ${tried[$s]:-0} | ${caught[$s]:-0} |"
done
echo "-- ${#patches[@]} mutants took $((SECONDS - t0)) s ($jobs at a time)"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
