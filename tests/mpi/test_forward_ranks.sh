#!/usr/bin/env bash
# `vinf forward` under mpirun -np N with --vi.mode off: rank r runs the plain model on frames
# [r F/N, (r+1) F/N), so each slice of the gathered result must equal a one-process run on just
# those frames, and the file must hold every frame.
# usage: test_forward_ranks.sh MPIEXEC VINF TEST_TOOL FIXTURE_MODEL_DIR N
set -u
mpiexec=$1 vinf=$2 tool=$3 fixture=$4 n=$5
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
require_test_device "$vinf"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
inputs=$fixture/inputs.safetensors
frames=16

"$mpiexec" -np "$n" "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/all.safetensors" --vi.mode off "${device_args[@]}" \
  || { echo "FAIL: mpirun -np $n vinf forward exited $?"; exit 1; }
fails=0
for ((r = 0; r < n; r++)); do
  f0=$((r * frames / n)) f1=$(((r + 1) * frames / n))
  "$tool" slice-frames "$inputs" "$work/in$r.safetensors" "$f0" "$f1" || exit 1
  "$vinf" forward --model "$fixture" --inputs "$work/in$r.safetensors" --out "$work/r$r.safetensors" --vi.mode off "${device_args[@]}" 2>/dev/null \
    || { echo "FAIL: the one-process run on frames [$f0, $f1) failed"; exit 1; }
  "$tool" compare-frames "$work/all.safetensors" "$work/r$r.safetensors" "$f0" "$f1" 1e-5 noise_pred.t900 noise_pred.t500 \
    || fails=$((fails + 1))
done
if [ "$n" -eq 1 ]; then
  "$tool" compare "$work/all.safetensors" "$fixture/ref_plain.safetensors" 1e-4 noise_pred.t900 noise_pred.t500 || fails=$((fails + 1))
fi
# --vi.mode exact: the plain model over the ranks (16 frames: 5-6 per rank at 3), equal to the
# reference implementation's whole-video output; with CFG parallelism at even sizes.
"$mpiexec" -np "$n" "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/exact.safetensors" --vi.mode exact "${device_args[@]}" 2>"$work/exact.log" \
  || { echo "FAIL: mpirun -np $n vinf forward --vi.mode exact exited $?"; tail -5 "$work/exact.log"; exit 1; }
"$tool" compare "$work/exact.safetensors" "$fixture/ref_plain.safetensors" 1e-4 noise_pred.t900 noise_pred.t500 || fails=$((fails + 1))
if [ "$n" -gt 1 ] && ! grep -q "all-to-all" "$work/exact.log"; then
  echo "FAIL: exact mode over $n ranks reports no all-to-all traffic"; fails=$((fails + 1))
fi
if [ $((n % 2)) -eq 0 ]; then
  "$mpiexec" -np "$n" "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/exact_cfg.safetensors" --vi.mode exact \
    --parallel.cfg 2 "${device_args[@]}" 2>/dev/null || { echo "FAIL: exact mode with --parallel.cfg 2 exited $?"; exit 1; }
  "$tool" compare "$work/exact_cfg.safetensors" "$fixture/ref_plain.safetensors" 1e-4 noise_pred.t900 noise_pred.t500 || fails=$((fails + 1))
fi
# --parallel.tensor: the transformer blocks split over the ranks (T = N, and T = 2 with exact mode
# and with CFG at 4 ranks) give the reference's numbers; a layout that does not fit is refused.
tensor_runs=()
[ "$n" -gt 1 ] && tensor_runs+=("--parallel.tensor $n --vi.mode off")
[ "$n" -eq 4 ] && tensor_runs+=("--parallel.tensor 2 --vi.mode exact" "--parallel.tensor 2 --parallel.cfg 2 --vi.mode exact")
for run in "${tensor_runs[@]}"; do
  # shellcheck disable=SC2086
  if "$mpiexec" -np "$n" "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/tp.safetensors" $run "${device_args[@]}" 2>"$work/tp.log"; then
    "$tool" compare "$work/tp.safetensors" "$fixture/ref_plain.safetensors" 1e-4 noise_pred.t900 noise_pred.t500 \
      || { echo "FAIL: $run"; fails=$((fails + 1)); }
  else
    echo "FAIL: $run exited $?"; tail -5 "$work/tp.log"; fails=$((fails + 1))
  fi
done
if [ "$n" -eq 3 ]; then
  out=$("$mpiexec" -np 3 "$vinf" forward --model "$fixture" --inputs "$inputs" --out "$work/s.safetensors" --parallel.tensor 2 "${device_args[@]}" 2>&1)
  rc=$?
  if [ "$rc" -ne 2 ] || [[ "$out" != *"3 rank(s) cannot be laid out as 1 CFG branch(es) x frame ranks x 2 tensor ranks"* ]]; then
    echo "FAIL: --parallel.tensor 2 on 3 ranks: exit $rc"; echo "$out" | tail -3; fails=$((fails + 1))
  fi
fi
# Too many ranks for the frames is refused on every rank, with a clear message.
if [ "$n" -gt 1 ]; then
  "$tool" slice-frames "$inputs" "$work/short.safetensors" 0 $((n - 1)) || exit 1
  out=$("$mpiexec" -np "$n" "$vinf" forward --model "$fixture" --inputs "$work/short.safetensors" --out "$work/s.safetensors" --vi.mode off "${device_args[@]}" 2>&1)
  rc=$?
  if [ "$rc" -eq 0 ] || [[ "$out" != *"fewer than the $n ranks it is split over"* ]]; then
    echo "FAIL: $((n - 1)) frames over $n ranks: exit $rc"; echo "$out" | tail -5; fails=$((fails + 1))
  fi
fi
# A bad input on one rank only (the last gets a model directory that does not exist) ends every
# rank with that rank's message and status 2, while the others wait in a collective: no hang.
if [ "$n" -gt 1 ]; then
  cat > "$work/one_bad_rank.sh" <<WRAP
#!/usr/bin/env bash
m="$fixture"
[ "\${OMPI_COMM_WORLD_RANK:-0}" = "$((n - 1))" ] && m="$work/no-such-model"
exec "$vinf" forward --model "\$m" --inputs "$inputs" --out "$work/bad.safetensors" --vi.mode off ${device_args[*]}
WRAP
  chmod +x "$work/one_bad_rank.sh"
  out=$(timeout 120 "$mpiexec" -np "$n" "$work/one_bad_rank.sh" 2>&1)
  rc=$?
  if [ "$rc" -ne 2 ] || [[ "$out" != *"no-such-model' does not exist (no such directory) (see vinf forward --help) (rank $((n - 1)))"* ]] || [ -e "$work/bad.safetensors" ]; then
    echo "FAIL: one bad rank of $n: exit $rc (want 2)"; echo "$out" | tail -5; fails=$((fails + 1))
  fi
fi
# A Wan2.1 transformer in exact mode: its 5 latent frames over the ranks (1-2 each at 3 and 4), the
# self-attention over every token: diffusers' prediction, and the bytes as the analytic count
# (2 blocks, 2 timesteps, f32, per call: R = 4 rows, 16 tokens a frame, head size 16; Ulysses
# groups of u ranks, u the largest divisor of N and R, pass keys and values round a ring of N / u:
# 3 (R/u) (T_g - T_k) + 2 (R/u) (T - T_g) + (R - R/u) T_k elements, all-to-alls and ring exchanges).
wan=$fixture/../wan-tiny
if ! out=$("$mpiexec" -np "$n" "$vinf" forward --model "$wan/transformer" --inputs "$wan/inputs.safetensors" --out "$work/wan.safetensors" --vi.mode exact "${device_args[@]}" 2>&1); then
  echo "FAIL: mpirun -np $n vinf forward (Wan, exact)"; echo "$out" | tail -5; fails=$((fails + 1))
fi
"$tool" compare "$work/wan.safetensors" "$wan/ref.safetensors" 1e-4 noise_pred.t0 noise_pred.t1 || fails=$((fails + 1))
u=1
for ((d = 1; d <= n; d++)); do (( n % d == 0 && 4 % d == 0 )) && u=$d; done
for ((r = 0; r < n; r++)); do
  tokens=$((((r + 1) * 5 / n - r * 5 / n) * 16)) group=0
  for ((m = r / u * u; m < r / u * u + u; m++)); do group=$((group + ((m + 1) * 5 / n - m * 5 / n) * 16)); done
  bytes=$(((3 * (4 / u) * (group - tokens) + 2 * (4 / u) * (80 - group) + (4 - 4 / u) * tokens) * 16 * 4 * 4))
  line=$(echo "$out" | grep "rank $r: " | head -1)
  a2a=$(echo "$line" | sed -n 's/.*all-to-all \([0-9]*\) B.*/\1/p') ring=$(echo "$line" | sed -n 's/.*exchange \([0-9]*\) B.*/\1/p')
  got=$((${a2a:-0} + ${ring:-0}))
  [ "$got" -eq "$bytes" ] && echo "ok: Wan exact, rank $r: $got B (u = $u)" || { echo "FAIL: Wan exact: rank $r received $got B, the count says $bytes ('$line')"; fails=$((fails + 1)); }
done
# Video-Infinity's windows on the same transformer (+-1 latent frame, global frames 0 and 2): N ranks
# give the one-process run's prediction; each rank receives, per block and call, K and V of 1 frame
# from each neighbour and of the global frames it does not hold (2 x 4 rows x 16 tokens x 16 x 4 B
# a frame).
windows=(--model "$wan/transformer" --inputs "$wan/inputs.safetensors" --vi.mode invariant --vi.local-frames 1 --vi.global-frames 2)
"$vinf" forward "${windows[@]}" --out "$work/wan-w1.safetensors" "${device_args[@]}" > /dev/null 2>&1 || { echo "FAIL: vinf forward (Wan, windows, one process)"; fails=$((fails + 1)); }
if ! out=$("$mpiexec" -np "$n" "$vinf" forward "${windows[@]}" --out "$work/wan-w.safetensors" "${device_args[@]}" 2>&1); then
  echo "FAIL: mpirun -np $n vinf forward (Wan, windows)"; echo "$out" | tail -5; fails=$((fails + 1))
fi
"$tool" compare "$work/wan-w.safetensors" "$work/wan-w1.safetensors" 1e-5 noise_pred.t0 noise_pred.t1 || fails=$((fails + 1))
for ((r = 0; r < n; r++)); do
  first=$((r * 5 / n)) end=$(((r + 1) * 5 / n))
  held=0
  for g in 0 2; do [ "$g" -ge "$first" ] && [ "$g" -lt "$end" ] && held=$((held + 1)); done
  frames=$((2 - held)) halo=$(((r > 0) + (r < n - 1)))
  line=$(echo "$out" | grep "rank $r: " | head -1)
  for kind in "all-gather $((frames * 2 * 2 * 2 * 4 * 16 * 16 * 4)) B" "exchange $((halo * 2 * 2 * 2 * 4 * 16 * 16 * 4)) B"; do
    case "$kind" in *" 0 B") [[ "$line" != *"${kind% 0 B}"* ]] ;; *) [[ "$line" == *"$kind in "* ]] ;; esac &&
      echo "ok: Wan windows, rank $r: $kind" || { echo "FAIL: Wan windows: rank $r's line '$line' lacks '$kind'"; fails=$((fails + 1)); }
  done
done
# Tensor parallelism on the Wan transformer (2 heads): on 2 ranks each holds one head of every
# attention and half the feed-forward, diffusers' prediction, receiving per call and block the three
# partial outputs [2, 80, 32] in f32 and the RMS norms' sums of squares, 3 x 160 + 24 pairs in f64
# (2 calls x 2 blocks x 69504 B); on 4, 2 frame ranks in exact mode x 2 tensor ranks. One rank, or
# more tensor ranks than heads, is refused with exit status 2.
tp=(--model "$wan/transformer" --inputs "$wan/inputs.safetensors" --parallel.tensor)
case $n in
  1|3)
    t=$((n == 1 ? 2 : 3))
    out=$("$mpiexec" -np "$n" "$vinf" forward "${tp[@]}" $t --out "$work/wan-t.safetensors" "${device_args[@]}" 2>&1)
    rc=$?
    want=$([ "$n" = 1 ] && echo "launch a multiple of 2 ranks" || echo "at most 2 tensor ranks")
    if [ "$rc" -eq 2 ] && grep -q "$want" <<<"$out"; then echo "ok: Wan --parallel.tensor $t on $n rank(s) refused ($want)"; else
      echo "FAIL: Wan --parallel.tensor $t on $n rank(s): exit $rc, want 2 and '$want'"; echo "$out" | tail -5; fails=$((fails + 1)); fi ;;
  2|4)
    extra=()
    [ "$n" = 4 ] && extra=(--vi.mode exact)
    if ! out=$("$mpiexec" -np "$n" "$vinf" forward "${tp[@]}" 2 "${extra[@]}" --out "$work/wan-t.safetensors" "${device_args[@]}" 2>&1); then
      echo "FAIL: mpirun -np $n vinf forward (Wan, --parallel.tensor 2 ${extra[*]})"; echo "$out" | tail -5; fails=$((fails + 1))
    fi
    "$tool" compare "$work/wan-t.safetensors" "$wan/ref.safetensors" 1e-4 noise_pred.t0 noise_pred.t1 || fails=$((fails + 1))
    if [ "$n" = 2 ]; then
      for r in 0 1; do
        line=$(echo "$out" | grep "rank $r: " | head -1)
        [[ "$line" == *"all-reduce 278016 B in "* ]] && echo "ok: Wan tensor rank $r: all-reduce 278016 B" ||
          { echo "FAIL: Wan tensor rank $r: '$line' lacks all-reduce 278016 B"; fails=$((fails + 1)); }
      done
    fi ;;
esac
[ "$fails" -eq 0 ] && echo "forward over $n rank(s) matches the per-clip runs" || exit 1
