// The measures of `vinf evaluate` (design.md §5): measures of a video's temporal consistency, per pair of
// consecutive frames, and how they jump at the frames where a new clip or window starts. The
// measures work on plain arrays (a video's RGB frames or a run's latents), so that generate can
// evaluate what it wrote and tests can check them on frames they made.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace vinf::evaluate {

// A grayscale copy of a frame, row-major.
struct Plane {
  std::int64_t width = 0, height = 0;
  std::vector<float> values;
};
// Luma (0.299 R + 0.587 G + 0.114 B) of height x width x 3 bytes, in 0..255.
Plane gray_from_rgb8(const std::uint8_t* hwc, std::int64_t width, std::int64_t height);
// The mean over channels of a (C, H, W) array (latents).
Plane gray_from_chw(const float* chw, std::int64_t channels, std::int64_t height, std::int64_t width);

// Mean |a - b| over n values: one entry of the frame_difference series.
double mean_abs_difference(const float* a, const float* b, std::int64_t n);
double mean_abs_difference(const std::uint8_t* a, const std::uint8_t* b, std::int64_t n);

// Block matching. The planes are averaged over factor x factor squares, factor the smallest
// integer that makes the longer side at most max_side; the block x block blocks whose whole search
// window lies inside the frame are matched against the second plane at every displacement within
// +-search (sum of absolute differences; of equal sums the shortest displacement wins, so a still
// scene has none); motion = the mean over blocks of the best displacement's length times factor,
// in pixels of the input. 0 when no block fits.
struct MotionSettings {
  int block = 8, search = 8;
  std::int64_t max_side = 256;
};
double block_motion(const Plane& a, const Plane& b, const MotionSettings& s = {});
// The downscaled copy block_motion matches (exposed for its tests).
Plane downscale(const Plane& p, std::int64_t factor);
std::int64_t motion_factor(const Plane& p, const MotionSettings& s);

// "16,32,48" to frame numbers: strictly increasing integers 0 < b < frames. Anything else is a
// vinf::InputError naming the value and the frame count. frames = 0: not known yet (the range's
// upper end is checked later by check_boundaries).
std::vector<std::int64_t> parse_boundaries(const std::string& list, std::int64_t frames);
// The same checks on a list from elsewhere (a latents.h5); `source` names it in messages.
void check_boundaries(const std::vector<std::int64_t>& boundaries, std::int64_t frames, const std::string& source);

// One series' jump at a boundary b: value = series[b - 1]; inside_mean = the mean over the pairs
// that cross no boundary (nullopt when there are none); ratio = value / inside_mean (nullopt when
// inside_mean is 0 or absent).
struct SeamValue {
  double value = 0;
  std::optional<double> inside_mean, ratio;
};
SeamValue seam_value(const std::vector<double>& series, const std::vector<std::int64_t>& boundaries, std::int64_t b);

// The series of a whole video, entry i for frames i -> i + 1.
struct Series {
  std::vector<double> frame_difference, motion;
  std::vector<double> clip_frame_similarity, clip_first_frame_similarity;  // empty without a CLIP model
};

// The plot of evaluate.png: each non-empty series in its own panel against the pair index, titled
// with its measure and unit (space: "rgb" or "latents", as in evaluate.json), a light grid, every
// boundary b as a red vertical line at pair b - 1 / b, named by a legend when there is one.
// height x width x 3 bytes.
std::vector<std::uint8_t> plot_series(const Series& s, const std::string& space,
                                      const std::vector<std::int64_t>& boundaries, std::int64_t& width,
                                      std::int64_t& height);

// One curve in one panel of the same look (a training run's loss.png): values against their
// index, the first labelled x_first, titled `title` (a letter the plot's small font lacks, such
// as g, k or v, draws as a space). height x width x 3 bytes.
std::vector<std::uint8_t> plot_curve(const std::string& title, const std::vector<double>& values, double x_first,
                                     std::int64_t& width, std::int64_t& height);

// Evaluates a video file or a run's latents.h5 into out_dir/evaluate.json and evaluate.png.
// boundaries: the given ones (checked against the frame count), or nullopt for the defaults (a
// latents.h5's recorded ones or its clips' starts; none for a video). clip_vision_dir: a
// CLIPVisionModelWithProjection directory, or "" for none. latents.h5 input needs MPI running (its
// HDF5 is parallel HDF5); a video does not.
void evaluate_file(const std::string& input, const std::string& out_dir,
                   const std::optional<std::vector<std::int64_t>>& boundaries, const std::string& clip_vision_dir,
                   bool quiet);

}  // namespace vinf::evaluate
