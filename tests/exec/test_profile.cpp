// --profile (exec/profile.hpp): the accounting on a timer whose marks are known, then real model
// calls on the CPU (and, where there is one, on a GPU) with every op timed.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "../support.hpp"
#include "exec/profile.hpp"
#include "model/presets.hpp"
#include "model/unet3d.hpp"
#include "model/wan_config.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/activation.hpp"
#include "ops/norm.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

// Mark i is at i milliseconds: every span is its count of marks.
class ProfileSteppedTimer final : public ProfileTimer {
 public:
  std::size_t mark() override { return n_++; }
  std::vector<double> resolve() override {
    ++resolved;
    std::vector<double> s(n_);
    for (std::size_t i = 0; i < n_; ++i) s[i] = 1e-3 * static_cast<double>(i);
    return s;
  }
  void clear() override { n_ = 0; }
  const char* clock_name() const override { return "stepped"; }
  int resolved = 0;

 private:
  std::size_t n_ = 0;
};

const ProfileRow* profile_row(const std::vector<ProfileRow>& rows, const std::string& name) {
  const auto it = std::find_if(rows.begin(), rows.end(), [&](const ProfileRow& r) { return r.name == name; });
  return it == rows.end() ? nullptr : &*it;
}

}  // namespace

TEST_CASE("profile: outermost ops timed, by kind and innermost module, counters per call") {
  auto owned = std::make_unique<ProfileSteppedTimer>();
  ProfileSteppedTimer& timer = *owned;
  Profiler p(std::move(owned));
  ExecContext ctx;
  ctx.profiler = &p;
  {  // an op outside a model call is not timed
    const ProfileOp outside(ctx, "copy");
  }
  for (int call = 0; call < 2; ++call) {
    const ProfileCall c(ctx);  // mark 0
    {
      const ProfileModule m(ctx, "blocks.0", ".attn1");
      {
        const ProfileOp op(ctx, "linear");  // marks 1-2
        const ProfileOp nested(ctx, "copy");  // inside linear: not timed apart
        count_launch();
        count_launch();
      }
      {
        const ProfileModule inner(ctx, "blocks.0.attn1.norm");
        const ProfileOp op(ctx, "layer_norm");  // marks 3-4
        count_host_sync();
      }
      const ProfileOp op(ctx, "linear");  // marks 5-6
      count_library_call();
    }
    const ProfileOp top(ctx, "add");  // marks 7-8, outside the modules
  }  // mark 9
  ctx.profiler = nullptr;
  const ProfileReport r = p.report();
  CHECK(timer.resolved == 2);
  CHECK(r.clock == "stepped");
  CHECK(r.calls == 2);
  CHECK(r.call_s == doctest::Approx(9e-3));
  CHECK(r.op_s == doctest::Approx(4e-3));
  CHECK(r.gap_s() == doctest::Approx(5e-3));
  CHECK(r.op_calls == 4);
  CHECK(r.launches == 2);
  CHECK(r.library_calls == 1);
  CHECK(r.host_syncs == 1);
  REQUIRE(r.by_kind.size() == 3);
  CHECK(r.by_kind[0].name == "linear");
  CHECK(r.by_kind[0].seconds == doctest::Approx(2e-3));
  CHECK(r.by_kind[0].calls == 2);
  CHECK(profile_row(r.by_kind, "copy") == nullptr);
  REQUIRE(profile_row(r.by_module, "blocks.0.attn1") != nullptr);
  CHECK(profile_row(r.by_module, "blocks.0.attn1")->calls == 2);
  REQUIRE(profile_row(r.by_module, "blocks.0.attn1.norm") != nullptr);
  CHECK(profile_row(r.by_module, "blocks.0.attn1.norm")->seconds == doctest::Approx(1e-3));
  REQUIRE(profile_row(r.by_module, "(outside the modules)") != nullptr);
  REQUIRE(profile_row(r.by_module_kind, "blocks.*.attn1") != nullptr);
  CHECK(profile_row(r.by_module_kind, "blocks.*.attn1")->seconds == doctest::Approx(2e-3));
}

TEST_CASE("profile: a call that throws is dropped; module kinds fold indices only") {
  Profiler p(std::make_unique<ProfileSteppedTimer>());
  ExecContext ctx;
  ctx.profiler = &p;
  try {
    const ProfileCall c(ctx);
    const ProfileOp op(ctx, "linear");
    throw std::runtime_error("fails");
  } catch (const std::runtime_error&) {
  }
  {
    const ProfileCall c(ctx);
    const ProfileOp op(ctx, "conv2d");
  }
  const ProfileReport r = p.report();
  CHECK(r.calls == 1);
  REQUIRE(r.by_kind.size() == 1);
  CHECK(r.by_kind[0].name == "conv2d");
  CHECK(module_kind("down_blocks.10.attentions.0.transformer_blocks.0.attn2") ==
        "down_blocks.*.attentions.*.transformer_blocks.*.attn2");
  CHECK(module_kind("up_blocks.1.temp_convs.2.conv3") == "up_blocks.*.temp_convs.*.conv3");
  CHECK(module_kind("conv_in") == "conv_in");
}

namespace {

// Marks that fail from the `fail_at`-th on, as a device error would make them.
class ProfileFailingTimer final : public ProfileTimer {
 public:
  explicit ProfileFailingTimer(std::size_t fail_at) : fail_at_(fail_at) {}
  std::size_t mark() override {
    if (++made_ >= fail_at_) throw std::runtime_error("the device failed");
    return n_++;
  }
  std::vector<double> resolve() override { return std::vector<double>(n_, 0.0); }
  void clear() override { n_ = 0; }
  const char* clock_name() const override { return "failing"; }

 private:
  std::size_t fail_at_, made_ = 0, n_ = 0;
};

}  // namespace

TEST_CASE("profile: a failing mark or an inner call's exception drops the call, never ends the process") {
  {  // the 3rd mark (the op's end) fails inside a destructor: the call is dropped
    Profiler p(std::make_unique<ProfileFailingTimer>(3));
    ExecContext ctx;
    ctx.profiler = &p;
    {
      const ProfileCall c(ctx);
      const ProfileOp op(ctx, "linear");
    }
    CHECK(p.report().calls == 0);
  }
  {  // the call's first mark fails: nothing begun, the next call is profiled
    Profiler p(std::make_unique<ProfileFailingTimer>(1));
    ExecContext ctx;
    ctx.profiler = &p;
    CHECK_THROWS_AS([&] { const ProfileCall c(ctx); }(), std::runtime_error);
    const ProfileOp op(ctx, "add");  // outside any call: not timed, no mark taken
    CHECK(p.report().calls == 0);
  }
  Profiler p(std::make_unique<ProfileSteppedTimer>());
  ExecContext ctx;
  ctx.profiler = &p;
  {  // an inner call throws and the outer one catches: the outer call is dropped with it
    const ProfileCall outer(ctx);
    try {
      const ProfileCall inner(ctx);
      const ProfileOp op(ctx, "linear");
      throw std::runtime_error("fails");
    } catch (const std::runtime_error&) {
    }
    const ProfileOp op(ctx, "add");
  }
  CHECK(p.report().calls == 0);
  {
    const ProfileCall c(ctx);
    const ProfileOp op(ctx, "add");
  }
  CHECK(p.report().calls == 1);
}

namespace {

// Two tiny-UNet calls on `rt`, profiled when `profile`; the second call's output.
std::vector<float> profile_unet_calls(Runtime& rt, bool profile, ProfileReport* report) {
  const model::UNetConfig c = model::preset_config("tiny");
  const model::UNet3D unet(c, model::Weights::random(model::unet_parameters(c), rt, DType::f32, 5));
  OwnedTensor x = rt.arena().empty(DType::f32, {2, c.in_channels, 4, 8, 8});
  OwnedTensor text = rt.arena().empty(DType::f32, {2, 7, c.cross_attention_dim});
  OwnedTensor out = rt.arena().empty(DType::f32, x.shape);
  ops::normal(rt.ctx(), x, 1, 3, 0);
  ops::normal(rt.ctx(), text, 1, 4, 0);
  model::PlainTemporalContext plain;
  std::unique_ptr<Profiling> profiling = profile ? std::make_unique<Profiling>(rt.ctx()) : nullptr;
  for (int t : {900, 500}) unet.forward(rt.ctx(), x, t, 24.0, text, out, plain);
  if (report) *report = profiling->report();
  std::vector<float> host(static_cast<std::size_t>(out.numel()));
  ops::copy(rt.ctx(), out, Tensor::wrap(host.data(), DType::f32, Device::cpu(), out.shape));
  return host;
}

// What every profile of a UNet call holds, whatever the device.
void check_unet_profile(const ProfileReport& r) {
  CHECK(r.calls == 2);
  CHECK(r.call_s > 0);
  CHECK(r.op_s > 0);
  CHECK(r.op_s <= r.call_s * 1.0001);
  // Each call runs the same ops: a whole number per call.
  CHECK(r.op_calls == doctest::Approx(std::round(r.op_calls)));
  CHECK(r.op_calls > 100);
  for (const char* kind : {"conv2d", "linear", "attention", "group_norm", "layer_norm", "temporal_conv"})
    CHECK_MESSAGE(profile_row(r.by_kind, kind) != nullptr, kind);
  for (const char* module : {"conv_in", "conv_out", "time_embedding", "down_blocks.0.resnets.0.conv1",
                             "down_blocks.0.attentions.0.transformer_blocks.0.attn1",
                             "down_blocks.0.temp_attentions.0.transformer_blocks.0.attn2",
                             "mid_block.temp_convs.1.conv4", "up_blocks.1.attentions.0.transformer_blocks.0.ff"})
    CHECK_MESSAGE(profile_row(r.by_module, module) != nullptr, module);
  CHECK(profile_row(r.by_module_kind, "down_blocks.*.attentions.*.transformer_blocks.*.attn1") != nullptr);
  double kinds = 0, modules = 0;
  for (const ProfileRow& k : r.by_kind) kinds += k.seconds;
  for (const ProfileRow& m : r.by_module) modules += m.seconds;
  CHECK(kinds == doctest::Approx(r.op_s));
  CHECK(modules == doctest::Approx(r.op_s));
}

}  // namespace

TEST_CASE("profile: a UNet call on the CPU, timed op by op, computes what it computes unprofiled") {
  Runtime rt(Device::cpu());
  ProfileReport r;
  const std::vector<float> profiled = profile_unet_calls(rt, true, &r);
  const std::vector<float> plain = profile_unet_calls(rt, false, nullptr);
  CHECK(profiled == plain);  // the same ops on the same shapes and threads: bit for bit
  CHECK(r.clock == "steady clock");
  check_unet_profile(r);
  CHECK(r.launches == 0);
  CHECK(r.library_calls == 0);
  CHECK(rt.ctx().profiler == nullptr);
}

TEST_CASE("profile: a Wan transformer call by block and part") {
  Runtime rt(Device::cpu());
  const model::WanTransformerConfig c = model::wan_transformer_preset("wan-tiny");
  const model::WanTransformer wan(c, model::Weights::random(model::wan_transformer_parameters(c), rt, DType::f32, 2));
  OwnedTensor x = rt.arena().empty(DType::f32, {2, c.in_channels, 2, 8, 8});
  OwnedTensor text = rt.arena().empty(DType::f32, {2, 6, c.text_dim});
  OwnedTensor out = rt.arena().empty(DType::f32, x.shape), t = rt.arena().empty(DType::f32, {2});
  ops::normal(rt.ctx(), x, 1, 1, 0);
  ops::normal(rt.ctx(), text, 1, 2, 0);
  ops::fill(rt.ctx(), t, 700.0);
  const Profiling profiling(rt.ctx());
  wan.forward(rt.ctx(), x, t, text, out);
  const ProfileReport r = profiling.report();
  CHECK(r.calls == 1);
  CHECK(r.op_s <= r.call_s * 1.0001);
  for (const char* module : {"patch_embedding", "condition_embedder", "blocks.0.attn1", "blocks.0.attn2",
                             "blocks.0.ffn", "blocks.0.modulation", "proj_out"})
    CHECK_MESSAGE(profile_row(r.by_module, module) != nullptr, module);
  REQUIRE(profile_row(r.by_module_kind, "blocks.*.attn1") != nullptr);
  CHECK(profile_row(r.by_module_kind, "blocks.*.attn1")->calls > 0);
  CHECK(profile_row(r.by_kind, "rotary") != nullptr);
}

TEST_CASE("profile: a UNet call on CUDA, timed by events; launches and library calls counted") {
  if (!test::gpu_or_skip("the CUDA profile")) return;
  Runtime rt(Device::cuda(0));
  ProfileReport r;
  profile_unet_calls(rt, true, &r);
  CHECK(r.clock == "CUDA events");
  check_unet_profile(r);
  CHECK(r.launches > 0);
  CHECK(r.library_calls > 0);
}

TEST_CASE("VINF_GPU_KERNELS=group-norm: one kernel per GroupNorm on CUDA, as the default kernels compute") {
  if (!test::gpu_or_skip("the fused GroupNorm")) return;
  Runtime rt(Device::cuda(0));
  OwnedTensor x = rt.arena().empty(DType::f32, {4, 64, 1, 64}), g = rt.arena().empty(DType::f32, {64}),
              b = rt.arena().empty(DType::f32, {64});
  OwnedTensor y0 = rt.arena().empty(DType::f32, x.shape), y1 = rt.arena().empty(DType::f32, x.shape);
  ops::normal(rt.ctx(), x, 2, 1, 0);
  ops::normal(rt.ctx(), g, 1, 2, 0);
  ops::normal(rt.ctx(), b, 1, 3, 0);
  const ops::GroupNormParams gp{32, 1e-5f, ops::Activation::silu};
  rt.ctx().gpu_kernels = 0;
  ops::group_norm(rt.ctx(), x, g, b, y0, gp);
  rt.ctx().gpu_kernels = static_cast<unsigned>(GpuKernel::group_norm);
  const std::uint64_t before = device_counters().launches;
  ops::group_norm(rt.ctx(), x, g, b, y1, gp);
  CHECK(device_counters().launches - before == 1);
  std::vector<float> a(static_cast<std::size_t>(x.numel())), c(a.size());
  ops::copy(rt.ctx(), y0, Tensor::wrap(a.data(), DType::f32, Device::cpu(), x.shape));
  ops::copy(rt.ctx(), y1, Tensor::wrap(c.data(), DType::f32, Device::cpu(), x.shape));
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, static_cast<double>(std::fabs(a[i] - c[i])));
  CHECK(worst < 1e-5);
}
