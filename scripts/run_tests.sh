#!/usr/bin/env bash
# Runs the CPU test suite (C, host-only trainer checks, the scripts' parsers) and, when a GPU is
# present, the GPU test program; prints the combined "N passed, N failed" line last. Exit status is
# non-zero if anything failed.
set -u
cd "$(dirname "$0")/.."
passed=0; failed=0
tally() { # reads a suite's output, echoes it, adds its summary line to the totals
    local out rc=$2
    out=$(cat "$1")
    local line
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' <<<"$out" | tail -n 1)
    if [ -z "$line" ]; then
        echo "suite '$3' crashed (exit $rc) before printing its summary"; failed=$((failed + 1)); return
    fi
    passed=$((passed + $(cut -d' ' -f1 <<<"$line")))
    failed=$((failed + $(cut -d' ' -f3 <<<"$line")))
    [ "$rc" -ne 0 ] && [ "$(cut -d' ' -f3 <<<"$line")" = 0 ] && { echo "suite '$3' exited $rc"; failed=$((failed + 1)); }
}
log=$(mktemp)
echo "== CPU tests (dev/test/test_cpu)"
./dev/test/test_cpu 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
tally "$log" "$rc" cpu
for t in test_trainer_host test_zero_layout; do
    echo "== host-only trainer checks (dev/test/$t)"
    ./dev/test/$t 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
    tally "$log" "$rc" "$t"
done
if command -v python3 >/dev/null; then
    echo "== script checks (dev/test/test_scripts.py)"
    python3 dev/test/test_scripts.py 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}
    tally "$log" "$rc" scripts
else
    echo "== script checks skipped: no python3"
fi
if nvidia-smi -L >/dev/null 2>&1; then
    echo "== GPU tests (test_llama_fp8)"
    make -s test_llama_fp8 && { ./test_llama_fp8 2>&1 | tee "$log"; rc=${PIPESTATUS[0]}; tally "$log" "$rc" gpu; } \
        || { echo "building test_llama_fp8 failed"; failed=$((failed + 1)); }
else
    echo "== GPU tests skipped: no GPU on this machine (run them with: make test_llama_fp8 && ./test_llama_fp8)"
fi
rm -f "$log"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
