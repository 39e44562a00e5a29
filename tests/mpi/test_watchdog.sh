#!/usr/bin/env bash
# The watchdog ends a process whose collective waits longer than the communication timeout, with
# exit status 3 and a message naming the call; the way to change the timeout is the caller's text
# (the mpi layer names no option of its own).
set -u
probe=$1
fails=0
what="vinf: error: barrier on the probe group (rank 0 of 2, threads) has waited"
why="another rank of the group has died or hangs (see its log); ending the job"
expect() {  # expect NAME EXPECTED_TEXT [SETTING]
  local name=$1 text=$2 out rc
  out=$(timeout 30 "$probe" "${@:3}" 2>&1)
  rc=$?
  if [ "$rc" -ne 3 ]; then
    echo "FAIL: $name: exit $rc, want 3"; echo "$out"; fails=$((fails + 1)); return
  fi
  if ! grep -qF "$what" <<<"$out" || ! grep -qF "$text" <<<"$out"; then
    echo "FAIL: $name: want '$what ... $text' in:"; echo "$out"; fails=$((fails + 1)); return
  fi
  if grep -q -- '--' <<<"$out" && [ $# -lt 3 ]; then
    echo "FAIL: $name: the message names an option nobody gave it:"; echo "$out"; fails=$((fails + 1)); return
  fi
  echo "ok: $name"
}
expect "the caller's setting in the message" "longer than the communication timeout (--probe-timeout 1 s): $why" \
  --probe-timeout
expect "no setting: the timeout alone" "longer than the communication timeout (1 s): $why"

# A collective that finish() left running (NCCL's on a GPU) is watched until it ends: the timeout,
# and the transport's asynchronous failure, read by the watchdog's thread.
expect_mode() {  # expect_mode NAME MODE EXPECTED_TEXT
  local out rc
  out=$(timeout 30 "$probe" "$2" 2>&1)
  rc=$?
  if [ "$rc" -ne 3 ] || ! grep -qF "$3" <<<"$out"; then
    echo "FAIL: $1: exit $rc (want 3), want '$3' in:"; echo "$out"; fails=$((fails + 1)); return
  fi
  echo "ok: $1"
}
expect_mode "an unsettled collective times out" unsettled \
  "vinf: error: barrier on the probe group (rank 0 of 2, manual) has waited"
expect_mode "an asynchronous failure ends the job" async \
  "vinf: error: barrier on the probe group (rank 0 of 2, manual): the manual transport broke; ending the job"
out=$(timeout 30 "$probe" ended 2>&1)
rc=$?
if [ "$rc" -eq 0 ] && grep -qF "the watchdog let the ended barrier be" <<<"$out"; then
  echo "ok: a collective that has ended does not time out while it waits to be settled"
else
  echo "FAIL: an ended, unsettled collective: exit $rc (want 0):"; echo "$out"; fails=$((fails + 1))
fi
[ "$fails" -eq 0 ] || exit 1
