// The VAE's config.json reader (model/vae_config.cpp) and the decoder's parameter list and upscale
// that follow from an accepted config.
#include "fuzz_support.hpp"
#include "model/vae_config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vinf::fuzz::write_file("config.json", {reinterpret_cast<const char*>(data), size});
  vinf::fuzz::expect_input_errors_only([&] {
    const vinf::model::VaeConfig c = vinf::model::load_vae_config(path);
    if (c.upscale() < 1) std::abort();
    if (vinf::model::parameter_count(vinf::model::vae_decoder_parameters(c)) <= 0) std::abort();
  });
  return 0;
}
