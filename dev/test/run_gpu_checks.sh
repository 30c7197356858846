#!/usr/bin/env bash
# On a GPU machine: builds everything, runs every dev/cuda program (each validates its kernels
# against a CPU reference before timing them) and the GPU test suite. Logs go to LOG_DIR (default
# gpu_checks/), one file per program; a summary table is printed last.
#   bash dev/test/run_gpu_checks.sh [program ...]      (default: all of dev/cuda, then test_llama_fp8)
set -u
cd "$(dirname "$0")/../.."
out=${LOG_DIR:-gpu_checks}
mkdir -p "$out"
make -j"$(nproc)" all > "$out/build.log" 2>&1 || { tail -n 40 "$out/build.log"; echo "build failed"; exit 1; }
programs=("$@")
if [ ${#programs[@]} -eq 0 ]; then
    for f in dev/cuda/*.cu; do
        p=$(basename "$f" .cu)
        [ "$p" = nccl_check ] || programs+=("$p")
    done
    programs+=(test_llama_fp8)
fi
summary=()
status=0
for p in "${programs[@]}"; do
    exe=dev/cuda/$p
    [ "$p" = test_llama_fp8 ] && exe=./test_llama_fp8
    start=$(date +%s)
    "$exe" > "$out/$p.log" 2>&1
    rc=$?
    summary+=("$(printf '%-16s exit %-3s %4ss  %s' "$p" "$rc" "$(( $(date +%s) - start ))" "$(tail -n 1 "$out/$p.log")")")
    [ $rc -eq 0 ] || status=1
done
printf '%s\n' "${summary[@]}"
exit $status
