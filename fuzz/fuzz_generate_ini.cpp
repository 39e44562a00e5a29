// `vinf generate --config FILE`: the INI reader (Boost's config-file parser over the options of
// app/generate_options.cpp), then the checks of an accepted file against a job of 4 ranks.
#include "app/generate_options.hpp"
#include "fuzz_support.hpp"
#include "vi_settings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vinf::fuzz::write_file("run.ini", {reinterpret_cast<const char*>(data), size});
  vinf::fuzz::expect_input_errors_only([&] {
    vinf::app::RunPlan o;
    if (vinf::app::parse_generate_options({"--config", path}, o) != 0) return;
    if (!vinf::fuzz::usable(o.vi)) std::abort();
    vinf::pipeline::check_unet_job(o, 4);
  });
  return 0;
}
