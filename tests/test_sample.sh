#!/usr/bin/env bash
# build/sample: greedy decoding with the KV cache is greedy decoding of the independent float64 PyTorch model (a full
# forward per token, no cache) on a YaRN checkpoint past its training length; every layout (tp 2, cp 2 zigzag and
# contiguous, tp 2 x cp 2) and the emulated CUDA backend decode greedily too, with an odd prompt that pads the
# prefill; --verify holds everywhere; a model that memorised a sentence continues it; sampling repeats with its seed
# across layouts; stop_at_eod; training prints samples (sample_every); bad input gives one line.
# "Greedy" is checked for any correct arithmetic (tests/sample_ref.py --check): at every generated position the
# chosen token's logit in the float64 reference, teacher-forced on the program's own sequence, is within 1e-3 of the
# largest. Greedy texts are never compared for equality across arithmetics (another BLAS kernel, another layout, the
# emulated GPU): two correct programs may part at a near-tie, and the verdict must not depend on one kernel's rounding.
cd "$(dirname "$0")/.."
source tests/lib.sh
S() { local np=$1; shift; timeout $HANG_S $(launch "$np") build/sample "$@" </dev/null; }
# greedy FILE NPROMPT: the ids on FILE's first line (NPROMPT prompt tokens, then generated ones) are a greedy decode of
# the checkpoint by the float64 reference; its line (or the first position that is not) in $T/gr
greedy() { $PY tests/sample_ref.py --check "$CK" "$2" "$(head -1 "$1")" >"$T/gr" 2>&1; }
ntok() { head -1 "$1" | tr ',' '\n' | grep -c .; }

mkdir -p "$T/docs"
for i in $(seq 1 60); do echo "the quick brown fox jumps over the lazy dog; pack my box with five dozen liquor jugs." >"$T/docs/d$i.txt"; done
build/prepare --out "$T/data" --val-frac 0 --keep-duplicates "$T/docs" >/dev/null || { bad prepare; finish; }
build/train --vocab_size 257 --d_model 64 --n_layer 2 --n_head 4 --n_kv_head 2 --d_ff 128 --max_seq_len 128 \
  --seq_len 64 --batch_size 8 --micro_batch 8 --max_steps 150 --lr 1e-2 --warmup_steps 5 --rope_scaling yarn \
  --rope_factor 2 --rope_original_max_seq_len 64 --train_data "$T/data/train_*.bin" --out_dir "$T/run" \
  >"$T/train.out" 2>&1 || { bad "training: $(tail -2 "$T/train.out")"; finish; }
CK="$T/run/ckpt_00000150.h5"

# 1. greedy, 1 rank, against the PyTorch reference: 9 prompt tokens + 100 generated (positions past 64, the
#    training length: YaRN's extended range), end-of-document not a stop
P9="116,104,101,32,113,117,105,99,107"   # "the quick"
S 1 --ckpt "$CK" --prompt_ids "$P9" --greedy --max_tokens 100 --stop_at_eod 0 --ids --verify >"$T/g1" 2>"$T/g1.err" \
  || bad "greedy run: $(head -c 300 "$T/g1.err")"
if [ "$(ntok "$T/g1")" = 109 ] && greedy "$T/g1" 9; then ok "greedy with the KV cache = PyTorch float64 greedy, 109 tokens: $(cat "$T/gr")"
else bad "greedy, 109 tokens: $(head -c 300 "$T/gr") ($(head -c 200 "$T/g1"))"; fi
# the check itself can fail: the same sequence with its 50th generated token replaced by another byte is not greedy
head -1 "$T/g1" | awk -F, -v OFS=, '{ $59 = ($59 + 1) % 256; print }' >"$T/g1x"
if ! greedy "$T/g1x" 9 && grep -q "^position 58 " "$T/gr"; then ok "a decode with one token changed is refused: $(cut -c1-150 "$T/gr")"
else bad "the greedy check accepts a changed token: $(head -c 300 "$T/gr")"; fi
grep -q "^verify: .*relative" "$T/g1" && ! grep -q "TOO LARGE" "$T/g1" && ok "1 rank: $(grep ^verify "$T/g1" | sed 's/^verify: //')" || bad "verify 1 rank"

# 2. layouts: the same tokens; an odd 38-token prompt pads the prefill (zigzag cp 2: chunks of 4 parts)
P38=$(printf 'the quick brown fox jumps over the laz' | od -An -tu1 | tr -s ' \n' ',' | sed 's/^,//;s/,$//')
S 1 --ckpt "$CK" --prompt_ids "$P38" --greedy --max_tokens 40 --ids --stop_at_eod 0 >"$T/o1" 2>/dev/null
[ "$(ntok "$T/o1")" = 78 ] && greedy "$T/o1" 38 && ok "38-token prompt (prefilled by one forward): greedy = PyTorch: $(cat "$T/gr")" \
  || bad "38-token prompt: $(head -c 300 "$T/gr") ($(head -c 200 "$T/o1"))"
for lay in "2 2 1 zigzag" "2 1 2 zigzag" "2 1 2 contiguous" "4 2 2 zigzag"; do
  read -r np tp cp cl <<<"$lay"
  n=40; [ "$np" -gt 2 ] && n=12        # 4 ranks on 2 cores: every token is a few collectives per layer
  S "$np" --ckpt "$CK" --prompt_ids "$P38" --greedy --max_tokens $n --ids --stop_at_eod 0 --tp "$tp" --cp "$cp" --cp_layout "$cl" \
    --verify >"$T/o" 2>"$T/e" || { bad "tp $tp cp $cp $cl: $(head -c 300 "$T/e")"; continue; }
  same=other; [ "$(head -1 "$T/o")" = "$(head -1 "$T/o1" | cut -d, -f1-$((38 + n)))" ] && same="the same"
  if [ "$(ntok "$T/o")" = $((38 + n)) ] && greedy "$T/o" 38 && grep -q "^verify:" "$T/o"; then
    ok "tp $tp x cp $cp ($cl): $n greedy tokens ($same tokens as 1 rank; $(sed 's/^greedy at all [0-9]* generated positions (//; s/)$//' "$T/gr")); $(grep ^verify "$T/o" | sed 's/.*: max/max/')"
  else bad "tp $tp x cp $cp ($cl): $(head -c 300 "$T/gr") ($(head -c 200 "$T/o")) $(grep verify "$T/o")"; fi
done
S 2 --ckpt "$CK" --prompt_ids 256 --greedy --max_tokens 30 --ids --cp 2 --stop_at_eod 0 --verify >"$T/o" 2>"$T/e" \
  && [ "$(ntok "$T/o")" = 31 ] && greedy "$T/o" 1 \
  && ok "a one-token prompt (nothing to prefill) on cp 2: $(cat "$T/gr")" || bad "one-token prompt cp 2: $(head -c 300 "$T/gr") $(head -c 200 "$T/o") $(head -c 200 "$T/e")"

# 2b. the CUDA backend on the host emulation (build/emu: make cuda-emu), 1 GPU and cp 2 over NCCL: greedy by the
#     reference (the emulated cuBLAS sums in another order than the CPU's, as a GPU does: a logit moves by ~1e-5)
if [ -x build/emu/sample ]; then
  for lay in "1 1" "2 2"; do
    read -r np cp <<<"$lay"
    RINGLM_EMU_TIMEOUT_S=600 timeout $HANG_S $(launch "$np") build/emu/sample --ckpt "$CK" --prompt_ids "$P38" --greedy --max_tokens 12 \
      --ids --stop_at_eod 0 --cp "$cp" --verify </dev/null >"$T/o" 2>"$T/e" || { bad "emulated CUDA cp $cp: $(head -c 300 "$T/e")"; continue; }
    [ "$(ntok "$T/o")" = 50 ] && greedy "$T/o" 38 && ok "emulated CUDA backend, cp $cp: 12 greedy tokens ($(sed 's/^greedy at all [0-9]* generated positions (//; s/)$//' "$T/gr")); $(grep ^verify "$T/o" | sed 's/.*: max/max/')" \
      || bad "emulated CUDA cp $cp: $(head -c 300 "$T/gr") ($(head -c 200 "$T/o"))"
  done
else bad "build/emu/sample is missing (make cuda-emu)"; fi

# 3. the memorised sentence, as text
S 1 --ckpt "$CK" --prompt "the quick" --greedy --max_tokens 45 >"$T/txt" 2>/dev/null
grep -q "^the quick brown fox jumps over the lazy dog; pack" "$T/txt" && ok "memorised text continues: $(head -1 "$T/txt" | head -c 60)" \
  || bad "text: $(head -c 100 "$T/txt")"

# 3b. the statistics on a line of their own after the text, on stdout (under mpirun stderr is forwarded apart from
#     stdout: the statistics landed in the middle of the text)
S 2 --ckpt "$CK" --prompt "the quick" --greedy --max_tokens 45 --cp 2 >"$T/st" 2>"$T/st.err"
if [ "$(grep -c '^sample: ' "$T/st")" = 1 ] && tail -n 1 "$T/st" | grep -qE '^sample: 9 prompt tokens, 45 generated in [0-9.]+ s' \
   && [ "$(head -n 1 "$T/st" | head -c 9)" = "the quick" ] && ! grep -q 'sample:' "$T/st.err"; then
  ok "statistics on their own last line of stdout: $(tail -n 1 "$T/st" | cut -c1-60)"
else bad "statistics line: $(tail -n 2 "$T/st" | tr '\n' '|') stderr: $(head -c 200 "$T/st.err")"; fi

# 4. sampling: the seed repeats across layouts; another seed differs; top_k 1 is greedy; stop_at_eod stops
S 1 --ckpt "$CK" --prompt "the" --temperature 1.5 --top_p 0.95 --max_tokens 60 --seed 4 --stop_at_eod 0 >"$T/s1" 2>/dev/null
S 2 --ckpt "$CK" --prompt "the" --temperature 1.5 --top_p 0.95 --max_tokens 60 --seed 4 --stop_at_eod 0 --tp 2 >"$T/s2" 2>/dev/null
S 1 --ckpt "$CK" --prompt "the" --temperature 1.5 --top_p 0.95 --max_tokens 60 --seed 5 --stop_at_eod 0 >"$T/s3" 2>/dev/null
for f in s1 s2 s3; do grep -v '^sample: ' "$T/$f" >"$T/$f.txt"; done   # the text, without the statistics line
cmp -s "$T/s1.txt" "$T/s2.txt" && ! cmp -s "$T/s1.txt" "$T/s3.txt" && ok "seed 4 draws the same text on 1 rank and tp 2; seed 5 other text" \
  || bad "seeded sampling: $(head -c 80 "$T/s1") | $(head -c 80 "$T/s2") | $(head -c 80 "$T/s3")"
S 1 --ckpt "$CK" --prompt_ids "$P9" --top_k 1 --temperature 1 --max_tokens 30 --ids --stop_at_eod 0 >"$T/k1" 2>/dev/null
[ "$(head -1 "$T/k1")" = "$(head -1 "$T/g1" | cut -d, -f1-39)" ] && ok "top_k 1 = greedy (the same program, the same tokens)" || bad "top_k 1: $(head -c 200 "$T/k1")"
# stop_at_eod (the default): a prompt inside the memorised sentence, near its end, whose greedy continuation is the
# rest of the sentence, its newline and then the end-of-document token (every document of the data ends so). The
# whole sequence stays within the 64 trained positions, where the model is sure of itself (beyond them, as from a
# lone eod prompt, whether and when a 150-step model emits eod depends on the arithmetic's rounding). The stopped
# sequence must be greedy by the reference and end at its first eod; without the stop the same program goes on past it.
PE=$(printf '; pack my box with five dozen liq' | od -An -tu1 | tr -s ' \n' ',' | sed 's/^,//;s/,$//')
S 1 --ckpt "$CK" --prompt_ids "$PE" --greedy --max_tokens 30 --ids >"$T/eod" 2>"$T/eod.err"
S 1 --ckpt "$CK" --prompt_ids "$PE" --greedy --max_tokens 30 --ids --stop_at_eod 0 >"$T/eod0" 2>/dev/null
n=$(ntok "$T/eod"); last=$(head -1 "$T/eod" | tr ',' '\n' | tail -1)
neod=$(head -1 "$T/eod" | tr ',' '\n' | tail -n +34 | grep -c '^256$')
if [ "$last" = 256 ] && [ "$neod" = 1 ] && [ "$n" -lt 63 ] && greedy "$T/eod" 33 && grep -q "^sample: 33 prompt tokens, $((n - 33)) generated" "$T/eod" \
   && [ "$(ntok "$T/eod0")" = 63 ] && [ "$(head -1 "$T/eod0" | cut -d, -f1-"$n")" = "$(head -1 "$T/eod")" ]; then
  ok "stop_at_eod: stops after the end-of-document token ($((n - 33)) generated, greedy: $(sed 's/^greedy at all [0-9]* generated positions (//; s/)$//' "$T/gr")); --stop_at_eod 0 goes on past it"
else bad "stop_at_eod: last $last, $n tokens, $neod eod, $(ntok "$T/eod0") without the stop; $(head -c 300 "$T/gr"): $(head -c 200 "$T/eod")"; fi

# 5. samples during training: sample_every / sample_tokens / sample_prompt, printed once (world rank 0), on a ring
#    of 2; greedy (temperature 0) the last one equals build/sample on the final checkpoint on the same ring (the same
#    arithmetic: the same tokens whatever the BLAS kernel)
timeout $HANG_S $(launch 2) build/train -c "$T/run/config.txt" --init_from "$CK" --lr 1e-4 --out_dir "$T/run2" --max_steps 4 --sample_every 2 --sample_tokens 20 \
  --sample_prompt "the quick" --sample_temperature 0 --train_data "$T/data/train_*.bin" --ckpt_every 0 --cp 2 </dev/null >"$T/tr2" 2>&1
ns=$(grep -c "^sample (step" "$T/tr2")
[ "$ns" -eq 2 ] && grep -q "^sample (step 2, 20 tokens" "$T/tr2" && grep -q "^sample (step 4" "$T/tr2" \
  && ok "training (cp 2) prints a sample at steps 2 and 4, once: $(grep -m1 '^sample (step' "$T/tr2" | head -c 90)" \
  || bad "training samples: $ns lines: $(grep -i sample "$T/tr2" | head -3) $(tail -2 "$T/tr2")"
want=$(S 2 --ckpt "$T/run2" --cp 2 --prompt "the quick" --greedy --max_tokens 20 --stop_at_eod 0 2>/dev/null | head -1 | sed 's/\\/\\\\/g')
got=$(sed -n 's/^sample (step 4, 20 tokens, temperature 0): "\(.*\)"$/\1/p' "$T/tr2")
[ -n "$got" ] && [ "$got" = "$want" ] && ok "the step-4 sample (greedy) = build/sample on the step-4 checkpoint at cp 2: \"$got\"" \
  || bad "training sample '$got' vs build/sample '$want'"
expect_err "a text sample_prompt on a non-byte vocabulary" "sample_prompt is text|ids:1,2,3" 1 build/train -c "$T/run/config.txt" \
  --out_dir "$T/run3" --vocab_size 300 --sample_every 1 --sample_prompt hi --train_data "$T/data/train_*.bin" --data_meta 0

# 6. bad input: one line, non-zero exit, every rank
expect_err "no checkpoint" "sample:|--ckpt" 1 build/sample --prompt x
expect_err "missing checkpoint" "$T/none" 1 build/sample --ckpt "$T/none" --prompt x
expect_err "top_p out of range" "--top_p|[0, 1]" 1 build/sample --ckpt "$CK" --prompt x --top_p 2
expect_err "token id past the vocabulary" "--prompt_ids|vocab_size = 257" 1 build/sample --ckpt "$CK" --prompt_ids 1,300
expect_err "ranks not tp * cp" "tp 2 x cp 1" 4 build/sample --ckpt "$CK" --prompt x --tp 2
expect_err "unknown option" "--tempreature" 1 build/sample --ckpt "$CK" --prompt x --tempreature 1
expect_err "two prompts" "one of --prompt" 1 build/sample --ckpt "$CK" --prompt x --prompt_ids 1
finish
