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

# The device of the multi-rank tests. CTest runs each script twice: as mpi.* on the CPU (the
# default) and as gpu.* with VINF_TEST_DEVICE=cuda, the same command lines with the device swapped
# (scripts/gpu-check runs those on a GPU node). Both compute in f32, the dtype of the fixtures.
test_device=${VINF_TEST_DEVICE:-cpu}
device_args=(--device "$test_device" --dtype f32)
# The tolerance of two runs that compute the same numbers in the same order. On the CPU they are
# bitwise equal by construction; on a GPU cuBLAS and cuDNN choose their algorithms per call (and
# may reduce with atomics), so equal means equal to f32 rounding: relative 1e-6.
exact_tol=0
[ "$test_device" = cuda ] && exact_tol=1e-6

# vinf generate writes video.mp4 through ffmpeg. Where there is none (a bare GPU node running the
# bundle of scripts/gpu-check), the runs write no video and the checks of the video skip.
video_args=()
have_ffmpeg=1
if ! command -v ffmpeg > /dev/null 2>&1 || ! command -v ffprobe > /dev/null 2>&1; then
  video_args=(--output.video=false)
  have_ffmpeg=0
  echo "note: no ffmpeg/ffprobe on PATH: generate runs write no video.mp4, and its checks skip"
fi

# The GPUs nvidia-smi lists (0 when it is absent).
visible_gpus() {
  local n
  n=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU') || n=0
  echo "$n"
}

# require_test_device VINF: on VINF_TEST_DEVICE=cuda, exits 77 (CTest's "skipped") with a message
# unless vinf was built with CUDA and a GPU is visible; any other device than cpu or cuda is an
# error in the test set-up (exit 2).
require_test_device() {
  case $test_device in
    cpu) ;;
    cuda)
      if ! "$1" --version 2>/dev/null | grep -q 'CUDA backend: yes'; then
        echo "skipped: VINF_TEST_DEVICE=cuda, but this vinf was built without CUDA"; exit 77
      fi
      if [ "$(visible_gpus)" -eq 0 ]; then
        echo "skipped: VINF_TEST_DEVICE=cuda, but no GPU is visible (nvidia-smi lists none)"; exit 77
      fi
      ;;
    *) echo "error: VINF_TEST_DEVICE must be cpu or cuda, got '$test_device'"; exit 2 ;;
  esac
}
