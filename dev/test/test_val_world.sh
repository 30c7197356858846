#!/usr/bin/env bash
# The val loss is the same on any number of GPUs: `-x 0` evaluations of one model (the seeded random
# init of -e tiny, identical on every rank) on 1 GPU and on every N up to the GPUs of this machine,
# in bf16 and fp8, at the README's B x T, where the shipped val shard holds fewer batches (1 at
# 16 x 1024, 3 at 2 x 4096 and 1 x 8192, 7 at 4 x 1024) than some N has ranks. Every printed val loss
# line must equal the 1-GPU one. Needs 2 GPUs or more; prints "N passed, N failed" last.
# usage: bash dev/test/test_val_world.sh
set -u
cd "$(dirname "$0")/../.."
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -lt 2 ]; then
    echo "not run: needs 2 GPUs, this machine has $gpus"
    echo "0 passed, 0 failed"
    exit 0
fi
make -s train_llama_fp8 || { echo "building train_llama_fp8 failed"; echo "0 passed, 1 failed"; exit 1; }
passed=0 failed=0
for geometry in "16 1024 20" "4 1024 8" "2 4096 20" "1 8192 20"; do
    read -r B T M <<<"$geometry"
    for precision in bf16 fp8; do
        one=""
        for n in $(seq 1 "$gpus"); do
            launch=""
            [ "$n" -gt 1 ] && launch="-ngpu $n"
            out=$(./train_llama_fp8 $launch -e tiny -x 0 -precision "$precision" -b "$B" -t "$T" -m "$M" -s 0 -o '' -deterministic 1 2>&1)
            line=$(grep -m1 '^val loss' <<<"$out")
            [ "$n" -eq 1 ] && one=$line
            if [ -n "$line" ] && [ "$line" = "$one" ]; then
                echo "ok   B $B T $T $precision on $n GPU(s): $line"
                passed=$((passed + 1))
            else
                echo "FAIL B $B T $T $precision on $n GPU(s): '${line:-no val loss line}', on 1 GPU '$one'"
                tail -3 <<<"$out"
                failed=$((failed + 1))
            fi
        done
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
