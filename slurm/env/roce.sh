# NCCL over RoCE (RDMA over Converged Ethernet: Ethernet NICs with RDMA, e.g. ConnectX on 100-400
# GbE). Like InfiniBand, plus the GID index and traffic class that RoCE v2 needs.
# VINF_NCCL_PROFILE=roce (or "roce debug" to see what NCCL picked).

# The RDMA devices NCCL may use (`ibv_devinfo` lists them; RoCE NICs show link_layer: Ethernet).
# SITE: export NCCL_IB_HCA=mlx5_0:1,mlx5_1:1

# RoCE v2 runs over UDP/IP and needs the GID of the IPv4 (or IPv6) address: index 3 on most
# systems (`show_gids` lists them; pick the "v2" row with the address). The wrong index shows as
# connections that hang or time out at start-up.
export NCCL_IB_GID_INDEX=${NCCL_IB_GID_INDEX:-3}

# Traffic class for the lossless (PFC/ECN) queue the network team configured: ask them. 106 is a
# common choice (DSCP 26 << 2 | ECN).
# SITE: export NCCL_IB_TC=106

# GPUDirect RDMA distance, as in ib.sh.
export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-PXB}

# Bootstrap and MPI interface: the Ethernet interface that carries the RoCE addresses.
# SITE: export NCCL_SOCKET_IFNAME=ens1f0np0
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker,virbr}
export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-20}
