#include "job/plan.hpp"

#include <algorithm>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace vinf::job {

DeviceChoice parse_device_choice(const std::string& value) {
  if (value == "auto") return DeviceChoice::automatic;
  if (value == "cpu") return DeviceChoice::cpu;
  VINF_INPUT_CHECK(value == "cuda", "--device must be auto, cpu or cuda, got '", value, "'");
  return DeviceChoice::cuda;
}

Transport parse_transport(const std::string& value) {
  if (value == "auto") return Transport::automatic;
  if (value == "mpi") return Transport::mpi;
  VINF_INPUT_CHECK(value == "nccl", "--comm-backend must be auto, mpi or nccl, got '", value, "'");
  return Transport::nccl;
}

const char* transport_name(Transport t) {
  switch (t) {
    case Transport::automatic: return "auto";
    case Transport::mpi: return "mpi";
    case Transport::nccl: return "nccl";
  }
  return "?";
}

std::optional<DType> parse_dtype_choice(const std::string& value) {
  if (value == "auto") return std::nullopt;
  DType t = DType::f32;
  VINF_INPUT_CHECK(parse_dtype(value, t) && (t == DType::f32 || t == DType::f16 || t == DType::bf16),
                   "--dtype must be auto, f32, bf16 or f16, got '", value, "'");
  return t;
}

DType resolve_dtype(std::optional<DType> choice, const Device& device) {
  if (!choice) return device.is_cuda() ? DType::bf16 : DType::f32;
  if (device.is_cuda() || *choice == DType::f32) return *choice;
  VINF_INPUT_CHECK(*choice == DType::bf16, "--dtype f16 runs on CUDA only (this run uses ", device.name(),
                   "); the CPU computes in f32, or with bf16 weights on CPUs with AVX-512 BF16: use --dtype f32, ",
                   "bf16 or auto, or --device cuda");
  return *choice;
}

void check_cfg_layout(int cfg, int world_size) {
  VINF_INPUT_CHECK(cfg == 1 || cfg == 2, "--parallel.cfg must be 1 (both CFG branches in one batch) or 2 ",
                   "(rank pairs split the branches), got ", cfg);
  VINF_INPUT_CHECK(world_size % cfg == 0, "--parallel.cfg 2 needs an even number of ranks, got ", world_size,
                   "; launch 2 x (number of clips) ranks");
}

void check_layout(int cfg, int tensor, int world_size) {
  check_cfg_layout(cfg, world_size);
  VINF_INPUT_CHECK(tensor >= 1, "--parallel.tensor must be >= 1, got ", tensor);
  VINF_INPUT_CHECK(world_size % (cfg * tensor) == 0, world_size, " rank(s) cannot be laid out as ", cfg,
                   " CFG branch(es) x frame ranks x ", tensor, " tensor ranks (--parallel.cfg ", cfg,
                   ", --parallel.tensor ", tensor, "): launch a multiple of ", cfg * tensor, " ranks, for example ",
                   cfg * tensor * std::max(1, world_size / (cfg * tensor)), ", or change the sizes");
}

Layout make_layout(const JobPlan& plan, int world_size) {
  VINF_INPUT_CHECK(plan.data >= 1, "--parallel.data must be >= 1, got ", plan.data);
  VINF_INPUT_CHECK(plan.pipeline >= 1, "--parallel.pipeline must be >= 1, got ", plan.pipeline);
  check_cfg_layout(plan.cfg, 2);
  VINF_INPUT_CHECK(plan.tensor >= 1, "--parallel.tensor must be >= 1, got ", plan.tensor);
  // Without replicas or stages the world is one unit: its own messages (an odd number of ranks
  // for CFG 2, the multiple of cfg x tensor).
  if (plan.data == 1 && plan.pipeline == 1) check_layout(plan.cfg, plan.tensor, world_size);
  const int per_frame_rank = plan.data * plan.pipeline * plan.cfg * plan.tensor;
  VINF_INPUT_CHECK(world_size % per_frame_rank == 0, world_size, " rank(s) cannot be laid out as ", plan.data,
                   " replica(s) x ", plan.pipeline, " pipeline stage(s) x ", plan.cfg, " CFG branch(es) x frame ranks x ",
                   plan.tensor, " tensor rank(s) (--parallel.data ", plan.data, ", --parallel.pipeline ", plan.pipeline,
                   ", --parallel.cfg ", plan.cfg, ", --parallel.tensor ", plan.tensor, "): launch a multiple of ",
                   per_frame_rank, " ranks, for example ", per_frame_rank * std::max(1, world_size / per_frame_rank),
                   ", or change the sizes");
  Layout l;
  l.data = plan.data;
  l.pipeline = plan.pipeline;
  l.cfg = plan.cfg;
  l.tensor = plan.tensor;
  l.clips = world_size / per_frame_rank;
  return l;
}

StepRange stage_steps(int steps, int stages, int stage) {
  const auto at = [&](int s) { return static_cast<int>(static_cast<long long>(s) * steps / stages); };
  return {at(stage), at(stage + 1)};
}

}  // namespace vinf::job
