#include "job/plan.hpp"

#include "core/error.hpp"
#include "ops/runtime.hpp"

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
  check_dtype_option(value);
  if (value == "auto") return std::nullopt;
  DType t = DType::f32;
  parse_dtype(value, t);
  return t;
}

}  // namespace vinf::job
