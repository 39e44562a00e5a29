// evaluate_file: a video file or a run's latents.h5 to DIR/evaluate.json (the series per pair of
// frames, their means, the seams at the boundaries) and DIR/evaluate.png. Phases: open the input,
// read frames while measuring each pair, choose the boundaries, write.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "evaluate/evaluate.hpp"
#include "infinity/config.hpp"
#include "io/atomic_file.hpp"
#include "io/checkpoint.hpp"
#include "io/h5file.hpp"
#include "io/image.hpp"
#include "io/path_query.hpp"
#include "io/video_reader.hpp"
#include "model/clip_vision.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace vinf::evaluate {

namespace {

constexpr std::int64_t kClipBatch = 8;

// What the frames are read from: a video through ffmpeg or the latents of a latents.h5.
struct Input {
  std::string path, space;  // "rgb" or "latents"
  std::int64_t frames = 0, width = 0, height = 0, channels = 3;
  std::int64_t clip_size = 1;
  std::optional<std::vector<std::int64_t>> recorded_boundaries;
};

// The CLIP embeddings of the frames, computed a few frames at a time.
class ClipEmbedder {
 public:
  explicit ClipEmbedder(const std::string& dir)
      : rt_(std::make_unique<Runtime>(Device::cpu())), model_(model::ClipVisionModel::load(dir, *rt_)) {}
  void add(const std::uint8_t* rgb, std::int64_t width, std::int64_t height) {
    const std::vector<float> x = model::clip_preprocess(rgb, width, height, model_.config().image_size);
    pending_.insert(pending_.end(), x.begin(), x.end());
    if (++count_ == kClipBatch) flush();
  }
  // Every frame's embedding, projection_dim values each.
  const std::vector<float>& finish() {
    flush();
    return embeddings_;
  }
  std::int64_t dim() const { return model_.config().projection_dim; }

 private:
  void flush() {
    if (count_ == 0) return;
    const std::int64_t s = model_.config().image_size;
    const Shape in{count_, 3, s, s}, out{count_, dim()};
    OwnedTensor x = rt_->arena().empty(DType::f32, in), y = rt_->arena().empty(DType::f32, out);
    ops::copy(rt_->ctx(), Tensor::wrap(pending_.data(), DType::f32, Device::cpu(), in), x);
    model_.embed(rt_->ctx(), x, y);
    const std::size_t old = embeddings_.size();
    embeddings_.resize(old + static_cast<std::size_t>(count_ * dim()));
    ops::copy(rt_->ctx(), y, Tensor::wrap(embeddings_.data() + old, DType::f32, Device::cpu(), out));
    rt_->synchronize();
    pending_.clear();
    count_ = 0;
  }
  std::unique_ptr<Runtime> rt_;
  model::ClipVisionModel model_;
  std::vector<float> pending_, embeddings_;
  std::int64_t count_ = 0;
};

// Measures each pair as the frames arrive, keeping only the previous frame.
class PairMeasures {
 public:
  void add_rgb(const std::uint8_t* rgb, std::int64_t width, std::int64_t height) {
    const std::int64_t n = width * height * 3;
    Plane gray = gray_from_rgb8(rgb, width, height);
    if (!previous_rgb_.empty()) {
      series_.frame_difference.push_back(mean_abs_difference(previous_rgb_.data(), rgb, n));
      series_.motion.push_back(block_motion(previous_gray_, gray));
    }
    previous_rgb_.assign(rgb, rgb + n);
    previous_gray_ = std::move(gray);
  }
  void add_latents(const std::vector<float>& chw, std::int64_t channels, std::int64_t height, std::int64_t width) {
    Plane gray = gray_from_chw(chw.data(), channels, height, width);
    if (!previous_latents_.empty()) {
      series_.frame_difference.push_back(
          mean_abs_difference(previous_latents_.data(), chw.data(), static_cast<std::int64_t>(chw.size())));
      series_.motion.push_back(block_motion(previous_gray_, gray));
    }
    previous_latents_ = chw;
    previous_gray_ = std::move(gray);
  }
  Series& series() { return series_; }

 private:
  Series series_;
  std::vector<std::uint8_t> previous_rgb_;
  std::vector<float> previous_latents_;
  Plane previous_gray_;
};

Reporter evaluate_voice(bool quiet) { return Reporter("vinf evaluate:", true, quiet); }

void progress(bool quiet, std::int64_t done, std::int64_t total) {
  if (quiet || (done % 64 != 0 && done != total)) return;
  evaluate_voice(quiet).say(done, total > 0 ? " of " + std::to_string(total) : std::string(),
                            " frame(s) read and measured");
}

Input open_latents(const std::string& path) {
  const io::H5File f = io::H5File::open_serial(path);
  const std::string format = f.has_attribute("/", "format") ? f.text("/", "format") : "";
  VINF_INPUT_CHECK(format != io::kCheckpointFormat, path, " is a checkpoint: its latents are partly denoised (and a ",
                   "FIFO run's hold the queue after the video); evaluate a finished run's latents.h5 or video.mp4");
  VINF_INPUT_CHECK(format == io::kLatentsFormat, path, " is an HDF5 file but not a vinf latents.h5 (format '", format,
                   "')");
  const Shape full = f.shape("/latents");
  VINF_INPUT_CHECK(full.rank() == 4, path, ": /latents must be [F, C, H, W], got ", full.str());
  Input in;
  in.path = path;
  in.space = "latents";
  in.frames = full[0];
  in.width = full[3];
  in.height = full[2];
  in.channels = full[1];
  in.clip_size = f.has_attribute("/", "clip_size") ? f.integer("/", "clip_size") : 1;
  in.recorded_boundaries = io::recorded_boundaries(f);
  return in;
}

void read_latents(const Input& in, PairMeasures& m, bool quiet) {
  const io::H5File f = io::H5File::open_serial(in.path);
  std::vector<float> frame(static_cast<std::size_t>(in.channels * in.height * in.width));
  for (std::int64_t i = 0; i < in.frames; ++i) {
    f.read_frames("/latents", 0, i, 1, frame.data());
    VINF_INPUT_CHECK(std::all_of(frame.begin(), frame.end(), [](float x) { return std::isfinite(x); }), in.path,
                     ": frame ", i, " of /latents holds NaN or infinite values (a damaged file)");
    m.add_latents(frame, in.channels, in.height, in.width);
    progress(quiet, i + 1, in.frames);
  }
}

Input read_video(const std::string& path, PairMeasures& m, ClipEmbedder* clip, bool quiet) {
  const io::VideoInfo info = io::probe_video(path);
  io::VideoReader reader(path, info);
  Input in;
  in.path = path;
  in.space = "rgb";
  in.width = info.width;
  in.height = info.height;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(info.width * info.height * 3));
  while (reader.read(rgb.data())) {
    m.add_rgb(rgb.data(), info.width, info.height);
    if (clip) clip->add(rgb.data(), info.width, info.height);
    progress(quiet, ++in.frames, info.frames);
  }
  return in;
}

// The default boundaries of a latents.h5: the recorded ones, else the starts of the clips of
// Video-Infinity's partition over clip_size ranks.
std::vector<std::int64_t> default_boundaries(const Input& in, std::string& source) {
  if (in.recorded_boundaries) {  // recorded, also when there are none (a FIFO run)
    source = "recorded";
    check_boundaries(*in.recorded_boundaries, in.frames, in.path + ": /run/boundaries");
    return *in.recorded_boundaries;
  }
  std::vector<std::int64_t> out;
  if (in.space == "latents" && in.clip_size > 1 && in.clip_size <= in.frames) {
    source = "clip_size";
    for (int c = 1; c < in.clip_size; ++c)
      out.push_back(infinity::clip_frames(in.frames, static_cast<int>(in.clip_size), c).first);
  }
  return out;
}

nlohmann::json optional_number(const std::optional<double>& v) { return v ? nlohmann::json(*v) : nlohmann::json(); }

double mean(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
}

nlohmann::ordered_json report(const Input& in, const Series& s, const std::vector<std::int64_t>& boundaries,
                              const std::string& boundary_source, const std::string& clip_note) {
  nlohmann::ordered_json j;
  j["input"] = in.path;
  j["space"] = in.space;
  j["frames"] = in.frames;
  j["width"] = in.width;
  j["height"] = in.height;
  if (in.space == "latents") j["channels"] = in.channels;
  j["definitions"] = {
      {"frame_difference",
       "mean absolute difference of frames i and i+1 over all pixels and channels (0..255 "
       "for rgb, raw values for latents)"},
      {"motion",
       "mean over 8x8 blocks of the length of the best block-matching shift (search +-8, sum of absolute "
       "differences, ties to the shortest) between grayscale frames i and i+1 averaged down to at most 256 "
       "pixels a side, in input pixels"},
      {"clip_frame_similarity", "cosine similarity of the CLIP image embeddings of frames i and i+1"},
      {"clip_first_frame_similarity", "cosine similarity of the CLIP image embeddings of frames 0 and i+1"},
      {"seam", "per boundary b: the value at pair b-1, the mean over pairs that cross no boundary, their ratio"}};
  nlohmann::ordered_json series = {{"frame_difference", s.frame_difference}, {"motion", s.motion}};
  nlohmann::ordered_json summary = {{"frame_difference_mean", mean(s.frame_difference)},
                                    {"motion_mean", mean(s.motion)}};
  if (in.space == "rgb") summary["flicker_score"] = 1.0 - mean(s.frame_difference) / 255.0;
  if (!s.clip_frame_similarity.empty()) {
    series["clip_frame_similarity"] = s.clip_frame_similarity;
    series["clip_first_frame_similarity"] = s.clip_first_frame_similarity;
    summary["clip_frame_similarity_mean"] = mean(s.clip_frame_similarity);
    summary["clip_first_frame_similarity_mean"] = mean(s.clip_first_frame_similarity);
  }
  if (!clip_note.empty()) j["clip"] = clip_note;
  j["series"] = series;
  j["summary"] = summary;
  j["boundaries"] = boundaries;
  j["boundary_source"] = boundary_source;
  nlohmann::ordered_json seams = nlohmann::ordered_json::array();
  for (std::int64_t b : boundaries) {
    const SeamValue d = seam_value(s.frame_difference, boundaries, b), m = seam_value(s.motion, boundaries, b);
    seams.push_back({{"frame", b},
                     {"difference", d.value},
                     {"inside_mean", optional_number(d.inside_mean)},
                     {"ratio", optional_number(d.ratio)},
                     {"motion", m.value},
                     {"motion_inside_mean", optional_number(m.inside_mean)},
                     {"motion_ratio", optional_number(m.ratio)}});
  }
  j["seam"] = seams;
  return j;
}

}  // namespace

void evaluate_file(const std::string& input, const std::string& out_dir,
                   const std::optional<std::vector<std::int64_t>>& boundaries, const std::string& clip_vision_dir,
                   bool quiet) {
  const auto t0 = std::chrono::steady_clock::now();
  VINF_INPUT_CHECK(io::is_regular_file(input), "vinf evaluate: input ", input,
                   " does not exist or is not a file; give a video file or a run's latents.h5");
  const bool latents = io::is_hdf5(input);
  std::unique_ptr<ClipEmbedder> clip;
  std::string clip_note;
  if (!clip_vision_dir.empty() && latents) {
    clip_note = "not computed: the input is latents, and CLIP compares images";
    evaluate_voice(quiet).note("--clip-vision ignored: ", input, " holds latents; CLIP similarities need a video");
  } else if (!clip_vision_dir.empty()) {
    clip = std::make_unique<ClipEmbedder>(clip_vision_dir);  // its errors before the video is read
  }
  io::NewDirectory out(out_dir, "vinf evaluate: --out");  // removed again if the input is refused

  PairMeasures measures;
  Input in;
  if (latents) {
    in = open_latents(input);
    evaluate_voice(quiet).say(input, ": ", in.frames, " latent frame(s) ", in.channels, "x", in.height, "x", in.width);
    read_latents(in, measures, quiet);
  } else {
    in = read_video(input, measures, clip.get(), quiet);
  }
  VINF_INPUT_CHECK(in.frames >= 2, "vinf evaluate: ", input, " has ", in.frames,
                   " frame(s); the measures compare consecutive frames, so it needs at least 2");
  Series& s = measures.series();
  if (clip) {
    const std::vector<float>& e = clip->finish();
    const std::int64_t dim = clip->dim();
    for (std::int64_t i = 0; i + 1 < in.frames; ++i) {
      s.clip_frame_similarity.push_back(model::cosine_similarity(e.data() + i * dim, e.data() + (i + 1) * dim, dim));
      s.clip_first_frame_similarity.push_back(model::cosine_similarity(e.data(), e.data() + (i + 1) * dim, dim));
    }
  }
  std::string source = "given";
  std::vector<std::int64_t> chosen;
  if (boundaries) {
    check_boundaries(*boundaries, in.frames, "--boundaries");
    chosen = *boundaries;
  } else {
    source = "none";
    chosen = default_boundaries(in, source);
  }
  io::write_file_atomically(out_dir + "/evaluate.json", report(in, s, chosen, source, clip_note).dump(2) + "\n");
  std::int64_t width = 0, height = 0;
  const std::vector<std::uint8_t> plot = plot_series(s, in.space, chosen, width, height);
  io::write_png(out_dir + "/evaluate.png", plot.data(), width, height);
  out.keep();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  evaluate_voice(quiet).say(in.frames, " frame(s) ", in.width, "x", in.height, " (", in.space, "), ", chosen.size(),
                            " boundar", chosen.size() == 1 ? "y" : "ies", ", measures done in ", seconds,
                            " s; wrote evaluate.json and evaluate.png in ", out_dir);
}

}  // namespace vinf::evaluate
