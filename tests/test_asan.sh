#!/usr/bin/env bash
# The CPU programs built with AddressSanitizer and UndefinedBehaviorSanitizer (make asan: build/asan/) run the usual
# paths without a report: train at ZeRO 0-3, tp 2, cp 2 (ring and all-to-all), recompute full with a tiled MLP and
# document masking, a resume; eval and sample on 1 rank and on a ring; reshard; plan; prepare. A sanitizer's report
# stops a program (UBSan without recovery) and fails its check. The sanitized losses equal the release build's
# within 1e-5 (the build is -O1: another compiler's rounding, never another result). Open MPI's own allocations are
# not the project's: leak detection is off (ASan's reports of invalid accesses stay on).
cd "$(dirname "$0")/.."
source tests/lib.sh
A=build/asan
for p in train eval sample reshard plan prepare; do [ -x "$A/$p" ] || { bad "$A/$p is missing (make asan)"; finish; }; done
export ASAN_OPTIONS=detect_leaks=0:abort_on_error=0:exitcode=99 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1:exitcode=99
# san NAME NP PROG ARGS...: PROG of the sanitized build on NP ranks; ok when it exits 0 with no sanitizer report
san() {
  local name=$1 np=$2 prog=$3; shift 3
  timeout $HANG_S $(launch "$np") "$A/$prog" "$@" </dev/null >"$T/$name.out" 2>"$T/$name.err"; local rc=$?
  local rep; rep=$(grep -h -m1 -E 'ERROR: AddressSanitizer|runtime error:|ERROR: LeakSanitizer' "$T/$name.out" "$T/$name.err")
  if [ $rc -eq 0 ] && [ -z "$rep" ]; then return 0; fi
  bad "$name ($np ranks): exit $rc${rep:+: $rep}: $(grep -v '^ *#' "$T/$name.err" | head -c 300)"; return 1
}
san prep 1 prepare --out "$T/data" --val-frac 0.3 --seed 1 model attention && ok "prepare (sanitized): $(tail -n 1 "$T/prep.out" | cut -c1-100)"
cat > "$T/a.conf" <<CONF
vocab_size = 259
d_model = 48
n_layer = 2
n_head = 4
n_kv_head = 2
d_ff = 96
max_seq_len = 128
seq_len = 64
batch_size = 4
micro_batch = 2
max_steps = 2
lr = 3e-3
warmup_steps = 1
save_final = 1
train_data = $T/data/train_*.bin
val_data = $T/data/val_*.bin
val_every = 2
val_batches = 1
CONF
runs=("z0 1 --zero 0" "z1 2 --zero 1" "z2 2 --zero 2" "z3 2 --zero 3" "tp2 2 --tp 2 --tp_sp 1" "cp2 2 --cp 2"
      "a2a 2 --cp 2 --cp_comm a2a" "full 2 --cp 2 --recompute full --mlp_tile 32 --doc_mask 1")
for r in "${runs[@]}"; do
  read -r name np args <<<"$r"
  # shellcheck disable=SC2086
  san "$name" "$np" train -c "$T/a.conf" --out_dir "$T/$name" $args || continue
  # the same run on the release build: the same losses within 1e-5
  # shellcheck disable=SC2086
  timeout $HANG_S $(launch "$np") build/train -c "$T/a.conf" --out_dir "$T/$name.rel" $args </dev/null >/dev/null 2>&1
  if $PY - "$T/$name/metrics.jsonl" "$T/$name.rel/metrics.jsonl" <<'PY' >"$T/cmp" 2>&1; then ok "train $name (sanitized, $np ranks $args): no report; $(cat "$T/cmp")"; else bad "train $name: $(cat "$T/cmp")"; fi
import json, sys
a, b = ([json.loads(l)["loss"] for l in open(f)] for f in sys.argv[1:])
assert len(a) == len(b) == 2, (a, b)
w = max(abs(x - y) / y for x, y in zip(a, b))
print(f"losses {a[0]:.6f} {a[1]:.6f} = the release build's within {w:.1e}")
assert w <= 1e-5
PY
done
san resume 2 train -c "$T/a.conf" --out_dir "$T/z3" --zero 1 --resume latest --max_steps 3 \
  && grep -q "resumed from" "$T/resume.out" && ok "a ZeRO-3 run resumed at ZeRO-1 (sanitized): $(grep -o 'resumed from [^ ]*' "$T/resume.out" | sed "s|$T/||")"
CK=$T/z0/ckpt_00000002.h5
san ev1 1 eval --ckpt "$CK" --data "$T/data/val_*.bin" --seq_len 64 --docs 2 --bucket 16 --out "$T/ev" --name e1 && ok "eval, 1 rank (sanitized)"
san ev2 2 eval --ckpt "$CK" --data "$T/data/val_*.bin" --seq_len 64 --docs 2 --bucket 16 --cp 2 --out "$T/ev" --name e2 && ok "eval, cp 2 (sanitized)"
san pk 2 eval --passkey --ckpt "$CK" --passkey_lens 128 --passkey_depths 0,1 --passkey_trials 1 --cp 2 --out "$T/ev" --name pk && ok "eval --passkey, cp 2 (sanitized)"
san s1 1 sample --ckpt "$CK" --prompt_ids 1,2,3 --max_tokens 8 --ids && ok "sample, 1 rank (sanitized): $(head -c 60 "$T/s1.out")"
san s2 2 sample --ckpt "$CK" --prompt_ids 1,2,3,4,5 --max_tokens 8 --ids --cp 2 --tp 1 --verify && ok "sample, cp 2 with --verify (sanitized)"
san rs 1 reshard --verify "$T/z3/ckpt_00000002.h5" && ok "reshard --verify of a ZeRO-3 checkpoint (sanitized)"
san rs2 2 reshard --tp 2 --cp 1 --dp 1 --out "$T/z3.tp2.h5" "$T/z3/ckpt_00000002.h5" && ok "reshard of a ZeRO-3 checkpoint to tp 2 on 2 ranks (sanitized)"
san pl 1 plan -c "$T/a.conf" --device cpu --cp 2 --longest && ok "plan --longest (sanitized)"
finish
