// `vinf decode` (design.md §5): VAE decoding only, as its own job. With --latents IN.safetensors
// (`latents` F32 [N, 4, h, w], decoded exactly as given: no scaling) and --out OUT.safetensors it
// writes `decoded` F32 [N, 3, 8h, 8w], the raw decoder output. With --checkpoint X.h5 (a
// checkpoint or latents.h5 of vinf generate) the latents are divided by the VAE's scaling factor
// and written to --out DIR as video.mp4, contact.png and optionally PNG frames, frame by frame.
#include <boost/program_options.hpp>
#include <filesystem>
#include <chrono>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "pipeline/family.hpp"
#include "pipeline/run_dir.hpp"
#include "pipeline/wan_denoise.hpp"
#include "core/error.hpp"
#include "core/progress.hpp"
#include "io/atomic_file.hpp"
#include "infinity/config.hpp"
#include "io/checkpoint.hpp"
#include "io/h5file.hpp"
#include "io/image.hpp"
#include "io/path_query.hpp"
#include "io/json_file.hpp"
#include "io/safetensors.hpp"
#include "io/video.hpp"
#include "model/vae.hpp"
#include "model/wan_vae.hpp"
#include "job/job.hpp"
#include "mpi/session.hpp"
#include "ops/elementwise.hpp"
#include "ops/runtime.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

const Reporter kDecodeVoice("vinf decode:", true);

// The shape of /latents in f, a vinf checkpoint or latents.h5 at path; throws vinf::InputError for
// another file.
Shape run_latents_shape(const io::H5File& f, const std::string& path) {
  const std::string format = f.has_attribute("/", "format") ? f.text("/", "format") : "";
  VINF_INPUT_CHECK(format == io::kCheckpointFormat || format == io::kLatentsFormat, path,
                   " is neither a vinf checkpoint nor a latents.h5 (format '", format, "')");
  return f.shape("/latents");
}

// Refuses to replace dir's video.mp4 unless overwrite, then creates dir (and what is missing above
// it): removed again, while empty, when the decoding fails before the video is written.
std::unique_ptr<io::NewDirectory> video_dir(const std::string& dir, bool overwrite) {
  VINF_INPUT_CHECK(overwrite || !io::path_exists(dir + "/video.mp4"), dir,
                   "/video.mp4 exists; choose another --out or --overwrite");
  return std::make_unique<io::NewDirectory>(dir, "vinf decode: --out");
}

// A vinf HDF5 file's /latents to DIR/video.mp4, contact.png and PNG frames, one chunk of frames
// at a time (the whole video is never in memory).
int decode_checkpoint(Runtime& rt, const model::VaeDecoder& vae, const std::string& path, const std::string& dir,
                      const io::FrameWriter::Settings& settings, bool overwrite, std::int64_t frames_per_call,
                      std::int64_t tile) {
  const io::H5File f = io::H5File::open_serial(path);
  const Shape full = run_latents_shape(f, path);
  const model::VaeConfig& c = vae.config();
  VINF_INPUT_CHECK(full.rank() == 4 && full[1] == c.latent_channels, path, ": /latents ", full.str(),
                   " does not fit the VAE's ", c.latent_channels, " latent channels");
  const std::unique_ptr<io::NewDirectory> made = video_dir(dir, overwrite);
  const std::int64_t frames = full[0], h = full[2] * c.upscale(), w = full[3] * c.upscale();
  io::FrameWriter writer(dir, frames, w, h, settings);
  const std::int64_t per_frame = full[1] * full[2] * full[3], out_frame = c.out_channels * h * w;
  std::vector<float> latents(static_cast<std::size_t>(frames_per_call * per_frame));
  std::vector<float> images(static_cast<std::size_t>(frames_per_call * out_frame));
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(h * w * 3));
  for (std::int64_t f0 = 0; f0 < frames; f0 += frames_per_call) {
    const std::int64_t k = std::min(frames_per_call, frames - f0);
    f.read_frames("/latents", 0, f0, k, latents.data());
    const Shape in_shape{k, full[1], full[2], full[3]}, out_shape{k, c.out_channels, h, w};
    OwnedTensor x = rt.arena().empty(DType::f32, in_shape), y = rt.arena().empty(DType::f32, out_shape);
    ops::copy(rt.ctx(), Tensor::wrap(latents.data(), DType::f32, Device::cpu(), in_shape), x);
    ops::scale(rt.ctx(), x, 1.f / c.scaling_factor, x);
    vae.decode(rt.ctx(), x, y, frames_per_call, tile);
    ops::copy(rt.ctx(), y, Tensor::wrap(images.data(), DType::f32, Device::cpu(), out_shape));
    rt.synchronize();
    for (std::int64_t i = 0; i < k; ++i) {
      io::to_rgb8(images.data() + i * out_frame, h, w, rgb.data());
      writer.add(f0 + i, rgb.data());
    }
  }
  const std::string error = writer.finish();
  if (!error.empty()) throw Error(error);
  made->keep();
  std::string listed;
  for (const std::string& file : writer.files()) listed += (listed.empty() ? "" : ", ") + file;
  kDecodeVoice.note(frames, " frame(s) ", w, "x", h, " from ", path, "; wrote ", listed, " in ", dir);
  return 0;
}

}  // namespace

namespace {

// A Wan VAE's decoder on `latents` F32 [N, C, F, h, w] exactly as given, to `decoded` [N, 3,
// 1 + 4 (F - 1), 8h, 8w] (clamped to [-1, 1], as diffusers' decode returns it), in f32.
int decode_wan(Runtime& rt, const std::string& vae_dir, const std::string& latents_path, const std::string& out_path,
               std::int64_t tile) {
  const io::SafetensorsFile in(latents_path);
  const auto* e = in.find("latents");
  VINF_INPUT_CHECK(e != nullptr, latents_path, " has no tensor 'latents' [N, C, F, h, w]");
  VINF_INPUT_CHECK(e->shape.rank() == 5 && e->dtype == DType::f32, latents_path,
                   ": 'latents' for a Wan VAE must be F32 [N, C, F, h, w] (latent frames), got ",
                   io::safetensors_dtype_name(e->dtype), e->shape.str());
  const auto t0 = std::chrono::steady_clock::now();
  const model::WanVae vae = model::WanVae::load(vae_dir, rt, DType::f32, model::WanVae::decoder);
  const model::WanVaeConfig& c = vae.config();
  VINF_INPUT_CHECK(e->shape[1] == c.z_dim, latents_path, ": 'latents' has ", e->shape[1],
                   " channels but the VAE takes z_dim = ", c.z_dim);
  const Tensor latents = in.tensor("latents");
  const std::int64_t r = c.spatial_ratio();
  const Shape out_shape{latents.size(0), c.out_channels, c.video_frames(latents.size(2)), latents.size(3) * r,
                        latents.size(4) * r};
  OwnedTensor x = rt.arena().empty(DType::f32, latents.shape), y = rt.arena().empty(DType::f32, out_shape);
  ops::copy(rt.ctx(), latents, x);
  vae.decode(rt.ctx(), x, y, tile);
  std::vector<float> host(static_cast<std::size_t>(y.numel()));
  ops::copy(rt.ctx(), y, Tensor::wrap(host.data(), DType::f32, Device::cpu(), out_shape));
  rt.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io::write_safetensors(out_path, {{"decoded", DType::f32, out_shape, host.data(), {}}},
                        {{"generator", std::string("vinf ") + VINF_VERSION + " decode"}, {"vae", vae_dir}});
  kDecodeVoice.note("Wan VAE, ", latents.size(2), " latent frame(s) to ", out_shape[2], " frames ", out_shape[4], "x",
                    out_shape[3], " on ", rt.device().name(), " in ", seconds, " s; wrote ", out_path);
  return 0;
}

// A Wan run's latents.h5 or checkpoint (/latents [F, C, h, w], latent frames) to DIR/video.mp4,
// contact.png and PNG frames, as the run itself writes them (latents_std and latents_mean applied).
// On N ranks each decodes its share of the latent frames after the VAE's causal memory from the
// rank before, and rank 0 writes the frames (wan_write_video's parts): the frames of one rank.
int decode_wan_checkpoint(job::Job& job, const std::string& vae_dir, const std::string& path, const std::string& dir,
                          const io::FrameWriter::Settings& settings, bool overwrite, std::int64_t tile) {
  Runtime& rt = job.runtime();
  const mpi::Session& session = job.session();
  const io::H5File f = io::H5File::open_serial(path);
  const Shape full = run_latents_shape(f, path);
  const model::WanVae vae = model::WanVae::load(vae_dir, rt, DType::f32, model::WanVae::decoder);
  const model::WanVaeConfig& c = vae.config();
  VINF_INPUT_CHECK(full.rank() == 4 && full[1] == c.z_dim, path, ": /latents ", full.str(), " does not fit the Wan ",
                   "VAE's ", c.z_dim, " latent channels (is it a UNet run's? decode it with that model's vae/)");
  const int ranks = session.size(), me = session.rank();
  VINF_INPUT_CHECK(full[0] >= ranks, path, " holds ", full[0], " latent frame(s), fewer than the ", ranks,
                   " ranks that would decode them in parts; use at most ", full[0], " ranks");
  const std::string refused = pipeline::decided_by_root(session, [&]() -> std::string {
    try {
      video_dir(dir, overwrite)->keep();  // the ranks write into it: kept (one process decides)
    } catch (const InputError& e) {
      return e.what();
    }
    return "";
  });
  VINF_INPUT_CHECK(refused.empty(), refused);
  const infinity::FrameRange mine = infinity::clip_frames(full[0], ranks, me);
  const Shape part{mine.count, full[1], full[2], full[3]};
  std::vector<float> host(static_cast<std::size_t>(part.numel()));
  f.read_frames("/latents", 0, mine.first, mine.count, host.data());
  OwnedTensor latents = rt.arena().empty(DType::f32, {1, full[1], mine.count, full[2], full[3]});
  ops::copy(rt.ctx(), Tensor::wrap(host.data(), DType::f32, Device::cpu(), part).permute({1, 0, 2, 3}).unsqueeze(0),
            latents);
  pipeline::WanVideoParts parts;
  if (ranks > 1) {
    parts.session = &session;
    for (int k = 0; k < ranks; ++k) parts.ranks.push_back(k);
    parts.index = me;
    parts.total = full[0];
  }
  pipeline::WanVideoFiles video = pipeline::wan_write_video(rt, vae, latents, dir, settings, tile, parts);
  session.broadcast(video.error);
  if (!video.error.empty()) throw Error(video.error);
  video.seconds = session.max(video.seconds);
  if (me != 0) return 0;
  std::string listed;
  for (const std::string& file : video.files)
    if (file.find('/') == std::string::npos) listed += (listed.empty() ? "" : ", ") + file;
  kDecodeVoice.note("Wan VAE, ", full[0], " latent frame(s) to ", c.video_frames(full[0]), " frames ",
                    full[3] * c.spatial_ratio(), "x", full[2] * c.spatial_ratio(), " from ", path,
                    ranks > 1 ? " over " + std::to_string(ranks) + " ranks" : "", " in ", video.seconds, " s; wrote ",
                    listed, " in ", dir);
  return 0;
}

}  // namespace

int decode(const std::vector<std::string>& args) {
  std::string config_file, vae_dir, latents_path, checkpoint_path, out_path, device_opt = "auto", dtype_opt = "auto";
  bool tf32 = false;
  std::int64_t frames_per_call = 4, tile = 0;
  io::FrameWriter::Settings video;
  bool overwrite = false;
  po::options_description opts(
      "vinf decode: VAE decoding only\n\n"
      "usage: vinf decode --vae DIR --latents IN.safetensors --out OUT.safetensors\n"
      "       vinf decode --vae DIR --checkpoint X.h5 --out DIR [--output.png]\n\n"
      "IN holds latents F32 [N, 4, h, w], decoded exactly as given (no division by the scaling factor);\n"
      "for a Wan2.1 VAE (AutoencoderKLWan) latents F32 [N, C, F, h, w] of latent frames, and OUT gets\n"
      "decoded [N, 3, 1 + 4 (F - 1), 8h, 8w] (no latents_mean / latents_std applied, clamped to [-1, 1]);\n"
      "OUT gets decoded F32 [N, 3, 8h, 8w], the raw decoder output (no clamp). X.h5 is a checkpoint or the\n"
      "latents.h5 of vinf generate: its latents are divided by the VAE's scaling factor (a Wan VAE: times\n"
      "latents_std plus latents_mean, as the run decodes them) and DIR gets video.mp4 and contact.png (and\n"
      "frames/ with --output.png). A Wan run's latents also decode over N ranks (mpirun -np N): each\n"
      "decodes its share of the latent frames after the causal VAE's memory from the rank before, and\n"
      "rank 0 writes the frames, those of one rank.\n\n"
      "Options come from the command line and from --config FILE (INI: `vae = DIR`; `[output] png = true`\n"
      "is --output.png true); the command line wins.\n\nOptions");
  opts.add_options()("help,h", "show this help")("config", path_value(&config_file, PathKind::file), kConfigOptionHelp)(
      "vae", path_value(&vae_dir, PathKind::directory),
      "VAE directory (config.json + diffusion_pytorch_model.safetensors), or a pipeline "
      "root with vae/")("latents", path_value(&latents_path, PathKind::file), "input latents (safetensors)")(
      "checkpoint", path_value(&checkpoint_path, PathKind::file), "a checkpoint or latents.h5 of vinf generate")(
      "out", po::value(&out_path)->value_name("OUT"),
      "with --latents: the output file (safetensors; written under a temporary name, then renamed); with "
      "--checkpoint: the directory of video.mp4")("device", po::value(&device_opt)->default_value(device_opt),
                                                  "auto | cpu | cuda")(
      "dtype", po::value(&dtype_opt)->default_value(dtype_opt), kDtypeOptionHelp)("tf32", po::bool_switch(&tf32),
                                                                                  kTf32OptionHelp)(
      "frames-per-call", ranged(&frames_per_call, 1, 4096)->default_value(frames_per_call),
      "images decoded at once (bounds the memory; the numbers do not depend on it)")(
      "vae.tile", zero_or(&tile, 1, 2048)->default_value(tile),
      "run the convolutions of images larger than N x N latent pixels over N x N tiles (8N x 8N pixels at "
      "full size) with whole-image GroupNorm statistics (a Wan VAE's RMS norms are per pixel): the same pixels "
      "as whole-image decoding, with the convolutions' working memory bounded by the tile; 0: whole images; "
      "e.g. 16")("output.video", po::value(&video.video)->default_value(video.video)->implicit_value(true),
                 "with --checkpoint: write DIR/video.mp4")(
      "output.fps", ranged_above(&video.fps, 0, 1000)->default_value(video.fps), "frame rate of video.mp4")(
      "output.png", po::value(&video.png)->default_value(video.png)->implicit_value(true),
      "with --checkpoint: also write DIR/frames/frame-NNNNNN.png")(
      "output.ffmpeg", po::value(&video.ffmpeg)->default_value(video.ffmpeg), "the ffmpeg program")(
      "overwrite", po::value(&overwrite)->default_value(overwrite)->implicit_value(true),
      "replace an existing DIR/video.mp4");
  po::variables_map vm;
  parse_options(args, opts, vm, "decode");
  if (vm.count("help")) {
    std::cout << opts
              << "\nExit status: 0 on success, 2 for bad input (the message names the file and key), 1 otherwise.\n";
    return 0;
  }
  for (const char* required : {"vae", "out"})
    VINF_INPUT_CHECK(vm.count(required), "vinf decode: --", required, " is required (see vinf decode --help)");
  VINF_INPUT_CHECK(!out_path.empty(), "vinf decode: --out is empty: give the output file");
  VINF_INPUT_CHECK(vm.count("latents") + vm.count("checkpoint") == 1,
                   "vinf decode: give either --latents IN.safetensors or --checkpoint X.h5 (see vinf decode --help)");
  const std::string out_problem = path_problem(out_path, latents_path.empty() ? PathKind::out_dir : PathKind::new_file);
  VINF_INPUT_CHECK(out_problem.empty(), "vinf decode: --out ", out_path, " ", out_problem);
  job::JobPlan plan;  // one job of its own on each rank: no group communicators
  plan.dtype = job::parse_dtype_choice(dtype_opt);
  plan.device = job::parse_device_choice(device_opt);
  plan.tf32 = tf32;
  plan.clip_group = false;
  const std::unique_ptr<job::Job> job = job::start_job(plan);
  const Device device = job->device();
  const DType dtype = job->dtype();
  Runtime& rt = job->runtime();

  if (pipeline::vae_family(vae_dir) == pipeline::ModelFamily::wan) {
    if (!checkpoint_path.empty())
      return decode_wan_checkpoint(*job, vae_dir, checkpoint_path, out_path, video, overwrite, tile);
    return decode_wan(rt, vae_dir, latents_path, out_path, tile);
  }
  if (!checkpoint_path.empty()) {
    const model::VaeDecoder vae = model::VaeDecoder::load(vae_dir, rt, dtype);
    return decode_checkpoint(rt, vae, checkpoint_path, out_path, video, overwrite, frames_per_call, tile);
  }
  const io::SafetensorsFile in(latents_path);
  const auto* e = in.find("latents");
  VINF_INPUT_CHECK(e != nullptr, latents_path, " has no tensor 'latents' [N, 4, h, w]");
  VINF_INPUT_CHECK(e->shape.rank() == 4, latents_path, ": 'latents' must be [N, C, h, w], got ", e->shape.str());
  const auto t0 = std::chrono::steady_clock::now();
  const model::VaeDecoder vae = model::VaeDecoder::load(vae_dir, rt, dtype);
  const model::VaeConfig& c = vae.config();
  VINF_INPUT_CHECK(e->shape[1] == c.latent_channels, latents_path, ": 'latents' has ", e->shape[1],
                   " channels but the VAE takes latent_channels = ", c.latent_channels);
  const Tensor latents = in.tensor("latents");
  const Shape out_shape{latents.size(0), c.out_channels, latents.size(2) * c.upscale(), latents.size(3) * c.upscale()};
  OwnedTensor x = rt.arena().empty(DType::f32, latents.shape), y = rt.arena().empty(DType::f32, out_shape);
  ops::copy(rt.ctx(), latents, x);
  vae.decode(rt.ctx(), x, y, frames_per_call, tile);
  std::vector<float> host(static_cast<std::size_t>(y.numel()));
  ops::copy(rt.ctx(), y, Tensor::wrap(host.data(), DType::f32, Device::cpu(), out_shape));
  rt.synchronize();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  io::write_safetensors(out_path, {{"decoded", DType::f32, out_shape, host.data(), {}}},
                        {{"generator", std::string("vinf ") + VINF_VERSION + " decode"}, {"vae", vae_dir}});
  kDecodeVoice.note(latents.size(0), " frame(s) ", out_shape[3], "x", out_shape[2], " on ", device.name(), " in ",
                    seconds, " s; wrote ", out_path);
  return 0;
}

}  // namespace vinf::app
