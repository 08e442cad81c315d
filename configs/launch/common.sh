# common.sh — sourced by the launch scripts of this folder: the grid check, resume detection and the
# "is this run finished?" test that decides whether a stopped job requeues itself.
#   launch_grid WORLD TP CP      exits 1 with one line unless WORLD is a multiple of TP x CP
#   launch_resume OUT_DIR        sets RESUME for a job that may be a requeued or resubmitted one: (--resume latest)
#                                when OUT_DIR holds a completed checkpoint; (--resume OUT_DIR/ckpt_N.h5), the newest,
#                                when a save completed but its 'latest' was not written; (--force) when a run was
#                                stopped before its first checkpoint (metrics.jsonl with records, no checkpoint):
#                                it starts over, and the trainer sets the earlier records aside (never deletes them)
#   launch_key OUT_DIR KEY       the value of KEY in the config.txt the trainer wrote into OUT_DIR
#   launch_run CMD...            runs CMD in the background and waits for it; a SIGTERM, SIGINT or SIGHUP to this
#                                script is passed on to CMD as SIGTERM once CMD has its handlers (tools/preemptible
#                                makes it the ranks' SIGUSR1) and the script waits for CMD to save and exit instead of
#                                dying first; returns CMD's status. A signal before it starts CMD: nothing is started
#   launch_unfinished OUT_DIR    status 0 when the newest checkpoint's step is below the run's max_steps (both read
#                                from OUT_DIR: 'latest' and the config.txt the trainer wrote), or when this script was
#                                stopped by a signal; 1 when finished
#   launch_int NAME MIN          exits 1 with one line unless the variable NAME holds a whole number >= MIN; leading
#                                zeros are dropped (08 is 8)
#   launch_mpirun NP             sets MPI to the start of an Open MPI command line for NP ranks: --prefix (Open MPI's
#                                installation, MPI_PREFIX or the one whose mpirun is on PATH: the remote daemons then
#                                find their programs and libraries whatever a node's login shell sets), PATH and
#                                LD_LIBRARY_PATH forwarded to the ranks (-x), the HOSTFILE when set, --bind-to none,
#                                --allow-run-as-root as root
#   launch_slots HOSTFILE TP     for RANKS_PER_NODE=slots: sets WORLD to the sum of the hostfile's slots and NODES to
#                                its hosts; exits 1 with one line unless every host line says slots=N, N a multiple
#                                of TP (a tp group stays on one node)
# Signals: each script's first line records a SIGTERM, SIGINT, SIGHUP or SIGUSR1 in LAUNCH_STOP (`trap 'LAUNCH_STOP=1'
# TERM INT HUP USR1`) and launch_run acts on it: before the run started, nothing is started; later, it is passed on.
# (bash 5.2 can fail with "trap: line 2: unexpected EOF ..." when a trapped signal arrives just as it parses a
# command substitution; the scripts keep those few before the run, and nothing has been started then.)
launch_int() {
  local name=$1 min=$2 v=${!1-}
  if ! [[ $v =~ ^[0-9]{1,9}$ ]] || (( 10#$v < min )); then
    echo "launch: $name='$v' must be a whole number >= $min" >&2; exit 1
  fi
  printf -v "$name" '%d' "$((10#$v))"   # (decimal: bash's arithmetic would read 010 as octal 8 and refuse 08)
}

launch_mpirun() {
  local np=$1 bin prefix=${MPI_PREFIX:-}
  if [ -z "$prefix" ]; then
    bin=$(command -v mpirun) || { echo "launch: mpirun is not on PATH (install Open MPI, or put its bin/ on PATH)" >&2; exit 1; }
    bin=$(readlink -f "$bin"); prefix=${bin%/bin/*}
  fi
  MPI=(mpirun -np "$np" --prefix "$prefix" --bind-to none -x PATH)
  [ -n "${LD_LIBRARY_PATH:-}" ] && MPI+=(-x LD_LIBRARY_PATH)   # (-x of an unset name is a warning line)
  (( EUID == 0 )) && MPI+=(--allow-run-as-root)
  [ -n "${HOSTFILE:-}" ] && MPI+=(--hostfile "$HOSTFILE")
  return 0
}

launch_slots() {
  local file=$1 tp=$2 host rest n line=0
  [ -r "$file" ] || { echo "launch: HOSTFILE '$file' cannot be read (RANKS_PER_NODE=slots counts its slots)" >&2; exit 1; }
  WORLD=0 NODES=0
  while read -r host rest; do
    line=$((line + 1))
    [[ -z $host || $host == \#* ]] && continue
    if ! [[ " $rest " =~ \ slots=([0-9]{1,6})\  ]] || (( 10#${BASH_REMATCH[1]} < 1 || 10#${BASH_REMATCH[1]} % tp )); then
      echo "launch: $file line $line ('$host $rest'): RANKS_PER_NODE=slots needs 'slots=N' on every host line, N a multiple of TP = $tp" >&2
      exit 1
    fi
    n=$((10#${BASH_REMATCH[1]})); WORLD=$((WORLD + n)); NODES=$((NODES + 1))
  done <"$file"
  (( NODES )) || { echo "launch: HOSTFILE '$file' names no host" >&2; exit 1; }
}

launch_grid() {
  local world=$1 tp=$2 cp=$3
  launch_int TP 1; launch_int CP 1
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
  if [ -n "${LAUNCH_STOP:-}" ]; then
    echo "launch: stopped by a signal before the run started: nothing was started; run this script again to start"
    exit 0
  fi
  local pid="" rc=0
  trap 'LAUNCH_STOP=1; [ -n "$pid" ] && launch_pass_on "$pid"' TERM INT HUP USR1
  "$@" &
  pid=$!
  [ -n "${LAUNCH_STOP:-}" ] && launch_pass_on "$pid"   # (a signal between the check above and here)
  while :; do
    rc=0; wait "$pid" || rc=$?
    kill -0 "$pid" 2>/dev/null || break     # wait was interrupted by a signal: CMD is still saving
  done
  trap 'LAUNCH_STOP=1' TERM INT HUP USR1
  return "$rc"
}

# launch_pass_on PID: SIGTERM to PID once it has a handler for it (a launcher that has only just started would die
# of it before its own handlers exist: tools/preemptible, srun); after 30 s regardless
launch_pass_on() {
  local i m self; self=$(tr '\0' ' ' </proc/$$/cmdline 2>/dev/null)
  for i in $(seq 1 300); do
    m=$(sed -n 's/^SigCgt:[[:space:]]*//p' "/proc/$1/status" 2>/dev/null)
    [ -n "$m" ] || return 0   # (it has ended)
    # (a fork of this script that has not yet run the launcher shows this script's handlers)
    [ "$(tr '\0' ' ' <"/proc/$1/cmdline" 2>/dev/null)" != "$self" ] && (( (16#$m >> 14) & 1 )) && break
    sleep 0.1
  done
  kill -TERM "$1" 2>/dev/null
}

launch_unfinished() {
  local dir=$1 name step max
  [ -n "${LAUNCH_STOP:-}" ] && return 0
  [ -f "$dir/latest" ] && [ -f "$dir/config.txt" ] || return 1
  name=$(head -n 1 "$dir/latest"); step=${name#ckpt_}; step=${step%%.*}; step=$((10#$step))
  max=$(launch_key "$dir" max_steps)
  [ -n "$max" ] && (( step < max ))
}
