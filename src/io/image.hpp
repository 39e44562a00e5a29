// Decoded frames as 8-bit RGB: the reference's conversion, PNG files, and a contact sheet (a grid
// of evenly spaced thumbnails that shows a whole video at a glance).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace vinf::io {

// (3, H, W) decoder output in about [-1, 1] to H x W x 3 bytes the way the reference does it:
// clamp(x / 2 + 0.5, 0, 1), times 255, truncated (not rounded).
void to_rgb8(const float* chw, std::int64_t height, std::int64_t width, std::uint8_t* hwc);

// An 8-bit RGB PNG (zlib), written under PATH.partial and renamed. Throws vinf::Error naming the
// path when it cannot be written.
void write_png(const std::string& path, const std::uint8_t* rgb, std::int64_t width, std::int64_t height);

// An 8-bit PNG (grey, grey + alpha, RGB, RGBA or palette; not interlaced) as height x width x 3
// bytes, alpha dropped. False (nothing read) for a file that is not such a PNG: another format, 16
// bits per sample, Adam7 interlacing (the caller hands those to ffmpeg). Throws vinf::InputError
// naming the path for a PNG whose data is damaged (a bad CRC, truncated or undecodable pixels).
bool read_png(const std::string& path, std::vector<std::uint8_t>& rgb, std::int64_t& width, std::int64_t& height);

class ContactSheet {
 public:
  // Up to `count` frames evenly spaced over the video, `columns` per row, each shrunk by the
  // smallest integer factor that makes it at most `max_thumb_width` wide.
  ContactSheet(std::int64_t frames, std::int64_t width, std::int64_t height, int count = 16, int columns = 4,
               std::int64_t max_thumb_width = 256);
  bool wants(std::int64_t frame) const;
  void add(std::int64_t frame, const std::uint8_t* rgb);
  void write(const std::string& path) const;
  std::int64_t sheet_width() const { return columns_ * thumb_w_; }
  std::int64_t sheet_height() const { return rows_ * thumb_h_; }

 private:
  std::int64_t width_, factor_, thumb_w_, thumb_h_, columns_, rows_;
  std::vector<std::int64_t> picks_;
  std::vector<std::uint8_t> sheet_;
};

}  // namespace vinf::io
