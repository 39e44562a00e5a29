// Tensor parallelism (`--parallel.tensor T`) in one process: the parameter split (heads, GEGLU
// halves, feed-forward columns, uneven head counts) and the tiny fixture's UNet over T = 1-4
// threads, each holding its shard, against the reference implementation's output.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <thread>

#include "../support.hpp"
#include "core/error.hpp"
#include "infinity/tensor_group.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"
#include "model/unet3d.hpp"
#include "model/weights.hpp"
#include "mpi/communicator.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

using namespace vinf;

namespace {

using Ranges = std::vector<std::pair<std::int64_t, std::int64_t>>;

}  // namespace

TEST_CASE("tensor parallelism: Q/K/V by heads (uneven), the output projection by columns, GEGLU by both halves") {
  // VideoCrafter2's first level: 320 channels, 5 heads of 64.
  const model::ParamSplit heads{model::ParamSplit::heads_rows, 5, 64};
  const model::ParamSpec q{"b.attn1.to_q.weight", {320, 320}, {}, heads};
  const model::ParamSpec kv{"b.attn2.to_k.weight", {320, 1024}, {}, heads};
  const model::ParamSpec out{"b.attn1.to_out.0.weight", {320, 320}, {}, {model::ParamSplit::heads_cols, 5, 64}};
  const model::ParamSpec bias{"b.attn1.to_out.0.bias", {320}};
  const model::ParamSpec geglu{"b.ff.net.0.proj.weight", {2560, 320}, {}, {model::ParamSplit::geglu_rows, 1280, 1}};
  const model::ParamSpec geglu_b{"b.ff.net.0.proj.bias", {2560}, {}, {model::ParamSplit::geglu_rows, 1280, 1}};
  const model::ParamSpec ff{"b.ff.net.2.weight", {320, 1280}, {}, {model::ParamSplit::ff_cols, 1280, 1}};
  // Two ranks: 2 and 3 heads.
  model::ParamShard s = model::param_shard(q, 0, 2);
  CHECK(s.dim == 0);
  CHECK(s.ranges == Ranges{{0, 128}});
  CHECK(s.shape == Shape{128, 320});
  s = model::param_shard(kv, 1, 2);
  CHECK(s.ranges == Ranges{{128, 192}});
  CHECK(s.shape == Shape{192, 1024});
  s = model::param_shard(out, 1, 2);
  CHECK(s.dim == 1);
  CHECK(s.shape == Shape{320, 192});
  CHECK(model::param_shard(bias, 1, 2).dim == -1);  // replicated: added once, after the sum
  CHECK(model::param_shard(bias, 1, 2).shape == Shape{320});
  // GEGLU: the value rows and the same gate rows.
  s = model::param_shard(geglu, 2, 3);
  CHECK(s.ranges == Ranges{{853, 427}, {1280 + 853, 427}});
  CHECK(s.shape == Shape{854, 320});
  CHECK(model::param_shard(geglu_b, 2, 3).shape == Shape{854});
  CHECK(model::param_shard(ff, 2, 3).shape == Shape{320, 427});
  // One rank: everything whole.
  CHECK(model::param_shard(q, 0, 1).dim == -1);
  // Every rank's share together covers each parameter once.
  for (int t : {1, 2, 3, 4, 5}) {
    std::int64_t rows = 0;
    for (int r = 0; r < t; ++r) rows += model::param_shard(geglu, r, t).shape[0];
    CHECK(rows == 2560);
  }
}

TEST_CASE("tensor parallelism over 1-4 threads: the tiny UNet equals the reference, each rank holding its slices") {
  const model::ModelFiles files = model::find_model_files(test::fixture("tiny-unet3d"));
  const model::UNetConfig c = model::load_unet_config(files.config, nullptr);
  const model::WeightFiles wf(files);
  const auto params = model::unet_parameters(c);
  io::SafetensorsFile inputs{test::fixture("tiny-unet3d/inputs.safetensors")};
  io::SafetensorsFile ref{test::fixture("tiny-unet3d/ref_plain.safetensors")};
  const Tensor sample_h = inputs.tensor("sample"), text_h = inputs.tensor("encoder_hidden_states");
  const Tensor want = ref.tensor("noise_pred.t900");
  const double fps = static_cast<double>(inputs.tensor("fps").ptr<std::int64_t>()[0]);
  CHECK(model::fewest_heads(c) == 4);
  try {
    model::check_tensor_split(c, 5, files.config);
    FAIL("--parallel.tensor 5 over 4 heads was accepted");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()).find("has attentions of only 4 heads; use at most --parallel.tensor 4") !=
          std::string::npos);
  }
  std::size_t whole_split = 0;
  for (int t : {1, 2, 3, 4}) {
    CAPTURE(t);
    auto group = mpi::make_thread_group(t);
    std::vector<double> err(static_cast<std::size_t>(t), 1e9);
    std::vector<std::size_t> split(static_cast<std::size_t>(t));
    std::vector<std::string> errors(static_cast<std::size_t>(t));
    std::vector<std::thread> threads;
    const int per_rank = cpu_threads_per_rank(t);
    for (int r = 0; r < t; ++r)
      threads.emplace_back([&, r] {
        try {
          set_cpu_threads(per_rank);
          Runtime rt(Device::cpu());
          model::UNet3D unet(c, model::Weights(wf, params, rt, DType::f32, false, nullptr, {r, t}));
          infinity::CommTensorGroup tg(*group[static_cast<std::size_t>(r)]);
          unet.set_tensor_group(&tg);
          split[static_cast<std::size_t>(r)] = unet.weights().split_bytes();
          OwnedTensor sample = rt.arena().empty(DType::f32, sample_h.shape), text = rt.arena().empty(DType::f32, text_h.shape);
          ops::copy(rt.ctx(), sample_h, sample);
          ops::copy(rt.ctx(), text_h, text);
          OwnedTensor out = rt.arena().empty(DType::f32, sample_h.shape);
          model::PlainTemporalContext plain;
          unet.forward(rt.ctx(), sample, 900, fps, text, out, plain);
          test::HostTensor host(out.shape);
          ops::copy(rt.ctx(), out, host);
          double worst = 0;
          for (std::size_t i = 0; i < host.data.size(); ++i)
            worst = std::max(worst, std::fabs(double(host.data[i]) - want.ptr<float>()[i]));
          err[static_cast<std::size_t>(r)] = worst;
        } catch (const std::exception& e) {
          errors[static_cast<std::size_t>(r)] = e.what();
        }
      });
    for (auto& th : threads) th.join();
    for (const std::string& e : errors) REQUIRE_MESSAGE(e.empty(), e);
    // Every rank of the group ends with the whole prediction; summation order differs from one
    // rank's, so float tolerance (the reference tolerance of the golden tests).
    for (double e : err) CHECK(e < 1e-4);
    // The split weights: the shares add up to the whole, and each rank holds about 1/T of it
    // (4 heads over 3 ranks: at most 2 of 4, so at most 1.5 / T).
    std::size_t sum = 0, most = 0;
    for (std::size_t b : split) {
      sum += b;
      most = std::max(most, b);
    }
    if (t == 1) whole_split = sum;
    CHECK(sum == whole_split);
    CHECK(static_cast<double>(most) <= 1.5 * static_cast<double>(whole_split) / t + 1);
  }
  CHECK(whole_split > 0);
}
