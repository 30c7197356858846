#!/usr/bin/env bash
# Bit-identity of a refactor (one GPU): the trainer of git revision REV and that of the working tree
# run the same short deterministic trainings, and everything they compute must come out the same,
# byte for byte:
#   bash dev/test/same_bits.sh REV          e.g. bash dev/test/same_bits.sh 42fcd59
#   bash dev/test/same_bits.sh DIR          DIR: REV's tree, exported (git archive REV | tar -x -C DIR)
# REV is exported with `git archive` into a temporary directory and built there, the working tree in
# place (`make train_llama_fp8`), both at once. The runs: the tiny preset cut to 2 layers and a
# 4096-token vocabulary, synthetic data, B 4 x T 128, 6 steps, -deterministic 1, -cuda_graph 0, val
# loss and a sample every 3 steps, a checkpoint every 3. Cases: a control (REV against itself, fp8
# delayed: the GPU is deterministic, so a difference below means something), bf16 (fp32 AdamW
# moments), fp8 delayed (with fp8.log), fp8 current, fp8 -cuda_graph 1, fp8 grad accumulation 2
# (-d 1024), fp8 -fp8_weight_cache 0 -r 1, fp8 tied embeddings (smollm2-135m's shape, 2 layers), fp8
# -fp8_lm_head 1, block grain, the fallback to bf16 and to block (threshold 0: a case where no linear
# switched fails), a resume (the step-6 checkpoint removed, -y 1 from step 3, then -x 0 -y 1 of the
# result), and -x 0 of a fresh fp8 model (the calibration forward, the val loss, a sample).
# Compared per case: the printed step lines (loss, norm, lr; not the times), val losses, samples and
# checkpoint lines; main.log's step and val lines and metrics.jsonl without the times and memory;
# fp8.log; and with cmp every model_*.bin, state_*.bin (but for the run id each run draws and the
# checksum over it: header bytes 1008-1023) and fp8_state_rank0.bin (-fp8_dump 1). One
# line per case, "same" or "DIFFERENT: what", then "N passed, N failed"; exit status 1 on any
# difference, 2 when the comparison cannot run (a bad REV, a build failure, no GPU: the builds are
# made and checked first). The runs' logs stay in the temporary directory when a case differs.
# Under scripts/test_mutations.sh (a copy of the tree without .git) REV is looked up in the tree
# the copies came from ($MUTATIONS_SOURCE).
set -u
cd "$(dirname "$0")/../.." || exit 2
[ $# -eq 1 ] || { echo "usage: bash dev/test/same_bits.sh REV   (a git revision, e.g. 42fcd59, or a folder holding its tree)" >&2; exit 2; }
rev=$1
[ ! -d "$rev" ] || [ -f "$rev/train_llama_fp8.cu" ] || { echo "error: folder '$rev' holds no train_llama_fp8.cu: not a tree of this project" >&2; exit 2; }
work=$(mktemp -d /tmp/same_bits.XXXXXX)
start=$SECONDS
mkdir "$work/rev_tree"
if [ -d "$rev" ]; then # a tree exported elsewhere (a machine whose copy of the project has no .git)
    cp -r "$rev/." "$work/rev_tree" && rm -f "$work/rev_tree/train_llama_fp8"
    rev_name="folder $rev"
else
    repo=$(git rev-parse --show-toplevel 2>/dev/null) || repo=${MUTATIONS_SOURCE:-}
    [ -n "$repo" ] || { echo "error: $PWD is not a git checkout and \$MUTATIONS_SOURCE is not set: nowhere to find revision '$rev' (give a folder holding its tree instead)" >&2; exit 2; }
    git -C "$repo" rev-parse -q --verify "$rev^{commit}" > /dev/null || { echo "error: '$rev' is not a commit of $repo" >&2; exit 2; }
    git -C "$repo" archive --format=tar "$rev" | tar -xf - -C "$work/rev_tree" || { echo "error: git archive of '$rev' failed" >&2; exit 2; }
    rev_name="$rev ($(git -C "$repo" rev-parse --short "$rev"))"
fi
(cd "$work/rev_tree" && make -s train_llama_fp8) > "$work/rev_build.log" 2>&1 &
rev_build=$!
make -s train_llama_fp8 > "$work/new_build.log" 2>&1 &
new_build=$!
built=1
wait "$rev_build" || { echo "error: building $rev failed:"; tail -n 20 "$work/rev_build.log"; built=0; }
wait "$new_build" || { echo "error: building the working tree failed:"; tail -n 20 "$work/new_build.log"; built=0; }
[ "$built" -eq 1 ] || { echo "logs in $work"; exit 2; }
echo "built $rev_name and the working tree in $((SECONDS - start)) s"
gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
if [ "$gpus" -eq 0 ]; then
    echo "no GPU (nvidia-smi lists none): both trainers built, no case run; run this on a GPU machine"
    rm -rf "$work"
    exit 2
fi
declare -A bin=([rev]="$work/rev_tree/train_llama_fp8" [new]="$PWD/train_llama_fp8")

common=(-e tiny -L 2 -V 4096 -tok "" -i synthetic -j synthetic -b 4 -t 128 -x 6 -u 2 -v 3 -m 2 -s 3 -g 8 -n 3
        -deterministic 1 -cuda_graph 0 -seed 7)
# case_NAME BIN DIR: one case's runs, their output in DIR.out, files in DIR
run() { local b=$1 d=$2; shift 2; "$b" "${common[@]}" "$@" -o "$d" >> "$d.out" 2>&1; }
case_bf16() { run "$1" "$2" -precision bf16 -adam_moments fp32; }
case_fp8_delayed() { run "$1" "$2" -fp8_log 2 -fp8_dump 1; }
case_fp8_current() { run "$1" "$2" -fp8_recipe current -fp8_dump 1; }
case_cuda_graph() { run "$1" "$2" -cuda_graph 1 -fp8_dump 1; }
case_grad_accum() { run "$1" "$2" -d 1024 -fp8_dump 1; }
case_no_cache_r1() { run "$1" "$2" -fp8_weight_cache 0 -r 1 -fp8_dump 1; }
case_tied() { run "$1" "$2" -e smollm2-135m -fp8_dump 1; }
case_lm_head() { run "$1" "$2" -fp8_lm_head 1 -fp8_dump 1; }
case_block() { run "$1" "$2" -fp8_grain block -fp8_log 2 -fp8_dump 1; }
# the fallback with threshold 0 and patience 1: linears that lose any value switch after step 1
# (a case where none switched proves nothing, so it fails)
fallback() {
    run "$1" "$2" -fp8_fallback "$3" -fp8_fallback_threshold 0 -fp8_fallback_patience 1 -fp8_log 2 -fp8_dump 1 || return
    grep -q '"fp8_fallback"' "$2/metrics.jsonl" || { echo "no linear switched to $3" >> "$2.out"; return 1; }
}
case_fallback_bf16() { fallback "$1" "$2" bf16; }
case_fallback_block() { fallback "$1" "$2" block; }
case_resume() {
    run "$1" "$2" || return
    rm "$2/model_00000006.bin" "$2/state_00000006_00000.bin" || return
    run "$1" "$2" -y 1 && run "$1" "$2" -x 0 -y 1
}
case_eval_only() { run "$1" "$2" -x 0; } # writes nothing: the printed val loss and sample are the comparison

# digest DIR: what a case's runs computed, as text (times, speeds and memory left out, DIR named DIR)
digest() {
    local d=$1
    sed -nE '/^(step |val loss|sample:|checkpoint written|resumed from)/{s/ \| [0-9.]+ ms \| [0-9]+ tok\/s \| MFU [^ |]+//;p}' "$d.out" |
        sed "s|$d|DIR|g"
    [ -f "$d/main.log" ] && grep -E '^(s:|sample:)' "$d/main.log" | sed -E 's/ ms:[^ ]+ tok\/s:[^ ]+//'
    [ -f "$d/metrics.jsonl" ] && sed -E 's/, "(ms|tokens_per_s|mfu|memory_gib)": [^,}]+//g' "$d/metrics.jsonl"
    [ -f "$d/fp8.log" ] && cat "$d/fp8.log"
    return 0
}
binaries() { [ -d "$1" ] && (cd "$1" && ls | grep -E '^(model_|state_|fp8_state_rank).*\.bin$' | sort); return 0; }
# same_but_run_id A B: whether two checkpoint files hold the same bits but for the run id and the
# checksum over it (header words 252-255, bytes 1008-1023): two runs always differ there
same_but_run_id() { cmp -s <(head -c 1008 "$1") <(head -c 1008 "$2") && cmp -s <(tail -c +1025 "$1") <(tail -c +1025 "$2"); }

passed=0 failed=0
# compare NAME DIR_A DIR_B: one line, same or DIFFERENT
compare() {
    local name=$1 a=$2 b=$3 what=""
    digest "$a" > "$a.digest"
    digest "$b" > "$b.digest"
    binaries "$a" > "$a.files"
    binaries "$b" > "$b.files"
    if [ ! -s "$a.digest" ]; then
        what="no loss line was printed (see $a.out)"
    elif ! cmp -s "$a.digest" "$b.digest"; then
        what="$(diff "$a.digest" "$b.digest" | grep -m1 '^<' | cut -c3-120) | against | $(diff "$a.digest" "$b.digest" | grep -m1 '^>' | cut -c3-120)"
    elif ! cmp -s "$a.files" "$b.files"; then
        what="other checkpoint files: $(diff "$a.files" "$b.files" | grep '^[<>]' | tr '\n' ' ')"
    else
        local f
        while read -r f; do
            case $f in
                model_* | state_*) same_but_run_id "$a/$f" "$b/$f" || what="${what:+$what, }$f" ;;
                *) cmp -s "$a/$f" "$b/$f" || what="${what:+$what, }$f" ;;
            esac
        done < "$a.files"
        [ -z "$what" ] || what="files differ: $what"
    fi
    if [ -z "$what" ]; then
        printf '%-14s same (%d lines, %d files)\n' "$name" "$(wc -l < "$a.digest")" "$(wc -l < "$a.files")"
        passed=$((passed + 1))
    else
        printf '%-14s DIFFERENT: %s\n' "$name" "$what"
        failed=$((failed + 1))
    fi
}

mkdir "$work/rev" "$work/new" "$work/control"
if ! case_fp8_delayed "${bin[rev]}" "$work/control/run1" || ! case_fp8_delayed "${bin[rev]}" "$work/control/run2"; then
    printf '%-14s DIFFERENT: a run failed (see %s)\n' control "$work/control"
    failed=$((failed + 1))
else
    compare control "$work/control/run1" "$work/control/run2"
fi
for name in bf16 fp8_delayed fp8_current cuda_graph grad_accum no_cache_r1 tied lm_head block fallback_bf16 fallback_block \
    resume eval_only; do
    ok=1
    for side in rev new; do
        "case_$name" "${bin[$side]}" "$work/$side/$name" || { rc=$?; ok=0; bad="$side: exit $rc (see $work/$side/$name.out)"; }
    done
    if [ "$ok" -eq 1 ]; then compare "$name" "$work/rev/$name" "$work/new/$name"
    else printf '%-14s DIFFERENT: a run failed, %s\n' "$name" "$bad"; failed=$((failed + 1)); fi
done
echo "$rev against the working tree in $((SECONDS - start)) s"
if [ "$failed" -eq 0 ]; then rm -rf "$work"; else echo "logs in $work"; fi
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
