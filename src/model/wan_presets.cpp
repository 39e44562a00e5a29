#include "model/wan_presets.hpp"

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "io/atomic_file.hpp"
#include "model/presets.hpp"
#include "model/t5_tokenizer_train.hpp"

namespace vinf::model {

namespace {

void make_directory(const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  VINF_INPUT_CHECK(!ec, "cannot create the model directory ", dir, ": ", ec.message());
}

}  // namespace

WanPipelinePreset wan_pipeline_preset(const std::string& name) {
  WanPipelinePreset p;
  p.name = name;
  p.transformer = wan_transformer_preset(name);  // refuses an unknown name
  const bool tiny = name.size() > 5 && name.compare(name.size() - 5, 5, "-tiny") == 0;
  p.image = p.transformer.image_conditioned();
  if (p.image) {
    ClipVisionConfig& c = p.image_encoder;
    c.encoder.act = ops::Activation::gelu;
    if (tiny) {
      c.image_size = 16;
      c.patch_size = 1;
      c.projection_dim = 24;
      c.encoder.hidden_size = 24;
      c.encoder.intermediate_size = 48;
      c.encoder.layers = 2;
      c.encoder.heads = 2;
    } else {  // ViT-H/14
      c.image_size = 224;
      c.patch_size = 14;
      c.projection_dim = 1024;
      c.encoder.hidden_size = 1280;
      c.encoder.intermediate_size = 5120;
      c.encoder.layers = 32;
      c.encoder.heads = 16;
    }
    p.image_processor.shortest_edge = p.image_processor.crop_height = p.image_processor.crop_width = c.image_size;
    VINF_CHECK(c.encoder.hidden_size == p.transformer.image_dim, "wan_pipeline_preset ", name,
               ": the CLIP tower does not fit the transformer");
  }
  p.vae = wan_vae_preset(tiny ? "wan-tiny" : "wan2.1");
  p.text_encoder = umt5_preset(tiny ? "wan-tiny" : "umt5-xxl");
  // The tiny encoder's 800 ids leave room; the big ones take all the built-in text supports.
  p.tokenizer_pieces = tiny ? 512 : kBuiltinSpieceMaxVocab;
  if (p.transformer.skyreels) p.flow_shift = 8.0;  // SkyReels-V2's diffusion forcing
  VINF_CHECK(p.tokenizer_pieces <= p.text_encoder.vocab_size && p.transformer.text_dim == p.text_encoder.d_model,
             "wan_pipeline_preset ", name, ": the parts do not fit together");
  return p;
}

std::vector<WanPipelineWeights> wan_pipeline_weights(const WanPipelinePreset& p, std::uint64_t seed, DType dtype) {
  std::vector<WanPipelineWeights> w;
  w.push_back({"transformer", "transformer/diffusion_pytorch_model.safetensors",
               wan_transformer_parameters(p.transformer), dtype, seed});
  std::vector<ParamSpec> vae = wan_vae_parameters(p.vae);
  // The mid blocks' attention projections are 1x1 convolutions in diffusers' files.
  for (ParamSpec& q : vae)
    if (q.shape.rank() == 2) q.shape = Shape{q.shape[0], q.shape[1], 1, 1};
  w.push_back({"vae", "vae/diffusion_pytorch_model.safetensors", std::move(vae), DType::f32, vae_seed(seed)});
  w.push_back({"text_encoder", "text_encoder/model.safetensors", umt5_encoder_parameters(p.text_encoder), dtype,
               text_encoder_seed(seed)});
  if (p.image)
    w.push_back({"image_encoder", "image_encoder/model.safetensors", clip_vision_parameters(p.image_encoder, false),
                 dtype, image_encoder_seed(seed)});
  return w;
}

void write_random_wan_transformer(const WanTransformerConfig& c, std::uint64_t seed, DType dtype,
                                  const std::string& dir,
                                  const std::function<void(std::size_t, std::size_t)>& progress) {
  make_directory(dir);
  write_random_weights(wan_transformer_parameters(c), seed, dtype, dir + "/diffusion_pytorch_model.safetensors",
                       progress);
  io::write_file_atomically(dir + "/config.json", wan_transformer_config_json(c));
}

std::string wan_unipc_scheduler_config_json(double flow_shift) {
  const std::string shift = nlohmann::json(flow_shift).dump();  // 3.0, not 3
  return std::string(
             "{\n"
             "  \"_class_name\": \"UniPCMultistepScheduler\",\n"
             "  \"_diffusers_version\": \"0.33.1\",\n"
             "  \"beta_end\": 0.02,\n"
             "  \"beta_schedule\": \"linear\",\n"
             "  \"beta_start\": 0.0001,\n"
             "  \"disable_corrector\": [],\n"
             "  \"dynamic_thresholding_ratio\": 0.995,\n"
             "  \"final_sigmas_type\": \"zero\",\n"
             "  \"flow_shift\": ") +
         shift +
         ",\n"
         "  \"lower_order_final\": true,\n"
         "  \"num_train_timesteps\": 1000,\n"
         "  \"predict_x0\": true,\n"
         "  \"prediction_type\": \"flow_prediction\",\n"
         "  \"rescale_betas_zero_snr\": false,\n"
         "  \"sample_max_value\": 1.0,\n"
         "  \"solver_order\": 2,\n"
         "  \"solver_p\": null,\n"
         "  \"solver_type\": \"bh2\",\n"
         "  \"steps_offset\": 0,\n"
         "  \"thresholding\": false,\n"
         "  \"timestep_spacing\": \"linspace\",\n"
         "  \"trained_betas\": null,\n"
         "  \"use_beta_sigmas\": false,\n"
         "  \"use_exponential_sigmas\": false,\n"
         "  \"use_flow_sigmas\": true,\n"
         "  \"use_karras_sigmas\": false\n"
         "}\n";
}

void write_random_wan_pipeline(const WanPipelinePreset& p, std::uint64_t seed, DType dtype, const std::string& dir,
                               const WanWriteProgress& progress) {
  make_directory(dir);
  // The weights first, each part's config after its weights: a directory with a config is a model.
  for (const WanPipelineWeights& w : wan_pipeline_weights(p, seed, dtype)) {
    make_directory(dir + "/" + w.part);
    write_random_weights(w.params, w.seed, w.dtype, dir + "/" + w.file, [&](std::size_t done, std::size_t total) {
      if (progress) progress(w, done, total);
    });
    const std::string config = w.part == "transformer"     ? wan_transformer_config_json(p.transformer)
                               : w.part == "vae"           ? wan_vae_config_json(p.vae)
                               : w.part == "image_encoder" ? clip_vision_config_json(p.image_encoder)
                                                           : umt5_config_json(p.text_encoder);
    io::write_file_atomically(dir + "/" + w.part + "/config.json", config);
  }
  write_builtin_t5_tokenizer(dir + "/tokenizer", p.tokenizer_pieces);
  make_directory(dir + "/scheduler");
  io::write_file_atomically(dir + "/scheduler/scheduler_config.json", wan_unipc_scheduler_config_json(p.flow_shift));
  if (p.image) {
    make_directory(dir + "/image_processor");
    io::write_file_atomically(dir + "/image_processor/preprocessor_config.json",
                              clip_image_processor_json(p.image_processor));
  }
  io::write_file_atomically(dir + "/model_index.json",
                            std::string("{\n  \"_class_name\": \"") +
                                (p.image                    ? "WanImageToVideoPipeline"
                                 : p.transformer.skyreels ? "SkyReelsV2DiffusionForcingPipeline"
                                                          : "WanPipeline") +
                                "\",\n" +
                                (p.image ? "  \"image_encoder\": [\"transformers\", \"CLIPVisionModel\"],\n"
                                           "  \"image_processor\": [\"transformers\", \"CLIPImageProcessor\"],\n"
                                         : "") +
                                "  \"_vinf\": \"random weights, vinf make-model --preset " + p.name +
                                " --layout pipeline --seed " + std::to_string(seed) +
                                "\",\n"
                                "  \"scheduler\": [\"diffusers\", \"UniPCMultistepScheduler\"],\n"
                                "  \"text_encoder\": [\"transformers\", \"UMT5EncoderModel\"],\n"
                                "  \"tokenizer\": [\"transformers\", \"T5Tokenizer\"],\n"
                                "  \"transformer\": [\"diffusers\", \"" +
                                (p.transformer.skyreels ? "SkyReelsV2Transformer3DModel" : "WanTransformer3DModel") +
                                "\"],\n"
                                "  \"vae\": [\"diffusers\", \"AutoencoderKLWan\"]\n}\n");
}

std::string clip_vision_config_json(const ClipVisionConfig& c) {
  const nlohmann::ordered_json j = {{"architectures", {"CLIPVisionModel"}},
                                    {"hidden_act", c.encoder.act == ops::Activation::gelu ? "gelu" : "quick_gelu"},
                                    {"hidden_size", c.encoder.hidden_size},
                                    {"image_size", c.image_size},
                                    {"intermediate_size", c.encoder.intermediate_size},
                                    {"layer_norm_eps", c.encoder.layer_norm_eps},
                                    {"model_type", "clip_vision_model"},
                                    {"num_attention_heads", c.encoder.heads},
                                    {"num_channels", c.channels},
                                    {"num_hidden_layers", c.encoder.layers},
                                    {"patch_size", c.patch_size},
                                    {"projection_dim", c.projection_dim}};
  return j.dump(2) + "\n";
}

std::string clip_image_processor_json(const ClipImageProcessor& p) {
  const nlohmann::ordered_json j = {{"crop_size", {{"height", p.crop_height}, {"width", p.crop_width}}},
                                    {"do_center_crop", true},
                                    {"do_convert_rgb", true},
                                    {"do_normalize", true},
                                    {"do_rescale", true},
                                    {"do_resize", true},
                                    {"image_mean", {p.mean[0], p.mean[1], p.mean[2]}},
                                    {"image_processor_type", "CLIPImageProcessor"},
                                    {"image_std", {p.std[0], p.std[1], p.std[2]}},
                                    {"resample", 3},
                                    {"rescale_factor", p.rescale_factor},
                                    {"size", {{"shortest_edge", p.shortest_edge}}}};
  return j.dump(2) + "\n";
}

}  // namespace vinf::model
