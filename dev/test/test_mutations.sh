#!/usr/bin/env bash
# Proves the power of the tests: every dev/test/mutations/*.patch plants one named bug in a copy of the
# tree, and the test on its "Caught by:" line must then fail. The mutants build in parallel, then run
# one after another. Needs a GPU for the fp8 ones; a mutation caught by dev/test/test_multi_gpu.sh needs
# two and is reported as not run on one. One line per mutation, then "N passed, N failed". passed:
# caught, the command exited non-zero and its log shows a test failing: for ./test_llama_fp8 'FILTER'
# a "FAIL <test>" line of a test named by FILTER, otherwise a failure summary ("N passed, M failed",
# M > 0) or a dev/cuda program's verdict ("rmsnorm: FAIL (...)"); a crash or a build error of the
# command is no catch. failed: missed (the command passed), not caught so, or stale (the patch does
# not apply exactly, no fuzz) or broken (the mutant does not build).
# usage: [MUTATIONS='NAME ...'] bash dev/test/test_mutations.sh [TEST_FILTER]
#   MUTATIONS: run only these patches (names without .patch), e.g. the ones a change touched
#   TEST_FILTER: run ./test_llama_fp8 TEST_FILTER on every mutant instead of its own command (to see
#   which other tests catch it)
set -u
cd "$(dirname "$0")/../.."
root=$PWD
export MUTATIONS_SOURCE=$root # the copies have no .git: a command comparing with a git revision finds it here (same_bits.sh)
[ -x .venv/bin/python3 ] && PATH="$root/.venv/bin:$PATH" # for the commands that run a Python suite
work=$(mktemp -d /tmp/mutations.XXXXXX)
trap 'rm -rf "$work"' EXIT
patches=(dev/test/mutations/*.patch)
if [ -n "${MUTATIONS:-}" ]; then
    patches=()
    for name in $MUTATIONS; do
        [ -f "dev/test/mutations/$name.patch" ] || { echo "MUTATIONS: no dev/test/mutations/$name.patch"; exit 2; }
        patches+=("dev/test/mutations/$name.patch")
    done
fi
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)

# failed_as_expected LOG CMD: whether LOG shows a test failing, as the header says
failed_as_expected() {
    local log=$1 cmd=$2 filter
    filter=$(sed -n "s/^.*test_llama_fp8 '\([^']*\)'.*$/\1/p" <<<"$cmd")
    if [ -n "$filter" ]; then
        grep -E '^FAIL ' "$log" | grep -qF -- "$filter"
    else
        grep -qE '^[0-9]+ passed, [1-9][0-9]* failed$|^[A-Za-z0-9_]+: (FAIL|[0-9]+ FAILED)' "$log"
    fi
}

# build_targets CMD: what a mutant must have built before CMD runs: only the GPU test for a
# ./test_llama_fp8 command (or with TEST_FILTER), nothing for a dev/cuda program (its command builds
# it), else the trainer and the GPU test
build_targets() {
    if [ -n "$test_filter" ] || [[ "$1" == ./test_llama_fp8* ]]; then echo test_llama_fp8
    elif [[ "$1" != *"-C dev/cuda"* ]]; then echo test_llama_fp8 train_llama_fp8; fi
}
test_filter=${1:-}

for p in "${patches[@]}"; do
    dir="$work/$(basename "$p" .patch)"
    mkdir -p "$dir"
    tar -cf - --exclude=./.git --exclude=./scratch --exclude=./.venv . | tar -xf - -C "$dir"
    if (cd "$dir" && patch -p1 -f -s --fuzz=0 --no-backup-if-mismatch < "$root/$p") > "$dir.patch.log" 2>&1; then
        touch "$dir.applied"
        targets=$(build_targets "$(sed -n 's/^Caught by: //p' "$p")")
        (cd "$dir" && { [ -z "$targets" ] || make -s -B $targets; }) > "$dir.build.log" 2>&1 && touch "$dir.built" &
    fi
done
wait
passed=0 failed=0
for p in "${patches[@]}"; do
    name=$(basename "$p" .patch) dir="$work/$(basename "$p" .patch)"
    what=$(sed -n 's/^Mutation: //p' "$p")
    cmd=$(sed -n 's/^Caught by: //p' "$p")
    [ -n "${1:-}" ] && cmd="./test_llama_fp8 '$1'"
    if [ ! -e "$dir.applied" ]; then
        echo "STALE  $name: the patch does not apply to this tree:"; tail -5 "$dir.patch.log"
        failed=$((failed + 1))
    elif [ ! -e "$dir.built" ]; then
        echo "BROKEN $name: the mutant does not build:"; tail -5 "$dir.build.log"
        failed=$((failed + 1))
    elif [[ "$cmd" == *test_multi_gpu.sh* ]] && [ "$gpus" -lt 2 ]; then
        echo "not run  $name ($what): $cmd needs 2 GPUs, this machine has $gpus"
    elif (cd "$dir" && bash -c "$cmd") > "$dir.run.log" 2>&1; then
        echo "MISSED $name ($what): $cmd passed"
        failed=$((failed + 1))
    elif failed_as_expected "$dir.run.log" "$cmd"; then
        echo "caught $name ($what) by $cmd: $(grep -m1 -E '^ *FAIL|error:|Error' "$dir.run.log" | sed 's/^ *//' | cut -c1-200)"
        passed=$((passed + 1))
    else
        echo "NOT CAUGHT $name ($what): $cmd failed, but no test failed in it (a crash or a build error?):"; tail -5 "$dir.run.log"
        failed=$((failed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
