# Sourced by the command-line tests: expect <exit code> <text the output must contain> -- command...
# runs the command, compares its exit status and output, prints ok/FAIL and counts failures in $fails.
fails=0

expect() {
  local want_rc=$1 want_text=$2
  shift 3
  local out rc
  out=$("$@" 2>&1)
  rc=$?
  if [ "$rc" -ne "$want_rc" ]; then
    echo "FAIL: '$*' exited $rc, expected $want_rc"; echo "$out" | tail -20; fails=$((fails + 1))
  elif [[ "$out" != *"$want_text"* ]]; then
    echo "FAIL: '$*' output lacks '$want_text'"; echo "$out" | tail -20; fails=$((fails + 1))
  else
    echo "ok: $* -> $rc"
  fi
}
