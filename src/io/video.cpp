#include "io/video.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "io/spawn.hpp"

extern char** environ;

namespace vinf::io {

namespace {

std::string log_tail(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  std::string tail;
  for (std::size_t i = lines.size() > 4 ? lines.size() - 4 : 0; i < lines.size(); ++i) tail += " | " + lines[i];
  return tail.empty() ? "" : "; ffmpeg said:" + tail;
}

std::string number(double v) {
  std::ostringstream s;
  s << v;
  return s.str();
}

}  // namespace

VideoEncoder::VideoEncoder(const std::string& ffmpeg, const std::string& path, std::int64_t width, std::int64_t height,
                           double fps)
    : path_(path), partial_(path + ".partial.mp4"), log_(path + ".ffmpeg.log"), frame_bytes_(width * height * 3) {
  VINF_CHECK(width % 2 == 0 && height % 2 == 0, "MP4 (yuv420p) needs an even frame size, got ", width, "x", height);
  std::signal(SIGPIPE, SIG_IGN);  // a dead ffmpeg is an error from write(), not a signal
  int fds[2];
  VINF_CHECK(pipe(fds) == 0, "pipe() failed: ", std::strerror(errno));
  const std::string size = std::to_string(width) + "x" + std::to_string(height), rate = number(fps);
  std::vector<std::string> args = {ffmpeg, "-hide_banner", "-loglevel", "error", "-y", "-f", "rawvideo",
                                   "-pix_fmt", "rgb24", "-s", size, "-r", rate, "-i", "-", "-an", "-c:v",
                                   "libx264", "-pix_fmt", "yuv420p", "-movflags", "+faststart", "-f", "mp4", partial_};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], 0);
  posix_spawn_file_actions_addclose(&actions, fds[1]);
  posix_spawn_file_actions_addopen(&actions, 1, log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_adddup2(&actions, 1, 2);
  const SpawnAttributes attributes;
  const int rc = posix_spawnp(&pid_, ffmpeg.c_str(), &actions, attributes.get(), argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[0]);
  if (rc != 0) {
    close(fds[1]);
    pid_ = -1;
    std::remove(log_.c_str());
    throw Error("cannot run ffmpeg ('" + ffmpeg + "': " + std::strerror(rc) +
                "); install it (scripts/setup does) or give --output.ffmpeg PATH, or --output.video=false for "
                "latents only");
  }
  fd_ = fds[1];
}

VideoEncoder::~VideoEncoder() {
  if (fd_ >= 0) close(fd_);
  if (pid_ > 0) {
    // Abandoned while running (the run stopped or failed elsewhere): nothing of it is kept.
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
    std::remove(partial_.c_str());
    std::remove(log_.c_str());
  }
}

void VideoEncoder::fail(const std::string& what) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  int status = 0;
  if (pid_ > 0) waitpid(pid_, &status, 0);
  pid_ = -1;
  std::remove(partial_.c_str());
  const std::string exit_text = WIFEXITED(status)     ? "exit status " + std::to_string(WEXITSTATUS(status))
                                : WIFSIGNALED(status) ? "signal " + std::to_string(WTERMSIG(status))
                                                      : "unknown status";
  throw Error("ffmpeg " + what + " (" + exit_text + ")" + log_tail(log_) + "; its log is " + log_);
}

void VideoEncoder::write(const std::uint8_t* rgb) {
  VINF_CHECK(fd_ >= 0, "VideoEncoder::write after finish");
  std::int64_t done = 0;
  while (done < frame_bytes_) {
    const ssize_t n = ::write(fd_, rgb + done, static_cast<std::size_t>(frame_bytes_ - done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail("stopped reading frames while " + path_ + " was being written");
    done += n;
  }
}

void VideoEncoder::finish() {
  close(fd_);
  fd_ = -1;
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  if (!(WIFEXITED(status) && WEXITSTATUS(status) == 0)) {
    std::remove(partial_.c_str());
    throw Error("ffmpeg failed to write " + path_ + " (" +
                (WIFEXITED(status) ? "exit status " + std::to_string(WEXITSTATUS(status))
                                   : "signal " + std::to_string(WTERMSIG(status))) +
                ")" + log_tail(log_) + "; its log is " + log_);
  }
  if (std::rename(partial_.c_str(), path_.c_str()) != 0) throw Error("cannot rename " + partial_ + " to " + path_);
  std::remove(log_.c_str());
}

template <class Fn>
void FrameWriter::attempt(Fn&& fn) {
  if (!error_.empty()) return;
  try {
    fn();
  } catch (const std::exception& e) {
    error_ = e.what();
  }
}

FrameWriter::FrameWriter(const std::string& dir, std::int64_t frames, std::int64_t width, std::int64_t height,
                         const Settings& s)
    : dir_(dir), width_(width), height_(height), png_(s.png), sheet_(frames, width, height) {
  if (s.video) {
    attempt([&] { encoder_ = std::make_unique<VideoEncoder>(s.ffmpeg, dir + "/video.mp4", width, height, s.fps); });
    files_.push_back("video.mp4");
  }
  if (png_) {
    std::error_code ec;
    std::filesystem::create_directories(dir + "/frames", ec);
    if (ec) error_ = "cannot create " + dir + "/frames: " + ec.message();
    files_.push_back("frames/");
  }
}

void FrameWriter::add(std::int64_t frame, const std::uint8_t* rgb) {
  if (encoder_) attempt([&] { encoder_->write(rgb); });
  if (png_) {
    char name[40];
    std::snprintf(name, sizeof name, "/frames/frame-%06lld.png", static_cast<long long>(frame));
    attempt([&] { write_png(dir_ + name, rgb, width_, height_); });
  }
  sheet_.add(frame, rgb);
}

std::string FrameWriter::finish() {
  if (encoder_) attempt([&] { encoder_->finish(); });
  encoder_.reset();
  attempt([&] { sheet_.write(dir_ + "/contact.png"); });
  files_.push_back("contact.png");
  return error_;
}

}  // namespace vinf::io
