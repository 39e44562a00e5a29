// The vinf subcommands and what they share.
#pragma once

#include <boost/program_options.hpp>
#include <string>
#include <vector>

namespace vinf::app {

// Parses args into vm (with positional arguments when `positional` is given) and, when opts has
// the `config` option and it is given (and --help is not), the INI file it names; the command line
// wins. `first`, when given, is parsed before both and wins over them (a job list's line). Bad
// options are a vinf::InputError that names the option (and the file's line), with a pointer to
// `vinf COMMAND --help`.
void parse_options(const std::vector<std::string>& args, const boost::program_options::options_description& opts,
                   boost::program_options::variables_map& vm, const std::string& command,
                   const boost::program_options::positional_options_description* positional = nullptr,
                   const std::vector<std::string>* first = nullptr);

// Reads an INI file of options into vm beneath what is already there (the command line): sections
// are dotted prefixes ([vi] local-frames = 8 is --vi.local-frames 8); an unknown key, a bad value
// or a line that is neither is an InputError naming the file, the line and the key.
void read_config_file(const std::string& path, const boost::program_options::options_description& opts,
                      boost::program_options::variables_map& vm, const std::string& command);

// message, with the --config file and line of each option it names that the file set ("--video.height
// must be ... (--video.height is set by --config run.ini line 4)"): for the checks made after the
// options are read, wherever they are.
std::string with_option_origins(const std::string& message);

// The help of the --config FILE option every command has.
extern const char* const kConfigOptionHelp;
// The help of --parallel.tensor, and how the ranks of a job are laid out (forward, generate and
// the step benchmark print it under their options).
extern const char* const kTensorOptionHelp;
extern const char* const kRankLayoutHelp;

int selfcheck(const std::vector<std::string>& args);
int generate(const std::vector<std::string>& args);
int extend(const std::vector<std::string>& args);
int plan(const std::vector<std::string>& args);
int decode(const std::vector<std::string>& args);
int encode_text(const std::vector<std::string>& args);
int forward(const std::vector<std::string>& args);
int make_model(const std::vector<std::string>& args);
int inspect(const std::vector<std::string>& args);
int evaluate(const std::vector<std::string>& args);
int train_step(const std::vector<std::string>& args);
int prepare_data(const std::vector<std::string>& args);
int train(const std::vector<std::string>& args);

}  // namespace vinf::app
