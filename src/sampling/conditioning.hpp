// Text conditioning of a run: which prompt each clip gets, and the embeddings of the prompts and
// of the negative prompt, when they come from a safetensors file (`prompt_embeds` [P, L, D],
// `negative_prompt_embeds` [1, L, D]) rather than the text encoder (model/clip_text.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vinf::sampling {

// The released code's mapping: clip r of N gets prompt int(r / N * P) (Python float arithmetic).
int prompt_for_clip(int clip, int clips, int prompts);

struct TextEmbeddings {
  std::int64_t tokens = 0, width = 0;
  std::vector<std::vector<float>> prompts;  // P x (tokens * width)
  std::vector<float> negative;              // tokens * width; empty when the file has none
  std::string source;                       // for run.json and messages
};

// Reads the file; throws vinf::InputError naming the file and tensor when a shape or the width
// (the model's cross_attention_dim) does not fit, or the negative is missing while `need_negative`.
TextEmbeddings read_text_embeddings(const std::string& path, std::int64_t width, bool need_negative);

}  // namespace vinf::sampling
