#!/usr/bin/env bash
# One rank fails, the others sit in a barrier: the job must end (not hang), non-zero, with the
# failing rank's message.
set -u
mpiexec=$1 probe=$2 np=$3
out=$(timeout 60 "$mpiexec" -n "$np" "$probe" 2>&1)
rc=$?
failing=$(( np > 1 ? 1 : 0 ))
if [ "$rc" -eq 124 ]; then echo "FAIL: the job hung (killed after 60 s)"; echo "$out"; exit 1; fi
if [ "$rc" -eq 0 ]; then echo "FAIL: the job exited 0"; echo "$out"; exit 1; fi
if ! grep -q "vinf: error: probe failure on purpose (check \`rank != failing\` at tests/mpi/fatal_probe.cpp:.*rank $failing" <<<"$out"; then
  echo "FAIL: no clear message from rank $failing"; echo "$out"; exit 1
fi
echo "ok: $np rank(s), exit $rc, message from rank $failing"
