# Debugging a multi-node job that fails or hangs at start-up: NCCL says which interfaces, HCAs and
# transports it chose and why; vinf ends a collective that waits too long. Combine with the fabric's
# profile: VINF_NCCL_PROFILE="ib debug". Remove it for production runs (it is verbose).

# INFO: one line per decision at start-up ("NET/IB : Using [0]mlx5_0:1/IB", "Channel 00 : 0[0] ->
# 1[0] via NET/IB/0/GDRDMA"); WARN: only problems. TRACE needs a debug build of NCCL.
export NCCL_DEBUG=${NCCL_DEBUG:-INFO}

# Which subsystems report: INIT (ranks, devices), NET (interfaces, transports), ENV (the variables
# NCCL read), GRAPH (topology). ALL for everything.
export NCCL_DEBUG_SUBSYS=${NCCL_DEBUG_SUBSYS:-INIT,NET,ENV}

# One file per host and process instead of interleaving in the job log (%h host, %p pid).
# SITE: export NCCL_DEBUG_FILE=$SLURM_SUBMIT_DIR/outputs/nccl.%h.%p.log

# vinf's own watchdog: a collective that has not finished after this many seconds ends the job
# with exit status 3, each waiting rank naming the collective it waited in (vinf's --comm-timeout;
# the default is 300 s). Shorter while debugging, so a hang shows up quickly.
export VINF_COMM_TIMEOUT=${VINF_COMM_TIMEOUT:-120}
