#include "model/presets.hpp"

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "io/safetensors.hpp"
#include "model/clip_text.hpp"
#include "model/params.hpp"
#include "model/tokenizer.hpp"
#include "model/vae.hpp"
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

void write_random_weights(const std::vector<ParamSpec>& params, std::uint64_t seed, DType dtype, const std::string& path,
                          const std::function<void(std::size_t, std::size_t)>& progress) {
  VINF_INPUT_CHECK(dtype == DType::f32 || dtype == DType::f16 || dtype == DType::bf16,
                   "make-model writes f32, f16 or bf16 weights, not ", dtype_name(dtype));
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
  io::write_safetensors(path, tensors, {{"format", "pt"}, {"generator", "vinf make-model"}, {"seed", std::to_string(seed)}});
}

namespace {

void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VINF_INPUT_CHECK(!ec, "cannot create the model directory ", dir, ": ", ec.message());
}

}  // namespace

void write_random_model(const UNetConfig& c, std::uint64_t seed, DType dtype, const std::string& dir,
                        const std::function<void(std::size_t, std::size_t)>& progress) {
  make_directory(dir);
  // The weights first: a directory with a config.json is a model, so the config comes last.
  write_random_weights(unet_parameters(c), seed, dtype, dir + "/diffusion_pytorch_model.safetensors", progress);
  io::write_file_atomically(dir + "/config.json", unet_config_json(c));
}

ClipTextConfig pipeline_text_config(const std::string& preset) {
  return preset == "vc2" ? ClipTextConfig{} : clip_text_preset(preset_config(preset).cross_attention_dim);
}

void write_random_pipeline(const std::string& preset, std::uint64_t seed, DType dtype, const std::string& dir,
                           const std::function<void(std::size_t, std::size_t)>& progress) {
  const UNetConfig unet = preset_config(preset);
  const VaeConfig vae = vae_preset(preset);
  const ClipTextConfig text = pipeline_text_config(preset);
  make_directory(dir);
  write_random_model(unet, seed, dtype, dir + "/unet", progress);
  make_directory(dir + "/vae");
  // The decoder first, then the encoder (prepare-data's): each parameter's numbers depend on its
  // place in the list, so the decoder's are those of a file without the encoder.
  std::vector<ParamSpec> vae_params = vae_decoder_parameters(vae);
  for (ParamSpec& p : vae_encoder_parameters(vae)) vae_params.push_back(std::move(p));
  write_random_weights(vae_params, vae_seed(seed), dtype, dir + "/vae/diffusion_pytorch_model.safetensors");
  io::write_file_atomically(dir + "/vae/config.json", vae_config_json(vae));
  make_directory(dir + "/text_encoder");
  write_random_weights(clip_text_parameters(text), text_encoder_seed(seed), dtype, dir + "/text_encoder/model.safetensors");
  io::write_file_atomically(dir + "/text_encoder/config.json", clip_text_config_json(text));
  ClipTokenizer::byte_level().save(dir + "/tokenizer");
  io::write_file_atomically(dir + "/model_index.json",
                            "{\n  \"_class_name\": \"TextToVideoSDPipeline\",\n"
                            "  \"_vinf\": \"random weights, vinf make-model --preset " + preset + " --seed " +
                                std::to_string(seed) + "\",\n"
                            "  \"text_encoder\": [\"transformers\", \"CLIPTextModel\"],\n"
                            "  \"tokenizer\": [\"transformers\", \"CLIPTokenizer\"],\n"
                            "  \"unet\": [\"diffusers\", \"UNet3DConditionModel\"],\n"
                            "  \"vae\": [\"diffusers\", \"AutoencoderKL\"]\n}\n");
}

}  // namespace vinf::model
