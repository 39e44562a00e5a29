#!/usr/bin/env bash
# scripts/gpu-check --bundle from the current build tree, then checks of the archive as the GPU
# machine would use it, here without a GPU:
# - under 60 MiB;
# - every MPI, PMIx, hwloc, libevent, HDF5, Boost, oneDNN, OpenBLAS and ICU library that the bundled
#   programs and Open MPI components load resolves inside the bundle (ldd, and LD_DEBUG of a real
#   2-rank run: the files the loader opens in mpirun and both ranks);
# - the bundled mpirun starts 2 ranks of a bundled program with OPAL_PREFIX relocation, with the
#   system's Open MPI, PMIx and hwloc directories hidden (a private mount namespace, when this
#   machine allows one);
# - the tokenizer's tests pass with the bundle's empty ICU data library;
# - it carries the PyTorch reference (../shared/reference/torch-gpu, where this checkout has it),
#   and the torch.* checks of the unpacked bundle find it there (here they skip for want of a
#   python3 with CUDA torch, not for want of the folder);
# - --run unpacks it, finds the programs loadable and stops at "no GPU" with exit 77.
# usage: test_bundle.sh SOURCE_DIR BUILD_DIR
set -u
repo=$1 build=$2
here=$(cd "$(dirname "$0")" && pwd)
source "$here/../cli/expect.sh"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
check=$repo/scripts/gpu-check
if ! grep -q '^VINF_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt"; then
  echo "skipped: $build is built without CUDA, so there is nothing to bundle for a GPU"; exit 77
fi

t0=$(date +%s)
# xz -1 (the default is -6): five times faster here and a larger archive, so the size limit is
# checked with room to spare.
if ! VINF_BUNDLE_XZ_LEVEL=1 VINF_BUILD_DIR=$build "$check" --bundle "$work/b" > "$work/bundle.log" 2>&1; then
  echo "FAIL: --bundle"; tail -30 "$work/bundle.log"; exit 1
fi
archive=$work/b/vinf-gpu-bundle.tar.xz
size=$(stat -c %s "$archive")
echo "bundle: $size bytes in $(($(date +%s) - t0)) s"
[ "$size" -lt $((60 * 1048576)) ] && echo "ok: the archive is under 60 MiB ($((size / 1048576)) MiB)" \
  || { echo "FAIL: the archive is $size bytes"; fails=$((fails + 1)); }

mkdir "$work/u"
tar -C "$work/u" -xJf "$archive" || { echo "FAIL: cannot unpack"; exit 1; }
P=$work/u/vinf-gpu
source "$P/env.sh"
(
  bundle_env "$P"
  find_cuda_libraries "$P"
  [ -z "$cuda_missing" ] || echo "note: CUDA libraries not found here: $cuda_missing"

  # 1. ldd: the libraries the bundle must carry resolve to the bundle.
  carried='libmpi|libopen-(pal|rte)|libpmix|libhwloc|libevent|libhdf5|libboost|libdnnl|libopenblas|libicu|libgfortran|libgomp'
  bad=0
  for f in "$P"/bin/* "$P"/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/*.so "$P"/pmix/lib/pmix/*.so; do
    [ -f "$f" ] && [ "$(head -c 4 "$f" | tail -c 3)" = ELF ] || continue
    while read -r name _ path _; do
      if [[ $name =~ $carried ]] && [[ $path != "$P"/* ]]; then
        echo "FAIL: $(basename "$f") loads $name from $path"; bad=1
      fi
    done < <(ldd "$f" | grep '=>')
  done
  [ $bad = 0 ] && echo "ok: ldd: every MPI/HDF5/Boost/oneDNN/OpenBLAS/ICU library resolves inside the bundle" || exit 1

  # 2. A 2-rank run of a bundled program under LD_DEBUG=files: every file the loader opens in
  #    mpirun, orted and the ranks, components included, is the bundle's or a system/CUDA library.
  hello=("$P/bin/mpirun" -np 2 "$P/bin/vinf_bench_step" --device cpu --preset tiny --height 64 --width 64
         --frames-per-rank 8 --calls 1 --warmup 0 --vi.local-frames 4 --vi.global-frames 4)
  if ! out=$(LD_DEBUG=files LD_DEBUG_OUTPUT=$work/ld OMP_NUM_THREADS=1 "${hello[@]}" 2>&1); then
    echo "FAIL: bundled mpirun -np 2 vinf_bench_step"; echo "$out" | tail -20; exit 1
  fi
  grep -q "slowest rank:" <<< "$out" || { echo "FAIL: no result from 2 ranks"; echo "$out" | tail; exit 1; }
  # The loader names each library it initialises, and each file dlopen loads, by its path.
  opened=$(cat "$work"/ld.* | sed -n -e 's/.*calling init: \([^ ]*\).*/\1/p' -e 's/.*file=\(\/[^ ]*\) .*dynamically loaded.*/\1/p' | sort -u)
  n_open=$(wc -l <<< "$opened")
  n_proc=$(ls "$work"/ld.* | wc -l)
  foreign=$(grep -Ev "^$P/" <<< "$opened" | grep -E "$carried|openmpi|pmix|hwloc" || true)
  if [ -z "$foreign" ] && [ "$n_proc" -ge 3 ]; then
    echo "ok: LD_DEBUG: $n_proc processes (mpirun and 2 ranks) opened $n_open libraries, every MPI/PMIx/hwloc/HDF5/Boost/oneDNN/OpenBLAS/ICU one from the bundle"
  else
    echo "FAIL: LD_DEBUG over $n_proc processes: from outside the bundle: $foreign"; exit 1
  fi
  grep -q "^$P/lib/x86_64-linux-gnu/openmpi/lib/openmpi3/mca_btl_" <<< "$opened" \
    && echo "ok: Open MPI's components came from the bundle" || { echo "FAIL: no bundled component was loaded"; exit 1; }

  # 3. The same with the system's Open MPI, PMIx and hwloc directories hidden, where this machine
  #    lets a test make a private mount namespace (root in a container usually may).
  hide=(/usr/lib/x86_64-linux-gnu/openmpi /usr/lib/x86_64-linux-gnu/pmix2 /usr/lib/x86_64-linux-gnu/hwloc
        /usr/share/openmpi /etc/openmpi)
  mounts=""
  for d in "${hide[@]}"; do [ -d "$d" ] && mounts+="mount -t tmpfs none $d && "; done
  if [ -n "$mounts" ] && unshare -m --propagation private true 2> /dev/null; then
    if out=$(OMP_NUM_THREADS=1 unshare -m --propagation private bash -c "$mounts"'"$0" "$@" && "$0" -np 2 hostname' \
               "${hello[@]}" 2>&1) && grep -q "slowest rank:" <<< "$out" && [ "$(grep -c "^$(hostname)\$" <<< "$out")" -eq 2 ]; then
      echo "ok: with ${hide[*]} hidden, the bundled mpirun ran 2 ranks of vinf_bench_step and of hostname"
    else
      echo "FAIL: with the system's Open MPI hidden:"; echo "$out" | tail -20; exit 1
    fi
  else
    echo "note: no private mount namespace here: the system's Open MPI stays visible (the LD_DEBUG check above stands)"
  fi

  # 4. The tokenizer with the empty ICU data library.
  icu=$(ls "$P"/lib/libicudata.so.* 2> /dev/null | head -1)
  [ -n "$icu" ] && [ "$(stat -c %s "$icu")" -lt 100000 ] && echo "ok: $(basename "$icu") is the empty one ($(stat -c %s "$icu") bytes)" \
    || { echo "FAIL: the bundle's ICU data library is missing or not the empty one"; exit 1; }
  if [ -f "$P/shared/fixtures/clip-tokenizer/vocab.json" ]; then
    out=$(VINF_SHARED_FIXTURES=$P/shared/fixtures "$P/bin/vinf_unit_tests" --source-file='*test_tokenizer.cpp' 2>&1)
    rc=$?
    icu_loaded=$(ldd "$P/bin/vinf_unit_tests" | awk '/libicudata/ { print $3 }')
    if [ $rc -eq 0 ] && [ "$(realpath "$icu_loaded")" = "$(realpath "$icu")" ] && ! grep -q "MESSAGE: skipped" <<< "$out" && grep -Eq "test cases: *[1-9][0-9]* \| *[1-9]" <<< "$out"; then
      echo "ok: the tokenizer's tests pass against the empty ICU data library ($(grep -Eo 'test cases: *[0-9]+ \| *[0-9]+ passed' <<< "$out"))"
    else
      echo "FAIL: the tokenizer's tests with the bundle's ICU (exit $rc)"; grep -v "^ *[0-9]*:" <<< "$out" | tail -20; exit 1
    fi
  else
    echo "note: the bundle has no CLIP vocabulary (../shared/fixtures absent): tokenizer tests not run"
  fi
) || fails=$((fails + 1))

# 5. The PyTorch reference: carried as shared/reference/torch-gpu, found there by the torch checks.
torch_src=$repo/../shared/reference/torch-gpu
if [ -f "$torch_src/bench_torch.py" ]; then
  missing=""
  for f in "$torch_src"/*; do
    [ -f "$f" ] || continue
    cmp -s "$f" "$P/shared/reference/torch-gpu/$(basename "$f")" || missing+=" $(basename "$f")"
  done
  [ -z "$missing" ] && echo "ok: the bundle carries $torch_src ($(ls "$torch_src" | tr '\n' ' '))" \
    || { echo "FAIL: the bundle's shared/reference/torch-gpu lacks or differs in:$missing"; fails=$((fails + 1)); }
  want="no python3 with CUDA torch"
else
  echo "note: $torch_src is absent: the bundle carries no PyTorch reference, and the torch checks must say so"
  want="no PyTorch reference: $P/shared/reference/torch-gpu has no bench_torch.py"
fi
python3 "$P/scripts/gpu/checks.py" run --manifest "$P/manifest.json" --prefix "$P" --mode bundle --only '^torch' \
  --out "$work/torch-out" > "$work/torch.log" 2>&1
if python3 - "$work/torch-out/report.json" "$want" << 'EOF'
import json, sys
r = json.load(open(sys.argv[1]))
c = [x for x in r["checks"] if x["name"].startswith("torch.")]
assert len(c) == 4 and all(x["verdict"] == "skip" and sys.argv[2] in x["note"] for x in c), c
assert r["ratio_vs_torch"] == {"vc2": None, "wan13b": None}, r["ratio_vs_torch"]
EOF
then echo "ok: the unpacked bundle's torch checks skip here for the right reason ($want)"
else echo "FAIL: the unpacked bundle's torch checks"; tail -20 "$work/torch.log"; fails=$((fails + 1)); fi

# 6. --run on this machine: unpacked, loadable, then "no GPU".
mkdir "$work/fake-bin"
printf '#!/bin/sh\necho "No devices were found"\nexit 6\n' > "$work/fake-bin/nvidia-smi"
chmod +x "$work/fake-bin/nvidia-smi"
# One run (each unpacks the archive again): its status, its message, and the loading check before it.
run_out=$(PATH="$work/fake-bin:$PATH" "$check" --run "$work/b" "$work/out" 2>&1)
run_rc=$?
if [ "$run_rc" -eq 77 ] && grep -q "no GPU" <<< "$run_out"; then echo "ok: --run stops at 'no GPU' (exit 77)"
else echo "FAIL: --run exited $run_rc, expected 77 with 'no GPU'"; echo "$run_out" | tail -20; fails=$((fails + 1)); fi
grep -q "the bundled programs load" <<< "$run_out" \
  && echo "ok: --run checked that the bundled programs load before stopping" || { echo "FAIL: --run did not check loading"; fails=$((fails + 1)); }
# --list (it unpacks the archive too): vinf's checks, and the torch checks each alone on the machine.
list=$("$check" --run "$archive" "$work/out3" --list 2>&1)
list_rc=$?
[ "$list_rc" -eq 0 ] && echo "ok: --run --list -> 0" || { echo "FAIL: --run --list exited $list_rc"; fails=$((fails + 1)); }
for name in bench.vc2.np1.kernels torch.vc2 torch.wan13b torch.vc2.compile torch.wan13b.compile; do
  grep -Eq "^(perf|torch) +${name//./\\.} +[0-9]+ s +alone\$" <<< "$list" && echo "ok: --run --list shows $name (alone)" \
    || { echo "FAIL: --run --list lacks $name"; echo "$list" | tail -20; fails=$((fails + 1)); }
done

echo "test_bundle: $(($(date +%s) - t0)) s"
[ "$fails" -eq 0 ] && echo "all bundle checks passed" || echo "$fails bundle check(s) failed"
exit $((fails > 0))
