#include "io/video_reader.hpp"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

#include "core/error.hpp"
#include "io/image.hpp"
#include "io/path_query.hpp"
#include "io/spawn.hpp"

extern char** environ;

namespace vinf::io {

namespace {

// Starts argv[0] (looked up in PATH) with stdin from /dev/null, stdout into a pipe whose read end
// is returned in out_fd, and stderr into stderr_path (or the pipe too when it is empty).
pid_t spawn_reader(std::vector<std::string> args, const std::string& stderr_path, int& out_fd) {
  int fds[2];
  VINF_CHECK(pipe(fds) == 0, "pipe() failed: ", std::strerror(errno));
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  if (stderr_path.empty())
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
  else
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  pid_t pid = -1;
  const SpawnAttributes attributes;
  const int rc = posix_spawnp(&pid, args[0].c_str(), &actions, attributes.get(), argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  if (rc != 0) {
    close(fds[0]);
    throw Error("cannot run " + args[0] + " (" + std::strerror(rc) + "); install ffmpeg, which brings ffprobe");
  }
  out_fd = fds[0];
  return pid;
}

int wait_for(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

// The last lines of a text, joined with " | ".
std::string last_lines(const std::string& text, std::size_t count = 3) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) lines.push_back(line);
  std::string tail;
  for (std::size_t i = lines.size() > count ? lines.size() - count : 0; i < lines.size(); ++i)
    tail += (tail.empty() ? "" : " | ") + lines[i];
  return tail;
}

}  // namespace

VideoInfo probe_video(const std::string& path, const std::string& ffprobe) {
  VINF_INPUT_CHECK(is_regular_file(path), path, " does not exist or is not a file");
  int fd = -1;
  const pid_t pid = spawn_reader({ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries",
                                  "stream=width,height,nb_frames", "-of", "default=noprint_wrappers=1", path},
                                 "", fd);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  close(fd);
  const int rc = wait_for(pid);
  VideoInfo info;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    const std::size_t eq = line.find('=');
    if (eq == std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    const long long v = std::atoll(line.c_str() + eq + 1);  // "N/A" reads as 0
    if (key == "width") info.width = v;
    if (key == "height") info.height = v;
    if (key == "nb_frames") info.frames = v;
  }
  const std::string said = last_lines(text);
  VINF_INPUT_CHECK(rc == 0 && info.width > 0 && info.height > 0, path,
                   " is not a video ffmpeg can read (ffprobe exit status ", rc,
                   said.empty() ? std::string(", no video stream") : "; it said: " + said,
                   "); give a video file (.mp4, .webm, ...) or a run's latents.h5");
  return info;
}

VideoReader::VideoReader(const std::string& path, const VideoInfo& info, const std::string& ffmpeg)
    : path_(path), frame_bytes_(info.width * info.height * 3) {
  start(ffmpeg, "");
}

VideoReader::VideoReader(const std::string& path, std::int64_t width, std::int64_t height, const std::string& ffmpeg)
    : path_(path), frame_bytes_(width * height * 3) {
  VINF_CHECK(width > 0 && height > 0, "VideoReader: a frame size of ", width, "x", height);
  const std::string w = std::to_string(width), h = std::to_string(height);
  // The display orientation here (autorotation on): what the picture shows is what gets cropped.
  start(ffmpeg, "scale=" + w + ":" + h + ":force_original_aspect_ratio=increase:flags=area,crop=" + w + ":" + h);
}

void VideoReader::start(const std::string& ffmpeg, const std::string& filter) {
  std::signal(SIGPIPE, SIG_IGN);
  char name[] = "/tmp/vinf-ffmpeg-XXXXXX";
  const int log_fd = mkstemp(name);
  VINF_CHECK(log_fd >= 0, "cannot create a temporary file for ffmpeg's messages: ", std::strerror(errno));
  close(log_fd);
  log_ = name;
  try {
    std::vector<std::string> args{ffmpeg, "-nostdin", "-v", "error"};
    // Without a filter, -noautorotate: the frames as coded, the size ffprobe reported (a rotated
    // video's display size is the other way round).
    if (filter.empty()) args.push_back("-noautorotate");
    args.push_back("-i");
    args.push_back(path_);
    for (const char* a : {"-map", "0:v:0", "-vsync", "passthrough"}) args.push_back(a);
    if (!filter.empty()) {
      args.push_back("-vf");
      args.push_back(filter);
    }
    for (const char* a : {"-f", "rawvideo", "-pix_fmt", "rgb24", "-"}) args.push_back(a);
    pid_ = spawn_reader(args, log_, fd_);
  } catch (...) {
    std::remove(log_.c_str());
    throw;
  }
}

VideoReader::~VideoReader() {
  if (fd_ >= 0) close(fd_);
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (!log_.empty()) std::remove(log_.c_str());
}

void VideoReader::fail(const std::string& what, int exit_status) {
  if (fd_ >= 0) close(fd_);
  fd_ = -1;
  const int rc = pid_ > 0 ? wait_for(pid_) : exit_status;
  pid_ = -1;
  std::ifstream in(log_);
  std::stringstream text;
  text << in.rdbuf();
  const std::string said = last_lines(text.str());
  VINF_INPUT_FAIL(path_, ": ", what, " (ffmpeg exit status ", rc, said.empty() ? std::string() : "; it said: " + said,
                  ")");
}

bool VideoReader::read(std::uint8_t* rgb) {
  if (fd_ < 0) return false;
  std::int64_t done = 0;
  while (done < frame_bytes_) {
    const ssize_t n = ::read(fd_, rgb + done, static_cast<std::size_t>(frame_bytes_ - done));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fail(std::string("reading ffmpeg's frames failed: ") + std::strerror(errno));
    if (n == 0) break;
    done += n;
  }
  if (done == frame_bytes_) return true;
  if (done > 0) fail("the decoded stream ended inside a frame");
  close(fd_);
  fd_ = -1;
  const int rc = wait_for(pid_);
  pid_ = -1;
  if (rc != 0) fail("ffmpeg could not decode the video", rc);
  return false;
}

std::string ffprobe_beside(const std::string& ffmpeg) {
  const std::size_t slash = ffmpeg.rfind('/');
  const std::string name = ffmpeg.substr(slash == std::string::npos ? 0 : slash + 1);
  if (name.rfind("ffmpeg", 0) != 0) return "ffprobe";
  return ffmpeg.substr(0, ffmpeg.size() - name.size()) + "ffprobe" + name.substr(6);
}

RgbFrames read_image(const std::string& path, const std::string& option, const std::string& ffmpeg) {
  VINF_INPUT_CHECK(is_regular_file(path), option, " ", path, " does not exist or is not a file");
  RgbFrames png;
  png.frames.emplace_back();
  try {
    // An 8-bit PNG is read here (exactly, without ffmpeg); anything else goes to ffmpeg.
    if (read_png(path, png.frames[0], png.width, png.height)) return png;
  } catch (const InputError& e) {
    VINF_INPUT_FAIL(option, " ", e.what());
  }
  VideoInfo info;
  try {
    info = probe_video(path, ffprobe_beside(ffmpeg));
  } catch (const InputError& e) {
    VINF_INPUT_FAIL(option, " ", path, " is not an image ffmpeg can read (a PNG or JPEG file): ", e.what());
  }
  RgbFrames out;
  out.width = info.width;
  out.height = info.height;
  out.frames.emplace_back(static_cast<std::size_t>(info.width * info.height * 3));
  VideoReader reader(path, info, ffmpeg);
  VINF_INPUT_CHECK(reader.read(out.frames[0].data()), option, " ", path, ": ffmpeg decoded no picture from it");
  return out;
}

std::int64_t for_each_frame(const std::string& path, const std::string& option, std::int64_t max_frames,
                            const std::string& ffmpeg, const FrameVisitor& visit) {
  namespace fs = std::filesystem;
  std::int64_t count = 0, width = 0, height = 0;
  auto enough = [&] { return max_frames > 0 && count >= max_frames; };
  if (is_directory(path)) {
    std::vector<std::string> files;
    std::error_code ec;
    for (const fs::directory_entry& e : fs::directory_iterator(path, ec)) {
      std::string ext = e.path().extension().string();
      std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char c) { return std::tolower(c); });
      if (e.is_regular_file() && (ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".webp" || ext == ".bmp"))
        files.push_back(e.path().string());
    }
    VINF_INPUT_CHECK(!ec, option, " ", path, ": cannot list the folder: ", ec.message());
    std::sort(files.begin(), files.end());
    VINF_INPUT_CHECK(!files.empty(), option, " ", path, " holds no image files (.png, .jpg, .jpeg, .webp, .bmp)");
    for (const std::string& f : files) {
      if (enough()) break;
      const RgbFrames one = read_image(f, option, ffmpeg);
      VINF_INPUT_CHECK(count == 0 || (one.width == width && one.height == height), option, " ", path, ": ", f, " is ",
                       one.width, "x", one.height, " but the frames before it are ", width, "x", height,
                       "; give frames of one size");
      width = one.width;
      height = one.height;
      visit(one.frames[0].data(), width, height);
      ++count;
    }
    return count;
  }
  VINF_INPUT_CHECK(is_regular_file(path), option, " ", path,
                   " does not exist (give a video file or a folder of frames)");
  const VideoInfo info = probe_video(path, ffprobe_beside(ffmpeg));
  VideoReader reader(path, info, ffmpeg);
  std::vector<std::uint8_t> frame(static_cast<std::size_t>(info.width * info.height * 3));
  while (!enough() && reader.read(frame.data())) {
    visit(frame.data(), info.width, info.height);
    ++count;
  }
  VINF_INPUT_CHECK(count > 0, option, " ", path, ": ffmpeg decoded no frames from it");
  return count;
}

RgbFrames read_frames(const std::string& path, const std::string& option, std::int64_t max_frames,
                      const std::string& ffmpeg) {
  RgbFrames out;
  for_each_frame(path, option, max_frames, ffmpeg, [&](const std::uint8_t* rgb, std::int64_t w, std::int64_t h) {
    out.width = w;
    out.height = h;
    out.frames.emplace_back(rgb, rgb + w * h * 3);
  });
  return out;
}

}  // namespace vinf::io
