#include "model/t5_tokenizer.hpp"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "io/json_file.hpp"
#include "io/path_query.hpp"

namespace vinf::model {

namespace {

// The code point at s[i] and its length in bytes; a byte that starts no well-formed sequence is
// returned as itself (length 1), so text that is not UTF-8 passes through unchanged.
std::pair<char32_t, std::size_t> next_code_point(std::string_view s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned c = b(i);
  std::size_t len = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (len <= 1 || i + len > s.size()) return {c, 1};
  char32_t cp = c & (0xFF >> (len + 1));
  for (std::size_t k = 1; k < len; ++k) {
    if ((b(i + k) & 0xC0) != 0x80) return {c, 1};
    cp = (cp << 6) | (b(i + k) & 0x3F);
  }
  return {cp, len};
}

// Python's str.isspace, which `\s` and str.strip() follow.
bool python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The named references html.unescape knows, of those prompts carry; `legacy` ones also match
// without the ';' (as HTML allows for them).
struct NamedReference {
  std::string_view name;
  char32_t value;
  bool legacy;
};
constexpr NamedReference kNamed[] = {{"amp", U'&', true},   {"AMP", U'&', true},   {"lt", U'<', true},
                                     {"LT", U'<', true},    {"gt", U'>', true},    {"GT", U'>', true},
                                     {"quot", U'"', true},  {"QUOT", U'"', true},  {"nbsp", 0xA0, true},
                                     {"apos", U'\'', false}};

// What a numeric reference &#num; stands for, as html.unescape replaces it: HTML's windows-1252
// reading of 0x80-0x9F, U+FFFD for 0, surrogates and anything above U+10FFFF, nothing for the
// code points HTML forbids.
void append_numeric_reference(std::string& out, std::uint64_t num) {
  static constexpr char32_t kWindows1252[32] = {
      0x20AC, 0x81,   0x201A, 0x0192, 0x201E, 0x2026, 0x2020, 0x2021, 0x02C6, 0x2030, 0x0160,
      0x2039, 0x0152, 0x8D,   0x017D, 0x8F,   0x90,   0x2018, 0x2019, 0x201C, 0x201D, 0x2022,
      0x2013, 0x2014, 0x02DC, 0x2122, 0x0161, 0x203A, 0x0153, 0x9D,   0x017E, 0x0178};
  if (num == 0) return append_utf8(out, 0xFFFD);
  if (num == 0x0D) return append_utf8(out, 0x0D);
  if (num >= 0x80 && num <= 0x9F) return append_utf8(out, kWindows1252[num - 0x80]);
  if ((num >= 0xD800 && num <= 0xDFFF) || num > 0x10FFFF) return append_utf8(out, 0xFFFD);
  const auto c = static_cast<char32_t>(num);
  const bool forbidden = (c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || (c >= 0x7F && c <= 0x9F) ||
                         (c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE;
  if (!forbidden) append_utf8(out, c);
}

bool is_digit(char c, bool hex) {
  return (c >= '0' && c <= '9') || (hex && ((c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')));
}

// The reference starting at s[i] == '&': appended to out, returns the bytes it took (0: not one).
std::size_t unescape_one(std::string_view s, std::size_t i, std::string& out) {
  std::size_t j = i + 1;
  if (j < s.size() && s[j] == '#') {
    ++j;
    const bool hex = j < s.size() && (s[j] == 'x' || s[j] == 'X');
    if (hex) ++j;
    const std::size_t start = j;
    std::uint64_t num = 0;
    for (; j < s.size() && is_digit(s[j], hex); ++j) {
      const char c = s[j];
      const unsigned d = c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
      num = std::min<std::uint64_t>(num * (hex ? 16 : 10) + d, 0x7FFFFFFF);  // anything this big is U+FFFD
    }
    if (j == start) return 0;
    if (j < s.size() && s[j] == ';') ++j;
    append_numeric_reference(out, num);
    return j - i;
  }
  // A name: up to 32 characters other than tab, newline, form feed, space, '<', '&', '#', ';'.
  std::size_t end = j;
  while (end < s.size() && end - j < 32 && std::string_view("\t\n\f <&#;").find(s[end]) == std::string_view::npos) ++end;
  if (end == j) return 0;
  const std::string_view name = s.substr(j, end - j);
  const bool semicolon = end < s.size() && s[end] == ';';
  if (semicolon)
    for (const NamedReference& r : kNamed)
      if (r.name == name) {
        append_utf8(out, r.value);
        return end + 1 - i;
      }
  // Otherwise the longest legacy name the text starts with; the rest stays as it is.
  std::size_t best = 0;
  char32_t value = 0;
  for (const NamedReference& r : kNamed)
    if (r.legacy && r.name.size() > best && name.substr(0, r.name.size()) == r.name && (r.name.size() < name.size() || !semicolon)) {
      best = r.name.size();
      value = r.value;
    }
  if (best == 0) return 0;
  append_utf8(out, value);
  return 1 + best;
}

}  // namespace

std::string html_unescape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    if (s[i] == '&') {
      if (const std::size_t n = unescape_one(s, i, out)) {
        i += n;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

std::string wan_prompt_clean(std::string_view text) {
  const std::string unescaped = html_unescape(html_unescape(text));
  std::string out;
  out.reserve(unescaped.size());
  bool space = false;
  for (std::size_t i = 0; i < unescaped.size();) {
    const auto [c, len] = next_code_point(unescaped, i);
    if (python_space(c)) {
      space = true;
    } else {
      if (space && !out.empty()) out += ' ';
      space = false;
      out.append(unescaped, i, len);
    }
    i += len;
  }
  return out;
}

struct T5Tokenizer::Model {
  sentencepiece::SentencePieceProcessor sp;
};

T5Tokenizer T5Tokenizer::load(const std::string& dir_in) {
  std::string dir = dir_in;
  VINF_INPUT_CHECK(io::is_directory(dir), "tokenizer ", dir, ": no such directory");
  if (!io::path_exists(dir + "/spiece.model") && io::path_exists(dir + "/tokenizer/spiece.model")) dir += "/tokenizer";
  const std::string path = dir + "/spiece.model";
  VINF_INPUT_CHECK(io::path_exists(path), "tokenizer ", dir,
                   ": no spiece.model (a T5 tokenizer directory holds the SentencePiece model spiece.model)");
  auto model = std::make_shared<Model>();
  const sentencepiece::util::Status status = model->sp.Load(path);
  VINF_INPUT_CHECK(status.ok(), path, ": SentencePiece cannot read it: ", status.ToString());
  T5Tokenizer t;
  t.source_ = dir;
  const sentencepiece::SentencePieceProcessor& sp = model->sp;
  t.vocab_size_ = sp.GetPieceSize();
  // T5's models set pad 0, eos 1, unk 2; a model that disables pad or eos gets those.
  t.pad_id_ = sp.pad_id() >= 0 ? sp.pad_id() : 0;
  t.eos_id_ = sp.eos_id() >= 0 ? sp.eos_id() : 1;
  t.unk_id_ = sp.unk_id();
  for (const std::int64_t id : {t.pad_id_, t.eos_id_, t.unk_id_})
    if (id >= 0 && id < t.vocab_size_) t.specials_.emplace_back(sp.IdToPiece(static_cast<int>(id)), id);
  // Added tokens (transformers writes them under added_tokens_decoder, by id) are special too.
  const std::string config = dir + "/tokenizer_config.json";
  if (io::path_exists(config)) {
    const nlohmann::json j = io::read_json_file(config, "tokenizer config");
    VINF_INPUT_CHECK(j.is_object(), config, ": the file must hold a JSON object");
    const auto it = j.find("added_tokens_decoder");
    if (it != j.end() && !it->is_null()) {
      VINF_INPUT_CHECK(it->is_object(), config, ": config key 'added_tokens_decoder' must be an object");
      for (const auto& [key, value] : it->items()) {
        std::int64_t id = -1;
        try {
          std::size_t used = 0;
          id = std::stoll(key, &used);
          if (used != key.size()) id = -1;
        } catch (const std::exception&) {
        }
        VINF_INPUT_CHECK(id >= 0, config, ": added_tokens_decoder key '", key, "' is not a token id");
        VINF_INPUT_CHECK(value.is_object() && value.contains("content") && value["content"].is_string() &&
                             !value["content"].get<std::string>().empty(),
                         config, ": added_tokens_decoder.", key, " must be an object with a non-empty 'content'");
        const std::string content = value["content"].get<std::string>();
        if (std::none_of(t.specials_.begin(), t.specials_.end(), [&](const auto& s) { return s.first == content; }))
          t.specials_.emplace_back(content, id);
        t.vocab_size_ = std::max(t.vocab_size_, id + 1);
      }
    }
  }
  t.model_ = std::move(model);
  return t;
}

void T5Tokenizer::encode_piece(std::string_view text, std::vector<std::int64_t>& out) const {
  std::vector<int> ids;
  const sentencepiece::util::Status status = model_->sp.Encode(text, &ids);
  VINF_CHECK(status.ok(), "SentencePiece could not encode a prompt: ", status.ToString());
  out.insert(out.end(), ids.begin(), ids.end());
}

std::vector<std::int64_t> T5Tokenizer::tokenize(std::string_view text) const {
  std::vector<std::int64_t> out;
  std::size_t start = 0;  // the text not yet encoded begins here
  for (std::size_t i = 0; i < text.size();) {
    const std::pair<std::string, std::int64_t>* match = nullptr;
    for (const auto& s : specials_)
      if (text.substr(i, s.first.size()) == s.first && (!match || s.first.size() > match->first.size())) match = &s;
    if (!match) {
      ++i;
      continue;
    }
    if (i > start) encode_piece(text.substr(start, i - start), out);
    out.push_back(match->second);
    i += match->first.size();
    start = i;
  }
  if (start < text.size()) encode_piece(text.substr(start), out);
  return out;
}

T5TokenizedText T5Tokenizer::encode(std::string_view text, int max_length) const {
  VINF_INPUT_CHECK(max_length >= 1, "the T5 tokenizer's max length must be at least 1, got ", max_length);
  std::vector<std::int64_t> ids = tokenize(text);
  const auto eos_ends = [&] { return !ids.empty() && ids.back() == eos_id_; };
  T5TokenizedText t;
  t.length = static_cast<int>(ids.size()) + (eos_ends() ? 0 : 1);
  // transformers truncates first (leaving room for eos), then adds eos if the ids lack it.
  if (static_cast<std::int64_t>(ids.size()) + 1 > max_length) ids.resize(static_cast<std::size_t>(max_length - 1));
  if (!eos_ends()) ids.push_back(eos_id_);
  t.mask.assign(static_cast<std::size_t>(max_length), 0);
  std::fill(t.mask.begin(), t.mask.begin() + static_cast<std::ptrdiff_t>(ids.size()), 1);
  ids.resize(static_cast<std::size_t>(max_length), pad_id_);
  t.ids = std::move(ids);
  return t;
}

}  // namespace vinf::model
