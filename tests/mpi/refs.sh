# Sourced by the multi-rank scripts whose checks compare N ranks against runs that do not depend on
# N (one process, one rank): those references are made once and shared by the script's rank
# counts. CTest runs the script first as `SCRIPT ... refs` (mpi.NAME.refs, the fixture the
# mpi.NAME.npN tests require) with VINF_TEST_REFS=DIR, which makes them in DIR; the rank-count
# runs find them there. A script run by hand, or with VINF_TEST_REFS naming a directory without
# them (the gpu.* tests, whose device differs), makes its own in its scratch directory.
#
#   shared_refs WORK N MAKE   sets $refs to the directory holding the references; MAKE DIR makes
#                             them in DIR (its failure fails the script). With N = refs, makes them
#                             in $VINF_TEST_REFS and exits.
shared_refs() {
  local work=$1 n=$2 make=$3 dir=${VINF_TEST_REFS:-}
  if [ "$n" = refs ]; then
    [ -n "$dir" ] || { echo "error: '$0 ... refs' makes the references in \$VINF_TEST_REFS, which is not set"; exit 2; }
    rm -rf "$dir" "$dir.partial"
    mkdir -p "$dir.partial"
    "$make" "$dir.partial" || { echo "FAIL: the references"; exit 1; }
    mv "$dir.partial" "$dir" && touch "$dir/.complete"
    echo "ok: references in $dir"
    exit 0
  fi
  if [ -n "$dir" ] && [ -f "$dir/.complete" ]; then
    refs=$dir
    echo "note: the references of $(basename "$dir") come from $dir (made once for every rank count)"
    return
  fi
  refs=$work/refs
  mkdir -p "$refs"
  "$make" "$refs" || { echo "FAIL: the references"; exit 1; }
}
