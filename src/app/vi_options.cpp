#include "app/vi_options.hpp"

#include <type_traits>
#include <variant>

#include "app/option_values.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

template <class T>
constexpr bool kNumber = std::is_arithmetic_v<T> && !std::is_same_v<T, bool>;

std::string option_of(const infinity::Field& f) { return std::string("vi.") + f.name; }

}  // namespace

void ViOptions::add_to(po::options_description& opts, const char* import_help) {
  infinity::Config defaults;
  for (const infinity::Field& f : infinity::fields()) {
    const std::string name = option_of(f);
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_same_v<T, bool>)
            opts.add_options()(name.c_str(), po::value<bool>()->default_value(*p)->implicit_value(true), f.help);
          else if constexpr (kNumber<T>)
            opts.add_options()(name.c_str(),
                               (f.lo_open ? ranged_above<T>(nullptr, f.lo, f.hi) : ranged<T>(nullptr, f.lo, f.hi))
                                   ->default_value(*p),
                               f.help);
          else
            opts.add_options()(name.c_str(), po::value<std::string>()->default_value(infinity::choice_name(f, defaults)),
                               f.help);
        },
        f.ref(defaults));
  }
  opts.add_options()("import-vi-config", po::value(&import_file),
                     import_help != nullptr ? import_help
                                            : "read the [vi] settings from the released code's JSON config "
                                              "(plugin_configs); options given on the command line win");
}

infinity::Config ViOptions::resolve(const po::variables_map& vm, std::vector<std::string>* unused) const {
  infinity::Config c;
  if (!import_file.empty()) infinity::import_released_config(import_file, c, unused);
  for (const infinity::Field& f : infinity::fields()) {
    const std::string name = option_of(f);
    // Without a file every option counts, given or default; with one, only those given.
    if (!vm.count(name) || (!import_file.empty() && vm[name].defaulted())) continue;
    std::visit(
        [&](auto* p) {
          using T = std::remove_pointer_t<decltype(p)>;
          if constexpr (std::is_arithmetic_v<T>)
            *p = vm[name].as<T>();
          else
            infinity::set_choice(f, c, vm[name].as<std::string>());
        },
        f.ref(c));
  }
  infinity::validate(c);
  return c;
}

}  // namespace vinf::app
