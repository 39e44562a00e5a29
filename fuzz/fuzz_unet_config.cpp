// The UNet's config.json reader (model/config.cpp) and what follows from an accepted config: the
// block layout, the parameter list, and the config as make-model writes it, which must read back
// to the same values.
#include "fuzz_support.hpp"
#include "model/config.hpp"
#include "model/params.hpp"

using vinf::model::UNetConfig;

namespace {

bool same(const UNetConfig& a, const UNetConfig& b) {
  return a.in_channels == b.in_channels && a.out_channels == b.out_channels &&
         a.block_out_channels == b.block_out_channels && a.down_cross == b.down_cross && a.up_cross == b.up_cross &&
         a.layers_per_block == b.layers_per_block && a.attention_head_dim == b.attention_head_dim &&
         a.cross_attention_dim == b.cross_attention_dim && a.norm_num_groups == b.norm_num_groups &&
         a.norm_eps == b.norm_eps && a.mid_block_scale_factor == b.mid_block_scale_factor && a.fps_cond == b.fps_cond;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  UNetConfig c;
  std::string written;
  vinf::fuzz::expect_input_errors_only([&] {
    std::vector<std::string> warnings;
    c = vinf::model::parse_unet_config(text, "config.json", &warnings);
    const vinf::model::UNetLayout layout = vinf::model::unet_layout(c);
    if (layout.down.size() != c.block_out_channels.size() || layout.up.size() != layout.down.size()) std::abort();
    const auto params = vinf::model::unet_parameters(c);
    if (vinf::model::parameter_count(params) <= 0) std::abort();
    written = vinf::model::unet_config_json(c);
  });
  // What make-model writes for an accepted config reads back to the same values.
  if (!written.empty() && !same(c, vinf::model::parse_unet_config(written, "written", nullptr))) std::abort();
  return 0;
}
