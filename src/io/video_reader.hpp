// Video files read through ffmpeg, the counterpart of video.hpp's writer: `ffprobe` tells the
// frame size, an `ffmpeg -f rawvideo -pix_fmt rgb24 -` process decodes every frame into a pipe,
// one H x W x 3 frame at a time. Anything ffmpeg reads (mp4, webm, gif, ...) is a video.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace vinf::io {

struct VideoInfo {
  std::int64_t width = 0, height = 0;
  std::int64_t frames = 0;  // the container's frame count; 0 when it does not say
};

// The first video stream's size. Throws vinf::InputError naming the path when it is missing or
// not a video ffprobe can read (with what ffprobe said), vinf::Error when ffprobe cannot be run.
VideoInfo probe_video(const std::string& path, const std::string& ffprobe = "ffprobe");

class VideoReader {
 public:
  // Starts ffmpeg on path's first video stream, every frame as it is stored (no frame-rate
  // conversion). Throws vinf::Error when ffmpeg cannot be run.
  VideoReader(const std::string& path, const VideoInfo& info, const std::string& ffmpeg = "ffmpeg");
  // The same with every frame scaled (area filter) to cover width x height, keeping its aspect
  // ratio, and cropped to it around the centre: frames of width x height x 3 bytes.
  VideoReader(const std::string& path, std::int64_t width, std::int64_t height, const std::string& ffmpeg = "ffmpeg");
  ~VideoReader();
  VideoReader(const VideoReader&) = delete;
  VideoReader& operator=(const VideoReader&) = delete;

  // The next frame into rgb (height x width x 3 bytes); false after the last one. Throws
  // vinf::InputError with the end of ffmpeg's messages when decoding fails or the stream ends
  // inside a frame.
  bool read(std::uint8_t* rgb);

 private:
  void start(const std::string& ffmpeg, const std::string& filter);
  [[noreturn]] void fail(const std::string& what, int exit_status = -1);
  std::string path_, log_;
  std::int64_t frame_bytes_;
  int fd_ = -1;
  pid_t pid_ = -1;
};

// Pictures as 8-bit RGB, height x width x 3 bytes each, all of one size.
struct RgbFrames {
  std::int64_t width = 0, height = 0;
  std::vector<std::vector<std::uint8_t>> frames;
};

// The ffprobe that comes with an ffmpeg program ("ffmpeg" -> "ffprobe", "/opt/x/ffmpeg" ->
// "/opt/x/ffprobe").
std::string ffprobe_beside(const std::string& ffmpeg);

// An image file (PNG, JPEG, WebP, ... anything ffmpeg decodes), its first frame as stored (an
// alpha channel dropped). `option` names where the path came from in errors; vinf::InputError when
// it is missing or not a picture.
RgbFrames read_image(const std::string& path, const std::string& option, const std::string& ffmpeg = "ffmpeg");

// A video's frames one at a time, as read_frames below reads them (the same checks), each
// handed to `visit` (height x width x 3 bytes) and not kept: a long video in constant memory.
// Returns the frames visited.
using FrameVisitor = std::function<void(const std::uint8_t* rgb, std::int64_t width, std::int64_t height)>;
std::int64_t for_each_frame(const std::string& path, const std::string& option, std::int64_t max_frames,
                            const std::string& ffmpeg, const FrameVisitor& visit);

// A video's frames: a video file's every frame, or a folder's image files (.png, .jpg, .jpeg,
// .webp, .bmp) in name order, at most max_frames (0: all). vinf::InputError, naming `option`, when it
// is missing, empty, not decodable or its images differ in size.
RgbFrames read_frames(const std::string& path, const std::string& option, std::int64_t max_frames = 0,
                      const std::string& ffmpeg = "ffmpeg");

}  // namespace vinf::io
