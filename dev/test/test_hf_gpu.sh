#!/usr/bin/env bash
# Hugging Face in and out around real training (GPU; transformers in python3): a fixture imported by
# scripts/hf_import.py is fine-tuned a few steps by the trainer (-init_from, bf16 and fp8), exported
# by scripts/hf_export.py, and loaded by transformers, whose logits must match the C reference's on
# the trained model file (dev/reference/check_export.py); the trained weights must differ from the
# imported ones. Prints one line per check and "N passed, N failed".
# usage: bash dev/test/test_hf_gpu.sh
set -u
cd "$(dirname "$0")/../.."
[ -x .venv/bin/python3 ] && PATH="$PWD/.venv/bin:$PATH" # scripts/*.py need llama_fp8, which make venv installs there
work=$(mktemp -d /tmp/test_hf_gpu.XXXXXX)
trap 'rm -rf "$work"' EXIT
passed=0 failed=0
check() { # check NAME COMMAND...: runs it, its output in $work/NAME.log
    local name=$1 t0=$SECONDS; shift
    if "$@" > "$work/$name.log" 2>&1; then echo "ok   $name ($((SECONDS - t0)) s)"; passed=$((passed + 1));
    else echo "FAIL $name ($((SECONDS - t0)) s):"; tail -5 "$work/$name.log"; failed=$((failed + 1)); fi
}
make -s train_llama_fp8 > "$work/build.log" 2>&1 || { echo "FAIL building the trainer"; cat "$work/build.log"; echo "0 passed, 1 failed"; exit 1; }
gcc -O2 -Wall -Wno-unused-function -I. dev/test/tools/ref_logits.c -lm -lz -o "$work/ref_logits" || { echo "0 passed, 1 failed"; exit 1; }
python3 -c "import transformers, torch" 2>/dev/null || { echo "FAIL transformers and torch are needed in python3 (pip install torch transformers)"; echo "0 passed, 1 failed"; exit 1; }
for fixture in tied llama3; do
    check "import $fixture" python3 scripts/hf_import.py "dev/test/fixtures/hf/$fixture" "$work/$fixture.bin"
    for prec in bf16 fp8; do
        run="$work/run_${fixture}_$prec"
        check "fine-tune $fixture 3 steps ($prec)" ./train_llama_fp8 -init_from "$work/$fixture.bin" -precision "$prec" -i synthetic -j '' \
            -tok '' -x 3 -b 2 -t 128 -l 1e-3 -u 0 -s 0 -o "$run" -deterministic 1
        check "$fixture ($prec): trained weights differ from the imported ones" bash -c "! cmp -s <(tail -c +1025 '$work/$fixture.bin') <(tail -c +1025 '$run/model_00000003.bin')"
        check "export $fixture ($prec)" python3 scripts/hf_export.py "$run/model_00000003.bin" "$work/hf_${fixture}_$prec" --dtype fp32
        check "transformers loads $fixture ($prec) and its logits match ours" \
            python3 dev/reference/check_export.py "$run/model_00000003.bin" "$work/hf_${fixture}_$prec" "$work/ref_logits"
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
