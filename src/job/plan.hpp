// What a job is made of, as the command line chose it: the device, the compute dtype, the CFG
// layout and the transport of the collectives. Every field is typed; the parsers below turn the
// options' strings into these values and refuse anything else before a job starts.
#pragma once

#include <optional>
#include <string>

#include "core/dtype.hpp"

namespace vinf::job {

enum class DeviceChoice { automatic, cpu, cuda };
enum class Transport { automatic, mpi, nccl };

// --device: auto | cpu | cuda. Throws vinf::InputError naming the option otherwise.
DeviceChoice parse_device_choice(const std::string& value);
// --comm-backend: auto | mpi | nccl. Throws vinf::InputError naming the option otherwise.
Transport parse_transport(const std::string& value);
const char* transport_name(Transport t);
// --dtype: auto (nullopt: bf16 on CUDA, f32 on the CPU) | f32 | bf16 | f16. Throws
// vinf::InputError naming the option otherwise.
std::optional<DType> parse_dtype_choice(const std::string& value);
// The dtype a job computes in on `device`: auto is bf16 on CUDA, where tensor cores make it
// several times faster than f32, and f32 on the CPU, whose kernels are f32 only; 16-bit on the
// CPU is refused (vinf::InputError).
DType resolve_dtype(std::optional<DType> choice, const Device& device);

struct JobPlan {
  DeviceChoice device = DeviceChoice::automatic;
  std::optional<DType> dtype;  // nullopt: the device's default
  bool tf32 = false;           // f32 GEMMs and convolutions on CUDA may use TF32 tensor cores
  int cfg = 1;                 // 1: both guidance branches on each rank; 2: rank pairs split them
  int tensor = 1;              // T: ranks that split each clip's transformer blocks (a tensor group)
  Transport transport = Transport::automatic;
  double comm_timeout = 300;   // seconds a collective may wait (0: forever)
  bool clip_group = true;      // a communicator over each clip group (the temporal layers)
  bool cfg_group = false;      // a communicator over each cfg group (with cfg 2)
};

// --parallel.cfg against the job's size: 1 or 2, and 2 needs an even number of ranks. Throws
// vinf::InputError.
void check_cfg_layout(int cfg, int world_size);
// --parallel.cfg and --parallel.tensor against the job's size: the world must be cfg x frame
// ranks x tensor; the message says what would fit. Throws vinf::InputError.
void check_layout(int cfg, int tensor, int world_size);

}  // namespace vinf::job
