// Read-only access to a .safetensors file, memory-mapped: an 8-byte little-endian header length,
// a JSON header {name: {dtype, shape, data_offsets: [begin, end)}, "__metadata__": {...}}, then
// the packed little-endian data. Every malformed file is rejected with a vinf::Error that names
// the file (and the tensor, where there is one).
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/tensor.hpp"

namespace vinf::io {

class SafetensorsFile {
 public:
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    std::size_t offset = 0;  // from the start of the data section
    std::size_t bytes = 0;
    // A type vinf keeps as bytes only (U8, I32, BOOL, ...: pictures or indices beside the numbers
    // in a reference file): its safetensors name; tensor() refuses it, raw() reads it.
    std::string opaque;
  };

  explicit SafetensorsFile(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<Entry>& entries() const { return entries_; }
  const Entry* find(const std::string& name) const;
  bool contains(const std::string& name) const { return find(name) != nullptr; }
  // A CPU view of the mapped bytes. Read-only: the mapping is PROT_READ.
  Tensor tensor(const std::string& name) const;
  // The bytes of any entry, as stored (little-endian).
  std::string_view raw(const std::string& name) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string path_;
  void* map_ = nullptr;
  std::size_t map_size_ = 0;
  const char* data_ = nullptr;  // start of the data section
  std::vector<Entry> entries_;
  std::map<std::string, std::size_t> index_;
  std::map<std::string, std::string> metadata_;
  // Aligned copies of the tensors whose bytes sit off their type's alignment in the file.
  mutable std::map<std::string, std::vector<std::uint64_t>> aligned_;
};

// A command's input `name` of f: there ("<path> has no tensor '<name>' (<needs>)") and of `rank`
// dimensions ("<path>: '<name>' must be <layout>, got shape [..]"); its values checked finite.
// Throws vinf::InputError.
Tensor require_tensor(const SafetensorsFile& f, const std::string& name, int rank, const std::string& layout,
                      const std::string& needs);
// The same for numbers the model computes on: F32, F16 or BF16 (I64 too where `int64_too`), not
// empty ("<path>: '<name>' [..] is empty").
Tensor require_values(const SafetensorsFile& f, const std::string& name, int rank, const std::string& layout,
                      const std::string& needs, bool int64_too = false);

// "F32" -> f32 etc.; false for types vinf does not handle.
bool parse_safetensors_dtype(const std::string& s, DType& out);
const char* safetensors_dtype_name(DType t);  // f32 -> "F32"

// One tensor to write: its bytes come from `data` (host, contiguous, dtype and shape as given) or,
// for files larger than memory, from `fill`, which is called once with a buffer of the tensor's size
// just before the tensor is written.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  const void* data = nullptr;
  std::function<void(void* dst)> fill;
};

// Writes a safetensors file in the order given. The file is written under a temporary name in
// the same directory and renamed at the end, so a failure never leaves a partial file at `path`.
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace vinf::io
