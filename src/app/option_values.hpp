// Option values that check themselves when they are read, wherever they come from (the command
// line, a --config FILE line, a job list's line): a number against its range, a path against what
// it must name. A bad value is a Boost.ProgramOptions error naming the option (and, from an INI
// file, the file and line), so every command reports it the same way, with exit status 2. The range
// or kind shows in --help in place of `arg`: `--sampler.steps [1, 1000] (=30)`, `--config FILE`.
#pragma once

#include <boost/program_options.hpp>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

namespace vinf::app {

// The values a numeric option takes: [lo, hi], (lo, hi] with lo_open, [lo, hi) with hi_open, and 0
// besides when zero_too (a "0: off" option whose other values start above 0).
struct Interval {
  double lo = 0, hi = 0;
  bool lo_open = false, zero_too = false, hi_open = false;

  bool holds(double v) const;
  std::string text() const;  // "[1, 1000]", "(0, 1000]", "0 or [1, 604800]"
};

// Marks a value semantic whose value is checked (every numeric option must be one: parse_options
// refuses to parse with a numeric option that is not, a mistake in vinf, not in the input).
struct CheckedValue {
  virtual ~CheckedValue() = default;
};

// A value of the option failed its check: "option '--x' must be in [1, 1000], got '0'". message is
// Boost's error template (%canonical_option% and %value% are filled in); value is the user's text.
class BadOptionValue : public boost::program_options::error_with_option_name {
 public:
  BadOptionValue(const std::string& message, const std::string& value);
};

// Throws BadOptionValue for a token that is not a number of T in the interval: a sign on an
// unsigned type (which Boost would wrap around), NaN and infinity, anything outside.
void check_number_token(const std::string& token, double value, bool is_unsigned, const Interval& range);

template <class T>
class RangedValue : public boost::program_options::typed_value<T>, public CheckedValue {
 public:
  RangedValue(T* store, Interval range) : boost::program_options::typed_value<T>(store), range_(range) {
    this->value_name(range.text());
  }
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override {
    boost::program_options::typed_value<T>::xparse(store, tokens);
    check_number_token(tokens.empty() ? std::string() : tokens.front(),
                       static_cast<double>(boost::any_cast<T>(store)), std::is_unsigned_v<T>, range_);
  }

 private:
  Interval range_;
};

// A numeric option in [lo, hi] (store may be nullptr: the value is read from the variables_map).
template <class T>
RangedValue<T>* ranged(T* store, double lo, double hi) {
  return new RangedValue<T>(store, Interval{lo, hi});
}
// A numeric option in (lo, hi]: a scale or a rate that must be above lo.
template <class T>
RangedValue<T>* ranged_above(T* store, double lo, double hi) {
  return new RangedValue<T>(store, Interval{lo, hi, true});
}
// A numeric option in [lo, hi): a decay rate that must stay below 1.
template <class T>
RangedValue<T>* ranged_below(T* store, double lo, double hi) {
  return new RangedValue<T>(store, Interval{lo, hi, false, false, true});
}
// 0 ("off", "forever") or a value in [lo, hi].
template <class T>
RangedValue<T>* zero_or(T* store, double lo, double hi) {
  return new RangedValue<T>(store, Interval{lo, hi, false, true});
}

// What a path option names.
enum class PathKind {
  file,          // an existing regular file (FILE)
  directory,     // an existing directory (DIR)
  file_or_dir,   // an existing file or directory (PATH)
  new_file,      // a file to write: not a directory, in an existing directory (FILE)
  out_dir,       // a directory to write into: not a file (DIR)
};

class PathValue : public boost::program_options::typed_value<std::string>, public CheckedValue {
 public:
  PathValue(std::string* store, PathKind kind, std::vector<std::string> words);
  void xparse(boost::any& store, const std::vector<std::string>& tokens) const override;

 private:
  PathKind kind_;
  std::vector<std::string> words_;  // values that are not paths ("auto", a "builtin:" prefix)
};

// A path option of the kind; `words` are values taken as they are (a word ending in ':' is a
// prefix: "builtin:" takes builtin:tiny).
PathValue* path_value(std::string* store, PathKind kind, std::vector<std::string> words = {});

// Why path is not what kind asks for ("is a directory, not a file", "does not exist"), or "".
std::string path_problem(const std::string& path, PathKind kind);

// Whether a value semantic holds a number (and so must be a CheckedValue).
bool is_numeric_semantic(const boost::program_options::value_semantic* s);

}  // namespace vinf::app
