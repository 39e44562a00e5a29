// The CLIP text encoder's config.json reader (model/clip_text_config.cpp) and the parameter list
// that follows from an accepted config.
#include "fuzz_support.hpp"
#include "model/clip_text_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vinf::fuzz::write_file("config.json", {reinterpret_cast<const char*>(data), size});
  vinf::fuzz::expect_input_errors_only([&] {
    const vinf::model::ClipTextConfig c = vinf::model::load_clip_text_config(path);
    if (vinf::model::parameter_count(vinf::model::clip_text_parameters(c)) <= 0) std::abort();
  });
  return 0;
}
