#include "io/image.hpp"

#include <zlib.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <fstream>
#include <iterator>

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
  put_u32(out, static_cast<std::uint32_t>(
                   crc32(0, reinterpret_cast<const Bytef*>(body.data()), static_cast<uInt>(body.size()))));
}

}  // namespace

namespace {

std::uint32_t png_u32(const unsigned char* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) | p[3];
}

// The header and the chunks of a PNG: what the pixels need.
struct PngChunks {
  std::uint32_t width = 0, height = 0;
  int depth = 0, color = 0, interlace = 0;
  std::string idat, palette;
};

// The chunks of bytes `b`; false when it is not a PNG this reader decodes.
bool png_chunks(const std::string& path, const std::string& b, PngChunks& p) {
  static const unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (b.size() < 8 || std::memcmp(b.data(), kSignature, 8) != 0) return false;
  std::size_t at = 8;
  bool header = false;
  while (true) {
    VINF_INPUT_CHECK(at + 12 <= b.size(), path, ": the PNG ends before its IEND chunk (a truncated file)");
    const auto* c = reinterpret_cast<const unsigned char*>(b.data() + at);
    const std::uint32_t len = png_u32(c);
    VINF_INPUT_CHECK(len <= b.size() - at - 12, path, ": a PNG chunk runs past the end of the file");
    const std::string type(b.data() + at + 4, 4);
    const std::uint32_t crc = crc32(0, c + 4, static_cast<uInt>(len + 4));
    VINF_INPUT_CHECK(crc == png_u32(c + 8 + len), path, ": the PNG's ", type, " chunk fails its CRC (a damaged file)");
    const char* data = b.data() + at + 8;
    if (type == "IHDR" && len == 13) {
      const auto* d = reinterpret_cast<const unsigned char*>(data);
      p.width = png_u32(d);
      p.height = png_u32(d + 4);
      p.depth = d[8];
      p.color = d[9];
      p.interlace = d[12];
      header = true;
    } else if (type == "PLTE") {
      p.palette.assign(data, len);
    } else if (type == "IDAT") {
      p.idat.append(data, len);
    } else if (type == "IEND") {
      break;
    }
    at += 12 + len;
  }
  const bool color_ok = p.color == 0 || p.color == 2 || p.color == 3 || p.color == 4 || p.color == 6;
  return header && p.depth == 8 && color_ok && p.interlace == 0 && p.width > 0 && p.height > 0 &&
         p.width < (1u << 24) && p.height < (1u << 24) && (p.color != 3 || !p.palette.empty());
}

// Undoes the row filters in place (rows of `stride` bytes, each after its filter byte).
void png_unfilter(const std::string& path, std::vector<std::uint8_t>& raw, std::size_t rows, std::size_t stride,
                  std::size_t bpp) {
  std::vector<std::uint8_t> prev(stride, 0);
  for (std::size_t y = 0; y < rows; ++y) {
    std::uint8_t* row = raw.data() + y * (stride + 1);
    const int filter = row[0];
    std::uint8_t* px = row + 1;
    VINF_INPUT_CHECK(filter <= 4, path, ": a PNG row has filter type ", filter, " (a damaged file)");
    for (std::size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? px[i - bpp] : 0, up = prev[i], c = i >= bpp ? prev[i - bpp] : 0;
      int add = 0;
      if (filter == 1) add = a;
      if (filter == 2) add = up;
      if (filter == 3) add = (a + up) / 2;
      if (filter == 4) {
        const int pa = std::abs(up - c), pb = std::abs(a - c), pc = std::abs(a + up - 2 * c);
        add = pa <= pb && pa <= pc ? a : pb <= pc ? up : c;
      }
      px[i] = static_cast<std::uint8_t>(px[i] + add);
    }
    std::copy(px, px + stride, prev.begin());
  }
}

}  // namespace

bool read_png(const std::string& path, std::vector<std::uint8_t>& rgb, std::int64_t& width, std::int64_t& height) {
  std::ifstream in(path, std::ios::binary);
  VINF_INPUT_CHECK(in.good(), path, ": cannot open the file");
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  PngChunks p;
  if (!png_chunks(path, bytes, p)) return false;
  static const std::array<std::size_t, 7> kChannels = {1, 0, 3, 1, 2, 0, 4};
  const std::size_t channels = kChannels[static_cast<std::size_t>(p.color)], stride = p.width * channels;
  std::vector<std::uint8_t> raw(p.height * (stride + 1));
  uLongf got = static_cast<uLongf>(raw.size());
  const int rc =
      uncompress(raw.data(), &got, reinterpret_cast<const Bytef*>(p.idat.data()), static_cast<uLong>(p.idat.size()));
  VINF_INPUT_CHECK(rc == Z_OK && got == raw.size(), path, ": the PNG's pixel data does not decode (zlib status ", rc,
                   ", ", got, " of ", raw.size(), " bytes): a damaged file");
  png_unfilter(path, raw, p.height, stride, channels);
  width = p.width;
  height = p.height;
  rgb.resize(static_cast<std::size_t>(width * height * 3));
  const std::size_t colors = p.palette.size() / 3;
  for (std::size_t y = 0; y < p.height; ++y)
    for (std::size_t x = 0; x < p.width; ++x) {
      const std::uint8_t* s = raw.data() + y * (stride + 1) + 1 + x * channels;
      std::uint8_t* d = rgb.data() + (y * p.width + x) * 3;
      if (p.color == 3) {
        VINF_INPUT_CHECK(s[0] < colors, path, ": a pixel names palette entry ", int{s[0]}, " of ", colors);
        for (int c = 0; c < 3; ++c) d[c] = static_cast<std::uint8_t>(p.palette[s[0] * 3 + static_cast<std::size_t>(c)]);
      } else if (channels <= 2) {
        d[0] = d[1] = d[2] = s[0];
      } else {
        std::copy(s, s + 3, d);
      }
    }
  return true;
}

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
  VINF_CHECK(compress2(reinterpret_cast<Bytef*>(packed.data()), &packed_size,
                       reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size()), 6) == Z_OK,
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

void ContactSheet::write(const std::string& path) const {
  write_png(path, sheet_.data(), sheet_width(), sheet_height());
}

}  // namespace vinf::io
