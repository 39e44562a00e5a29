# NCCL over plain TCP sockets, no RDMA: clusters without InfiniBand/RoCE, cloud VMs without EFA,
# or to rule the RDMA stack out when a job hangs. Slower across nodes (Video-Infinity's traffic
# per step is small next to its compute, so often acceptable). VINF_NCCL_PROFILE=tcp.

# Do not look for InfiniBand/RoCE devices at all.
export NCCL_IB_DISABLE=1

# The interface(s) the sockets use: the fastest network between the nodes. A prefix matches
# (eth matches eth0, eth1); ^ excludes. Unset, NCCL may pick a slow management network or a
# container bridge that other nodes cannot reach, which shows as a hang at the first collective.
# SITE: export NCCL_SOCKET_IFNAME=eth0
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker,virbr}

# More threads and sockets per connection help fill a 25-100 GbE link (their product is at most 64).
export NCCL_SOCKET_NTHREADS=${NCCL_SOCKET_NTHREADS:-4}
export NCCL_NSOCKS_PERTHREAD=${NCCL_NSOCKS_PERTHREAD:-4}

# Open MPI (vinf's bootstrap and the CPU path) on the same interface. Where the NCCL value is a
# prefix or exclusion list, set this to the interface's name instead.
# SITE: export OMPI_MCA_btl_tcp_if_include=eth0 OMPI_MCA_oob_tcp_if_include=eth0
