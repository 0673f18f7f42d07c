#!/bin/bash
#===- check-peer-death.sh - A dead rank must not hang the job ------------===#
#
# usage: check-peer-death.sh MPIRUN PEER_DEATH_EXE MODE (see PeerDeath.cpp)
# Passes when the 2-rank job exits non-zero within 60 s (timeout's 124 is
# a hang) and, for runtime errors, when the runtime's message names them.
#
#===------------------------------------------------------------------------===#
set -u
mpirun=$1 exe=$2 mode=$3
start=$(date +%s)
out=$(timeout 60 "$mpirun" --allow-run-as-root --oversubscribe -np 2 \
      "$exe" "$mode" 2>&1)
rc=$?
elapsed=$(( $(date +%s) - start ))
echo "$out"
echo "mode=$mode rc=$rc elapsed=${elapsed}s"
if [ $rc -eq 124 ]; then
  echo "FAIL: the job hung after rank 1 died" >&2
  exit 1
fi
if [ $rc -eq 0 ]; then
  echo "FAIL: the job exited 0 although rank 1 died" >&2
  exit 1
fi
if echo "$out" | grep -q "must not"; then
  echo "FAIL: a collective completed without its peer" >&2
  exit 1
fi
case "$mode" in
  fatal) want="loomrt: rank 1: loomrt_cast: unknown dtype 42" ;;
  short-recv) want="loomrt: rank 1: loomrt_p2p_end: received 3 elements from group rank 0, expected 4" ;;
  bad-groups) want="loomrt_comm_create: ranks passed different group lists" ;;
  *) want="" ;;
esac
if [ -n "$want" ] && ! echo "$out" | grep -q "$want"; then
  echo "FAIL: missing the runtime's message: $want" >&2
  exit 1
fi
exit 0
