#include "model/weights.hpp"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

namespace vinf::model {

namespace fs = std::filesystem;

namespace {

constexpr const char* kWeightsName = "diffusion_pytorch_model.safetensors";
constexpr const char* kIndexName = "diffusion_pytorch_model.safetensors.index.json";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// "a, b, c and 4 more"
std::string some_names(const std::vector<std::string>& names, std::size_t shown = 5) {
  std::string s;
  for (std::size_t i = 0; i < names.size() && i < shown; ++i) {
    if (i) s += ", ";
    s += "'";
    s += names[i];
    s += "'";
  }
  if (names.size() > shown) {
    s += " and ";
    s += std::to_string(names.size() - shown);
    s += " more";
  }
  return s;
}

}  // namespace

ModelFiles find_text_encoder_files(const std::string& dir_arg) {
  fs::path dir(dir_arg);
  if (!is_file(dir / "config.json") && is_file(dir / "text_encoder" / "config.json")) dir /= "text_encoder";
  std::error_code ec;
  VINF_INPUT_CHECK(fs::is_directory(dir, ec), "text encoder directory ", dir_arg, " does not exist");
  ModelFiles files;
  files.dir = dir.string();
  files.config = (dir / "config.json").string();
  VINF_INPUT_CHECK(is_file(files.config), "text encoder directory ", files.dir, " has no config.json");
  VINF_INPUT_CHECK(is_file(dir / "model.safetensors"), "text encoder directory ", files.dir, " has no model.safetensors",
                   is_file(dir / "pytorch_model.bin")
                       ? " (it has pytorch_model.bin: convert it to safetensors first, see INSTALL.md)"
                       : "");
  files.weights = {(dir / "model.safetensors").string()};
  return files;
}

ModelFiles find_model_files(const std::string& dir_arg) {
  std::error_code ec;
  fs::path dir(dir_arg);
  VINF_INPUT_CHECK(fs::exists(dir, ec), "model directory ", dir_arg, " does not exist");
  VINF_INPUT_CHECK(fs::is_directory(dir, ec), dir_arg, " is not a directory (a model is a diffusers directory with ",
                   "config.json and ", kWeightsName, ")");
  if (!is_file(dir / "config.json") && is_file(dir / "unet" / "config.json")) dir /= "unet";
  ModelFiles m;
  m.dir = dir.string();
  m.config = (dir / "config.json").string();
  VINF_INPUT_CHECK(is_file(m.config), "model directory ", dir_arg, " has no config.json (nor unet/config.json)");
  if (is_file(dir / kWeightsName)) {
    m.weights.push_back((dir / kWeightsName).string());
    return m;
  }
  VINF_INPUT_CHECK(is_file(dir / kIndexName), "model directory ", m.dir, " has neither ", kWeightsName, " nor ",
                   kIndexName, is_file(dir / "diffusion_pytorch_model.bin")
                       ? "; it has a PyTorch .bin checkpoint, which must be converted to safetensors first"
                       : "");
  m.index = (dir / kIndexName).string();
  std::ifstream in(m.index);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    VINF_INPUT_FAIL(m.index, " is not valid JSON (", e.what(), ")");
  }
  VINF_INPUT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), m.index,
                   " has no \"weight_map\" object");
  std::set<std::string> shards;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    VINF_INPUT_CHECK(it->is_string(), m.index, ": weight_map entry '", it.key(), "' is not a file name");
    const std::string shard = it->get<std::string>();
    VINF_INPUT_CHECK(shard.find('/') == std::string::npos, m.index, ": shard name '", shard,
                     "' must be a file in the same directory");
    shards.insert(shard);
  }
  VINF_INPUT_CHECK(!shards.empty(), m.index, " lists no shards");
  for (const std::string& s : shards) {
    VINF_INPUT_CHECK(is_file(dir / s), m.index, " names shard ", s, ", which is not in ", m.dir);
    m.weights.push_back((dir / s).string());
  }
  return m;
}

WeightFiles::WeightFiles(const ModelFiles& files) : files_(files) {
  for (const std::string& path : files.weights) {
    open_.push_back(std::make_unique<io::SafetensorsFile>(path));
    const io::SafetensorsFile& f = *open_.back();
    for (const auto& e : f.entries()) {
      const auto [it, inserted] = by_name_.emplace(e.name, Found{&f, &e});
      VINF_INPUT_CHECK(inserted, "tensor '", e.name, "' appears in both ", it->second.file->path(), " and ", path);
    }
  }
}

const WeightFiles::Found* WeightFiles::find(const std::string& name) const {
  const auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : &it->second;
}

namespace {

// The stored tensor for p (its own name or an alias), or null.
const WeightFiles::Found* find_param(const WeightFiles& files, const ParamSpec& p, std::string* found_name = nullptr) {
  if (const auto* f = files.find(p.name)) {
    if (found_name) *found_name = p.name;
    return f;
  }
  for (const std::string& a : p.aliases)
    if (const auto* f = files.find(a)) {
      if (found_name) *found_name = a;
      return f;
    }
  return nullptr;
}

bool fits(const Shape& stored, const Shape& want) {
  return stored == want || (want.rank() == 2 && stored.rank() == 4 && stored[0] == want[0] && stored[1] == want[1] &&
                            stored[2] == 1 && stored[3] == 1);
}

}  // namespace

void check_weights(const WeightFiles& files, const std::vector<ParamSpec>& params, bool allow_unexpected,
                   std::vector<std::string>* warnings) {
  const std::string where = files.files().index.empty() ? files.files().weights.front() : files.files().index;
  std::vector<std::string> missing;
  std::set<std::string> expected;
  for (const ParamSpec& p : params) {
    std::string name;
    const WeightFiles::Found* f = find_param(files, p, &name);
    if (!f) {
      missing.push_back(p.name);
      continue;
    }
    expected.insert(name);
    const auto& e = *f->entry;
    VINF_INPUT_CHECK(e.dtype == DType::f32 || e.dtype == DType::f16 || e.dtype == DType::bf16, f->file->path(),
                     ": tensor '", name, "' has dtype ", io::safetensors_dtype_name(e.dtype),
                     "; model weights must be F32, F16 or BF16");
    VINF_INPUT_CHECK(fits(e.shape, p.shape), f->file->path(), ": tensor '", name, "' has shape ", e.shape.str(),
                     " but the config (", files.files().config, ") implies ", p.shape.str(),
                     "; are the config and the weights from the same model?");
  }
  VINF_INPUT_CHECK(missing.empty(), where, ": ", missing.size(), " parameter(s) the config needs are missing: ",
                   some_names(missing), " (is ", files.files().config, " the config of these weights?)");
  std::vector<std::string> unexpected;
  for (const auto& [name, f] : files.all())
    if (!expected.count(name)) unexpected.push_back(name);
  if (unexpected.empty()) return;
  VINF_INPUT_CHECK(allow_unexpected, where, ": ", unexpected.size(), " tensor(s) are not parameters of the model in ",
                   files.files().config, ": ", some_names(unexpected),
                   "; check the config, or pass --ignore-unexpected-weights to load anyway");
  if (warnings)
    warnings->push_back(where + ": ignored " + std::to_string(unexpected.size()) +
                        " tensor(s) that are not model parameters: " + some_names(unexpected));
}


DType activation_dtype(DType dtype, const Device& device) {
  return device.is_cpu() && dtype == DType::bf16 ? DType::f32 : dtype;
}

DType parameter_dtype(const Shape& shape, DType dtype, const Device& device) {
  return device.is_cpu() && dtype == DType::bf16 && shape.rank() < 2 ? DType::f32 : dtype;
}

std::string precision_name(DType dtype, const Device& device) {
  if (activation_dtype(dtype, device) == dtype) return dtype_name(dtype);
  return std::string(dtype_name(dtype)) + " weights, " + dtype_name(activation_dtype(dtype, device)) + " activations";
}

Weights::Weights(const WeightFiles& files, const std::vector<ParamSpec>& params, Runtime& rt, DType dtype,
                 bool allow_unexpected, std::vector<std::string>* warnings, TensorShard shard)
    : dtype_(activation_dtype(dtype, rt.device())), shard_(shard) {
  check_weights(files, params, allow_unexpected, warnings);
  allocate(params, rt, dtype);
  for (const ParamSpec& p : params) {
    std::string name;
    const WeightFiles::Found* f = find_param(files, p, &name);
    const Tensor source = f->file->tensor(name);  // refused there if it holds a NaN or infinity
    load(rt.ctx(), p, source.reshape(p.shape));
  }
  rt.synchronize();
}

void Weights::load(ExecContext& ctx, const ParamSpec& p, const Tensor& full) {
  const ParamShard part = param_shard(p, shard_.rank, shard_.size);
  const Tensor& into = tensors_.at(p.name);
  if (part.dim < 0) {
    ops::copy(ctx, full, into);
    return;
  }
  std::int64_t at = 0;
  for (const auto& [first, count] : part.ranges) {
    ops::copy(ctx, full.slice(part.dim, first, count), into.slice(part.dim, at, count));
    at += count;
  }
}

void Weights::allocate(const std::vector<ParamSpec>& params, Runtime& rt, DType dtype) {
  constexpr std::size_t kAlign = 256;
  std::vector<std::size_t> offsets;
  std::vector<Shape> shapes;
  for (const ParamSpec& p : params) {
    shapes.push_back(param_shard(p, shard_.rank, shard_.size).shape);
    offsets.push_back(bytes_);
    const std::size_t size =
        static_cast<std::size_t>(shapes.back().numel()) * dtype_size(parameter_dtype(p.shape, dtype, rt.device()));
    bytes_ += (size + kAlign - 1) / kAlign * kAlign;
    if (p.split.kind != ParamSplit::none) split_bytes_ += size;
    count_ += shapes.back().numel();
  }
  memory_ = rt.arena().allocate(bytes_);
  for (std::size_t i = 0; i < params.size(); ++i)
    tensors_.emplace(params[i].name, Tensor::wrap(static_cast<char*>(memory_.data()) + offsets[i],
                                                  parameter_dtype(params[i].shape, dtype, rt.device()), rt.device(),
                                                  shapes[i]));
}

std::string model_fingerprint(const ModelFiles& files) {
  std::uint64_t h = 0xcbf29ce484222325ull;
  auto mix = [&](const std::string& bytes) {
    for (unsigned char ch : bytes) {
      h ^= ch;
      h *= 0x100000001b3ull;
    }
  };
  auto read_prefix = [](const std::string& path, std::size_t n) {
    std::ifstream in(path, std::ios::binary);
    VINF_INPUT_CHECK(in.good(), "cannot read ", path);
    std::string bytes(n, '\0');
    in.read(bytes.data(), static_cast<std::streamsize>(n));
    bytes.resize(static_cast<std::size_t>(in.gcount()));
    return bytes;
  };
  mix(read_prefix(files.config, 1 << 20));
  for (const std::string& w : files.weights) {
    const std::string len = read_prefix(w, 8);
    VINF_INPUT_CHECK(len.size() == 8, w, " is too short to be a safetensors file");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(len[static_cast<std::size_t>(i)]);
    VINF_INPUT_CHECK(n < (100u << 20), w, ": a safetensors header of ", n, " bytes is not plausible");
    mix(read_prefix(w, 8 + static_cast<std::size_t>(n)));
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "fnv1a64:%016llx", static_cast<unsigned long long>(h));
  return buf;
}

Weights Weights::random(const std::vector<ParamSpec>& params, Runtime& rt, DType dtype, std::uint64_t seed,
                        TensorShard shard) {
  Weights w;
  w.dtype_ = activation_dtype(dtype, rt.device());
  w.shard_ = shard;
  w.allocate(params, rt, dtype);
  OwnedTensor shift = rt.arena().empty(DType::f32, {1});
  for (std::size_t k = 0; k < params.size(); ++k) {
    const ParamSpec& p = params[k];
    OwnedTensor v = rt.arena().empty(DType::f32, p.shape);
    ops::normal(rt.ctx(), v, seed, k, 0);
    const RandomInit init = random_init(p);
    ops::fill(rt.ctx(), shift, init.shift);
    Shape ones;
    for (int d = 0; d < p.shape.rank(); ++d) ones.push_back(1);
    ops::axpby(rt.ctx(), init.scale, v, 1.f, shift.view().reshape(ones).expand(p.shape), v);
    w.load(rt.ctx(), p, v);
  }
  rt.synchronize();
  return w;
}

const Tensor* Weights::find(const std::string& name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor& Weights::get(const std::string& name) const {
  const Tensor* t = find(name);
  VINF_CHECK(t != nullptr, "the model has no parameter '", name, "'");
  return *t;
}

}  // namespace vinf::model
