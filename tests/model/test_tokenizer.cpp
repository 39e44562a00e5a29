// The CLIP BPE tokenizer: transformers' slow CLIPTokenizer ids for the cases of
// ../shared/fixtures/clip-tokenizer/reference_ids.json (skipped when that directory is absent), a
// small vocabulary written here whose merges are worked out by hand, the cleanup on its own, and
// the files it refuses.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "../support.hpp"
#include "core/error.hpp"
#include "model/tokenizer.hpp"

using namespace vinf;
using test::TempDir;
namespace fs = std::filesystem;

namespace {

void write(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::vector<std::int64_t> ids_of(const nlohmann::json& j) { return j.get<std::vector<std::int64_t>>(); }

// vocab.json for the hand-worked cases: a few byte symbols, merge results, the two specials.
const char* kSmallVocab = R"({"h": 0, "e": 1, "l": 2, "o": 3, "o</w>": 4, "he": 5, "ll": 6, "hell": 7, "hello</w>": 8,
  "l</w>": 9, "!": 10, "!</w>": 11, "<|startoftext|>": 12, "<|endoftext|>": 13, "x</w>": 14})";
const char* kSmallMerges = "#version: 0.2\nh e\nl l\nhe ll\nhell o</w>\n";

void make_small_dir(const TempDir& d, const std::string& pad) {
  write(d.path / "vocab.json", kSmallVocab);
  write(d.path / "merges.txt", kSmallMerges);
  write(d.path / "tokenizer_config.json",
        R"({"bos_token": "<|startoftext|>", "eos_token": {"content": "<|endoftext|>"}, "unk_token": "<|endoftext|>",
            "model_max_length": 8, "pad_token": ")" + pad + "\"}");
}

}  // namespace

TEST_CASE("golden: CLIP tokenizer equals transformers' CLIPTokenizer on reference_ids.json") {
  if (!test::shared_tokenizer_or_skip()) return;
  const model::ClipTokenizer pad_eos = model::ClipTokenizer::load(test::kSharedTokenizer);
  const test::PadBangTokenizer bang;
  const model::ClipTokenizer pad_0 = model::ClipTokenizer::load(bang.str());
  CHECK(pad_eos.pad_id() == 49407);
  CHECK(pad_0.pad_id() == 0);
  CHECK(pad_eos.bos_id() == 49406);
  CHECK(pad_eos.eos_id() == 49407);
  CHECK(pad_eos.max_length() == 77);
  CHECK(pad_eos.merges() == 48894);
  CHECK(pad_eos.vocab_size() == 49408);
  CHECK(pad_eos.warnings().empty());

  std::ifstream in(test::kSharedTokenizer + "/reference_ids.json");
  const nlohmann::json cases = nlohmann::json::parse(in);
  REQUIRE(cases.size() >= 20);
  for (const auto& c : cases) {
    const std::string text = c["text"].get<std::string>();
    INFO("case " << c["id"].get<int>() << ": '" << text << "'");
    const model::TokenizedText a = pad_eos.encode(text), b = pad_0.encode(text);
    CHECK(a.ids == ids_of(c["ids_pad_eos"]));
    CHECK(b.ids == ids_of(c["ids_pad_0"]));
    CHECK(a.length == c["n_tokens_untruncated"].get<int>());
    CHECK(b.length == c["n_tokens_untruncated_pad_0"].get<int>());
    std::vector<std::int64_t> full = {49406};
    for (std::int64_t id : pad_eos.tokenize(text)) full.push_back(id);
    full.push_back(49407);
    CHECK(full == ids_of(c["ids_untruncated"]));
    CHECK(!a.truncated());
  }
}

TEST_CASE("CLIP tokenizer: a long prompt keeps bos, the first 75 tokens and eos, and says what it dropped") {
  if (!test::shared_tokenizer_or_skip()) return;
  const model::ClipTokenizer tok = model::ClipTokenizer::load(test::kSharedTokenizer);
  std::string text;
  for (int i = 0; i < 80; ++i) text += i < 75 ? "cat " : "dog ";
  const model::TokenizedText r = tok.encode(text);
  REQUIRE(r.ids.size() == 77);
  CHECK(r.length == 82);
  CHECK(r.truncated());
  CHECK(r.ids.front() == 49406);
  CHECK(r.ids.back() == 49407);
  const std::int64_t cat = tok.tokenize("cat").at(0);
  for (std::size_t i = 1; i < 76; ++i) CHECK(r.ids[i] == cat);
  CHECK(r.dropped == "dog dog dog dog dog");
  // Exactly 75 tokens fit.
  const model::TokenizedText fits = tok.encode(text.substr(0, 75 * 4));
  CHECK(!fits.truncated());
  CHECK(fits.ids.back() == 49407);
  CHECK(fits.dropped.empty());
}

TEST_CASE("CLIP tokenizer: merges by lowest rank, non-overlapping, left to right (a vocabulary written here)") {
  TempDir d("small");
  make_small_dir(d, "<|endoftext|>");
  const model::ClipTokenizer tok = model::ClipTokenizer::load(d.str());
  CHECK(tok.max_length() == 8);
  CHECK(tok.pad_id() == 13);
  // h e l l o</w> -> he l l o</w> -> he ll o</w> -> hell o</w> -> hello</w>
  CHECK(tok.tokenize("hello") == std::vector<std::int64_t>{8});
  CHECK(tok.tokenize("HeLLo") == std::vector<std::int64_t>{8});  // lower-cased first
  // h e l l</w>: "l l</w>" is no merge, so he l l</w>
  CHECK(tok.tokenize("hell") == std::vector<std::int64_t>{5, 2, 9});
  // l l l l</w>: one pass merges the first pair only (the second l pairs with l</w>)
  CHECK(tok.tokenize("llll") == std::vector<std::int64_t>{6, 2, 9});
  // Letters and punctuation are separate words; an unknown symbol becomes the unk token.
  CHECK(tok.tokenize("hello!") == std::vector<std::int64_t>{8, 11});
  CHECK(tok.tokenize("hello z") == std::vector<std::int64_t>{8, 13});
  // A special token in the text is kept whole, also lower-cased ones by the pattern.
  CHECK(tok.tokenize("<|startoftext|>hello") == std::vector<std::int64_t>{12, 8});
  CHECK(tok.tokenize("<|StartOfText|>") == std::vector<std::int64_t>{12});
  // Padding, truncation to max_length 8 keeping bos and eos.
  const model::TokenizedText r = tok.encode("hello hello hello hello hello hello hello");
  CHECK(r.ids == std::vector<std::int64_t>{12, 8, 8, 8, 8, 8, 8, 13});
  CHECK(r.length == 9);
  CHECK(r.dropped == "hello");
  CHECK(tok.encode("").ids == std::vector<std::int64_t>{12, 13, 13, 13, 13, 13, 13, 13});
}

TEST_CASE("CLIP tokenizer: a pad token that is an ordinary character is split out of the text") {
  TempDir d("small-bang");
  make_small_dir(d, "!");
  const model::ClipTokenizer tok = model::ClipTokenizer::load(d.str());
  CHECK(tok.pad_id() == 10);
  CHECK(tok.tokenize("hello!") == std::vector<std::int64_t>{8, 10});
  CHECK(tok.tokenize("!!x") == std::vector<std::int64_t>{10, 10, 14});
  CHECK(tok.encode("x").ids == std::vector<std::int64_t>{12, 14, 13, 10, 10, 10, 10, 10});
}

TEST_CASE("CLIP tokenizer: added tokens from tokenizer_config.json and added_tokens.json are split out whole") {
  TempDir d("added");
  make_small_dir(d, "<|endoftext|>");
  write(d.path / "tokenizer_config.json",
        R"({"pad_token": "<|endoftext|>", "model_max_length": 77,
            "added_tokens_decoder": {"16": {"content": "<cat>", "special": false}}})");
  write(d.path / "added_tokens.json", R"({"<dog>": 17})");
  const model::ClipTokenizer tok = model::ClipTokenizer::load(d.str());
  CHECK(tok.tokenize("hello<cat>x <dog>") == std::vector<std::int64_t>{8, 16, 14, 17});
  CHECK(tok.vocab_size() == 18);
  write(d.path / "tokenizer_config.json", R"({"pad_token": "!", "added_tokens_decoder": {"x": {"content": "<cat>"}}})");
  CHECK_THROWS_WITH_AS(model::ClipTokenizer::load(d.str()), doctest::Contains("added_tokens_decoder key 'x' is not an id"),
                       InputError);
}

TEST_CASE("CLIP tokenizer: the cleanup without ftfy") {
  CHECK(model::clip_clean_text("  A\tB\n\nC  ") == "a b c");
  CHECK(model::clip_clean_text("a\x01" "b\x7f" "c") == "abc");               // control characters
  CHECK(model::clip_clean_text("a\xc2\xa0" "b") == "a b");                    // no-break space (Zs)
  CHECK(model::clip_clean_text("a\xe2\x80\x8b" "b") == "ab");                 // zero-width space (Cf)
  CHECK(model::clip_clean_text("a\xef\xbf\xbd" "b") == "ab");                 // U+FFFD
  CHECK(model::clip_clean_text("\xe4\xbd\xa0\xe5\xa5\xbdworld") == "\xe4\xbd\xa0 \xe5\xa5\xbd world");  // CJK split
  CHECK(model::clip_clean_text("\xc3\x80\xc3\x89 \xce\xa3\xce\x91\xce\xa3") ==
        "\xc3\xa0\xc3\xa9 \xcf\x83\xce\xb1\xcf\x82");                         // ÀÉ ΣΑΣ -> àé σας (final sigma)
  CHECK(model::clip_clean_text("e\xcc\x81") == "\xc3\xa9");                   // NFC: e + U+0301 -> é
  CHECK(model::clip_clean_text("\xff\xfe" "abc\xc3") == "abc");               // invalid UTF-8 is dropped
  CHECK(model::clip_clean_text("") == "");
}

TEST_CASE("CLIP tokenizer: any bytes give max_length ids inside the vocabulary (built-in byte-level)") {
  const model::ClipTokenizer tok = model::ClipTokenizer::byte_level();
  CHECK(tok.vocab_size() == 514);
  CHECK(tok.tokenize("ab") == std::vector<std::int64_t>{97, 256 + 98});
  CHECK(tok.decode(tok.tokenize("a red fox, 2 cats")) == "a red fox , 2 cats");
  std::mt19937 rng(7);
  for (int n = 0; n < 300; ++n) {
    std::string text(rng() % 200, '\0');
    for (char& ch : text) ch = static_cast<char>(rng() & 0xFF);
    const model::TokenizedText r = tok.encode(text);
    REQUIRE(r.ids.size() == 77);
    for (std::int64_t id : r.ids) REQUIRE((id >= 0 && id < tok.vocab_size()));
    CHECK(r.ids.front() == 512);
  }
}

TEST_CASE("CLIP tokenizer: the files it refuses, each named") {
  auto refused = [](const std::string& dir, const std::string& words) {
    CHECK_THROWS_WITH_AS(model::ClipTokenizer::load(dir), doctest::Contains(words.c_str()), InputError);
  };
  refused("/no/such/tokenizer", "no such directory");
  TempDir d("bad");
  refused(d.str(), "no vocab.json");
  write(d.path / "vocab.json", kSmallVocab);
  refused(d.str(), "no merges.txt");
  write(d.path / "merges.txt", kSmallMerges);
  write(d.path / "tokenizer_config.json", R"({"pad_token": "<pad>"})");
  refused(d.str(), "pad_token '<pad>' is neither in vocab.json");
  write(d.path / "tokenizer_config.json", R"({"pad_token": 3})");
  refused(d.str(), "pad_token must be a string");
  write(d.path / "tokenizer_config.json", R"({"model_max_length": "77"})");
  refused(d.str(), (d.path / "tokenizer_config.json").string() +
                       ": config key 'model_max_length' must be a number, got \"77\"");
  write(d.path / "tokenizer_config.json", "{\"pad_token\": ");
  refused(d.str(), "is not valid JSON");
  fs::remove(d.path / "tokenizer_config.json");
  {
    const model::ClipTokenizer defaults = model::ClipTokenizer::load(d.str());  // no config: CLIPTokenizer's defaults
    CHECK(defaults.pad_id() == 13);
    CHECK(defaults.warnings().size() == 2);
  }
  write(d.path / "vocab.json", "[1, 2]");
  refused(d.str(), "expected a non-empty JSON object");
  write(d.path / "vocab.json", R"({"a": "one"})");
  refused(d.str(), "the id of 'a' is \"one\"");
  write(d.path / "vocab.json", "{\"a\": 1");
  refused(d.str(), "vocab.json is not valid JSON");
  write(d.path / "vocab.json", kSmallVocab);
  write(d.path / "merges.txt", "h e\nl l\n");
  refused(d.str(), "line 1: expected the '#version: 0.2' header");
  write(d.path / "merges.txt", "#version: 0.2\nh e\nl l x\n");
  refused(d.str(), "merges.txt line 3: expected two symbols");
  write(d.path / "merges.txt", "");
  refused(d.str(), "is empty");
  // An empty added token would match everywhere and consume nothing: tokenizing never ended.
  write(d.path / "merges.txt", kSmallMerges);
  write(d.path / "added_tokens.json", R"({"": 3})");
  refused(d.str(), "added_tokens.json: an added token is empty");
}
