# The environment of an unpacked bundle; bundle.sh ships this file as PREFIX/env.sh and
# scripts/gpu-check --run sources it from there (so it always matches the bundle's layout).
#
# Layout of PREFIX (the directory vinf-gpu of the archive):
#   bin/          vinf, vinf_unit_tests, vinf_test_tool, vinf_bench_step, vinf_bench_wan, vinf_bench_ops, orterun (mpirun, mpiexec), orted
#   lib/          every bundled shared library (RPATH $ORIGIN; the programs' RPATH is $ORIGIN/../lib)
#   lib/x86_64-linux-gnu/openmpi/lib/openmpi3/   Open MPI's MCA components (where its libdir puts them)
#   share/openmpi/, etc/openmpi/                 its help files and MCA parameters
#   pmix/lib/pmix/, pmix/share/pmix/             PMIx's components and help files
#   tests/, inputs/, shared/fixtures/            test scripts, the CLIP vocabulary (--run links
#                                                tests/fixtures to its checkout's)
#   shared/reference/torch-gpu/                  the PyTorch reference of the torch.* checks
#                                                (bench_torch.py and its diffusers tarball)
#   manifest.json, bundle.json, scripts/gpu/     the checks (see manifest.py) and the bundle's facts

# bundle_env PREFIX: Open MPI, PMIx and hwloc look in PREFIX, never in the system's directories.
bundle_env() {
  local p=$1
  export PATH=$p/bin:$PATH
  export OPAL_PREFIX=$p OPAL_EXEC_PREFIX=$p OPAL_BINDIR=$p/bin OPAL_LIBDIR=$p/lib/x86_64-linux-gnu/openmpi/lib
  export OPAL_PKGLIBDIR=$p/lib/x86_64-linux-gnu/openmpi/lib/openmpi3 OPAL_DATAROOTDIR=$p/share OPAL_DATADIR=$p/share
  export OPAL_PKGDATADIR=$p/share/openmpi OPAL_SYSCONFDIR=$p/etc/openmpi
  export OMPI_MCA_mca_base_component_path=$p/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
  export PMIX_PREFIX=$p/pmix PMIX_EXEC_PREFIX=$p/pmix PMIX_LIBDIR=$p/pmix/lib PMIX_PKGLIBDIR=$p/pmix/lib/pmix
  export PMIX_DATAROOTDIR=$p/pmix/share PMIX_DATADIR=$p/pmix/share PMIX_PKGDATADIR=$p/pmix/share/pmix
  export PMIX_SYSCONFDIR=$p/pmix/etc PMIX_MCA_mca_base_component_path=$p/pmix/lib/pmix
  export HWLOC_PLUGINS_PATH=$p/lib/hwloc
  # As scripts/env.sh: root, oversubscription, loopback.
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
  export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
}

# find_cuda_libraries PREFIX: adds to LD_LIBRARY_PATH the directories of the CUDA libraries the
# bundle needs (bundle.json "cuda_libraries": cudart, cuBLAS, cuDNN, NCCL), searching CUDA's lib64,
# ldconfig's cache, the site-packages of python3 (nvidia/*/lib) and /usr, /opt; the ones not found
# are left in $cuda_missing.
find_cuda_libraries() {
  local p=$1 lib dir found missing=() dirs=()
  local candidates=(/usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda-13*/lib64)
  while IFS= read -r dir; do candidates+=("$dir"); done < <(python3 - << 'EOF' 2> /dev/null
import glob, os, site, sys
roots = set(site.getsitepackages() + [site.getusersitepackages()] + [x for x in sys.path if x.endswith("-packages")])
for r in sorted(roots):
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "*", "lib64"))):
        print(d)
EOF
  )
  for lib in $(python3 -c 'import json,sys; print(" ".join(json.load(open(sys.argv[1]))["cuda_libraries"]))' "$p/bundle.json"); do
    found=""
    for dir in "${candidates[@]}"; do
      [ -e "$dir/$lib" ] && { found=$dir; break; }
    done
    [ -n "$found" ] || found=$(ldconfig -p 2> /dev/null | awk -v l="$lib" '$1 == l { print $NF; exit }' | xargs -r dirname)
    [ -n "$found" ] || found=$(find /usr /opt -maxdepth 8 -name "$lib" -print -quit 2> /dev/null | xargs -r dirname)
    if [ -n "$found" ]; then
      [[ " ${dirs[*]} " == *" $found "* ]] || dirs+=("$found")
    else
      missing+=("$lib")
    fi
  done
  local joined
  joined=$(IFS=:; echo "${dirs[*]}")
  [ -n "$joined" ] && export LD_LIBRARY_PATH=$joined${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  cuda_missing=${missing[*]}
}

# check_bundle_loads PREFIX: every bundled program and library resolves all its libraries, and the
# programs start (without touching a GPU).
check_bundle_loads() {
  local p=$1 f bad=0 out
  for f in "$p"/bin/* "$p"/lib/*.so* "$p"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$p"/pmix/lib/pmix/*.so; do
    [ -f "$f" ] && [ ! -L "$f" ] || continue
    [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue
    out=$(ldd "$f" 2>&1)
    if grep -q "not found" <<< "$out"; then
      echo "FAIL: $f: $(grep 'not found' <<< "$out" | tr -s ' \t' ' ' | tr '\n' ';')"
      bad=1
    fi
  done
  echo "libraries: $([ $bad = 0 ] && echo 'all resolved' || echo 'some missing')"
  "$p/bin/vinf" --version || { echo "FAIL: vinf --version"; bad=1; }
  "$p/bin/vinf_unit_tests" --list-test-cases > /dev/null || { echo "FAIL: vinf_unit_tests --list-test-cases"; bad=1; }
  "$p/bin/vinf_bench_step" --help > /dev/null || { echo "FAIL: vinf_bench_step --help"; bad=1; }
  "$p/bin/vinf_test_tool" > /dev/null 2>&1; [ $? -lt 126 ] || { echo "FAIL: vinf_test_tool does not start"; bad=1; }
  "$p/bin/mpirun" --version || { echo "FAIL: mpirun --version"; bad=1; }
  return $bad
}
