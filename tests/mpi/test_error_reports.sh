#!/usr/bin/env bash
# Errors under mpirun are printed once for the job, not once per rank: the same bad input on every
# rank (found before or after MPI starts, or decided on rank 0 for all) gives one message without
# rank tags; ranks that fail differently get one message each, naming their ranks; a rank that
# fails alone names itself. Each case counts the message's lines in the job's output.
# usage: test_error_reports.sh MPIEXEC VINF N   (N >= 2)
set -u
mpiexec=$1 vinf=$2 n=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fails=0

# job ARGS...: runs ARGS on N ranks; $out holds the output, $rc the exit status.
job() {
  out=$(timeout 120 "$mpiexec" -np "$n" "$@" 2>&1)
  rc=$?
}
# check NAME TEXT COUNT: the job exited 2 and TEXT is on exactly COUNT lines of its output.
check() {
  local name=$1 text=$2 want=$3 got
  got=$(grep -cF -- "$text" <<<"$out")
  if [ "$rc" -eq 2 ] && [ "$got" -eq "$want" ]; then
    echo "ok: $name ($got line(s))"
  else
    echo "FAIL: $name: exit $rc (want 2), '$text' on $got line(s) (want $want)"; echo "$out" | grep -v '^\s*$' | tail -12
    fails=$((fails + 1))
  fi
}
# every_rank NAME TEXT: one error line in all, TEXT in it, and no rank named.
every_rank() {
  check "$1" "$2" 1
  check "$1: one error line" "vinf: error:" 1
  if grep -F -- "vinf: error:" <<<"$out" | grep -q "(rank"; then
    echo "FAIL: $1: a rank is named although every rank has the error"; fails=$((fails + 1))
  fi
}

small=(--model builtin:tiny --device cpu --video.height 32 --video.width 32 --sampler.steps 1 --prompt.text x
       --vi.local-frames 1 --vi.global-frames 2 --output.video=false)

# The same error everywhere: before MPI_Init (an option, a missing directory) and after it.
job "$vinf" generate --model "$work/nowhere" --prompt.text x --out "$work/a"
every_rank "a missing model on every rank" "vinf: error: option '--model': '$work/nowhere' does not exist (no such directory)"
job "$vinf" forward --bogus 1
every_rank "an unknown option on every rank" "unrecognised option '--bogus'"
job "$vinf" generate "${small[@]}" --video.frames $((4 * n)) --dump.modules 'mid_blok' --out "$work/b"
every_rank "a --dump.modules glob that matches nothing" "--dump.modules: 'mid_blok' matches no module"
[ ! -e "$work/b" ] || { echo "FAIL: the refused run created $work/b"; fails=$((fails + 1)); }

# Decided on rank 0 and passed to every rank: the tokenizer (no rank tags piled on the message).
"$vinf" make-model --preset tiny --layout pipeline --out "$work/pipe" > /dev/null 2>&1 || { echo "FAIL: make-model"; exit 1; }
mkdir -p "$work/tok" && cp "$work/pipe/tokenizer/vocab.json" "$work/tok/"
job "$vinf" generate "${small[@]/builtin:tiny/$work/pipe}" --video.frames $((4 * n)) --model.tokenizer "$work/tok" --out "$work/c"
every_rank "a broken tokenizer read on rank 0" "vinf: error: tokenizer $work/tok: no merges.txt"

# Ranks that fail differently: rank 1 on the height, the others on the width.
cat > "$work/two_errors.sh" <<WRAP
#!/usr/bin/env bash
size=(--video.width 12)
[ "\${OMPI_COMM_WORLD_RANK:-0}" = 1 ] && size=(--video.height 100)
exec "$vinf" generate --model builtin:tiny --prompt.text x "\${size[@]}" --out "$work/d"
WRAP
chmod +x "$work/two_errors.sh"
others="rank 0"
[ "$n" -eq 3 ] && others="ranks 0, 2"
[ "$n" -eq 4 ] && others="ranks 0, 2, 3"
job "$work/two_errors.sh"
check "two errors: the width's ranks named once" "--video.width must be a multiple of 8 (the latent is 1/8 of the size), got 12; use 8 or 16 ($others)" 1
check "two errors: the height's rank named once" "--video.height must be a multiple of 8 (the latent is 1/8 of the size), got 100; use 96 or 104 (rank 1)" 1
check "two errors: two error lines" "vinf: error:" 2

# One rank fails alone (before MPI_Init) while the others go on and wait for it: it names itself.
cat > "$work/one_bad_rank.sh" <<WRAP
#!/usr/bin/env bash
m=builtin:tiny
[ "\${OMPI_COMM_WORLD_RANK:-0}" = "$((n - 1))" ] && m="$work/nowhere"
exec "$vinf" generate "\${@/builtin:tiny/\$m}"
WRAP
chmod +x "$work/one_bad_rank.sh"
job "$work/one_bad_rank.sh" "${small[@]}" --video.frames $((4 * n)) --out "$work/e"
check "one bad rank names itself" "vinf: error: option '--model': '$work/nowhere' does not exist (no such directory) (see vinf generate --help) (rank $((n - 1)))" 1
check "one bad rank: one error line" "vinf: error:" 1

[ "$fails" -eq 0 ] && echo "every error printed once over $n ranks" || exit 1
