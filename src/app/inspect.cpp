// `vinf inspect`: what a model directory or a safetensors file holds.
#include <boost/program_options.hpp>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include "app/commands.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"
#include "model/weights.hpp"

namespace po = boost::program_options;

namespace vinf::app {

namespace {

std::string grouped(std::int64_t n) {  // 1413284420 -> "1,413,284,420"
  std::string s = std::to_string(n), out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) out += ',';
    out += s[i];
  }
  return out;
}

int inspect_model(const std::string& dir) {
  const model::ModelFiles files = model::find_model_files(dir);
  std::vector<std::string> warnings;
  const model::UNetConfig c = model::load_unet_config(files.config, &warnings);
  const model::WeightFiles wf(files);
  const auto params = model::unet_parameters(c);
  std::uintmax_t disk = 0;
  for (const std::string& f : files.weights) disk += std::filesystem::file_size(f);
  std::cout << "model " << files.dir << " (UNet3DConditionModel, " << files.weights.size() << " weight file"
            << (files.weights.size() == 1 ? "" : "s") << ", " << format_mib(static_cast<double>(disk)) << " on disk)\n  channels";
  for (int ch : c.block_out_channels) std::cout << " " << ch;
  std::cout << "; " << c.layers_per_block << " layer(s) per block; heads of " << c.attention_head_dim
            << " channels; cross_attention_dim " << c.cross_attention_dim << "; " << c.norm_num_groups
            << " norm groups; fps conditioning " << (c.fps_cond ? "on" : "off") << "\n";
  for (const std::string& w : warnings) std::cout << "  warning: " << w << "\n";

  std::map<std::string, std::pair<int, std::int64_t>> groups;  // tensors, parameters
  std::vector<std::string> order;
  for (const auto& p : params) {
    const std::string g = model::parameter_group(p.name);
    if (!groups.count(g)) order.push_back(g);
    groups[g].first += 1;
    groups[g].second += p.shape.numel();
  }
  std::map<std::string, int> stored;
  for (const auto& [name, found] : wf.all()) stored[io::safetensors_dtype_name(found.entry->dtype)] += 1;
  std::printf("  %-22s %8s %16s\n", "module", "tensors", "parameters");
  for (const std::string& g : order) std::printf("  %-22s %8d %16s\n", g.c_str(), groups[g].first, grouped(groups[g].second).c_str());
  const std::int64_t total = model::parameter_count(params);
  std::printf("  %-22s %8zu %16s\n", "total", params.size(), grouped(total).c_str());
  std::cout << "  stored as";
  for (const auto& [dt, n] : stored) std::cout << " " << dt << " (" << n << " tensors)";
  std::cout << "\n  weights in memory: " << format_mib(4.0 * total) << " as f32, " << format_mib(2.0 * total) << " as f16/bf16\n";
  try {
    model::check_weights(wf, params, false, nullptr);
    std::cout << "  check: every parameter the config implies is present with its shape; nothing else\n";
  } catch (const InputError&) {
    std::cout << "  check: FAILED\n";
    throw;
  }
  return 0;
}

int inspect_safetensors(const std::string& path) {
  const io::SafetensorsFile f(path);
  std::int64_t total = 0;
  for (const auto& e : f.entries()) {
    std::printf("%-72s %-5s %s\n", e.name.c_str(), io::safetensors_dtype_name(e.dtype), e.shape.str().c_str());
    total += e.shape.numel();
  }
  std::cout << f.entries().size() << " tensors, " << grouped(total) << " elements\n";
  for (const auto& [k, v] : f.metadata()) std::cout << "metadata " << k << ": " << v << "\n";
  return 0;
}

}  // namespace

int inspect(const std::vector<std::string>& args) {
  std::string path;
  po::options_description opts(
      "vinf inspect: describe a model directory or a safetensors file\n\nusage: vinf inspect PATH\n\nOptions");
  opts.add_options()("help,h", "show this help")("path", po::value(&path), "model directory or .safetensors file");
  po::positional_options_description pos;
  pos.add("path", 1);
  po::variables_map vm;
  if (!parse_options(args, opts, vm, &pos)) return 2;
  if (vm.count("help")) {
    std::cout << opts;
    return 0;
  }
  VINF_INPUT_CHECK(!path.empty(), "vinf inspect: give a model directory or a .safetensors file (see --help)");
  std::error_code ec;
  VINF_INPUT_CHECK(std::filesystem::exists(path, ec), path, " does not exist");
  if (std::filesystem::is_directory(path, ec)) return inspect_model(path);
  if (path.size() > 12 && path.compare(path.size() - 12, 12, ".safetensors") == 0) return inspect_safetensors(path);
  VINF_INPUT_FAIL(path, " is neither a model directory nor a .safetensors file (HDF5 checkpoints are not described yet)");
}

}  // namespace vinf::app
