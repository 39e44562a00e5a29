// The [vi] options of a command, made from the one table of Video-Infinity settings
// (infinity::fields()): `--vi.NAME` with its help and default, the `[vi] NAME` keys of --config
// FILE, and --import-vi-config. resolve() gives the Config: the released JSON file's values first
// (when given), every option given on the command line or in --config on top, then checked.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

#include "infinity/config.hpp"

namespace vinf::app {

struct ViOptions {
  std::string import_file;  // --import-vi-config

  // Adds the `vi.*` options and --import-vi-config to opts; import_help replaces the description
  // of --import-vi-config (a command that reads more of the file).
  void add_to(boost::program_options::options_description& opts, const char* import_help = nullptr);
  // Throws vinf::InputError for a bad value. With unused, the imported file's plugin_configs keys
  // that have no effect are appended to it.
  infinity::Config resolve(const boost::program_options::variables_map& vm,
                           std::vector<std::string>* unused = nullptr) const;
};

}  // namespace vinf::app
