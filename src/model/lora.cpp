#include "model/lora.hpp"

#include <cmath>
#include <map>

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "ops/elementwise.hpp"
#include "ops/gemm.hpp"
#include "ops/random.hpp"

namespace vinf::model {
namespace {

constexpr const char* kFilePrefix = "unet.";

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "x.attn1.to_q.weight" -> "x.attn1.to_q".
std::string module_of(const std::string& weight) { return weight.substr(0, weight.size() - 7); }

}  // namespace

std::vector<ParamSpec> lora_targets(const std::vector<ParamSpec>& params) {
  std::vector<ParamSpec> out;
  for (const auto& p : params) {
    const bool attention = p.name.find(".attn1.") != std::string::npos || p.name.find(".attn2.") != std::string::npos;
    if (!attention || p.shape.rank() != 2) continue;
    for (const char* proj : {".to_q.weight", ".to_k.weight", ".to_v.weight", ".to_out.0.weight"})
      if (ends_with(p.name, proj)) out.push_back(p);
  }
  return out;
}

void LoraAdapters::allocate(Arena& arena) {
  std::int64_t total = 0;
  for (const auto& [name, shape] : specs_) total += shape.numel();
  memory_ = arena.empty(DType::f32, {total});
  std::int64_t at = 0;
  for (const auto& [name, shape] : specs_) {
    tensors_.push_back(memory_.slice(0, at, shape.numel()).reshape(shape));
    at += shape.numel();
  }
}

LoraAdapters::LoraAdapters(Arena& arena, ExecContext& ctx, const std::vector<ParamSpec>& params, int rank, float alpha,
                           std::uint64_t seed)
    : rank_(rank), alpha_(alpha) {
  VINF_INPUT_CHECK(rank >= 1, "--train.lora: the rank must be >= 1, got ", rank);
  VINF_INPUT_CHECK(alpha > 0 && std::isfinite(alpha), "--train.lora-alpha must be positive, got ", alpha);
  const auto targets = lora_targets(params);
  VINF_INPUT_CHECK(!targets.empty(), "the model has no attention projection for LoRA to adapt");
  for (const auto& t : targets) {
    const std::string m = module_of(t.name);
    specs_.emplace_back(m + ".lora_A.weight", Shape{rank, t.shape[1]});
    specs_.emplace_back(m + ".lora_B.weight", Shape{t.shape[0], rank});
  }
  allocate(arena);
  for (std::size_t i = 0; i < tensors_.size(); i += 2) {
    ops::normal(ctx, tensors_[i], seed, i / 2, 0);
    ops::scale(ctx, tensors_[i], 1.f / std::sqrt(static_cast<float>(tensors_[i].size(1))), tensors_[i]);
    ops::fill(ctx, tensors_[i + 1], 0.0);
  }
}

LoraAdapters LoraAdapters::load(Arena& arena, ExecContext& ctx, const std::string& path,
                                const std::vector<ParamSpec>& params) {
  const io::SafetensorsFile f(path);
  std::map<std::string, Shape> targets;
  for (const auto& t : lora_targets(params)) targets[module_of(t.name)] = t.shape;
  LoraAdapters a;
  std::map<std::string, std::pair<const io::SafetensorsFile::Entry*, const io::SafetensorsFile::Entry*>> found;
  for (const auto& e : f.entries()) {
    std::string name = e.name;
    if (name.rfind(kFilePrefix, 0) == 0) name = name.substr(5);
    const bool is_a = ends_with(name, ".lora_A.weight"), is_b = ends_with(name, ".lora_B.weight");
    VINF_INPUT_CHECK(is_a || is_b, path, ": '", e.name, "' is not a LoRA tensor (<module>.lora_A.weight or ",
                     "<module>.lora_B.weight, as diffusers writes them)");
    const std::string module = name.substr(0, name.size() - 14);
    VINF_INPUT_CHECK(targets.count(module), path, ": '", e.name, "' adapts ", module,
                     ", which is not an attention projection of this model (a LoRA of another model?)");
    (is_a ? found[module].first : found[module].second) = &e;
  }
  VINF_INPUT_CHECK(!found.empty(), path, " holds no LoRA tensor");
  for (const auto& [module, pair] : found) {
    const auto [ea, eb] = pair;
    VINF_INPUT_CHECK(ea && eb, path, ": ", module, " has only its lora_", ea ? "A" : "B", " tensor");
    const Shape& w = targets.at(module);
    const std::int64_t r = ea->shape.rank() == 2 ? ea->shape[0] : -1;
    VINF_INPUT_CHECK(ea->shape.rank() == 2 && eb->shape.rank() == 2 && ea->shape[1] == w[1] && eb->shape[0] == w[0] &&
                         eb->shape[1] == r && r >= 1,
                     path, ": ", module, "'s lora_A ", ea->shape.str(), " and lora_B ", eb->shape.str(),
                     " do not adapt its weight ", w.str(), " (A [rank, ", w[1], "], B [", w[0], ", rank])");
    VINF_INPUT_CHECK(a.rank_ == 0 || a.rank_ == r, path, ": ", module, " has rank ", r, ", others ", a.rank_);
    a.rank_ = static_cast<int>(r);
    a.specs_.emplace_back(module + ".lora_A.weight", ea->shape);
    a.specs_.emplace_back(module + ".lora_B.weight", eb->shape);
  }
  a.alpha_ = static_cast<float>(a.rank_);
  if (const auto it = f.metadata().find("lora_alpha"); it != f.metadata().end()) {
    char* end = nullptr;
    const double v = std::strtod(it->second.c_str(), &end);
    VINF_INPUT_CHECK(end != it->second.c_str() && *end == '\0' && v > 0 && std::isfinite(v), path,
                     ": metadata lora_alpha '", it->second, "' is not a positive number");
    a.alpha_ = static_cast<float>(v);
  }
  a.allocate(arena);
  for (std::size_t i = 0; i < a.specs_.size(); i += 2) {
    const std::string module = a.specs_[i].first.substr(0, a.specs_[i].first.size() - 14);
    const auto [ea, eb] = found.at(module);
    ops::copy(ctx, f.tensor(ea->name), a.tensors_[i]);
    ops::copy(ctx, f.tensor(eb->name), a.tensors_[i + 1]);
  }
  return a;
}

const Tensor* LoraAdapters::find(const std::string& name) const {
  for (std::size_t i = 0; i < specs_.size(); ++i)
    if (specs_[i].first == name) return &tensors_[i];
  return nullptr;
}

void LoraAdapters::save(ExecContext& ctx, const std::string& path) const {
  std::vector<float> host(static_cast<std::size_t>(memory_.numel()));
  ops::copy(ctx, memory_, Tensor::wrap(host.data(), DType::f32, Device::cpu(), memory_.shape));
  std::vector<io::TensorToWrite> out;
  std::int64_t at = 0;
  for (const auto& [name, shape] : specs_) {
    out.push_back({kFilePrefix + name, DType::f32, shape, host.data() + at, {}});
    at += shape.numel();
  }
  char alpha[32];
  std::snprintf(alpha, sizeof alpha, "%.9g", static_cast<double>(alpha_));
  io::write_safetensors(path, out,
                        {{"format", "pt"},
                         {"lora_rank", std::to_string(rank_)},
                         {"lora_alpha", alpha},
                         {"target_modules", "to_q,to_k,to_v,to_out.0"},
                         {"generator", std::string("vinf ") + VINF_VERSION + " train"}});
}

void LoraAdapters::merge_into(ExecContext& ctx, const Weights& weights, float s) const {
  for (std::size_t i = 0; i < specs_.size(); i += 2) {
    const std::string module = specs_[i].first.substr(0, specs_[i].first.size() - 14);
    const Tensor& w = weights.get(module + ".weight");
    const Tensor& a = tensors_[i];
    const Tensor& b = tensors_[i + 1];
    // W (in its own dtype) through f32: W32 = W + s B A, then back.
    OwnedTensor w32 = ctx.arena->empty(DType::f32, w.shape);
    ops::copy(ctx, w, w32);
    ops::bmm(ctx, b.unsqueeze(0), a.unsqueeze(0), w32.unsqueeze(0), s, 1.f);
    ops::copy(ctx, w32, w);
  }
}

}  // namespace vinf::model
