// The command line and the --config INI file every command takes (design.md §5): the same option
// names in both, sections as dotted prefixes, the command line winning over the file.
#include <boost/program_options.hpp>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

#include "app/commands.hpp"
#include "app/option_values.hpp"
#include "core/error.hpp"
#include "core/utf8.hpp"

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

// "line 4", "lines 2, 5", or for a long list "lines 2, 3, ..., 301 (300 lines)".
std::string line_list(const std::vector<int>& lines) {
  std::string s = lines.size() == 1 ? "line " : "lines ";
  if (lines.size() > 4)
    return s + std::to_string(lines[0]) + ", " + std::to_string(lines[1]) + ", ..., " + std::to_string(lines.back()) +
           " (" + std::to_string(lines.size()) + " lines)";
  for (std::size_t i = 0; i < lines.size(); ++i) s += (i ? ", " : "") + std::to_string(lines[i]);
  return s;
}

// Where each option that a --config file set comes from: "--config FILE line N".
std::map<std::string, std::string>& origins() {
  static std::map<std::string, std::string> map;
  return map;
}

bool option_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'; }

// Every numeric option checks its range when it is read (option_values.hpp): one that does not is
// a mistake in vinf's option table, found by the first run of the command.
void require_checked_numbers(const po::options_description& opts, const std::string& command) {
  for (const auto& d : opts.options())
    if (is_numeric_semantic(d->semantic().get()) && dynamic_cast<const CheckedValue*>(d->semantic().get()) == nullptr)
      throw std::logic_error("vinf " + command + ": option --" + d->long_name() + " is a number without a range");
}

// Words that belong to no option (`vinf generate stray`, `--sampler.steps 2 extra`, an unquoted
// `--prompt.text a red panda`) would be dropped without a word: they are an error.
void refuse_stray_words(const po::parsed_options& parsed, const std::string& command) {
  std::string words;
  for (const po::option& o : parsed.options)
    if (o.string_key.empty() && !o.unregistered)
      for (const std::string& w : o.value) words += (words.empty() ? "" : " ") + w;
  VINF_INPUT_CHECK(words.empty(), "unexpected word(s) '", excerpt(words), "' outside any option: vinf ", command,
                   " takes its values after option names, and a value with spaces needs quotes (--prompt.text ",
                   "\"a red panda\"); see vinf ", command, " --help");
}

}  // namespace

std::string with_option_origins(const std::string& message) {
  if (message.find("--config ") != std::string::npos) return message;  // the message names the file already
  std::string notes;
  for (const auto& [name, where] : origins()) {
    const std::string flag = "--" + name;
    for (std::size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at + 1)) {
      const std::size_t end = at + flag.size();
      if (end < message.size() && option_name_char(message[end])) continue;
      notes += (notes.empty() ? "" : "; ") + flag + " is set by " + where;
      break;
    }
  }
  return notes.empty() ? message : message + " (" + notes + ")";
}

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
  const std::string problem = path_problem(path, PathKind::file);
  VINF_INPUT_CHECK(problem.empty(), "--config ", path, " ", problem, " (an INI file of options)");
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "--config ", path, ": cannot read the file");
  const std::string help_hint = "see vinf " + command + " --help for the options";
  po::parsed_options parsed(&opts);
  std::map<std::string, std::vector<int>> lines_of;
  std::string section;
  int number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    // A UTF-8 byte-order mark (some editors write one) is not part of the first line.
    if (number == 1 && raw.rfind("\xEF\xBB\xBF", 0) == 0) raw.erase(0, 3);
    const std::string where = "--config " + path + " line " + std::to_string(number);
    const std::string line = trim(raw.substr(0, raw.find_first_of("#\r")));
    if (line.empty()) continue;
    if (line.front() == '[') {
      VINF_INPUT_CHECK(line.back() == ']' && !trim(line.substr(1, line.size() - 2)).empty(), where,
                       ": expected a section header such as [video], got '", excerpt(line), "'");
      section = trim(line.substr(1, line.size() - 2));
      continue;
    }
    const std::size_t eq = line.find('=');
    VINF_INPUT_CHECK(eq != std::string::npos && !trim(line.substr(0, eq)).empty(), where,
                     ": expected `key = value` or a [section] header, got '", excerpt(line), "'");
    const std::string key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    const std::string name = section.empty() ? key : section + "." + key;
    VINF_INPUT_CHECK(name != "help" && name != "config", where, ": '", name, "' is not a setting");
    const po::option_description* d = opts.find_nothrow(name, false);
    VINF_INPUT_CHECK(d != nullptr, where, ": unknown key '", excerpt(key), "'",
                     section.empty() ? "" : " in [" + excerpt(section) + "]", " (vinf ", command, " has no option --",
                     excerpt(name), "; ", help_hint, ")");
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
  // The options the file sets are those the command line has not set: a message about one of
  // them names the file and line (with_option_origins).
  for (const auto& [name, lines] : lines_of)
    if (!vm.count(name) || vm[name].defaulted()) origins()[name] = "--config " + path + " " + line_list(lines);
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
  require_checked_numbers(opts, command);
  origins().clear();
  if (first && !first->empty()) {
    // Stored first, these win: a value stored once is final for later stores.
    try {
      const po::parsed_options parsed = po::command_line_parser(*first).options(opts).run();
      refuse_stray_words(parsed, command);
      po::store(parsed, vm);
    } catch (const po::error& e) {
      VINF_INPUT_FAIL(text_of(e), " (see vinf ", command, " --help)");
    }
  }
  try {
    po::command_line_parser parser(args);
    parser.options(opts);
    if (positional) parser.positional(*positional);
    const po::parsed_options parsed = parser.run();
    refuse_stray_words(parsed, command);
    po::store(parsed, vm);
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
