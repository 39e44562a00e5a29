// MP4 through an ffmpeg process: raw RGB frames go down a pipe to `ffmpeg -f rawvideo ... -c:v
// libx264 -pix_fmt yuv420p`, which writes PATH.partial.mp4; finish() renames it to PATH once
// ffmpeg has exited cleanly. ffmpeg's own messages go to PATH.ffmpeg.log (removed on success).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

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

}  // namespace vinf::io
