#include "sampling/conditioning.hpp"

#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::sampling {

namespace {

// The tensor as f32 host values, any float dtype in the file.
std::vector<float> read_f32(const io::SafetensorsFile& f, const std::string& name) {
  const Tensor t = f.tensor(name);
  std::vector<float> v(static_cast<std::size_t>(t.numel()));
  Runtime rt(Device::cpu());
  ops::copy(rt.ctx(), t, Tensor::wrap(v.data(), DType::f32, Device::cpu(), t.shape));
  return v;
}

}  // namespace

int prompt_for_clip(int clip, int clips, int prompts) {
  const int p = static_cast<int>(static_cast<double>(clip) / static_cast<double>(clips) * prompts);
  return p < prompts ? p : prompts - 1;
}

TextEmbeddings read_text_embeddings(const std::string& path, std::int64_t width, bool need_negative) {
  const io::SafetensorsFile f(path);
  TextEmbeddings e;
  e.source = path;
  const auto* p = f.find("prompt_embeds");
  VINF_INPUT_CHECK(p != nullptr, path, " has no tensor 'prompt_embeds' [P, L, D] (one row per prompt)");
  VINF_INPUT_CHECK(p->shape.rank() == 3 && p->shape[0] > 0 && p->shape[1] > 0, path, ": 'prompt_embeds' must be ",
                   "[P, L, D] with P, L > 0, got ", p->shape.str());
  VINF_INPUT_CHECK(p->dtype == DType::f32 || p->dtype == DType::f16 || p->dtype == DType::bf16, path,
                   ": 'prompt_embeds' must be F32, F16 or BF16");
  VINF_INPUT_CHECK(p->shape[2] == width, path, ": 'prompt_embeds' has width ", p->shape[2],
                   " but the model's cross_attention_dim is ", width);
  e.tokens = p->shape[1];
  e.width = width;
  e.prompts = p->shape[0];
  e.prompt_embeds = read_f32(f, "prompt_embeds");
  if (const auto* n = f.find("negative_prompt_embeds")) {
    VINF_INPUT_CHECK(n->shape.rank() == 3 && n->shape[0] == 1 && n->shape[1] == e.tokens && n->shape[2] == width,
                     path, ": 'negative_prompt_embeds' must be [1, ", e.tokens, ", ", width, "], got ", n->shape.str());
    e.negative_prompt_embeds = read_f32(f, "negative_prompt_embeds");
  } else {
    VINF_INPUT_CHECK(!need_negative, path, " has no 'negative_prompt_embeds' [1, L, D], which guidance > 1 needs ",
                     "(or run with --sampler.guidance 1)");
  }
  return e;
}

}  // namespace vinf::sampling
