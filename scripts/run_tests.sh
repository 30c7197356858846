#!/usr/bin/env bash
# Runs the CPU test suites (C, host-only trainer checks, every dev/test/test_*.py) and, when a GPU
# answers nvidia-smi, the GPU suites (test_llama_fp8, scripts/test_signal.sh and scripts/test_hf_gpu.sh
# on the trainer);
# prints the combined "N passed, N failed" line last. Exit status is non-zero if anything failed.
# A suite counts one failure more when it crashes before its summary line or exits non-zero although
# its summary says 0 failed (dev/test/test_scripts.py runs this script on fake suites to check that).
set -u
cd "$(dirname "$0")/.."
passed=0; failed=0
log=$(mktemp)
trap 'rm -f "$log"' EXIT

# run_suite NAME COMMAND...: runs it, echoes its output, adds its summary line to the totals
run_suite() {
    local name=$1; shift
    "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]} line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "suite '$name' crashed (exit $rc) before printing its summary"
        failed=$((failed + 1))
        return 0
    fi
    local p f
    read -r p _ f _ <<<"$line"
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "suite '$name' exited $rc although it reported no failure"
        failed=$((failed + 1))
    fi
    return 0
}

echo "== CPU tests (dev/test/test_cpu)"
run_suite cpu ./dev/test/test_cpu
for t in test_trainer_host test_zero_layout; do
    echo "== host-only trainer checks (dev/test/$t)"
    run_suite "$t" "./dev/test/$t"
done
if command -v python3 >/dev/null; then
    for t in dev/test/test_*.py; do
        echo "== Python checks ($t)"
        run_suite "$(basename "$t" .py)" python3 "$t"
    done
else
    echo "== Python checks: no python3"
    failed=$((failed + 1))
fi
if nvidia-smi -L >/dev/null 2>&1; then
    echo "== GPU tests (test_llama_fp8, scripts/test_signal.sh, scripts/test_hf_gpu.sh)"
    if make -s train_llama_fp8 test_llama_fp8; then
        run_suite gpu ./test_llama_fp8
        run_suite signal bash scripts/test_signal.sh
        run_suite hf_gpu bash scripts/test_hf_gpu.sh
    else
        echo "building train_llama_fp8 and test_llama_fp8 failed"
        failed=$((failed + 1))
    fi
else
    echo "== GPU tests skipped: no GPU on this machine (run them with: make test_llama_fp8 && ./test_llama_fp8)"
fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
