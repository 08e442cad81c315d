#!/usr/bin/env bash
# test_hf_recipe.sh — docs/huggingface.md's recipe, run as printed: its first sh block, unchanged, by bash -e in a
# directory laid out as the repository (build/ and tools/ of this checkout), with the user's environment: the
# block's own exports for mpirun (as root here), no RINGLM_* variables, 2 cores. With its tiny random Llama (made by
# the block's Python in build/hfenv): the import, prepare_hf, eval before, the YaRN extension on tp 2 x cp 4, eval
# after, the export and transformers' generate all run; then what they made is checked: the checkpoint and the
# shards, both evaluations' series, the extended model below the base at 4 L (any correct arithmetic: 40 steps from
# a random model's ln 512), the export loadable, and the text generate() printed starts with its prompt.
cd "$(dirname "$0")/.."
source tests/lib.sh
if ! HFPY=$(bash tools/setup/hf_env.sh 2>"$T/env.err"); then
  echo "skip: docs/huggingface.md's recipe needs transformers in build/hfenv: $(head -n 1 "$T/env.err")"
  finish
fi
$PY - docs/huggingface.md >"$T/recipe.sh" <<'PYEOF' || { bad "no sh block in docs/huggingface.md"; finish; }
import re, sys
m = re.search(r"^```sh\n(.*?)^```$", open(sys.argv[1]).read(), re.S | re.M)
sys.exit(1) if not m else print(m.group(1), end="")
PYEOF
R=$T/repo
mkdir -p "$R" && ln -s "$PWD/build" "$R/build" && ln -s "$PWD/tools" "$R/tools"
(cd "$R" && env -u RINGLM_PYTHON -u RINGLM_HFENV -u OMP_NUM_THREADS -u OMPI_MCA_rmaps_base_oversubscribe \
   -u OMPI_ALLOW_RUN_AS_ROOT -u OMPI_ALLOW_RUN_AS_ROOT_CONFIRM timeout $HANG_S bash -e "$T/recipe.sh") \
  >"$T/run.out" 2>"$T/run.err" && ok "the recipe runs as printed ($(grep -c '' "$T/recipe.sh") lines, exit 0)" \
  || { bad "the recipe: exit $?: $(grep -v '^ *$' "$T/run.err" | tail -n 4 | tr '\n' ' ' | head -c 600)"; finish; }
$PY - "$R" "$T/run.out" <<'PYEOF' >"$T/c" 2>&1 && ok "what it made: $(tail -n 1 "$T/c")" || bad "the recipe's results: $(tail -n 3 "$T/c")"
import csv, json, math, os, sys
r, out = sys.argv[1], open(sys.argv[2]).read()
for f in ("out/hf/tiny-llama/config.json", "out/hf/tiny-llama/tokenizer.json", "out/base.h5", "data/long/meta.json",
          "out/ext/latest", "out/ext/hf/model.safetensors", "out/ext/hf/tokenizer.json"):
    assert os.path.exists(os.path.join(r, f)), f"no {f}"
meta = json.load(open(f"{r}/data/long/meta.json"))
assert meta["vocab_size"] == 512 and meta["eod_id"] == 0 and meta["documents"]["val"] > 0, meta
def series(name):   # {series: token-weighted mean NLL over all positions}
    rows = list(csv.DictReader(open(f"{r}/out/ext/eval/{name}.csv")))
    out = {}
    for s in dict.fromkeys(x["series"] for x in rows):
        b = [x for x in rows if x["series"] == s and x["tokens"] != "0"]
        out[s] = sum(float(x["mean_nll"]) * int(x["tokens"]) for x in b) / sum(int(x["tokens"]) for x in b)
    return out
before, after = series("before"), series("after")
assert len(before) == 2 and list(after) == ["base, YaRN x4", "extended"], (before, after)
assert all(abs(v - math.log(512)) < 0.2 for v in before.values()), before          # a random model: about ln 512
assert after["extended"] < after["base, YaRN x4"] - 0.2, after                       # trained: clearly lower
gen = [l for l in out.splitlines() if l.startswith("<s>")]
assert gen and gen[-1].startswith("<s>def main("), out[-300:]
print(f"before {', '.join(f'{k} {v:.3f}' for k, v in before.items())}; after {', '.join(f'{k} {v:.3f}' for k, v in after.items())} "
      f"(mean NLL per token); generate() printed {gen[-1][:20]!r}...")
PYEOF
finish
