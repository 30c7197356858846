#!/usr/bin/env bash
# Multi-GPU checks of train_llama_fp8 (data parallel over NCCL, ZeRO-1, fp8 amax reduction) on one
# node with at least 2 GPUs. The comparisons (checks 2, 3, 5, 10) run at every N of 2, 4, 8 that the
# node has (nvidia-smi's count); the others with 2 ranks:
#   bash dev/test/test_multi_gpu.sh            build, then every check
#   bash dev/test/test_multi_gpu.sh 2 5        build, then checks 2 and 5 only (any check makes the runs it needs)
# Environment: LOG_DIR (default log_mgpu/: one log per run); MGPU_DETERMINISTIC (default 1, the
# -deterministic of our runs; 0 skips the bit-for-bit checks 4, 5, 7 and 9); MGPU_TRAINER_ARGS (more
# flags for our runs, e.g. '-adam_moments fp32' (the default is bf16); check 7 against BASE_SRC or
# BASE_REV then reports SKIP);
# for check 7 the trainer to compare the single-GPU path with: by default this tree's, built without
# NCCL and MPI; BASE_SRC (a train_llama_fp8.cu, built with this tree's llmc/), or BASE_REV (a git
# revision, read with git archive: its train_llama_fp8.cu and llmc/). NVLink multicast stays off:
# NCCL_NVLS_ENABLE must be unset or 0 and is exported as 0, so every rank (forked or started by
# mpirun) sees it.
#
# The runs: the tiny preset, B 2, T 128, 20 steps, total batch 1024 tokens, on the shipped
# TinyShakespeare. The data loader
# deals batch positions out in turn: in its k-th read, rank r of N takes position k*N + r. So 2 ranks
# with 2 micro-batches each (positions 4s..4s+3 at step s) see exactly the tokens of 1 rank with 4
# micro-batches, and 1 val batch per rank the tokens of 2 val batches on one GPU (-m 2). With N ranks
# the runs take -m N, and -d 256*N when that is more than 1024 (8 ranks: 2048, one micro-batch each),
# against 1 rank with the same flags (nargs below); N = 2 is the set-up above.
#
# Checks (PASS / FAIL / SKIP each, then "N passed, N failed"; exit status 1 on any failure):
#   0  ZeRO-1 bucket layout, host only, presets tiny..llama3-8b and odd shapes, worlds 1-8: every
#      parameter element is in exactly one rank's shard; buckets split evenly; no bucket is reduced
#      before backward has finished every element in it
#   1  dev/cuda/nccl_check -ngpu 2 passes; with --kill-rank 1 it exits non-zero within 60 s
#   2  bf16 and fp8: N ranks vs 1 rank with N times the gradient accumulation, same tokens: per-step
#      train loss, gradient norm and val loss (tolerances where they are checked, below; measured at
#      N = 2 only: 4 and 8 have not run)
#   3  fp8: every rank ends with the same fp8 state (amax slots, histories, scales), bit for bit
#   4  mpirun -np 2 (when mpirun exists and the build has MPI): nccl_check passes, and training gives
#      the -ngpu 2 run's losses, norms and final weights bit for bit
#   5  resume with N ranks is bit-exact (bf16, fp8): checkpoint files after 10 + 10 steps == after 20
#   6  refused before any rank starts: more ranks than GPUs; -d not a multiple of B*T*ranks
#   7  one GPU unchanged by the multi-GPU build: one-GPU runs of this trainer and of the same source
#      built without NCCL and MPI (or of BASE_SRC's / BASE_REV's trainer) write byte-identical
#      checkpoints and logs (bf16, fp8)
#   8  a rank that stops responding (SIGSTOP) mid-training ends the job, non-zero, within 60 s
#   9  SIGTERM, SIGUSR1 (Slurm's --signal=USR1@N) or SIGHUP to the launcher, or SIGTERM to rank 1
#      alone: both ranks stop after the same step with a checkpoint, naming the signal, exit 0; -y 1
#      then ends bit-identical to the uninterrupted run. Without -o, SIGTERM to the launcher: every
#      rank says "stopped by SIGTERM", exit 143
#  10  fp8 health counts summed over the ranks: one step with -fp8_log 1, N ranks vs 1 over the same
#      tokens (scripts/compare_logs.py health): every W fraction equal, X and dY underflow fractions
#      within a factor 1.5 (a rank's counts counted twice is a factor 2; with 2 ranks, one lost too)
#  11  a rank whose state file takes 15 s longer to write (fsync delayed by an LD_PRELOAD shim on
#      rank 1) with LLAMA_FP8_NCCL_TIMEOUT_S=5: the master-weight gather after the state files waits
#      under the I/O deadline, so the checkpoint completes and the run exits 0
set -u
cd "$(dirname "$0")/../.." || exit 2
[ -x .venv/bin/python3 ] && PATH="$PWD/.venv/bin:$PATH" # scripts/*.py need llama_fp8, which make venv installs there
LOG=${LOG_DIR:-log_mgpu}
mkdir -p "$LOG"
pass=0
fail=0
report() { # report PASS|FAIL|SKIP name [detail]
    printf '%-4s  %s%s\n' "$1" "$2" "${3:+  ($3)}"
    [ "$1" = PASS ] && pass=$((pass + 1))
    [ "$1" = FAIL ] && fail=$((fail + 1))
    return 0
}
finish() { echo "$pass passed, $fail failed"; [ "$fail" -eq 0 ]; exit $?; }
asked() { [ ${#checks[@]} -eq 0 ] && return 0; for c in "${checks[@]}"; do [ "$c" = "$1" ] && return 0; done; return 1; }
bitwise() { [ "$1" = 4 ] || [ "$1" = 5 ] || [ "$1" = 7 ] || [ "$1" = 9 ]; } # checks that compare runs bit for bit
want() { asked "$1" && ! { [ "${MGPU_DETERMINISTIC:-1}" = 0 ] && bitwise "$1"; }; }
checks=("$@")

if [ -n "${NCCL_NVLS_ENABLE:-}" ] && [ "$NCCL_NVLS_ENABLE" != 0 ]; then
    echo "NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE: NVLink multicast must stay off; unset it or set it to 0"
    exit 2
fi
export NCCL_NVLS_ENABLE=0
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if [ "$ngpus" -lt 2 ]; then echo "these checks need 2 GPUs; nvidia-smi lists $ngpus"; exit 2; fi
ns=()
for n in 2 4 8; do [ "$n" -le "$ngpus" ] && ns+=("$n"); done
echo "GPUs: $ngpus | comparisons at N = ${ns[*]} | logs in $LOG/ | NCCL_NVLS_ENABLE=$NCCL_NVLS_ENABLE"

# ---- build: the trainer and nccl_check with NCCL (MPI when found). A binary left by a build without
# NCCL looks up to date to make, so a missing libnccl forces a rebuild.
{ make train_llama_fp8 && { ldd train_llama_fp8 | grep -q libnccl || make -B train_llama_fp8; }; } > "$LOG/build.log" 2>&1
rm -f dev/cuda/nccl_check
make -k dev >> "$LOG/build.log" 2>&1 # -k: another dev program failing must not stop nccl_check
grep -E '^(cuDNN|NCCL|MPI):' "$LOG/build.log" | sort -u
if ! ldd train_llama_fp8 2>/dev/null | grep -q libnccl || ! ldd dev/cuda/nccl_check 2>/dev/null | grep -q libnccl; then
    tail -n 20 "$LOG/build.log"
    report FAIL "build with NCCL" "see $LOG/build.log: the Makefile must find NCCL for multi-GPU"
    finish
fi
nvcc_line=$(make -s -n -B train_llama_fp8 2>/dev/null | grep -F ' train_llama_fp8.cu ')
nvcc_line_single=$(make -s -n -B NO_NCCL=1 NO_MPI=1 train_llama_fp8 2>/dev/null | grep -F ' train_llama_fp8.cu ')

# ---- helpers
# the data named, not left to the defaults: check 7's older trainer has other default paths
ts=dev/data/tinyshakespeare
trainer_args="-e tiny -b 2 -t 128 -d 1024 -x 20 -l 3e-4 -u 5 -q 1.0 -c 0.1 -v 10 -m 2 -n 10 -s 20 -g 8 -seed 7
    -i $ts/tinyshakespeare_llama2_train.bin -j $ts/tinyshakespeare_llama2_val.bin -tok $ts/llama2_tokenizer.bin"
# our runs are compared bit for bit; MGPU_DETERMINISTIC=0 runs checks 2 and 3 with the trainer's
# fast default and skips 4, 5, 7 and 9. MGPU_TRAINER_ARGS: more flags for our runs (and for check 7's
# build without NCCL, the same source; not for BASE_SRC's or BASE_REV's), e.g. '-adam_moments fp32'
ours="-deterministic ${MGPU_DETERMINISTIC:-1} ${MGPU_TRAINER_ARGS:-}"
for c in 4 5 7 9; do
    asked $c && ! want $c && report SKIP "$c" "compares runs bit for bit: needs MGPU_DETERMINISTIC=1"
done
run() { # run NAME CMD...: output to $LOG/NAME.txt, returns the exit status
    local name=$1
    shift
    "$@" > "$LOG/$name.txt" 2>&1
}
# same_but_run_id A B: whether two checkpoint files hold the same bits but for the run id and the
# checksum over it (header words 252-255, bytes 1008-1023): two runs always differ there
same_but_run_id() { cmp -s <(head -c 1008 "$1") <(head -c 1008 "$2") && cmp -s <(tail -c +1025 "$1") <(tail -c +1025 "$2"); }
same_files() { # same_files DIR_A DIR_B FILE...: "" if every checkpoint FILE is the same in both (same_but_run_id), else what differs
    local a=$1 b=$2 out=""
    shift 2
    for f in "$@"; do same_but_run_id "$a/$f" "$b/$f" || out="$out $f"; done
    echo "$out"
}
# compare_logs A/main.log B/main.log MODE ...: per-step train loss, grad norm and val loss of two runs
# (scripts/compare_logs.py, which reads them with llama_fp8/trainer_log.py):
#   exact                       the same printed values (the runs must be bit-identical)
#   tol F1 L NF1 N              |rel diff|: step-1 loss <= F1, later losses <= L, step-1 norm <= NF1, later norms <= N
#   fp8 F1 NF1 N RATIO BF16_1 BF16_2   A the 2-rank fp8 run, B the 1-rank one: step 1 as tol; later losses
#                               within RATIO x what fp8 does to the 1-rank run (vs BF16_1), see check 2
compare_logs() { python3 scripts/compare_logs.py "$@"; }
# nargs N: the flags after $trainer_args of an N-rank comparison and of its 1-rank run (see the top)
nargs() {
    local d=1024
    [ $((256 * $1)) -gt $d ] && d=$((256 * $1))
    echo "-d $d -m $1"
}
# ref_dir N PREC: the 1-rank run N ranks are compared with (N = 2: r1_PREC, which checks 4 and 7 reuse)
ref_dir() { if [ "$1" = 2 ]; then echo "r1_$2"; else echo "r1_$2_vs$1"; fi; }

# ---- 0: the ZeRO-1 layout, host only
if want 0; then
    exe=dev/test/test_zero_layout
    if ! make -s "$exe" > "$LOG/zero_layout_check.build.txt" 2>&1; then
        report FAIL "0 ZeRO-1 bucket layout" "does not compile: $LOG/zero_layout_check.build.txt"
    elif run zero_layout_check "$exe"; then
        report PASS "0 ZeRO-1 bucket layout (host; tiny..llama3-8b and odd shapes, worlds 1-8)"
    else
        report FAIL "0 ZeRO-1 bucket layout" "$(grep FAIL "$LOG/zero_layout_check.txt" | head -n 3 | tr '\n' ' ')"
    fi
fi

# ---- 1: nccl_check, and a rank that dies
if want 1; then
    if run nccl_check dev/cuda/nccl_check -ngpu 2 && tail -n 1 "$LOG/nccl_check.txt" | grep -q 'ALL PASS'; then
        report PASS "1 nccl_check -ngpu 2" "$(grep -m1 -E '^bench all-reduce' "$LOG/nccl_check.txt" | tr -s ' ')"
    else
        report FAIL "1 nccl_check -ngpu 2" "$(tail -n 1 "$LOG/nccl_check.txt")"
    fi
    t0=$(date +%s%N)
    timeout 120 dev/cuda/nccl_check -ngpu 2 --kill-rank 1 --no-bench > "$LOG/nccl_check_kill.txt" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - t0) / 1000000))
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $ms -lt 60000 ]; then
        report PASS "1 nccl_check --kill-rank 1 ends the job" "exit $rc after $ms ms"
    else
        report FAIL "1 nccl_check --kill-rank 1 ends the job" "exit $rc after $ms ms; want non-zero within 60 s"
    fi
fi

# ---- 2, 3: 2 ranks vs 1 rank. The tolerances, from the sources of difference:
#  step 1, loss: the same weights and tokens through the same kernels with the same shapes, so every
#    per-token loss is identical; only the mean is formed differently (a double sum on one GPU; a
#    float mean per rank, summed in fp32 by NCCL). bf16: 1e-5 relative (float rounding, and %.6f
#    printing). fp8: rank 1's micro-batches are cast with scales from its own first one's amaxes
#    (the live first step) where one GPU uses micro-batch 0's, which changes which E4M3 value some
#    elements round to (<= 2^-4 relative each, averaging out over the batch): 1e-3.
#  step 1, norm: one GPU adds micro-batch gradients into bf16 in sequence; two ranks round their own
#    sums and NCCL rounds the total: <= 1 bf16 ulp (2^-8 relative) per element, of random sign, which
#    cancels in a norm over 20M elements: 1e-3 (bf16); fp8 also re-rounds as above: 1e-2.
#  later steps: the runs then differ by those roundings, carried through AdamW (which acts per element
#    on g / sqrt(v), so a 2^-8 relative change in g changes its step by about as much) and, in fp8,
#    by the amaxes and hence scales moving with the weights. Over 20 steps at lr 3e-4 that keeps
#    losses within 2% and norms within 5% in bf16. (At lr 1e-3 the tiny model on TinyShakespeare
#    has gradient-norm spikes that amplify those roundings chaotically: seen on 2 H200s, a norm of
#    7.46 vs 3.54 at step 10 with the losses still 1e-4 apart. The check is about the arithmetic of
#    data parallelism, so it trains where the trajectory is not chaotic.) A lost rank's gradient or a
#    missing 1/world shows as a factor ~2 in the norm; a missing bucket is check 0's business.
#  fp8, later steps: the 2-rank fp8 run must be much closer to the 1-rank fp8 run than the 1-rank fp8
#    run is to the 1-rank bf16 run: per step, the loss (train, val) within 0.25 x the largest relative
#    fp8-vs-bf16 gap of the 1-rank runs so far (plus 2 printed units). Why this and not "within the
#    gap": a 2-rank run whose GEMMs fell back to bf16 is the bf16 trajectory up to data-parallel
#    noise, so it sits one whole gap from the 1-rank fp8 run and passes any bound of a gap or more by
#    construction; a correct one casts with scales MAX-reduced over the same tokens one GPU sees
#    (identical on both ranks: check 3), so only the data-parallel roundings (and step 1's live
#    scales, above) separate them. That can only be
#    told apart when fp8's effect stands clear of the noise: the largest gap must be at least 4 x the
#    largest 2-rank vs 1-rank difference of the bf16 runs, else the check fails saying it cannot
#    tell. Step 1 keeps its bounds above. Norms after step 1 stay within max(5e-2, 2 x fp8's norm
#    gap): a norm follows every rounding chaotically (seen on 2 H200s at lr 1e-3: 16% apart at step 7
#    of 20 between 2 ranks and 1 in fp8), so it is the coarse factor-2 check, not the fp8 one.
#    Measured before this check (2 H200s, 2026-11-30): 2 vs 1 rank fp8 losses within 1.7e-4, bf16
#    2.4e-5; the 1-rank fp8-vs-bf16 gap of these runs was not recorded, so 0.25 has not yet been run.
if want 2 || want 3 || want 5; then
    for n in "${ns[@]}"; do
        na=$(nargs "$n")
        for prec in bf16 fp8; do
            extra=""
            [ $prec = fp8 ] && extra="-fp8_dump 1"
            r1=$(ref_dir "$n" $prec) rn=r${n}_$prec
            rm -rf "${LOG:?}/$r1" "${LOG:?}/$rn"
            run "$r1" ./train_llama_fp8 $trainer_args $na $ours -precision $prec -o "$LOG/$r1"
            rc1=$?
            run "$rn" ./train_llama_fp8 $trainer_args $na $ours -precision $prec -ngpu "$n" -o "$LOG/$rn" $extra
            rc2=$?
            if want 2; then
                if [ $rc1 -ne 0 ] || [ $rc2 -ne 0 ]; then
                    report FAIL "2 $prec: $n ranks vs 1 rank" "runs exited $rc1 (1 rank), $rc2 ($n ranks): see $LOG/$r1.txt, $LOG/$rn.txt"
                else
                    if [ $prec = bf16 ]; then tol="tol 1e-5 2e-2 1e-3 5e-2"
                    else tol="fp8 1e-3 1e-2 5e-2 0.25 $LOG/$(ref_dir "$n" bf16)/main.log $LOG/r${n}_bf16/main.log"; fi
                    out=$(compare_logs "$LOG/$rn/main.log" "$LOG/$r1/main.log" $tol)
                    if [ $? -eq 0 ]; then report PASS "2 $prec: $n ranks vs 1 rank, 20 steps" "$out"
                    else report FAIL "2 $prec: $n ranks vs 1 rank, 20 steps" "$out"; fi
                fi
            fi
        done
    done
fi
if want 3; then
    for n in "${ns[@]}"; do
        d="$LOG/r${n}_fp8" differ=""
        for r in $(seq 0 $((n - 1))); do
            if [ ! -f "$d/fp8_state_rank$r.bin" ]; then differ="$differ rank$r:missing"
            elif ! cmp -s "$d/fp8_state_rank0.bin" "$d/fp8_state_rank$r.bin"; then differ="$differ rank$r"; fi
        done
        if [ -n "$differ" ]; then
            report FAIL "3 fp8 state identical on all $n ranks" "differing from rank 0 or missing in $d:$differ"
        elif python3 -c "import array, sys; a = array.array('f', open(sys.argv[1], 'rb').read()); sys.exit(0 if sum(x != 0 for x in a) > len(a) // 2 else 1)" "$d/fp8_state_rank0.bin"; then
            report PASS "3 fp8 state identical on all $n ranks" "$(stat -c %s "$d/fp8_state_rank0.bin") bytes"
        else
            report FAIL "3 fp8 state identical on all $n ranks" "identical but mostly zero: no amax history was recorded"
        fi
    done
fi

# ---- 4: mpirun
if want 4; then
    if ! command -v mpirun > /dev/null; then
        report SKIP "4 mpirun -np 2" "no mpirun on this machine"
    elif ! ldd train_llama_fp8 | grep -q libmpi || ! ldd dev/cuda/nccl_check | grep -q libmpi; then
        report SKIP "4 mpirun -np 2" "the Makefile found no MPI, so the build cannot run under mpirun"
    else
        mpi=(mpirun --allow-run-as-root --bind-to none -np 2 -x NCCL_NVLS_ENABLE)
        if run mpi_nccl_check "${mpi[@]}" dev/cuda/nccl_check --no-bench && tail -n 1 "$LOG/mpi_nccl_check.txt" | grep -q 'ALL PASS'; then
            report PASS "4 mpirun -np 2 nccl_check"
        else
            report FAIL "4 mpirun -np 2 nccl_check" "$(tail -n 1 "$LOG/mpi_nccl_check.txt")"
        fi
        # two ranks add two bf16 values per element: the result does not depend on the order, so the
        # launcher cannot change a bit
        rm -rf "$LOG/mpi_bf16"
        [ -f "$LOG/r2_bf16/main.log" ] || run r2_bf16 ./train_llama_fp8 $trainer_args $ours -precision bf16 -ngpu 2 -o "$LOG/r2_bf16"
        if ! run mpi_bf16 "${mpi[@]}" ./train_llama_fp8 $trainer_args $ours -precision bf16 -o "$LOG/mpi_bf16"; then
            report FAIL "4 mpirun -np 2 training == -ngpu 2" "exit non-zero: $LOG/mpi_bf16.txt"
        else
            out=$(compare_logs "$LOG/mpi_bf16/main.log" "$LOG/r2_bf16/main.log" exact)
            rc=$?
            diff=$(same_files "$LOG/mpi_bf16" "$LOG/r2_bf16" model_00000020.bin)
            if [ $rc -eq 0 ] && [ -z "$diff" ]; then report PASS "4 mpirun -np 2 training == -ngpu 2" "losses, norms, final weights"
            else report FAIL "4 mpirun -np 2 training == -ngpu 2" "$out${diff:+ differing:$diff}"; fi
        fi
    fi
fi

# ---- 5: resume with N ranks: restart from check 2's step-10 checkpoint
if want 5; then
    for n in "${ns[@]}"; do
        na=$(nargs "$n")
        for prec in bf16 fp8; do
            a="$LOG/r${n}_$prec" b="$LOG/r${n}_${prec}_resumed"
            rm -rf "$b"
            mkdir -p "$b"
            states="" ok=1
            for r in $(seq 0 $((n - 1))); do
                states="$states $(printf 'state_00000020_%05d.bin' "$r")"
                cp "$a/$(printf 'state_00000010_%05d.bin' "$r")" "$b/" 2> /dev/null || ok=0
            done
            # the checkpoint with its marker, and the run it belongs to
            if [ $ok = 0 ] || ! cp "$a/model_00000010.bin" "$a/done_00000010" "$a/run_id" "$b/" 2> /dev/null; then
                report FAIL "5 $prec: resume with $n ranks is bit-exact" "no step-10 checkpoint in $a (check 2's run failed?)"
                continue
            fi
            extra=""
            [ $prec = fp8 ] && extra="-fp8_dump 1"
            if ! run "r${n}_${prec}_resumed" ./train_llama_fp8 $trainer_args $na $ours -precision $prec -ngpu "$n" -y 1 -o "$b" $extra; then
                report FAIL "5 $prec: resume with $n ranks is bit-exact" "exit non-zero: $LOG/r${n}_${prec}_resumed.txt"
                continue
            fi
            diff=$(same_files "$a" "$b" model_00000020.bin $states)
            # the straight run's log has steps 1-20, the resumed one 11-20: compare those
            grep -E '^s:(1[1-9]|20) ' "$a/main.log" > "$b/straight_11_20.log"
            out=$(compare_logs "$b/main.log" "$b/straight_11_20.log" exact)
            rc=$?
            if [ -z "$diff" ] && [ $rc -eq 0 ]; then report PASS "5 $prec: resume with $n ranks is bit-exact" "checkpoint files at step 20 identical"
            else report FAIL "5 $prec: resume with $n ranks is bit-exact" "${diff:+differing:$diff }$out"; fi
        done
    done
fi

# ---- 6: refusals
if want 6; then
    run refuse_gpus timeout 60 ./train_llama_fp8 -e tiny -ngpu $((ngpus + 1)) -o ''
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "GPUs on this node" "$LOG/refuse_gpus.txt" && ! grep -q "starting" "$LOG/refuse_gpus.txt"; then
        report PASS "6 -ngpu $((ngpus + 1)) refused" "$(grep -m1 error "$LOG/refuse_gpus.txt" | cut -c1-120)"
    else
        report FAIL "6 -ngpu $((ngpus + 1)) refused" "exit $rc: $LOG/refuse_gpus.txt"
    fi
    run refuse_batch timeout 60 ./train_llama_fp8 -e tiny -b 2 -t 128 -d 768 -ngpu 2 -o ''
    rc=$?
    if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "must be a multiple of B\*T\*ngpu" "$LOG/refuse_batch.txt" && ! grep -q "starting" "$LOG/refuse_batch.txt"; then
        report PASS "6 -d 768 with B*T*2 = 512 refused before launch"
    else
        report FAIL "6 -d 768 with B*T*2 = 512 refused before launch" "exit $rc: $LOG/refuse_batch.txt"
    fi
fi

# ---- 7: the single-GPU path against another build (the same runs as check 2's 1-rank ones). By
# default the other build is this very source compiled without NCCL and MPI, where multi_gpu.cuh is
# its single-GPU stub: a one-GPU run of the multi-GPU build must not differ from it by a bit (with
# NCCL compiled in, world 1 must still make no collective and take no path that touches the
# numbers). That cannot see a change both builds share; to compare with an older trainer (e.g. the one before multi-GPU) set
# BASE_SRC or BASE_REV. An older trainer without -deterministic is deterministic already; one with it
# gets -deterministic 1, whose default is the faster, not bit-reproducible 0. Both sides get the same
# AdamW moments: an older trainer with -adam_moments gets -adam_moments bf16 (its default may be
# fp32); against one from before it (fp32 only) ours runs again with -adam_moments fp32.
if want 7; then
    base="$LOG/base_src"
    rm -rf "$base"
    mkdir -p "$base"
    : > "$LOG/base_build.txt"
    if [ -n "${BASE_SRC:-}" ]; then
        mode=src vs=$BASE_SRC
        cp -r llmc "$base/" 2> "$LOG/base_build.txt" && cp "$BASE_SRC" "$base/train_llama_fp8.cu" 2> "$LOG/base_build.txt"
        got=$?
    elif [ -n "${BASE_REV:-}" ]; then
        mode=rev vs=$BASE_REV
        if git rev-parse --git-dir > /dev/null 2>&1; then
            git archive "$BASE_REV" train_llama_fp8.cu llmc | tar -x -C "$base" 2> "$LOG/base_build.txt"
            got=$?
        else
            got=2
            echo "no git repository here: set BASE_SRC to the trainer to compare with" > "$LOG/base_build.txt"
        fi
    else
        mode=no_nccl vs="the build without NCCL"
        cp -r llmc train_llama_fp8.cu "$base/" 2> "$LOG/base_build.txt"
        got=$?
    fi
    base_build=$nvcc_line base_args="" ours7=$ours r1=r1
    if [ $mode = no_nccl ]; then
        base_build=$nvcc_line_single base_args=$ours
    else
        grep -q '"-deterministic"' "$base/train_llama_fp8.cu" 2> /dev/null && base_args="-deterministic 1"
        if grep -q '"-adam_moments"' "$base/train_llama_fp8.cu" 2> /dev/null; then
            base_args="$base_args -adam_moments bf16"
        else
            ours7="$ours -adam_moments fp32" r1=r1_fp32m
        fi
    fi
    if [ $mode != no_nccl ] && [ -n "${MGPU_TRAINER_ARGS:-}" ]; then
        report SKIP "7 one GPU unchanged vs $vs" "MGPU_TRAINER_ARGS is set: our runs differ from the base trainer's on purpose"
    elif [ $got -ne 0 ]; then
        report SKIP "7 one GPU unchanged vs $vs" "no base trainer: $(head -n 1 "$LOG/base_build.txt")"
    elif [ $mode = no_nccl ] && [ "$nvcc_line_single" = "$nvcc_line" ]; then
        report FAIL "7 one GPU unchanged vs $vs" "make NO_NCCL=1 NO_MPI=1 builds the same command: nothing to leave out"
    elif [ $mode != no_nccl ] && cmp -s "$base/train_llama_fp8.cu" train_llama_fp8.cu && diff -rq "$base/llmc" llmc > /dev/null 2>&1; then
        report SKIP "7 one GPU unchanged vs $vs" "its train_llama_fp8.cu and llmc/ are this tree's: set BASE_SRC or BASE_REV to an older trainer, or neither"
    elif ! (cd "$base" && eval "$base_build") >> "$LOG/base_build.txt" 2>&1; then
        report FAIL "7 one GPU unchanged vs $vs" "the base trainer does not build: $LOG/base_build.txt"
    else
        for prec in bf16 fp8; do
            [ "$r1" = r1_fp32m ] && rm -rf "$LOG/${r1}_$prec" # check 2 makes r1_$prec; nothing remakes this one
            [ -f "$LOG/${r1}_$prec/main.log" ] || run ${r1}_$prec ./train_llama_fp8 $trainer_args $ours7 -precision $prec -o "$LOG/${r1}_$prec"
            rm -rf "$LOG/base_$prec"
            if ! run base_$prec "$base/train_llama_fp8" $trainer_args $base_args -precision $prec -o "$LOG/base_$prec"; then
                report FAIL "7 $prec: one GPU unchanged vs $vs" "the base run failed: $LOG/base_$prec.txt"
                continue
            fi
            diff=$(same_files "$LOG/base_$prec" "$LOG/${r1}_$prec" model_00000010.bin model_00000020.bin state_00000020_00000.bin)
            out=$(compare_logs "$LOG/${r1}_$prec/main.log" "$LOG/base_$prec/main.log" exact)
            rc=$?
            if [ -z "$diff" ] && [ $rc -eq 0 ]; then report PASS "7 $prec: one GPU unchanged vs $vs" "checkpoints byte-identical"
            else report FAIL "7 $prec: one GPU unchanged vs $vs" "${diff:+differing:$diff }$out"; fi
        done
    fi
fi

# ---- 8: a rank that hangs. The collective timeout is 10 s here; the launcher then needs up to 5 s
# to end the stopped rank.
if want 8; then
    rm -rf "$LOG/hang"
    LLAMA_FP8_NCCL_TIMEOUT_S=10 ./train_llama_fp8 -e tiny -b 2 -t 128 -d 1024 -x 100000 -v 0 -s 0 -precision bf16 \
        -ngpu 2 -o "$LOG/hang" > "$LOG/hang.txt" 2>&1 &
    launcher=$!
    for _ in $(seq 240); do # up to 120 s for 3 steps (start-up included)
        [ "$(cat "$LOG/hang/main.log" 2> /dev/null | grep -c '^s:')" -ge 3 ] && break
        kill -0 $launcher 2> /dev/null || break
        sleep 0.5
    done
    rank1=""
    for d in /proc/[0-9]*; do
        [ "$(awk '{print $4}' "$d/stat" 2> /dev/null)" = "$launcher" ] || continue
        tr '\0' '\n' < "$d/environ" 2> /dev/null | grep -qx 'LLAMA_FP8_RANK=1' && rank1=${d#/proc/}
    done
    if [ -z "$rank1" ]; then
        kill -KILL $launcher 2> /dev/null
        wait $launcher 2> /dev/null
        report FAIL "8 a stopped rank ends the job" "rank 1 not found running: $LOG/hang.txt"
    else
        kill -STOP "$rank1"
        t0=$(date +%s)
        while kill -0 $launcher 2> /dev/null && [ $(($(date +%s) - t0)) -lt 90 ]; do sleep 0.5; done
        if kill -0 $launcher 2> /dev/null; then # still running: clean up (the ranks die with the launcher)
            kill -KILL $launcher
            kill -KILL "$rank1" 2> /dev/null
            wait $launcher 2> /dev/null
            report FAIL "8 a stopped rank ends the job" "still running after 90 s: $LOG/hang.txt"
        else
            wait $launcher
            rc=$?
            secs=$(($(date +%s) - t0))
            if [ $rc -ne 0 ] && [ $secs -le 60 ]; then
                report PASS "8 a stopped rank ends the job" "exit $rc after ${secs} s: $(grep -m1 'rank 0 of 2' "$LOG/hang.txt" | cut -c1-140)"
            else
                report FAIL "8 a stopped rank ends the job" "exit $rc after ${secs} s: $LOG/hang.txt"
            fi
        fi
    fi
fi
# ---- 9: a stop signal (llmc/stop_signal.h) to the launcher, or to rank 1 alone: every rank stops
# after the same step with a checkpoint, exit 0; -y 1 then ends bit-identical to the uninterrupted run
if want 9; then
    sig_args="$trainer_args -x 200 -n 0 -v 100 -s 0 $ours -precision fp8 -ngpu 2"
    rm -rf "$LOG/sig_full"
    if ! run sig_full ./train_llama_fp8 $sig_args -o "$LOG/sig_full"; then
        report FAIL "9 stop signal with 2 ranks" "the uninterrupted run failed: $LOG/sig_full.txt"
    else
        for target in launcher rank1 launcher_USR1 launcher_HUP; do
            sig=TERM
            case $target in launcher_*) sig=${target#launcher_} ;; esac
            d="$LOG/sig_$target"
            rm -rf "$d"
            ./train_llama_fp8 $sig_args -o "$d" > "$LOG/sig_$target.txt" 2>&1 &
            launcher=$!
            for _ in $(seq 1200); do # up to 120 s for 20 steps (start-up included)
                [ "$(grep -c '^s:' "$d/main.log" 2> /dev/null)" -ge 20 ] && break
                kill -0 $launcher 2> /dev/null || break
                sleep 0.1
            done
            pid=$launcher
            if [ $target = rank1 ]; then
                pid=""
                for p in /proc/[0-9]*; do
                    [ "$(awk '{print $4}' "$p/stat" 2> /dev/null)" = "$launcher" ] || continue
                    tr '\0' '\n' < "$p/environ" 2> /dev/null | grep -qx 'LLAMA_FP8_RANK=1' && pid=${p#/proc/}
                done
            fi
            if [ -z "$pid" ] || ! kill -"$sig" "$pid" 2> /dev/null; then
                kill -KILL $launcher 2> /dev/null
                wait $launcher 2> /dev/null
                report FAIL "9 SIG$sig to the $target" "no process to signal: $LOG/sig_$target.txt"
                continue
            fi
            wait $launcher
            rc=$?
            step=$(sed -nE "s/^stopped by SIG$sig after step ([0-9]+) of 200\\..*/\\1/p" "$LOG/sig_$target.txt")
            k=$(printf %08d "${step:-0}")
            if [ $rc -ne 0 ] || [ -z "$step" ] || [ ! -f "$d/model_$k.bin" ] || [ ! -f "$d/state_${k}_00000.bin" ] \
                || [ ! -f "$d/state_${k}_00001.bin" ] || ls "$d" | grep -q '\.tmp$'; then
                report FAIL "9 SIG$sig to the $target" "exit $rc, stop step '${step}' (the line must name SIG$sig): $LOG/sig_$target.txt"
                continue
            fi
            if ! run sig_${target}_resumed ./train_llama_fp8 $sig_args -o "$d" -y 1; then
                report FAIL "9 SIG$sig to the $target" "resume failed: $LOG/sig_${target}_resumed.txt"
                continue
            fi
            diff=$(same_files "$LOG/sig_full" "$d" model_00000200.bin state_00000200_00000.bin state_00000200_00001.bin)
            if [ -z "$diff" ]; then report PASS "9 SIG$sig to the $target" "both ranks stopped after step $step, exit 0; resumed run bit-identical at step 200"
            else report FAIL "9 SIG$sig to the $target" "resumed run differs:$diff"; fi
        done
    fi
    # no log directory: nothing saved, so the stop is no success: 128 + 15, under the real signal's name
    ./train_llama_fp8 $sig_args -o '' > "$LOG/sig_nodir.txt" 2>&1 &
    launcher=$!
    for _ in $(seq 1200); do
        [ "$(grep -c '^step ' "$LOG/sig_nodir.txt" 2> /dev/null)" -ge 20 ] && break
        kill -0 $launcher 2> /dev/null || break
        sleep 0.1
    done
    kill -TERM $launcher 2> /dev/null
    wait $launcher
    rc=$?
    if [ $rc = 143 ] && grep -q "^stopped by SIGTERM after step [0-9]* of 200: no checkpoint written" "$LOG/sig_nodir.txt" \
        && ! grep -qE "second signal|exited with status" "$LOG/sig_nodir.txt"; then
        report PASS "9 SIGTERM to the launcher, -o ''" "exit 143, stopped by SIGTERM"
    else
        report FAIL "9 SIGTERM to the launcher, -o ''" "exit $rc (want 143): $LOG/sig_nodir.txt"
    fi
fi
# ---- 10: fp8 health counts summed over the ranks (check 2's set-up, one step)
if want 10; then
    for n in "${ns[@]}"; do
        h1="health_r1_vs$n" hn="health_r$n" na=$(nargs "$n")
        rm -rf "${LOG:?}/$h1" "${LOG:?}/$hn"
        if ! run "$h1" ./train_llama_fp8 $trainer_args $na $ours -precision fp8 -x 1 -fp8_log 1 -o "$LOG/$h1" \
            || ! run "$hn" ./train_llama_fp8 $trainer_args $na $ours -precision fp8 -x 1 -fp8_log 1 -ngpu "$n" -o "$LOG/$hn"; then
            report FAIL "10 fp8 health summed over $n ranks" "a run failed: $LOG/$h1.txt, $LOG/$hn.txt"
        else
            out=$(compare_logs "$LOG/$hn/fp8.log" "$LOG/$h1/fp8.log" health)
            if [ $? -eq 0 ]; then report PASS "10 fp8 health summed over $n ranks" "$out"
            else report FAIL "10 fp8 health summed over $n ranks" "$out"; fi
        fi
    done
fi
# ---- 11: the gather after the state files waits under the I/O deadline. An LD_PRELOAD shim delays
# rank 1's fsync of its state file by 15 s (rank 1 writes no other file); the collective timeout is
# 5 s, so a gather waiting under it would end the job.
if want 11; then
    shim="$LOG/slow_fsync.so"
    cat > "$LOG/slow_fsync.c" << 'EOF'
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
int fsync(int fd) {
    static int (*real)(int) = NULL;
    if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
    const char *r = getenv("LLAMA_FP8_RANK");
    if (r && strcmp(r, "1") == 0) sleep(15);
    return real(fd);
}
EOF
    if ! gcc -shared -fPIC -O2 -o "$shim" "$LOG/slow_fsync.c" -ldl > "$LOG/slow_fsync.build.txt" 2>&1; then
        report FAIL "11 a slow state-file write (rank 1, 15 s) with a 5 s collective timeout" "the shim does not build: $LOG/slow_fsync.build.txt"
    else
        rm -rf "$LOG/slow_write"
        t0=$(date +%s)
        LD_PRELOAD=$PWD/$shim LLAMA_FP8_NCCL_TIMEOUT_S=5 run slow_write ./train_llama_fp8 $trainer_args $ours -precision bf16 -x 2 -n 0 -v 0 -s 0 \
            -ngpu 2 -o "$LOG/slow_write"
        rc=$?
        secs=$(($(date +%s) - t0))
        if [ $rc = 0 ] && [ -f "$LOG/slow_write/model_00000002.bin" ] && [ "$secs" -ge 15 ]; then
            report PASS "11 a slow state-file write (rank 1, 15 s) with a 5 s collective timeout" "checkpoint complete, exit 0 after $secs s"
        else
            report FAIL "11 a slow state-file write (rank 1, 15 s) with a 5 s collective timeout" "exit $rc after $secs s: $LOG/slow_write.txt"
        fi
    fi
fi
finish
