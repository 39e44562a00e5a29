# Environment shared by scripts/test and scripts/demo (sourced, not run).
# nvcc is outside PATH on machines with the toolkit in /usr/local/cuda.
if [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
# Open MPI refuses to start as root without these, and needs oversubscription to place 4 ranks on a
# 2-core machine; TCP stays on loopback (container interfaces are not routable).
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
jobs_default=$(nproc 2>/dev/null || echo 2)

# vinf_configure BUILD_DIR CMAKE_ARGS...: configures a build tree the way the scripts build (the
# tests, the sanitizer and fuzz trees, the demo): Ninja where it is installed (a tree first
# configured with another generator keeps it), and a unity build: each target's sources compiled
# as one (VINF_UNITY_BATCH=N: N at a time), which parses the JSON, option and test headers once per
# target instead of once per source. On 2 cores, a clean release build: 514 s one source at a
# time, 301 s in batches of 16, 266 s whole targets. VINF_UNITY_BUILD=OFF compiles each source alone.
vinf_configure() {
  local dir=$1 gen=()
  shift
  if [ ! -f "$dir/CMakeCache.txt" ] && command -v ninja > /dev/null 2>&1; then gen=(-G Ninja); fi
  cmake -S . -B "$dir" "${gen[@]}" -DCMAKE_UNITY_BUILD="${VINF_UNITY_BUILD:-ON}" -DCMAKE_UNITY_BUILD_BATCH_SIZE="${VINF_UNITY_BATCH:-0}" "$@"
}
