// JSON files a user supplies (model and scheduler configs): a missing file, invalid JSON or a key
// of the wrong type is a vinf::InputError that names the file (and the key, and the type it must
// have). Header-only; the includer links nlohmann-json.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "core/error.hpp"

namespace vinf::io {

inline nlohmann::json read_json_file(const std::string& path, const char* what) {
  std::ifstream in(path);
  VINF_INPUT_CHECK(in.good(), "cannot read the ", what, " ", path);
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    VINF_INPUT_FAIL(path, " is not valid JSON: ", e.what());
  }
}

// A float for a config file vinf writes: the shortest decimal that reads back as the same float, so
// 0.0841f is written 0.0841 rather than 0.08410000056028366 (its value as a double).
inline double json_float(float v) {
  char buf[64];
  const auto r = std::to_chars(buf, buf + sizeof buf - 1, v);
  *r.ptr = '\0';
  return std::strtod(buf, nullptr);
}

inline std::vector<double> json_floats(const std::vector<float>& v) {
  std::vector<double> out;
  for (float x : v) out.push_back(json_float(x));
  return out;
}

namespace detail {

template <class T>
struct IsVector : std::false_type {};
template <class T>
struct IsVector<std::vector<T>> : std::true_type {};

// What a value of type T looks like in JSON, for messages ("an integer", "a list of numbers").
template <class T>
std::string json_type_name(bool plural = false) {
  if constexpr (std::is_same_v<T, bool>) return plural ? "true or false values" : "true or false";
  else if constexpr (std::is_integral_v<T>) return plural ? "integers" : "an integer";
  else if constexpr (std::is_floating_point_v<T>) return plural ? "numbers" : "a number";
  else if constexpr (std::is_same_v<T, std::string>) return plural ? "strings" : "a string";
  else if constexpr (IsVector<T>::value) return "a list of " + json_type_name<typename T::value_type>(true);
  else static_assert(!sizeof(T), "no JSON type name for this type");
}

// True when v holds a T (an integer that fits, for integral T).
template <class T>
bool json_holds(const nlohmann::json& v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v.is_boolean();
  } else if constexpr (std::is_integral_v<T>) {
    // The parser stores a non-negative integer as unsigned, a negative one as signed.
    if (v.is_number_unsigned()) return v.get<std::uint64_t>() <= static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    if (!v.is_number_integer()) return false;
    return std::is_signed_v<T> && v.get<std::int64_t>() >= static_cast<std::int64_t>(std::numeric_limits<T>::min());
  } else if constexpr (std::is_floating_point_v<T>) {
    return v.is_number();
  } else if constexpr (std::is_same_v<T, std::string>) {
    return v.is_string();
  } else if constexpr (IsVector<T>::value) {
    if (!v.is_array()) return false;
    for (const auto& item : v)
      if (!json_holds<typename T::value_type>(item)) return false;
    return true;
  } else {
    static_assert(!sizeof(T), "no JSON check for this type");
  }
}

}  // namespace detail

// The keys of one JSON object of a user's config file, read with messages that name the file, the
// key and the type it must have: "unet/config.json: config key 'in_channels' must be an integer,
// got \"4\"". Every reader of a config file (UNet, VAE, text encoder, scheduler) goes through it,
// so a wrong type is reported the same way everywhere. The keys looked at are remembered, for a
// list of the ones the reader does not use.
class JsonConfig {
 public:
  // `parent` names the key that holds the object when it is nested ("text_config"), for messages.
  JsonConfig(const nlohmann::json& object, std::string source, std::string parent = "")
      : j_(object), source_(std::move(source)), parent_(std::move(parent)) {
    VINF_INPUT_CHECK(j_.is_object(), source_, ": ", parent_.empty() ? std::string("the file") : "config key '" + parent_ + "'",
                     " must hold a JSON object");
  }

  const std::string& source() const { return source_; }
  std::string key_name(const std::string& key) const { return parent_.empty() ? key : parent_ + "." + key; }

  // The value of `key`, or nullptr when it is absent or null.
  const nlohmann::json* find(const std::string& key) {
    seen_.insert(key);
    const auto it = j_.find(key);
    return it == j_.end() || it->is_null() ? nullptr : &*it;
  }

  // dst = the value of `key` when it is present and not null (true then); a value of another type
  // is an InputError naming the file, the key and the type.
  template <class T>
  bool read(const std::string& key, T& dst) {
    const nlohmann::json* v = find(key);
    if (!v) return false;
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      if (v->is_number_integer() && !detail::json_holds<T>(*v))
        fail(key, "an integer in [" + std::to_string(std::numeric_limits<T>::min()) + ", " +
                      std::to_string(std::numeric_limits<T>::max()) + "]", *v);
    }
    if (!detail::json_holds<T>(*v)) fail(key, detail::json_type_name<T>(), *v);
    if constexpr (std::is_floating_point_v<T>) {
      // nlohmann-json narrows with a plain cast: 1e300 would become an infinite float.
      const double x = v->get<double>();
      if (!(std::fabs(x) <= static_cast<double>(std::numeric_limits<T>::max())))
        fail(key, std::string("a number within ") + (sizeof(T) == 4 ? "float" : "double") + " range", *v);
    }
    dst = v->get<T>();
    return true;
  }

  // "SOURCE: config key 'KEY' must be MUST, got VALUE" and any hint.
  [[noreturn]] void fail(const std::string& key, const std::string& must, const nlohmann::json& got,
                         const std::string& hint = "") const {
    std::string shown = got.dump();
    if (shown.size() > 80) shown = shown.substr(0, 77) + "...";
    VINF_INPUT_FAIL(source_, ": config key '", key_name(key), "' must be ", must, ", got ", shown, hint);
  }

  // The keys present that no one looked at (those starting with '_', diffusers' bookkeeping, aside).
  std::vector<std::string> unknown_keys() const {
    std::vector<std::string> out;
    for (auto it = j_.begin(); it != j_.end(); ++it)
      if (!seen_.count(it.key()) && it.key().rfind('_', 0) != 0) out.push_back(key_name(it.key()));
    return out;
  }

 private:
  const nlohmann::json& j_;
  std::string source_, parent_;
  std::set<std::string> seen_;
};

}  // namespace vinf::io
