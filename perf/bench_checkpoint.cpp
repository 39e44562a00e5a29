// Checkpoint write and read bandwidth: every rank writes its frames of a [F, C, H, W] latent and
// the solver memory of the same shape (what `vinf generate` writes) collectively to one HDF5 file,
// then reads them back. Every chunk carries a Fletcher-32 checksum, computed on the write and
// checked on the read. Reports the slowest rank's time and the bandwidth over both arrays.
//   mpirun -np N vinf_bench_checkpoint [--frames 2304] [--channels 4] [--height 40] [--width 64]
//                                     [--repeat 3] [--dir DIR]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "job/job.hpp"

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

}  // namespace

int main(int argc, char** argv) {
  long long frames = 2304, channels = 4, height = 40, width = 64;
  int repeat = 3;
  std::string dir = std::filesystem::temp_directory_path().string();
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string k = argv[i];
    const char* v = argv[i + 1];
    if (k == "--frames") frames = std::atoll(v);
    else if (k == "--channels") channels = std::atoll(v);
    else if (k == "--height") height = std::atoll(v);
    else if (k == "--width") width = std::atoll(v);
    else if (k == "--repeat") repeat = std::atoi(v);
    else if (k == "--dir") dir = v;
  }
  vinf::job::JobPlan plan;  // the file's I/O only: the CPU, no group communicators
  plan.device = vinf::job::DeviceChoice::cpu;
  plan.clip_group = false;
  const std::unique_ptr<vinf::job::Job> job = vinf::job::start_job(plan);
  const vinf::mpi::Session& session = job->session();
  const int rank = job->rank(), size = job->size();
  if (frames % size != 0) {
    if (rank == 0) std::fprintf(stderr, "frames (%lld) must divide over %d ranks\n", frames, size);
    return 2;
  }
  auto barrier = [&] { job->world().barrier(job->host()); };
  const long long nf = frames / size, per_frame = channels * height * width;
  std::vector<float> latents(static_cast<std::size_t>(nf * per_frame)), prev(latents.size()), back(latents.size());
  for (std::size_t i = 0; i < latents.size(); ++i) {
    latents[i] = static_cast<float>(rank * 1000 + i % 997) * 1e-3f;
    prev[i] = -latents[i];
  }
  const vinf::io::FramePart part{{frames, channels, height, width}, rank * nf, nf};
  vinf::io::RunStamp stamp;
  stamp.config_json = stamp.numerics_json = "{}";
  stamp.model_fingerprint = "benchmark";
  stamp.world_size = stamp.clip_size = size;
  vinf::io::SolverState state{1, std::vector<std::int64_t>(30, 1), std::vector<double>(31, 1.0)};
  vinf::io::TextCache text{1, 77, 1024, std::vector<float>(77 * 1024, 0.5f), std::vector<float>(77 * 1024, 0.25f)};
  const std::string path = dir + "/vinf-bench-checkpoint.h5";
  const double bytes = 2.0 * static_cast<double>(frames * per_frame) * sizeof(float);
  double best_write = 1e30, best_read = 1e30;
  for (int r = 0; r < repeat; ++r) {
    barrier();
    double t0 = now();
    vinf::io::write_checkpoint(session.world(), path, stamp, part, latents.data(), prev.data(), state, text);
    best_write = std::min(best_write, session.max(now() - t0));
    barrier();
    t0 = now();
    vinf::io::read_checkpoint_frames(session.world(), path, rank * nf, nf, back.data(), back.data());
    best_read = std::min(best_read, session.max(now() - t0));
  }
  // The read put previous_x0 last into `back`.
  const bool all_ok = session.all(std::memcmp(back.data(), prev.data(), back.size() * sizeof(float)) == 0);
  if (rank == 0) {
    std::printf("ranks %d, latent [%lld, %lld, %lld, %lld] + solver state: %.1f MB; best of %d: write %.3f s (%.2f GB/s), "
                "read %.3f s (%.2f GB/s)%s\n",
                size, frames, channels, height, width, bytes / 1e6, repeat, best_write, bytes / best_write / 1e9,
                best_read, bytes / best_read / 1e9, all_ok ? "" : "  READ-BACK MISMATCH");
    std::remove(path.c_str());
  }
  return all_ok ? 0 : 1;
}
