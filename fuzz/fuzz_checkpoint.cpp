// The checkpoint reader (io/checkpoint.cpp on io/h5file.cpp) on well-formed HDF5 files of any
// content: the input says, item by item, what the file holds where a checkpoint has its format
// attributes, solver state, latents and text cache (the valid item, nothing, or another type, rank,
// shape or size, written or left unallocated); the file is written with HDF5's API and read as a
// checkpoint. An empty input is a valid checkpoint. (fuzz_checkpoint_bytes feeds raw bytes.)
#include <hdf5.h>
#include <mpi.h>

#include <cstdlib>
#include <vector>

#include "checkpoint_contract.hpp"
#include "fuzz_support.hpp"
#include "io/checkpoint.hpp"

namespace {

// The input as a stream of choices; past its end every choice is 0 (the valid item).
class Choices {
 public:
  Choices(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  unsigned byte() { return at_ < size_ ? data_[at_++] : 0; }
  std::int64_t int64() {
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = v << 8 | byte();
    return static_cast<std::int64_t>(v);
  }
  std::string text() {
    std::string s(byte() % 24, '\0');
    for (char& c : s) c = static_cast<char>(byte());
    return s;
  }

 private:
  const std::uint8_t* data_;
  std::size_t size_, at_ = 0;
};

void string_attribute(hid_t obj, const char* name, const std::vector<std::string>& values) {
  std::size_t width = 1;
  for (const auto& v : values) width = std::max(width, v.size());
  std::string packed;
  for (const auto& v : values) packed += v + std::string(width - v.size(), '\0');
  const hid_t type = H5Tcopy(H5T_C_S1);
  H5Tset_size(type, width);
  const hsize_t n = values.size();
  const hid_t space = values.size() == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  const hid_t attr = H5Acreate2(obj, name, type, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, type, packed.data());
  H5Aclose(attr);
  H5Sclose(space);
  H5Tclose(type);
}

void int_attribute(hid_t obj, const char* name, const std::vector<std::int64_t>& values) {
  const hsize_t n = values.size();
  const hid_t space = values.size() == 1 ? H5Screate(H5S_SCALAR) : H5Screate_simple(1, &n, nullptr);
  const hid_t attr = H5Acreate2(obj, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(attr, H5T_NATIVE_INT64, values.data());
  H5Aclose(attr);
  H5Sclose(space);
}

// One attribute: the valid value, or absent, another text, another number, an array, a float.
void attribute(Choices& in, hid_t obj, const char* name, bool is_text, const std::string& text, std::int64_t number) {
  switch (in.byte() % 7) {
    case 0:
      if (is_text) string_attribute(obj, name, {text});
      else int_attribute(obj, name, {number});
      break;
    case 1: break;
    case 2: string_attribute(obj, name, {in.text()}); break;
    case 3: int_attribute(obj, name, {in.int64()}); break;
    case 4: int_attribute(obj, name, std::vector<std::int64_t>(2 + in.byte() % 4, number)); break;
    case 5: string_attribute(obj, name, {text, in.text()}); break;
    case 6: {
      const double v = static_cast<double>(in.int64());
      const hid_t space = H5Screate(H5S_SCALAR);
      const hid_t attr = H5Acreate2(obj, name, H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(attr, H5T_NATIVE_DOUBLE, &v);
      H5Aclose(attr);
      H5Sclose(space);
      break;
    }
  }
}

// One dataset: the valid one (f32 or i64 of `dims`, every element written), or absent, another
// shape, left unallocated, another type, or a huge shape with no data.
void dataset(Choices& in, hid_t file, const char* name, hid_t type, std::vector<hsize_t> dims) {
  bool write = true;
  switch (in.byte() % 6) {
    case 0: break;
    case 1: return;
    case 2:
      dims.assign(in.byte() % 6, 0);
      for (hsize_t& d : dims) d = in.byte() % 5;
      break;
    case 3: write = false; break;
    case 4: type = type == H5T_IEEE_F32LE ? H5T_STD_I64LE : H5T_IEEE_F32LE; break;
    case 5:
      if (!dims.empty()) dims[in.byte() % dims.size()] <<= 8 + in.byte() % 48;
      write = false;
      break;
  }
  const hid_t space = dims.empty() ? H5Screate(H5S_SCALAR) : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
  const hid_t set = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (set >= 0 && write) {
    hsize_t n = 1;
    for (hsize_t d : dims) n *= d;
    std::vector<std::int64_t> values(n);  // 8 bytes per element: room for either type
    for (std::size_t i = 0; i < values.size(); ++i) values[i] = static_cast<std::int64_t>(i);
    H5Dwrite(set, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data());
  }
  if (set >= 0) H5Dclose(set);
  H5Sclose(space);
}

void write_file(Choices& in, const std::string& path) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  if (file < 0) std::abort();
  attribute(in, file, "format", true, vinf::io::kCheckpointFormat, 0);
  attribute(in, file, "format_version", false, "", vinf::io::kRunFileVersion);
  for (const char* name : {"vinf_version", "config", "numerics", "model_fingerprint", "noise_mode", "scheduler"})
    attribute(in, file, name, true, "{}", 0);
  attribute(in, file, "seed", false, "", 123);
  for (const char* name : {"world_size", "cfg_size", "clip_size"}) attribute(in, file, name, false, "", 1);
  for (const char* group : {"/state", "/text"}) {
    if (in.byte() % 8 == 7) continue;  // the group is missing
    H5Gclose(H5Gcreate2(file, group, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  }
  if (H5Lexists(file, "/state", H5P_DEFAULT) > 0) {
    const hid_t state = H5Gopen2(file, "/state", H5P_DEFAULT);
    attribute(in, state, "step", false, "", 1);
    H5Gclose(state);
    dataset(in, file, "/state/timesteps", H5T_STD_I64LE, {2});
    dataset(in, file, "/state/sigmas", H5T_IEEE_F32LE, {3});
    dataset(in, file, "/state/previous_x0", H5T_IEEE_F32LE, {2, 1, 2, 2});
  }
  dataset(in, file, "/latents", H5T_IEEE_F32LE, {2, 1, 2, 2});
  if (H5Lexists(file, "/text", H5P_DEFAULT) > 0) {
    dataset(in, file, "/text/prompt_embeds", H5T_IEEE_F32LE, {1, 2, 3});
    dataset(in, file, "/text/negative_prompt_embeds", H5T_IEEE_F32LE, {1, 2, 3});
  }
  H5Fclose(file);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int* argc, char*** argv) {
  // Open MPI would install its own handlers for SIGABRT, SIGSEGV...; libFuzzer's must stay, to
  // report a crash and keep its input.
  ::setenv("OMPI_MCA_opal_signal", "", 1);
  MPI_Init(argc, argv);
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);  // the writer's refusals (an odd shape) are expected
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Choices in(data, size);
  const std::string path = vinf::fuzz::scratch_dir() + "/step-000001.h5";
  write_file(in, path);
  vinf::fuzz::read_checkpoint_checked(path);
  return 0;
}
