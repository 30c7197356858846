#!/usr/bin/env bash
# Stopping on a signal (GPU; run by `make test` when a GPU is present):
#   bash dev/test/test_signal.sh
# Real runs of the trainer (the tiny preset on the shipped TinyShakespeare, -deterministic 1, 300
# steps) are signalled once their log shows step 20:
#   1  SIGTERM and SIGUSR1 (Slurm's --signal=USR1@N) in fp8, SIGINT and SIGHUP in bf16: the run
#      finishes its step, writes a checkpoint, prints how to resume (naming the signal) and exits 0,
#      leaving no temporary file
#   2  -y 1 then runs to the end, and its last checkpoint (model and state file) is byte-identical to
#      that of the uninterrupted run but for the run id (and the checksum over it), as are the losses
#      of the steps after the stop
#   3  a second SIGTERM 0.3 s after the first (125m, whose checkpoint takes that long to write): exit
#      status 143 at once, no temporary file; resuming then starts from the last complete checkpoint
#   4  no log directory (-o ''): exit status 143 and a message that nothing was saved
#   5  -keep 2 with a checkpoint every 10 of 60 steps: only steps 50 and 60 are left, each with its
#      done_ marker
#   6  the directory's owner: a second run on -o while the first runs is refused naming its host and
#      pid; a fresh run into a directory with checkpoints is refused, and runs with -overwrite 1
# Prints PASS / FAIL per check, then "N passed, N failed"; logs in LOG_DIR (default log_signal/).
set -u
cd "$(dirname "$0")/../.." || exit 2
LOG=${LOG_DIR:-log_signal}
rm -rf "$LOG"
mkdir -p "$LOG"
pass=0
fail=0
report() { # report PASS|FAIL name [detail]
    printf '%-4s  %s%s\n' "$1" "$2" "${3:+  ($3)}"
    if [ "$1" = PASS ]; then pass=$((pass + 1)); else fail=$((fail + 1)); fi
}
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
make -s train_llama_fp8 > "$LOG/build.log" 2>&1 || { tail -n 20 "$LOG/build.log"; report FAIL "build train_llama_fp8"; finish; }

args="-e tiny -b 4 -t 128 -x 300 -u 10 -v 100 -m 1 -s 0 -n 0 -deterministic 1 -seed 3"
# start_run OUT PRECISION DIR [more flags]: the trainer in the background, its output in OUT
start_run() {
    local out=$1 prec=$2 dir=$3; shift 3
    ./train_llama_fp8 $args -precision "$prec" -o "$dir" "$@" > "$out" 2>&1 &
    pid=$!
}
# wait_for_step OUT N: until the output shows step N (at most 120 s, or the run ending)
wait_for_step() {
    local t=0
    while ! grep -qE "^step +$2/" "$1"; do
        kill -0 "$pid" 2>/dev/null || return 1
        sleep 0.05
        t=$((t + 1))
        [ "$t" -lt 2400 ] || return 1
    done
}
losses_after() { # losses_after LOG STEP: "s:N trl:L norm:G" for steps > STEP from a main.log
    awk -v s="$2" -F'[: ]' '/^s:[0-9]+ trl:/ && $2 > s {print $1":"$2, $3":"$4, $5":"$6}' "$1"
}
checkpoint_files() { ls "$1" | grep -E '^(model|state)_' | sort; }
# same_but_run_id A B: whether two checkpoint files hold the same bits but for the run id and the
# checksum over it (header words 252-255, bytes 1008-1023): two runs always differ there
same_but_run_id() { cmp -s <(head -c 1008 "$1") <(head -c 1008 "$2") && cmp -s <(tail -c +1025 "$1") <(tail -c +1025 "$2"); }

for case in "fp8 TERM" "bf16 INT" "fp8 USR1" "bf16 HUP"; do
    set -- $case
    prec=$1 sig=$2
    full=$LOG/${prec}_full cut=$LOG/${prec}_cut_$sig
    [ -f "$full/model_00000300.bin" ] || ./train_llama_fp8 $args -precision "$prec" -o "$full" > "$LOG/${prec}_full.out" 2>&1 \
        || { report FAIL "$prec: the uninterrupted run" "see $LOG/${prec}_full.out"; continue; }
    start_run "$LOG/${prec}_cut_$sig.out" "$prec" "$cut"
    if ! wait_for_step "$LOG/${prec}_cut_$sig.out" 20; then
        kill -9 "$pid" 2>/dev/null
        report FAIL "$prec: the run to signal never reached step 20" "see $LOG/${prec}_cut_$sig.out"
        continue
    fi
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    msg=$(grep -E "^stopped by SIG$sig after step [0-9]+ of 300\. To continue, run the same command with -y 1" "$LOG/${prec}_cut_$sig.out")
    stop_step=$(sed -E 's/^stopped by SIG[A-Z0-9]+ after step ([0-9]+) .*/\1/' <<<"$msg")
    files=$(checkpoint_files "$cut" | tr '\n' ' ')
    want="model_$(printf %08d "${stop_step:-0}").bin state_$(printf %08d "${stop_step:-0}")_00000.bin "
    if [ "$rc" = 0 ] && [ -n "$msg" ] && [ "$stop_step" -lt 300 ] && [ "$files" = "$want" ] && ! ls "$cut" | grep -q '\.tmp$'; then
        report PASS "$prec: SIG$sig stops after step $stop_step with a checkpoint, exit 0"
    else
        report FAIL "$prec: SIG$sig" "exit $rc, message '$msg', files '$files' (want '$want'); see $LOG/${prec}_cut_$sig.out"
        continue
    fi
    ./train_llama_fp8 $args -precision "$prec" -o "$cut" -y 1 > "$LOG/${prec}_resume_$sig.out" 2>&1 \
        || { report FAIL "$prec: resume with -y 1" "see $LOG/${prec}_resume_$sig.out"; continue; }
    same=1
    for f in model_00000300.bin state_00000300_00000.bin; do same_but_run_id "$full/$f" "$cut/$f" || same=0; done
    if [ "$same" = 1 ] && [ "$(losses_after "$full/main.log" "$stop_step")" = "$(losses_after "$cut/main.log" "$stop_step")" ]; then
        report PASS "$prec: resumed from step $stop_step, the end equals the uninterrupted run bit for bit (checkpoint files, losses)"
    else
        report FAIL "$prec: resumed run differs from the uninterrupted one" "files equal: $same; see $full/main.log, $cut/main.log"
    fi
done

# a second signal: exits at once. The 125m model's checkpoint (1.5 GB with the AdamW state) takes
# long enough to write that the second SIGTERM, 0.3 s after the first, lands while it is written
two=$LOG/two
args125="-e 125m -b 4 -t 128 -x 300 -u 10 -v 0 -s 0 -n 10 -deterministic 1 -seed 3"
./train_llama_fp8 $args125 -o "$two" > "$LOG/two.out" 2>&1 &
pid=$!
if wait_for_step "$LOG/two.out" 25; then
    kill -TERM "$pid"; sleep 0.3; kill -TERM "$pid"
    wait "$pid"
    rc=$?
    latest=$(ls "$two" | grep -E '^done_[0-9]+$' | sort | tail -n 1 | sed -E 's/done_0*([0-9]+)/\1/') # the newest complete one
    removed=$(grep -c "removed the partial file" "$LOG/two.out")
    if [ "$rc" = 143 ] && grep -q "^second signal: exiting now" "$LOG/two.out" && ! grep -q "^stopped by" "$LOG/two.out" \
        && ! ls "$two" | grep -q '\.tmp$' && [ "${latest:-0}" -ge 20 ] && [ $((latest % 10)) = 0 ]; then
        report PASS "a second SIGTERM exits 143 at once, no temporary file ($([ "$removed" = 1 ] && echo "it removed the checkpoint being written" || echo "it came before the checkpoint write")), latest checkpoint step $latest"
    else
        report FAIL "a second SIGTERM" "exit $rc, latest checkpoint '$latest'; see $LOG/two.out"
    fi
    if ./train_llama_fp8 $args125 -o "$two" -y 1 -x "$((latest + 2))" > "$LOG/two_resume.out" 2>&1 \
        && grep -q "^resumed from step $latest " "$LOG/two_resume.out"; then
        report PASS "resuming after the second signal starts from the last complete checkpoint (step $latest)"
    else
        report FAIL "resuming after the second signal" "see $LOG/two_resume.out"
    fi
else
    kill -9 "$pid" 2>/dev/null
    report FAIL "a second SIGTERM: the run never reached step 25" "see $LOG/two.out"
fi
rm -f "$two"/*.bin # 1.5 GB each

# no log directory: nothing can be saved, so the stop is not a success
./train_llama_fp8 $args -precision bf16 -o '' > "$LOG/nodir.out" 2>&1 &
pid=$!
if wait_for_step "$LOG/nodir.out" 20; then
    kill -TERM "$pid"
    wait "$pid"
    rc=$?
    if [ "$rc" = 143 ] && grep -qE "^stopped by SIGTERM after step [0-9]+ of 300: no checkpoint written" "$LOG/nodir.out"; then
        report PASS "without -o: SIGTERM stops after the step, says nothing was saved, exit 143"
    else
        report FAIL "without -o" "exit $rc; see $LOG/nodir.out"
    fi
else
    kill -9 "$pid" 2>/dev/null
    report FAIL "without -o: the run never reached step 20" "see $LOG/nodir.out"
fi

# -keep 2: each checkpoint removes the older ones once it is complete
keep=$LOG/keep
./train_llama_fp8 $args -precision bf16 -x 60 -n 10 -keep 2 -o "$keep" > "$LOG/keep.out" 2>&1
rc=$?
files=$(checkpoint_files "$keep" | tr '\n' ' ')
want="model_00000050.bin model_00000060.bin state_00000050_00000.bin state_00000060_00000.bin "
if [ "$rc" = 0 ] && [ "$files" = "$want" ] && [ "$(ls "$keep" | grep '^done_' | tr '\n' ' ')" = "done_00000050 done_00000060 " ]; then
    report PASS "-keep 2: 6 checkpoints written, the 2 newest left"
else
    report FAIL "-keep 2" "exit $rc, files '$files' (want '$want' and their done_ markers); see $LOG/keep.out"
fi

# the directory's owner: a second run while the first holds the lock; a fresh run into used checkpoints
start_run "$LOG/owner.out" bf16 "$keep" -y 1 -x 400
if wait_for_step "$LOG/owner.out" 65; then
    ./train_llama_fp8 $args -precision bf16 -o "$keep" -y 1 > "$LOG/second.out" 2>&1
    rc=$?
    if [ "$rc" = 1 ] && grep -q "is in use by another run (host $(hostname) pid $pid holds" "$LOG/second.out"; then
        report PASS "a second run on the same -o is refused naming the first one's host and pid"
    else
        report FAIL "a second run on the same -o" "exit $rc; see $LOG/second.out"
    fi
    kill -TERM "$pid"; wait "$pid"
else
    kill -9 "$pid" 2>/dev/null
    report FAIL "the owner run never reached step 65" "see $LOG/owner.out"
fi
./train_llama_fp8 $args -precision bf16 -x 5 -o "$keep" > "$LOG/fresh.out" 2>&1
rc=$?
./train_llama_fp8 $args -precision bf16 -x 5 -o "$keep" -overwrite 1 > "$LOG/overwrite.out" 2>&1
rc2=$?
if [ "$rc" = 1 ] && grep -q "checkpoint files of another run" "$LOG/fresh.out" && [ "$rc2" = 0 ] && [ -f "$keep/done_00000060" ]; then
    report PASS "a fresh run into a directory with checkpoints is refused; -overwrite 1 runs, the old checkpoints kept"
else
    report FAIL "a fresh run into a used directory" "exit $rc, then $rc2 with -overwrite 1; see $LOG/fresh.out, $LOG/overwrite.out"
fi
finish
