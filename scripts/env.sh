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
