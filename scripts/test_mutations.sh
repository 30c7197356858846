#!/usr/bin/env bash
# Proves the power of the GPU fp8 tests: every dev/test/mutations/*.patch plants one named bug in a
# copy of the tree, and the command on its "Caught by:" line must then fail. The mutants build in
# parallel, then run one after another. Needs a GPU; a mutation caught by scripts/test_multi_gpu.sh
# needs two and is reported as not run on one. One line per mutation, then "N passed, N failed"
# (passed: the bug was caught; failed: missed, or the patch no longer applies or builds).
# usage: bash scripts/test_mutations.sh [TEST_FILTER]
#   TEST_FILTER: run ./test_llama_fp8 TEST_FILTER on every mutant instead of its own command (to see
#   which other tests catch it)
set -u
cd "$(dirname "$0")/.."
root=$PWD
work=$(mktemp -d /tmp/mutations.XXXXXX)
trap 'rm -rf "$work"' EXIT
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
for p in dev/test/mutations/*.patch; do
    dir="$work/$(basename "$p" .patch)"
    mkdir -p "$dir"
    tar -cf - --exclude=./.git --exclude=./scratch . | tar -xf - -C "$dir"
    (cd "$dir" && patch -s -p1 < "$root/$p" && make -s -B test_llama_fp8 train_llama_fp8) > "$dir.build.log" 2>&1 && touch "$dir.built" &
done
wait
passed=0 failed=0
for p in dev/test/mutations/*.patch; do
    name=$(basename "$p" .patch) dir="$work/$(basename "$p" .patch)"
    what=$(sed -n 's/^Mutation: //p' "$p")
    cmd=$(sed -n 's/^Caught by: //p' "$p")
    [ -n "${1:-}" ] && cmd="./test_llama_fp8 '$1'"
    if [ ! -e "$dir.built" ]; then
        echo "STALE  $name: the patch no longer applies or the mutant does not build:"; tail -5 "$dir.build.log"
        failed=$((failed + 1))
    elif [[ "$cmd" == *test_multi_gpu.sh* ]] && [ "$gpus" -lt 2 ]; then
        echo "not run  $name ($what): $cmd needs 2 GPUs, this machine has $gpus"
    elif (cd "$dir" && bash -c "$cmd") > "$dir.run.log" 2>&1; then
        echo "MISSED $name ($what): $cmd passed"
        failed=$((failed + 1))
    else
        echo "caught $name ($what) by $cmd: $(grep -m1 -E '^ *FAIL|error:|Error' "$dir.run.log" | sed 's/^ *//' | cut -c1-200)"
        passed=$((passed + 1))
    fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
