#include "train/data.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "io/h5file.hpp"
#include "model/vae.hpp"
#include "ops/elementwise.hpp"

namespace vinf::train {

TrainData::TrainData(const std::string& path) : path_(path) {
  VINF_INPUT_CHECK(io::is_hdf5(path), path, " is not an HDF5 file (give the file vinf prepare-data wrote)");
  file_ = std::make_unique<io::H5File>(io::H5File::open_serial(path));
  const io::H5File& f = *file_;
  VINF_INPUT_CHECK(f.has_attribute("/", "format") && f.text("/", "format") == kDataFormat, path,
                   " is not training data of this vinf (format '",
                   f.has_attribute("/", "format") ? f.text("/", "format") : std::string("none"), "', expected '",
                   kDataFormat, "'); write it with vinf prepare-data");
  for (const char* name : {"/latents", "/text", "/clip_video", "/videos"})
    VINF_INPUT_CHECK(f.exists(name), path, " has no ", name, " (a damaged or partial file?)");
  const Shape ls = f.shape("/latents"), ts = f.shape("/text");
  VINF_INPUT_CHECK(ls.rank() == 5 && ts.rank() == 3 && ls[0] == ts[0] && ls[0] > 0, path, ": /latents ", ls.str(),
                   " and /text ", ts.str(), " do not hold the same clips");
  info_.clips = ls[0];
  info_.channels = ls[1];
  info_.frames = ls[2];
  info_.height = ls[3];
  info_.width = ls[4];
  info_.text_tokens = ts[1];
  info_.text_width = ts[2];
  info_.pixel_width = f.integer("/", "width");
  info_.pixel_height = f.integer("/", "height");
  info_.frame_step = f.integer("/", "frame_step");
  clip_video_ = f.read_i64("/clip_video");
  try {
    info_.videos = nlohmann::json::parse(f.read_text("/videos")).get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    VINF_INPUT_FAIL(path, ": /videos is not a JSON list of names: ", e.what());
  }
  VINF_INPUT_CHECK(static_cast<std::int64_t>(clip_video_.size()) == info_.clips, path, ": /clip_video has ",
                   clip_video_.size(), " entries for ", info_.clips, " clips");
  for (std::int64_t v : clip_video_)
    VINF_INPUT_CHECK(v >= 0 && v < static_cast<std::int64_t>(info_.videos.size()), path, ": /clip_video names video ",
                     v, " of ", info_.videos.size());
}

TrainData::~TrainData() = default;
TrainData::TrainData(TrainData&&) noexcept = default;

void TrainData::read(std::int64_t i, float* latents, float* text) const {
  VINF_CHECK(i >= 0 && i < info_.clips, "TrainData::read: clip ", i, " of ", info_.clips);
  file_->read_frames("/latents", 0, i, 1, latents);
  file_->read_frames("/text", 0, i, 1, text);
}

void encode_clip(ExecContext& ctx, const model::VaeEncoder& vae, const std::vector<const std::uint8_t*>& frames,
                 std::int64_t width, std::int64_t height, float* out) {
  const auto f = static_cast<std::int64_t>(frames.size());
  const std::int64_t up = vae.config().upscale(), c = vae.config().latent_channels;
  const std::int64_t lh = height / up, lw = width / up, pixels = width * height;
  std::vector<float> images(static_cast<std::size_t>(f * 3 * pixels));
  for (std::int64_t k = 0; k < f; ++k)
    for (std::int64_t ch = 0; ch < 3; ++ch)
      for (std::int64_t p = 0; p < pixels; ++p)
        images[static_cast<std::size_t>((k * 3 + ch) * pixels + p)] =
            static_cast<float>(frames[static_cast<std::size_t>(k)][p * 3 + ch]) / 127.5f - 1.f;
  OwnedTensor img = ctx.arena->empty(DType::f32, {f, 3, height, width});
  OwnedTensor mean = ctx.arena->empty(DType::f32, {f, c, lh, lw});
  ops::copy(ctx, Tensor::wrap(images.data(), DType::f32, Device::cpu(), img.shape), img);
  vae.encode(ctx, img, mean, nullptr);
  // (F, C, h, w) -> (C, F, h, w), times the scaling factor.
  const Tensor dst = Tensor::wrap(out, DType::f32, Device::cpu(), {c, f, lh, lw});
  ops::copy(ctx, mean.permute({1, 0, 2, 3}), dst);
  const float s = vae.config().scaling_factor;
  for (std::int64_t i = 0; i < dst.numel(); ++i) out[i] *= s;
}

std::vector<std::int64_t> epoch_order(std::int64_t n, std::uint64_t seed, std::int64_t epoch) {
  std::vector<std::int64_t> order(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) order[static_cast<std::size_t>(i)] = i;
  // Fisher-Yates with Philox draws: element k of stream (seed, epoch) decides swap k.
  for (std::int64_t k = n - 1; k > 0; --k) {
    const philox::U32x4 b = philox::block(seed, static_cast<std::uint64_t>(epoch), static_cast<std::uint64_t>(k));
    const std::uint64_t r = (static_cast<std::uint64_t>(b.v[0]) << 32) | b.v[1];
    const auto j = static_cast<std::int64_t>(r % static_cast<std::uint64_t>(k + 1));
    std::swap(order[static_cast<std::size_t>(k)], order[static_cast<std::size_t>(j)]);
  }
  return order;
}

}  // namespace vinf::train
