#include "pipeline/unet_support.hpp"

#include <fnmatch.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <type_traits>
#include <variant>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "io/atomic_file.hpp"
#include "model/clip_text.hpp"
#include "model/presets.hpp"
#include "model/tokenizer.hpp"
#include "model/unet3d.hpp"
#include "model/weights.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace fs = std::filesystem;

namespace vinf::pipeline {

sampling::TextEmbeddings encode_prompts_on_root(const GenerateSpec& o, std::int64_t width, bool guided, job::Job& job,
                                                std::vector<std::string>& warnings) {
  const mpi::Session& mpi = job.session();
  const Device device = job.device();
  std::vector<std::string> texts = o.prompts;
  if (guided) texts.push_back(o.negative);
  std::vector<float> hidden;
  std::int64_t tokens = 0;
  const std::string source = decided_by_root(mpi, [&] {
    const model::ClipTokenizer tokenizer =
        o.builtin() ? model::ClipTokenizer::byte_level() : model::ClipTokenizer::load(o.tokenizer);
    warnings.insert(warnings.end(), tokenizer.warnings().begin(), tokenizer.warnings().end());
    Runtime rt(device);
    std::string encoder_source = o.text_encoder;
    std::unique_ptr<model::ClipTextModel> encoder;
    if (o.builtin()) {
      const model::ClipTextConfig c = model::pipeline_text_config(o.builtin_preset());
      encoder = std::make_unique<model::ClipTextModel>(
          c, model::Weights::random(model::clip_text_parameters(c), rt, DType::f32,
                                    model::text_encoder_seed(static_cast<std::uint64_t>(o.model_seed))));
      encoder_source = "built-in (random)";
    } else {
      encoder = std::make_unique<model::ClipTextModel>(model::ClipTextModel::load(o.text_encoder, rt, DType::f32));
    }
    VINF_INPUT_CHECK(encoder->config().hidden_size == width, "the text encoder ", encoder_source, " has hidden_size ",
                     encoder->config().hidden_size, " but the UNet's cross_attention_dim is ", width,
                     ": they are not from the same model");
    std::vector<model::TokenizedText> ids;
    hidden = model::encode_prompts(rt, tokenizer, *encoder, texts, &ids);
    tokens = tokenizer.max_length();
    for (std::size_t i = 0; i < ids.size(); ++i)
      if (ids[i].truncated())
        warnings.push_back((i < o.prompts.size() ? "prompt " + std::to_string(i) : std::string("the negative prompt")) +
                           " has " + std::to_string(ids[i].length) + " tokens; the text encoder takes " +
                           std::to_string(tokens) + ", so these are dropped: '" + excerpt(ids[i].dropped) + "'");
    return "tokenizer " + tokenizer.source() + ", text encoder " + encoder_source;
  });
  job.world().broadcast(job.host(), Tensor::wrap(&tokens, DType::i64, Device::cpu(), {1}), 0);
  const auto row = static_cast<std::size_t>(tokens * width);
  hidden.resize(row * texts.size());
  job.world().broadcast(
      job.host(), Tensor::wrap(hidden.data(), DType::f32, Device::cpu(), {static_cast<std::int64_t>(hidden.size())}),
      0);
  sampling::TextEmbeddings text;
  text.prompts = static_cast<std::int64_t>(o.prompts.size());
  text.tokens = tokens;
  text.width = width;
  text.source = source;
  text.prompt_embeds.assign(hidden.begin(), hidden.begin() + static_cast<std::ptrdiff_t>(o.prompts.size() * row));
  if (guided) text.negative_prompt_embeds.assign(hidden.end() - static_cast<std::ptrdiff_t>(row), hidden.end());
  return text;
}

void check_dump_modules(const GenerateSpec& o, const model::UNetConfig& c) {
  if (o.dump_globs.empty()) return;
  VINF_INPUT_CHECK(o.cfg() == 1, "--dump.modules needs --parallel.cfg 1 (every rank then holds ",
                   "both guidance branches of its frames)");
  VINF_INPUT_CHECK(o.job.tensor == 1, "--dump.modules needs --parallel.tensor 1 (every rank then holds ",
                   "whole modules)");
  VINF_INPUT_CHECK(o.job.pipeline == 1, "--dump.modules needs --parallel.pipeline 1 (the dump steps would run on ",
                   "different stages)");
  const std::vector<std::string> names = model::observed_module_names(c);
  for (const std::string& glob : o.dump_globs) {
    const bool matches = std::any_of(names.begin(), names.end(),
                                     [&](const std::string& n) { return fnmatch(glob.c_str(), n.c_str(), 0) == 0; });
    if (matches) continue;
    // The block outputs in full, and the first temporal module of each kind for the inner names.
    std::string blocks, inner;
    for (const std::string& n : names) {
      if (n.find('.') == std::string::npos || (n.find('.') == n.rfind('.') && n.find("_blocks.") != std::string::npos))
        blocks += (blocks.empty() ? "" : ", ") + n;
      else if (inner.empty() && n.find(".temp_convs.") != std::string::npos)
        inner = n.substr(0, n.rfind('.')) + ".in/.out";
    }
    VINF_INPUT_FAIL("--dump.modules: '", glob, "' matches no module of this model; the modules are ", blocks,
                    ", and inside them the inputs and outputs of every temporal convolution, temporal transformer ",
                    "and temporal attention (e.g. ", inner, ", transformer_in.in, ",
                    "transformer_in.transformer_blocks.0.attn1.out); globs such as 'down_blocks.*' or '*.attn1.out' ",
                    "select several");
  }
}

ActivationDump::ActivationDump(const GenerateSpec& o, std::int64_t batch, std::int64_t clip_frames,
                               std::int64_t first_frame, std::int64_t frames)
    : globs_(o.dump_globs),
      steps_(o.dump_step_list),
      batch_(batch),
      clip_frames_(clip_frames),
      first_frame_(first_frame),
      frames_(frames) {}

std::function<void(const std::string&, const Tensor&)> FiniteWatch::observer(ExecContext& ctx) {
  first_bad_.clear();
  return [this, &ctx](const std::string& name, const Tensor& t) {
    if (!first_bad_.empty()) return;
    host_.resize(static_cast<std::size_t>(t.numel()));
    ops::copy(ctx, t, Tensor::wrap(host_.data(), DType::f32, Device::cpu(), t.shape));
    synchronize(ctx);
    for (float v : host_) {
      if (!std::isfinite(v)) {
        first_bad_ = name;
        return;
      }
    }
  };
}

bool ActivationDump::wanted(int step) const {
  return enabled() && std::find(steps_.begin(), steps_.end(), step) != steps_.end();
}

std::function<void(const std::string&, const Tensor&)> ActivationDump::observer(ExecContext& ctx) {
  captured_.clear();
  return [this, &ctx](const std::string& name, const Tensor& t) {
    bool match = false;
    for (const std::string& g : globs_) match = match || fnmatch(g.c_str(), name.c_str(), 0) == 0;
    if (!match) return;
    Captured c{name, t.shape, std::vector<float>(static_cast<std::size_t>(t.numel()))};
    ops::copy(ctx, t, Tensor::wrap(c.data.data(), DType::f32, Device::cpu(), t.shape));
    captured_.push_back(std::move(c));
  };
}

void ActivationDump::write_step(const mpi::Session& mpi, const std::string& path, int step) {
  const auto comm = mpi.world();
  if (!file_) {
    file_ = std::make_unique<io::H5File>(io::H5File::create(comm, path + ".partial"));
    file_->set_text("/", "format", "vinf-activations");
    file_->set_text("/", "layout",
                    "frame-major module outputs as [batch, frame, ...]; temporal attention internals as "
                    "[batch*height*width, frame, width]; others whole");
    file_->create_group("/activations");
  }
  const std::string group = "/activations/step" + std::to_string(step);
  file_->create_group(group);
  for (const Captured& c : captured_) {
    const std::string name = group + "/" + c.name;
    if (c.shape.rank() == 3 && c.shape[1] == clip_frames_) {
      // Temporal attention internals (B * H * W, F_clip, width).
      file_->write_frames(name, {c.shape[0], frames_, c.shape[2]}, 1, first_frame_, clip_frames_, c.data.data());
    } else if (c.shape.rank() >= 2 && c.shape[0] == batch_ * clip_frames_) {
      // (B * F_clip, ...) frame-major: [B, F, ...] over the whole video.
      Shape full{batch_, frames_};
      for (int d = 1; d < c.shape.rank(); ++d) full.push_back(c.shape[d]);
      file_->write_frames(name, full, 1, first_frame_, clip_frames_, c.data.data());
    } else {
      file_->write_small(name, DType::f32, c.shape, c.data.data());  // the same on every rank
    }
  }
  captured_.clear();
}

void ActivationDump::finish(const mpi::Session& mpi, const std::string& path) {
  const auto comm = mpi.world();
  if (!file_) return;
  file_->close();
  file_.reset();
  io::commit_partial(comm, path + ".partial", path);
}

}  // namespace vinf::pipeline
