// Training data as `vinf prepare-data` writes it: one HDF5 file of clips, each the VAE latents of F
// frames and the text embeddings of its video's caption.
//
//   /latents           F32 [N, C, F, h, w]  latent_dist.mean x scaling_factor, one chunk per clip
//   /text              F32 [N, L, D]        the caption's text-encoder output, one chunk per clip
//   /clip_video        I64 [N]              the video each clip comes from (index into /videos)
//   /clip_first_frame  I64 [N]              the clip's first frame in its video (after decoding)
//   /videos, /captions text (JSON arrays)   the videos' names, relative to the videos folder, and
//                                           their captions
//   attributes on /    format "vinf-train-data 1", frames, frame_step, clip_step, width and height
//                      (pixels), scaling_factor, vae, text_encoder
//
// The reader opens it in one process; every rank of a training job opens its own.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "ops/context.hpp"

namespace vinf::io {
class H5File;
}
namespace vinf::model {
class VaeEncoder;
}

namespace vinf::train {

inline constexpr const char* kDataFormat = "vinf-train-data 1";

struct DataInfo {
  std::int64_t clips = 0, channels = 0, frames = 0, height = 0, width = 0;  // latents per clip (C, F, h, w)
  std::int64_t text_tokens = 0, text_width = 0;                             // text per clip (L, D)
  std::int64_t pixel_width = 0, pixel_height = 0, frame_step = 1;
  std::vector<std::string> videos;
};

class TrainData {
 public:
  // Opens a prepare-data file. Throws vinf::InputError naming the path when it is missing, not
  // HDF5, not such a file or inconsistent.
  explicit TrainData(const std::string& path);
  ~TrainData();
  TrainData(TrainData&&) noexcept;

  const DataInfo& info() const { return info_; }
  const std::string& path() const { return path_; }
  // Clip i's latents (C, F, h, w) and text (L, D), into host buffers of those sizes.
  void read(std::int64_t i, float* latents, float* text) const;
  // The video clip i comes from.
  std::int64_t video_of(std::int64_t i) const { return clip_video_[static_cast<std::size_t>(i)]; }

 private:
  std::string path_;
  std::unique_ptr<io::H5File> file_;
  DataInfo info_;
  std::vector<std::int64_t> clip_video_;
};

// One clip's latents as the data file holds them: `frames` RGB frames (height x width x 3 bytes
// each) mapped to [-1, 1], through the VAE's encoder, the mean times its scaling factor, stored
// (C, F, h, w) into out.
void encode_clip(ExecContext& ctx, const model::VaeEncoder& vae, const std::vector<const std::uint8_t*>& frames,
                 std::int64_t width, std::int64_t height, float* out);

// The order of the clips in epoch `epoch`: a permutation of [0, n) that depends on (seed, epoch)
// alone, so every rank of any job size sees the same order and takes its share of each batch.
std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::int64_t epoch);

}  // namespace vinf::train
