// `vinf generate` on a Wan2.1 pipeline directory (model_index.json's WanPipeline: transformer/,
// text_encoder/ (UMT5), tokenizer/ (SentencePiece), scheduler/ (UniPC with flow sigmas), vae/):
// the prompt and the negative prompt through UMT5, the guided flow-matching loop from seeded or
// given (--latents-init) latents, latents.h5 and run.json. One rank for now; the frames are the
// pipeline's num_frames (1 + 4k video frames, (frames - 1) / 4 + 1 latent frames).
#pragma once

#include "app/generate_options.hpp"

namespace vinf::app {

int generate_wan(const RunPlan& o);

}  // namespace vinf::app
