#!/usr/bin/env bash
# Context parallelism by all-to-all (cp_comm = a2a: Ulysses; a2a+ring: all-to-all inside groups of cp_a2a ranks, a
# ring across them) and sequence parallelism in TP groups (tp_sp): every layout trains the one-process model —
# per-step losses within 1e-5 (relative), first-step gradients within 1e-5 of one process (per tensor) —:
# cp 4 as a2a (4 ranks for 2 KV heads: KV heads replicated), cp 4 as a2a 2 x ring 2 (with --verify_attention, both
# ring layouts), tp 2 x cp 2 a2a with tp_sp, tp 2 x a2a 2 x dp 2 with ZeRO-1 (8 ranks), every recompute mode, with
# document masking; on the emulated CUDA backend over NCCL and over the staged transport. The bytes and messages
# the comm layer counts equal the formulas (README). Checkpoints move between a hybrid layout and the plain ring on
# another rank count, both ways; a hybrid run exports to Hugging Face like any other. Bad combinations stop every
# rank with one line naming the numbers.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
# short documents (two README lines each): every window holds document boundaries
mkdir -p "$T/docs"
awk -v d="$T/docs" 'NF { b = b $0 "\n"; if (++k == 2) { f = sprintf("%s/p%05d.txt", d, n++); printf "%s", b > f; close(f); b = ""; k = 0 } }' README.md docs/*.md
build/prepare --out "$T/short" --val-frac 0 "$T/docs" >/dev/null 2>&1 || { bad "prepare short documents"; finish; }
cat > "$T/a.conf" <<CONF
vocab_size = 257
d_model = 64
n_layer = 2
n_head = 8
n_kv_head = 2
d_ff = 96
max_seq_len = 128
seq_len = 64
batch_size = 4
micro_batch = 2
max_steps = 3
lr = 3e-3
warmup_steps = 1
adam_eps = 1e-6
save_final = 0
train_data = $T/data
CONF
CONF=$T/a.conf; STEPS=3
tr_cmp() {   # NAME NP DESCRIPTION REF ARGS...: train on NP ranks, losses within 1e-5 of run REF
  local name=$1 np=$2 what=$3 ref=$4; shift 4
  train_run "$name" "$np" "$@" </dev/null || return 1
  if same_losses "$ref" "$name" 1e-5 >"$T/cmp.out" 2>&1; then ok "$what: $(tail -n 1 "$T/cmp.out" | sed 's/^ *//')"
  else bad "$what: $(tail -n 3 "$T/cmp.out" | tr '\n' ' ')"; fi
}

train_run one 1 || finish
tr_cmp a2a4 4 "cp 4 as a2a (U 4 > 2 KV heads: each KV head on 2 ranks)" one --cp 4 --cp_comm a2a
# (a2aring runs the full schedule, whose traffic the formulas below give; the pruned schedule's is test_cp_balance.sh's)
tr_cmp a2aring 4 "cp 4 as a2a 2 x ring 2, zigzag" one --cp 4 --cp_comm a2a+ring --cp_a2a 2 --verify_attention 1 --cp_prune 0
grep -q "verify_attention step 3: ring vs one process" "$T/a2aring.out" && ! grep -q WARNING "$T/a2aring.out" \
  && ok "a2a x ring: --verify_attention agrees: $(grep -m1 -o 'max rel diff [0-9.e+-]*' "$T/a2aring.out")" \
  || bad "a2a x ring: verify_attention missing or warned"
tr_cmp a2aring_c 4 "cp 4 as a2a 2 x ring 2, contiguous" one --cp 4 --cp_comm a2a+ring --cp_a2a 2 --cp_layout contiguous
tr_cmp tp2a2a_sp 4 "tp 2 x cp 2 a2a with tp_sp" one --tp 2 --cp 2 --cp_comm a2a --tp_sp 1
tr_cmp tp2a2a_dp2 8 "tp 2 x a2a 2 x dp 2 with ZeRO-1 (8 ranks)" one --tp 2 --cp 2 --cp_comm a2a --zero 1
tr_cmp tp2sp 2 "tp 2 with tp_sp" one --tp 2 --tp_sp 1
for rc in mlp qkv full; do
  tr_cmp "rc_$rc" 4 "recompute $rc, tp 2 x cp 2 a2a with tp_sp" one --tp 2 --cp 2 --cp_comm a2a --tp_sp 1 --recompute "$rc"
  tr_cmp "rcr_$rc" 4 "recompute $rc, a2a 2 x ring 2" one --cp 4 --cp_comm a2a+ring --cp_a2a 2 --recompute "$rc"
done

# document masking (short documents)
SH=(--train_data "$T/short" --doc_mask 1)
train_run doc1 1 "${SH[@]}" </dev/null
tr_cmp doc_a2a4 4 "doc_mask, cp 4 as a2a" doc1 --cp 4 --cp_comm a2a "${SH[@]}"
tr_cmp doc_a2aring 4 "doc_mask, a2a 2 x ring 2 (documents through both)" doc1 --cp 4 --cp_comm a2a+ring --cp_a2a 2 "${SH[@]}"
tr_cmp doc_tp2sp 4 "doc_mask, tp 2 x cp 2 a2a with tp_sp" doc1 --tp 2 --cp 2 --cp_comm a2a --tp_sp 1 "${SH[@]}"
train_run nodoc 1 --train_data "$T/short" </dev/null
if same_losses doc1 nodoc 1e-4 >/dev/null 2>&1; then bad "doc_mask leaves the losses of the short documents as they are"
else ok "doc_mask changes the losses of the short documents (the masks are active)"; fi

# first-step gradients (identical weights): the exchange's exactness per tensor. Each step accumulates 2
# micro-batches (batch 4, micro_batch 2, dp 1), so a gradient buffer that is not cleared between micro-batches
# (tp_sp's norm-weight slots) shows here by a wide margin; losses alone would show it only slightly
STEPS=1
train_run g1 1 --max_steps 1 </dev/null
for lay in "g_a2a4 4 --cp 4 --cp_comm a2a" "g_hyb 4 --tp 2 --cp 2 --cp_comm a2a --tp_sp 1" "g_ring 4 --cp 4 --cp_comm a2a+ring --cp_a2a 2" \
           "g_tpsp 2 --tp 2 --tp_sp 1"; do
  read -r name np args <<<"$lay"
  # shellcheck disable=SC2086
  train_run "$name" "$np" --max_steps 1 $args </dev/null &&
  $PY tests/compare_dumps.py "$T/$name.dump" "$T/g1.dump" --rel 1e-5 --prefix grad/ >"$T/cmp" \
    && ok "$args: first-step gradients (2 micro-batches accumulated) equal one process within 1e-5 relative ($(cat "$T/cmp"))" || bad "$args gradients: $(cat "$T/cmp")"
done
STEPS=3

# traffic: what the comm layer counted (rank 0, one step) against the formulas, per layer and sequence x 2 layers x
# 4 sequences (micro_batch 2, accumulation 2): ring (R ranks, Ta = U T tokens of Hka floats): (3R - 2) hops of
# 2 Ta Hka floats; all-to-all (U ranks, T tokens): 9 exchanges of (U - 1) T w floats, w = Hq/U for q, out, dout,
# dq; kv_w for k, v, dk, dv; nh/U for D
$PY - "$T" <<'PYEOF' >"$T/tr.out" 2>&1 && ok "traffic: $(cat "$T/tr.out")" || bad "traffic: $(cat "$T/tr.out")"
import json, sys
T = sys.argv[1]
def step(run): return json.loads(open(f"{T}/{run}/metrics.jsonl").readlines()[1])
seqs, hd, nh, nkv, S = 2 * 4, 8, 8, 2, 64   # layers x sequences; head_dim 64 / 8
def want(cp, U):
    R, t = cp // U, S // cp
    nkv_at = max(nkv // U, 1); kv_w = nkv_at * hd; Hq = nh * hd
    hop = (3 * R - 2) * 2 * U * t * kv_w * 4 if R > 1 else 0
    a2a = (U - 1) * t * 4 * (4 * Hq // U + 4 * kv_w + nh // U) if U > 1 else 0
    return seqs * hop, seqs * (3 * R - 2 if R > 1 else 0), seqs * a2a, seqs * 9 * (U - 1)
out = []
for run, cp, U in (("a2a4", 4, 4), ("a2aring", 4, 2), ("one", 1, 1)):
    r = step(run); hb, hm, ab, am = want(cp, U)
    got = (r["sent_hop_bytes"], r["sent_hop_msgs"], r["sent_a2a_bytes"], r["sent_a2a_msgs"])
    assert got == (hb, hm, ab, am), (run, got, (hb, hm, ab, am))
    out.append(f"{run}: hops {hb / 1024:.0f} KiB in {hm}, a2a {ab / 1024:.0f} KiB in {am}")
print("; ".join(out))
PYEOF

# the planner's per-step figures are the same counts
for lay in "a2a4 --cp 4 --cp_comm a2a" "a2aring --cp 4 --cp_comm a2a+ring --cp_a2a 2 --cp_prune 0" "rc_full --tp 2 --cp 2 --cp_comm a2a --tp_sp 1 --recompute full"; do
  read -r name args <<<"$lay"
  # shellcheck disable=SC2086
  build/plan -c "$CONF" --device cpu --dp 1 --json $args >"$T/$name.plan" 2>&1
  $PY - "$T/$name.plan" "$T/$name/metrics.jsonl" <<'PYEOF' >"$T/pl.out" 2>&1 && ok "plan = counted traffic, $args: $(cat "$T/pl.out")" || bad "plan traffic $args: $(cat "$T/pl.out")"
import json, sys
p = json.load(open(sys.argv[1])); r = json.loads(open(sys.argv[2]).readlines()[1])
got = (r["sent_hop_bytes"], r["sent_hop_msgs"], r["sent_a2a_bytes"], r["sent_a2a_msgs"])
want = (p["ring_sent"], p["ring_msgs"], p["a2a_sent"], p["a2a_msgs"])
print(f"ring {want[0]:.0f} B in {want[1]:.0f}, a2a {want[2]:.0f} B in {want[3]:.0f}")
assert got == want, (got, want)
PYEOF
done

# on the emulated CUDA backend: NCCL (a GPU per rank) and the staged transport (ranks sharing one)
# (1e-5: the emulated cuBLAS sums in another order than the CPU's, as a GPU does; fp32 runs differ by rounding,
# <= 1.2e-8 over 3 steps in tests/test_cuda_emu.sh; a wrong block or head moves the loss by > 1e-3)
emu_cmp() {   # NAME NP DEVICES DESCRIPTION ARGS...: the emulated CUDA trainer (fp32) against the one-process CPU run
  local name=$1 np=$2 dev=$3 what=$4; shift 4
  if RINGLM_EMU_DEVICES=$dev timeout $HANG_S $(launch "$np") build/emu/train -c "$CONF" --out_dir "$T/$name" --matmul_precision fp32 \
       "$@" </dev/null >"$T/$name.out" 2>"$T/$name.err" && same_losses one "$name" 1e-5 >"$T/cmp.out" 2>&1
  then ok "$what: $(grep -m1 '^transport' "$T/$name.out"); $(tail -n 1 "$T/cmp.out" | sed 's/^ *//')"
  else bad "$what: $(head -c 300 "$T/$name.err") $(tail -n 2 "$T/cmp.out" | tr '\n' ' ')"; fi
}
if [ -x build/emu/train ]; then
  emu_cmp emu_hyb 4 8 "emulated CUDA backend, tp 2 x cp 2 a2a with tp_sp" --tp 2 --cp 2 --cp_comm a2a --tp_sp 1
  emu_cmp emu_ring 4 1 "emulated CUDA backend, a2a 2 x ring 2 on one GPU" --cp 4 --cp_comm a2a+ring --cp_a2a 2
else bad "no build/emu/train (make cuda-emu)"; fi

# checkpoints: hybrid -> plain ring on another rank count, and back; steps 3-4 against 4 uninterrupted steps
STEPS=4
train_run full4 1 --max_steps 4 </dev/null
train_run hyb2 4 --max_steps 2 --save_final 1 --tp 2 --cp 2 --cp_comm a2a --tp_sp 1 </dev/null
train_run ring_res 2 --max_steps 4 --cp 2 --resume "$T/hyb2/ckpt_00000002.h5" </dev/null
train_run one2 1 --max_steps 2 --save_final 1 </dev/null
train_run hyb_res 4 --max_steps 4 --cp 4 --cp_comm a2a+ring --cp_a2a 2 --tp_sp 1 --resume "$T/one2/ckpt_00000002.h5" </dev/null
for r in ring_res hyb_res; do resumed_tail "resume $r" full4 "$r"; done
# Hugging Face export of the hybrid run's checkpoint, and its re-import
SY=(env RINGLM_PYTHON=/usr/bin/python3)
if "${SY[@]}" tools/hf_export "$T/hyb2/ckpt_00000002.h5" --out "$T/ehyb" >"$T/ex.out" 2>&1 &&
   "${SY[@]}" tools/hf_import "$T/ehyb" --out "$T/hyb_re.h5" >>"$T/ex.out" 2>&1 &&
   $PY tests/hf_check.py exported "export of the hybrid run" "$T/ehyb" "$T/hyb2/ckpt_00000002.h5" ::: \
       same "import(export(hybrid))" "$T/hyb2/ckpt_00000002.h5" "$T/hyb_re.h5" >"$T/hf.out" 2>&1
then ok "the hybrid run (tp 2 x cp 2 a2a, tp_sp) exports to Hugging Face and re-imports bit-identically"
else bad "hybrid export: $(tail -n 4 "$T/ex.out" "$T/hf.out" | tr '\n' ' ')"; fi

# bad combinations: one line naming the numbers, every rank stops
expect_train_err "$CONF" "cp_a2a not dividing cp" "cp_comm = a2a+ring needs cp_a2a between 2 and cp / 2 dividing cp = 4|cp_a2a = 3" 4 --cp 4 --cp_comm a2a+ring --cp_a2a 3
expect_train_err "$CONF" "cp_a2a with the plain ring" "cp_a2a = 2 needs cp_comm = a2a or a2a+ring" 2 --cp 2 --cp_a2a 2
expect_train_err "$CONF" "a2a over fewer than cp ranks" "cp_comm = a2a runs the all-to-all over all cp = 4 ranks, but cp_a2a = 2" 4 --cp 4 --cp_comm a2a --cp_a2a 2
expect_train_err "$CONF" "n_head not divisible by tp x cp_a2a" "n_head = 6 is not divisible by tp x cp_a2a = 1 x 4 = 4" 4 --cp 4 --cp_comm a2a --n_head 6 --d_model 48
expect_train_err "$CONF" "KV heads and cp_a2a that do not divide" "n_kv_head / tp = 6 KV heads per TP rank and cp_a2a = 4" 4 --cp 4 --cp_comm a2a --n_head 12 --n_kv_head 6 --d_model 96
expect_train_err "$CONF" "tp_sp with tokens not divisible by tp" "tp_sp = 1 splits each rank's micro_batch x seq_len / cp = 1 x 63 = 63 tokens over tp = 2" 2 --tp 2 --tp_sp 1 --micro_batch 1 --seq_len 63 --cp_layout contiguous
expect_train_err "$CONF" "unknown cp_comm" "cp_comm = 'ulysses' must be ring, a2a or a2a+ring" 2 --cp 2 --cp_comm ulysses
expect_train_err "$CONF" "seq_len not divisible by 2 cp" "seq_len = 60 is not divisible by 2 * cp = 8" 4 --cp 4 --cp_comm a2a --seq_len 60
finish
