# common.sh — sourced by the launch scripts of this folder: the grid check, resume detection and the
# "is this run finished?" test that decides whether a stopped job requeues itself.
#   launch_grid WORLD TP CP      exits 1 with one line unless WORLD is a multiple of TP x CP
#   launch_resume OUT_DIR        sets RESUME for a job that may be a requeued or resubmitted one: (--resume latest)
#                                when OUT_DIR holds a completed checkpoint; (--resume OUT_DIR/ckpt_N.h5), the newest,
#                                when a save completed but its 'latest' was not written; (--force) when a run was
#                                stopped before its first checkpoint (metrics.jsonl with records, no checkpoint):
#                                it starts over, and the trainer sets the earlier records aside (never deletes them)
#   launch_key OUT_DIR KEY       the value of KEY in the config.txt the trainer wrote into OUT_DIR
#   launch_run CMD...            runs CMD in the background and waits for it; a SIGTERM or SIGINT to this script is
#                                passed on to CMD (tools/preemptible makes it the ranks' SIGUSR1) and the script
#                                waits for CMD to save and exit instead of dying first; returns CMD's status
#   launch_unfinished OUT_DIR    status 0 when the newest checkpoint's step is below the run's max_steps (both read
#                                from OUT_DIR: 'latest' and the config.txt the trainer wrote), 1 when finished
launch_grid() {
  local world=$1 tp=$2 cp=$3
  if (( world < 1 || world % (tp * cp) )); then
    echo "launch: $world ranks are not a multiple of tp x cp = $tp x $cp = $((tp * cp))" >&2; exit 1
  fi
}

launch_resume() {
  local dir=$1 newest n
  RESUME=()
  if [ -f "$dir/latest" ]; then RESUME=(--resume latest)   # continue an interrupted run, whatever its old layout
  elif newest=$(ls "$dir" 2>/dev/null | grep -xE 'ckpt_[0-9]{8}\.h5' | tail -n 1) && [ -n "$newest" ]; then
    RESUME=(--resume "$dir/$newest")
    echo "launch: '$dir' has no 'latest' (a job stopped as it saved) but holds $newest: resuming from it"
  elif [ -s "$dir/metrics.jsonl" ]; then
    n=$(grep -c '"step"' "$dir/metrics.jsonl" || true)
    RESUME=(--force)
    echo "launch: '$dir' holds a run stopped before its first checkpoint ($n step records, no checkpoint): starting" \
      "over (--force: its records move to metrics.superseded.jsonl)"
  fi
  return 0
}

launch_key() { sed -n "s/^$2 *= *\([^ #]*\).*/\1/p" "$1/config.txt" 2>/dev/null | head -n 1; }

launch_run() {
  "$@" &
  local pid=$! rc=0
  trap "kill -TERM $pid 2>/dev/null" TERM INT
  while :; do
    rc=0; wait "$pid" || rc=$?
    kill -0 "$pid" 2>/dev/null || break     # wait was interrupted by a signal: CMD is still saving
  done
  trap - TERM INT
  return "$rc"
}

launch_unfinished() {
  local dir=$1 name step max
  [ -f "$dir/latest" ] && [ -f "$dir/config.txt" ] || return 1
  name=$(head -n 1 "$dir/latest"); step=${name#ckpt_}; step=${step%%.*}; step=$((10#$step))
  max=$(launch_key "$dir" max_steps)
  [ -n "$max" ] && (( step < max ))
}
