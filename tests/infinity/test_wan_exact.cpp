// Exact mode for the Wan transformer (infinity::WanExactAttention): a video split over 1-4 ranks
// by frames (the thread transport, one runtime per rank) gives the one-rank prediction: on the
// reference's transformer against diffusers' numbers, and with 4 heads on 3 ranks (rows that do
// not divide) against one rank. The all-to-all traffic is counted against the analytic count.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../support.hpp"
#include "infinity/wan_exact.hpp"
#include "io/safetensors.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

struct Inputs {
  std::vector<float> x, text, t;  // x [B, C, F, H, W], text [B, Lt, text_dim], t [B]
  Shape xs, ts;
};

// The prediction on `ranks` ranks, each holding its share of the frames (or, at 0, one rank
// without the hook), gathered into [B, C, F, H, W] on the host.
// The transformer on a rank's runtime.
using MakeWan = std::function<model::WanTransformer(Runtime&)>;

std::vector<float> predict(const model::WanTransformerConfig& c, const MakeWan& make, const Inputs& in, int ranks,
                           std::vector<mpi::CommCounters>* counters = nullptr) {
  const std::int64_t B = in.xs[0], C = in.xs[1], F = in.xs[2], H = in.xs[3], W = in.xs[4];
  std::vector<float> got(in.x.size());
  std::mutex m;
  auto run = [&](int r, mpi::Communicator* comm, Runtime& rt) {
    ExecContext& ctx = rt.ctx();
    const model::WanTransformer wan = make(rt);
    const infinity::FrameRange frames = comm ? infinity::clip_frames(F, comm->size(), r) : infinity::FrameRange{0, F};
    const Tensor whole = Tensor::wrap(const_cast<float*>(in.x.data()), DType::f32, Device::cpu(), in.xs);
    OwnedTensor x = ctx.arena->empty(DType::f32, {B, C, frames.count, H, W}), out = ctx.arena->empty(DType::f32, x.shape);
    OwnedTensor t = ctx.arena->empty(DType::f32, {B}), text = ctx.arena->empty(DType::f32, in.ts);
    ops::copy(ctx, whole.slice(2, frames.first, frames.count), x);
    ops::copy(ctx, Tensor::wrap(const_cast<float*>(in.t.data()), DType::f32, Device::cpu(), {B}), t);
    ops::copy(ctx, Tensor::wrap(const_cast<float*>(in.text.data()), DType::f32, Device::cpu(), in.ts), text);
    const std::int64_t per_frame = (H / c.patch_size[1]) * (W / c.patch_size[2]);
    std::vector<std::int64_t> tokens = comm ? infinity::clip_frame_counts(F, comm->size()) : std::vector<std::int64_t>{};
    for (std::int64_t& n : tokens) n *= per_frame;
    std::unique_ptr<infinity::WanExactAttention> exact;
    if (comm) exact = std::make_unique<infinity::WanExactAttention>(*comm, tokens);
    wan.forward(ctx, x, t, text, out, nullptr, {frames.first, F}, exact.get());
    test::HostTensor host(out.shape);
    ops::copy(ctx, out, host);
    rt.synchronize();
    const std::lock_guard<std::mutex> lock(m);
    const Tensor dst = Tensor::wrap(got.data(), DType::f32, Device::cpu(), in.xs).slice(2, frames.first, frames.count);
    ops::copy(ctx, host, dst);
  };
  if (ranks == 0) {
    Runtime rt(Device::cpu());
    run(0, nullptr, rt);
  } else {
    test::run_on_threads_rt(ranks, [&](int r, mpi::Communicator& comm, Runtime& rt) { run(r, &comm, rt); }, counters);
  }
  return got;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double worst = 0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
  return worst;
}

std::vector<float> host_copy(const Tensor& t) {
  return std::vector<float>(t.ptr<float>(), t.ptr<float>() + t.numel());
}

}  // namespace

TEST_CASE("Wan exact mode: frames over 1-4 ranks give diffusers' prediction and one rank's") {
  const std::string dir = test::fixture("wan-tiny/transformer");
  const model::WanTransformerConfig c = model::load_wan_transformer_config(dir + "/config.json");
  const MakeWan weights = [&](Runtime& rt) { return model::WanTransformer::load(dir, rt, DType::f32, false, nullptr); };
  const io::SafetensorsFile f(test::fixture("wan-tiny/inputs.safetensors"));
  const io::SafetensorsFile ref(test::fixture("wan-tiny/ref.safetensors"));
  Inputs in{host_copy(f.tensor("hidden_states")), host_copy(f.tensor("encoder_hidden_states")), {}, f.tensor("hidden_states").shape,
            f.tensor("encoder_hidden_states").shape};
  in.t.assign(static_cast<std::size_t>(in.xs[0]), f.tensor("timesteps").ptr<float>()[0]);
  const std::vector<float> want = host_copy(ref.tensor("noise_pred.t0"));
  const std::vector<float> one = predict(c, weights, in, 0);
  for (int n = 1; n <= 4; ++n) {
    CAPTURE(n);
    std::vector<mpi::CommCounters> counters;
    const std::vector<float> got = predict(c, weights, in, n, &counters);
    // The same sums over other splits of the products' rows (oneDNN picks kernels by shape): equal
    // to one rank to f32 rounding, not necessarily bit for bit. Measured: within 1.7e-6.
    const double d1 = max_diff(got, one), dr = max_diff(got, want);
    INFO("max |diff| from one rank " << d1 << ", from diffusers " << dr);
    CHECK(d1 <= 1e-5);
    CHECK(dr <= 1e-4);
    // 5 frames of 16 patches: per block, what the analytic count says, in f32; no other traffic.
    std::vector<std::int64_t> tokens = infinity::clip_frame_counts(5, n);
    for (std::int64_t& t : tokens) t *= 16;
    for (int r = 0; r < n; ++r) {
      const auto& cr = counters[static_cast<std::size_t>(r)];
      const std::uint64_t want_bytes = static_cast<std::uint64_t>(
          c.layers * infinity::WanExactAttention::received_elements(tokens, r, in.xs[0] * c.heads, c.head_dim) * 4);
      CHECK(cr.bytes[static_cast<std::size_t>(mpi::CommOp::all_to_all)] == want_bytes);
      std::uint64_t all = 0;
      for (std::uint64_t b : cr.bytes) all += b;
      CHECK(all == want_bytes);
    }
  }
}

// 4 heads: with a CFG batch of 2, 8 rows on 3 ranks (shared 2, 3, 3) and 7 frames split
// 2, 2, 3; alone, 4 rows on 3 ranks (1, 1, 2). Random weights of the tiny shape.
TEST_CASE("Wan exact mode: 4 heads on 3 ranks, with and without a CFG batch, as one rank") {
  model::WanTransformerConfig c = model::wan_transformer_preset("wan-tiny");
  c.heads = 4;
  c.head_dim = 8;
  const MakeWan weights = [&](Runtime& rt) {
    return model::WanTransformer(c, model::Weights::random(model::wan_transformer_parameters(c), rt, DType::f32, 11));
  };
  for (std::int64_t B : {2, 1}) {
    CAPTURE(B);
    Inputs in;
    in.xs = {B, c.in_channels, 7, 4, 6};
    in.ts = {B, 9, c.text_dim};
    Runtime rt(Device::cpu());
    OwnedTensor x = rt.arena().empty(DType::f32, in.xs), text = rt.arena().empty(DType::f32, in.ts);
    ops::normal(rt.ctx(), x, 5, 0, 0);
    ops::normal(rt.ctx(), text, 6, 0, 0);
    in.x = host_copy(x);
    in.text = host_copy(text);
    in.t.assign(static_cast<std::size_t>(B), 611.f);
    const std::vector<float> one = predict(c, weights, in, 0);
    for (int n : {2, 3}) {
      CAPTURE(n);
      const double d = max_diff(predict(c, weights, in, n), one);
      INFO("max |diff| from one rank " << d);
      CHECK(d <= 1e-5);
    }
  }
}
