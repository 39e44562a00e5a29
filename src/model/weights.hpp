// A model directory's weights: diffusers' config.json next to diffusion_pytorch_model.safetensors
// or shards listed in diffusion_pytorch_model.safetensors.index.json. The files are memory-mapped,
// checked against the parameter list the config implies (missing, unexpected, shape, dtype) and
// copied to the device in the compute dtype, all parameters in one allocation.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"
#include "ops/context.hpp"

namespace vinf {
class Runtime;
}

namespace vinf::model {

// The files of one diffusers model directory. `dir` may also be a pipeline root with the model
// in a `unet/` subfolder.
struct ModelFiles {
  std::string dir;           // the folder that holds config.json
  std::string config;        // its path
  std::vector<std::string> weights;  // one file, or the shards of the index
  std::string index;         // the index JSON, when sharded
};
ModelFiles find_model_files(const std::string& dir);
// A transformers text encoder directory (config.json + model.safetensors), or a pipeline root with
// text_encoder/; InputError naming what is missing (a PyTorch .bin is pointed at INSTALL.md).
ModelFiles find_text_encoder_files(const std::string& dir);
// "fnv1a64:<hex>" over config.json and every weight file's safetensors header (names, dtypes,
// shapes, offsets): it changes when the model does, without reading gigabytes of weights.
std::string model_fingerprint(const ModelFiles& files);

// Every tensor of the weight files by name, with the file it lives in.
class WeightFiles {
 public:
  explicit WeightFiles(const ModelFiles& files);
  struct Found {
    const io::SafetensorsFile* file;
    const io::SafetensorsFile::Entry* entry;
  };
  const Found* find(const std::string& name) const;
  const std::map<std::string, Found>& all() const { return by_name_; }
  const ModelFiles& files() const { return files_; }

 private:
  ModelFiles files_;
  std::vector<std::unique_ptr<io::SafetensorsFile>> open_;
  std::map<std::string, Found> by_name_;
};

// Checks the files against `params`: throws vinf::InputError naming the file and the key for a
// missing parameter, a shape mismatch or a dtype that is not F32/F16/BF16, and for keys the model
// does not have unless allow_unexpected (then they are reported through warnings).
void check_weights(const WeightFiles& files, const std::vector<ParamSpec>& params, bool allow_unexpected,
                   std::vector<std::string>* warnings);

// --dtype bf16 on the CPU is mixed: the weights of the matrix products and convolutions (every
// parameter of rank 2 or more: the UNet's and the VAE's have no other kind) are stored in bf16,
// everything else (norms, biases) and the activations in f32. Elsewhere one dtype holds it all.
DType activation_dtype(DType dtype, const Device& device);
DType parameter_dtype(const Shape& shape, DType dtype, const Device& device);
// "bf16", or on the CPU "bf16 weights, f32 activations", for the logs.
std::string precision_name(DType dtype, const Device& device);

class Weights {
 public:
  Weights() = default;
  // Checks, then copies every parameter to rt's device as `dtype`. With a tensor shard of size
  // T > 1, the split parameters hold only the rank's part (param_shard), read from the mapped
  // files as slices.
  Weights(const WeightFiles& files, const std::vector<ParamSpec>& params, Runtime& rt, DType dtype,
          bool allow_unexpected, std::vector<std::string>* warnings, TensorShard shard = {});

  // Random parameters drawn on rt's device as make-model draws them, for benchmarks of shapes
  // whose weights are not on disk; a shard holds its part of the same numbers.
  static Weights random(const std::vector<ParamSpec>& params, Runtime& rt, DType dtype, std::uint64_t seed,
                        TensorShard shard = {});

  const Tensor& get(const std::string& name) const;
  const Tensor* find(const std::string& name) const;
  std::size_t bytes() const { return bytes_; }
  // The bytes of the parameters tensor parallelism splits (ParamSplit), as this shard holds them.
  std::size_t split_bytes() const { return split_bytes_; }
  std::int64_t count() const { return count_; }
  // The activations' dtype (activation_dtype of the dtype asked for).
  DType dtype() const { return dtype_; }
  const TensorShard& shard() const { return shard_; }

 private:
  // One allocation for all of `params` (the shard's parts), 256-byte aligned views.
  void allocate(const std::vector<ParamSpec>& params, Runtime& rt, DType dtype);
  // The shard's part of p from `full` (p's whole tensor, any device) into its place.
  void load(ExecContext& ctx, const ParamSpec& p, const Tensor& full);

  Allocation memory_;
  std::map<std::string, Tensor> tensors_;
  std::size_t bytes_ = 0, split_bytes_ = 0;
  std::int64_t count_ = 0;
  DType dtype_ = DType::f32;
  TensorShard shard_;
};

}  // namespace vinf::model
