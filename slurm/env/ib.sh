# NCCL over InfiniBand, with GPUDirect RDMA where the topology allows it. The usual profile for GPU
# clusters with Mellanox/NVIDIA HCAs. Source it in the job (VINF_NCCL_PROFILE=ib) or by hand.
# Check what NCCL picked with the debug profile as well: VINF_NCCL_PROFILE="ib debug".

# Which HCAs (and ports) NCCL may use. Unset, NCCL takes every active one, which is right on most
# clusters; set it when some HCAs belong to storage or another fabric. "mlx5_0:1,mlx5_1:1" lists
# them, "^mlx5_4" excludes one, "=mlx5_0" matches exactly. `ibstat` or `ibv_devinfo` lists them.
# SITE: export NCCL_IB_HCA=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1

# GPUDirect RDMA: how far apart a GPU and an HCA may be for the NIC to read GPU memory directly.
# PIX (same PCIe switch) or PXB (across switches, same CPU) are safe choices; SYS allows it across
# CPU sockets (slow on many machines). Needs the nvidia-peermem module; without it NCCL stages
# through host memory and says so under NCCL_DEBUG=INFO ("GPU Direct RDMA Disabled").
export NCCL_NET_GDR_LEVEL=${NCCL_NET_GDR_LEVEL:-PXB}

# The interface for NCCL's bootstrap (a TCP connection between ranks at start-up) and for MPI's.
# Exclude loopback and container bridges; name the cluster network when there are several.
# SITE: export NCCL_SOCKET_IFNAME=ib0
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-^lo,docker,virbr}

# IB transport timeout, 4.096 us * 2^N (default 18: ~1 s). Raise to 20-22 on large or busy
# fabrics when jobs fail with "NET/IB : Got completion ... error 12" (retry exceeded).
export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-20}
