// MP4 through an ffmpeg process: raw RGB frames go down a pipe to `ffmpeg -f rawvideo ... -c:v
// libx264 -pix_fmt yuv420p`, which writes PATH.partial.mp4; finish() renames it to PATH once
// ffmpeg has exited cleanly. ffmpeg's own messages go to PATH.ffmpeg.log (removed on success).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/image.hpp"

namespace vinf::io {

class VideoEncoder {
 public:
  // Starts ffmpeg (`ffmpeg` is looked up in PATH unless it holds a '/'). Throws vinf::Error saying
  // what to do when it cannot be started. width and height must be even (yuv420p).
  VideoEncoder(const std::string& ffmpeg, const std::string& path, std::int64_t width, std::int64_t height, double fps);
  ~VideoEncoder();
  VideoEncoder(const VideoEncoder&) = delete;
  VideoEncoder& operator=(const VideoEncoder&) = delete;

  // One frame, height x width x 3 bytes. Throws vinf::Error when ffmpeg has stopped reading.
  void write(const std::uint8_t* rgb);
  // Closes the pipe, waits for ffmpeg, and renames the file into place; throws vinf::Error with
  // the end of ffmpeg's log when it failed.
  void finish();

 private:
  [[noreturn]] void fail(const std::string& what);
  std::string path_, partial_, log_;
  std::int64_t frame_bytes_;
  int fd_ = -1;
  pid_t pid_ = -1;
};

// The frame outputs of a run in one place: video.mp4 (optional), frames/frame-NNNNNN.png
// (optional) and contact.png in `dir`, fed one frame at a time in video order. The first failure
// is kept (later frames are still accepted, so that senders are never left waiting) and reported
// by error(); files() names what was written.
class FrameWriter {
 public:
  struct Settings {
    bool video = true, png = false;
    double fps = 8;
    std::string ffmpeg = "ffmpeg";
  };
  FrameWriter(const std::string& dir, std::int64_t frames, std::int64_t width, std::int64_t height, const Settings& s);
  void add(std::int64_t frame, const std::uint8_t* rgb);
  // Finishes the video and writes contact.png. Returns the first error ("" when none).
  std::string finish();
  const std::vector<std::string>& files() const { return files_; }

 private:
  template <class Fn>
  void attempt(Fn&& fn);
  std::string dir_, error_;
  std::int64_t width_, height_;
  bool png_;
  std::unique_ptr<VideoEncoder> encoder_;
  ContactSheet sheet_;
  std::vector<std::string> files_;
};

}  // namespace vinf::io
