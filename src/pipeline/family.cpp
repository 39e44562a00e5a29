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

}  // namespace vinf::pipeline
