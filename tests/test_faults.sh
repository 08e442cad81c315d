#!/usr/bin/env bash
# Faults that must never cost a run its checkpoints (issue 11), each one line on stderr, a non-zero exit on
# every rank, no hang, and the previous checkpoint intact (`latest` names it, it verifies, no *.tmp is left):
#   1. the disk fills during a save (a tmpfs mounted here, as root; skipped with one line elsewhere): 1 rank,
#      2 ranks (tp 2 collective, cp 2 independent MPI-IO), 4 ranks collective; without the space reservation
#      (test hook) the failed writes and the lost ones (collective MPI-IO) are caught too, also when the disk
#      fills at the very end of a save (HDF5's metadata, latest.tmp); a filler file deleted in the middle of
#      a save with --keep_last 1; build/reshard on a full disk;
#   2. poisoned weights: config values out of the float range; inf/NaN parameters are never saved, nor named
#      by `latest`, nor cost the previous checkpoint (--keep_last 1);
#   3. checkpoint metadata is checked: step, adam_t, data_cursor, tokens_seen out of range or altered (h5py), for
#      --resume and reshard --verify; one byte 0xFF at offset 1023; a fuzz of a few hundred mutants of a tiny
#      checkpoint through build/train --resume, build/eval and build/reshard --verify (bounded time);
#   4. build/reshard --out X.h5 X.h5.tmp leaves its input alone.
cd "$(dirname "$0")/.."
source tests/lib.sh
CK=tests/ckpt_check.py
MOUNTS=()
faults_exit() { local m; for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done; lib_exit; }
trap faults_exit EXIT

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/g.conf" <<CONF
vocab_size = 257
d_model = 64
n_layer = 2
n_head = 8
n_kv_head = 4
d_ff = 96
max_seq_len = 128
seq_len = 64
batch_size = 8
max_steps = 4
lr = 3e-3
warmup_steps = 2
train_data = $T/data
CONF
CONF=$T/g.conf   # a checkpoint of this model is 1.17 MB (1.3 MB reserved while it is written)

# intact DESC DIR NAME STEP: DIR/latest names NAME, which holds step STEP and every checksum verifies (h5py),
# and no *.tmp is left in DIR
intact() {
  local d=$1 dir=$2 name=$3 step=$4 lt left
  lt=$(cat "$dir/latest" 2>/dev/null); left=$(cd "$dir" 2>/dev/null && ls -- *.tmp 2>/dev/null | tr '\n' ' ')
  if [ "$lt" != "$name" ]; then bad "$d: latest = '$lt', want $name ($(ls "$dir" 2>/dev/null | tr '\n' ' '))"
  elif [ -n "$left" ]; then bad "$d: left over: $left"
  else check "$d: latest still names $name, which verifies; no *.tmp left" $PY $CK verify "$dir/$name" "$step"; fi
}
OMPIO_NOISE='^mca_fbtl_posix_pwritev\|^vulcan_write_all'   # Open MPI's own lines when a write fails (no reservation)

# ---- 1. disk full during a save ---------------------------------------------------------------------------
can_mount=0
if [ "$(id -u)" -eq 0 ] && mkdir -p "$T/probe" && mount -t tmpfs -o size=1m tmpfs "$T/probe" 2>/dev/null; then
  umount "$T/probe"; can_mount=1
fi
mnt() { mkdir -p "$T/$1" && mount -t tmpfs -o size="$2" tmpfs "$T/$1" && MOUNTS+=("$T/$1"); }   # NAME SIZE

# full NAME NP ARGS...: on a 3 MB tmpfs with --ckpt_every 1 steps 1 and 2 are saved and step 3's save fails
full() {
  local name=$1 np=$2; shift 2
  mnt "$name" 3m || { bad "$name: cannot mount"; return; }
  ERR_ALSO='! grep -q "ckpt_00000003.h5 (" "$T/o"' \
    expect_err "disk full, $name" "ckpt_00000003.h5.tmp|the previous checkpoint is untouched" "$np" \
    build/train -c "$CONF" --out_dir "$T/$name/run" --ckpt_every 1 "$@"
  intact "disk full, $name" "$T/$name/run" ckpt_00000002.h5 2
}

# filler NAME ARGS...: 4 ranks, --keep_last 1 --max_steps 2; a filler leaves room for one checkpoint and
# 0.4 MB; it is deleted 1.2 s into the second save (each dataset write slowed by 30 ms: about 0.7 s in, the
# disk is full). The save must fail with one line and leave checkpoint 1 as `latest` — or, should the space
# have come back before it was needed, succeed with a complete checkpoint 2.
filler() {
  local name=$1; shift
  mnt "$name" 4m || { bad "$name: cannot mount"; return; }
  local D="$T/$name/run" avail i
  avail=$(df -B1 --output=avail "$T/$name" | tail -n 1)
  head -c $((avail - 1600000)) /dev/zero > "$T/$name/filler"
  RINGLM_TEST_CKPT_SLOW_MS=30 in_session "$T/$name.sid" timeout $HANG_S $(launch 4) build/train -c "$CONF" --out_dir "$D" \
    --tp 2 --cp 2 --ckpt_every 1 --keep_last 1 --max_steps 2 "$@" >"$T/$name.out" 2>"$T/$name.err" &
  local job=$!
  local end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do [ -e "$D/ckpt_00000002.h5.tmp" ] && break; kill -0 $job 2>/dev/null || break; sleep 0.01; done
  sleep 1.2; rm -f "$T/$name/filler"
  wait $job; local rc=$?
  rm -f "$T/$name.sid"
  local n; n=$(grep -v -- "$OMPIO_NOISE" "$T/$name.err" | grep -c '')
  if [ $rc -eq 0 ]; then
    intact "filler deleted mid-save, $name: the save succeeded (space came back in time)" "$D" ckpt_00000002.h5 2
  elif [ $rc -ne 124 ] && [ "$n" -eq 1 ] && grep -q "the previous checkpoint is untouched" "$T/$name.err"; then
    ok "filler deleted mid-save, $name: $(grep -v -- "$OMPIO_NOISE" "$T/$name.err" | sed "s|$T/||g")"
    intact "filler deleted mid-save, $name" "$D" ckpt_00000001.h5 1
  else bad "filler deleted mid-save, $name: exit $rc, $n stderr lines: $(head -c 400 "$T/$name.err" | sed "s|$T/||g")"; fi
}

train_run src 1 --max_steps 3 --ckpt_every 3   # the step-3 checkpoint of sections 1 and 3
SRC=$T/src/ckpt_00000003.h5
if [ $can_mount -eq 1 ]; then
  full 1rank 1
  full tp2 2 --tp 2
  full cp2_independent 2 --cp 2 --ckpt_io independent
  full tp2_cp2 4 --tp 2 --cp 2
  RINGLM_TEST_CKPT_NO_RESERVE=1 ERR_SKIP=$OMPIO_NOISE full 1rank_noreserve 1
  RINGLM_TEST_CKPT_NO_RESERVE=1 ERR_SKIP=$OMPIO_NOISE full tp2_cp2_noreserve 4 --tp 2 --cp 2
  # the disk fills at the very end of a save (the last data, HDF5's metadata at flush and close, latest.tmp):
  # no reservation, a filler leaves room for one checkpoint +8 KiB ... -16 KiB. Each save fails with one line
  # and leaves nothing (or, if it fit after all, is complete)
  if mnt end 3m; then
    size=$(stat -c %s "$SRC"); endres=""
    for d in -8 -4 0 4 8 12 16; do
      rm -rf "$T/end/run" "$T/end/filler"; avail=$(df -B1 --output=avail "$T/end" | tail -n 1)
      head -c $((avail - size - 8192 + d * 1024)) /dev/zero > "$T/end/filler"
      RINGLM_TEST_CKPT_NO_RESERVE=1 timeout $HANG_S build/train -c "$CONF" --out_dir "$T/end/run" --max_steps 0 >"$T/o" 2>"$T/e1"; rc=$?
      grep -v -- "$OMPIO_NOISE" "$T/e1" >"$T/e"   # (Open MPI's own line for a failed write: no reservation)
      left=$(ls "$T/end/run" | grep '^ckpt_\|^latest' | tr '\n' ' ')
      if [ $rc -eq 1 ] && [ "$(grep -c '' "$T/e")" -eq 1 ] && [ -z "$left" ]; then endres+="$d: $(sed "s|'[^']*/|'|g; s/^checkpoint: //; s/ (.*//; s/;.*//" "$T/e" | cut -c1-60); "
      elif [ $rc -eq 0 ] && $PY $CK verify "$T/end/run/ckpt_00000000.h5" 0 >/dev/null 2>&1; then endres+="$d: saved; "
      else bad "disk full at the end of a save (room for a checkpoint - $d KiB), no reservation: exit $rc, left '$left': $(head -c 300 "$T/e" | sed "s|$T/||g")"; endres=""; break; fi
    done
    [ -n "$endres" ] && ok "disk full at the end of a save (room for a checkpoint - N KiB), no reservation: one line, nothing left: ${endres% }"
  else bad "end: cannot mount"; fi
  filler filler
  RINGLM_TEST_CKPT_NO_RESERVE=1 filler filler_noreserve
  for nr in 0 1; do   # reshard into a 1 MB tmpfs: the output does not fit
    mnt "rs$nr" 1m || { bad "rs$nr: cannot mount"; continue; }
    ERR_RC=1 ERR_ALSO='[ -z "$(ls "$T/rs'$nr'")" ]' RINGLM_TEST_CKPT_NO_RESERVE=$nr \
      expect_err "reshard on a full disk$([ $nr -eq 1 ] && echo ', no reservation'): nothing left, the input not blamed" \
      "rs$nr/out.h5.tmp|disk full" 1 build/reshard --tp 2 --out "$T/rs$nr/out.h5" "$SRC"
  done
else
  echo "skip disk-full checks: mounting a tmpfs needs root and mount permission (uid $(id -u))"
fi

# ---- 2. poisoned weights -----------------------------------------------------------------------------------
PD="$T/poison"
expect_err "--lr 1e39 (inf as a float)" "'lr'|1e39|float range" 1 build/train -c "$CONF" --out_dir "$PD/a" --lr 1e39
expect_err "--init_std 1e39 --max_steps 0" "'init_std'|1e39|float range" 1 build/train -c "$CONF" --out_dir "$PD/b" --init_std 1e39 --max_steps 0
ERR_ALSO='[ ! -e "$PD/c/latest" ] && [ -z "$(ls "$PD/c" | grep h5)" ]' \
  expect_err "--init_std 3e38 --max_steps 0 (finite, but inf weights): nothing saved" "not saving step 0|inf or NaN" 1 \
  build/train -c "$CONF" --out_dir "$PD/c" --init_std 3e38 --max_steps 0
ERR_ALSO='[ ! -e "$PD/d/latest" ] && [ -z "$(ls "$PD/d" | grep h5)" ]' \
  expect_err "--lr 3.4e38 --max_steps 1: nothing saved" "not saving step 1|inf or NaN" 1 \
  build/train -c "$CONF" --out_dir "$PD/d" --lr 3.4e38 --warmup_steps 0 --max_steps 1
if train_run poison_keep 1 --out_dir "$PD/e" --max_steps 1; then
  expect_err "--lr 3.4e38 --ckpt_every 1 --keep_last 1 after a good step-1 checkpoint" "not saving step 2|inf or NaN" 1 \
    build/train -c "$CONF" --out_dir "$PD/e" --resume latest --lr 3.4e38 --min_lr 3.4e38 --warmup_steps 0 --max_steps 3 \
    --ckpt_every 1 --keep_last 1
  intact "poisoned step 2" "$PD/e" ckpt_00000001.h5 1
fi

# ---- 3. checkpoint metadata --------------------------------------------------------------------------------
M="$T/meta"; mkdir -p "$M"
mut() {  # NAME ATTR VALUE: $M/NAME.h5 = the step-3 checkpoint with the root attribute ATTR = int64 VALUE (h5py)
  cp "$SRC" "$M/$1.h5" && $PY -c "import h5py, sys, numpy as np
with h5py.File(sys.argv[1], 'r+') as f: f.attrs[sys.argv[2]] = np.int64(int(sys.argv[3]))" "$M/$1.h5" "$2" "$3"
}
meta() {  # NAME ATTR VALUE PATTERN: --resume and reshard --verify refuse the edited file naming it
  mut "$1" "$2" "$3" || { bad "making $1"; return; }
  ERR_ALSO='! grep -q "^step " "$T/o"' expect_err "--resume, $2 = $3" "$1.h5|$4" 1 \
    build/train -c "$CONF" --out_dir "$M/run_$1" --resume "$M/$1.h5" --max_steps 6
  ERR_RC=1 expect_err "reshard --verify, $2 = $3" "$1.h5|$4" 1 build/reshard --verify "$M/$1.h5"
}
meta neg_step step -3 "'step' = -3 is out of range"
meta big_step step $(( (1 << 32) + 2 )) "'step' = 4294967298 is out of range"
meta neg_adam adam_t -1 "'adam_t' = -1 is out of range"
meta big_cursor data_cursor $(( 1 << 62 )) "'data_cursor' = 4611686018427387904 is out of range"
meta alt_step step 5 "state_checksum mismatch"
meta alt_tokens tokens_seen 1600 "'tokens_seen' = 1600 is not data_cursor x seq_len"

# a tiny checkpoint (150 KB): one byte 0xFF at offset 1023, then the fuzz
cat > "$T/t.conf" <<CONF
vocab_size = 257
d_model = 16
n_layer = 1
n_head = 2
n_kv_head = 1
d_ff = 32
max_seq_len = 64
seq_len = 32
batch_size = 2
max_steps = 1
train_data = $T/data
CONF
if timeout $HANG_S build/train -c "$T/t.conf" --out_dir "$T/tiny" >/dev/null 2>"$T/tiny.err"; then
  TINY=$T/tiny/ckpt_00000001.h5
  $PY -c "import sys; d = bytearray(open(sys.argv[1], 'rb').read()); d[1023] = 0xFF; open(sys.argv[2], 'wb').write(d)" "$TINY" "$M/ff1023.h5"
  expect_err "byte 0xFF at offset 1023: --resume" "ff1023.h5" 1 build/train -c "$T/t.conf" --out_dir "$M/run_ff" --resume "$M/ff1023.h5" --max_steps 2
  ERR_RC=1 expect_err "byte 0xFF at offset 1023: reshard --verify" "ff1023.h5" 1 build/reshard --verify "$M/ff1023.h5"
  expect_err "byte 0xFF at offset 1023: eval" "ff1023.h5" 1 build/eval --ckpt "$M/ff1023.h5" --data "$T/data" --seq_len 32 --out "$M/ev_ff"
  # the fuzz: FAULTS_FUZZ_N mutants (default 200), mostly of the metadata, FAULTS_FUZZ_SEED (default 11); each run
  # is bounded by a timeout that catches a hang (300 s; the programs' own structure check by 60 s); the runs mostly wait for MPI to start
  RINGLM_CKPT_CHECK_TIMEOUT_S=60 check "fuzz: mutants of a tiny checkpoint through train --resume, eval, reshard --verify" \
    $PY tests/fault_fuzz.py --src "$TINY" --dir "$T/fuzz" --n "${FAULTS_FUZZ_N:-200}" --seed "${FAULTS_FUZZ_SEED:-11}" \
    --jobs 8 --timeout 300 \
    --cmd "build/train -c $T/t.conf --out_dir {}.out --resume {} --max_steps 1" \
    --cmd "build/eval --ckpt {} --data $T/data --seq_len 32 --out {}.ev" \
    --cmd "build/reshard --verify {}"
else bad "tiny checkpoint: $(head -c 300 "$T/tiny.err")"; fi

# ---- 4. reshard --out X.h5 X.h5.tmp -----------------------------------------------------------------------
cp "$SRC" "$T/X.h5.tmp" && cp "$SRC" "$T/X.orig"
ERR_RC=1 expect_err "reshard --out X.h5 X.h5.tmp" "X.h5.tmp|is the input checkpoint" 1 build/reshard --tp 2 --out "$T/X.h5" "$T/X.h5.tmp"
cmp -s "$T/X.h5.tmp" "$T/X.orig" && [ ! -e "$T/X.h5" ] && ok "reshard --out X.h5 X.h5.tmp: the input is untouched, nothing written" \
  || bad "reshard --out X.h5 X.h5.tmp: input $( [ -e "$T/X.h5.tmp" ] && echo changed || echo deleted ), X.h5 $( [ -e "$T/X.h5" ] && echo written || echo absent)"
finish
