// `vinf plan` (design.md §5.1): what a generate layout does before it runs. From generate's options
// and the number of ranks it says where every rank goes (node, device, replica, stage, CFG branch,
// clip, tensor rank), what each needs of its device's memory and receives per step, and whether it
// fits: exit 0, or 2 with what would. It starts no MPI, no device and reads no weights: only the
// model's config.json files (or a builtin preset).
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "app/generate_options.hpp"
#include "pipeline/plan_estimate.hpp"
#include "core/error.hpp"
#include "infinity/config.hpp"
#include "model/config.hpp"
#include "model/params.hpp"
#include "model/presets.hpp"
#include "model/vae.hpp"
#include "model/weights.hpp"
#include "mpi/launcher.hpp"
#include "ops/runtime.hpp"
#include "sampling/long_video.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace vinf::app {

using pipeline::check_plan_fits;
using pipeline::estimate_plan;
using pipeline::format_size;
using pipeline::kPlanHeadroom;
using pipeline::node_spans;
using pipeline::NodeSpans;
using pipeline::PlanEstimate;
using pipeline::rank_place;
using pipeline::RankEstimate;
using pipeline::RankPlace;

namespace {

// Above this many ranks the table has one line per node.
constexpr int kMostRankLines = 64;

struct PlanArgs {
  int ranks = -1, ranks_per_node = -1;  // -1 (not given): from the launcher's environment
  double device_memory_gib = -1;        // -1 (not given): the device's own
  bool json = false;
};

const char* const kPlanUsage =
    "vinf plan: where the ranks of a generate layout go, the memory each needs and the bytes it receives\n\n"
    "usage: vinf plan [generate's options] [--ranks N] [--ranks-per-node K] [--device-memory GIB] [--json]\n\n"
    "Takes generate's options and --config file (prompts are not needed) and reads only the model's\n"
    "config.json files: no MPI, no device, no weights. Exit status 0 when every rank's estimate fits in\n"
    "90% of the device's memory, 2 when not (the message says what would fit) and for bad options or a\n"
    "layout that the ranks cannot make.";

po::options_description plan_options(PlanArgs& p) {
  po::options_description own("Plan", 100, 44);
  own.add_options()("ranks", ranged(&p.ranks, 1, 1000000),
                    "ranks of the job (default: the launcher's: SLURM_NTASKS in a Slurm allocation, "
                    "Open MPI's or PMI's world size under mpirun; else 1)")(
      "ranks-per-node", ranged(&p.ranks_per_node, 1, 4096),
      "ranks on each node, one device each (default: SLURM_NTASKS_PER_NODE's first number, or Open MPI's "
      "local size; else all ranks on one node)")(
      "device-memory", ranged_above(&p.device_memory_gib, 0, 1048576),
      "GiB of memory each rank's device has (default: the GPU's with --device cuda or auto where one is "
      "visible; else the host's memory shared by the ranks of a node)")(
      "json", po::bool_switch(&p.json), "print the plan as JSON (every rank) instead of the table");
  return own;
}

int launcher_ranks() { return std::max(1, mpi::launcher_world_size()); }

int launcher_ranks_per_node(int world) {
  const int n = mpi::launcher_ranks_per_node();
  return n > 0 ? std::min(n, world) : world;
}

// The UNet's and (when the run decodes) the VAE's configs, checked as generate checks them.
struct ModelShape {
  model::UNetConfig unet;
  std::optional<model::VaeConfig> vae;
  std::string source;
};

// The UNet's config.json: in the directory, or in its unet/ (a pipeline), as find_model_files
// looks for it; a plan needs no weight files beside it.
std::string unet_config_path(const RunPlan& o) {
  const fs::path dir(o.unet.empty() ? o.model : o.unet);
  if (!fs::is_regular_file(dir / "config.json") && fs::is_regular_file(dir / "unet" / "config.json"))
    return (dir / "unet" / "config.json").string();
  VINF_INPUT_CHECK(fs::is_regular_file(dir / "config.json"), o.unet.empty() ? "--model " : "--model.unet ",
                   dir.string(), " has no config.json (nor unet/config.json)");
  return (dir / "config.json").string();
}

ModelShape read_shape(const RunPlan& o) {
  ModelShape m;
  if (o.builtin()) {
    m.unet = model::preset_config(o.builtin_preset());
    m.source = o.model;
  } else {
    m.source = unet_config_path(o);
    m.unet = model::load_unet_config(m.source, nullptr);
  }
  VINF_INPUT_CHECK(m.unet.in_channels == m.unet.out_channels, "the UNet's in_channels (", m.unet.in_channels,
                   ") and out_channels (", m.unet.out_channels, ") differ; it cannot denoise its own latents");
  model::check_tensor_split(m.unet, o.job.tensor, m.source);
  if (o.video || o.png) {
    if (o.builtin()) m.vae = model::vae_preset(o.builtin_preset());
    else if (!o.vae.empty() || fs::exists(o.model + "/vae/config.json"))
      m.vae = model::VaeDecoder::read_config(o.vae.empty() ? o.model + "/vae" : o.vae);
  }
  const std::int64_t scale = m.vae ? m.vae->upscale() : 8;
  VINF_INPUT_CHECK(o.height % scale == 0 && o.width % scale == 0, "--video.width ", o.width, " and --video.height ",
                   o.height, " must be multiples of ", scale, ", the VAE's scale");
  return m;
}

// The partition of the video over the frame ranks, as generate checks it.
void check_frames(RunPlan& o, const job::Layout& l) {
  if (o.frames == 0) o.frames = o.frames_per_clip * l.clips;
  VINF_INPUT_CHECK(o.frames >= l.clips, "--video.frames ", o.frames, " is fewer than the ", l.clips,
                   " frame ranks; use at most ", o.frames, " frame ranks or more frames");
  infinity::check_partition(o.vi, o.frames, l.clips);
}

Device plan_device(job::DeviceChoice choice) {
  if (choice == job::DeviceChoice::cuda) return Device::cuda(0);
  if (choice == job::DeviceChoice::automatic && cuda_device_count() > 0) return Device::cuda(0);
  return Device::cpu();
}

// The memory one rank may plan for, and what it is called in messages.
struct Capacity {
  double bytes = 0;
  std::string name;
};

Capacity capacity_of(const PlanArgs& p, const Device& device, int ranks_per_node) {
  if (p.device_memory_gib > 0) return {p.device_memory_gib * 1073741824.0, "the device (--device-memory)"};
  if (device.is_cuda()) {
    const double gpu = memory_capacity_bytes(device);
    VINF_INPUT_CHECK(gpu > 0, "cannot tell the GPU's memory on this machine (", built_with_cuda() ? "no GPU visible" :
                     "a build without CUDA", "): give --device-memory GIB, the memory of one of the job's GPUs");
    return {gpu, "the GPU (" + device.name() + ")"};
  }
  const double host = memory_capacity_bytes(device) / ranks_per_node;
  return {host, "the host's memory shared by " + std::to_string(ranks_per_node) + " rank(s) of a node"};
}

std::string range_text(std::int64_t first, std::int64_t end) {
  return "[" + std::to_string(first) + "," + std::to_string(end) + ")";
}

void print_rank_lines(const PlanEstimate& e, int ranks_per_node) {
  std::printf("%5s %4s %5s %7s %5s %6s %4s %11s %6s %9s | %10s %10s %10s %10s %10s | %11s %10s\n", "rank", "node",
              "local", "replica", "stage", "branch", "clip", "frames", "tensor", "steps", "memory", "weights",
              "unet call", "sampler", "decode", "recv/step", "TFLOP/step");
  for (const RankEstimate& r : e.ranks) {
    const RankPlace& p = r.place;
    std::printf("%5d %4d %5d %7d %5d %6d %4d %11s %6d %9s | %10s %10s %10s %10s %10s | %11s %10.3f\n", p.rank,
                p.rank / ranks_per_node, p.rank % ranks_per_node, p.replica, p.stage, p.cfg_branch, p.clip,
                range_text(p.first_frame, p.first_frame + p.frames).c_str(), p.tensor_rank,
                range_text(p.steps.first, p.steps.end).c_str(), format_size(r.total()).c_str(),
                format_size(r.weights + r.vae_weights).c_str(),
                format_size(r.activations + r.workspace + r.comm_buffers).c_str(),
                format_size(r.sampler + r.handoff).c_str(), format_size(r.vae_decode).c_str(),
                format_size(r.step_bytes()).c_str(), r.flops / 1e12);
  }
}

// One line per node: its ranks, the groups they belong to, the most any of them needs.
void print_node_lines(const PlanEstimate& e, int ranks_per_node) {
  std::printf("%5s %11s %9s %7s %9s %11s %11s | %10s %6s | %11s\n", "node", "ranks", "replicas", "stages", "clips",
              "frames", "tensor", "memory", "(rank)", "recv/step");
  const int world = static_cast<int>(e.ranks.size());
  for (int first = 0; first < world; first += ranks_per_node) {
    const int last = std::min(world, first + ranks_per_node) - 1;
    const RankEstimate *most = &e.ranks[static_cast<std::size_t>(first)], *talk = most;
    RankPlace lo = most->place, hi = most->place;
    for (int w = first; w <= last; ++w) {
      const RankEstimate& r = e.ranks[static_cast<std::size_t>(w)];
      if (r.total() > most->total()) most = &r;
      if (r.step_bytes() > talk->step_bytes()) talk = &r;
      lo.replica = std::min(lo.replica, r.place.replica), hi.replica = std::max(hi.replica, r.place.replica);
      lo.stage = std::min(lo.stage, r.place.stage), hi.stage = std::max(hi.stage, r.place.stage);
      lo.clip = std::min(lo.clip, r.place.clip), hi.clip = std::max(hi.clip, r.place.clip);
      lo.first_frame = std::min(lo.first_frame, r.place.first_frame);
      hi.first_frame = std::max(hi.first_frame, r.place.first_frame + r.place.frames);
      lo.tensor_rank = std::min(lo.tensor_rank, r.place.tensor_rank);
      hi.tensor_rank = std::max(hi.tensor_rank, r.place.tensor_rank);
    }
    const auto span = [](int a, int b) { return a == b ? std::to_string(a) : std::to_string(a) + "-" + std::to_string(b); };
    std::printf("%5d %11s %9s %7s %9s %11s %11s | %10s %6d | %11s\n", first / ranks_per_node, span(first, last).c_str(),
                span(lo.replica, hi.replica).c_str(), span(lo.stage, hi.stage).c_str(), span(lo.clip, hi.clip).c_str(),
                range_text(lo.first_frame, hi.first_frame).c_str(), span(lo.tensor_rank, hi.tensor_rank).c_str(),
                format_size(most->total()).c_str(), most->place.rank, format_size(talk->step_bytes()).c_str());
  }
}

void print_table(const RunPlan& o, const PlanEstimate& e, const ModelShape& m, int ranks_per_node,
                 const Capacity& cap, const NodeSpans& spans) {
  const job::Layout& l = e.layout;
  const int world = l.world(), nodes = (world + ranks_per_node - 1) / ranks_per_node;
  std::printf("vinf plan: %d rank(s) on %d node(s) of %d: %d replica(s) x %d pipeline stage(s) x %d rank(s) per "
              "stage (%d CFG branch(es) x %d frame rank(s) x %d tensor rank(s))\n",
              world, nodes, ranks_per_node, l.data, l.pipeline, l.unit(), l.cfg, l.clips, l.tensor);
  const std::string method = o.long_clips() ? std::string("--vi.mode ") + infinity::mode_name(o.vi.mode)
                                             : std::string("--long.mode ") + sampling::long_mode_name(o.long_video.mode);
  std::printf("model %s: %.1f M parameters, %s on %s; %lld frames of %lldx%lld (latent %lldx%lld), %s, "
              "%d step(s)\n",
              m.source.c_str(), static_cast<double>(model::parameter_count(model::unet_parameters(m.unet))) / 1e6,
              model::precision_name(e.dtype, e.device).c_str(), e.device.name().c_str(), static_cast<long long>(e.frames),
              static_cast<long long>(o.width), static_cast<long long>(o.height),
              static_cast<long long>(e.latent_width), static_cast<long long>(e.latent_height),
              method.c_str(), e.steps);
  if (world <= kMostRankLines) print_rank_lines(e, ranks_per_node);
  else print_node_lines(e, ranks_per_node);
  const RankEstimate& r = e.largest();
  std::printf("largest: rank %d needs %s: UNet weights %s, VAE weights %s, activations %s, workspace %s, exchange "
              "buffers %s, sampler %s, hand-off %s, VAE decoding %s (the UNet call and the decoding do not overlap)\n",
              r.place.rank, format_size(r.total()).c_str(), format_size(r.weights).c_str(), format_size(r.vae_weights).c_str(),
              format_size(r.activations).c_str(), format_size(r.workspace).c_str(), format_size(r.comm_buffers).c_str(),
              format_size(r.sampler).c_str(), format_size(r.handoff).c_str(), format_size(r.vae_decode).c_str());
  std::printf("received per step by rank %d: clip group %s, cfg group %s, tensor group %s; per job from the previous "
              "stage %s\n",
              r.place.rank, format_size(r.clip_bytes).c_str(), format_size(r.cfg_bytes).c_str(),
              format_size(r.tensor_bytes).c_str(), format_size(r.handoff_bytes).c_str());
  for (const std::string& s : spans.tensor_groups) std::printf("warning: %s: keep tensor groups on one node\n", s.c_str());
  if (spans.clip_groups_spanning > 0)
    std::printf("note: %d of %d clip group(s) span nodes: their halos and global frames cross the network\n",
                spans.clip_groups_spanning, spans.clip_groups);
  std::printf("memory: the largest rank needs %s of %s's %s (%d%% planned: %s)\n", format_size(r.total()).c_str(),
              cap.name.c_str(), format_size(cap.bytes).c_str(), static_cast<int>(kPlanHeadroom * 100),
              format_size(cap.bytes * kPlanHeadroom).c_str());
}

json rank_json(const RankEstimate& r, int ranks_per_node) {
  const RankPlace& p = r.place;
  return {{"rank", p.rank}, {"node", p.rank / ranks_per_node}, {"local_rank", p.rank % ranks_per_node},
          {"replica", p.replica}, {"stage", p.stage}, {"cfg_branch", p.cfg_branch}, {"clip", p.clip},
          {"frames", {p.first_frame, p.first_frame + p.frames}}, {"tensor_rank", p.tensor_rank},
          {"steps", {p.steps.first, p.steps.end}}, {"decodes", p.decodes}, {"batch", r.batch},
          {"memory_bytes",
           {{"weights", r.weights}, {"vae_weights", r.vae_weights}, {"activations", r.activations},
            {"workspace", r.workspace}, {"comm_buffers", r.comm_buffers}, {"sampler", r.sampler},
            {"handoff", r.handoff}, {"vae_decode", r.vae_decode}, {"total", r.total()}}},
          {"bytes_received_per_step",
           {{"clip_group", r.clip_bytes}, {"cfg_group", r.cfg_bytes}, {"tensor_group", r.tensor_bytes},
            {"total", r.step_bytes()}}},
          {"handoff_bytes_per_job", r.handoff_bytes}, {"flops_per_step", r.flops}};
}

json plan_json(const RunPlan& o, const PlanEstimate& e, const ModelShape& m, int ranks_per_node, const Capacity& cap,
               const NodeSpans& spans) {
  const job::Layout& l = e.layout;
  json ranks = json::array();
  for (const RankEstimate& r : e.ranks) ranks.push_back(rank_json(r, ranks_per_node));
  return {{"world", l.world()}, {"ranks_per_node", ranks_per_node},
          {"nodes", (l.world() + ranks_per_node - 1) / ranks_per_node},
          {"layout", {{"data", l.data}, {"pipeline", l.pipeline}, {"cfg", l.cfg}, {"clips", l.clips},
                      {"tensor", l.tensor}, {"unit", l.unit()}}},
          {"model", m.source}, {"frames", e.frames}, {"height", o.height}, {"width", o.width},
          {"latent", {e.latent_height, e.latent_width}}, {"steps", e.steps}, {"dtype", dtype_name(e.dtype)},
          {"device", e.device.name()}, {"vi_mode", infinity::mode_name(o.vi.mode)},
          {"long_mode", sampling::long_mode_name(o.long_video.mode)},
          {"capacity_bytes", cap.bytes}, {"planned_bytes", cap.bytes * kPlanHeadroom},
          {"largest_rank", e.largest().place.rank}, {"tensor_groups_across_nodes", spans.tensor_groups},
          {"clip_groups_across_nodes", spans.clip_groups_spanning}, {"ranks", ranks}};
}

}  // namespace

int plan(const std::vector<std::string>& args) {
  RunPlan o;
  PlanArgs p;
  if (const int status = parse_plan_options(args, o, plan_options(p), kPlanUsage); status != 0)
    return status == 1 ? 0 : status;
  VINF_INPUT_CHECK(p.ranks == -1 || p.ranks >= 1, "--ranks must be >= 1, got ", p.ranks);
  VINF_INPUT_CHECK(p.ranks_per_node == -1 || p.ranks_per_node >= 1, "--ranks-per-node must be >= 1, got ",
                   p.ranks_per_node);
  VINF_INPUT_CHECK(p.device_memory_gib == -1 || p.device_memory_gib > 0, "--device-memory must be > 0 GiB, got ",
                   p.device_memory_gib);
  const int world = p.ranks > 0 ? p.ranks : launcher_ranks();
  const int per_node = p.ranks_per_node > 0 ? p.ranks_per_node : launcher_ranks_per_node(world);
  const job::Layout layout = job::make_layout(o.job, world);
  const ModelShape m = read_shape(o);
  check_frames(o, layout);
  const Device device = plan_device(o.job.device);
  const DType dtype = job::resolve_dtype(o.job.dtype, device);  // not this CPU's bf16: it plans for other nodes
  const PlanEstimate e = estimate_plan(o, m.unet, m.vae, layout, dtype, device);
  const Capacity cap = capacity_of(p, device, std::min(per_node, world));
  const NodeSpans spans = node_spans(layout, per_node);
  if (!p.json) {
    print_table(o, e, m, per_node, cap, spans);
    std::fflush(stdout);
    check_plan_fits(e, cap.bytes, cap.name);
    return 0;
  }
  json out = plan_json(o, e, m, per_node, cap, spans);
  try {
    check_plan_fits(e, cap.bytes, cap.name);
    out["fits"] = true;
  } catch (const InputError& err) {
    out["fits"] = false;
    out["message"] = err.what();
  }
  std::cout << out.dump(2) << "\n" << std::flush;
  if (out["fits"].get<bool>()) return 0;
  std::fprintf(stderr, "vinf: error: %s\n", out["message"].get<std::string>().c_str());
  return 2;
}

}  // namespace vinf::app
