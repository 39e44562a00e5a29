// The safetensors reader (io/safetensors.cpp): the 8-byte header length, the JSON header, every
// tensor's dtype, shape and data offsets, and views of the mapped data.
#include <cstring>

#include "fuzz_support.hpp"
#include "io/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = vinf::fuzz::write_file("model.safetensors", {reinterpret_cast<const char*>(data), size});
  vinf::fuzz::expect_input_errors_only([&] {
    const vinf::io::SafetensorsFile file(path);
    volatile unsigned char sink = 0;
    for (const auto& e : file.entries()) {
      const vinf::Tensor t = file.tensor(e.name);
      // Touch the first and last byte of every tensor: an entry that passed the checks lies in the file.
      if (e.bytes > 0) sink = sink ^ static_cast<const unsigned char*>(t.data)[0] ^
                              static_cast<const unsigned char*>(t.data)[e.bytes - 1];
      // The element count and the byte count agree without wrapping around.
      const std::size_t item = vinf::dtype_size(e.dtype);
      if (t.numel() < 0 || e.bytes % item != 0 || static_cast<std::uint64_t>(t.numel()) != e.bytes / item) std::abort();
    }
    for (const auto& [key, value] : file.metadata()) sink = sink ^ static_cast<unsigned char>(key.size() + value.size());
  });
  return 0;
}
