#!/usr/bin/env bash
# run_multinode.sh — a long-context training run across nodes with plain mpirun (Open MPI).
#
# Grid: world = NODES x RANKS_PER_NODE = dp x cp x tp. Tensor parallelism stays inside a node (tp ranks are
# consecutive, so they land on one node with --map-by ppr:RANKS_PER_NODE:node); the ring (cp) and the
# data-parallel replicas span nodes. Resume is automatic: if OUT_DIR holds a completed checkpoint
# ('latest'), the run continues from it — on any number of nodes; the checkpoint is resharded at load.
#
#   HOSTFILE=hosts.txt NODES=2 RANKS_PER_NODE=8 TP=4 CP=4 bash configs/run_multinode.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CONFIG=${CONFIG:-configs/llama_125m_128k.conf}
DATA=${DATA:-data}                     # directory with train_*.bin / val_*.bin
OUT_DIR=${OUT_DIR:-out/llama_125m_128k}
HOSTFILE=${HOSTFILE:?set HOSTFILE to an Open MPI hostfile (one line per node: 'host slots=N')}
NODES=${NODES:-2}
RANKS_PER_NODE=${RANKS_PER_NODE:-8}
TP=${TP:-4}                            # within a node
CP=${CP:-4}                            # ring size: seq_len / (2 CP) tokens per chunk
CKPT_EVERY=${CKPT_EVERY:-100}
THREADS=${THREADS:-1}                  # OpenMP threads per rank (CPU backend)
WORLD=$((NODES * RANKS_PER_NODE))
if (( WORLD % (TP * CP) )); then echo "world $WORLD is not divisible by tp*cp = $((TP * CP))" >&2; exit 1; fi

RESUME=()
[ -f "$OUT_DIR/latest" ] && RESUME=(--resume latest)   # continue an interrupted run, whatever its old layout

export OMP_NUM_THREADS=$THREADS
# tools/preemptible: SIGTERM to this script (a scheduler's preemption) reaches the ranks as SIGUSR1 (mpirun would
# kill them 1 s after a SIGTERM of its own); they finish the step, save and exit 0
tools/preemptible mpirun -q -np "$WORLD" --hostfile "$HOSTFILE" --map-by "ppr:$RANKS_PER_NODE:node" --bind-to none \
  -x OMP_NUM_THREADS -x HDF5_USE_FILE_LOCKING \
  build/train -c "$CONFIG" --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT_DIR" --tp "$TP" --cp "$CP" --zero 1 --ckpt_every "$CKPT_EVERY" --keep_last 3 \
  --verify_attention 500 "${RESUME[@]}" "$@"

# perplexity by position of the newest checkpoint, at the trained context and 2x beyond it with YaRN x2
mpirun -q -np "$WORLD" --hostfile "$HOSTFILE" --map-by "ppr:$RANKS_PER_NODE:node" -x OMP_NUM_THREADS \
  build/eval --ckpt "$OUT_DIR" --data "$DATA/val_*.bin" --seq_len 131072 --log_buckets --tp "$TP" --cp "$CP" \
  --out "$OUT_DIR/eval" --force
