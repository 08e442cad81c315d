#!/usr/bin/env bash
# The communication layer (comm/comm.h) over MPI: tests/mpi_comm.c at P = 1, 2, 3, 4 ranks (every collective is
# checked at 3 and 4 ranks: with 2, a block sent to the wrong peer of an all-to-all or a ring still arrives right,
# since the next and the previous rank are the same one; keep P >= 3 here), once as is and
# once with RINGLM_COMM_MAX_COUNT=7 (every collective split into many MPI calls, every hop sent as blocks
# of a contiguous type plus a remainder); the CUDA backend's transport under the emulation (NCCL, and staged
# through pinned host memory), at P = 2 and 3, also split; and more hops than a request holds must stop the job with the
# layer's message, not overrun memory.
cd "$(dirname "$0")/.."
source tests/lib.sh

for mc in "" 7; do
  for np in 1 2 3 4; do
    name="P = $np${mc:+, RINGLM_COMM_MAX_COUNT=$mc}"
    RINGLM_COMM_MAX_COUNT=$mc timeout $HANG_S "${MPI[@]}" -np "$np" build/tests/mpi_comm >"$T/o" 2>&1; rc=$?
    line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$T/o" | tail -n 1)
    p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
    if [ "$rc" -eq 0 ] && [ -n "$line" ] && [ "$f" -eq 0 ] && [ "$p" -ge 36 ]; then ok "mpi_comm $name: $line"
    else bad "mpi_comm $name: exit $rc, $(grep -E 'FAIL|passed' "$T/o" | head -5 | tr '\n' ' ')"; fi
  done
done

# the same program on the emulated CUDA backend: its device transport (comm/data_cuda.c) over NCCL (a GPU per rank)
# and over pinned host memory (ranks sharing one GPU), also with every MPI message split
if [ -x build/emu/tests/mpi_comm ]; then
  for tr in "8 nccl" "1 mpi"; do
    read -r dev want <<<"$tr"
    for mc in "" 7; do
      for np in 2 3; do
        name="emulated CUDA transport $want, P = $np${mc:+, RINGLM_COMM_MAX_COUNT=$mc}"
        RINGLM_EMU_DEVICES=$dev RINGLM_COMM_MAX_COUNT=$mc timeout $HANG_S "${MPI[@]}" -np "$np" -x RINGLM_EMU_DEVICES \
          -x RINGLM_COMM_MAX_COUNT build/emu/tests/mpi_comm >"$T/o" 2>&1; rc=$?
        line=$(grep -E '^[0-9]+ passed, [0-9]+ failed$' "$T/o" | tail -n 1)
        p=$(echo "$line" | awk '{print $1}'); f=$(echo "$line" | awk '{print $3}')
        if [ "$rc" -eq 0 ] && [ -n "$line" ] && [ "$f" -eq 0 ] && [ "$p" -ge 36 ] && grep -q "^transport: $want" "$T/o"
        then ok "mpi_comm $name: $line"
        else bad "mpi_comm $name: exit $rc, $(grep -E 'FAIL|passed|transport|comm|emulation' "$T/o" | head -5 | tr '\n' ' ')"; fi
      done
    done
  done
else bad "no build/emu/tests/mpi_comm (make cuda-emu)"; fi

timeout $HANG_S "${MPI[@]}" -np 2 build/tests/mpi_comm --overflow >"$T/o" 2>"$T/e"; rc=$?
if [ $rc -ne 0 ] && [ $rc -ne 124 ] && grep -q "comm: more than 64 transfers in flight" "$T/e" && ! grep -q "not caught" "$T/o"; then
  ok "too many hops in flight on one request: the job stops with the layer's message (exit $rc)"
else bad "request overflow: exit $rc, $(head -c 300 "$T/e") $(cat "$T/o")"; fi

finish
