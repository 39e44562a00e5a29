#include "io/safetensors.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace vinf::io {

bool parse_safetensors_dtype(const std::string& s, DType& out) {
  if (s == "F32") out = DType::f32;
  else if (s == "F16") out = DType::f16;
  else if (s == "BF16") out = DType::bf16;
  else if (s == "F64") out = DType::f64;
  else if (s == "I64") out = DType::i64;
  else return false;
  return true;
}

SafetensorsFile::SafetensorsFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  VINF_CHECK(fd >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    VINF_FAIL("cannot stat ", path, ": ", std::strerror(err));
  }
  map_size_ = static_cast<std::size_t>(st.st_size);
  if (map_size_ < 8) {
    ::close(fd);
    VINF_FAIL(path, " is not a safetensors file: ", map_size_, " bytes is shorter than the 8-byte header length");
  }
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int map_err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    VINF_FAIL("cannot map ", path, ": ", std::strerror(map_err));
  }
  try {
    const auto* bytes = static_cast<const unsigned char*>(map_);
    std::uint64_t header_len = 0;
    for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | bytes[i];
    VINF_CHECK(header_len <= map_size_ - 8, path, ": header length ", header_len, " runs past the end of the file (",
               map_size_, " bytes); the file is truncated or not safetensors");
    data_ = static_cast<const char*>(map_) + 8 + header_len;
    const std::size_t data_size = map_size_ - 8 - header_len;
    nlohmann::json header;
    try {
      header = nlohmann::json::parse(static_cast<const char*>(map_) + 8, data_);
    } catch (const nlohmann::json::exception& e) {
      VINF_FAIL(path, ": the header is not valid JSON (", e.what(), ")");
    }
    VINF_CHECK(header.is_object(), path, ": the header is not a JSON object");
    for (auto it = header.begin(); it != header.end(); ++it) {
      const std::string& name = it.key();
      if (name == "__metadata__") {
        VINF_CHECK(it->is_object(), path, ": __metadata__ is not an object");
        for (auto m = it->begin(); m != it->end(); ++m)
          metadata_[m.key()] = m->is_string() ? m->get<std::string>() : m->dump();
        continue;
      }
      const auto& v = *it;
      VINF_CHECK(v.is_object() && v.contains("dtype") && v.contains("shape") && v.contains("data_offsets"), path,
                 ": tensor '", name, "' lacks dtype, shape or data_offsets");
      Entry e;
      e.name = name;
      const std::string dt = v["dtype"].is_string() ? v["dtype"].get<std::string>() : "?";
      VINF_CHECK(parse_safetensors_dtype(dt, e.dtype), path, ": tensor '", name, "' has dtype ", dt,
                 ", which vinf does not read (F32, F16, BF16, F64, I64)");
      VINF_CHECK(v["shape"].is_array() && v["shape"].size() <= static_cast<std::size_t>(kMaxDims), path, ": tensor '",
                 name, "' has a bad shape ", v["shape"].dump());
      for (const auto& d : v["shape"]) {
        VINF_CHECK(d.is_number_integer() && d.get<std::int64_t>() >= 0, path, ": tensor '", name, "' has a bad shape ",
                   v["shape"].dump());
        e.shape.push_back(d.get<std::int64_t>());
      }
      const auto& off = v["data_offsets"];
      VINF_CHECK(off.is_array() && off.size() == 2 && off[0].is_number_unsigned() && off[1].is_number_unsigned(), path,
                 ": tensor '", name, "' has bad data_offsets ", off.dump());
      const auto begin = off[0].get<std::uint64_t>(), end = off[1].get<std::uint64_t>();
      VINF_CHECK(begin <= end && end <= data_size, path, ": tensor '", name, "' data [", begin, ", ", end,
                 ") lies outside the ", data_size, "-byte data section; the file is truncated or corrupt");
      e.offset = begin;
      e.bytes = end - begin;
      const std::size_t want = static_cast<std::size_t>(e.shape.numel()) * dtype_size(e.dtype);
      VINF_CHECK(e.bytes == want, path, ": tensor '", name, "' holds ", e.bytes, " bytes but ", dt, e.shape.str(),
                 " needs ", want);
      index_[name] = entries_.size();
      entries_.push_back(std::move(e));
    }
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

Tensor SafetensorsFile::tensor(const std::string& name) const {
  const Entry* e = find(name);
  VINF_CHECK(e != nullptr, path_, ": no tensor named '", name, "'");
  return Tensor::wrap(const_cast<char*>(data_ + e->offset), e->dtype, Device::cpu(), e->shape);
}

}  // namespace vinf::io
