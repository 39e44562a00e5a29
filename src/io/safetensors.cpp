#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace vinf::io {

bool parse_safetensors_dtype(const std::string& s, DType& out) {
  if (s == "F32")
    out = DType::f32;
  else if (s == "F16")
    out = DType::f16;
  else if (s == "BF16")
    out = DType::bf16;
  else if (s == "F64")
    out = DType::f64;
  else if (s == "I64")
    out = DType::i64;
  else
    return false;
  return true;
}

namespace {

// The element size of the safetensors types vinf keeps as bytes only; 0 for names it does not know.
std::uint64_t opaque_dtype_size(const std::string& s) {
  if (s == "U8" || s == "I8" || s == "BOOL" || s == "F8_E4M3" || s == "F8_E5M2") return 1;
  if (s == "U16" || s == "I16") return 2;
  if (s == "U32" || s == "I32") return 4;
  if (s == "U64") return 8;
  return 0;
}

// The format requires the tensors to cover the data section exactly: in any order, without
// overlap and without holes (a file that hides other bytes between its tensors, or reads the
// same bytes as two tensors, is refused as the reference implementation refuses it). Empty
// tensors cover nothing and may sit anywhere in the section.
void check_layout(const std::string& path, const std::vector<SafetensorsFile::Entry>& entries, std::size_t data_size) {
  std::vector<const SafetensorsFile::Entry*> by_offset;
  for (const auto& e : entries)
    if (e.bytes > 0) by_offset.push_back(&e);
  std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
    return a->offset != b->offset ? a->offset < b->offset : a->name < b->name;
  });
  std::size_t covered = 0;  // [0, covered) is covered so far
  const SafetensorsFile::Entry* last = nullptr;  // the tensor that reaches `covered`
  for (const auto* e : by_offset) {
    VINF_INPUT_CHECK(e->offset >= covered, path, ": tensors '", last ? last->name : "", "' [", last ? last->offset : 0,
                     ", ", covered, ") and '", e->name, "' [", e->offset, ", ", e->offset + e->bytes,
                     ") overlap in the data section; the file is corrupt");
    VINF_INPUT_CHECK(
        e->offset == covered, path, ": bytes [", covered, ", ", e->offset,
        ") of the data section belong to no tensor (a hole ",
        last ? "between '" + last->name + "' and '" + e->name + "'" : "before '" + e->name + "', the first tensor",
        "); a safetensors file's tensors must cover its data section without gaps");
    covered = e->offset + e->bytes;
    last = e;
  }
  VINF_INPUT_CHECK(covered == data_size, path, ": bytes [", covered, ", ", data_size,
                   ") at the end of the data section belong to no tensor", last ? " (after '" + last->name + "')" : "",
                   "; a safetensors file's tensors must cover its data section without gaps");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VINF_INPUT_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    VINF_INPUT_FAIL("cannot stat ", path, ": ", std::strerror(err));
  }
  map_size_ = static_cast<std::size_t>(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    VINF_INPUT_FAIL(path, " is not a safetensors file: ", map_size_, " bytes is shorter than the 8-byte header length");
  }
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    VINF_INPUT_FAIL("cannot map ", path, ": ", std::strerror(map_err));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    VINF_INPUT_CHECK(header_len <= map_size_ - 8, path, ": header length ", header_len,
                     " runs past the end of the file (", map_size_,
                     " bytes); the file is truncated or not safetensors");
    data_ = static_cast<const char*>(map_) + 8 + header_len;
    const std::size_t data_size = map_size_ - 8 - header_len;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(static_cast<const char*>(map_) + 8, data_);
    } catch (const nlohmann::json::exception& e) {
      VINF_INPUT_FAIL(path, ": the header is not valid JSON (", e.what(), ")");
    }
    VINF_INPUT_CHECK(header.is_object(), path, ": the header is not a JSON object");
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      if (name == "__metadata__") {
        VINF_INPUT_CHECK(it->is_object(), path, ": __metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m)
          metadata_[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
        continue;
      }
      const auto& v = *it;
      VINF_INPUT_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), path,
                       ": tensor '", name, "' lacks dtype, shape or data_offsets");
      Entry e;
      e.name = name;
      const std::string dt = v["dtype"].is_string() ? v["dtype"].get<std::string>() : "?";
      std::uint64_t element = 0;
      if (parse_safetensors_dtype(dt, e.dtype)) {
        element = dtype_size(e.dtype);
      } else {
        element = opaque_dtype_size(dt);
        VINF_INPUT_CHECK(element > 0, path, ": tensor '", name, "' has dtype ", dt,
                         ", which vinf does not read (F32, F16, BF16, F64, I64; bytes of U8 ... I32, BOOL)");
        e.opaque = dt;
      }
      VINF_INPUT_CHECK(v["shape"].is_array() && v["shape"].size() <= static_cast<std::size_t>(kMaxDims), path,
                       ": tensor '", name, "' has a bad shape ", v["shape"].dump());
      for (const auto& d : v["shape"]) {
        VINF_INPUT_CHECK(d.is_number_integer() && d.get<std::int64_t>() >= 0, path, ": tensor '", name,
                         "' has a bad shape ", v["shape"].dump());
        e.shape.push_back(d.get<std::int64_t>());
      }
      const auto& off = v["data_offsets"];
      VINF_INPUT_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(),
                       path, ": tensor '", name, "' has bad data_offsets ", off.dump());
      const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
      VINF_INPUT_CHECK(begin <= end, path, ": tensor '", name, "' has data_offsets [", begin, ", ", end,
                       "] that end before they begin; the file is corrupt");
      VINF_INPUT_CHECK(end <= data_size, path, ": tensor '", name, "' data [", begin, ", ", end, ") lies outside the ",
                       data_size, "-byte data section; the file is truncated or corrupt");
      e.offset = begin;
      e.bytes = end - begin;
      // The element count of a hostile shape can overflow; any size beyond the file is wrong anyway.
      std::uint64_t want = element;
      bool overflow = false;
      for (std::int64_t d : e.shape)
        overflow = overflow || __builtin_mul_overflow(want, static_cast<std::uint64_t>(d), &want);
      VINF_INPUT_CHECK(!overflow && e.bytes == want, path, ": tensor '", name, "' holds ", e.bytes, " bytes but ", dt,
                       e.shape.str(), " needs ", overflow ? std::string("more than 2^64") : std::to_string(want));
      index_[name] = entries_.size();
      entries_.push_back(std::move(e));
    }
    check_layout(path, entries_, data_size);
  } catch (...) {
    ::munmap(map_, map_size_);
    map_ = nullptr;
    throw;
  }
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, map_size_);
}

const SafetensorsFile::Entry* SafetensorsFile::find(const std::string& name) const {
  const auto it = index_.find(name);
  return it == index_.end() ? nullptr : &entries_[it->second];
}

std::string_view SafetensorsFile::raw(const std::string& name) const {
  const Entry* e = find(name);
  VINF_INPUT_CHECK(e != nullptr, path_, ": no tensor named '", name, "'");
  return {data_ + e->offset, e->bytes};
}

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const Entry* e = find(name);
  VINF_INPUT_CHECK(e != nullptr, path_, ": no tensor named '", name, "'");
  VINF_INPUT_CHECK(e->opaque.empty(), path_, ": tensor '", name, "' has dtype ", e->opaque,
                   ", which vinf does not compute with (F32, F16, BF16, F64, I64)");
  const char* at = data_ + e->offset;
  if (reinterpret_cast<std::uintptr_t>(at) % dtype_size(e->dtype) != 0) {
    // Byte tensors before it (a reference file's pictures) can leave a tensor off its type's
    // alignment: it is read from an aligned copy the file keeps.
    std::vector<std::uint64_t>& copy = aligned_[name];
    if (copy.empty()) {
      copy.resize((e->bytes + sizeof(std::uint64_t) - 1) / sizeof(std::uint64_t) + 1);
      std::memcpy(copy.data(), at, e->bytes);
    }
    at = reinterpret_cast<const char*>(copy.data());
  }
  Tensor t = Tensor::wrap(const_cast<char*>(at), e->dtype, Device::cpu(), e->shape);
  // Every tensor vinf reads from a file it is given (weights, inputs, latents, embeddings) is
  // checked here, once per read: a NaN would otherwise surface steps later as all-NaN output.
  const std::int64_t bad = first_non_finite(t);
  VINF_INPUT_CHECK(bad < 0, path_, ": tensor '", name, "' holds a NaN or infinity (element ", bad, " of ", t.numel(),
                   "): vinf computes with finite numbers only, so the file is damaged (an interrupted download or a ",
                   "broken conversion) or was written from a run that diverged; write or fetch it again");
  return t;
}

}  // namespace vinf::io

namespace vinf::io {

const char* safetensors_dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::f16: return "F16";
    case DType::bf16: return "BF16";
    case DType::f64: return "F64";
    case DType::i64: return "I64";
  }
  return "?";
}

namespace {

// Closes and removes the temporary file unless the write completed.
struct TempFile {
  std::string path;
  std::FILE* f = nullptr;
  bool done = false;
  ~TempFile() {
    if (f) std::fclose(f);
    if (!done) std::remove(path.c_str());
  }
};

void write_all(TempFile& tmp, const std::string& final_path, const void* p, std::size_t n) {
  if (n == 0) return;
  VINF_INPUT_CHECK(std::fwrite(p, 1, n, tmp.f) == n, "cannot write ", final_path, ": ", std::strerror(errno),
                   " (is the disk full?)");
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  std::size_t offset = 0;
  for (const TensorToWrite& t : tensors) {
    VINF_CHECK(t.data != nullptr || t.fill, "write_safetensors: tensor '", t.name, "' has neither data nor fill");
    VINF_CHECK(!header.contains(t.name), "write_safetensors: tensor '", t.name, "' appears twice");
    const std::size_t bytes = static_cast<std::size_t>(t.shape.numel()) * dtype_size(t.dtype);
    nlohmann::ordered_json e;
    e["dtype"] = safetensors_dtype_name(t.dtype);
    e["shape"] = std::vector<std::int64_t>(t.shape.begin(), t.shape.end());
    e["data_offsets"] = {offset, offset + bytes};
    header[t.name] = e;
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned

  TempFile tmp;
  tmp.path = path + ".partial." + std::to_string(::getpid());
  tmp.f = std::fopen(tmp.path.c_str(), "wb");
  VINF_INPUT_CHECK(tmp.f != nullptr, "cannot create ", tmp.path, ": ", std::strerror(errno));
  unsigned char len[8];
  for (int i = 0; i < 8; ++i) len[i] = static_cast<unsigned char>((std::uint64_t{text.size()} >> (8 * i)) & 0xff);
  write_all(tmp, path, len, 8);
  write_all(tmp, path, text.data(), text.size());
  std::vector<char> buffer;
  for (const TensorToWrite& t : tensors) {
    const std::size_t bytes = static_cast<std::size_t>(t.shape.numel()) * dtype_size(t.dtype);
    if (t.data) {
      write_all(tmp, path, t.data, bytes);
    } else {
      buffer.resize(bytes);
      t.fill(buffer.data());
      write_all(tmp, path, buffer.data(), bytes);
    }
  }
  const int rc = std::fclose(tmp.f);
  tmp.f = nullptr;
  VINF_INPUT_CHECK(rc == 0, "cannot write ", path, ": ", std::strerror(errno), " (is the disk full?)");
  VINF_INPUT_CHECK(std::rename(tmp.path.c_str(), path.c_str()) == 0, "cannot rename ", tmp.path, " to ", path, ": ",
                   std::strerror(errno));
  tmp.done = true;
}

Tensor require_tensor(const SafetensorsFile& f, const std::string& name, int rank, const std::string& layout,
                      const std::string& needs) {
  const SafetensorsFile::Entry* e = f.find(name);
  VINF_INPUT_CHECK(e != nullptr, f.path(), " has no tensor '", name, "' (", needs, ")");
  VINF_INPUT_CHECK(e->shape.rank() == rank, f.path(), ": '", name, "' must be ", layout, ", got shape ",
                   e->shape.str());
  return f.tensor(name);
}

Tensor require_values(const SafetensorsFile& f, const std::string& name, int rank, const std::string& layout,
                      const std::string& needs, bool int64_too) {
  const Tensor t = require_tensor(f, name, rank, layout, needs);
  VINF_INPUT_CHECK(
      t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16 || (int64_too && t.dtype == DType::i64),
      f.path(), ": '", name, "' must be F32 (or F16/BF16), got ", safetensors_dtype_name(t.dtype));
  VINF_INPUT_CHECK(t.numel() > 0, f.path(), ": '", name, "' ", t.shape.str(), " is empty");
  return t;
}

}  // namespace vinf::io
