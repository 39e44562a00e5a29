// The T5 SentencePiece tokenizer as transformers' slow T5Tokenizer runs it with legacy=True (the
// Wan pipelines' UMT5 tokenizer): the special tokens (pad, eos, unk and the added tokens of
// tokenizer_config.json) are split out of the text literally, every other piece of text is encoded
// by the SentencePiece model (spiece.model, through libsentencepiece) on its own, and a sequence is
// the first max_length - 1 ids, then eos (unless the ids already end with it), padded with the pad
// id to max_length. The attention mask is 1 on the ids and eos, 0 on the padding.
//
// Also the Wan pipeline's prompt cleanup (`prompt_clean`), which the caller applies explicitly.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vinf::model {

// Python's html.unescape: named references (the common ones: amp, lt, gt, quot, apos, nbsp, with
// or without ';' where HTML allows it), decimal &#NNN; and hexadecimal &#xHH; references, with
// HTML's replacements for code points it forbids. Anything else is left as it is.
std::string html_unescape(std::string_view utf8);
// The Wan pipeline's prompt_clean without ftfy: HTML references undone twice, every run of
// whitespace (Python's Unicode whitespace, no-break space included) made one space, both ends
// stripped.
std::string wan_prompt_clean(std::string_view utf8);

struct T5TokenizedText {
  std::vector<std::int64_t> ids;   // max_length ids: tokens, eos, pads
  std::vector<std::int64_t> mask;  // 1 on tokens and eos, 0 on pads
  int length = 0;                  // tokens + eos before truncation
  bool truncated() const { return length > static_cast<int>(ids.size()); }
};

class T5Tokenizer {
 public:
  // dir: a tokenizer directory holding spiece.model (and optionally tokenizer_config.json, for the
  // added tokens), or a pipeline root with tokenizer/. Throws vinf::InputError naming the directory
  // and spiece.model when it is missing, and the file for one SentencePiece cannot read.
  static T5Tokenizer load(const std::string& dir);

  // The ids of the text without eos and without truncation.
  std::vector<std::int64_t> tokenize(std::string_view text) const;
  // What the pipeline feeds the text encoder: at most max_length - 1 tokens, eos, padding.
  T5TokenizedText encode(std::string_view text, int max_length) const;

  std::int64_t eos_id() const { return eos_id_; }
  std::int64_t pad_id() const { return pad_id_; }
  std::int64_t unk_id() const { return unk_id_; }
  std::int64_t vocab_size() const { return vocab_size_; }  // largest id + 1
  const std::string& source() const { return source_; }

 private:
  struct Model;
  T5Tokenizer() = default;
  void encode_piece(std::string_view text, std::vector<std::int64_t>& out) const;

  std::shared_ptr<const Model> model_;
  std::vector<std::pair<std::string, std::int64_t>> specials_;  // split out of the text as is
  std::int64_t eos_id_ = 1, pad_id_ = 0, unk_id_ = 2, vocab_size_ = 0;
  std::string source_;
};

}  // namespace vinf::model
