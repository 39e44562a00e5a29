// Text conditioning of a run: which prompt each clip gets, and the embeddings of the prompts and
// of the negative prompt, when they come from a safetensors file (`prompt_embeds` [P, L, D],
// `negative_prompt_embeds` [1, L, D]) rather than the text encoder (model/clip_text.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"

namespace vinf::sampling {

// The released code's mapping: clip r of N gets prompt int(r / N * P) (Python float arithmetic).
int prompt_for_clip(int clip, int clips, int prompts);

// Prompt and negative embeddings, one layout from the file or encoder to the device and checkpoint.
using TextEmbeddings = io::TextEmbeddings;

// Reads the file; throws vinf::InputError naming the file and tensor when a shape or the width
// (the model's cross_attention_dim) does not fit, or the negative is missing while `need_negative`.
TextEmbeddings read_text_embeddings(const std::string& path, std::int64_t width, bool need_negative);

}  // namespace vinf::sampling
