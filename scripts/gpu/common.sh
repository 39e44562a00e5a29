# Sourced by scripts/gpu-check and scripts/gpu/bundle.sh: messages, exit statuses, GPU detection.
# Exit statuses of gpu-check: 0 every check passed, 1 a check failed, 2 bad usage or input,
# 77 no GPU visible (the status CTest and the test scripts read as "skipped").

gpu_check_name=gpu-check
readonly EXIT_OK=0 EXIT_FAIL=1 EXIT_USAGE=2 EXIT_NO_GPU=77

say() { echo "$gpu_check_name: $*"; }
warn() { echo "$gpu_check_name: warning: $*" >&2; }
die() { echo "$gpu_check_name: error: $*" >&2; exit "$EXIT_FAIL"; }
usage_error() {
  echo "$gpu_check_name: error: $*" >&2
  echo "run '$0 --help' for the usage" >&2
  exit "$EXIT_USAGE"
}

# The GPUs nvidia-smi lists, one "index, name, compute capability" line each; nothing when
# nvidia-smi is absent or sees none (the driver missing, CUDA_VISIBLE_DEVICES does not matter here).
visible_gpus() {
  command -v nvidia-smi > /dev/null 2>&1 || return 0
  nvidia-smi --query-gpu=index,name,compute_cap --format=csv,noheader 2> /dev/null | grep -E '^[0-9]+,' || true
}

# Exits 77 with a message when no GPU is visible.
require_gpu() {
  local gpus
  gpus=$(visible_gpus)
  if [ -z "$gpus" ]; then
    if command -v nvidia-smi > /dev/null 2>&1; then
      say "no GPU: nvidia-smi lists none, so there is nothing to check here (exit 77)"
    else
      say "no GPU: nvidia-smi is not installed (no NVIDIA driver), so there is nothing to check here (exit 77)"
    fi
    exit "$EXIT_NO_GPU"
  fi
}

# The compute capability of GPU 0 as CMake writes architectures: "9.0" -> 90.
gpu_arch() {
  visible_gpus | head -1 | awk -F', *' '{ gsub(/\./, "", $3); print $3 }'
}

# Seconds since the epoch, for durations.
now_s() { date +%s; }
