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
// several times faster than f32, and f32 on the CPU; f16 on the CPU is refused
// (vinf::InputError). Whether this CPU has what bf16 needs is start_job's check (vinf plan plans
// for other nodes).
DType resolve_dtype(std::optional<DType> choice, const Device& device);

struct JobPlan {
  DeviceChoice device = DeviceChoice::automatic;
  std::optional<DType> dtype;  // nullopt: the device's default
  bool tf32 = false;           // f32 GEMMs and convolutions on CUDA may use TF32 tensor cores
  int cfg = 1;                 // 1: both guidance branches on each rank; 2: rank pairs split them
  int tensor = 1;              // T: ranks that split each clip's transformer blocks (a tensor group)
  int data = 1;                // D: replicas, each a whole cfg x frames x tensor layout taking jobs from a queue
  int pipeline = 1;            // P: stages of a replica, each running its share of the denoising steps
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

// Where the ranks of a job go (design.md §3): world = data x pipeline x unit, and a unit (one
// pipeline stage of one replica, the ranks that run one video's steps together) = cfg x frame
// ranks x tensor. World rank w is in replica w / (P U), stage (w / U) % P, and has rank w % U in
// its unit: a unit is a run of consecutive ranks, and so are a replica's stages.
struct Layout {
  int data = 1, pipeline = 1, cfg = 1, clips = 1, tensor = 1;

  int unit() const { return cfg * clips * tensor; }
  int world() const { return data * pipeline * unit(); }
  int replica_of(int w) const { return w / (pipeline * unit()); }
  int stage_of(int w) const { return w / unit() % pipeline; }
  int unit_rank_of(int w) const { return w % unit(); }
  int world_rank(int replica, int stage, int unit_rank) const { return (replica * pipeline + stage) * unit() + unit_rank; }
};
// The layout of `world_size` ranks with these sizes (the frame ranks are what is left), checked:
// each size >= 1, cfg 1 or 2, and the world a multiple of data x pipeline x cfg x tensor; the
// message names the options and says what would fit. Throws vinf::InputError.
Layout make_layout(const JobPlan& plan, int world_size);
// Steps [first, end) of stage s of P over a schedule of `steps`: [s S / P, (s + 1) S / P).
struct StepRange {
  int first = 0, end = 0;
};
StepRange stage_steps(int steps, int stages, int stage);

}  // namespace vinf::job
