// Ops composed into two UNet3D modules with the tiny model's real weights, against diffusers'
// own outputs (tests/fixtures/tiny-unet3d): the time + fps embedding MLPs and a whole
// TemporalConvLayer (5-D GroupNorm, SiLU, Conv3d (3,1,1), residual).
#include <doctest/doctest.h>

#include <cmath>
#include <memory>
#include <vector>

#include "../support.hpp"
#include "io/safetensors.hpp"
#include "ops/activation.hpp"
#include "ops/conv.hpp"
#include "ops/elementwise.hpp"
#include "ops/embedding.hpp"
#include "ops/gemm.hpp"
#include "ops/norm.hpp"

using namespace vinf;
using test::max_abs_diff;
using test::download;

namespace {

struct Fixture {
  io::SafetensorsFile weights{test::fixture("tiny-unet3d/diffusion_pytorch_model.safetensors")};
  io::SafetensorsFile inputs{test::fixture("tiny-unet3d/inputs.safetensors")};
  io::SafetensorsFile ref{test::fixture("tiny-unet3d/ref_plain_intermediates.t900.safetensors")};
};

// Brings a host tensor to the runtime's device, or returns it as is on the CPU.
struct Uploaded {
  OwnedTensor owned;
  Tensor t;
};
Uploaded upload(Runtime& rt, const Tensor& host) {
  if (rt.device().is_cpu()) return {OwnedTensor(), host};
  Uploaded u{rt.arena().empty(host.dtype, host.shape), {}};
  ops::copy(rt.ctx(), host, u.owned);
  u.t = u.owned;
  return u;
}

// linear_2(silu(linear_1(sinusoid(value)))), the shape of both the time and the fps MLP.
OwnedTensor embedding_mlp(Runtime& rt, Fixture& f, const std::string& prefix, const Tensor& values) {
  auto w = [&](const std::string& n) { return upload(rt, f.weights.tensor(prefix + n)); };
  const auto w1 = w(".linear_1.weight"), b1 = w(".linear_1.bias"), w2 = w(".linear_2.weight"), b2 = w(".linear_2.bias");
  const std::int64_t B = values.size(0), C0 = w1.t.size(1), E = w1.t.size(0);
  OwnedTensor sinus = rt.arena().empty(DType::f32, {B, C0}), h = rt.arena().empty(DType::f32, {B, E}),
              out = rt.arena().empty(DType::f32, {B, E});
  ops::timestep_embedding(rt.ctx(), values, sinus, {true, 0.f, 10000.f});
  ops::linear(rt.ctx(), sinus, w1.t, &b1.t, h);
  ops::activation(rt.ctx(), ops::Activation::silu, h, h);
  ops::linear(rt.ctx(), h, w2.t, &b2.t, out);
  return out;
}

void check_time_embedding(Runtime& rt) {
  Fixture f;
  std::vector<std::int64_t> t900{900, 900};
  const auto t = upload(rt, Tensor::wrap(t900.data(), DType::i64, Device::cpu(), {2}));
  const auto fps = upload(rt, f.inputs.tensor("fps"));
  OwnedTensor temb = embedding_mlp(rt, f, "time_embedding", t.t);
  OwnedTensor femb = embedding_mlp(rt, f, "fps_embedding", fps.t);
  ops::add(rt.ctx(), temb, femb.view().expand(temb.shape), temb);  // fps MLP output added after linear_2
  const double err = max_abs_diff(download(rt, temb), f.ref.tensor("time_embedding.out"));
  CHECK(err < 1e-4);
}

void check_temporal_conv_layer(Runtime& rt, const std::string& module) {
  Fixture f;
  const Tensor in_host = f.ref.tensor(module + ".in");  // (B*F, C, H, W), frame-major
  const std::int64_t B = 2, F = in_host.size(0) / B, C = in_host.size(1), S = in_host.size(2) * in_host.size(3);
  const auto in = upload(rt, in_host);
  auto clip = [&](const Tensor& t) { return t.reshape({B, F, C, S}).permute({0, 2, 1, 3}); };
  OwnedTensor h = rt.arena().empty(DType::f32, in_host.shape), a = rt.arena().empty(DType::f32, in_host.shape);
  Tensor cur = in.t;
  for (int stage = 1; stage <= 4; ++stage) {
    const std::string p = module + ".conv" + std::to_string(stage);
    const auto gamma = upload(rt, f.weights.tensor(p + ".0.weight")), beta = upload(rt, f.weights.tensor(p + ".0.bias"));
    const std::string conv = p + (stage == 1 ? ".2" : ".3");
    const auto w = upload(rt, f.weights.tensor(conv + ".weight")), b = upload(rt, f.weights.tensor(conv + ".bias"));
    // GroupNorm over (C/groups x F x H x W) per batch element, then SiLU, then Conv3d (3,1,1).
    ops::group_norm(rt.ctx(), clip(cur), gamma.t, beta.t, clip(a), {8, 1e-5f, ops::Activation::silu});
    ops::temporal_conv(rt.ctx(), clip(a), w.t.reshape({C, C, 3}), &b.t, clip(h), 1);
    cur = h;
  }
  ops::add(rt.ctx(), in.t, h, h);
  const double err = max_abs_diff(download(rt, h), f.ref.tensor(module + ".out"));
  CAPTURE(module);
  CHECK(err < 1e-4);
}

}  // namespace

TEST_CASE("golden: time + fps embedding equals diffusers (CPU reference and fast)") {
  for (CpuImpl impl : {CpuImpl::reference, CpuImpl::fast}) {
    Runtime rt(Device::cpu(), impl);
    check_time_embedding(rt);
  }
}

TEST_CASE("golden: TemporalConvLayer equals diffusers (CPU reference and fast)") {
  for (CpuImpl impl : {CpuImpl::reference, CpuImpl::fast}) {
    Runtime rt(Device::cpu(), impl);
    check_temporal_conv_layer(rt, "down_blocks.0.temp_convs.0");
    check_temporal_conv_layer(rt, "mid_block.temp_convs.1");
  }
}

TEST_CASE("CUDA golden modules (f32): the same modules as diffusers") {
  if (!test::gpu_or_skip("golden modules on CUDA")) return;
  Runtime rt(Device::cuda(0));
  check_time_embedding(rt);
  check_temporal_conv_layer(rt, "down_blocks.0.temp_convs.0");
}
