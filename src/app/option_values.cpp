#include "app/option_values.hpp"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <typeinfo>

#include "io/path_query.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

// Whole numbers in full (a seed's 9007199254740991), the others in at most 10 digits.
std::string bound_text(double v) {
  char buf[40];
  if (v == std::floor(v) && std::fabs(v) < 1e17)
    std::snprintf(buf, sizeof buf, "%.0f", v);
  else
    std::snprintf(buf, sizeof buf, "%.10g", v);
  return buf;
}

}  // namespace

bool Interval::holds(double v) const {
  if (!std::isfinite(v)) return false;
  if (zero_too && v == 0) return true;
  return (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
}

std::string Interval::text() const {
  const std::string range =
      (lo_open ? "(" : "[") + bound_text(lo) + ", " + bound_text(hi) + (hi_open ? ")" : "]");
  return zero_too ? "0 or in " + range : range;
}

namespace {

// Text for an error template, which must not hold placeholders of its own: '%' shown as '％'.
std::string template_text(std::string text) {
  for (std::size_t at = text.find('%'); at != std::string::npos; at = text.find('%', at + 3)) text.replace(at, 1, "\uFF05");
  return text;
}

}  // namespace

BadOptionValue::BadOptionValue(const std::string& message, const std::string& value)
    : po::error_with_option_name(message) {
  set_substitute("value", value);
}

void check_number_token(const std::string& token, double value, bool is_unsigned, const Interval& range) {
  const std::size_t first = token.find_first_not_of(" \t");
  if (is_unsigned && first != std::string::npos && (token[first] == '-' || token[first] == '+'))
    throw BadOptionValue("option '%canonical_option%' takes a number without a sign in " + range.text() +
                             ", got '%value%'", token);
  if (!range.holds(value))
    throw BadOptionValue(std::string("option '%canonical_option%' must be ") + (range.zero_too ? "" : "in ") +
                             range.text() + ", got '%value%'",
                         token);
}

PathValue::PathValue(std::string* store, PathKind kind, std::vector<std::string> words)
    : po::typed_value<std::string>(store), kind_(kind), words_(std::move(words)) {
  value_name(kind == PathKind::directory || kind == PathKind::out_dir ? "DIR"
             : kind == PathKind::file_or_dir                        ? "PATH"
                                                                    : "FILE");
}

void PathValue::xparse(boost::any& store, const std::vector<std::string>& tokens) const {
  po::typed_value<std::string>::xparse(store, tokens);
  const std::string& path = boost::any_cast<const std::string&>(store);
  for (const std::string& w : words_)
    if (path == w || (!w.empty() && w.back() == ':' && path.rfind(w, 0) == 0)) return;
  const std::string why = path_problem(path, kind_);
  if (!why.empty()) throw BadOptionValue("option '%canonical_option%': '%value%' " + template_text(why), path);
}

PathValue* path_value(std::string* store, PathKind kind, std::vector<std::string> words) {
  return new PathValue(store, kind, std::move(words));
}

std::string path_problem(const std::string& path, PathKind kind) {
  namespace fs = std::filesystem;
  if (path.empty()) return "is empty: give a path";
  const bool exists = io::path_exists(path), dir = io::is_directory(path), file = io::is_regular_file(path);
  switch (kind) {
    case PathKind::file:
      if (dir) return "is a directory, not a file";
      if (!exists) return "does not exist (no such file)";
      if (!file) return "is not a regular file";
      return "";
    case PathKind::directory:
      if (!exists) return "does not exist (no such directory)";
      if (!dir) return "is a file, not a directory";
      return "";
    case PathKind::file_or_dir:
      return exists ? "" : "does not exist (no such file or directory)";
    case PathKind::new_file: {
      if (dir) return "is a directory, not a file to write: give a file name";
      if (exists && !file) return "is not a regular file to write";
      const fs::path parent = fs::path(path).parent_path();
      if (!parent.empty() && !io::is_directory(parent))
        return "cannot be written: its directory " + parent.string() + " does not exist (create it first)";
      return "";
    }
    case PathKind::out_dir:
      if (exists && !dir) return "is a file, not a directory to write into";
      return "";
  }
  return "";
}

bool is_numeric_semantic(const po::value_semantic* s) {
  const auto* typed = dynamic_cast<const po::typed_value_base*>(s);
  if (typed == nullptr) return false;
  const std::type_info& t = typed->value_type();
  return t == typeid(int) || t == typeid(unsigned) || t == typeid(long) || t == typeid(unsigned long) ||
         t == typeid(long long) || t == typeid(unsigned long long) || t == typeid(float) || t == typeid(double) ||
         t == typeid(short) || t == typeid(unsigned short);
}

}  // namespace vinf::app
