#!/bin/bash
#===- check-contract.sh - The device-contract check stops each misuse ----===#
#
# usage: check-contract.sh MPIRUN CONTRACT_VIOLATION_EXE MODE
# (see ContractViolation.cpp). Runs 2 ranks with the check on; "allowed"
# must succeed, every other mode must fail with its own message, and the
# same misuse must go unnoticed without the check (the cpu backend forgives
# it, which is why the check exists).
#
#===------------------------------------------------------------------------===#
set -u
mpirun=$1 exe=$2 mode=$3
run() {
  timeout 60 "$mpirun" --allow-run-as-root --oversubscribe -np 2 "$@" 2>&1
}
out=$(LOOMRT_CHECK_DEVICE_CONTRACT=1 run -x LOOMRT_CHECK_DEVICE_CONTRACT "$exe" "$mode")
rc=$?
echo "$out"
echo "mode=$mode rc=$rc"
fail() { echo "FAIL: $*" >&2; exit 1; }
[ $rc -eq 124 ] && fail "the job hung"
case "$mode" in
  allowed)
    [ $rc -eq 0 ] || fail "legal uses were refused"
    echo "$out" | grep -q "back\[3\] = 12, sum = 480, mask_sum = 16" ||
      fail "wrong results under the check"
    exit 0 ;;
  host-read|host-write)
    expect="device-contract violation: the host touched device memory at .* (byte [0-9]* of a 64-byte loomrt_alloc buffer); the last runtime call was loomrt_zero"
    stack="main" ;;
  host-tensor)
    expect="loomrt_axpy: argument 'x' (.*) is not device memory"
    stack="main" ;;
  host-comm)
    expect="loomrt_all_reduce: argument 'send' (.*) is not device memory"
    stack="main" ;;
  host-table)
    expect="loomrt_adamw_multi: argument 'tensors\[1\].grad' (.*) is not device memory"
    stack="main" ;;
  bad-free)
    expect="loomrt_free: .* is not a live loomrt_alloc buffer"
    stack="" ;;
  *) fail "unknown mode $mode" ;;
esac
[ $rc -ne 0 ] || fail "the misuse was not stopped"
echo "$out" | grep -q "$expect" || fail "no message matching: $expect"
if [ -n "$stack" ]; then
  echo "$out" | grep -q "^  .*($stack" || fail "the call stack does not name $stack"
fi
# Without the check the cpu backend lets it pass (host-read, host-write,
# host-tensor, host-comm and host-table are all legal host memory accesses
# there).
if [ "$mode" != bad-free ]; then
  run "$exe" "$mode" > /dev/null || fail "the plain run failed too"
fi
exit 0
