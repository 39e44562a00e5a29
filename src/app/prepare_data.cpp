// `vinf prepare-data`: videos and their captions to a training data file (train/data.hpp): every
// video decoded by ffmpeg, scaled to cover the training size and cropped around the centre, cut
// into clips of F frames, each clip through the VAE's encoder and each caption through the text
// encoder.
#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "core/utf8.hpp"
#include "io/h5file.hpp"
#include "io/path_query.hpp"
#include "io/video_reader.hpp"
#include "job/job.hpp"
#include "model/clip_text.hpp"
#include "model/tokenizer.hpp"
#include "model/vae.hpp"
#include "ops/elementwise.hpp"
#include "train/data.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;

namespace vinf::app {

namespace {

const Reporter kPrepareDataVoice("vinf prepare-data:", true);

struct PrepareOptions {
  std::string videos_dir, captions, out_path, model_dir, device = "auto";
  std::int64_t width = 512, height = 320, frames = 16, frame_step = 1, clip_step = 0, max_clips = 0;
  bool strict = false, quiet = false, overwrite = false;
};

struct Caption {
  std::string video, text;
  int line = 0;
};

// CAPTIONS: one `VIDEO<TAB>caption` per line (VIDEO relative to the videos folder); empty lines and
// lines starting with # are skipped. A line without a tab, invalid UTF-8 or a video listed twice
// is a problem of that line.
std::vector<Caption> read_captions(const std::string& path, std::vector<std::string>& problems) {
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "the captions file ", path, " cannot be read");
  std::vector<Caption> out;
  std::set<std::string> seen;
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    const std::string where = path + " line " + std::to_string(number);
    const std::size_t bad = first_invalid_utf8(line);
    if (bad != std::string::npos) {
      problems.push_back(where + " is not valid UTF-8 (byte " + std::to_string(bad) + ")");
      continue;
    }
    const std::size_t tab = line.find('\t');
    if (tab == std::string::npos || tab == 0) {
      problems.push_back(where + " is not `VIDEO<TAB>caption`");
      continue;
    }
    Caption c{line.substr(0, tab), line.substr(tab + 1), number};
    if (!seen.insert(c.video).second) {
      problems.push_back(where + ": " + c.video + " is listed a second time");
      continue;
    }
    out.push_back(std::move(c));
  }
  return out;
}

// The clips of one video: frames [first + k * frame_step] for k < frames, first = 0, clip_step, ...
struct VideoClips {
  std::vector<std::int64_t> first_frames;
  std::vector<float> latents;  // per clip (C, F, h, w)
};

po::options_description prepare_option_table(PrepareOptions& o) {
  po::options_description opts(
      "vinf prepare-data: videos and captions to a training data file (VAE latents and text embeddings)\n\n"
      "usage: vinf prepare-data VIDEOS_DIR CAPTIONS --model PIPELINE --out data.h5 [options]\n\n"
      "CAPTIONS lists one `VIDEO<TAB>caption` per line, VIDEO relative to VIDEOS_DIR (# starts a comment).\n"
      "Each video is decoded by ffmpeg, scaled to cover --data.width x --data.height and cropped around\n"
      "the centre, and cut into clips of --data.frames frames (every --data.frame-step-th frame, a new\n"
      "clip every --data.clip-step frames). Each clip goes through the pipeline's VAE encoder (the\n"
      "latent distribution's mean times the scaling factor), each caption through its text encoder.\n"
      "A video that cannot be read, is too short or has no caption, and a caption that names no video\n"
      "or is malformed, is reported by name and skipped (--strict: refused, exit 2). The file is\n"
      "written under a temporary name and renamed at the end; the clips stay in memory until then.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(nullptr, PathKind::file), kConfigOptionHelp)(
      "videos", path_value(&o.videos_dir, PathKind::directory),
      "the folder of the videos (also the first positional argument)")(
      "captions", path_value(&o.captions, PathKind::file), "the captions file (also the second positional argument)")(
      "model", path_value(&o.model_dir, PathKind::directory),
      "a pipeline directory with vae/ (with its encoder), text_encoder/ and tokenizer/")(
      "out", path_value(&o.out_path, PathKind::new_file),
      "the training data file to write (HDF5); an existing one is refused unless --overwrite")(
      "overwrite", po::bool_switch(&o.overwrite), "replace an existing --out file (only once the new one is complete)")(
      "data.width", ranged(&o.width, 8, 16384)->default_value(o.width),
      "frame width in pixels (a multiple of the VAE's scale)")(
      "data.height", ranged(&o.height, 8, 16384)->default_value(o.height), "frame height in pixels (likewise)")(
      "data.frames", ranged(&o.frames, 1, 10000)->default_value(o.frames), "frames per clip")(
      "data.frame-step", ranged(&o.frame_step, 1, 10000)->default_value(o.frame_step),
      "take every N-th decoded frame (2 halves the frame rate)")(
      "data.clip-step", ranged(&o.clip_step, 0, 1000000)->default_value(o.clip_step),
      "decoded frames between the starts of two clips of a video (0: frames x frame-step, clips side by side)")(
      "data.max-clips", ranged(&o.max_clips, 0, 1000000)->default_value(o.max_clips),
      "at most this many clips per video (0: all)")("device", po::value(&o.device)->default_value(o.device),
                                                    "auto | cpu | cuda (the encoders compute in f32)")(
      "strict", po::bool_switch(&o.strict), "refuse (exit 2) on any bad video or caption instead of skipping it")(
      "quiet,q", po::bool_switch(&o.quiet), "print only warnings and errors");
  return opts;
}

// What the phases of prepare-data share: the options, the encoders, the problems skipped so far,
// and the clips made.
struct Prepared {
  const PrepareOptions& o;
  Runtime& rt;
  std::vector<std::string> problems;
  std::unique_ptr<model::VaeEncoder> vae;
  std::int64_t lat_c = 0, lh = 0, lw = 0;
  std::vector<float> all_latents, all_text;
  std::vector<std::int64_t> clip_video, clip_first;
  std::vector<std::string> video_names, caption_texts;
  std::int64_t length = 0, width = 0;

  Reporter report{"vinf prepare-data:", true, o.quiet};

  // A bad video or caption: refused with --strict, else said and skipped.
  void problem(const std::string& what) {
    VINF_INPUT_CHECK(!o.strict, what, " (--strict refuses every bad video and caption)");
    report.warn(what + "; skipped");
    problems.push_back(what);
  }
};

// The captions, and the videos in the folder without one (one line each, not silently ignored).
std::vector<Caption> read_all_captions(Prepared& d) {
  const PrepareOptions& o = d.o;
  std::vector<std::string> caption_problems;
  std::vector<Caption> captions = read_captions(o.captions, caption_problems);
  for (const std::string& p : caption_problems) d.problem(p);
  std::set<std::string> listed;
  for (const Caption& c : captions) listed.insert(c.video);
  for (const auto& e : fs::recursive_directory_iterator(o.videos_dir)) {
    if (!e.is_regular_file()) continue;
    const std::string rel = fs::relative(e.path(), o.videos_dir).generic_string();
    if (!listed.count(rel)) d.problem("video " + rel + " has no caption in " + o.captions);
  }
  return captions;
}

// One captioned video: decoded (every frame kept, w x h x 3 bytes each), cut into clips, each
// clip through the VAE encoder. False when it was skipped.
bool encode_video(Prepared& d, const Caption& c, std::size_t vi, std::size_t videos,
                  std::chrono::steady_clock::time_point t0) {
  const PrepareOptions& o = d.o;
  const std::string path = (fs::path(o.videos_dir) / c.video).string();
  if (!io::is_regular_file(path)) {
    d.problem(o.captions + " line " + std::to_string(c.line) + " names " + c.video + ", which is not a file in " +
              o.videos_dir);
    return false;
  }
  std::vector<std::vector<std::uint8_t>> decoded;
  std::vector<std::uint8_t> frame(static_cast<std::size_t>(o.width * o.height * 3));
  try {
    io::probe_video(path);
    io::VideoReader reader(path, o.width, o.height);
    while (reader.read(frame.data())) decoded.push_back(frame);
  } catch (const InputError& e) {
    d.problem("video " + c.video + ": " + e.what());
    return false;
  }
  const auto n = static_cast<std::int64_t>(decoded.size());
  const std::int64_t span = (o.frames - 1) * o.frame_step + 1;
  if (n < span) {
    d.problem("video " + c.video + " has " + std::to_string(n) + " frames, fewer than a clip's " +
              std::to_string(span));
    return false;
  }
  std::vector<std::int64_t> firsts;
  for (std::int64_t f0 = 0;
       f0 + span <= n && (o.max_clips == 0 || static_cast<std::int64_t>(firsts.size()) < o.max_clips);
       f0 += o.clip_step)
    firsts.push_back(f0);
  const std::int64_t per_clip = d.lat_c * o.frames * d.lh * d.lw;
  for (std::int64_t f0 : firsts) {
    std::vector<const std::uint8_t*> clip;
    for (std::int64_t k = 0; k < o.frames; ++k)
      clip.push_back(decoded[static_cast<std::size_t>(f0 + k * o.frame_step)].data());
    const std::size_t at = d.all_latents.size();
    d.all_latents.resize(at + static_cast<std::size_t>(per_clip));
    train::encode_clip(d.rt.ctx(), *d.vae, clip, o.width, o.height, d.all_latents.data() + at);
    d.clip_video.push_back(static_cast<std::int64_t>(d.video_names.size()));
    d.clip_first.push_back(f0);
  }
  d.video_names.push_back(c.video);
  d.caption_texts.push_back(c.text);
  d.report.say("video " + std::to_string(vi + 1) + "/" + std::to_string(videos) + " " + c.video + ": " +
               std::to_string(n) + " frames, " + std::to_string(firsts.size()) + " clip(s) (" +
               format_number(seconds_since(t0)) + " s)");
  return true;
}

// Each caption once through the text encoder, then one row per clip.
void encode_captions(Prepared& d, const model::ClipTokenizer& tokenizer, const model::ClipTextModel& text_encoder) {
  std::vector<model::TokenizedText> tokens;
  const std::vector<float> hidden = model::encode_prompts(d.rt, tokenizer, text_encoder, d.caption_texts, &tokens);
  for (std::size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i].truncated())
      kPrepareDataVoice.warn("the caption of ", d.video_names[i], " has ", tokens[i].length,
                             " tokens; the text encoder takes ", tokenizer.max_length(), ", so these are dropped: '",
                             excerpt(tokens[i].dropped), "'");
  d.length = tokenizer.max_length();
  d.width = text_encoder.config().hidden_size;
  const auto row = static_cast<std::size_t>(d.length * d.width);
  for (std::int64_t v : d.clip_video) {
    const float* src = hidden.data() + static_cast<std::size_t>(v) * row;
    d.all_text.insert(d.all_text.end(), src, src + row);
  }
}

// The data file, under a temporary name renamed at the end: nothing half-written is left behind.
void write_data_file(const Prepared& d, job::Job& job) {
  const PrepareOptions& o = d.o;
  const auto clips = static_cast<std::int64_t>(d.clip_video.size());
  const std::string partial = o.out_path + ".partial";
  try {
    io::H5File f = io::H5File::create(job.session().world(), partial);  // the one process: size 1
    f.write_frames("/latents", {clips, d.lat_c, o.frames, d.lh, d.lw}, 0, 0, clips, d.all_latents.data());
    f.write_frames("/text", {clips, d.length, d.width}, 0, 0, clips, d.all_text.data());
    f.write_small("/clip_video", DType::i64, {clips}, d.clip_video.data());
    f.write_small("/clip_first_frame", DType::i64, {clips}, d.clip_first.data());
    f.write_text("/videos", nlohmann::json(d.video_names).dump());
    f.write_text("/captions", nlohmann::json(d.caption_texts).dump());
    f.set_text("/", "format", train::kDataFormat);
    f.set_int("/", "frames", o.frames);
    f.set_int("/", "frame_step", o.frame_step);
    f.set_int("/", "clip_step", o.clip_step);
    f.set_int("/", "width", o.width);
    f.set_int("/", "height", o.height);
    f.set_text("/", "scaling_factor", std::to_string(d.vae->config().scaling_factor));
    f.set_text("/", "vae", o.model_dir + "/vae");
    f.set_text("/", "text_encoder", o.model_dir + "/text_encoder");
    f.set_text("/", "generator", std::string("vinf ") + VINF_VERSION + " prepare-data");
    f.close();
  } catch (...) {
    std::error_code ignored;
    fs::remove(partial, ignored);
    throw;
  }
  std::error_code ec;
  fs::rename(partial, o.out_path, ec);
  VINF_CHECK(!ec, "cannot rename ", partial, " to ", o.out_path, ": ", ec.message());
}

}  // namespace

int prepare_data(const std::vector<std::string>& args) {
  PrepareOptions o;
  const po::options_description opts = prepare_option_table(o);
  po::positional_options_description positional;
  positional.add("videos", 1).add("captions", 1);
  po::variables_map vm;
  parse_options(args, opts, vm, "prepare-data", &positional);
  if (vm.count("help")) {
    std::cout << opts
              << "\nExit status: 0 on success, 2 for bad input (the message names the file, video or line),\n"
                 "1 for other failures. Runs in one process.\n";
    return 0;
  }
  for (const char* required : {"videos", "captions", "model", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf prepare-data: ",
                     required == std::string("videos")     ? "VIDEOS_DIR"
                     : required == std::string("captions") ? "CAPTIONS"
                                                           : std::string("--") + required,
                     " is required (see vinf prepare-data --help)");
  if (o.clip_step == 0) o.clip_step = o.frames * o.frame_step;
  VINF_INPUT_CHECK(!o.out_path.empty(), "vinf prepare-data: --out is empty: give the data file");
  // Refused before any work: an existing file is replaced only when asked.
  VINF_INPUT_CHECK(o.overwrite || !io::path_exists(o.out_path), "vinf prepare-data: --out ", o.out_path,
                   " exists; give --overwrite to replace it, or another file name");

  job::JobPlan plan;
  plan.device = job::parse_device_choice(o.device);
  plan.dtype = DType::f32;
  plan.clip_group = false;
  const std::unique_ptr<job::Job> job = job::start_job(plan);
  VINF_INPUT_CHECK(job->size() == 1, "vinf prepare-data runs in one process; launch it without mpirun (got ",
                   job->size(), " ranks)");
  Prepared d{o, job->runtime()};
  d.vae = std::make_unique<model::VaeEncoder>(model::VaeEncoder::load(o.model_dir, d.rt, DType::f32));
  const std::int64_t up = d.vae->config().upscale();
  VINF_INPUT_CHECK(o.width % up == 0 && o.height % up == 0 && o.width > 0 && o.height > 0, "--data.width ", o.width,
                   " and --data.height ", o.height, " must be positive multiples of the VAE's scale ", up);
  const model::ClipTokenizer tokenizer = model::ClipTokenizer::load(o.model_dir + "/tokenizer");
  const model::ClipTextModel text_encoder = model::ClipTextModel::load(o.model_dir, d.rt, DType::f32);
  const std::vector<Caption> captions = read_all_captions(d);
  d.lat_c = d.vae->config().latent_channels;
  d.lh = o.height / up;
  d.lw = o.width / up;
  const auto t0 = std::chrono::steady_clock::now();
  for (std::size_t vi = 0; vi < captions.size(); ++vi) encode_video(d, captions[vi], vi, captions.size(), t0);
  VINF_INPUT_CHECK(!d.clip_video.empty(), "vinf prepare-data: no clip was made (", d.problems.size(),
                   " video(s) or caption(s) skipped, listed above); nothing written");
  encode_captions(d, tokenizer, text_encoder);
  write_data_file(d, *job);
  kPrepareDataVoice.note(
      "wrote ", o.out_path, ": ", d.clip_video.size(), " clip(s) of ", o.frames, " frames (", d.lat_c, "x", d.lh, "x",
      d.lw, " latents) from ", d.video_names.size(), " video(s)",
      d.problems.empty() ? std::string() : ", " + std::to_string(d.problems.size()) + " problem(s) skipped", " in ",
      format_number(seconds_since(t0)), " s");
  return 0;
}

}  // namespace vinf::app
