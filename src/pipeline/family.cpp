#include "pipeline/family.hpp"

#include <nlohmann/json.hpp>

#include "io/json_file.hpp"
#include "io/path_query.hpp"
#include "model/wan_config.hpp"

namespace vinf::pipeline {

ModelFamily model_family(const std::string& dir) {
  if (dir.rfind("builtin:", 0) == 0) return ModelFamily::unet;
  return model::find_wan_transformer_config(dir).empty() ? ModelFamily::unet : ModelFamily::wan;
}

ModelFamily vae_family(const std::string& dir) {
  for (const std::string& p : {dir + "/config.json", dir + "/vae/config.json"})
    if (io::path_exists(p)) {
      const nlohmann::json j = io::read_json_file(p, "VAE config");
      const bool wan = j.is_object() && j.contains("_class_name") && j["_class_name"] == "AutoencoderKLWan";
      return wan ? ModelFamily::wan : ModelFamily::unet;
    }
  return ModelFamily::unet;
}

namespace {

std::string string_key(const nlohmann::json& j, const char* key) {
  if (!j.is_object() || !j.contains(key) || !j[key].is_string()) return "";
  return j[key].get<std::string>();
}

nlohmann::json part_config(const std::string& file) {
  return io::path_exists(file) ? io::read_json_file(file, "config") : nlohmann::json::object();
}

}  // namespace

std::string part_class(const std::string& dir) {
  std::string what;
  for (const char* f : {"config.json", "scheduler_config.json"}) {
    const nlohmann::json j = part_config(dir + "/" + f);
    const std::string cls = string_key(j, "_class_name"), type = string_key(j, "model_type");
    if (!cls.empty())
      what = cls;
    else if (!type.empty())
      what = "model_type " + type;
  }
  return what;
}

bool is_unet_vae(const std::string& dir) {
  return string_key(part_config(dir + "/config.json"), "_class_name") == "AutoencoderKL";
}

bool is_model_part(const std::string& dir) {
  if (io::path_exists(dir + "/vocab.json")) return true;
  if (!io::path_exists(dir + "/config.json")) return false;
  const nlohmann::json j = part_config(dir + "/config.json");
  return string_key(j, "_class_name") == "AutoencoderKL" || string_key(j, "model_type") == "clip_text_model" ||
         (j.is_object() && j.contains("text_config"));
}

}  // namespace vinf::pipeline
