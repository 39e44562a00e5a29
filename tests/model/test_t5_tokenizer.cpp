// The T5 tokenizer against transformers' slow T5Tokenizer (legacy) on tests/fixtures/wan-tiny, its
// special tokens and refusals, and the Wan pipeline's prompt cleanup.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/t5_tokenizer.hpp"
#include "wan_fixture.hpp"

using namespace vinf;

namespace {

// Row r of an I64 [N, L] tensor of a safetensors file, which need not align it to 8 bytes: copied
// by bytes.
std::vector<std::int64_t> row(const Tensor& t, std::int64_t r) {
  const std::int64_t n = t.size(1);
  std::vector<std::int64_t> out(static_cast<std::size_t>(n));
  std::memcpy(out.data(), static_cast<const char*>(t.data) + r * n * static_cast<std::int64_t>(sizeof(std::int64_t)),
              out.size() * sizeof(std::int64_t));
  return out;
}

}  // namespace

TEST_CASE("golden: T5 tokenizer ids and attention mask equal transformers' T5Tokenizer (wan-tiny, max_length 24)") {
  const model::T5Tokenizer tok = model::T5Tokenizer::load(test::wan_tiny() + "/tokenizer");
  CHECK(tok.eos_id() == 1);
  CHECK(tok.pad_id() == 0);
  CHECK(tok.vocab_size() == 800);
  const io::SafetensorsFile ref(test::wan_tiny() + "/ref_text.safetensors");
  const Tensor ids = ref.tensor("input_ids"), mask = ref.tensor("attention_mask");
  const std::vector<std::string> prompts = test::wan_tiny_prompts();
  REQUIRE(prompts.size() == 5);
  REQUIRE(ids.size(0) == 5);
  REQUIRE(ids.size(1) == 24);
  for (std::size_t p = 0; p < prompts.size(); ++p) {
    INFO("prompt " << p << ": '" << prompts[p] << "'");
    const model::T5TokenizedText t = tok.encode(prompts[p], 24);
    CHECK(t.ids == row(ids, static_cast<std::int64_t>(p)));
    CHECK(t.mask == row(mask, static_cast<std::int64_t>(p)));
  }
  // The empty prompt is eos alone; the last one is cut to 23 tokens and keeps its eos.
  CHECK(tok.encode("", 24).length == 1);
  CHECK(tok.encode(prompts[4], 24).truncated());
  CHECK(tok.encode(prompts[4], 24).ids.back() == 1);
  CHECK_FALSE(tok.encode(prompts[0], 64).truncated());
}

TEST_CASE("T5 tokenizer: special tokens in the text are split out whole, eos is not doubled, max_length 1") {
  const model::T5Tokenizer tok = model::T5Tokenizer::load(test::wan_tiny());  // a pipeline root finds tokenizer/
  const std::vector<std::int64_t> a = tok.tokenize("a dog");
  std::vector<std::int64_t> want = a;
  want.push_back(1);
  const std::vector<std::int64_t> more = tok.tokenize("cat");
  want.insert(want.end(), more.begin(), more.end());
  CHECK(tok.tokenize("a dog</s>cat") == want);
  CHECK(tok.tokenize("<pad><unk>") == std::vector<std::int64_t>{0, 2});
  // Text ending in eos gets no second one (transformers warns and keeps it).
  const model::T5TokenizedText t = tok.encode("a dog</s>", 8);
  CHECK(t.length == static_cast<int>(a.size()) + 1);
  CHECK(t.ids[a.size()] == 1);
  CHECK(t.ids[a.size() + 1] == 0);
  const model::T5TokenizedText one = tok.encode("a dog", 1);
  CHECK(one.ids == std::vector<std::int64_t>{1});
  CHECK(one.mask == std::vector<std::int64_t>{1});
  CHECK_THROWS_AS(tok.encode("a dog", 0), InputError);
}

TEST_CASE("T5 tokenizer: a directory without spiece.model is refused naming it") {
  const test::TempDir dir("t5-tok");
  std::ofstream(dir.path / "vocab.json") << "{}";
  try {
    (void)model::T5Tokenizer::load(dir.path.string());
    FAIL("no error");
  } catch (const InputError& e) {
    const std::string what = e.what();
    CHECK(what.find("spiece.model") != std::string::npos);
    CHECK(what.find(dir.path.string()) != std::string::npos);
  }
  CHECK_THROWS_AS(model::T5Tokenizer::load((dir.path / "none").string()), InputError);
  std::ofstream(dir.path / "spiece.model") << "not a model";
  CHECK_THROWS_AS(model::T5Tokenizer::load(dir.path.string()), InputError);
}

TEST_CASE("Wan prompt cleanup: HTML references twice, whitespace runs collapsed, ends stripped") {
  CHECK(model::wan_prompt_clean("  lots   of\twhitespace\nand &amp; html entities  ") ==
        "lots of whitespace and & html entities");
  CHECK(model::wan_prompt_clean("&amp;lt;") == "<");
  CHECK(model::wan_prompt_clean("&amp;amp;amp;") == "&amp;");  // twice, not until nothing changes
  CHECK(model::wan_prompt_clean("a&nbsp;&nbsp;b") == "a b");   // U+00A0 is whitespace to Python
  CHECK(model::wan_prompt_clean("\u3000caf\u00e9\u2003 ok \r\n") == "caf\u00e9 ok");
  CHECK(model::wan_prompt_clean("") == "");
  CHECK(model::wan_prompt_clean(" \t\n ") == "");
  CHECK(model::html_unescape("&quot;x&quot; &#39;y&apos; &lt;b&gt;") == "\"x\" 'y' <b>");
  CHECK(model::html_unescape("&#65;&#x42;&#X43;&#100") == "ABCd");
  CHECK(model::html_unescape("&#x1F415;") == "\U0001F415");
  CHECK(model::html_unescape("&#0;&#xD800;&#99999999;") == "\uFFFD\uFFFD\uFFFD");
  CHECK(model::html_unescape("&#150;") == "\u2013");  // windows-1252, as HTML reads 0x80-0x9F
  CHECK(model::html_unescape("&#1;") == "");
  CHECK(model::html_unescape("&ampx &amp &lt3 &unknown; & &#; &#x;") == "&x & <3 &unknown; & &#; &#x;");
  CHECK(model::html_unescape("&apos") == "&apos");  // apos needs its ';'
}

