// Option values that check themselves (app/option_values.hpp): numbers against their ranges,
// paths against what they must name, wherever the value comes from; and how a message quotes text
// the user gave (core/utf8.hpp excerpt) and names the --config line an option came from.
#include <doctest/doctest.h>

#include <boost/program_options.hpp>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <unistd.h>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#include "core/utf8.hpp"

namespace po = boost::program_options;
namespace fs = std::filesystem;
using namespace vinf;

namespace {

// Parses `args` against one option; returns the error text, "" when the value was taken.
template <class T>
std::string parse_one(po::value_semantic* semantic, const std::vector<std::string>& args, T* out = nullptr) {
  po::options_description opts;
  opts.add_options()("x", semantic, "an option");
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(opts).run(), vm);
    po::notify(vm);
    if (out) *out = vm["x"].as<T>();
  } catch (const po::error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("a ranged number is checked when it is read") {
  int steps = 0;
  CHECK(parse_one<int>(app::ranged<int>(nullptr, 1, 1000), {"--x", "30"}, &steps).empty());
  CHECK(steps == 30);
  CHECK(parse_one<int>(app::ranged<int>(nullptr, 1, 1000), {"--x", "1000"}).empty());
  const std::string low = parse_one<int>(app::ranged<int>(nullptr, 1, 1000), {"--x", "0"});
  CHECK(low.find("option '--x' must be in [1, 1000], got '0'") != std::string::npos);
  CHECK_FALSE(parse_one<int>(app::ranged<int>(nullptr, 1, 1000), {"--x", "1001"}).empty());
  // Floats: NaN and infinity are outside every range; an overflow to infinity too.
  for (const char* bad : {"nan", "inf", "-inf", "1e39"})
    CHECK_FALSE(parse_one<float>(app::ranged<float>(nullptr, -100, 100), {"--x", bad}).empty());
  // An open end, a half-open decay rate, and "0 or at least 1".
  CHECK_FALSE(parse_one<double>(app::ranged_above<double>(nullptr, 0, 1000), {"--x", "0"}).empty());
  CHECK(parse_one<double>(app::ranged_above<double>(nullptr, 0, 1000), {"--x", "1e-6"}).empty());
  CHECK_FALSE(parse_one<double>(app::ranged_below<double>(nullptr, 0, 1), {"--x", "1"}).empty());
  CHECK(parse_one<double>(app::zero_or<double>(nullptr, 1, 604800), {"--x", "0"}).empty());
  const std::string tiny = parse_one<double>(app::zero_or<double>(nullptr, 1, 604800), {"--x", "1e-9"});
  CHECK(tiny.find("must be 0 or in [1, 604800], got '1e-9'") != std::string::npos);
}

TEST_CASE("an unsigned option refuses a sign instead of wrapping around") {
  std::uint64_t seed = 0;
  const std::string e = parse_one<std::uint64_t>(app::ranged<std::uint64_t>(nullptr, 0, 9007199254740991.0), {"--x", "-1"});
  CHECK(e.find("takes a number without a sign") != std::string::npos);
  CHECK(parse_one<std::uint64_t>(app::ranged<std::uint64_t>(nullptr, 0, 9007199254740991.0), {"--x", "42"}, &seed).empty());
  CHECK(seed == 42);
}

TEST_CASE("the range is what --help shows in place of arg") {
  CHECK(app::Interval{1, 1000}.text() == "[1, 1000]");
  CHECK(app::Interval{0, 1000, true}.text() == "(0, 1000]");
  CHECK(app::Interval{0, 1, false, false, true}.text() == "[0, 1)");
  CHECK(app::Interval{1, 604800, false, true}.text() == "0 or in [1, 604800]");
  CHECK(app::Interval{0, 9007199254740991.0}.text() == "[0, 9007199254740991]");
  po::options_description opts;
  opts.add_options()("steps", app::ranged<int>(nullptr, 1, 1000)->default_value(30), "steps")(
      "config", app::path_value(nullptr, app::PathKind::file), "a file");
  std::ostringstream help;
  help << opts;
  CHECK(help.str().find("--steps [1, 1000] (=30)") != std::string::npos);
  CHECK(help.str().find("--config FILE") != std::string::npos);
}

TEST_CASE("a path option names what it must be") {
  const fs::path dir = fs::temp_directory_path() / ("vinf-option-values-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string file = (dir / "a.ini").string();
  std::ofstream(file) << "x = 1\n";
  using app::PathKind;
  CHECK(app::path_problem(dir.string(), PathKind::file) == "is a directory, not a file");
  CHECK(app::path_problem((dir / "none").string(), PathKind::file).find("does not exist") == 0);
  CHECK(app::path_problem(file, PathKind::file).empty());
  CHECK(app::path_problem(file, PathKind::directory) == "is a file, not a directory");
  CHECK(app::path_problem(dir.string(), PathKind::new_file).find("is a directory") == 0);
  CHECK(app::path_problem((dir / "no" / "x.h5").string(), PathKind::new_file).find("does not exist") != std::string::npos);
  CHECK(app::path_problem(file, PathKind::out_dir) == "is a file, not a directory to write into");
  CHECK(app::path_problem("", PathKind::out_dir).find("is empty") == 0);
  std::string value;
  const std::string e = parse_one<std::string>(app::path_value(nullptr, PathKind::file), {"--x", dir.string()});
  CHECK(e.find("option '--x': '" + dir.string() + "' is a directory, not a file") != std::string::npos);
  // The words that are not paths pass as they are.
  CHECK(parse_one<std::string>(app::path_value(nullptr, PathKind::file, {"auto"}), {"--x", "auto"}, &value).empty());
  CHECK(parse_one<std::string>(app::path_value(nullptr, PathKind::directory, {"builtin:"}), {"--x", "builtin:tiny"}).empty());
  fs::remove_all(dir);
}

TEST_CASE("parse_options: stray words, unranged numbers and the --config lines of later checks") {
  const fs::path dir = fs::temp_directory_path() / ("vinf-parse-options-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  int steps = 0, height = 0;
  po::options_description opts;
  opts.add_options()("config", app::path_value(nullptr, app::PathKind::file), "")(
      "sampler.steps", app::ranged(&steps, 1, 1000)->default_value(30), "")(
      "video.height", app::ranged(&height, 8, 16384)->default_value(320), "");
  po::variables_map vm;
  CHECK_THROWS_WITH_AS(app::parse_options({"--sampler.steps", "2", "extra"}, opts, vm, "generate"),
                       doctest::Contains("unexpected word(s) 'extra'"), InputError);
  // An INI file with a byte-order mark, a value out of range on line 3, one set for a later check.
  const std::string ini = (dir / "run.ini").string();
  std::ofstream(ini) << "\xEF\xBB\xBF[video]\nheight = 36\n[sampler]\nsteps = 0\n";
  po::variables_map vm2;
  const std::string line4 = "--config " + ini + " line 4: option 'sampler.steps' must be in [1, 1000]";
  CHECK_THROWS_WITH_AS(app::parse_options({"--config", ini}, opts, vm2, "generate"), doctest::Contains(line4.c_str()),
                       InputError);
  std::ofstream(ini, std::ios::trunc) << "\xEF\xBB\xBF[video]\nheight = 36\n";
  po::variables_map vm3;
  app::parse_options({"--config", ini}, opts, vm3, "generate");
  CHECK(height == 36);
  CHECK(app::with_option_origins("--video.height must be a multiple of 8, got 36") ==
        "--video.height must be a multiple of 8, got 36 (--video.height is set by --config " + ini + " line 2)");
  CHECK(app::with_option_origins("--video.heights x") == "--video.heights x");  // another name
  // A numeric option without a range is a mistake in vinf's table, refused before any parsing.
  po::options_description unranged;
  unranged.add_options()("n", po::value<int>(), "");
  po::variables_map vm4;
  CHECK_THROWS_AS(app::parse_options({}, unranged, vm4, "generate"), std::logic_error);
  fs::remove_all(dir);
}

TEST_CASE("excerpt: user text in a message is short and printable") {
  CHECK(excerpt("a red panda") == "a red panda");
  CHECK(excerpt("caf\xC3\xA9") == "caf\xC3\xA9");                 // UTF-8 kept
  CHECK(excerpt(std::string("\x7F" "ELF\x02\x01", 6)) == "\\x7fELF\\x02\\x01");
  CHECK(excerpt("\xFF\xFEx") == "\\xff\\xfex");                   // not UTF-8: shown as bytes
  const std::string long_text(100000, 'a');
  const std::string e = excerpt(long_text, 80);
  CHECK(e == std::string(80, 'a') + "... (100000 bytes in all)");
}

TEST_CASE("first_non_finite finds NaN and infinity in every float dtype") {
  std::vector<float> f(10, 1.f);
  CHECK(first_non_finite(Tensor::wrap(f.data(), DType::f32, Device::cpu(), {10})) == -1);
  f[7] = std::numeric_limits<float>::quiet_NaN();
  CHECK(first_non_finite(Tensor::wrap(f.data(), DType::f32, Device::cpu(), {10})) == 7);
  std::vector<double> d(4, 0.0);
  d[2] = -std::numeric_limits<double>::infinity();
  CHECK(first_non_finite(Tensor::wrap(d.data(), DType::f64, Device::cpu(), {4})) == 2);
  std::vector<std::uint16_t> h{0x3C00, 0x7C00};  // f16 1.0, +inf
  CHECK(first_non_finite(Tensor::wrap(h.data(), DType::f16, Device::cpu(), {2})) == 1);
  std::vector<std::uint16_t> b{0x3F80, 0x7FC0};  // bf16 1.0, NaN
  CHECK(first_non_finite(Tensor::wrap(b.data(), DType::bf16, Device::cpu(), {2})) == 1);
  std::vector<std::int64_t> ids{-1, 0x7FF0000000000000};  // integers are never "not finite"
  CHECK(first_non_finite(Tensor::wrap(ids.data(), DType::i64, Device::cpu(), {2})) == -1);
}
