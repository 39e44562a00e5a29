#include "io/image.hpp"

#include <zlib.h>

#include <algorithm>

#include "core/error.hpp"
#include "io/atomic_file.hpp"

namespace vinf::io {

void to_rgb8(const float* chw, std::int64_t height, std::int64_t width, std::uint8_t* hwc) {
  const std::int64_t plane = height * width;
  for (std::int64_t p = 0; p < plane; ++p)
    for (int c = 0; c < 3; ++c) {
      const float v = std::clamp(chw[c * plane + p] / 2.f + 0.5f, 0.f, 1.f);
      hwc[p * 3 + c] = static_cast<std::uint8_t>(v * 255.f);  // truncation, as the reference
    }
}

namespace {

void put_u32(std::string& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<char>((v >> s) & 0xff));
}

void chunk(std::string& out, const char* type, const std::string& data) {
  put_u32(out, static_cast<std::uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put_u32(out, static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                                static_cast<uInt>(body.size()))));
}

}  // namespace

void write_png(const std::string& path, const std::uint8_t* rgb, std::int64_t width, std::int64_t height) {
  VINF_CHECK(width > 0 && height > 0 && width < (1 << 24) && height < (1 << 24), "write_png: ", width, "x", height);
  // Each row: filter byte 0 (none), then the pixels.
  std::string raw;
  raw.reserve(static_cast<std::size_t>(height * (1 + width * 3)));
  for (std::int64_t y = 0; y < height; ++y) {
    raw.push_back('\0');
    raw.append(reinterpret_cast<const char*>(rgb + y * width * 3), static_cast<std::size_t>(width * 3));
  }
  uLongf packed_size = compressBound(static_cast<uLong>(raw.size()));
  std::string packed(packed_size, '\0');
  VINF_CHECK(compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size, reinterpret_cast<const Bytef*>(raw.data()),
                       static_cast<uLong>(raw.size()), 6) == Z_OK,
             "zlib could not compress ", path);
  packed.resize(packed_size);
  std::string png("\x89PNG\r\n\x1a\n", 8), header;
  put_u32(header, static_cast<std::uint32_t>(width));
  put_u32(header, static_cast<std::uint32_t>(height));
  header += std::string("\x08\x02\x00\x00\x00", 5);  // 8 bits, truecolour, deflate, no filter, no interlace
  chunk(png, "IHDR", header);
  chunk(png, "IDAT", packed);
  chunk(png, "IEND", "");
  write_file_atomically(path, png);
}

ContactSheet::ContactSheet(std::int64_t frames, std::int64_t width, std::int64_t height, int count, int columns,
                           std::int64_t max_thumb_width)
    : width_(width) {
  const std::int64_t n = std::min<std::int64_t>(frames, count);
  for (std::int64_t k = 0; k < n; ++k) picks_.push_back(k * frames / n);
  factor_ = std::max<std::int64_t>(1, (width + max_thumb_width - 1) / max_thumb_width);
  thumb_w_ = width / factor_;
  thumb_h_ = height / factor_;
  columns_ = std::min<std::int64_t>(columns, n);
  rows_ = (n + columns_ - 1) / columns_;
  sheet_.assign(static_cast<std::size_t>(sheet_width() * sheet_height() * 3), 0);
}

bool ContactSheet::wants(std::int64_t frame) const {
  return std::find(picks_.begin(), picks_.end(), frame) != picks_.end();
}

void ContactSheet::add(std::int64_t frame, const std::uint8_t* rgb) {
  const auto it = std::find(picks_.begin(), picks_.end(), frame);
  if (it == picks_.end()) return;
  const std::int64_t slot = it - picks_.begin(), x0 = slot % columns_ * thumb_w_, y0 = slot / columns_ * thumb_h_;
  const std::int64_t area = factor_ * factor_;
  for (std::int64_t y = 0; y < thumb_h_; ++y)
    for (std::int64_t x = 0; x < thumb_w_; ++x)
      for (int c = 0; c < 3; ++c) {
        std::int64_t sum = 0;  // box filter over factor x factor source pixels
        for (std::int64_t dy = 0; dy < factor_; ++dy)
          for (std::int64_t dx = 0; dx < factor_; ++dx)
            sum += rgb[((y * factor_ + dy) * width_ + x * factor_ + dx) * 3 + c];
        sheet_[static_cast<std::size_t>(((y0 + y) * sheet_width() + x0 + x) * 3 + c)] =
            static_cast<std::uint8_t>(sum / area);
      }
}

void ContactSheet::write(const std::string& path) const { write_png(path, sheet_.data(), sheet_width(), sheet_height()); }

}  // namespace vinf::io
