// The released Video-Infinity code's JSON config (--import-vi-config: infinity/config.cpp through
// app/vi_options.cpp), then the resolved settings against a few partitions.
#include <boost/program_options.hpp>

#include "fuzz_support.hpp"
#include "vi_settings.hpp"
#include "app/vi_options.hpp"
#include "infinity/config.hpp"

namespace po = boost::program_options;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vinf::fuzz::write_file("vi.json", {reinterpret_cast<const char*>(data), size});
  vinf::fuzz::expect_input_errors_only([&] {
    vinf::app::ViOptions options;
    po::options_description d;
    options.add_to(d);
    po::variables_map vm;
    po::store(po::command_line_parser(std::vector<std::string>{"--import-vi-config", path}).options(d).run(), vm);
    po::notify(vm);
    const vinf::infinity::Config c = options.resolve(vm);
    if (!vinf::fuzz::usable(c)) std::abort();
    for (int clips : {1, 2, 3}) {
      vinf::fuzz::expect_input_errors_only([&] { vinf::infinity::check_partition(c, 48, clips); });
      float local = 0, global = 0;
      c.biases(500, local, global);
    }
  });
  return 0;
}
