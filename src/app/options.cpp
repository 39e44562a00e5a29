// The command line and the --config INI file every command takes (design.md §5): the same option
// names in both, sections as dotted prefixes, the command line winning over the file.
#include <boost/program_options.hpp>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "core/error.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

std::string trim(const std::string& s) {
  const std::size_t first = s.find_first_not_of(" \t");
  if (first == std::string::npos) return "";
  return s.substr(first, s.find_last_not_of(" \t") - first + 1);
}

// Boost.ProgramOptions' error text is a template whose placeholders (%option%, %value%, ...) are
// replaced by what the user typed, one placeholder at a time until none is left: a value holding
// its own placeholder (`--video.height %value%`) is replaced forever, and vinf would hang instead
// of reporting the option. The user's text goes into the message with each '%' shown as the
// full-width sign '％', which no placeholder matches.
struct OptionErrorText : po::error_with_option_name {
  static void defuse(po::error_with_option_name& e) {
    for (auto& [placeholder, text] : e.*(&OptionErrorText::m_substitutions))
      for (std::size_t at = text.find('%'); at != std::string::npos; at = text.find('%', at + 3))
        text.replace(at, 1, "\uFF05");
  }
};

// e.what(), also where the user's text holds the placeholders.
std::string text_of(const po::error& e) {
  // The exception object is not const itself; only the handler's reference to it is.
  if (const auto* named = dynamic_cast<const po::error_with_option_name*>(&e))
    OptionErrorText::defuse(const_cast<po::error_with_option_name&>(*named));
  return e.what();
}

std::string line_list(const std::vector<int>& lines) {
  std::string s = lines.size() == 1 ? "line " : "lines ";
  for (std::size_t i = 0; i < lines.size(); ++i) s += (i ? ", " : "") + std::to_string(lines[i]);
  return s;
}

}  // namespace

const char* const kTensorOptionHelp =
    "T: ranks that split each clip's transformer blocks (tensor parallelism: attention heads and feed-forward "
    "columns, each rank loading only its slices of the weights; one all-reduce after each attention and "
    "feed-forward); at most the fewest heads of any attention of the model";

const char* const kRankLayoutHelp =
    "How ranks are laid out: world = cfg x frame ranks x tensor (--parallel.cfg, --parallel.tensor; the frame\n"
    "ranks are what is left). Rank w has tensor rank w % T, frame rank (w / T) % N and CFG branch\n"
    "w / (T N): a tensor group is T consecutive ranks (keep it on one node), and with T = 1 the clips\n"
    "of a branch are consecutive too. The frame ranks split the frames: as clips (--vi.mode compat,\n"
    "invariant, off) or as a context (--vi.mode exact); rank k takes frames [k F / N, (k + 1) F / N).\n"
    "With --parallel.data D and --parallel.pipeline P (vinf generate), world = D x P x that unit: world rank\n"
    "w is in replica w / (P U) and stage (w / U) % P, where U = cfg x N x T is a unit's size, and has rank\n"
    "w % U in its unit (a unit's ranks are consecutive). `vinf plan` prints the map for a number of ranks.\n";

const char* const kConfigOptionHelp =
    "read options from this INI file: one `key = value` per line with the long option names as keys (after a "
    "`[section]` line, key stands for section.key), `#` starts a comment; the command line wins over the "
    "file, and an unknown key is an error naming its line";

void read_config_file(const std::string& path, const po::options_description& opts, po::variables_map& vm,
                      const std::string& command) {
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "--config ", path, ": cannot read the file");
  const std::string help_hint = "see vinf " + command + " --help for the options";
  po::parsed_options parsed(&opts);
  std::map<std::string, std::vector<int>> lines_of;
  std::string section;
  int number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    const std::string where = "--config " + path + " line " + std::to_string(number);
    const std::string line = trim(raw.substr(0, raw.find_first_of("#\r")));
    if (line.empty()) continue;
    if (line.front() == '[') {
      VINF_INPUT_CHECK(line.back() == ']' && !trim(line.substr(1, line.size() - 2)).empty(), where,
                       ": expected a section header such as [video], got '", line, "'");
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const std::size_t eq = line.find('=');
    VINF_INPUT_CHECK(eq != std::string::npos && !trim(line.substr(0, eq)).empty(), where,
                     ": expected `key = value` or a [section] header, got '", line, "'");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    const std::string name = section.empty() ? key : section + "." + key;
    VINF_INPUT_CHECK(name != "help" && name != "config", where, ": '", name, "' is not a setting");
    const po::option_description* d = opts.find_nothrow(name, false);
    VINF_INPUT_CHECK(d != nullptr, where, ": unknown key '", key, "'", section.empty() ? "" : " in [" + section + "]",
                     " (vinf ", command, " has no option --", name, "; ", help_hint, ")");
    // The value alone, so that a bad one is reported with its line.
    try {
      boost::any scratch;
      d->semantic()->parse(scratch, {value}, false);
    } catch (po::error_with_option_name& e) {
      e.set_option_name(name);
      VINF_INPUT_FAIL(where, ": ", text_of(e));
    } catch (const po::error& e) {
      VINF_INPUT_FAIL(where, ": ", name, " = ", value, ": ", text_of(e));
    }
    po::option o(name, {value});
    o.original_tokens = {name, value};
    parsed.options.push_back(std::move(o));
    lines_of[name].push_back(number);
  }
  try {
    po::store(parsed, vm);
  } catch (const po::error_with_option_name& e) {
    const auto it = lines_of.find(e.get_option_name());
    VINF_INPUT_FAIL("--config ", path, it == lines_of.end() ? std::string() : " " + line_list(it->second), ": ",
                    text_of(e));
  } catch (const po::error& e) {
    VINF_INPUT_FAIL("--config ", path, ": ", text_of(e));
  }
}

void parse_options(const std::vector<std::string>& args, const po::options_description& opts, po::variables_map& vm,
                   const std::string& command, const po::positional_options_description* positional,
                   const std::vector<std::string>* first) {
  if (first && !first->empty()) {
    // Stored first, these win: a value stored once is final for later stores.
    try {
      po::store(po::command_line_parser(*first).options(opts).run(), vm);
    } catch (const po::error& e) {
      VINF_INPUT_FAIL(text_of(e), " (see vinf ", command, " --help)");
    }
  }
  try {
    po::command_line_parser parser(args);
    parser.options(opts);
    if (positional) parser.positional(*positional);
    po::store(parser.run(), vm);
  } catch (const po::error& e) {
    VINF_INPUT_FAIL(text_of(e), " (see vinf ", command, " --help)");
  }
  if (!vm.count("help") && vm.count("config") && opts.find_nothrow("config", false))
    read_config_file(vm["config"].as<std::string>(), opts, vm, command);
  try {
    po::notify(vm);
  } catch (const po::error& e) {
    VINF_INPUT_FAIL(text_of(e), " (see vinf ", command, " --help)");
  }
}

}  // namespace vinf::app
