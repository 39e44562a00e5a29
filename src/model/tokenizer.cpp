#include "model/tokenizer.hpp"

#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/ustring.h>
#include <unicode/utf16.h>

#include <algorithm>
#include <array>
#include <climits>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/utf8.hpp"
#include "io/atomic_file.hpp"
#include "io/json_file.hpp"
#include "io/path_query.hpp"

namespace fs = std::filesystem;

namespace vinf::model {

namespace {

// CLIPTokenizer keeps the first 49152 - 256 - 2 merges of merges.txt (the rest of the id space is
// the 512 byte tokens and the two specials).
constexpr std::size_t kMaxMerges = 49152 - 256 - 2;
constexpr std::size_t kCacheLimit = 1 << 16;
constexpr std::string_view kStartOfText = "<|startoftext|>", kEndOfText = "<|endoftext|>";

// ---- UTF-8 / UTF-16 / code points -------------------------------------------------------------

std::u16string to_utf16(std::string_view utf8) {
  if (utf8.empty()) return {};
  std::u16string out(utf8.size() + 1, u'\0');  // UTF-16 never needs more units than UTF-8 has bytes
  std::int32_t length = 0;
  UErrorCode err = U_ZERO_ERROR;
  u_strFromUTF8WithSub(reinterpret_cast<UChar*>(out.data()), static_cast<std::int32_t>(out.size()), &length, utf8.data(),
                       static_cast<std::int32_t>(utf8.size()), 0xFFFD, nullptr, &err);
  VINF_CHECK(U_SUCCESS(err), "UTF-8 conversion failed: ", u_errorName(err));
  out.resize(static_cast<std::size_t>(length));
  return out;
}

std::u32string to_code_points(const std::u16string& s) {
  std::u32string out;
  out.reserve(s.size());
  const auto* p = reinterpret_cast<const UChar*>(s.data());
  const auto n = static_cast<std::int32_t>(s.size());
  for (std::int32_t i = 0; i < n;) {
    UChar32 c;
    U16_NEXT(p, i, n, c);
    out.push_back(static_cast<char32_t>(c));
  }
  return out;
}

std::u16string to_utf16(const std::u32string& s) {
  std::u16string out;
  out.reserve(s.size());
  for (char32_t c : s) {
    if (c < 0x10000) {
      out.push_back(static_cast<char16_t>(c));
    } else {
      out.push_back(static_cast<char16_t>(U16_LEAD(c)));
      out.push_back(static_cast<char16_t>(U16_TRAIL(c)));
    }
  }
  return out;
}

std::string to_utf8(std::u32string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : s) append_utf8(out, c);
  return out;
}

// ---- the cleanup (transformers' BasicTokenizer, strip_accents=False, no punctuation split) -----

bool is_control(char32_t c) {
  if (c == U'\t' || c == U'\n' || c == U'\r') return false;
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_C_MASK) != 0;  // Cc, Cf, Cn, Co, Cs
}

bool is_basic_whitespace(char32_t c) {
  return c == U' ' || c == U'\t' || c == U'\n' || c == U'\r' || u_charType(static_cast<UChar32>(c)) == U_SPACE_SEPARATOR;
}

// Python's str.isspace, which str.split() splits on.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

// The CJK Unified Ideographs blocks BERT puts spaces around.
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

std::u32string clean(std::string_view utf8) {
  const std::u32string in = to_code_points(to_utf16(utf8));
  std::u32string spaced;
  spaced.reserve(in.size());
  for (char32_t c : in) {
    if (c == 0 || c == 0xFFFD || is_control(c)) continue;
    if (is_basic_whitespace(c)) {
      spaced.push_back(U' ');
    } else if (is_cjk(c)) {
      spaced.push_back(U' ');
      spaced.push_back(c);
      spaced.push_back(U' ');
    } else {
      spaced.push_back(c);
    }
  }
  // NFC, then lower-case (full Unicode mapping, with final sigma, as Python's str.lower).
  UErrorCode err = U_ZERO_ERROR;
  const UNormalizer2* nfc = unorm2_getNFCInstance(&err);
  VINF_CHECK(U_SUCCESS(err), "ICU has no NFC normalizer: ", u_errorName(err));
  const std::u16string wide = to_utf16(spaced);
  std::u16string normal(wide.size() * 3 + 1, u'\0');
  std::int32_t n = unorm2_normalize(nfc, reinterpret_cast<const UChar*>(wide.data()), static_cast<std::int32_t>(wide.size()),
                                    reinterpret_cast<UChar*>(normal.data()), static_cast<std::int32_t>(normal.size()), &err);
  VINF_CHECK(U_SUCCESS(err), "NFC normalisation failed: ", u_errorName(err));
  normal.resize(static_cast<std::size_t>(n));
  std::u16string lower(normal.size() * 3 + 1, u'\0');
  n = u_strToLower(reinterpret_cast<UChar*>(lower.data()), static_cast<std::int32_t>(lower.size()),
                   reinterpret_cast<const UChar*>(normal.data()), static_cast<std::int32_t>(normal.size()), "", &err);
  VINF_CHECK(U_SUCCESS(err), "lower-casing failed: ", u_errorName(err));
  lower.resize(static_cast<std::size_t>(n));
  // Split on whitespace and join with single spaces.
  std::u32string out;
  bool gap = false;
  for (char32_t c : to_code_points(lower)) {
    if (is_python_space(c)) {
      gap = !out.empty();
    } else {
      if (gap) out.push_back(U' ');
      gap = false;
      out.push_back(c);
    }
  }
  return out;
}

// ---- pre-tokenisation: <|startoftext|>|<|endoftext|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+

bool is_letter(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_L_MASK) != 0; }
bool is_number(char32_t c) { return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0; }
bool is_space(char32_t c) { return u_isUWhiteSpace(static_cast<UChar32>(c)) != 0; }

bool starts_with(std::u32string_view s, std::size_t at, std::string_view ascii) {
  if (s.size() - at < ascii.size()) return false;
  for (std::size_t k = 0; k < ascii.size(); ++k)
    if (s[at + k] != static_cast<char32_t>(ascii[k])) return false;
  return true;
}

std::size_t match_length(std::u32string_view s, std::size_t i) {
  if (starts_with(s, i, kStartOfText)) return kStartOfText.size();
  if (starts_with(s, i, kEndOfText)) return kEndOfText.size();
  if (s[i] == U'\'') {
    for (std::string_view c : {"'s", "'t", "'re", "'ve", "'m", "'ll", "'d"})
      if (starts_with(s, i, c)) return c.size();
  }
  std::size_t j = i;
  if (is_letter(s[i])) {
    while (j < s.size() && is_letter(s[j])) ++j;
    return j - i;
  }
  if (is_number(s[i])) return 1;
  while (j < s.size() && !is_space(s[j]) && !is_letter(s[j]) && !is_number(s[j])) ++j;
  return j - i;
}

// ---- bytes to printable characters ------------------------------------------------------------

const std::array<std::string, 256>& byte_symbols() {
  static const std::array<std::string, 256> table = [] {
    std::array<std::string, 256> t;
    char32_t next = 256;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
      append_utf8(t[static_cast<std::size_t>(b)], printable ? static_cast<char32_t>(b) : next++);
    }
    return t;
  }();
  return table;
}

// ---- config files -----------------------------------------------------------------------------

// A token in tokenizer_config.json / special_tokens_map.json: a string or {"content": ...}.
std::string token_content(const nlohmann::json& v, const std::string& file, const std::string& key) {
  std::string content;
  if (v.is_string()) {
    content = v.get<std::string>();
  } else {
    VINF_INPUT_CHECK(v.is_object() && v.contains("content") && v["content"].is_string(), file, ": ", key,
                     " must be a string or an object with a \"content\" string");
    content = v["content"].get<std::string>();
  }
  VINF_INPUT_CHECK(!content.empty(), file, ": ", key, " is empty");
  return content;
}

bool read_token(const nlohmann::json& j, const char* key, const std::string& file, std::string& dst) {
  if (!j.contains(key) || j[key].is_null()) return false;
  dst = token_content(j[key], file, key);
  return true;
}

}  // namespace

std::string clip_clean_text(std::string_view utf8) { return to_utf8(clean(utf8)); }

ClipTokenizer ClipTokenizer::load(const std::string& dir_in) {
  std::string dir = dir_in;
  VINF_INPUT_CHECK(io::is_directory(dir), "tokenizer ", dir, ": no such directory");
  if (!io::path_exists(dir + "/vocab.json") && io::path_exists(dir + "/tokenizer/vocab.json")) dir += "/tokenizer";
  ClipTokenizer t;
  t.source_ = dir;
  const std::string vocab_path = dir + "/vocab.json", merges_path = dir + "/merges.txt";
  VINF_INPUT_CHECK(io::path_exists(vocab_path), "tokenizer ", dir, ": no vocab.json (a CLIP tokenizer directory holds ",
                   "vocab.json, merges.txt and tokenizer_config.json; see INSTALL.md)");
  VINF_INPUT_CHECK(io::path_exists(merges_path), "tokenizer ", dir, ": no merges.txt (a CLIP tokenizer directory holds ",
                   "vocab.json, merges.txt and tokenizer_config.json; see INSTALL.md)");

  const nlohmann::json vocab = io::read_json_file(vocab_path, "tokenizer vocabulary");
  VINF_INPUT_CHECK(vocab.is_object() && !vocab.empty(), vocab_path, ": expected a non-empty JSON object of token -> id");
  constexpr std::int64_t kMaxId = 1 << 24;
  for (const auto& [token, id] : vocab.items()) {
    VINF_INPUT_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < kMaxId,
                     vocab_path, ": the id of '", token, "' is ", id.dump(), ", not an integer in [0, ", kMaxId, ")");
    t.vocab_.emplace(token, id.get<std::int64_t>());
  }

  std::ifstream merges(merges_path);
  VINF_INPUT_CHECK(merges.good(), "cannot read ", merges_path);
  std::string line;
  std::size_t line_no = 0, used = 0, beyond = 0;
  while (std::getline(merges, line)) {
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line_no == 1) {
      VINF_INPUT_CHECK(line.rfind("#version", 0) == 0, merges_path, " line 1: expected the '#version: 0.2' header, got '",
                       line.substr(0, 60), "'");
      continue;
    }
    if (line.empty()) continue;
    const std::size_t space = line.find(' ');
    VINF_INPUT_CHECK(space != std::string::npos && space > 0 && space + 1 < line.size() &&
                         line.find(' ', space + 1) == std::string::npos,
                     merges_path, " line ", line_no, ": expected two symbols separated by one space, got '",
                     line.substr(0, 60), "'");
    if (used == kMaxMerges) {
      ++beyond;
      continue;
    }
    t.ranks_[line] = static_cast<int>(used++);  // a repeated pair keeps its last rank, as in transformers
  }
  VINF_INPUT_CHECK(line_no >= 1, merges_path, " is empty (expected the '#version: 0.2' header and the merges)");
  if (beyond > 0)
    t.warnings_.push_back(merges_path + " has " + std::to_string(used + beyond) + " merges; CLIPTokenizer uses the first " +
                          std::to_string(kMaxMerges));

  // Special tokens: tokenizer_config.json, then special_tokens_map.json over it (as transformers).
  std::string bos(kStartOfText), eos(kEndOfText), unk(kEndOfText), pad(kEndOfText);
  bool have_pad = false, have_length = false;
  std::vector<std::string> added;
  for (const char* name : {"tokenizer_config.json", "special_tokens_map.json"}) {
    const std::string path = dir + "/" + name;
    if (!io::path_exists(path)) continue;
    const nlohmann::json j = io::read_json_file(path, "tokenizer config");
    VINF_INPUT_CHECK(j.is_object(), path, ": expected a JSON object");
    read_token(j, "bos_token", path, bos);
    read_token(j, "eos_token", path, eos);
    read_token(j, "unk_token", path, unk);
    have_pad = read_token(j, "pad_token", path, pad) || have_pad;
    if (double m = 0; io::JsonConfig(j, path).read("model_max_length", m)) {
      VINF_INPUT_CHECK(m >= 2, path, ": model_max_length ", m, " leaves no room for the bos and eos tokens");
      if (m <= 1e6) {  // transformers writes ~1e30 for "no limit"
        t.max_length_ = static_cast<int>(m);
        have_length = true;
      }
    }
    if (j.contains("added_tokens_decoder") && j["added_tokens_decoder"].is_object()) {
      for (const auto& [id_text, token] : j["added_tokens_decoder"].items()) {
        const std::string content = token_content(token, path, "added_tokens_decoder entry " + id_text);
        std::int64_t id = -1;
        try {
          id = std::stoll(id_text);
        } catch (const std::exception&) {
        }
        VINF_INPUT_CHECK(id >= 0 && id < kMaxId, path, ": added_tokens_decoder key '", id_text, "' is not an id");
        t.vocab_.emplace(content, id);
        added.push_back(content);
      }
    }
  }
  if (const std::string path = dir + "/added_tokens.json"; io::path_exists(path)) {
    const nlohmann::json j = io::read_json_file(path, "tokenizer added tokens");
    VINF_INPUT_CHECK(j.is_object(), path, ": expected a JSON object of token -> id");
    for (const auto& [token, id] : j.items()) {
      // Added tokens are split out of the text before anything else: an empty one would match
      // everywhere without consuming anything, and tokenizing would never end.
      VINF_INPUT_CHECK(!token.empty(), path, ": an added token is empty");
      VINF_INPUT_CHECK(id.is_number_integer() && id.get<std::int64_t>() >= 0 && id.get<std::int64_t>() < kMaxId, path,
                       ": the id of '", token, "' is not a non-negative integer");
      t.vocab_.emplace(token, id.get<std::int64_t>());
      added.push_back(token);
    }
  }
  if (!have_pad)
    t.warnings_.push_back("tokenizer " + dir + " names no pad_token (tokenizer_config.json, special_tokens_map.json): "
                          "padding with " + pad + " as CLIPTokenizer does");
  if (!have_length)
    t.warnings_.push_back("tokenizer " + dir + " gives no model_max_length: using 77 tokens");
  t.finish(bos, eos, unk, pad, added);
  return t;
}

ClipTokenizer ClipTokenizer::byte_level(int max_length) {
  VINF_CHECK(max_length >= 2, "a tokenizer needs room for bos and eos");
  ClipTokenizer t;
  t.source_ = "built-in byte-level";
  t.max_length_ = max_length;
  const auto& symbols = byte_symbols();
  for (std::size_t b = 0; b < 256; ++b) {
    t.vocab_.emplace(symbols[b], static_cast<std::int64_t>(b));
    t.vocab_.emplace(symbols[b] + "</w>", static_cast<std::int64_t>(256 + b));
  }
  t.vocab_.emplace(std::string(kStartOfText), 512);
  t.vocab_.emplace(std::string(kEndOfText), 513);
  t.finish(std::string(kStartOfText), std::string(kEndOfText), std::string(kEndOfText), std::string(kEndOfText), {});
  return t;
}

void ClipTokenizer::save(const std::string& dir) const {
  std::error_code ec;
  fs::create_directories(dir, ec);
  VINF_INPUT_CHECK(!ec, "cannot create the tokenizer directory ", dir, ": ", ec.message());
  nlohmann::ordered_json vocab = nlohmann::ordered_json::object();
  for (std::size_t id = 0; id < by_id_.size(); ++id)
    if (!by_id_[id].empty()) vocab[by_id_[id]] = id;
  std::vector<std::pair<int, const std::string*>> merges;
  for (const auto& [pair, rank] : ranks_) merges.emplace_back(rank, &pair);
  std::sort(merges.begin(), merges.end());
  std::string merges_text = "#version: 0.2\n";
  for (const auto& [rank, pair] : merges) merges_text += *pair + "\n";
  const nlohmann::ordered_json config = {{"bos_token", bos_token_},   {"eos_token", eos_token_},
                                         {"unk_token", unk_token_},   {"pad_token", pad_token_},
                                         {"model_max_length", max_length_}, {"tokenizer_class", "CLIPTokenizer"}};
  io::write_file_atomically(dir + "/vocab.json", vocab.dump(1) + "\n");
  io::write_file_atomically(dir + "/merges.txt", merges_text);
  io::write_file_atomically(dir + "/tokenizer_config.json", config.dump(2) + "\n");
}

std::int64_t ClipTokenizer::token_id(const std::string& token, const char* role) const {
  const auto it = vocab_.find(token);
  VINF_INPUT_CHECK(it != vocab_.end(), "tokenizer ", source_, ": the ", role, " '", token,
                   "' is neither in vocab.json nor an added token");
  return it->second;
}

void ClipTokenizer::finish(const std::string& bos, const std::string& eos, const std::string& unk, const std::string& pad,
                           const std::vector<std::string>& added) {
  bos_id_ = token_id(bos, "bos_token");
  eos_id_ = token_id(eos, "eos_token");
  unk_id_ = token_id(unk, "unk_token");
  pad_id_ = token_id(pad, "pad_token");
  bos_token_ = bos;
  eos_token_ = eos;
  unk_token_ = unk;
  pad_token_ = pad;
  std::int64_t largest = 0;
  for (const auto& [token, id] : vocab_) largest = std::max(largest, id);
  by_id_.assign(static_cast<std::size_t>(largest + 1), std::string());
  for (const auto& [token, id] : vocab_)
    if (by_id_[static_cast<std::size_t>(id)].empty()) by_id_[static_cast<std::size_t>(id)] = token;
  // The specials are split out of the text before anything else, the longest first.
  std::vector<std::string> names = {bos, eos, unk, pad};
  names.insert(names.end(), added.begin(), added.end());
  for (const std::string& name : names)
    if (std::none_of(specials_.begin(), specials_.end(), [&](const auto& s) { return s.first == name; }))
      specials_.emplace_back(name, token_id(name, "added token"));
  std::stable_sort(specials_.begin(), specials_.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
}

void ClipTokenizer::bpe(const std::string& word, std::vector<std::int64_t>& out) const {
  if (const auto hit = cache_.find(word); hit != cache_.end()) {
    out.insert(out.end(), hit->second.begin(), hit->second.end());
    return;
  }
  std::vector<std::int64_t> ids;
  if (word == kStartOfText || word == kEndOfText) {  // kept whole by the reference's bpe cache
    const auto it = vocab_.find(word);
    ids.push_back(it == vocab_.end() ? unk_id_ : it->second);
  } else {
    const auto& symbols_of = byte_symbols();
    std::vector<std::string> symbols;
    symbols.reserve(word.size());
    for (unsigned char b : word) symbols.push_back(symbols_of[b]);
    symbols.back() += "</w>";
    std::string key;
    while (symbols.size() > 1) {
      int best = INT_MAX;
      std::size_t at = 0;
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) {
        key.assign(symbols[i]).append(" ").append(symbols[i + 1]);
        if (const auto r = ranks_.find(key); r != ranks_.end() && r->second < best) {
          best = r->second;
          at = i;
        }
      }
      if (best == INT_MAX) break;
      const std::string first = symbols[at], second = symbols[at + 1];
      std::vector<std::string> merged;
      merged.reserve(symbols.size());
      for (std::size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == first && symbols[i + 1] == second) {
          merged.push_back(first + second);
          i += 2;
        } else {
          merged.push_back(std::move(symbols[i]));
          ++i;
        }
      }
      symbols = std::move(merged);
    }
    for (const std::string& s : symbols) {
      const auto it = vocab_.find(s);
      ids.push_back(it == vocab_.end() ? unk_id_ : it->second);
    }
  }
  out.insert(out.end(), ids.begin(), ids.end());
  if (cache_.size() >= kCacheLimit) cache_.clear();
  cache_.emplace(word, std::move(ids));
}

std::vector<std::int64_t> ClipTokenizer::tokenize(std::string_view text) const {
  std::vector<std::int64_t> ids;
  auto run_piece = [&](std::string_view piece) {
    if (piece.empty()) return;
    const std::u32string cleaned = clean(piece);
    const std::u32string_view s(cleaned);
    for (std::size_t i = 0; i < s.size();) {
      if (is_space(s[i])) {
        ++i;
        continue;
      }
      const std::size_t n = match_length(s, i);
      bpe(to_utf8(s.substr(i, n)), ids);
      i += n;
    }
  };
  std::size_t start = 0;
  for (std::size_t i = 0; i < text.size();) {
    const auto special = std::find_if(specials_.begin(), specials_.end(), [&](const auto& sp) {
      return text.compare(i, sp.first.size(), sp.first) == 0;
    });
    if (special == specials_.end()) {
      ++i;
      continue;
    }
    run_piece(text.substr(start, i - start));
    ids.push_back(special->second);
    i += special->first.size();
    start = i;
  }
  run_piece(text.substr(start));
  return ids;
}

TokenizedText ClipTokenizer::encode(std::string_view text) const {
  const std::vector<std::int64_t> tokens = tokenize(text);
  const std::size_t room = static_cast<std::size_t>(max_length_ - 2), kept = std::min(tokens.size(), room);
  TokenizedText r;
  r.length = static_cast<int>(tokens.size()) + 2;
  r.ids.reserve(static_cast<std::size_t>(max_length_));
  r.ids.push_back(bos_id_);
  r.ids.insert(r.ids.end(), tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(kept));
  r.ids.push_back(eos_id_);
  r.ids.resize(static_cast<std::size_t>(max_length_), pad_id_);
  if (kept < tokens.size())
    r.dropped = decode(std::vector<std::int64_t>(tokens.begin() + static_cast<std::ptrdiff_t>(kept), tokens.end()));
  return r;
}

std::string ClipTokenizer::decode(const std::vector<std::int64_t>& ids) const {
  static const std::unordered_map<std::string, unsigned char> byte_of = [] {
    std::unordered_map<std::string, unsigned char> m;
    const auto& symbols = byte_symbols();
    for (std::size_t b = 0; b < 256; ++b) m.emplace(symbols[b], static_cast<unsigned char>(b));
    return m;
  }();
  std::string text;
  for (std::int64_t id : ids) {
    if (id < 0 || id >= vocab_size() || by_id_[static_cast<std::size_t>(id)].empty()) continue;
    // Every token, the specials included, is spelled in the byte alphabet (<|endoftext|> is ASCII).
    std::string_view rest(by_id_[static_cast<std::size_t>(id)]);
    const bool end_of_word = rest.size() >= 4 && rest.substr(rest.size() - 4) == "</w>";
    if (end_of_word) rest.remove_suffix(4);
    // Map each character back to its byte.
    for (std::size_t i = 0; i < rest.size();) {
      std::size_t n = 1;
      const auto lead = static_cast<unsigned char>(rest[i]);
      if (lead >= 0xF0) n = 4;
      else if (lead >= 0xE0) n = 3;
      else if (lead >= 0xC0) n = 2;
      n = std::min(n, rest.size() - i);
      const auto b = byte_of.find(std::string(rest.substr(i, n)));
      if (b != byte_of.end()) text.push_back(static_cast<char>(b->second));
      i += n;
    }
    if (end_of_word) text.push_back(' ');
  }
  while (!text.empty() && text.back() == ' ') text.pop_back();
  return text;
}

}  // namespace vinf::model
