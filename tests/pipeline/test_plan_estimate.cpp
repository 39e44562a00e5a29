// `vinf plan`'s estimate (pipeline/plan_estimate): where the ranks of a layout go, the bytes each
// receives per step (against what vinf generate's counters reported for the same runs), how the
// memory follows the video and the layout, and the refusal of a layout that does not fit.
#include <doctest/doctest.h>

#include <string>

#include "pipeline/plan_estimate.hpp"
#include "core/error.hpp"
#include "infinity/exchange_cost.hpp"
#include "model/presets.hpp"

using namespace vinf;
using namespace vinf::pipeline;

namespace {

// builtin:tiny at 64x64 (latent 8x8), guidance 12, f32 on the CPU: generate's defaults otherwise.
GenerateSpec tiny_run(std::int64_t frames, std::int64_t size = 64) {
  GenerateSpec o;
  o.model = "builtin:tiny";
  o.frames = frames;
  o.height = o.width = size;
  o.video = false;
  return o;
}

PlanEstimate estimate(const GenerateSpec& o, int world, DType dtype = DType::f32, Device device = Device::cpu()) {
  const model::UNetConfig u = model::preset_config("tiny");
  const std::optional<model::VaeConfig> vae =
      o.video ? std::optional<model::VaeConfig>(model::vae_preset("tiny")) : std::nullopt;
  return estimate_plan(o, u, vae, job::make_layout(o.job, world), dtype, device);
}

}  // namespace

TEST_CASE("plan: ranks map to replicas, stages, CFG branches, clips and tensor ranks") {
  job::JobPlan j;
  j.data = j.pipeline = j.cfg = j.tensor = 2;
  const job::Layout l = job::make_layout(j, 32);
  REQUIRE(l.clips == 2);
  const RankPlace first = rank_place(l, 21, 30, 0);
  CHECK(first.replica == 0);
  CHECK(first.stage == 0);
  CHECK(first.cfg_branch == 0);
  CHECK(first.clip == 0);
  CHECK(first.tensor_rank == 0);
  CHECK(first.first_frame == 0);
  CHECK(first.frames == 10);
  CHECK(first.steps.first == 0);
  CHECK(first.steps.end == 15);
  CHECK_FALSE(first.decodes);  // stage 0 hands on; the last stage decodes
  const RankPlace r13 = rank_place(l, 21, 30, 13);  // unit rank 5 of stage 1
  CHECK(r13.replica == 0);
  CHECK(r13.stage == 1);
  CHECK(r13.tensor_rank == 1);
  CHECK(r13.clip == 0);
  CHECK(r13.cfg_branch == 1);
  CHECK(r13.steps.first == 15);
  CHECK(r13.steps.end == 30);
  CHECK_FALSE(r13.decodes);
  const RankPlace r26 = rank_place(l, 21, 30, 26);  // replica 1, stage 1, unit rank 2
  CHECK(r26.replica == 1);
  CHECK(r26.stage == 1);
  CHECK(r26.cfg_branch == 0);
  CHECK(r26.clip == 1);
  CHECK(r26.tensor_rank == 0);
  CHECK(r26.first_frame == 10);
  CHECK(r26.frames == 11);  // the later clip takes the extra frame
  CHECK(r26.decodes);

  // Tensor groups are pairs of consecutive ranks: 3 ranks a node cut five of them.
  const NodeSpans three = node_spans(l, 3);
  REQUIRE(three.tensor_groups.size() == 5);
  CHECK(three.tensor_groups[0] == "tensor group of replica 0, stage 0, branch 0, clip 1 (ranks 2-3) spans nodes 0-1");
  CHECK(node_spans(l, 4).tensor_groups.empty());
  CHECK(node_spans(l, 4).clip_groups == 16);
  CHECK(node_spans(l, 4).clip_groups_spanning == 0);
  CHECK(node_spans(l, 2).clip_groups_spanning == 16);
}

TEST_CASE("plan: global and halo frames as Video-Infinity's context plans them") {
  // 4 clips of 8 frames, 16 global frames 0, 2, ..., 30 (4 in each clip), halos of 8 frames: with
  // --vi.halo x the neighbour's frames that are global frames already arrived with round 1.
  const infinity::Config c;
  const infinity::ExchangeCost first(c, {8, 8, 8, 8}, 0), inner(c, {8, 8, 8, 8}, 1);
  CHECK(first.global_frames_received() == 12);
  CHECK(first.halo_frames_received() == 4);
  CHECK(inner.halo_frames_received() == 8);
  CHECK(inner.conv_halo_frames() == 8);
  CHECK(first.conv_halo_frames() == 4);
  infinity::Config kv;
  kv.halo = infinity::HaloData::kv;
  CHECK(infinity::ExchangeCost(kv, {8, 8, 8, 8}, 1).halo_frames_received() == 16);
  // One attention call over 10 sequences of width 32 in f32: (12 + 8) frames x 10 x 32 x 4 bytes.
  CHECK(inner.attention(10, 8, 32, 32, 4).received == 20 * 10 * 32 * 4);
}

TEST_CASE("plan: the bytes each rank receives per step are those vinf generate counted") {
  // run.json's ranks[].bytes_received of one-step runs of builtin:tiny at 64x64 on the CPU.
  const PlanEstimate four = estimate(tiny_run(32), 4);
  CHECK(four.ranks[0].clip_bytes == 3253504);
  CHECK(four.ranks[1].clip_bytes == 4334848);
  CHECK(four.ranks[2].clip_bytes == 4334848);
  CHECK(four.ranks[3].clip_bytes == 3253504);
  GenerateSpec compat = tiny_run(24);
  compat.vi.mode = infinity::Mode::compat;
  const PlanEstimate three = estimate(compat, 3);
  CHECK(three.ranks[0].clip_bytes == 3244032);
  CHECK(three.ranks[1].clip_bytes == 5046272);
  CHECK(three.ranks[2].clip_bytes == 3244032);
  GenerateSpec kv = tiny_run(32);
  kv.vi.halo = infinity::HaloData::kv;
  CHECK(estimate(kv, 2).ranks[1].clip_bytes == 6137088);
  GenerateSpec exact = tiny_run(25);
  exact.vi.mode = infinity::Mode::exact;
  const PlanEstimate uneven = estimate(exact, 3);
  CHECK(uneven.ranks[0].clip_bytes == 2341632);
  CHECK(uneven.ranks[1].clip_bytes == 2718208);
  CHECK(uneven.ranks[2].clip_bytes == 2416640);
  GenerateSpec tensor = tiny_run(32);
  tensor.job.tensor = 2;
  const PlanEstimate split = estimate(tensor, 2);
  CHECK(split.ranks[0].tensor_bytes == 14155776);
  CHECK(split.ranks[0].clip_bytes == 0);
  GenerateSpec cfg = tiny_run(32);
  cfg.job.cfg = 2;
  const PlanEstimate branches = estimate(cfg, 2);
  CHECK(branches.ranks[1].cfg_bytes == 32768);  // the other branch's prediction: 4 x 32 x 8 x 8 floats
  CHECK(branches.ranks[1].batch == 1);
  // A pipeline stage receives the latents, the solver's memory and the text once per job.
  GenerateSpec pipe = tiny_run(32);
  pipe.job.pipeline = 2;
  const PlanEstimate stages = estimate(pipe, 2);
  CHECK(stages.ranks[0].handoff_bytes == 0);
  CHECK(stages.ranks[1].handoff_bytes == 2 * 32768.0 + 2 * 77 * 32 * 4);
  CHECK(stages.ranks[1].handoff == 2 * 32768.0);
}

TEST_CASE("plan: memory grows with the frames and the size, shrinks with frame ranks and tensor ranks") {
  const auto need = [](const GenerateSpec& o, int world) { return estimate(o, world).largest().total(); };
  CHECK(need(tiny_run(16), 1) < need(tiny_run(32), 1));
  CHECK(need(tiny_run(32), 1) < need(tiny_run(64), 1));
  CHECK(need(tiny_run(32, 64), 1) < need(tiny_run(32, 128), 1));
  CHECK(need(tiny_run(64), 2) < need(tiny_run(64), 1));
  CHECK(need(tiny_run(64), 4) < need(tiny_run(64), 2));
  GenerateSpec tensor = tiny_run(32);
  tensor.job.tensor = 2;
  CHECK(estimate(tensor, 2).ranks[0].weights < estimate(tiny_run(32), 1).ranks[0].weights);
  GenerateSpec unguided = tiny_run(32);
  unguided.guidance = 1;
  CHECK(need(unguided, 1) < need(tiny_run(32), 1));
  // 16-bit weights and activations on CUDA take less than f32.
  const GenerateSpec o = tiny_run(32);
  CHECK(estimate(o, 1, DType::bf16, Device::cuda(0)).largest().total() <
        estimate(o, 1, DType::f32, Device::cuda(0)).largest().total());
  // Only the ranks that decode hold the VAE's working set.
  GenerateSpec video = tiny_run(32);
  video.video = true;
  video.job.cfg = 2;
  const PlanEstimate decoded = estimate(video, 2);
  CHECK(decoded.ranks[0].vae_decode > 0);
  CHECK(decoded.ranks[1].vae_decode == 0);
  CHECK(decoded.ranks[1].vae_weights > 0);
}

TEST_CASE("plan: windows and FIFO hold one window's activations whatever the length, the state's latents grow") {
  for (sampling::LongMode mode : {sampling::LongMode::windows, sampling::LongMode::fifo}) {
    CAPTURE(sampling::long_mode_name(mode));
    const auto run = [&](std::int64_t frames) {
      GenerateSpec o = tiny_run(frames);
      o.long_video.mode = mode;
      o.long_video.window = o.long_video.fifo_window = 16;
      o.vi.mode = infinity::Mode::off;
      return o;
    };
    const RankEstimate a = estimate(run(64), 1).largest(), b = estimate(run(256), 1).largest();
    CHECK(a.activations == b.activations);  // one window of 16 frames either way
    CHECK(a.workspace == b.workspace);
    // The rest: a few latent-sized buffers over every frame (4 x 8 x 8 f32 = 1 KiB a frame) and the
    // gathered windows.
    CHECK(b.total() - a.total() > 0);
    CHECK(b.total() - a.total() < 192 * 1024 * 16);
    // Video-Infinity's one clip holds all 256 frames' activations on one rank.
    CHECK(estimate(tiny_run(256), 1).largest().activations > 8 * b.activations);
  }
}

TEST_CASE("plan: a layout that fits passes, one that does not says what would fit") {
  const PlanEstimate big = estimate(tiny_run(64), 1);
  const double need = big.largest().total();
  CHECK_NOTHROW(check_plan_fits(big, need / kPlanHeadroom * 1.01, "test device"));
  CHECK_NOTHROW(check_plan_fits(big, 0, "a device of unknown size"));
  // Room for 32 frames but not 64: fewer frames, or more frame ranks for the 64.
  const double room = (estimate(tiny_run(32), 1).largest().total() + need) / 2 / kPlanHeadroom;
  std::string message;
  try {
    check_plan_fits(big, room, "test device");
  } catch (const InputError& e) {
    message = e.what();
  }
  CAPTURE(message);
  CHECK(message.find("the layout does not fit: rank 0 needs about") != std::string::npos);
  CHECK(message.find("test device has") != std::string::npos);
  CHECK(message.find("what would fit: --video.frames ") != std::string::npos);
  CHECK(message.find("frame ranks instead of 1 (2 ranks)") != std::string::npos);
  CHECK_THROWS_WITH_AS(check_plan_fits(big, 1e6, "test device"), doctest::Contains("use devices with more memory"),
                       InputError);
}
