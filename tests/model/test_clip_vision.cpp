// The CLIP vision tower on a tiny random model written here in transformers' layout, against a
// naive computation of the same forward pass (loops for the patch convolution and attention).
#include <doctest/doctest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/clip_vision.hpp"
#include "ops/runtime.hpp"

using namespace vinf;
namespace fs = std::filesystem;

namespace {

using Vec = std::vector<float>;
constexpr int kSize = 8, kPatch = 4, kD = 8, kHeads = 2, kInner = 16, kLayers = 2, kProj = 4;

// The tiny model's parameters, seeded values in [-0.5, 0.5) (norm weights around 1).
std::map<std::string, Vec> tiny_parameters() {
  model::ClipVisionConfig c;
  c.image_size = kSize;
  c.patch_size = kPatch;
  c.projection_dim = kProj;
  c.encoder = {kD, kInner, kLayers, kHeads, 1e-5f, ops::Activation::quick_gelu};
  std::map<std::string, Vec> p;
  std::uint32_t state = 12345;
  for (const model::ParamSpec& s : model::clip_vision_parameters(c)) {
    Vec v(static_cast<std::size_t>(s.shape.numel()));
    const bool norm_weight = s.name.find("norm") != std::string::npos && s.name.find(".weight") != std::string::npos;
    for (float& x : v) {
      state = state * 1664525u + 1013904223u;
      x = static_cast<float>(state >> 8) / 16777216.f - 0.5f + (norm_weight ? 1.f : 0.f);
    }
    p[s.name] = v;
  }
  return p;
}

std::string write_tiny_model(const std::map<std::string, Vec>& p, bool nested) {
  const fs::path dir = fs::temp_directory_path() / ("vinf-clip-vision-" + std::to_string(nested));
  fs::create_directories(dir);
  const std::string vision = "{\"image_size\": 8, \"patch_size\": 4, \"hidden_size\": 8, \"intermediate_size\": 16, "
                             "\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"hidden_act\": \"quick_gelu\", "
                             "\"layer_norm_eps\": 1e-05";
  std::ofstream(dir / "config.json") << (nested ? "{\"projection_dim\": 4, \"vision_config\": " + vision + "}}"
                                                : vision + ", \"projection_dim\": 4}");
  model::ClipVisionConfig c = model::load_clip_vision_config((dir / "config.json").string());
  std::vector<io::TensorToWrite> tensors;
  for (const model::ParamSpec& s : model::clip_vision_parameters(c))
    tensors.push_back({s.name, DType::f32, s.shape, p.at(s.name).data(), {}});
  io::write_safetensors((dir / "model.safetensors").string(), tensors, {});
  return dir.string();
}

Vec layer_norm(const Vec& x, const Vec& g, const Vec& b) {
  double mean = 0, var = 0;
  for (float v : x) mean += v;
  mean /= static_cast<double>(x.size());
  for (float v : x) var += (v - mean) * (v - mean);
  var /= static_cast<double>(x.size());
  Vec y(x.size());
  for (std::size_t i = 0; i < x.size(); ++i)
    y[i] = static_cast<float>((x[i] - mean) / std::sqrt(var + 1e-5) * g[i] + b[i]);
  return y;
}

// y = W x (+ b), W [out, in].
Vec linear(const Vec& x, const Vec& w, const Vec* b, std::size_t out) {
  Vec y(out);
  for (std::size_t o = 0; o < out; ++o) {
    double s = b ? (*b)[o] : 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) s += static_cast<double>(w[o * x.size() + i]) * x[i];
    y[o] = static_cast<float>(s);
  }
  return y;
}

// The embedding of one preprocessed image (3, 8, 8), written out step by step.
Vec naive_embedding(std::map<std::string, Vec>& p, const Vec& image) {
  const int g = kSize / kPatch, tokens = g * g + 1, dh = kD / kHeads;
  std::vector<Vec> h(tokens, Vec(kD));
  h[0] = p["vision_model.embeddings.class_embedding"];
  const Vec& conv = p["vision_model.embeddings.patch_embedding.weight"];
  for (int t = 1; t < tokens; ++t)
    for (int o = 0; o < kD; ++o) {
      double s = 0;
      const int py = (t - 1) / g, px = (t - 1) % g;
      for (int c = 0; c < 3; ++c)
        for (int i = 0; i < kPatch; ++i)
          for (int j = 0; j < kPatch; ++j)
            s += conv[((o * 3 + c) * kPatch + i) * kPatch + j] * image[(c * kSize + py * kPatch + i) * kSize + px * kPatch + j];
      h[t][o] = static_cast<float>(s);
    }
  for (int t = 0; t < tokens; ++t) {
    for (int o = 0; o < kD; ++o) h[t][o] += p["vision_model.embeddings.position_embedding.weight"][t * kD + o];
    h[t] = layer_norm(h[t], p["vision_model.pre_layrnorm.weight"], p["vision_model.pre_layrnorm.bias"]);
  }
  for (int l = 0; l < kLayers; ++l) {
    const std::string L = "vision_model.encoder.layers." + std::to_string(l) + ".";
    auto W = [&](const std::string& n) -> Vec& { return p[L + n]; };
    std::vector<Vec> q(tokens), k(tokens), v(tokens);
    for (int t = 0; t < tokens; ++t) {
      const Vec a = layer_norm(h[t], W("layer_norm1.weight"), W("layer_norm1.bias"));
      q[t] = linear(a, W("self_attn.q_proj.weight"), &W("self_attn.q_proj.bias"), kD);
      k[t] = linear(a, W("self_attn.k_proj.weight"), &W("self_attn.k_proj.bias"), kD);
      v[t] = linear(a, W("self_attn.v_proj.weight"), &W("self_attn.v_proj.bias"), kD);
    }
    std::vector<Vec> attn(tokens, Vec(kD, 0.f));
    for (int hd = 0; hd < kHeads; ++hd)
      for (int i = 0; i < tokens; ++i) {
        std::vector<double> score(tokens);
        double top = -1e30, total = 0;
        for (int j = 0; j < tokens; ++j) {
          double s = 0;
          for (int e = 0; e < dh; ++e) s += q[i][hd * dh + e] * k[j][hd * dh + e];
          score[j] = s / std::sqrt(static_cast<double>(dh));
          top = std::max(top, score[j]);
        }
        for (double& s : score) total += (s = std::exp(s - top));
        for (int j = 0; j < tokens; ++j)
          for (int e = 0; e < dh; ++e) attn[i][hd * dh + e] += static_cast<float>(score[j] / total * v[j][hd * dh + e]);
      }
    for (int t = 0; t < tokens; ++t) {
      const Vec o = linear(attn[t], W("self_attn.out_proj.weight"), &W("self_attn.out_proj.bias"), kD);
      for (int e = 0; e < kD; ++e) h[t][e] += o[e];
      Vec m = linear(layer_norm(h[t], W("layer_norm2.weight"), W("layer_norm2.bias")), W("mlp.fc1.weight"),
                     &W("mlp.fc1.bias"), kInner);
      for (float& x : m) x = x / (1 + std::exp(-1.702f * x));  // quick_gelu
      const Vec r = linear(m, W("mlp.fc2.weight"), &W("mlp.fc2.bias"), kD);
      for (int e = 0; e < kD; ++e) h[t][e] += r[e];
    }
  }
  const Vec pooled = layer_norm(h[0], p["vision_model.post_layernorm.weight"], p["vision_model.post_layernorm.bias"]);
  return linear(pooled, p["visual_projection.weight"], nullptr, kProj);
}

}  // namespace

TEST_CASE("CLIP vision: the embedding equals a naive computation, identical frames are similar by 1") {
  std::map<std::string, Vec> p = tiny_parameters();
  for (bool nested : {false, true}) {
    const std::string dir = write_tiny_model(p, nested);
    Runtime rt(Device::cpu());
    const model::ClipVisionModel m = model::ClipVisionModel::load(dir, rt);
    // A frame already 8 x 8: preprocessing only normalizes (bicubic at scale 1 is the identity).
    std::vector<std::uint8_t> rgb(kSize * kSize * 3);
    for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>((i * 37 + 11) % 256);
    const Vec x = model::clip_preprocess(rgb.data(), kSize, kSize, kSize);
    CHECK(x[0] == doctest::Approx((rgb[0] / 255.f - 0.48145466f) / 0.26862954f));
    CHECK(x[kSize * kSize + 1] == doctest::Approx((rgb[4] / 255.f - 0.4578275f) / 0.26130258f));
    Vec two = x;
    two.insert(two.end(), x.begin(), x.end());
    Vec out(2 * kProj);
    m.embed(rt.ctx(), Tensor::wrap(two.data(), DType::f32, Device::cpu(), {2, 3, kSize, kSize}),
            Tensor::wrap(out.data(), DType::f32, Device::cpu(), {2, kProj}));
    rt.synchronize();
    const Vec ref = naive_embedding(p, x);
    for (int i = 0; i < kProj; ++i) CHECK(std::fabs(out[i] - ref[i]) < 1e-4);
    CHECK(std::fabs(model::cosine_similarity(out.data(), out.data() + kProj, kProj) - 1.0) < 1e-6);
    fs::remove_all(dir);
  }
}

TEST_CASE("CLIP vision: preprocessing resizes the shorter side and crops the centre") {
  // 32 x 16 of one colour stays that colour; a left/right split keeps its halves after the crop.
  std::vector<std::uint8_t> rgb(32 * 16 * 3, 200);
  const Vec x = model::clip_preprocess(rgb.data(), 32, 16, 8);
  REQUIRE(x.size() == 3 * 8 * 8);
  for (int i = 0; i < 64; ++i) CHECK(x[i] == doctest::Approx((200 / 255.f - 0.48145466f) / 0.26862954f));
}

TEST_CASE("CLIP vision: a directory without model.safetensors or with a key missing is refused by name") {
  const fs::path dir = fs::temp_directory_path() / "vinf-clip-vision-bad";
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << "{\"image_size\": 8, \"patch_size\": 4, \"hidden_size\": 8, "
                                        "\"intermediate_size\": 16, \"num_hidden_layers\": 1, \"num_attention_heads\": 2}";
  Runtime rt(Device::cpu());
  CHECK_THROWS_WITH_AS(model::ClipVisionModel::load(dir.string(), rt), doctest::Contains("has no model.safetensors"),
                       InputError);
  const Vec one(8, 1.f);
  io::write_safetensors((dir / "model.safetensors").string(),
                        {{"vision_model.embeddings.class_embedding", DType::f32, {8}, one.data(), {}}}, {});
  CHECK_THROWS_WITH_AS(model::ClipVisionModel::load(dir.string(), rt),
                       doctest::Contains("vision_model.embeddings.patch_embedding.weight"), InputError);
  fs::remove_all(dir);
}
