// What a generate job will take before it takes it: where each rank of a layout goes (replica,
// pipeline stage, CFG branch, clip, tensor rank), its device memory (weights, one UNet call's
// working set, the sampler's and the hand-off's buffers, VAE decoding) and the bytes it receives.
// From the configs alone: no MPI, no device, no weights. `vinf plan` prints it; `vinf generate`
// calls estimate_plan and check_plan_fits before it loads anything.
//
// The memory is an upper bound of what the arena holds at its peak (ArenaStats::peak_in_use),
// within about 30% on the CPU (builtin:tiny and builtin:small at 1 to 4 ranks, with CFG, tensor
// and pipeline splits, every --vi.mode and VAE decoding: 0-28% above the measured peaks; the
// calibration is in model/footprint.cpp, checked by tests/model/test_footprint.cpp and
// tests/cli/test_plan_cli.sh). On CUDA cuDNN's workspace depends on the algorithms it picks: the
// walk's figures are scaled by factors measured on one H200 (model/footprint.cpp), and the CUDA
// context's own memory is left out (the 10% headroom covers it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/generate_spec.hpp"
#include "core/tensor.hpp"
#include "job/plan.hpp"
#include "model/config.hpp"
#include "model/vae_config.hpp"

namespace vinf::pipeline {

// The share of the device memory an estimate may fill: the rest is for what it does not count
// (allocator fragmentation, the CUDA context, cuBLAS/cuDNN handles, the text encoder's run).
inline constexpr double kPlanHeadroom = 0.9;

// One rank's place: world rank w of the layout, and what it computes.
struct RankPlace {
  int rank = 0, replica = 0, stage = 0, cfg_branch = 0, clip = 0, tensor_rank = 0;
  std::int64_t first_frame = 0, frames = 0;  // its clip: frames [first_frame, first_frame + frames)
  job::StepRange steps;  // the denoising steps its stage runs
  bool decodes = false;  // runs the VAE on its clip (branch 0, tensor rank 0, last stage)
};
RankPlace rank_place(const job::Layout& l, std::int64_t frames, int steps, int rank);

struct RankEstimate {
  RankPlace place;
  int batch = 1;  // the UNet's batch: 2 with guidance > 1 and --parallel.cfg 1
  // Device memory, bytes. The UNet call and the VAE decoding do not overlap.
  double weights = 0;  // this rank's share of the UNet's weights, in the compute dtype
  double vae_weights = 0;  // the VAE decoder (every rank loads it)
  double activations = 0;  // one UNet call at its peak: the skip stack and the layer at work
  double workspace = 0;  // ... attention and convolution workspace at that moment
  double comm_buffers = 0;  // ... Video-Infinity's exchanged frames in flight at that moment
  double sampler = 0;  // latent-sized f32 buffers: latents, solver memory, prediction, guidance, noise, text
  double handoff = 0;  // pipeline hand-off: 2 latent-sized f32 arrays (--parallel.pipeline > 1)
  double vae_decode = 0;  // decoding this rank's clip, 4 frames a call (ranks that decode)
  double total() const;
  // Bytes received per denoising step (one UNet call and its guidance), per group.
  double clip_bytes = 0;  // the temporal layers' halos, global frames, statistics, all-to-alls
  double cfg_bytes = 0;  // the other branch's noise prediction (--parallel.cfg 2)
  double tensor_bytes = 0;  // the row-parallel projections' all-reduces (--parallel.tensor > 1)
  double step_bytes() const { return clip_bytes + cfg_bytes + tensor_bytes; }
  double handoff_bytes = 0;  // per job: the latents, solver memory and text from the previous stage
  double flops = 0;  // per step: this rank's share of the UNet call
};

struct PlanEstimate {
  job::Layout layout;
  std::int64_t frames = 0, latent_height = 0, latent_width = 0;
  int steps = 0;
  DType dtype = DType::f32;
  Device device;
  std::vector<RankEstimate> ranks;  // in world rank order
  // The rank that needs the most memory.
  const RankEstimate& largest() const;

  // What it was made from, so that check_plan_fits can try other sizes.
  struct Inputs {
    GenerateSpec run;
    model::UNetConfig unet;
    std::optional<model::VaeConfig> vae;
  } inputs;
};

// The estimate of every rank of `layout` for the run `o` (its video, sampler, [vi] and [vae]
// settings) on `device` computing in `dtype`; `vae` when the run decodes. The frames are o.frames,
// or o.frames_per_clip per clip when 0. The caller has checked the layout and the partition
// (make_layout, infinity::check_partition, model::check_tensor_split).
PlanEstimate estimate_plan(const GenerateSpec& o, const model::UNetConfig& ucfg,
                           const std::optional<model::VaeConfig>& vae, const job::Layout& layout, DType dtype,
                           const Device& device = Device::cpu());

// Throws vinf::InputError when the largest rank needs more than kPlanHeadroom x capacity_bytes of
// `device_name`'s memory, naming the rank, its breakdown and what would fit: the most frames per
// clip, more frame ranks or tensor ranks, a 16-bit dtype, VAE tiles, CFG parallelism.
void check_plan_fits(const PlanEstimate& e, double capacity_bytes, const std::string& device_name);

// "12.3 MiB", "4.52 GiB", "980.0 KiB": sizes in the plan's lines and messages.
std::string format_size(double bytes);

// Groups of a layout that span nodes of `ranks_per_node` consecutive ranks: "tensor group of
// replica 0, stage 0, branch 0, clip 3 (ranks 6-7) spans nodes 0-1", tensor groups first (they
// talk most and should stay on one node), then whether clip groups span nodes (normal on more
// than one node; their traffic is small).
struct NodeSpans {
  std::vector<std::string> tensor_groups;
  int clip_groups_spanning = 0, clip_groups = 0;
};
NodeSpans node_spans(const job::Layout& l, int ranks_per_node);

}  // namespace vinf::pipeline
