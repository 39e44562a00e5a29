#include "pipeline/wan_extend.hpp"

#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/progress.hpp"
#include "evaluate/evaluate.hpp"
#include "io/atomic_file.hpp"
#include "io/image.hpp"
#include "io/image_resize.hpp"
#include "io/path_query.hpp"
#include "io/video.hpp"
#include "io/video_reader.hpp"
#include "model/wan_config.hpp"
#include "mpi/session.hpp"
#include "pipeline/run_dir.hpp"
#include "pipeline/video_pipeline.hpp"

namespace fs = std::filesystem;

namespace vinf::pipeline {

namespace {

using json = nlohmann::ordered_json;

// What the root learns of the input before the segment runs, reading it once frame by frame (a
// chain's input grows with every link; only its last frame is kept): its frames and size, and the
// conditioning picture written where the segment's --image reads it.
struct ExtendInput {
  std::int64_t frames = 0, width = 0, height = 0;
  std::string error;
};

ExtendInput read_extend_input(GenerateSpec& o, const std::string& out_dir) {
  ExtendInput in;
  try {
    std::vector<std::uint8_t> last;
    in.frames = io::for_each_frame(o.extend, "vinf extend --video", 0, o.ffmpeg,
                                   [&](const std::uint8_t* rgb, std::int64_t w, std::int64_t h) {
                                     last.assign(rgb, rgb + w * h * 3);
                                     in.width = w;
                                     in.height = h;
                                   });
    if (!o.size_given) {
      o.width = in.width;
      o.height = in.height;
    }
    VINF_INPUT_CHECK(o.height % 16 == 0 && o.width % 16 == 0, "vinf extend --video ", o.extend, " is ", in.width, "x",
                     in.height, "; a Wan video's height and width are multiples of 16: ",
                     "give --video.height and --video.width (the input is resized to them for the join)");
    std::error_code ec;
    fs::create_directories(out_dir, ec);
    VINF_INPUT_CHECK(!ec, "cannot create the output directory ", out_dir, ": ", ec.message());
    io::write_png(out_dir + "/last-frame.png", last.data(), in.width, in.height);
  } catch (const InputError& e) {
    in.error = e.what();
  }
  return in;
}

// The joined video, written as it is read: the input's frames (resized with Pillow's Lanczos
// where the size differs), then the segment's after its first.
std::string extend_join_videos(const GenerateSpec& o, std::int64_t input_frames, const std::string& out_dir,
                               std::int64_t& joined) {
  const io::RgbFrames segment = io::read_frames(out_dir + "/segment/frames", "the segment's frames", 0, o.ffmpeg);
  const std::int64_t w = segment.width, h = segment.height;
  joined = input_frames + static_cast<std::int64_t>(segment.frames.size()) - 1;
  io::FrameWriter writer(out_dir, joined, w, h, {true, o.png, o.output_fps, o.ffmpeg});
  std::int64_t at = 0;
  io::for_each_frame(o.extend, "vinf extend --video", input_frames, o.ffmpeg,
                     [&](const std::uint8_t* rgb, std::int64_t iw, std::int64_t ih) {
                       if (iw == w && ih == h) return writer.add(at++, rgb);
                       writer.add(at++, io::resize_rgb8(rgb, iw, ih, w, h, io::ResizeFilter::lanczos).data());
                     });
  for (std::size_t k = 1; k < segment.frames.size(); ++k) writer.add(at++, segment.frames[k].data());
  return writer.finish();
}

}  // namespace

VideoOutcome extend_video(GenerateSpec& o, job::Job& job, VideoPipeline& family) {
  const mpi::Session& world = job.session();
  const Reporter report("vinf extend:", job.root(), o.quiet);
  const std::string out_dir = choose_out_dir(o, world);
  ExtendInput input;
  if (job.root()) input = read_extend_input(o, out_dir);
  world.broadcast(input.error);
  VINF_INPUT_CHECK(input.error.empty(), input.error);
  std::string shape = std::to_string(o.height) + " " + std::to_string(o.width) + " " + std::to_string(input.frames);
  world.broadcast(shape);
  std::int64_t size[2] = {0, 0}, count = 0;
  std::istringstream(shape) >> size[0] >> size[1] >> count;
  report.say("continuing " + o.extend + " (" + std::to_string(count) + " frames) from its last frame with " +
             std::to_string(o.frames) + " new frames at " + std::to_string(size[1]) + "x" + std::to_string(size[0]) +
             " into " + out_dir + "/");
  // The segment: the image-to-video run from the last frame, its frames kept as PNG for the join.
  GenerateSpec seg = o;
  seg.height = size[0];
  seg.width = size[1];
  seg.image = out_dir + "/last-frame.png";
  seg.extend.clear();
  seg.out = out_dir + "/segment";
  seg.video = seg.png = true;
  seg.evaluate = false;
  if (!o.resume.empty()) seg.resume = "auto";
  const VideoOutcome outcome = family.run(seg, job, nullptr);
  if (outcome.end == VideoEnd::stopped) return outcome;
  std::string error;
  std::int64_t joined = 0;
  if (job.root()) {
    try {
      error = extend_join_videos(o, count, out_dir, joined);
      if (!o.png) fs::remove_all(out_dir + "/segment/frames");
      if (error.empty() && o.evaluate)
        evaluate::evaluate_file(out_dir + "/video.mp4", out_dir, std::vector<std::int64_t>{count},
                                o.evaluate_clip_vision, o.quiet);
      json record = {{"format", "vinf-extend"},    {"input", o.extend},
                     {"input_frames", count},      {"segment", "segment"},
                     {"new_frames", o.frames - 1}, {"frames", joined},
                     {"seam_frame", count},        {"conditioning", "last-frame.png"}};
      if (error.empty() && o.evaluate) {
        std::ifstream in(out_dir + "/evaluate.json");
        const json measured = json::parse(in, nullptr, false);
        if (measured.is_object() && measured.contains("seam") && !measured["seam"].empty())
          record["seam"] = measured["seam"][0];
      }
      io::write_file_atomically(out_dir + "/extend.json", record.dump(2) + "\n");
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  world.broadcast(error);
  VINF_CHECK(error.empty(), "vinf extend: joining ", o.extend, " and the segment in ", out_dir, ": ", error);
  report.say("wrote " + out_dir + "/video.mp4: " + std::to_string(count) + " frames of " + o.extend + ", then " +
             std::to_string(o.frames - 1) + " new (the seam at frame " + std::to_string(count) + ")" +
             (o.evaluate
                  ? "; the seam's measures in evaluate.json"
                  : "; vinf evaluate " + out_dir + "/video.mp4 --boundaries " + std::to_string(count) + " reports it"));
  VideoOutcome done = outcome;
  done.out_dir = out_dir;
  return done;
}

}  // namespace vinf::pipeline
