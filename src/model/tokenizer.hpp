// The CLIP BPE tokenizer as transformers' slow CLIPTokenizer runs it without the ftfy package
// (model-spec §5.4): special and added tokens (bos, eos, unk, pad, added tokens) are split out of
// the text literally, each remaining piece is cleaned (control characters dropped, whitespace
// collapsed, CJK ideographs split apart, NFC, Unicode lower-casing), pre-tokenised with CLIP's
// pattern, mapped byte by byte to printable characters and merged by rank with `</w>` on the last
// symbol. A sequence is [bos] + the first max_length - 2 tokens + [eos], padded with the pad id.
// Unicode classes and case mapping come from ICU. Any byte string is accepted: invalid UTF-8 is
// replaced by U+FFFD, which the cleanup then drops.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace vinf::model {

// The cleanup of transformers' BasicTokenizer (strip_accents=False, no punctuation split), as UTF-8.
std::string clip_clean_text(std::string_view utf8);

struct TokenizedText {
  std::vector<std::int64_t> ids;  // max_length ids: bos, tokens, eos, pads
  int length = 0;                 // bos + tokens + eos before truncation
  std::string dropped;            // the text of the tokens cut off ("" when nothing was)
  bool truncated() const { return length > static_cast<int>(ids.size()); }
};

class ClipTokenizer {
 public:
  // dir: a tokenizer directory (vocab.json, merges.txt, and tokenizer_config.json and/or
  // special_tokens_map.json for the special tokens and model_max_length), or a pipeline root with
  // tokenizer/. Throws vinf::InputError naming the file (and line) for a missing or malformed file.
  static ClipTokenizer load(const std::string& dir);
  // The built-in models' tokenizer: CLIP's byte alphabet with no merges (every word is spelled
  // byte by byte), ids 0-255 the bytes, 256-511 the same with </w>, bos 512, eos 513, padded
  // with eos.
  static ClipTokenizer byte_level(int max_length = 77);

  // Writes vocab.json, merges.txt and tokenizer_config.json (transformers' layout) into dir.
  void save(const std::string& dir) const;

  // Ids of the text without bos/eos and without truncation.
  std::vector<std::int64_t> tokenize(std::string_view text) const;
  // What the pipeline feeds the text encoder: truncated to max_length (keeping bos and eos) and padded.
  TokenizedText encode(std::string_view text) const;
  // The text of some ids (</w> becomes a space; unknown ids are skipped).
  std::string decode(const std::vector<std::int64_t>& ids) const;

  int max_length() const { return max_length_; }
  std::int64_t bos_id() const { return bos_id_; }
  std::int64_t eos_id() const { return eos_id_; }
  std::int64_t pad_id() const { return pad_id_; }
  std::int64_t vocab_size() const { return static_cast<std::int64_t>(by_id_.size()); }  // largest id + 1
  std::size_t merges() const { return ranks_.size(); }
  const std::string& source() const { return source_; }
  // Defaults taken for settings the files do not give (for the caller to log).
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  ClipTokenizer() = default;
  void finish(const std::string& bos, const std::string& eos, const std::string& unk, const std::string& pad,
              const std::vector<std::string>& added);
  std::int64_t token_id(const std::string& token, const char* role) const;
  void bpe(const std::string& word_utf8, std::vector<std::int64_t>& out) const;

  std::unordered_map<std::string, std::int64_t> vocab_;
  std::vector<std::string> by_id_;
  std::unordered_map<std::string, int> ranks_;  // "a b" -> merge rank
  std::vector<std::pair<std::string, std::int64_t>> specials_;  // split out of the text as is
  std::int64_t bos_id_ = 0, eos_id_ = 0, unk_id_ = 0, pad_id_ = 0;
  std::string bos_token_, eos_token_, unk_token_, pad_token_, source_;
  int max_length_ = 77;
  std::vector<std::string> warnings_;
  mutable std::unordered_map<std::string, std::vector<std::int64_t>> cache_;  // word -> ids (not thread-safe)
};

}  // namespace vinf::model
