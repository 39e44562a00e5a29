#include "app/forward_wan.hpp"

#include <chrono>
#include <cmath>
#include <iostream>
#include <map>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/safetensors.hpp"
#include "model/wan_transformer.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::app {

namespace {

using Clock = std::chrono::steady_clock;

const char* const kWanInputs =
    "vinf forward on a Wan transformer needs hidden_states [B,C,F,H,W], encoder_hidden_states [B,L,D] and "
    "timesteps F32 [T]";

Tensor wan_input(const io::SafetensorsFile& f, const char* name, int rank, const char* layout) {
  const auto* e = f.find(name);
  VINF_INPUT_CHECK(e != nullptr, f.path(), " has no tensor '", name, "' (", kWanInputs, ")");
  VINF_INPUT_CHECK(e->shape.rank() == rank, f.path(), ": '", name, "' must be ", layout, ", got shape ", e->shape.str());
  VINF_INPUT_CHECK(e->shape.numel() > 0, f.path(), ": '", name, "' ", e->shape.str(), " is empty");
  const Tensor t = f.tensor(name);
  VINF_INPUT_CHECK(t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16 ||
                       (rank == 1 && t.dtype == DType::i64),
                   f.path(), ": '", name, "' must be F32 (or F16/BF16), got ", io::safetensors_dtype_name(t.dtype));
  return t;
}

}  // namespace

int forward_wan(const WanForwardRequest& r) {
  VINF_INPUT_CHECK(r.emulate == 0 && r.cfg == 1 && r.tensor == 1, "vinf forward: ", r.model_dir,
                   " is a Wan transformer, which runs on one rank in this version: drop --vi.emulate-clips, "
                   "--parallel.cfg and --parallel.tensor");
  VINF_INPUT_CHECK(r.dump.empty(), "vinf forward: --dump-temporal is for the UNet; a Wan transformer has no ",
                   "temporal modules");
  job::JobPlan plan = r.plan;
  plan.clip_group = false;
  const std::unique_ptr<job::Job> job = job::start_job(plan, [&](int world) {
    VINF_INPUT_CHECK(world == 1, "vinf forward: ", r.model_dir, " is a Wan transformer, which runs on one rank in this ",
                     "version; launch it without mpirun/srun (", world, " ranks were started)");
  });
  auto log = [&](const std::string& line) { std::cerr << "vinf forward: " << line << "\n" << std::flush; };
  if (r.vi_given) log("note: the --vi.* settings are for the UNet family and do not change a Wan transformer's call");

  const io::SafetensorsFile in(r.inputs_path);
  const Tensor x = wan_input(in, "hidden_states", 5, "[B,C,F,H,W]");
  const Tensor text = wan_input(in, "encoder_hidden_states", 3, "[B,L,D]");
  const Tensor ts = wan_input(in, "timesteps", 1, "F32 [T]");
  std::vector<float> timesteps;
  for (std::int64_t i = 0; i < ts.numel(); ++i) {
    Tensor one = ts.slice(0, i, 1);
    double v = 0;
    ops::copy(job->runtime().ctx(), one, Tensor::wrap(&v, DType::f64, Device::cpu(), {1}));
    VINF_INPUT_CHECK(std::isfinite(v) && v >= 0 && v <= 1e6, r.inputs_path, ": timesteps[", i, "] = ", v,
                     " is not a diffusion timestep");
    timesteps.push_back(static_cast<float>(v));
  }
  VINF_INPUT_CHECK(text.size(0) == x.size(0), r.inputs_path, ": 'encoder_hidden_states' has batch ", text.size(0),
                   " but 'hidden_states' has batch ", x.size(0));

  Runtime& rt = job->runtime();
  const DType dtype = job->dtype();
  std::vector<std::string> warnings;
  const auto t_load = Clock::now();
  const model::WanTransformer wan = model::WanTransformer::load(r.model_dir, rt, dtype, r.ignore_unexpected, &warnings);
  const model::WanTransformerConfig& c = wan.config();
  for (const std::string& w : warnings) log("warning: " + w);
  VINF_INPUT_CHECK(x.size(1) == c.in_channels, r.inputs_path, ": 'hidden_states' has ", x.size(1),
                   " channels but the transformer takes in_channels = ", c.in_channels);
  VINF_INPUT_CHECK(text.size(2) == c.text_dim, r.inputs_path, ": 'encoder_hidden_states' has width ", text.size(2),
                   " but the transformer has text_dim = ", c.text_dim);
  log("Wan transformer " + r.model_dir + ": " + std::to_string(wan.weights().count()) + " parameters, " +
      format_mib(static_cast<double>(wan.weights().bytes())) + " as " + model::precision_name(dtype, rt.device()) +
      " on " + rt.device().name() + " (loaded in " + std::to_string(seconds_since(t_load)).substr(0, 5) + " s); " +
      std::to_string(timesteps.size()) + " timestep(s)");

  const std::int64_t B = x.size(0);
  const Shape out_shape{B, c.out_channels, x.size(2), x.size(3), x.size(4)};
  OwnedTensor xd = rt.arena().empty(dtype, x.shape), ed = rt.arena().empty(dtype, text.shape),
              td = rt.arena().empty(DType::f32, {B}), pred = rt.arena().empty(dtype, out_shape);
  ops::copy(rt.ctx(), x, xd);
  ops::copy(rt.ctx(), text, ed);
  std::vector<std::vector<float>> preds;
  for (std::size_t i = 0; i < timesteps.size(); ++i) {
    const auto t0 = Clock::now();
    std::vector<float> tb(static_cast<std::size_t>(B), timesteps[i]);
    ops::copy(rt.ctx(), Tensor::wrap(tb.data(), DType::f32, Device::cpu(), {B}), td);
    wan.forward(rt.ctx(), xd, td, ed, pred);
    preds.emplace_back(static_cast<std::size_t>(pred.numel()));
    ops::copy(rt.ctx(), pred, Tensor::wrap(preds.back().data(), DType::f32, Device::cpu(), out_shape));
    rt.synchronize();
    log("t[" + std::to_string(i) + "] = " + std::to_string(timesteps[i]) + ": " +
        std::to_string(seconds_since(t0)).substr(0, 6) + " s");
  }
  std::vector<io::TensorToWrite> out;
  std::string list;
  for (std::size_t i = 0; i < preds.size(); ++i) {
    out.push_back({"noise_pred.t" + std::to_string(i), DType::f32, out_shape, preds[i].data(), {}});
    list += (i ? "," : "") + std::to_string(timesteps[i]);
  }
  io::write_safetensors(r.out_path, out,
                        {{"generator", std::string("vinf ") + VINF_VERSION + " forward"},
                         {"model", r.model_dir},
                         {"family", "wan"},
                         {"timesteps", list},
                         {"device", rt.device().name()},
                         {"dtype", dtype_name(dtype)}});
  log("peak memory " + format_mib(static_cast<double>(rt.arena().stats().peak_in_use)) + "; wrote " + r.out_path);
  return 0;
}

}  // namespace vinf::app
