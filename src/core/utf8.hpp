// Well-formed UTF-8 (RFC 3629), checked where user text enters: prompts end up in JSON files
// (run.json, checkpoints), whose writer refuses anything else.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace vinf {

// The byte offset of the first byte that does not belong to a well-formed sequence (overlong
// forms, surrogates and code points above U+10FFFF are not), or std::string::npos when the text is
// well-formed.
inline std::size_t first_invalid_utf8(std::string_view s) {
  const auto* b = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned c = b[i];
    std::size_t len = 0;
    unsigned lo = 0x80, hi = 0xBF;  // the range of the second byte
    if (c < 0x80) len = 1;
    else if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
      len = 3;
      if (c == 0xE0) lo = 0xA0;  // no overlong three-byte forms
      if (c == 0xED) hi = 0x9F;  // no surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      len = 4;
      if (c == 0xF0) lo = 0x90;  // no overlong four-byte forms
      if (c == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
    } else {
      return i;
    }
    if (len > 1) {
      if (i + len > n || b[i + 1] < lo || b[i + 1] > hi) return i;
      for (std::size_t k = 2; k < len; ++k)
        if (b[i + k] < 0x80 || b[i + k] > 0xBF) return i;
    }
    i += len;
  }
  return std::string::npos;
}

// Appends code point c (at most U+10FFFF, no surrogate) to out as UTF-8.
inline void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

// User text quoted in a message: at most about max_bytes of it, control characters and bytes that
// are not UTF-8 shown as \xNN, and the length said when it is cut ("... (104857 bytes in all)"), so
// that a 100 KB prompt or a binary file does not flood the terminal.
inline std::string excerpt(std::string_view s, std::size_t max_bytes = 80) {
  std::string out;
  std::size_t i = 0;
  const auto hex = [&out](unsigned char c) {
    static const char digits[] = "0123456789abcdef";
    out += "\\x";
    out += digits[c >> 4];
    out += digits[c & 15];
  };
  while (i < s.size() && i < max_bytes) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      if (c < 0x20 || c == 0x7F) hex(c);
      else out += static_cast<char>(c);
      ++i;
      continue;
    }
    const std::size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (i + len <= s.size() && first_invalid_utf8(s.substr(i, len)) == std::string::npos) {
      out.append(s.substr(i, len));
      i += len;
    } else {
      hex(c);
      ++i;
    }
  }
  if (i < s.size()) out += "... (" + std::to_string(s.size()) + " bytes in all)";
  return out;
}

}  // namespace vinf
