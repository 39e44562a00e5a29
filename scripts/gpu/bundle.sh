#!/usr/bin/env bash
# scripts/gpu-check --bundle DIR: vinf, its GPU tests and every runtime library a bare CUDA machine
# lacks, in DIR/vinf-gpu-bundle.tar.xz. See scripts/gpu-check --help and bundle-env.sh (the layout).
# usage: bundle.sh DIR [BUILD_DIR]
# VINF_TORCH_REF=DIR: the PyTorch reference folder to carry (bench_torch.py, README.md, the diffusers
# tarball) for the torch.* checks; default ../shared/reference/torch-gpu beside the checkout.
# VINF_BUNDLE_XZ_LEVEL (0-9, default 6): xz's preset; a lower one is faster and larger (the tests
# use 1: 6 s instead of 37 s on 2 cores, 31 MiB instead of 24, still checked against the limit).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
source "$here/common.sh"
dir=$1 build=${2:-}
limit_bytes=$((60 * 1024 * 1024))
archive_name=vinf-gpu-bundle.tar.xz
xz_level=${VINF_BUNDLE_XZ_LEVEL:-6}
[[ $xz_level =~ ^[0-9]$ ]] || usage_error "VINF_BUNDLE_XZ_LEVEL must be a digit 0-9, got '$xz_level'"

for tool in patchelf python3 pkgdata icupkg ldd tar xz cmake; do
  command -v "$tool" > /dev/null || die "$tool is missing (scripts/setup installs it: patchelf, icu-devtools, ...)"
done
mkdir -p "$dir" || usage_error "cannot create '$dir'"
dir=$(cd "$dir" && pwd)

# The build: VINF_BUILD_DIR or ./build when it targets sm_90 (and builds tests and benchmarks),
# otherwise build-gpu-sm90.
# The CUDA architectures of a build tree: CMAKE_CUDA_ARCHITECTURES when given, else VINF_CUDA_ARCHS.
cuda_archs() {
  local a
  a=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$1/CMakeCache.txt" 2> /dev/null)
  [ -n "$a" ] || a=$(sed -n 's/^VINF_CUDA_ARCHS:[A-Z]*=//p' "$1/CMakeCache.txt" 2> /dev/null)
  echo "$a"
}
has_sm90() {
  local archs
  archs=$(cuda_archs "$1")
  [[ ";$archs;" =~ \;90(-real|-virtual)?\; ]] \
    && grep -q '^VINF_BUILD_TESTS:BOOL=ON' "$1/CMakeCache.txt" && grep -q '^VINF_BUILD_BENCH:BOOL=ON' "$1/CMakeCache.txt"
}
if [ -z "$build" ]; then
  build=$repo/build
  has_sm90 "$build" || build=$repo/build-gpu-sm90
fi
launcher=()
command -v ccache > /dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                                          -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
if ! has_sm90 "$build"; then
  [ ! -f "$build/CMakeCache.txt" ] || die "$build does not build for sm_90 with tests and benchmarks; name another --build-dir"
  say "configuring $build for sm_90"
  cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DVINF_BUILD_TESTS=ON -DVINF_BUILD_BENCH=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 "${launcher[@]}" > /dev/null
fi
grep -q '^VINF_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" || die "$build is configured without CUDA (VINF_WITH_CUDA=OFF)"
say "building vinf and its tests in $build"
cmake --build "$build" -j "$(nproc)" --target vinf vinf_unit_tests vinf_test_tool vinf_bench_step vinf_bench_wan vinf_bench_ops > "$dir/build.log" 2>&1 \
  || { tail -30 "$dir/build.log" >&2; die "the build failed (log: $dir/build.log)"; }

stage_root=$dir/.stage
rm -rf "$stage_root"
P=$stage_root/vinf-gpu
mkdir -p "$P/bin" "$P/lib/hwloc" "$P/scripts/gpu" "$P/tests" "$P/inputs" "$P/shared/fixtures"
trap 'rm -rf "$stage_root"' EXIT

python3 "$here/manifest.py" --build "$build" --source "$repo" --out "$P/manifest.json" --relocate \
  || die "could not list the GPU tests of $build"
mapfile -t programs < <(python3 -c 'import json,sys; print("\n".join(json.load(open(sys.argv[1]))["programs"]))' "$P/manifest.json")
for f in "${programs[@]}"; do install -m 755 "$f" "$P/bin/"; done

# Open MPI: the launcher, its daemon, the components whose libraries the bundle can carry, help files.
mpirun_path=$(readlink -f "$(command -v mpirun)")
ompi_prefix=$(dirname "$(dirname "$mpirun_path")")
ompi_pkglib=$(ompi_info --path pkglibdir --parsable 2> /dev/null | sed -n 's/^path:pkglibdir://p')
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable 2> /dev/null | sed -n 's/^path:pkgdatadir://p')
ompi_sysconf=$(ompi_info --path sysconfdir --parsable 2> /dev/null | sed -n 's/^path:sysconfdir://p')
[ -d "$ompi_pkglib" ] || die "cannot find Open MPI's components (ompi_info --path pkglibdir)"
install -m 755 "$mpirun_path" "$P/bin/orterun"
install -m 755 "$ompi_prefix/bin/orted" "$P/bin/orted"
ln -s orterun "$P/bin/mpirun"
ln -s orterun "$P/bin/mpiexec"
components=$P/lib/x86_64-linux-gnu/openmpi/lib/openmpi3
mkdir -p "$components" "$P/share/openmpi" "$P/etc/openmpi"
# Components for fabrics and libraries a single GPU node does not need (UCX, libfabric, verbs,
# PSM, OpenSHMEM, Java, Slurm's PMI) stay out, and their libraries with them.
reject='libuc[pmst]|libpsm|infinipath|libibverbs|librdmacm|libfabric|libefa|libnl-|liboshmem|libpmi[^x]|libjvm|libcuda\.'
kept=0 dropped=0
for f in "$ompi_pkglib"/mca_*.so; do
  # (grep without -q: with pipefail, ldd killed by SIGPIPE would read as "no match")
  if ldd "$f" | grep -E "$reject" > /dev/null || [[ $(basename "$f") =~ ^mca_(spml|sshmem|scoll|atomic|memheap)_ ]]; then
    dropped=$((dropped + 1))
  else
    cp "$f" "$components/"
    kept=$((kept + 1))
  fi
done
cp -r "$ompi_pkgdata/." "$P/share/openmpi/"
[ -f "$ompi_sysconf/openmpi-default-hostfile" ] && cp "$ompi_sysconf/openmpi-default-hostfile" "$P/etc/openmpi/"
{
  echo "# The bundle's Open MPI parameters (OPAL_SYSCONFDIR points here)."
  grep -v '^#' "$ompi_sysconf/openmpi-mca-params.conf" 2> /dev/null | grep . || true
  echo "# Components left out of the bundle are not an error."
  echo "mca_base_component_show_load_errors = 0"
} > "$P/etc/openmpi/openmpi-mca-params.conf"

# PMIx (Debian's Open MPI uses an external one): its components and help files.
pmix_lib=$(ldd "$components"/*.so "$P/bin/orterun" 2> /dev/null | awk '/libpmix\.so/ && !seen { print $3; seen = 1 }')
if [ -n "$pmix_lib" ]; then
  pmix_root=$(dirname "$(dirname "$(readlink -f "$pmix_lib")")")
  mkdir -p "$P/pmix/lib/pmix" "$P/pmix/share/pmix"
  for f in "$pmix_root"/lib/pmix/*.so; do
    [ -f "$f" ] || continue
    ldd "$f" | grep -E "$reject" > /dev/null || cp "$f" "$P/pmix/lib/pmix/"
  done
  [ -d "$pmix_root/share/pmix" ] && cp -r "$pmix_root/share/pmix/." "$P/pmix/share/pmix/"
  [ -f "$pmix_root/share/pmix-mca-params.conf" ] && cp "$pmix_root/share/pmix-mca-params.conf" "$P/pmix/share/"
fi

# The libraries: everything the programs and components load, except what the GPU machine has and
# must provide itself (newer there): glibc, libstdc++, libgcc_s, the driver and CUDA's libraries.
system_re='^(ld-linux.*|libc|libm|libmvec|libpthread|libdl|librt|libutil|libresolv|libanl|libnsl|libstdc\+\+|libgcc_s)\.so'
cuda_re='^lib(cuda|cudart|cublas|cublasLt|cudnn.*|nccl|nvidia-.*|nvrtc.*|nvJitLink|cufft.*|curand|cusolver.*|cusparse.*|nvToolsExt)\.so'
declare -A cuda_libs=()
elves() { find "$P/bin" "$P/lib" "$P/pmix" -type f \( -perm -u+x -o -name '*.so*' \) 2> /dev/null; }
while IFS= read -r line; do
  name=$(awk '{ print $1 }' <<< "$line")
  path=$(awk '{ print $3 }' <<< "$line")
  if [[ $name =~ $cuda_re ]]; then cuda_libs[$name]=1; continue; fi
  [[ $name =~ $system_re ]] && continue
  [ -f "$path" ] || die "cannot resolve $name for the bundle ($line)"
  [ -e "$P/lib/$name" ] || cp -L "$path" "$P/lib/$name"
done < <(elves | xargs ldd 2> /dev/null | grep '=>' | grep -v 'not found' | sort -u)
# cuBLAS and cuBLASLt are not linked but loaded when vinf first needs them (src/cuda/cublas_loader.cpp),
# under the soname of CUDA's major version, as libcudart's.
for name in "${!cuda_libs[@]}"; do
  if [[ $name =~ ^libcudart\.so\.([0-9]+)$ ]]; then
    cuda_libs[libcublas.so.${BASH_REMATCH[1]}]=1
    cuda_libs[libcublasLt.so.${BASH_REMATCH[1]}]=1
  fi
done

# ICU: vinf calls only u_strFromUTF8WithSub, u_charType/U_GET_GC_MASK, u_isUWhiteSpace,
# unorm2_getNFCInstance/unorm2_normalize and u_strToLower (root locale); their data (character
# properties, NFC, case mapping) is compiled into libicuuc, so the ~30 MB data library is
# replaced by an empty one (bundle.tokenizer_icu and tests/gpu/test_bundle.sh prove it).
icu_data=$(cd "$P/lib" && ls libicudata.so.* 2> /dev/null | head -1 || true)
if [ -n "$icu_data" ]; then
  icu_major=${icu_data#libicudata.so.}
  icu_major=${icu_major%%.*}
  t=$(mktemp -d)
  : > "$t/empty.lst"
  mkdir -p "$t/tmp" "$t/out"
  (cd "$t" && pkgdata -q -p "icudt${icu_major}l" -m dll -e "icudt${icu_major}" -T tmp -d out -L icudata -r "${icu_major}.1" empty.lst) \
    > "$t/pkgdata.log" 2>&1 || { cat "$t/pkgdata.log" >&2; die "pkgdata could not make an empty ICU data library"; }
  cp -L "$t/out/libicudata.so.${icu_major}.1" "$P/lib/$icu_data"
  rm -rf "$t"
fi

# Strip, then RPATH relative to each file (DT_RPATH: searched before LD_LIBRARY_PATH, so a system
# Open MPI on the library path cannot shadow the bundle's).
for f in $(elves); do
  [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue
  chmod u+w "$f"
  strip --strip-unneeded "$f" 2> /dev/null || true
  case $f in
    "$P"/bin/*) rp='$ORIGIN/../lib' ;;
    "$components"/*) rp='$ORIGIN/../../../..' ;;
    "$P"/pmix/lib/pmix/*) rp='$ORIGIN/../../../lib' ;;
    *) rp='$ORIGIN' ;;
  esac
  patchelf --force-rpath --set-rpath "$rp" "$f" || die "patchelf failed on $f"
done

# Scripts and test scripts. The test fixtures (tests/fixtures, about 35 MB) are not copied: --run
# starts from a checkout, which has them, and a GPU machine gets the checkout and the bundle
# together. The tokenizer check reads the CLIP vocabulary of ../shared, which does not travel.
cp "$here/checks.py" "$here/report.py" "$here/common.sh" "$P/scripts/gpu/"
cp "$here/bundle-env.sh" "$P/env.sh"
mkdir -p "$P/tests/mpi" "$P/tests/cli"
cp "$repo"/tests/mpi/*.sh "$P/tests/mpi/"
cp "$repo/tests/cli/expect.sh" "$P/tests/cli/"
cp "$repo/inputs/demo.ini" "$P/inputs/"
shared_fixtures=$repo/../shared/fixtures
if [ -d "$shared_fixtures/clip-tokenizer" ]; then
  cp -r "$shared_fixtures/clip-tokenizer" "$P/shared/fixtures/"
else
  warn "$shared_fixtures/clip-tokenizer is absent: bundle.tokenizer_icu will skip"
fi
# The PyTorch reference of the torch.* checks (a few MB; its diffusers sources stay in their tarball).
torch_ref=${VINF_TORCH_REF:-$repo/../shared/reference/torch-gpu}
torch_ref_files=""
if [ -f "$torch_ref/bench_torch.py" ]; then
  mkdir -p "$P/shared/reference/torch-gpu"
  for f in "$torch_ref"/*; do
    if [ -f "$f" ]; then cp -L "$f" "$P/shared/reference/torch-gpu/"; fi
  done
  chmod -R u+w "$P/shared/reference/torch-gpu"
  torch_ref_files=$(cd "$P/shared/reference/torch-gpu" && ls | tr '\n' ' ')
else
  warn "$torch_ref has no bench_torch.py: the bundle carries no PyTorch reference, and the torch.* checks will skip"
fi

commit=$(git -C "$repo" rev-parse --short HEAD 2> /dev/null || echo unknown)
git -C "$repo" diff --quiet HEAD 2> /dev/null || commit="$commit (with uncommitted changes)"
archs=$(cuda_archs "$build")
CUDA_LIBS="${!cuda_libs[*]}" COMMIT=$commit ARCHS=$archs BUILD=$build KEPT=$kept DROPPED=$dropped P=$P \
TORCH_REF_FILES=$torch_ref_files python3 - << 'EOF'
import json, os, time
e = os.environ
files = sorted(os.path.relpath(os.path.join(r, f), e["P"]) for r, _, fs in os.walk(e["P"]) for f in fs)
doc = {"format": "vinf-gpu-bundle", "version": 1, "created": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
       "commit": e["COMMIT"], "build_dir": e["BUILD"], "cuda_architectures": e["ARCHS"],
       "cuda_libraries": sorted(e["CUDA_LIBS"].split()),
       "openmpi_components": {"kept": int(e["KEPT"]), "left_out": int(e["DROPPED"])},
       "libraries": sorted(f[4:] for f in files if f.startswith("lib/") and "/" not in f[4:]), "files": len(files),
       "torch_reference": sorted(e["TORCH_REF_FILES"].split()) or None}
json.dump(doc, open(os.path.join(e["P"], "bundle.json"), "w"), indent=1)
EOF

say "compressing $(du -sh "$P" | cut -f1) into $dir/$archive_name"
rm -f "$dir/$archive_name"
tar -C "$stage_root" -cf - vinf-gpu | xz -T0 "-$xz_level" > "$dir/$archive_name.partial"
mv "$dir/$archive_name.partial" "$dir/$archive_name"
size=$(stat -c %s "$dir/$archive_name")
if [ "$size" -ge "$limit_bytes" ]; then
  die "$dir/$archive_name is $((size / 1048576)) MiB, over the 60 MiB limit"
fi
say "wrote $dir/$archive_name ($((size / 1048576)).$(((size % 1048576) * 10 / 1048576)) MiB; sm: $archs; from $commit)"
say "on the GPU machine: scripts/gpu-check --run $dir OUT"
