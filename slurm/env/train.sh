# NCCL settings for data-parallel training jobs (vinf train, slurm/train.sbatch), sourced after the
# fabric's profile: VINF_NCCL_PROFILE="ib train". They follow what multi-node video-model training
# reports found: long jobs die of collective timeouts and of rare protocol errors far more often
# than of anything in the model. Each setting is a default that a value already in the environment
# overrides; none changes the numbers vinf computes.

# vinf's own watchdog: a collective (a gradient bucket, the parameters' all-gather) that has not
# finished after this many seconds ends the job with a message naming it, instead of hanging until
# the time limit. A training step's collectives are short; the first one waits for every rank's
# start-up and data loading, so leave it well above a step's time.
export VINF_COMM_TIMEOUT=${VINF_COMM_TIMEOUT:-600}

# NCCL's own error handling: an asynchronous error (a peer gone, a link down) fails the
# collective instead of leaving it spinning, so that the job ends and requeues.
export NCCL_ASYNC_ERROR_HANDLING=${NCCL_ASYNC_ERROR_HANDLING:-1}

# The algorithm and protocol: left to NCCL's tuner (documented, not forced). Ring is the safe
# choice for large gradient buckets across many nodes; Tree lowers latency for small buckets at
# scale. If a job fails with protocol errors or hangs in a reduction on your fabric, try
#   export NCCL_ALGO=Ring        (or Tree, or "Ring,Tree")
#   export NCCL_PROTO=Simple     (LL and LL128 trade bandwidth for latency; Simple is the sturdiest)
# and compare samples/s in run.json's "throughput".
# SITE: export NCCL_ALGO=Ring
# SITE: export NCCL_PROTO=Simple

# Retries of IB transfers before NCCL reports an error (default 7).
export NCCL_IB_RETRY_CNT=${NCCL_IB_RETRY_CNT:-7}
