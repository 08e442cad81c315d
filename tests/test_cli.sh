#!/usr/bin/env bash
# The command line of build/train, build/plan, build/reshard and tests/tool_dump (build/eval's: test_eval.sh):
# `--key=value` and dashes for underscores are read as `--key value`; an unknown key names the nearest one; the
# start-up config dump and config.txt print floats as the shortest text that reads back to the same float, while
# checkpoints keep their exact /config text (resume and init_from still agree with them).
cd "$(dirname "$0")/.."
source tests/lib.sh

build/prepare --out "$T/data" --val-frac 0.2 model eval >/dev/null 2>"$T/prep.err" \
  || { bad "prepare failed: $(cat "$T/prep.err")"; finish; }
cat > "$T/tiny.conf" <<CONF
vocab_size = 257
d_model = 32
n_layer = 1
n_head = 2
n_kv_head = 2
d_ff = 64
max_seq_len = 64
seq_len = 32
batch_size = 2
max_steps = 2
lr = 0.002
min_lr = 0.0002
warmup_steps = 1
train_data = $T/data/train_*.bin
CONF

# ---- --key=value and dashes ----
build/train -c "$T/tiny.conf" --max-steps=3 --out-dir="$T/eq" --rope-theta 500000 --seed=7 >"$T/eq.out" 2>&1 \
  && [ "$(wc -l <"$T/eq/metrics.jsonl")" -eq 3 ] && grep -q "^rope_theta = 500000$" "$T/eq.out" && grep -q "^seed = 7$" "$T/eq.out" \
  && ok "train: --max-steps=3 --out-dir=DIR --rope-theta 500000 --seed=7 are read as the keys" \
  || bad "train --key=value / dashes: $(tail -3 "$T/eq.out")"
build/train -c "$T/tiny.conf" --max_steps 3 --out_dir "$T/plain" --rope_theta 500000 --seed 7 >/dev/null 2>&1 \
  && cmp -s <(cut -d, -f1-2 "$T/eq/metrics.jsonl") <(cut -d, -f1-2 "$T/plain/metrics.jsonl") \
  && ok "train: the same run as with --key value" || bad "train: --key=value run differs from --key value"
build/train -c "$T/tiny.conf" --out_dir "$T/init" --init-from="$T/eq" --max-steps=1 >"$T/init.out" 2>&1 \
  && grep -q "^initialised from $T/eq/ckpt_00000003.h5" "$T/init.out" \
  && ok "train: --init-from=DIR reaches --init_from" || bad "train --init-from=: $(tail -3 "$T/init.out")"
build/train -c "$T/tiny.conf" --out_dir "$T/eqv" --train-data="$T/data/train_000000.bin" --max_steps=1 >"$T/eqv.out" 2>&1 \
  && grep -qF "train_data = $T/data/train_000000.bin" "$T/eqv.out" \
  && ok "train: a value after '=' is kept as given (dashes and all)" || bad "train --train-data=: $(tail -3 "$T/eqv.out")"

# ---- unknown keys: the nearest one ----
train_err() { ERR_RC=1 expect_err "$1" "$2" 1 build/train -c "$T/tiny.conf" --out_dir "$T/bad" "${@:3}"; }
train_err "train: misspelt key" "config: command line: unknown key 'max_step' — did you mean 'max_steps'? (see --help for the keys)" --max-step 3
train_err "train: misspelt key with =" "unknown key 'lrr' — did you mean 'lr'?" --lrr=0.1
train_err "train: a prefix" "unknown key 'rope_fact' — did you mean 'rope_factor'?" --rope-fact 2
train_err "train: misspelt own option" "unknown key 'init_frm' — did you mean 'init_from'?" --init-frm x
ERR_ALSO='! grep -q "did you mean" "$T/e"' train_err "train: nothing near" "unknown key 'foo' (see --help for the keys)" --foo 1
train_err "train: flag given a value" "train: command line: option '--force' takes no value (given '--force=yes')" --force=yes
train_err "train: empty value after =" "key 'lr' has invalid value '' (expected a number)" --lr=
echo "max_step = 3" > "$T/typo.conf"
ERR_RC=1 expect_err "train: misspelt key in a file" "typo.conf:1: unknown key 'max_step' — did you mean 'max_steps'?" 1 build/train -c "$T/typo.conf"
# a key set twice in one file: one line naming both lines (before: the last one silently won); the command line may
# still override a file's key, and a second -c file another's
{ cat "$T/tiny.conf"; printf '# later\nval_every = 0\n\n lr=0.01  # again\n'; } > "$T/dup.conf"
l1=$(grep -n '^lr = ' "$T/dup.conf" | cut -d: -f1); l2=$(grep -n '^ lr=' "$T/dup.conf" | cut -d: -f1)
ERR_RC=1 expect_err "train: a key set twice in a config file" "config: key 'lr' is set twice, at $T/dup.conf:$l1 and $T/dup.conf:$l2|keep one" 1 \
  build/train -c "$T/dup.conf" --out_dir "$T/bad"
ERR_RC=1 expect_err "plan: a key set twice in a config file" "key 'lr' is set twice, at $T/dup.conf:$l1 and $T/dup.conf:$l2" 1 build/plan -c "$T/dup.conf"
printf 'lr = 0.004\n' > "$T/lr.conf"
build/train -c "$T/tiny.conf" -c "$T/lr.conf" --lr 0.003 --max_steps 1 --out_dir "$T/two" >"$T/two.out" 2>&1 && grep -q "^lr = 0.003$" "$T/two.out" \
  && ok "train: two -c files and the command line may each set lr (the last given wins)" || bad "train: -c -c --lr: $(tail -2 "$T/two.out")"
build/train --help | grep -q -- "--key=value" && ok "train --help mentions --key=value" || bad "train --help"

# ---- floats: the shortest text in the dump and config.txt; checkpoints exact ----
# the run above (lr 0.002, min_lr 0.0002, the default norm_eps 1e-5, init_std 0.02, beta2 0.95, rope_theta 500000)
grep -q "^lr = 0.002$" "$T/eq.out" && grep -q "^min_lr = 0.0002$" "$T/eq.out" && grep -q "^norm_eps = 1e-05$" "$T/eq.out" &&
  grep -q "^init_std = 0.02$" "$T/eq.out" && grep -q "^beta2 = 0.95$" "$T/eq.out" && grep -q "^adam_eps = 1e-08$" "$T/eq.out" \
  && ok "start-up dump: lr = 0.002, norm_eps = 1e-05, init_std = 0.02, beta2 = 0.95 (no float32 artefacts)" \
  || bad "start-up dump floats: $(grep -E '^(lr|norm_eps|init_std|beta2) =' "$T/eq.out" | tr '\n' ' ')"
# floats of random magnitudes: every one printed as the shortest %.{p}g (p = 1..9) that reads back to the same
# float (whole numbers below 1e16 written out), in the dump, in config.txt; the checkpoint's /config is exact
$PY - "$T" >"$T/rand.args" <<'PYEOF'
import numpy as np, sys
r = np.random.default_rng(5)
def f(lo, hi): return float(np.float32(10 ** r.uniform(lo, hi)))
v = {"lr": f(-5, -2), "min_lr": f(-9, -6), "norm_eps": f(-8, -3), "init_std": f(-3, 0), "rope_theta": f(2, 7),
     "rope_factor": f(0, 1.5), "beta1": float(np.float32(r.uniform(0, 1))), "beta2": float(np.float32(r.uniform(0, 1))),
     "adam_eps": f(-12, -6), "weight_decay": f(-4, 0), "grad_clip": f(-2, 3), "timeout_s": f(0, 18)}
print(" ".join(f"--{k}={x!r}" for k, x in v.items()))
PYEOF
# shellcheck disable=SC2046
build/train -c "$T/tiny.conf" --out_dir "$T/rand" --max_steps 0 $(cat "$T/rand.args") >"$T/rand.out" 2>&1 \
  || bad "random floats run: $(tail -3 "$T/rand.out")"
$PY - "$T" <<'PYEOF' && ok "floats: shortest round-trip text in the dump and config.txt, exact %.9g in the checkpoint's /config" || bad "float text"
import h5py, numpy as np, re, sys
t = sys.argv[1]
given = {m.group(1): np.float32(float(m.group(2))) for m in re.finditer(r"--(\w+)=(\S+)", open(f"{t}/rand.args").read())}
def shortest(x):
    for p in range(1, 10):
        if np.float32(float("%.*e" % (p - 1, x))) == x:
            break
    m, e = ("%.*e" % (p - 1, x)).split("e")
    if p <= int(e) < 16:   # a whole number: written out
        d = m.replace(".", "").replace("-", "")
        return ("-" if x < 0 else "") + d + "0" * (int(e) + 1 - len(d))
    return "%.*g" % (p, x)
dump = dict(re.findall(r"^(\w+) = (.*)$", open(f"{t}/rand.out").read(), re.M))
txt = dict(re.findall(r"^(\w+) = (.*)$", open(f"{t}/rand/config.txt").read(), re.M))
assert dump == txt, "the dump and config.txt differ"
for k, x in given.items():
    assert np.float32(float(txt[k])) == x, (k, txt[k], x)            # reads back to the same float
    assert txt[k] == shortest(x), (k, txt[k], shortest(x))            # and is the shortest such text
with h5py.File(f"{t}/rand/ckpt_00000000.h5") as f:
    for k, x in given.items():
        a = f["config"].attrs[k].decode()
        assert a == "%.9g" % x and np.float32(float(a)) == x, (k, a)
print("     " + ", ".join(f"{k} = {txt[k]}" for k in list(given)[:6]))
PYEOF
build/train -c "$T/tiny.conf" --out_dir "$T/eq" --resume latest --max_steps 4 --rope_theta 500000 --seed 7 >"$T/res.out" 2>&1 \
  && [ "$(wc -l <"$T/eq/metrics.jsonl")" -eq 4 ] && grep -q "training keys changed on resume: max_steps (checkpoint 3, run 4)$" "$T/res.out" \
  && ok "resume agrees with the checkpoint's /config (max_steps the only key reported changed)" || bad "resume: $(grep -E 'note|error' "$T/res.out" | head -3)"

# ---- build/plan ----
build/plan -c "$T/tiny.conf" --device=cpu --memory-gib=1 --seq-len=64 --json >"$T/p1" 2>&1 &&
  build/plan -c "$T/tiny.conf" --device cpu --memory_gib 1 --seq_len 64 --json >"$T/p2" 2>&1 && cmp -s "$T/p1" "$T/p2" \
  && grep -q '"seq_len": 64' "$T/p1" && ok "plan: --device=cpu --memory-gib=1 --seq-len=64" || bad "plan --key=value: $(cat "$T/p1")"
plan_err() { expect_err "$1" "$2" 1 build/plan -c "$T/tiny.conf" "${@:3}"; }
plan_err "plan: misspelt own option" "unknown key 'memory_gb' — did you mean 'memory_gib'?" --memory-gb 80
plan_err "plan: misspelt key" "unknown key 'seqlen' — did you mean 'seq_len'?" --seqlen=64
plan_err "plan: flag given a value" "plan: command line: option '--json' takes no value" --json=1

# ---- build/reshard ----
CK="$T/eq/ckpt_00000004.h5"
build/reshard --tp=2 --out="$T/r2.h5" --model-only "$CK" >"$T/rs.out" 2>&1 && $PY -c "
import h5py, sys
with h5py.File(sys.argv[1]) as f: assert f.attrs['saved_tp'] == 2 and 'optimizer' not in f" "$T/r2.h5" \
  && ok "reshard: --tp=2 --out=NEW --model-only" || bad "reshard --key=value: $(tail -3 "$T/rs.out")"
build/reshard --tp 1 --out "$T/r1.h5" --model_only "$CK" >/dev/null 2>&1 && ok "reshard: --model_only is --model-only" || bad "reshard --model_only"
reshard_err() { expect_err "$1" "$2" 1 build/reshard "${@:3}"; }
reshard_err "reshard: misspelt option" "reshard: unknown option '--modle_only' — did you mean '--model-only'? (see --help)" --tp 1 --out "$T/x.h5" --modle-only "$CK"
reshard_err "reshard: flag given a value" "reshard: command line: option '--force' takes no value" --force=1 --out "$T/x.h5" "$CK"

# ---- tests/tool_dump ----
build/tests/tool_dump -c "$T/tiny.conf" --out="$T/d1.bin" --seq-len=16 >/dev/null 2>&1 &&
  build/tests/tool_dump -c "$T/tiny.conf" --out "$T/d2.bin" --seq_len 16 >/dev/null 2>&1 && cmp -s "$T/d1.bin" "$T/d2.bin" \
  && ok "tool_dump: --out=FILE --seq-len=16" || bad "tool_dump --key=value"
finish
