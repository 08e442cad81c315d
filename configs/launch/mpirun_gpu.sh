#!/usr/bin/env bash
# mpirun_gpu.sh — a training run on GPU nodes with Open MPI: build/cuda/train (make cuda), one rank per GPU, NCCL
# between devices.
#
# Grid: world = NODES x GPUS_PER_NODE = dp x cp x tp. Tensor parallelism inside a node (NVLink), the ring or the
# all-to-all (cp) and the data-parallel replicas across nodes; every rank uses device local_rank. Resume is
# automatic (OUT_DIR/latest), on any node count. SIGTERM or Ctrl-C to this script (or its process group) reaches the
# ranks as SIGUSR1 (tools/preemptible): they finish the step, save a checkpoint and exit 0; run the script again to
# continue. Never signal mpirun itself: on a SIGTERM of its own Open MPI kills the ranks about 2 s later and exits 1.
# NCCL / UCX settings: configs/launch/gpu_env.sh (defaults; the environment wins). Open MPI's installation goes as
# --prefix (MPI_PREFIX, default the one whose mpirun is on PATH), and PATH and LD_LIBRARY_PATH (the CUDA, cuDNN and
# NCCL libraries) are forwarded to every rank: remote nodes need the same paths. A rank's abort line ends the job
# within timeout_s plus tools/preemptible's grace (RINGLM_LAUNCH_GRACE_S, default 10 s), even with a host cut off.
#
#   HOSTFILE=hosts.txt NODES=4 GPUS_PER_NODE=8 TP=2 CP=16 bash configs/launch/mpirun_gpu.sh [more train keys]
trap 'LAUNCH_STOP=1' TERM INT HUP USR1   # first of all: a stop during start-up is kept (configs/launch/common.sh)
set -euo pipefail
case $0 in */*) cd "${0%/*}/../..";; *) cd ../..;; esac
source configs/launch/common.sh
source configs/launch/gpu_env.sh
CONFIG=${CONFIG:-configs/llama_1b_128k.conf}
DATA=${DATA:-data}                     # directory with train_*.bin / val_*.bin (and meta.json)
NAME=${CONFIG##*/}; OUT_DIR=${OUT_DIR:-out/${NAME%.conf}}
NODES=${NODES:-1}
GPUS_PER_NODE=${GPUS_PER_NODE:-8}
TP=${TP:-2}                            # within a node
CP=${CP:-4}                            # ring / all-to-all size
CKPT_EVERY=${CKPT_EVERY:-100}
TRAIN=${TRAIN:-build/cuda/train}
[ -x "$TRAIN" ] || { echo "launch: $TRAIN is not built (run: make cuda)" >&2; exit 1; }
for v in NODES GPUS_PER_NODE TP CP; do launch_int "$v" 1; done
launch_int CKPT_EVERY 0
WORLD=$((NODES * GPUS_PER_NODE))
launch_grid "$WORLD" "$TP" "$CP"
launch_resume "$OUT_DIR"
if [ -z "${HOSTFILE:-}" ] && (( NODES > 1 )); then echo "launch: set HOSTFILE to an Open MPI hostfile (one line per node: 'host slots=GPUS')" >&2; exit 1; fi
launch_mpirun "$WORLD"
MPI+=(--map-by "ppr:$GPUS_PER_NODE:node")
for v in "${GPU_ENV_NAMES[@]}"; do MPI+=(-x "$v"); done
(( NODES == 1 && GPUS_PER_NODE > $(nproc) )) && MPI+=(--oversubscribe)
launch_run tools/preemptible "${MPI[@]}" \
  "$TRAIN" -c "$CONFIG" --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT_DIR" --tp "$TP" --cp "$CP" --zero 1 --ckpt_every "$CKPT_EVERY" --keep_last 3 \
  "${RESUME[@]}" "$@"
launch_unfinished "$OUT_DIR" && { echo "launch: stopped before max_steps; run this script again to continue"; exit 0; }

# perplexity by position of the final checkpoint, log-spaced buckets
tools/preemptible "${MPI[@]}" "${TRAIN%/train}/eval" --ckpt "$OUT_DIR" --data "$DATA/val_*.bin" --log_buckets --tp "$TP" --cp "$CP" \
  --seq_len "$(launch_key "$OUT_DIR" seq_len)" --out "$OUT_DIR/eval" --force
