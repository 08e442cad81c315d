#!/usr/bin/env bash
# HDF5 checkpoints (checkpoint/FORMAT.md): bit-exact resume in the same layout (1 rank; tp 2 x cp 2 x dp 2
# with ZeRO-1), resume across layouts (losses within 1e-5 relative, final weights within 1e-5 of one
# uninterrupted process), keep_last, the documented file contents read with h5py (names, shapes, attributes,
# xsum64 recomputed, tensors equal to the trainer's), kill -9 in the middle of a save, bad checkpoints
# refused with one line and without touching the out_dir, and training keys changed on resume.
cd "$(dirname "$0")/.."
source tests/lib.sh
CK=tests/ckpt_check.py

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
# warmup_steps 4: the learning rates of steps 1-3 do not depend on max_steps, so a run stopped at max_steps 3
# writes the same step-3 checkpoint as a 6-step run; steps 5-6 follow the cosine decay (the schedule position
# must be restored)
cat > "$T/g.conf" <<CONF
vocab_size = 257       # not divisible by tp = 2 or 4: the vocabulary is padded (never stored)
d_model = 64
n_layer = 2
n_head = 8
n_kv_head = 4
d_ff = 96
max_seq_len = 128
seq_len = 64
batch_size = 8
micro_batch = 1
max_steps = 6
lr = 3e-3
warmup_steps = 4
adam_eps = 1e-6        # see test_cp.sh
train_data = $T/data
CONF
CONF=$T/g.conf               # for train_run (lib.sh)
L8=(--tp 2 --cp 2 --zero 1)   # 8 ranks: tp 2 x cp 2 x dp 2, ZeRO-1
ck() { $PY $CK "$@"; }

# ---- 1. bit-exact resume in the same layout ----
for L in 1 8; do
  if [ $L -eq 1 ]; then lay=(); else lay=("${L8[@]}"); fi
  u=u$L n=n$L s=s$L
  train_run $u $L "${lay[@]}" --ckpt_every 3 || continue
  # (a) --resume FILE into a new out_dir
  if train_run $n $L "${lay[@]}" --ckpt_every 3 --resume "$T/$u/ckpt_00000003.h5"; then
    grep -q "^resumed from $T/$u/ckpt_00000003.h5: step 3, data cursor 24, 1536 tokens seen" "$T/$n.out" \
      && ok "$L rank(s): resume line: $(grep -m1 '^resumed from' "$T/$n.out" | sed "s|$T/||")" || bad "$L rank(s): resume line missing"
    check "$L rank(s), --resume FILE, new out_dir: losses of steps 4-6 identical" ck losses "$T/$n/metrics.jsonl" "$T/$u/metrics.jsonl" 4 6 --exact
    check "$L rank(s), --resume FILE: final weights bit-identical" $PY tests/compare_dumps.py "$T/$n.dump" "$T/$u.dump" --abs 0
    check "$L rank(s), --resume FILE: step-6 checkpoint (weights and AdamW moments) bit-identical" ck same "$T/$n/ckpt_00000006.h5" "$T/$u/ckpt_00000006.h5"
    [ "$(grep -c '"step"' "$T/$n/metrics.jsonl")" -eq 3 ] && ok "$L rank(s): the resumed run logged steps 4-6 only" || bad "$L rank(s): resumed metrics: $(cut -c1-20 "$T/$n/metrics.jsonl" | tr '\n' ' ')"
  fi
  # (b) a run stopped after step 3, then --resume latest in the same out_dir
  train_run ${s}a $L "${lay[@]}" --ckpt_every 3 --max_steps 3 --out_dir "$T/$s" && \
  check "$L rank(s): a 3-step run's checkpoint equals the 6-step run's step-3 checkpoint" ck same "$T/$s/ckpt_00000003.h5" "$T/$u/ckpt_00000003.h5" && \
  train_run ${s}b $L "${lay[@]}" --ckpt_every 3 --out_dir "$T/$s" --resume latest && {
    check "$L rank(s), --resume latest, same out_dir: losses of steps 4-6 identical" ck losses "$T/$s/metrics.jsonl" "$T/$u/metrics.jsonl" 4 6 --exact
    check "$L rank(s), --resume latest: final weights bit-identical" $PY tests/compare_dumps.py "$T/${s}b.dump" "$T/$u.dump" --abs 0
    [ "$(cat "$T/$s/latest")" = ckpt_00000006.h5 ] && ok "$L rank(s): latest names ckpt_00000006.h5 after the resumed run" || bad "$L rank(s): latest = $(cat "$T/$s/latest")"
  }
done

# ---- 2. resume across layouts (ZeRO-1 where dp*cp > 1) ----
train_run t4 8 --tp 4 --zero 1 --ckpt_every 3 --max_steps 3
cross() {  # name saved_desc src np args...
  local name=$1 desc=$2 src=$3 np=$4; shift 4
  [ -f "$src" ] || { bad "$name: no source checkpoint $src"; return; }
  train_run "$name" "$np" "$@" --resume "$src" || return
  check "$desc: losses of steps 4-6 equal the uninterrupted 1-process run within 1e-5" ck losses "$T/$name/metrics.jsonl" "$T/u1/metrics.jsonl" 4 6 --rel 1e-5
  check "$desc: final weights equal the uninterrupted 1-process run within 1e-5" $PY tests/compare_dumps.py "$T/$name.dump" "$T/u1.dump" --abs 1e-5
}
cross x_cp4 "tp2 cp2 dp2 zero1 -> tp1 cp4 dp2 zero1" "$T/u8/ckpt_00000003.h5" 8 --cp 4 --zero 1
grep -q "^note: saved with tp 2 cp 2 dp 2 zero 1, loaded into tp 1 cp 4 dp 2 zero 1" "$T/x_cp4.out" \
  && ok "cross-layout note: $(grep -m1 '^note:' "$T/x_cp4.out")" || bad "cross-layout note missing: $(grep '^note' "$T/x_cp4.out")"
cross x_one "tp2 cp2 dp2 zero1 -> 1 process" "$T/u8/ckpt_00000003.h5" 1
cross x_grid "1 process -> tp2 cp2 dp2 zero1" "$T/u1/ckpt_00000003.h5" 8 "${L8[@]}"
cross x_tp "tp4 cp1 dp2 zero1 -> tp2 cp1 dp4 zero1" "$T/t4/ckpt_00000003.h5" 8 --tp 2 --zero 1
cross x_ind "tp2 cp2 dp2 zero1 -> tp2 cp1 dp2 zero1, independent MPI-IO" "$T/u8/ckpt_00000003.h5" 4 --tp 2 --zero 1 --ckpt_io independent

# ---- 3. keep_last ----
if train_run keep 2 --ckpt_every 1 --keep_last 2 --max_steps 5; then
  got=$(cd "$T/keep" && ls ckpt_*.h5 | tr '\n' ' ')
  [ "$got" = "ckpt_00000004.h5 ckpt_00000005.h5 " ] && ok "keep_last 2: only $got left" || bad "keep_last 2: checkpoints left: $got"
  [ "$(cat "$T/keep/latest")" = ckpt_00000005.h5 ] && ok "keep_last 2: latest names the newest" || bad "keep_last: latest = $(cat "$T/keep/latest")"
  left=$(find "$T/keep" -name '*.tmp' | tr '\n' ' ')
  [ -z "$left" ] && ok "keep_last 2: no *.tmp left" || bad "keep_last: left over: $left"
  check "keep_last 2: the newest checkpoint is complete" ck verify "$T/keep/ckpt_00000005.h5" 5
fi

# ---- 4. the file read with h5py: max_steps 0 writes the fresh model ----
if train_run z0 1 --max_steps 0; then
  [ -f "$T/z0/ckpt_00000000.h5" ] && [ "$(cat "$T/z0/latest")" = ckpt_00000000.h5 ] && ! grep -q '^step ' "$T/z0.out" \
    && ok "max_steps 0: ckpt_00000000.h5 written, no training step" || bad "max_steps 0: $(ls "$T/z0")"
  check "max_steps 0 file: documented attributes, names, shapes, dtypes, checksums; /model equals the trainer's tensors" \
    ck inspect "$T/z0/ckpt_00000000.h5" "$T/z0.dump" 257 64 2 8 4 96
  train_run z0t 2 --max_steps 0 --tp 2 && check "max_steps 0 at tp 2 (padded vocabulary): datasets bit-identical to 1 process's" \
    ck same "$T/z0t/ckpt_00000000.h5" "$T/z0/ckpt_00000000.h5"
fi

# ---- 5. kill -9 in the middle of a save ----
killtest() {  # name np args...
  local name=$1 np=$2; shift 2
  local D="$T/$name" sidf="$T/$name.sid"
  mkdir -p "$T/$name.shm"
  # a new session: mpirun and every rank can be killed at once; Open MPI's shared-memory files go to $T
  OMPI_MCA_btl_vader_backing_directory="$T/$name.shm" RINGLM_TEST_CKPT_SLOW_MS=100 \
    in_session "$sidf" $(launch "$np") build/train -c "$CONF" --out_dir "$D" --ckpt_every 1 "$@" \
    >"$T/$name.out" 2>"$T/$name.err" &
  local job=$! i l seen="" dangling="" first=""
  # watch `latest` until the second save has been writing for 1 s (wall clock, whatever the load) of its ~6.3 s
  # (63 datasets x 100 ms); the run ends on its own (a failure) if it never saves; HANG_S catches a hang
  local end=$((SECONDS + HANG_S))
  while [ $SECONDS -lt $end ]; do
    if [ -f "$D/latest" ]; then
      l=$(cat "$D/latest" 2>/dev/null); seen+="${l:-<empty>} "; [ -f "$D/$l" ] || dangling+="${l:-<empty>} "
    fi
    if [ -z "$first" ] && [ -e "$D/ckpt_00000002.h5.tmp" ]; then first=$EPOCHREALTIME; fi
    [ -n "$first" ] && awk -v a="$first" -v b="$EPOCHREALTIME" 'BEGIN{exit !(b - a >= 1)}' && break
    kill -0 $job 2>/dev/null || break
    sleep 0.02
  done
  end_session "$(cat "$sidf" 2>/dev/null)" $job || bad "$name: processes of the killed job still alive"
  rm -f "$sidf"
  [ -n "$first" ] || { bad "$name: no second checkpoint's .tmp appeared (exit of the run: $(head -c 300 "$T/$name.err"))"; return; }
  [ -e "$D/ckpt_00000002.h5.tmp" ] && [ ! -e "$D/ckpt_00000002.h5" ] \
    && ok "$name: killed while ckpt_00000002.h5.tmp was being written ($(stat -c %s "$D/ckpt_00000002.h5.tmp") bytes so far)" || bad "$name: the kill missed the save: $(ls "$D" | tr '\n' ' ')"
  local lt; lt=$(cat "$D/latest" 2>/dev/null)
  [ "$lt" = ckpt_00000001.h5 ] && ok "$name: latest still names ckpt_00000001.h5" || bad "$name: latest = '$lt'"
  check "$name: the checkpoint latest names is complete" ck verify "$D/$lt" 1
  local s; for s in $seen; do [[ "$s" =~ ^ckpt_[0-9]{8}\.h5$ ]] || { bad "$name: latest named '$s' during the run"; return; }; done
  [ -z "$dangling" ] || { bad "$name: latest named a file that did not exist: $dangling"; return; }
  ok "$name: latest, read $(echo $seen | wc -w) times while the job ran, never named a .tmp or a missing file"
  if train_run "${name}_r" "$np" "$@" --ckpt_every 1 --out_dir "$D" --resume latest; then
    grep -q "^resumed from $D/ckpt_00000001.h5: step 1" "$T/${name}_r.out" && grep -q "^done: 6 steps" "$T/${name}_r.out" \
      && ok "$name: resume from latest ran to completion" || bad "$name: resumed run: $(grep -E '^(resumed|done)' "$T/${name}_r.out")"
    if [ "$np" -eq 1 ]; then
      check "$name: resumed losses of steps 2-6 identical to the uninterrupted run" ck losses "$D/metrics.jsonl" "$T/u1/metrics.jsonl" 2 6 --exact
    else
      check "$name: resumed losses of steps 2-6 within 1e-5 of the uninterrupted 1-process run" ck losses "$D/metrics.jsonl" "$T/u1/metrics.jsonl" 2 6 --rel 1e-5
    fi
    local left; left=$(find "$D" -name '*.tmp' | tr '\n' ' ')
    [ -z "$left" ] && [ "$(cat "$D/latest")" = ckpt_00000006.h5 ] && ok "$name: after the resumed run no *.tmp is left and latest names step 6" \
      || bad "$name: after resuming: tmp '$left', latest $(cat "$D/latest")"
  fi
}
killtest kill1 1
killtest kill4 4 --tp 2 --zero 1

# ---- 6. bad checkpoints: one line naming the file, non-zero exit, no training, the out_dir untouched ----
W="$T/w"; E="$T/nolatest"; LM="$T/latestmissing"
cp -a "$T/u1" "$W" && mkdir -p "$E" "$LM" && cp -a "$T/u1/ckpt_00000003.h5" "$E/" && cp -a "$T/u1/ckpt_00000003.h5" "$LM/" \
  && echo ckpt_00000009.h5 > "$LM/latest"
src="$T/u1/ckpt_00000003.h5"
head -c $(( $(stat -c %s "$src") / 2 )) "$src" > "$W/trunc.h5"
for m in missing flip reshape version; do ck corrupt $m "$src" "$W/$m.h5" || bad "making the $m checkpoint"; done
echo "not an HDF5 file" > "$W/notes.h5"
expect_bad() {  # name np out_dir 'pattern|pattern...' args...: as expect_err (lib.sh), no step run, the out_dirs untouched
  local name=$1 np=$2 od=$3 pats=$4; shift 4
  local d snapb="$T/snap.before" snapa="$T/snap.after"
  for d in "$W" "$E" "$LM"; do ck snap "$d" | sed "s|^|$d/|"; done >"$snapb"
  ERR_ALSO="! grep -q '^step ' \"\$T/o\"" expect_err "$name" "$pats" "$np" build/train -c "$CONF" --out_dir "$od" "$@"
  for d in "$W" "$E" "$LM"; do ck snap "$d" | sed "s|^|$d/|"; done >"$snapa"
  # an existing file whose size, mtime or content changed, or that is gone, shows as a '<' line
  local changed new; changed=$(diff "$snapb" "$snapa" | grep '^<' | awk '{print $2}' | sed "s|$T/||" | sort -u | tr '\n' ' ')
  new=$(comm -13 <(awk '{print $1}' "$snapb" | sort) <(awk '{print $1}' "$snapa" | sort) | sed "s|$T/||" | tr '\n' ' ')
  [ -z "$changed" ] && ok "$name: no file in the out_dir modified or deleted${new:+ (created: $new)}" \
    || bad "$name: existing files in the out_dir modified or deleted: $changed"
}
expect_bad "truncated file" 1 "$W" "$W/trunc.h5|cannot be opened as HDF5" --resume "$W/trunc.h5"
expect_bad "missing dataset" 1 "$W" "$W/missing.h5|/model/model.layers.1.self_attn.v_proj.weight" --resume "$W/missing.h5"
expect_bad "checksum mismatch" 1 "$W" "$W/flip.h5|checksum mismatch|/model/model.layers.0.mlp.gate_proj.weight" --resume "$W/flip.h5"
expect_bad "another model (d_ff, n_kv_head)" 1 "$W" "$W/ckpt_00000003.h5|d_ff (checkpoint 96, run 128)|n_kv_head (checkpoint 4, run 2)" \
  --resume "$W/ckpt_00000003.h5" --d_ff 128 --n_kv_head 2
expect_bad "dataset of another shape" 1 "$W" "$W/reshape.h5|/model/model.layers.0.mlp.down_proj.weight|[96, 64]|[64, 96]" --resume "$W/reshape.h5"
expect_bad "format_version 2" 1 "$W" "$W/version.h5|format_version 2" --resume "$W/version.h5"
expect_bad "directory without latest" 1 "$W" "$E|latest" --resume "$E"
expect_bad "latest names a missing file" 1 "$LM" "$LM/latest|ckpt_00000009.h5" --resume latest
expect_bad "path that does not exist" 1 "$W" "$W/nope.h5|does not exist" --resume "$W/nope.h5"
expect_bad "not an HDF5 file" 1 "$W" "$W/notes.h5|cannot be opened as HDF5" --resume "$W/notes.h5"
expect_bad "mpirun -np 4: checksum mismatch" 4 "$W" "$W/flip.h5|checksum mismatch|/model/model.layers.0.mlp.gate_proj.weight" --tp 2 --zero 1 --resume "$W/flip.h5"
expect_bad "mpirun -np 4: dataset of another shape" 4 "$W" "$W/reshape.h5|/model/model.layers.0.mlp.down_proj.weight" --tp 2 --zero 1 --resume "$W/reshape.h5"
expect_bad "mpirun -np 4: missing dataset" 4 "$W" "$W/missing.h5|/model/model.layers.1.self_attn.v_proj.weight" --cp 2 --resume "$W/missing.h5"
expect_bad "mpirun -np 4: truncated file" 4 "$W" "$W/trunc.h5|cannot be opened as HDF5" --tp 2 --resume "$W/trunc.h5"

# ---- 7. training keys may change on resume, and the log says so ----
if train_run lr 1 --resume "$T/u1/ckpt_00000003.h5" --lr 1e-3; then
  grep -qE "^note: .*training keys changed on resume: lr \(checkpoint 0\.003[0-9]*, run 0\.001[0-9]*\)" "$T/lr.out" \
    && ok "--lr on resume: $(grep -m1 '^note:' "$T/lr.out")" || bad "--lr on resume: no note: $(grep '^note' "$T/lr.out")"
  $PY - "$T/lr/metrics.jsonl" "$T/u1/metrics.jsonl" <<'PYEOF' && ok "--lr on resume: step 4 (weights from the file) has the same loss, and runs at the new lr 1e-3" || bad "--lr on resume: metrics"
import json, sys
a = {r["step"]: r for r in map(json.loads, open(sys.argv[1]))}; b = {r["step"]: r for r in map(json.loads, open(sys.argv[2]))}
assert a[4]["loss"] == b[4]["loss"], (a[4], b[4])
assert abs(a[4]["lr"] - 1e-3) < 1e-9 and abs(b[4]["lr"] - 3e-3) < 1e-9, (a[4]["lr"], b[4]["lr"])
assert a[5]["loss"] != b[5]["loss"]
PYEOF
fi
grep -q "^note: saved with tp 1 cp 1 dp 1 zero 0, loaded into tp 1 cp 1 dp 1 zero 0$" "$T/n1.out" \
  && ok "an unchanged resume lists no changed training keys" || bad "unchanged resume: $(grep '^note' "$T/n1.out")"

finish
