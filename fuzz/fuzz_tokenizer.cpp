// The CLIP tokenizer's files (model/tokenizer.cpp) and a prompt through an accepted tokenizer.
// Input: vocab.json, merges.txt, tokenizer_config.json, special_tokens_map.json,
// added_tokens.json and the prompt, separated by NUL bytes; a file whose part is missing is absent.
#include "fuzz_support.hpp"
#include "model/tokenizer.hpp"

namespace {

constexpr const char* kFiles[] = {"vocab.json", "merges.txt", "tokenizer_config.json", "special_tokens_map.json",
                                  "added_tokens.json"};
constexpr std::size_t kFileCount = sizeof kFiles / sizeof kFiles[0];

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> parts = vinf::fuzz::split_parts(data, size, kFileCount + 1);
  for (std::size_t i = 0; i < kFileCount; ++i) {
    if (i < parts.size()) vinf::fuzz::write_file(kFiles[i], parts[i]);
    else vinf::fuzz::remove_file(kFiles[i]);
  }
  const std::string prompt = parts.size() > kFileCount ? parts[kFileCount] : "a red panda";
  vinf::fuzz::expect_input_errors_only([&] {
    const auto tok = vinf::model::ClipTokenizer::load(vinf::fuzz::scratch_dir());
    const vinf::model::TokenizedText t = tok.encode(prompt);
    if (t.ids.size() != static_cast<std::size_t>(tok.max_length()) || t.ids.front() != tok.bos_id()) std::abort();
    (void)tok.decode(t.ids);
  });
  return 0;
}
