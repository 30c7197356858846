#!/usr/bin/env bash
# Runs the CPU test suites (C, host-only trainer checks, every dev/test/test_*.py) and, when a GPU
# answers nvidia-smi, the GPU suites (test_llama_fp8, dev/test/test_signal.sh and dev/test/test_hf_gpu.sh
# on the trainer) and the dev/cuda kernel checks listed in KERNEL_CHECKS (rmsnorm: its fp8 health
# counts see inputs with exact zeros, which the trainer's tensors almost never hold; fp8_block
# -validate and fp8_rowwise -validate: the block and row casts and GEMMs against the C reference, at
# edge shapes the trainer's tests do not reach). The GPU suites run in the background beside the CPU suites (on a GPU
# machine make test takes the longer of the two, not their sum) and print after them.
# Prints each suite's time and the combined "N passed, N failed" line last. Exit status is non-zero if anything failed.
# Python runs from the project's environment, .venv/ (make test creates it from requirements.txt and
# pyproject.toml), put first on PATH so that scripts calling python3 get it too, with this tree's root
# first on PYTHONPATH: the llama_fp8 package the suites import is this tree's.
# A suite counts one failure more when it crashes before its summary line, exits non-zero although
# its summary says 0 failed, reports no test at all ("0 passed, 0 failed"), or runs past its time
# limit: SUITE_TIMEOUT seconds (default 900) for a CPU suite, GPU_SUITE_TIMEOUT (default 1800) for a
# GPU one (dev/test/test_scripts.py runs this script on fake suites to check each rule).
set -u
cd "$(dirname "$0")/../.."
passed=0; failed=0
log=$(mktemp)
KERNEL_CHECKS="rmsnorm fp8_block fp8_rowwise"
# the arguments each runs with: the fp8 ones validate only (their timing takes minutes and checks nothing)
declare -A KERNEL_ARGS=([fp8_block]=-validate [fp8_rowwise]=-validate)

# timed_out RC T0 LIMIT: whether timeout(1) stopped the command: 124, or 137 when it ignored SIGTERM
# and took the SIGKILL (a suite killed by SIGKILL before its limit exits 137 too)
timed_out() {
    [ "$1" -eq 124 ] || { [ "$1" -eq 137 ] && [ $((SECONDS - $2)) -ge "$3" ]; }
}

# run_suite NAME LIMIT COMMAND...: runs it (killed after LIMIT seconds), echoes its output, adds its
# summary line to the totals
run_suite() {
    local name=$1 limit=$2 t0=$SECONDS; shift 2
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$log"
    local rc=${PIPESTATUS[0]} line
    echo "-- $name took $((SECONDS - t0)) s"
    if timed_out "$rc" "$t0" "$limit"; then
        echo "suite '$name' timed out: still running after $limit s, killed"
        failed=$((failed + 1))
        return 0
    fi
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$log" | tail -n 1)
    if [ -z "$line" ]; then
        echo "suite '$name' crashed (exit $rc) before printing its summary"
        failed=$((failed + 1))
        return 0
    fi
    local p f
    read -r p _ f _ <<<"$line"
    passed=$((passed + p)); failed=$((failed + f))
    if [ "$p" -eq 0 ] && [ "$f" -eq 0 ]; then
        echo "suite '$name' ran no tests (0 passed, 0 failed)"
        failed=$((failed + 1))
    elif [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
        echo "suite '$name' exited $rc although it reported no failure"
        failed=$((failed + 1))
    fi
    return 0
}

# run_check NAME LIMIT COMMAND...: a program whose exit status is its verdict (the dev/cuda checks):
# one test, passed if it exits 0 within LIMIT seconds
run_check() {
    local name=$1 limit=$2 t0=$SECONDS; shift 2
    timeout -k 10 "$limit" "$@" 2>&1
    local rc=$?
    if [ "$rc" -eq 0 ]; then passed=$((passed + 1)); return 0; fi
    if timed_out "$rc" "$t0" "$limit"; then echo "check '$name' timed out: still running after $limit s, killed"
    else echo "check '$name' failed (exit $rc)"; fi
    failed=$((failed + 1))
}

# gpu_suites: the GPU suites and dev/cuda checks, run beside the CPU suites (their output is printed
# after the CPU suites'); their counts go to the file $1
gpu_suites() {
    log=$(mktemp) passed=0 failed=0
    if make -s train_llama_fp8 test_llama_fp8 && make -s -C dev/cuda $KERNEL_CHECKS; then
        run_suite gpu "$gpu_limit" ./test_llama_fp8
        run_suite signal "$gpu_limit" bash dev/test/test_signal.sh
        run_suite hf_gpu "$gpu_limit" bash dev/test/test_hf_gpu.sh
        for k in $KERNEL_CHECKS; do
            echo "== dev/cuda/$k ${KERNEL_ARGS[$k]:-}"
            run_check "dev/cuda/$k" "$gpu_limit" "./dev/cuda/$k" ${KERNEL_ARGS[$k]:-}
        done
    else
        echo "building train_llama_fp8, test_llama_fp8 and dev/cuda's $KERNEL_CHECKS failed"
        failed=$((failed + 1))
    fi
    rm -f "$log"
    echo "$passed $failed" > "$1"
}

cpu_limit=${SUITE_TIMEOUT:-900} gpu_limit=${GPU_SUITE_TIMEOUT:-1800}
[ -x .venv/bin/python3 ] && PATH="$PWD/.venv/bin:$PATH"
# (.venv's editable install may be another tree's: a .venv shared by worktrees)
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
gpu_pid= gpu_out=$(mktemp) gpu_counts=$(mktemp)
trap 'rm -f "$log" "$gpu_out" "$gpu_counts"' EXIT
if nvidia-smi -L >/dev/null 2>&1; then
    echo "== GPU tests started; they run beside the CPU suites and print after them"
    gpu_suites "$gpu_counts" > "$gpu_out" 2>&1 &
    gpu_pid=$!
fi
echo "== CPU tests (dev/test/test_cpu)"
run_suite cpu "$cpu_limit" ./dev/test/test_cpu
for src in dev/test/test_*.cu; do # every host-only suite the Makefile builds (HOST_TESTS)
    t=$(basename "$src" .cu)
    echo "== host-only trainer checks (dev/test/$t)"
    run_suite "$t" "$cpu_limit" "./dev/test/$t"
done
if [ -x .venv/bin/python3 ]; then
    for t in dev/test/test_*.py; do
        echo "== Python checks ($t)"
        run_suite "$(basename "$t" .py)" "$cpu_limit" python3 "$t"
    done
else
    echo "== Python checks not run: no .venv/ (make test creates it from requirements.txt: run make test, or make venv)"
    failed=$((failed + 1))
fi
if [ -n "$gpu_pid" ]; then
    wait "$gpu_pid"
    echo "== GPU tests (test_llama_fp8, dev/test/test_signal.sh, dev/test/test_hf_gpu.sh, dev/cuda: $KERNEL_CHECKS), run beside the CPU suites"
    cat "$gpu_out"
    read -r p f < "$gpu_counts" || { p=0 f=1; echo "the GPU suites left no counts"; }
    passed=$((passed + p)); failed=$((failed + f))
else
    echo "== GPU tests skipped: no GPU on this machine (run them with: make test_llama_fp8 && ./test_llama_fp8)"
fi
echo "-- all suites took $SECONDS s"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
