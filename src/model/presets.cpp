#include "model/presets.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "model/params.hpp"
#include "ops/elementwise.hpp"
#include "ops/random.hpp"
#include "ops/runtime.hpp"

namespace vinf::model {

const std::vector<std::string>& preset_names() {
  static const std::vector<std::string> names{"tiny", "small", "vc2"};
  return names;
}

UNetConfig preset_config(const std::string& name) {
  UNetConfig c;  // the defaults are VideoCrafter2's
  if (name == "vc2") return c;
  if (name == "small") {
    c.block_out_channels = {64, 128, 256, 256};
    c.attention_head_dim = 32;
    c.cross_attention_dim = 128;
    return c;
  }
  if (name == "tiny") {
    c.block_out_channels = {32, 64};
    c.down_cross = {true, false};
    c.up_cross = {false, true};
    c.layers_per_block = 1;
    c.attention_head_dim = 8;
    c.cross_attention_dim = 32;
    c.norm_num_groups = 8;
    c.sample_size = 8;
    return c;
  }
  VINF_INPUT_FAIL("unknown model preset '", name, "'; the presets are tiny, small and vc2");
}

DType preset_default_dtype(const std::string& name) { return name == "vc2" ? DType::f16 : DType::f32; }

void write_random_model(const UNetConfig& c, std::uint64_t seed, DType dtype, const std::string& dir,
                        const std::function<void(std::size_t, std::size_t)>& progress) {
  VINF_INPUT_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16,
                   "make-model writes f32, f16 or bf16 weights, not ", dtype_name(dtype));
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VINF_INPUT_CHECK(!ec, "cannot create the model directory ", dir, ": ", ec.message());

  const std::vector<ParamSpec> params = unet_parameters(c);
  Runtime rt(Device::cpu());
  std::vector<float> scratch;
  std::vector<io::TensorToWrite> tensors;
  std::size_t done = 0;
  for (std::size_t k = 0; k < params.size(); ++k) {
    const ParamSpec& p = params[k];
    io::TensorToWrite t;
    t.name = p.name;
    t.dtype = dtype;
    t.shape = p.shape;
    t.fill = [&, k](void* dst) {
      const ParamSpec& q = params[k];
      scratch.resize(static_cast<std::size_t>(q.shape.numel()));
      const Tensor f32 = Tensor::wrap(scratch.data(), DType::f32, Device::cpu(), q.shape);
      ops::normal(rt.ctx(), f32, seed, k, 0);
      const RandomInit init = random_init(q);
      for (float& v : scratch) v = init.shift + init.scale * v;
      ops::copy(rt.ctx(), f32, Tensor::wrap(dst, dtype, Device::cpu(), q.shape));
      ++done;
      if (progress) progress(done, params.size());
    };
    tensors.push_back(std::move(t));
  }
  // The weights first: a directory with a config.json is a model, so the config comes last.
  io::write_safetensors(dir + "/diffusion_pytorch_model.safetensors", tensors,
                        {{"format", "pt"}, {"generator", "vinf make-model"}, {"seed", std::to_string(seed)}});
  io::write_file_atomically(dir + "/config.json", unet_config_json(c));
}

}  // namespace vinf::model
