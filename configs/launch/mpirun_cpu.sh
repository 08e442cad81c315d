#!/usr/bin/env bash
# mpirun_cpu.sh — a training run on CPU nodes with Open MPI: build/train (OpenMP + OpenBLAS per rank).
#
# Grid: world = NODES x RANKS_PER_NODE = dp x cp x tp. Tensor parallelism stays inside a node (tp ranks are
# consecutive; --map-by ppr:RANKS_PER_NODE:node keeps them on one node); the ring (cp) and the data-parallel
# replicas span nodes. Resume is automatic: when OUT_DIR holds a completed checkpoint ('latest') the run continues
# from it, on any number of nodes (the checkpoint is resharded at load); a run stopped before its first checkpoint
# starts over by itself (launch_resume). SIGTERM or Ctrl-C to this script (or its process group) reaches the ranks as
# SIGUSR1 (tools/preemptible, which keeps mpirun out of this script's process group): they finish the step, save a
# checkpoint and exit 0, however long the step. Never signal mpirun itself: on a SIGTERM of its own Open MPI kills
# the ranks about 2 s later and exits 1.
#
#   HOSTFILE=hosts.txt NODES=2 RANKS_PER_NODE=8 TP=4 CP=4 bash configs/launch/mpirun_cpu.sh [more train keys]
#   NODES=1 RANKS_PER_NODE=4 TP=1 CP=4 CONFIG=configs/tiny.conf bash configs/launch/mpirun_cpu.sh  (one machine)
#   HOSTFILE=hosts.txt RANKS_PER_NODE=slots TP=1 CP=2 bash configs/launch/mpirun_cpu.sh  (each host its slots=N ranks)
# Open MPI's installation is passed as --prefix (MPI_PREFIX, default the one whose mpirun is on PATH) and PATH and
# LD_LIBRARY_PATH go to every rank: the remote nodes need the same paths (a shared file system or identical installs).
# A rank's abort line (a host cut off, a rank stopped) ends the job within timeout_s plus tools/preemptible's grace
# (RINGLM_LAUNCH_GRACE_S, default 10 s), also when mpirun itself would wait for an unreachable host.
trap 'LAUNCH_STOP=1' TERM INT HUP USR1   # first of all: a stop during start-up is kept (configs/launch/common.sh)
set -euo pipefail
case $0 in */*) cd "${0%/*}/../..";; *) cd ../..;; esac
source configs/launch/common.sh
CONFIG=${CONFIG:-configs/llama_125m_128k.conf}
DATA=${DATA:-data}                     # directory with train_*.bin / val_*.bin (and meta.json)
NAME=${CONFIG##*/}; OUT_DIR=${OUT_DIR:-out/${NAME%.conf}}
NODES=${NODES:-2}
RANKS_PER_NODE=${RANKS_PER_NODE:-8}    # or 'slots': as many as each HOSTFILE line's slots=N (hosts of different sizes)
TP=${TP:-4}                            # within a node
CP=${CP:-4}                            # ring size
CKPT_EVERY=${CKPT_EVERY:-100}
THREADS=${THREADS:-1}                  # OpenMP threads per rank
for v in TP CP THREADS; do launch_int "$v" 1; done
launch_int CKPT_EVERY 0
if [ "$RANKS_PER_NODE" = slots ]; then
  [ -n "${HOSTFILE:-}" ] || { echo "launch: RANKS_PER_NODE=slots needs HOSTFILE (its lines' slots=N give the ranks per node)" >&2; exit 1; }
  launch_slots "$HOSTFILE" "$TP"; MAP=(--map-by slot)   # (consecutive ranks fill a host's slots: a tp group on one node)
else
  for v in NODES RANKS_PER_NODE; do launch_int "$v" 1; done
  WORLD=$((NODES * RANKS_PER_NODE)); MAP=(--map-by "ppr:$RANKS_PER_NODE:node")
fi
launch_grid "$WORLD" "$TP" "$CP"
launch_resume "$OUT_DIR"
if [ -z "${HOSTFILE:-}" ] && (( NODES > 1 )); then echo "launch: set HOSTFILE to an Open MPI hostfile (one line per node: 'host slots=N')" >&2; exit 1; fi
launch_mpirun "$WORLD"
MPI+=("${MAP[@]}" -x OMP_NUM_THREADS -x HDF5_USE_FILE_LOCKING)
[ "$RANKS_PER_NODE" != slots ] && (( NODES == 1 && RANKS_PER_NODE > $(nproc) )) && MPI+=(--oversubscribe)
export OMP_NUM_THREADS=$THREADS HDF5_USE_FILE_LOCKING=${HDF5_USE_FILE_LOCKING:-FALSE}
launch_run tools/preemptible "${MPI[@]}" \
  build/train -c "$CONFIG" --train_data "$DATA/train_*.bin" --val_data "$DATA/val_*.bin" \
  --out_dir "$OUT_DIR" --tp "$TP" --cp "$CP" --zero 1 --ckpt_every "$CKPT_EVERY" --keep_last 3 \
  --verify_attention 500 "${RESUME[@]}" "$@"
launch_unfinished "$OUT_DIR" && { echo "launch: stopped before max_steps; run this script again to continue"; exit 0; }

# perplexity by position of the final checkpoint, log-spaced buckets
tools/preemptible "${MPI[@]}" build/eval --ckpt "$OUT_DIR" --data "$DATA/val_*.bin" --log_buckets --tp "$TP" --cp "$CP" \
  --seq_len "$(launch_key "$OUT_DIR" seq_len)" --out "$OUT_DIR/eval" --force
