// `vinf generate`'s command line (app/generate_options.cpp with the [vi] options of
// app/vi_options.cpp): the arguments are the input's NUL-separated parts; an accepted command
// line is then checked against a job of 1 to 8 ranks (the input's length picks it).
#include "app/generate_options.hpp"
#include "fuzz_support.hpp"
#include "vi_settings.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::vector<std::string> args = vinf::fuzz::split_parts(data, size, 64);
  vinf::fuzz::expect_input_errors_only([&] {
    vinf::app::RunPlan o;
    if (vinf::app::parse_generate_options(args, o) != 0) return;
    if (!vinf::fuzz::usable(o.vi)) std::abort();
    vinf::pipeline::check_unet_job(o, 1 + static_cast<int>(size % 8));
  });
  return 0;
}
