#!/usr/bin/env bash
# The layers of src/ as src/README.md draws them, checked against the code: every `#include "X/..."`
# in src/F/ must name a folder that F's row of the README's table lists under "may include" (F
# itself always may), and the rules the table's notes state hold: no MPI call in src/app, no Boost
# in src/infinity, no command-line option named in src/mpi. Prints each violation; exit 1 if any.
set -uo pipefail
src=${1:?usage: check_layers.sh SRC_DIR}
readme="$src/README.md"
[ -f "$readme" ] || { echo "FAIL: no $readme"; exit 1; }
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# The table: | `folder/` | holds | may include | ... ; the folders are the backticked words ending in /.
declare -A allowed
while IFS='|' read -r _ folder _ includes _; do
  f=$(sed -n 's/.*`\([a-z]*\)\/`.*/\1/p' <<< "$folder")
  [ -n "$f" ] || continue
  allowed[$f]="$f $(grep -o '`[a-z]*/`' <<< "$includes" | tr -d '`/' | tr '\n' ' ')"
done < <(grep '^| `[a-z]*/`' "$readme")
[ ${#allowed[@]} -gt 0 ] || fail "no layer table in $readme"

for dir in "$src"/*/; do
  f=$(basename "$dir")
  if [ -z "${allowed[$f]+set}" ]; then
    fail "src/$f/ has no row in src/README.md"
    continue
  fi
  while IFS=: read -r file line text; do
    used=$(sed -n 's/^#include "\([a-z]*\)\/.*/\1/p' <<< "$text")
    [ -n "$used" ] || continue
    case " ${allowed[$f]} " in
      *" $used "*) ;;
      *) fail "${file#$src/}:$line includes $used/ (src/$f/ may include: ${allowed[$f]})" ;;
    esac
  done < <(grep -n '^#include "' "$dir"*.* 2>/dev/null)
done

while IFS= read -r hit; do fail "an MPI call in the application: ${hit#$src/}"; done < <(grep -n 'MPI_' "$src"/app/* 2>/dev/null)
while IFS= read -r hit; do fail "Boost in src/infinity: ${hit#$src/}"; done < <(grep -n 'boost' "$src"/infinity/* 2>/dev/null)
while IFS= read -r hit; do fail "a command-line option named in src/mpi: ${hit#$src/}"; done \
  < <(grep -n '"[^"]*--[a-z][a-z-]*' "$src"/mpi/* 2>/dev/null | grep -v '^\s*//')

if [ "$fails" -gt 0 ]; then
  echo "$fails violation(s) of the layers in src/README.md"
  exit 1
fi
echo "ok: ${#allowed[@]} layers, every include and rule as src/README.md says"
