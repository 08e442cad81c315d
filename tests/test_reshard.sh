#!/usr/bin/env bash
# build/reshard: --info and --verify on a trainer checkpoint; conversion to tp 4 (one process and under
# mpirun, fp32 exact, bf16 rounded to nearest even, model-only) checked with h5py; the trainer resumes from
# the converted files (same losses as resuming from the original); corrupt, truncated, foreign and
# incomplete files, an existing --out and bad options give one line and exit 1.
cd "$(dirname "$0")/.."
source tests/lib.sh
R=build/reshard
[ -x $R ] || { bad "$R not built (make build/reshard)"; finish; }

# ---- a checkpoint from the trainer: tp 2 x cp 2, step 3 ----
build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null 2>"$T/prep.err" || { bad "prepare: $(cat "$T/prep.err")"; finish; }
MODEL=(--vocab_size 257 --d_model 64 --n_layer 2 --n_head 8 --n_kv_head 4 --d_ff 96 --max_seq_len 128 --seq_len 64
       --batch_size 8 --micro_batch 1 --train_data "$T/data")
CONF=/dev/null   # for train_run (lib.sh): no config file, the model is MODEL on the command line
train_run run 4 "${MODEL[@]}" --max_steps 3 --tp 2 --cp 2 --ckpt_every 3 || finish
C="$T/run/ckpt_00000003.h5"
[ -f "$C" ] && ok "trainer wrote a tp 2 cp 2 checkpoint" || { bad "no checkpoint $C"; finish; }

# ---- --info, --verify ----
if $R --info "$C" >"$T/info" 2>"$T/e"; then
  grep -q "^step  *3$" "$T/info" && grep -q "saved layout  tp 2 cp 2 dp 1" "$T/info" && grep -q "d_ff  *= 96" "$T/info" \
    && grep -Eq "/model/model.layers.1.mlp.down_proj.weight +\[64, 96\] +fp32 +contiguous +ok" "$T/info" \
    && grep -Eq "/optimizer/v/lm_head.weight +\[257, 64\] +fp32" "$T/info" && grep -q "63 datasets" "$T/info" \
    && ok "--info: step 3, layout tp 2 cp 2 dp 1, config, 63 datasets with shape/dtype/chunking/checksum" \
    || bad "--info output: $(head -c 600 "$T/info")"
else bad "--info failed: $(cat "$T/e")"; fi
# the model keys as the run's config.txt writes them (norm_eps = 1e-05, not the stored exact 9.99999975e-06)
RD=$(dirname "$C")
miss=$(sed -n '/^config (model keys):/,/^datasets/p' "$T/info" | sed -n 's/^  \([a-z_]*\) *= \(.*\)$/\1 = \2/p' | \
  while read -r line; do grep -qxF "$line" "$RD/config.txt" || echo "$line"; done)
n=$(sed -n '/^config (model keys):/,/^datasets/p' "$T/info" | grep -c ' = ')
[ -z "$miss" ] && [ "$n" -ge 10 ] && grep -q '^  norm_eps  *= 1e-05$' "$T/info" \
  && ok "--info: all $n model keys as config.txt writes them (norm_eps = 1e-05)" || bad "--info keys unlike config.txt: $miss"
$R --verify "$C" >"$T/o" 2>"$T/e" && grep -q "all checksums ok" "$T/o" && ok "--verify passes: $(cat "$T/o")" \
  || bad "--verify on a good file: $(cat "$T/o" "$T/e")"
"${MPI[@]}" -np 3 $R --verify "$C" >"$T/o" 2>"$T/e" && grep -q "all checksums ok" "$T/o" && ok "--verify under mpirun -np 3" \
  || bad "--verify under mpirun: $(cat "$T/o" "$T/e")"
$R --help | grep -q -- "--model-only" && $R --help | grep -q -- "--dtype" && ok "--help documents the options" || bad "--help"

# ---- conversions ----
$R --tp 4 --cp 2 --dp 1 --out "$T/tp4.h5" "$C" >"$T/o" 2>"$T/e" && ok "convert to tp 4 (one process)" || bad "convert: $(cat "$T/e")"
# small row blocks so that chunks are cut into several units spread over the ranks
RINGLM_RESHARD_BLOCK_BYTES=1000 "${MPI[@]}" -np 3 $R --tp 4 --cp 2 --dp 1 --out "$T/tp4_mpi.h5" "$C" >"$T/o" 2>"$T/e" \
  && ok "convert to tp 4 (mpirun -np 3, 1000-byte blocks)" || bad "convert under mpirun: $(cat "$T/e")"
"${MPI[@]}" -np 2 $R --tp 4 --cp 2 --dtype bf16 --out "$T/bf16.h5" "$C" >"$T/o" 2>"$T/e" && ok "convert to bf16 (mpirun -np 2)" \
  || bad "convert bf16: $(cat "$T/e")"
$R --tp 4 --cp 2 --model-only --out "$T/mo.h5" "$C" >"$T/o" 2>"$T/e" && ok "convert --model-only" || bad "model-only: $(cat "$T/e")"
[ ! -e "$T/tp4.h5.tmp" ] && [ ! -e "$T/tp4_mpi.h5.tmp" ] && ok "no .tmp left behind" || bad ".tmp left behind"

$PY - "$C" "$T/tp4.h5" "$T/tp4_mpi.h5" "$T/bf16.h5" "$T/mo.h5" >"$T/py.out" 2>&1 <<'PYEOF' && ok "h5py: $(tail -1 "$T/py.out")" || bad "h5py checks: $(tail -5 "$T/py.out")"
import sys, h5py, numpy as np
sys.path.insert(0, "tests")
from ckpt_check import xsum64 as xsum, datasets   # FORMAT.md's checksum; every dataset, by its absolute name
src, fp, mpi, bf, mo = sys.argv[1:]
np.seterr(over="ignore")
def bf16(a):   # round to nearest even
    u = a.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
tp = 4
def want_chunk(name, shape, vocab_padded):
    if len(shape) == 1: return shape
    r, c = shape
    if any(k in name for k in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")): return (r // tp, c)
    if any(k in name for k in ("o_proj", "down_proj")): return (r, c // tp)
    if "embed_tokens" in name or "lm_head" in name: return (min(-(-vocab_padded // tp), r), c)
    return shape
with h5py.File(src, "r") as a, h5py.File(fp, "r") as b, h5py.File(mpi, "r") as m, h5py.File(bf, "r") as h, h5py.File(mo, "r") as o:
    V = int(a["config"].attrs["vocab_size"].decode()); Vp = -(-V // tp) * tp
    da, db, dm, dh, do = datasets(a), datasets(b), datasets(m), datasets(h), datasets(o)
    assert sorted(da) == sorted(db) == sorted(dm) == sorted(dh), "dataset lists differ"
    assert sorted(do) == sorted(k for k in da if k.startswith("/model/")) and "optimizer" not in o, "model-only"
    for f in (b, m, h, o):   # root attributes copied, saved layout = the target
        for k, v in a.attrs.items():
            if k.startswith("saved_"): continue
            assert k in f.attrs and np.array_equal(f.attrs[k], v), ("root attribute", k)
        assert int(f.attrs["saved_tp"]) == 4 and int(f.attrs["saved_dp"]) == 1 and int(f.attrs["saved_zero"]) == 0
        assert dict(f["config"].attrs) == dict(a["config"].attrs), "/config differs"
    assert int(b.attrs["saved_cp"]) == 2 and int(o.attrs["saved_cp"]) == 2
    for n, x in da.items():
        ref = x[()]
        for f, d in ((b, db), (m, dm)):
            y = d[n]
            assert y.dtype == np.float32 and y.shape == x.shape and np.array_equal(y[()].view(np.uint32), ref.view(np.uint32)), n
            assert y.chunks == want_chunk(n, x.shape, Vp), (n, y.chunks, want_chunk(n, x.shape, Vp))
            assert int(y.attrs["checksum"]) == int(x.attrs["checksum"]) == xsum(ref), ("checksum", n)
        assert np.array_equal(db[n][()], dm[n][()]), ("serial vs mpi", n)
        y = dh[n]
        if n.startswith("/model/"):
            assert y.dtype == np.uint16 and y.attrs["dtype"] in (b"bf16", "bf16"), n
            assert np.array_equal(y[()], bf16(ref)), ("bf16 values", n)
            assert np.array_equal(do[n][()], ref), ("model-only values", n)
        else:
            assert y.dtype == np.float32 and np.array_equal(y[()], ref), ("moments stay fp32", n)
        assert int(y.attrs["checksum"]) == xsum(y[()]), ("bf16-file checksum", n)
        assert y.chunks == want_chunk(n, x.shape, Vp), n
print(f"{len(da)} datasets equal (serial = mpirun), chunks per target shard, attributes copied, bf16 = RNE(fp32), model-only has no /optimizer")
PYEOF
for f in bf16 mo tp4_mpi; do
  $R --verify "$T/$f.h5" >"$T/o" 2>"$T/e" && ok "--verify $f.h5" || bad "--verify $f.h5: $(cat "$T/o" "$T/e")"
done
$R --info "$T/bf16.h5" 2>&1 | grep -Eq "/model/model.layers.0.self_attn.o_proj.weight +\[64, 64\] +bf16 +chunks \[64, 16\] +ok" \
  && ok "--info shows bf16 and chunk dims" || bad "--info on bf16 file"

# ---- the trainer resumes from converted files ----
train_run res_ref 4 "${MODEL[@]}" --max_steps 5 --tp 2 --cp 2 --resume "$C"
train_run res_tp4 8 "${MODEL[@]}" --max_steps 5 --tp 4 --cp 2 --resume "$T/tp4.h5"
$PY - "$T/res_ref/metrics.jsonl" "$T/res_tp4/metrics.jsonl" <<'PYEOF' && ok "resume at tp 4 from the converted file: steps 4-5 losses equal the original's" || bad "resume losses differ"
import json, sys
a = [json.loads(l) for l in open(sys.argv[1])]; b = [json.loads(l) for l in open(sys.argv[2])]
assert [r["step"] for r in a] == [r["step"] for r in b] == [4, 5], (a, b)
for x, y in zip(a, b): assert abs(x["loss"] - y["loss"]) <= 1e-5 * abs(x["loss"]), (x["loss"], y["loss"])
PYEOF
if train_run res_bf16 8 "${MODEL[@]}" --max_steps 5 --tp 4 --cp 2 --resume "$T/bf16.h5"; then
  grep -q "^step     5/5" "$T/res_bf16.out" && ok "resume from the bf16 file" || bad "resume bf16: $(tail -2 "$T/res_bf16.out")"
fi
if train_run res_mo 8 "${MODEL[@]}" --max_steps 5 --tp 4 --cp 2 --resume "$T/mo.h5"; then
  grep -q "^step     5/5" "$T/res_mo.out" && grep -q "moments start at zero" "$T/res_mo.out" \
    && ok "resume from the model-only file (moments start at zero)" || bad "resume model-only: $(tail -2 "$T/res_mo.out")"
fi

# ---- errors: one line on stderr, exit 1 ----
reshard_err() { ERR_RC=1 expect_err "$1" "$2" "$3" $R "${@:4}"; }   # name pattern np args...: exit status 1
cp "$C" "$T/flip.h5"
$PY - "$T/flip.h5" <<'PYEOF' || bad "could not corrupt the copy"
import sys, h5py
with h5py.File(sys.argv[1], "r") as f: off = f["/model/model.layers.0.self_attn.q_proj.weight"].id.get_offset()
with open(sys.argv[1], "r+b") as f:
    f.seek(off + 100); b = f.read(4); f.seek(off + 100); f.write(bytes(x ^ 0xFF for x in b))
PYEOF
reshard_err "--verify on flipped bytes" "checksum mismatch in /model/model.layers.0.self_attn.q_proj.weight" 1 --verify "$T/flip.h5"
reshard_err "--verify on flipped bytes (mpirun -np 3)" "flip.h5|q_proj.weight" 3 --verify "$T/flip.h5"
$R --info "$T/flip.h5" 2>/dev/null | grep -Eq "q_proj.weight .* MISMATCH" && ok "--info shows MISMATCH" || bad "--info on flipped file"
reshard_err "convert a corrupt file" "checksum mismatch in /model/model.layers.0.self_attn.q_proj.weight" 2 --tp 4 --out "$T/flip_out.h5" "$T/flip.h5"
[ ! -e "$T/flip_out.h5" ] && [ ! -e "$T/flip_out.h5.tmp" ] && ok "nothing written from a corrupt input" || bad "output left from a corrupt input"
head -c $(( $(stat -c %s "$C") * 2 / 3 )) "$C" > "$T/trunc.h5"
reshard_err "truncated file" "cannot be opened as HDF5" 1 --verify "$T/trunc.h5"
# a NaN with a matching checksum (as a foreign tool could write): --verify and a conversion refuse it, as train does
cp "$C" "$T/nan.h5"
$PY - "$T/nan.h5" <<'PYEOF'
import sys, h5py, numpy as np
sys.path.insert(0, "tests")
from ckpt_check import xsum64
with h5py.File(sys.argv[1], "r+") as f:
    d = f["/model/model.norm.weight"]; a = d[...]; a[3] = np.nan; d[...] = a; d.attrs["checksum"] = np.uint64(xsum64(a))
PYEOF
reshard_err "--verify on a NaN with a good checksum" "model.norm.weight holds 1 inf or NaN values" 1 --verify "$T/nan.h5"
reshard_err "converting a NaN with a good checksum" "holds 1 inf or NaN values (no ringlm program loads it); nothing written" 1 \
  --tp 1 --out "$T/nan_out.h5" "$T/nan.h5"
[ ! -e "$T/nan_out.h5" ] && [ ! -e "$T/nan_out.h5.tmp" ] && ok "nothing written for the NaN checkpoint" || bad "NaN conversion left a file"
reshard_err "truncated file (mpirun, convert)" "cannot be opened as HDF5" 2 --tp 4 --out "$T/t.h5" "$T/trunc.h5"
reshard_err "not HDF5" "cannot be opened as HDF5" 1 --info Makefile
reshard_err "missing file" "does not exist" 1 --verify "$T/nope.h5"
cp "$C" "$T/nodset.h5"
$PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'r+'); del f['/model/model.norm.weight']; f.close()" "$T/nodset.h5"
reshard_err "missing dataset (--verify)" "lacks the dataset /model/model.norm.weight" 1 --verify "$T/nodset.h5"
reshard_err "missing dataset (convert, mpirun)" "lacks the dataset /model/model.norm.weight" 3 --tp 4 --out "$T/n.h5" "$T/nodset.h5"
$PY -c "import h5py,sys; f=h5py.File(sys.argv[1],'w'); f.attrs['format']=b'something-else'; f.close()" "$T/foreign.h5"
reshard_err "not a ringlm checkpoint" "not a ringlm checkpoint" 1 --info "$T/foreign.h5"
cp "$C" "$T/v2.h5"
$PY -c "import h5py,sys,numpy as np; f=h5py.File(sys.argv[1],'r+'); f.attrs['format_version']=np.int64(2); f.close()" "$T/v2.h5"
reshard_err "unknown format_version" "format_version 2" 1 --verify "$T/v2.h5"
cp "$T/tp4.h5" "$T/keep.h5"; cp "$T/keep.h5" "$T/keep.orig"
reshard_err "--out exists" "exists; pass --force" 1 --tp 2 --out "$T/keep.h5" "$C"
cmp -s "$T/keep.h5" "$T/keep.orig" && ok "the existing --out file is untouched" || bad "existing --out file modified"
$R --tp 2 --force --out "$T/keep.h5" "$C" >/dev/null 2>"$T/e" && $PY -c "import h5py,sys; assert int(h5py.File(sys.argv[1],'r').attrs['saved_tp'])==2" "$T/keep.h5" \
  && ok "--force replaces it" || bad "--force: $(cat "$T/e")"
reshard_err "--tp not dividing n_head" "does not divide n_head = 8" 1 --tp 3 --out "$T/x.h5" "$C"
reshard_err "--tp not dividing n_kv_head (mpirun)" "does not divide n_kv_head = 4" 2 --tp 8 --out "$T/x.h5" "$C"
reshard_err "--tp 0" "--tp needs an integer >= 1" 1 --tp 0 --out "$T/x.h5" "$C"
reshard_err "--cp garbage" "--cp needs an integer >= 1, got 'two'" 1 --cp two --out "$T/x.h5" "$C"
reshard_err "--dtype fp16" "--dtype must be keep, fp32 or bf16" 1 --dtype fp16 --out "$T/x.h5" "$C"
reshard_err "unknown option" "unknown option '--bogus'" 1 --bogus "$C"
reshard_err "no mode" "nothing to do" 1 "$C"
[ ! -e "$T/x.h5" ] && ok "no output from refused conversions" || bad "refused conversion wrote output"
finish
