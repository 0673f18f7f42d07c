#!/bin/bash
#===- check-stall.sh - A rank that never arrives is named -----------------===#
#
# usage: check-stall.sh MPIRUN STALL_EXE MODE (see Stall.cpp)
# Passes when the 3-rank job ends non-zero within 60 s with a watchdog
# report naming rank 2 (and none naming ranks 0 or 1, which arrived).
#
#===------------------------------------------------------------------------===#
set -u
mpirun=$1 exe=$2 mode=$3
out=$(timeout 60 "$mpirun" --allow-run-as-root --oversubscribe -np 3 \
      "$exe" "$mode" 2>&1)
rc=$?
echo "$out"
echo "mode=$mode rc=$rc"
if [ $rc -eq 124 ] || [ $rc -eq 0 ]; then
  echo "FAIL: the job hung or succeeded (rc $rc)" >&2
  exit 1
fi
# Every rank times out at about the same moment; the first report aborts
# the job, so the check accepts any rank's report that names the culprit.
world="all_reduce #1 over the group of world ranks \[0, 1, 2\]"
pair="all_reduce #1 over the group of world ranks \[1, 2\]"
tail="did not complete within 0.0333333 minutes (--distributed-timeout-minutes): "
case "$mode" in
  absent) want="loomrt: rank [01]: loomrt_all_reduce: $world ${tail}rank 2 did not arrive (no answer within 2 s: stopped, dead, or still computing)$" ;;
  elsewhere) want="loomrt: rank [01]: loomrt_all_reduce: $world ${tail}rank 2 waits in $pair$\|loomrt: rank 2: loomrt_all_reduce: $pair ${tail}rank 1 waits in $world$" ;;
esac
if ! echo "$out" | grep -q "$want"; then
  echo "FAIL: no report names rank 2's absence: $want" >&2
  exit 1
fi
if echo "$out" | grep -q "rank 1 did not arrive\|rank 0 did not arrive"; then
  echo "FAIL: a rank that arrived is reported missing" >&2
  exit 1
fi
exit 0
