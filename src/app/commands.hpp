// The vinf subcommands and what they share.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace vinf::app {

// Parses args into vm (with positional arguments when `positional` is given); prints a clear
// message and returns false on bad options.
bool parse_options(const std::vector<std::string>& args, const boost::program_options::options_description& opts,
                   boost::program_options::variables_map& vm,
                   const boost::program_options::positional_options_description* positional = nullptr);

// "12.3 MiB", for memory and file sizes in messages.
std::string format_mib(double bytes);

int selfcheck(const std::vector<std::string>& args);
int generate(const std::vector<std::string>& args);
int decode(const std::vector<std::string>& args);
int encode_text(const std::vector<std::string>& args);
int forward(const std::vector<std::string>& args);
int make_model(const std::vector<std::string>& args);
int inspect(const std::vector<std::string>& args);

}  // namespace vinf::app
