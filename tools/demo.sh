#!/usr/bin/env bash
# demo.sh — the end-to-end showcase behind `make demo`: prepare long documents from source trees already
# on this machine, train a small long-context model, and say where every result is.
set -euo pipefail
cd "$(dirname "$0")/.."
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$(nproc)}
DATA=${DATA:-out/demo_data}
OUT=${OUT:-out/demo}

# 1. data: every package of Python's standard library is one document ("a whole codebase is one
#    document"), plus this repository's own sources; the byte-level tokenizer needs no vocabulary file.
stdlib=$(/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_paths()["stdlib"])')
docs=()
for d in "$stdlib"/*/; do case "$(basename "$d")" in test|tests|idlelib|site-packages|dist-packages|__pycache__) ;; *) docs+=("$d");; esac; done
docs+=(model attention data train)
if [ ! -f "$DATA/train_000000.bin" ]; then
  echo "== preparing data: ${#docs[@]} source trees, one document each"
  build/prepare --out "$DATA" --doc-per dir --val-frac 0.1 "${docs[@]}"
else
  echo "== reusing prepared data in $DATA (delete it to rebuild)"
fi

# 2. train a small model at a 2K context with YaRN (configs/demo_long.conf)
echo "== training (configs/demo_long.conf, $OMP_NUM_THREADS threads)"
build/train -c configs/demo_long.conf --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT" --force "$@"

echo
echo "== results"
echo "  data:     $DATA/ (train_*.bin, val_*.bin: llm.c uint16 token shards)"
echo "  config:   $OUT/config.txt (the resolved config of the run)"
echo "  metrics:  $OUT/metrics.jsonl (one JSON object per step: loss, lr, grad_norm, tokens_per_s, val_loss)"
