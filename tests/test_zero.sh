#!/usr/bin/env bash
# ZeRO-2 and ZeRO-3 (zero = 2 | 3 over the dp x cp ranks): per-step losses and the last step's gradients equal
# ZeRO-1's within 1e-6, the final weights within 1e-5 (AdamW magnifies the rounding of near-zero gradients summed in
# another order), at dp 2 (2 micro-batches per step: gradients accumulated in the shards), dp 4
# (recompute mlp), tp 2 x cp 2 x dp 2 (recompute qkv), tp 2 with tp_sp x cp 2 by all-to-all (recompute full, tiled
# MLP) and with tied embeddings; what each rank sends over dp x cp per step (the trainer's traffic counters) equals
# the planner's prediction exactly, and ZeRO-2/3 hold fewer gradient bytes (the memory = the plan: test_plan.sh;
# a model this small holds more parameter bytes at ZeRO-3: two layers' and the embedding's buffers); checkpoints keep whole
# tensors: a ZeRO-3 run resumes at ZeRO-1 on another layout and the other way round (steps 3-4 within 1e-5 of an
# uninterrupted run), build/reshard verifies and converts a ZeRO-3 checkpoint with its usual options; zero 2 or 3
# on one replica (dp 1 x cp 1) gives one line.
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0 model attention >/dev/null || { bad "prepare"; finish; }
cat > "$T/z.conf" <<CONF
vocab_size = 259
d_model = 48
n_layer = 3
n_head = 4
n_kv_head = 2
d_ff = 136
max_seq_len = 128
seq_len = 48
batch_size = 4
micro_batch = 1
max_steps = 3
lr = 3e-3
warmup_steps = 1
adam_eps = 1e-6        # see test_cp.sh: keeps AdamW from amplifying fp32 rounding of near-zero gradients
save_final = 0
train_data = $T/data
CONF
CONF=$T/z.conf; STEPS=3
# layout NAME NP DP ARGS...: zero 1, 2, 3 in one layout; 2 and 3 against 1, traffic against the plan
layout() {
  local name=$1 np=$2 dp=$3; shift 3
  for z in 1 2 3; do train_run "${name}_z$z" "$np" --zero $z "$@" || return; done
  for z in 2 3; do
    same_losses "${name}_z1" "${name}_z$z" 1e-6 >"$T/cmp" \
      && $PY tests/compare_dumps.py "$T/${name}_z$z.dump" "$T/${name}_z1.dump" --abs 1e-5 >>"$T/cmp" \
      && $PY tests/compare_dumps.py "$T/${name}_z$z.dump" "$T/${name}_z1.dump" --abs 1e-6 --prefix grad/ >>"$T/cmp" \
      && ok "$name: ZeRO-$z equals ZeRO-1 (losses 1e-6, last gradients 1e-6, weights 1e-5: $(tr '\n' ' ' <"$T/cmp" | tr -s ' '))" \
      || bad "$name: ZeRO-$z differs from ZeRO-1: $(tr '\n' ' ' <"$T/cmp")"
  done
  case " $* " in *" --tp_sp 1 "*) return;; esac   # (sequence parallelism all-gathers over TP too)
  for z in 1 2 3; do build/plan -c "$CONF" --device cpu --dp "$dp" --zero $z --json "$@" >"$T/${name}_z$z.plan" || return; done
  $PY - "$T" "$name" <<'PY' >"$T/tr" && ok "$name: bytes sent over dp x cp per step = the plan: $(cat "$T/tr")" || bad "$name traffic: $(cat "$T/tr")"
import json, re, sys
d, name = sys.argv[1:]
got = {}
for z in (1, 2, 3):
    want = json.load(open(f"{d}/{name}_z{z}.plan"))["dp_sent"]
    steps = [json.loads(l)["sent_parts_bytes"] for l in open(f"{d}/{name}_z{z}/metrics.jsonl")]
    got[z] = steps[0]
    if any(s != want for s in steps): print(f"ZeRO-{z}: steps sent {steps}, planned {want:.0f}"); sys.exit(1)
mem = {z: re.search(r"params ([0-9.]+) MiB, grads ([0-9.]+) MiB", open(f"{d}/{name}_z{z}.out").read()).groups() for z in (1, 2, 3)}
print(f"ZeRO-1 {got[1]:.0f}, ZeRO-2 {got[2]:.0f} ({got[2] / got[1]:.2f}x), ZeRO-3 {got[3]:.0f} ({got[3] / got[1]:.2f}x) bytes; "
      f"params/grads MiB {mem[1]}, {mem[2]}, {mem[3]}")
f = lambda z, i: float(mem[z][i])
sys.exit(0 if f(2, 1) < f(1, 1) and f(3, 1) < f(1, 1) else 1)
PY
}
layout dp2 2 2
layout dp4 4 4 --recompute mlp
layout tp2cp2dp2 8 2 --tp 2 --cp 2 --recompute qkv
layout tp2sp_a2a 4 1 --tp 2 --tp_sp 1 --cp 2 --cp_comm a2a --recompute full --mlp_tile 20
layout tied_dp2 2 2 --tie_embeddings 1

# ---- checkpoints: whole logical tensors, any stage on any layout ----
train_run full4 1 --max_steps 4
train_run z3half 2 --zero 3 --max_steps 2 --save_final 1 && train_run z1resume 4 --zero 1 --tp 2 --max_steps 4 \
  --resume "$T/z3half/ckpt_00000002.h5"
train_run z1half 2 --zero 1 --cp 2 --max_steps 2 --save_final 1 && train_run z3resume 4 --zero 3 --max_steps 4 \
  --resume "$T/z1half/ckpt_00000002.h5"
resumed_tail "ZeRO-3 (dp 2) checkpoint resumed at ZeRO-1 on tp 2 x dp 2" full4 z1resume
resumed_tail "ZeRO-1 (cp 2) checkpoint resumed at ZeRO-3 on dp 4" full4 z3resume
grep -q "saved with tp 1 cp 1 dp 2 zero 3, loaded into tp 2 cp 1 dp 2 zero 1" "$T/z1resume.out" \
  && ok "resume notes the layouts: $(grep -o 'saved with [^;]*' "$T/z1resume.out" | head -1)" \
  || bad "resume note: $(grep -i 'saved with' "$T/z1resume.out")"
C="$T/z3half/ckpt_00000002.h5"
build/reshard --verify "$C" >"$T/o" 2>&1 && grep -q "all checksums ok" "$T/o" && build/reshard --info "$C" | grep -q "zero 3" \
  && build/reshard --tp 2 --out "$T/rs.h5" "$C" >"$T/o" 2>&1 && train_run rsresume 2 --tp 2 --max_steps 4 --resume "$T/rs.h5" \
  && resumed_tail "reshard of a ZeRO-3 checkpoint (--verify, --info, --tp 2: no new options), resumed at tp 2" full4 rsresume \
  || bad "reshard of a ZeRO-3 checkpoint: $(tail -3 "$T/o")"

# ---- bad combinations ----
expect_train_err "$CONF" "zero 3 on one replica" "zero = 3 shards gradients and parameters over the dp x cp ranks, and this layout has one (dp 1 x cp 1)" 1 --zero 3
expect_train_err "$CONF" "zero 2 on one replica (tp 2)" "zero = 2 shards gradients over the dp x cp ranks, and this layout has one" 2 --zero 2 --tp 2
finish
