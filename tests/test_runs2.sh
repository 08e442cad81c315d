#!/usr/bin/env bash
# Never lose a run, round two (issue 23): what the trainer and its tools must not lose or accept silently.
#  1. a fresh run into an out_dir holding another run's checkpoints or `latest` (with or without metrics.jsonl) is
#     refused and leaves every file as it was; with --force they are set aside (renamed *.superseded, records to
#     metrics.superseded.jsonl), said, and nothing is deleted or overwritten;
#  2. keep_last deletes only this run's checkpoints: files named otherwise than ckpt_NNNNNNNN.h5 and checkpoints of
#     another run id are neither deleted nor counted;
#  3. metrics.jsonl writes are checked: a file-size limit (RLIMIT_FSIZE) stops the run with one line after saving a
#     checkpoint; a full disk (tmpfs, as root) stops it with one line saying that the checkpoint failed too; the
#     last line of metrics.jsonl is always a complete record;
#  4. the config reader is bounded: /dev/zero, a directory, a NUL byte, an over-long line, a 2 MB file: one line;
#  5. fixed-length HDF5 string attributes without a terminating NUL (h5py's np.bytes_) are read whole;
#  6. a mid-epoch resume with another seed or shuffle is refused (--force continues, with a note);
#  7. prepare --force that cannot write the new shards leaves the old ones; the same file given twice is read once;
#  8. messages: --resume OUT_DIR/latest (the pointer file) resumes; plan --dp 0, reshard --out DIR/, val_batches 0:
#     one line each.
cd "$(dirname "$0")/.."
source tests/lib.sh
CK=tests/ckpt_check.py
MOUNTS=()
runs2_exit() { local m; for m in "${MOUNTS[@]}"; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null; done; lib_exit; }
trap runs2_exit EXIT

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
A=(-c configs/tiny.conf --train_data "$T/data" --val_data "" --log_every 1000)
# md5s DIR: name and md5 of every file in DIR (sorted)
md5s() { (cd "$1" && md5sum -- * 2>/dev/null | sort -k2); }
steps() { sed -nE 's/^\{"step": ([0-9]+),.*/\1/p' "$1" | tr '\n' ' ' | sed 's/ $//'; }
# last_record FILE: the step of FILE's last line, which must be a complete JSON record (else "cut")
last_record() { $PY -c "import json,sys; print(json.loads(open(sys.argv[1]).read().splitlines()[-1])['step'])" "$1" 2>/dev/null || echo cut; }

# ---- 1. a fresh run into another run's out_dir ----
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/X" --max_steps 4 --ckpt_every 2 >/dev/null 2>&1 || bad "run X"
mkdir -p "$T/F" && cp "$T/X"/ckpt_0000000[24].h5 "$T/X/latest" "$T/F/"
md5s "$T/F" >"$T/F.before"
expect_err "a fresh run into an out_dir holding another run's checkpoints and latest (no metrics.jsonl)" \
  "out_dir '$T/F' holds 2 checkpoints ckpt_00000002.h5 .. ckpt_00000004.h5, 'latest' (-> ckpt_00000004.h5)|--force" \
  1 build/train "${A[@]}" --out_dir "$T/F" --max_steps 4 --ckpt_every 2 --keep_last 1
md5s "$T/F" >"$T/F.after"
cmp -s "$T/F.before" "$T/F.after" && ok "the refused run changed no checkpoint and no latest" || bad "F changed: $(diff "$T/F.before" "$T/F.after" | head -4)"
md5s "$T/X" >"$T/X.before"
if timeout $HANG_S build/train "${A[@]}" --out_dir "$T/X" --max_steps 3 --ckpt_every 1 --keep_last 1 --seed 5 --force >"$T/Xf.out" 2>&1; then
  m2=$(md5sum <"$T/X/ckpt_00000002.h5.superseded"); m4=$(md5sum <"$T/X/ckpt_00000004.h5.superseded")
  o2=$(awk '$2 == "ckpt_00000002.h5" {print $1}' "$T/X.before"); o4=$(awk '$2 == "ckpt_00000004.h5" {print $1}' "$T/X.before")
  if grep -q "^note: --force: out_dir '$T/X' holds an earlier run (2 checkpoints .*'latest' (-> ckpt_00000004.h5), 4 metrics records): .*nothing is deleted" "$T/Xf.out" \
     && [ "${m2%% *}" = "$o2" ] && [ "${m4%% *}" = "$o4" ] && [ "$(cat "$T/X/latest.superseded")" = ckpt_00000004.h5 ] \
     && [ "$(steps "$T/X/metrics.superseded.jsonl")" = "1 2 3 4" ] && [ "$(steps "$T/X/metrics.jsonl")" = "1 2 3" ] \
     && [ "$(cat "$T/X/latest")" = ckpt_00000003.h5 ] && [ "$(ls "$T/X" | grep -c '^ckpt_.*\.h5$')" = 1 ]; then
    ok "--force: the earlier run's checkpoints, latest and records set aside unchanged (*.superseded), said; the new run's keep_last 1 kept its own ckpt_00000003.h5"
  else bad "--force into X: $(grep '^note' "$T/Xf.out" | head -2 | sed "s|$T/||g"); files $(ls "$T/X" | tr '\n' ' ')"; fi
else bad "--force run into X: $(tail -2 "$T/Xf.out")"; fi

# ---- 2. keep_last: only this run's checkpoints ----
K="$T/K"
timeout $HANG_S build/train "${A[@]}" --out_dir "$K" --max_steps 2 --ckpt_every 1 --keep_last 0 >/dev/null 2>&1 || bad "run K"
for n in ckpt_00000001_good.h5 ckpt_1.h5 ckpt_best.h5; do cp "$K/ckpt_00000001.h5" "$K/$n"; done
cp "$T/X/ckpt_00000002.h5.superseded" "$K/ckpt_00000000.h5"   # another run's id under the trainer's name
FOREIGN=(ckpt_00000000.h5 ckpt_00000001_good.h5 ckpt_1.h5 ckpt_best.h5)
(cd "$K" && md5sum "${FOREIGN[@]}") >"$T/K.keep"
if timeout $HANG_S build/train "${A[@]}" --out_dir "$K" --resume latest --max_steps 5 --ckpt_every 1 --keep_last 2 >"$T/K.out" 2>&1; then
  (cd "$K" && md5sum "${FOREIGN[@]}") >"$T/K.after" 2>&1
  own=$(ls "$K" | grep -xE 'ckpt_0000000[1-5]\.h5' | tr '\n' ' ')
  if [ "$own" = "ckpt_00000004.h5 ckpt_00000005.h5 " ] && cmp -s "$T/K.keep" "$T/K.after"; then
    ok "keep_last 2 kept this run's newest two and left ckpt_00000000.h5 (another run's id), ckpt_00000001_good.h5, ckpt_1.h5, ckpt_best.h5 untouched"
  else bad "keep_last: this run's left '$own'; others: $(diff "$T/K.keep" "$T/K.after" | head -4 | tr '\n' ' ')"; fi
else bad "resume K: $(tail -2 "$T/K.out")"; fi

# ---- 3. metrics.jsonl that cannot be written ----
# a file-size limit: metrics.jsonl (padded to 2 MB with records of step 1) hits it a few steps into the resume; the
# checkpoint (1.5 MB) still fits: it is saved, and the run stops with one line. (Under mpirun -np 1, the limit set
# for the rank only: Open MPI's own files, made by mpirun, must not be under it.)
M="$T/M"
timeout $HANG_S build/train "${A[@]}" --out_dir "$M" --max_steps 2 --ckpt_every 2 >/dev/null 2>&1 || bad "run M"
rec=$(head -n 1 "$M/metrics.jsonl"); tail -n 1 "$M/metrics.jsonl" >"$T/M.last"
{ for ((i = 0; i < 2000000 / ${#rec}; i++)); do echo "$rec"; done; cat "$T/M.last"; } >"$M/metrics.jsonl"
lim=$(( $(stat -c %s "$M/metrics.jsonl") / 1024 + 3 ))
ERR_ALSO='[ "$(last_record "$M/metrics.jsonl")" != cut ] && [ -f "$M/$(cat "$M/latest")" ]' \
  expect_err "metrics.jsonl over the file-size limit (ulimit -f)" "cannot write '$M/metrics.jsonl' (the record, step|File too large|stopped after saving checkpoint ckpt_|--resume latest" \
  1 "${MPI[@]}" -np 1 bash -c 'trap "" XFSZ; ulimit -f "$0"; exec "$@"' "$lim" build/train "${A[@]}" --out_dir "$M" --resume latest --max_steps 100 --ckpt_every 0
n=$(sed -nE 's/^ckpt_0*([0-9]+)\.h5$/\1/p' "$M/latest" 2>/dev/null)
[ -n "$n" ] && [ "$n" -gt 2 ] && [ "$(last_record "$M/metrics.jsonl")" = $((n - 1)) ] && grep -q "ckpt_0*$n.h5" "$T/e" \
  && check "the stop checkpoint ckpt $n verifies; metrics.jsonl ends with step $((n - 1))'s complete record" $PY $CK verify "$M/$(cat "$M/latest")" "$n" \
  || bad "after the size limit: latest '$(cat "$M/latest" 2>/dev/null)', last record $(last_record "$M/metrics.jsonl")"
# a full disk: a 64 KiB tmpfs that holds no checkpoint: one line saying so, the last line a complete record
if [ "$(id -u)" -eq 0 ] && mkdir -p "$T/full" && mount -t tmpfs -o size=64k tmpfs "$T/full" 2>/dev/null; then
  MOUNTS+=("$T/full")
  ERR_ALSO='[ "$(last_record "$T/full/run/metrics.jsonl")" != cut ] && [ ! -e "$T/full/run/latest" ]' \
    expect_err "metrics.jsonl on a full disk (64 KiB tmpfs)" "cannot write '$T/full/run/metrics.jsonl' (the record, step|No space left on device|could not be saved either|not enough space" \
    1 build/train "${A[@]}" --out_dir "$T/full/run" --max_steps 2000 --ckpt_every 0
else ok "full-disk metrics case skipped: needs root to mount a tmpfs"; fi

# ---- 4. the config reader ----
mkdir -p "$T/confdir"
printf 'seq_len = 128\0\nd_model = 64\n' >"$T/nul.conf"
{ printf 'seq_len = '; head -c 5000 /dev/zero | tr '\0' 1; echo; } >"$T/long.conf"
head -c 2000000 /dev/zero | tr '\0' '#' >"$T/big.conf"
expect_err "train -c /dev/zero" "'/dev/zero' is a device, not a config file" 1 build/train -c /dev/zero
expect_err "plan -c /dev/zero" "'/dev/zero' is a device, not a config file" 1 build/plan -c /dev/zero
expect_err "train -c a directory" "is a directory, not a config file" 1 build/train -c "$T/confdir"
expect_err "a config with a NUL byte" "nul.conf:1 holds a NUL byte" 1 build/train -c "$T/nul.conf"
expect_err "a config line of 5000 characters" "long.conf:1 is 5010 characters long (at most 4095)" 1 build/plan -c "$T/long.conf"
expect_err "a 2 MB config" "big.conf' is 2000000 bytes, more than a config file can be" 1 build/train -c "$T/big.conf"

# ---- 5. fixed-length string attributes without a terminating NUL (h5py np.bytes_) ----
cp "$T/M/ckpt_00000002.h5" "$T/nb.h5"; cp "$T/M/ckpt_00000002.h5" "$T/good.h5"
$PY -c "
import h5py, numpy as np, sys
with h5py.File(sys.argv[1], 'r+') as f:
    f['config'].attrs['rope_theta'] = np.bytes_(b'10000'); f['config'].attrs['seq_len'] = np.bytes_(b'128')
    assert f['config'].attrs.get_id('rope_theta').get_type().get_size() == 5" "$T/nb.h5" || bad "h5py rewrite"
build/reshard --info "$T/nb.h5" >"$T/nb.info" 2>&1
grep -qE '^ +rope_theta += 10000$' "$T/nb.info" \
  && ok "reshard --info reads an np.bytes_ attribute whole: $(grep -E '^ +rope_theta' "$T/nb.info" | tr -s ' ')" || bad "np.bytes_ attribute: $(grep -E 'rope_theta|train:|reshard:' "$T/nb.info" | tr '\n' ' ')"
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/nbrun" --resume "$T/nb.h5" --max_steps 3 >"$T/nb.out" 2>&1 \
  && ok "a resume from it trains (rope_theta 10000 and seq_len 128, as saved)" || bad "resume from the np.bytes_ checkpoint: $(tail -1 "$T/nb.out" | sed "s|$T/||g")"

# ---- 6. another seed or shuffle on a mid-epoch resume ----
expect_err "a mid-epoch resume with another seed" "was trained with shuffle = 1, seed = 1337 and this run asks for seed = 7|resume with --seed 1337|--force" \
  1 build/train "${A[@]}" --out_dir "$T/M" --resume "$T/M/ckpt_00000002.h5" --max_steps 4 --seed 7
expect_err "a mid-epoch resume with shuffle 0" "was trained with shuffle = 1 and this run asks for shuffle = 0|resume with --shuffle 1" \
  1 build/train "${A[@]}" --out_dir "$T/M" --resume "$T/M/ckpt_00000002.h5" --max_steps 4 --shuffle 0
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/nbrun" --resume latest --max_steps 4 --seed 7 --force >"$T/seed.out" 2>&1 \
  && grep -q "^note: --force: the checkpoint's run had shuffle = 1, seed = 1337, this run has seed = 7: epoch 0 (.* sequences done) continues" "$T/seed.out" \
  && ok "with --force another seed continues mid-epoch, and says so" || bad "--force seed: $(grep -m1 'note: --force\|train:' "$T/seed.out")"

# ---- 7. prepare ----
build/prepare --out "$T/pd" --val-frac 0 common >/dev/null || bad "prepare pd"
md5s "$T/pd" >"$T/pd.before"
ERR_ALSO='[ "$(ls -A "$T/pd" | tr "\n" " ")" = "meta.json train_000000.bin " ]' ERR_RC=1 \
  expect_err "prepare --force whose new shard exceeds the file-size limit" "cannot write|File too large|the output directory is as it was" \
  1 bash -c 'trap "" XFSZ; ulimit -f 48; exec "$@"' - build/prepare --out "$T/pd" --force --val-frac 0 model
md5s "$T/pd" | cmp -s - "$T/pd.before" && ok "the old shards and meta.json are as they were" || bad "prepare --force lost the old shards: $(ls -A "$T/pd")"
# the same file given twice (a directory and a file inside it): read once, the second skipped and counted (issue 38:
# before, the whole run was refused)
build/prepare --out "$T/pd2" --val-frac 0 common common/util.h >"$T/pd2.out" 2>&1 && build/prepare --out "$T/pd3" --val-frac 0 common >/dev/null 2>&1 \
  && grep -q "duplicates 1: the same file 1, the same bytes 0; e.g. 'common/util.h' is the same file as 'common/util.h'" "$T/pd2.out" \
  && cmp -s "$T/pd2/train_000000.bin" "$T/pd3/train_000000.bin" \
  && ok "the same file given twice to prepare: read once, the second counted as a duplicate (the shards of 'common' alone)" \
  || bad "prepare of a doubled path: $(head -c 400 "$T/pd2.out")"

# ---- 8. messages ----
timeout $HANG_S build/train "${A[@]}" --out_dir "$T/X" --resume "$T/X/latest" --max_steps 4 --seed 5 >"$T/rl.out" 2>&1 \
  && grep -q "^resumed from $T/X/ckpt_00000003.h5: step 3" "$T/rl.out" && ok "--resume OUT_DIR/latest (the pointer file) resumes from the checkpoint it names" \
  || bad "--resume OUT_DIR/latest: $(grep -m1 'train:\|checkpoint:' "$T/rl.out" | sed "s|$T/||g")"
expect_err "plan --dp 0" "plan: --dp '0' must be a positive integer" 1 build/plan -c configs/tiny.conf --dp 0
mkdir -p "$T/rsdir"
expect_err "reshard --out an existing DIR/" "--out '$T/rsdir/' names a directory|--out $T/rsdir/ckpt.h5" 1 build/reshard --tp 1 --cp 1 --dp 1 --out "$T/rsdir/" "$T/good.h5"
expect_err "reshard --out a new DIR/" "--out '$T/none/' names a directory" 1 build/reshard --tp 1 --cp 1 --dp 1 --out "$T/none/" "$T/good.h5"
expect_err "reshard --out into a missing directory" "the directory '$T/none' does not exist" 1 build/reshard --tp 1 --cp 1 --dp 1 --out "$T/none/x.h5" "$T/good.h5"
expect_train_err configs/tiny.conf "val_batches 0 with val_data" "val_batches = 0 validates nothing|--val_data ''" 1 --train_data "$T/data" --val_data "$T/data" --val_batches 0
finish
