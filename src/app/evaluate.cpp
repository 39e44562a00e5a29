// `vinf evaluate` (design.md §5): its options and help; the evaluation is evaluate::evaluate_file.
#include <iostream>
#include <memory>
#include <optional>

#include "app/commands.hpp"
#include "app/evaluate.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "io/h5file.hpp"
#include "io/path_query.hpp"
#include "mpi/session.hpp"

namespace po = boost::program_options;

namespace vinf::app {

const char* const kEvaluateMeasuresHelp =
    "Measures (evaluate.json `series`, entry i for frames i -> i+1; `definitions` repeats these lines):\n"
    "  frame_difference   mean |frame i+1 - frame i| over all pixels and channels (0..255 for a video, the\n"
    "                     raw values for latents); VBench's temporal flickering is built from it\n"
    "  motion             block matching on a grayscale copy (luma; the channel mean for latents), averaged\n"
    "                     down to at most 256 pixels a side: 8x8 blocks searched +-8 pixels there by the sum of\n"
    "                     absolute differences (ties: the shortest shift); the mean length of the best shifts,\n"
    "                     in pixels of the input\n"
    "  clip_frame_similarity        (--clip-vision) cosine similarity of the CLIP image embeddings of\n"
    "                               frames i and i+1\n"
    "  clip_first_frame_similarity  (--clip-vision) the same for frame i+1 against frame 0\n"
    "  summary            the mean of each series; flicker_score = 1 - mean(frame_difference) / 255 (video)\n"
    "  seam               per boundary b (a frame where a new clip starts): the series' value at pair b-1, its\n"
    "                     mean over the pairs that cross no boundary, and their ratio (null when that is 0)\n";

po::options_description evaluate_options(std::string& boundaries, std::string& clip_vision_dir) {
  po::options_description opts("Evaluation");
  opts.add_options()("boundaries", po::value(&boundaries),
                     "the frames where a new clip or window starts, comma-separated, strictly increasing, in "
                     "1..F-1 (default: for a latents.h5 the run's recorded ones, else its clips' starts; none "
                     "for a video)")(
      "clip-vision", path_value(&clip_vision_dir, PathKind::directory),
      "a transformers CLIPVisionModelWithProjection directory (config.json + model.safetensors): adds the CLIP "
      "similarities (video input only; frames resized with PIL's bicubic filter in floats, centre-cropped)");
  return opts;
}

int evaluate(const std::vector<std::string>& args) {
  std::string config_file, input, out_dir, boundary_list, clip_vision_dir;
  bool quiet = false;
  po::options_description opts(
      "vinf evaluate: temporal consistency measures of a video or a run's latents\n\n"
      "usage: vinf evaluate INPUT [--boundaries 16,32,48] [--clip-vision DIR] --out DIR [--quiet]\n\n"
      "INPUT is a video file (anything ffmpeg reads: .mp4, .webm, ...) or a run's latents.h5, whose latents\n"
      "are measured directly (evaluate.json says \"space\": \"latents\", else \"rgb\"). DIR (created when missing)\n"
      "gets evaluate.json (input, space, frames, width, height, definitions, series, summary, boundaries,\n"
      "seam; replaced when it exists) and evaluate.png (each series in its own panel against the pair\n"
      "index, top to bottom as below, boundaries as red vertical lines).\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&config_file, PathKind::file), kConfigOptionHelp)(
      "input", path_value(&input, PathKind::file), "the video file or latents.h5 (also the first positional argument)")(
      "out", path_value(&out_dir, PathKind::out_dir), "the output directory (created when missing)")("quiet,q", po::bool_switch(&quiet), "print only errors");
  opts.add(evaluate_options(boundary_list, clip_vision_dir));
  po::positional_options_description positional;
  positional.add("input", 1);
  po::variables_map vm;
  parse_options(args, opts, vm, "evaluate", &positional);
  if (vm.count("help")) {
    std::cout << opts << "\n" << kEvaluateMeasuresHelp
              << "\nExit status: 0 on success, 2 for bad input (the message names the file or option), 1 otherwise.\n";
    return 0;
  }
  VINF_INPUT_CHECK(!input.empty(), "vinf evaluate: give the INPUT video or latents.h5 (see vinf evaluate --help)");
  VINF_INPUT_CHECK(!out_dir.empty(), "vinf evaluate: --out DIR is required (see vinf evaluate --help)");
  VINF_INPUT_CHECK(io::is_regular_file(input), "vinf evaluate: input ", input,
                   " does not exist or is not a file; give a video file or a run's latents.h5");
  // A latents.h5 is read through parallel HDF5, which needs MPI (one process); a video does not.
  std::unique_ptr<mpi::Session> session;
  if (io::is_hdf5(input)) session = std::make_unique<mpi::Session>(nullptr, nullptr);
  std::optional<std::vector<std::int64_t>> boundaries;
  if (vm.count("boundaries")) boundaries = evaluate::parse_boundaries(boundary_list, 0);  // the frame count checked later
  evaluate::evaluate_file(input, out_dir, boundaries, clip_vision_dir, quiet);
  return 0;
}

}  // namespace vinf::app
