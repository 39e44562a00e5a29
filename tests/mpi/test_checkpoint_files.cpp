// The checkpoint files at this world size: a configuration of any size, the checksums that every
// read checks (a flipped byte is refused by the rank that reads it, naming the file and dataset),
// files of format version 1, the check of the run's files before a run starts, and files refused
// however they were damaged (attributes of several values, shapes larger than the file, a header
// without checksum).
#include <doctest/doctest.h>
#include <hdf5.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint.hpp"
#include "io/h5file.hpp"
#include "world.hpp"

using namespace vinf;

namespace {

using test::world_rank;
using test::world_size;

// A directory every rank names alike (rank 0's process id), removed at the end.
struct SharedDir {
  std::string path;
  SharedDir() {
    int pid = static_cast<int>(getpid());
    MPI_Bcast(&pid, 1, MPI_INT, 0, MPI_COMM_WORLD);
    path = (std::filesystem::temp_directory_path() / ("vinf-ckpt-test-" + std::to_string(pid))).string();
    if (world_rank() == 0) std::filesystem::create_directories(path);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  ~SharedDir() {
    MPI_Barrier(MPI_COMM_WORLD);
    std::error_code ec;
    if (world_rank() == 0) std::filesystem::remove_all(path, ec);
  }
};

// A JSON text of about `bytes` bytes: a prompt list, as a long --prompt.text list makes it.
std::string long_config(std::size_t bytes) {
  std::string j = "{\"prompt\":{\"text\":[";
  for (int i = 0; j.size() < bytes; ++i)
    j += (i ? "," : "") + std::string("\"prompt ") + std::to_string(i) +
         ": a slow pan across a harbour at dawn, boats leaving one by one, gulls over the water\"";
  return j + "]}}";
}

constexpr std::int64_t kLatentC = 2, kLatentH = 3, kLatentW = 5, kPerFrame = kLatentC * kLatentH * kLatentW;

float value_at(std::int64_t frame, std::int64_t i, float sign) {
  return sign * (static_cast<float>(frame) + 0.001f * static_cast<float>(i));
}

// Writes a checkpoint of `frames` frames, 2 per rank, collectively.
void write_test_checkpoint(const std::string& path, const io::RunStamp& stamp, std::int64_t frames) {
  const std::int64_t nf = frames / world_size(), first = world_rank() * nf;
  std::vector<float> lat(static_cast<std::size_t>(nf * kPerFrame)), prev(lat.size());
  for (std::int64_t f = 0; f < nf; ++f)
    for (std::int64_t i = 0; i < kPerFrame; ++i) {
      lat[static_cast<std::size_t>(f * kPerFrame + i)] = value_at(first + f, i, 1.f);
      prev[static_cast<std::size_t>(f * kPerFrame + i)] = value_at(first + f, i, -1.f);
    }
  const io::FramePart part{{frames, kLatentC, kLatentH, kLatentW}, first, nf};
  const io::SolverState state{3, {900, 600, 300, 1}, {1.0, 0.7, 0.4, 0.1, 0.0}};
  io::TextCache text{1, 2, 3, {1, 2, 3, 4, 5, 6}, {}};
  io::write_checkpoint(MPI_COMM_WORLD, path, stamp, part, lat.data(), prev.data(), state, text);
}

io::RunStamp test_stamp(std::size_t config_bytes) {
  io::RunStamp s;
  s.config_json = long_config(config_bytes);
  s.numerics_json = long_config(config_bytes / 2);
  s.model_fingerprint = "test";
  s.noise_mode = "invariant";
  s.scheduler = "ddim";
  s.world_size = s.clip_size = world_size();
  return s;
}

// XORs 8 bytes in the middle of the chunk that holds `frame` of `name` (rank 0, serial access).
void flip_frame(const std::string& path, const std::string& name, std::int64_t frame) {
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  const hsize_t at[4] = {static_cast<hsize_t>(frame), 0, 0, 0};
  unsigned mask = 0;
  haddr_t addr = 0;
  hsize_t size = 0;
  REQUIRE(H5Dget_chunk_info_by_coord(d, at, &mask, &addr, &size) >= 0);
  H5Dclose(d);
  H5Fclose(f);
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto pos = static_cast<std::streamoff>(addr + size / 2 / 4 * 4);
  char bytes[8];
  io.seekg(pos);
  io.read(bytes, 8);
  for (char& b : bytes) b = static_cast<char>(b ^ 0x5a);
  io.seekp(pos);
  io.write(bytes, 8);
  REQUIRE(io.good());
}

// A format-1 checkpoint written with HDF5's own API in the library's earliest file format (object
// headers without checksums, as vinf wrote checkpoints before format 2): 2 frames of 2x3x5, 2 steps,
// one prompt of 2 tokens x 3. edit(file) changes it before it is closed.
template <class Edit>
void write_plain_v1(const std::string& path, Edit edit) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  REQUIRE(file >= 0);
  const hid_t scalar = H5Screate(H5S_SCALAR);
  auto text_attr = [&](hid_t obj, const char* name, const std::string& value) {
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, value.size());
    const hid_t attr = H5Acreate2(obj, name, type, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, type, value.data());
    H5Aclose(attr);
    H5Tclose(type);
  };
  auto int_attr = [&](hid_t obj, const char* name, std::int64_t value) {
    const hid_t attr = H5Acreate2(obj, name, H5T_STD_I64LE, scalar, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(attr, H5T_NATIVE_INT64, &value);
    H5Aclose(attr);
  };
  auto dataset = [&](const char* name, hid_t type, std::vector<hsize_t> dims, const void* data, hid_t mem_type) {
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t set = H5Dcreate2(file, name, type, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Dwrite(set, mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
    H5Dclose(set);
    H5Sclose(space);
  };
  text_attr(file, "format", io::kCheckpointFormat);
  int_attr(file, "format_version", 1);
  for (const char* key : {"config", "numerics"}) text_attr(file, key, "{}");
  for (const char* key : {"model_fingerprint", "noise_mode", "scheduler"}) text_attr(file, key, "x");
  for (const char* key : {"seed", "world_size", "cfg_size", "clip_size"}) int_attr(file, key, 1);
  const std::vector<float> frames(static_cast<std::size_t>(2 * kPerFrame), 0.5f);
  dataset("/latents", H5T_IEEE_F32LE, {2, kLatentC, kLatentH, kLatentW}, frames.data(), H5T_NATIVE_FLOAT);
  const hid_t state = H5Gcreate2(file, "/state", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  int_attr(state, "step", 1);
  H5Gclose(state);
  const std::int64_t timesteps[2] = {500, 1};
  const float sigmas[3] = {1.f, 0.5f, 0.f}, embeds[6] = {1, 2, 3, 4, 5, 6};
  dataset("/state/timesteps", H5T_STD_I64LE, {2}, timesteps, H5T_NATIVE_INT64);
  dataset("/state/sigmas", H5T_IEEE_F32LE, {3}, sigmas, H5T_NATIVE_FLOAT);
  dataset("/state/previous_x0", H5T_IEEE_F32LE, {2, kLatentC, kLatentH, kLatentW}, frames.data(), H5T_NATIVE_FLOAT);
  H5Gclose(H5Gcreate2(file, "/text", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
  dataset("/text/prompt_embeds", H5T_IEEE_F32LE, {1, 2, 3}, embeds, H5T_NATIVE_FLOAT);
  edit(file);
  H5Sclose(scalar);
  H5Fclose(file);
}

// The input error read_checkpoint_info refuses the file with ("" when it reads it).
std::string refusal(const std::string& path) {
  try {
    io::read_checkpoint_info(path);
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checkpoint files: a configuration over 64 KiB is written and read back whole") {
  set_process_rank(world_rank());
  SharedDir dir;
  const io::RunStamp stamp = test_stamp(200000);
  REQUIRE(stamp.config_json.size() > 65536);
  const std::string path = dir.path + "/step-000003.h5";
  const std::int64_t frames = 2 * world_size();
  write_test_checkpoint(path, stamp, frames);
  const io::CheckpointInfo info = io::read_checkpoint_info(path);
  CHECK(info.format_version == 2);
  CHECK(info.stamp.config_json == stamp.config_json);
  CHECK(info.stamp.numerics_json == stamp.numerics_json);
  CHECK(info.state.step == 3);
  CHECK(info.full == Shape{frames, kLatentC, kLatentH, kLatentW});
  // The frames come back exactly, each rank its own.
  std::vector<float> lat(static_cast<std::size_t>(2 * kPerFrame)), prev(lat.size());
  io::read_checkpoint_frames(MPI_COMM_WORLD, path, 2 * world_rank(), 2, lat.data(), prev.data());
  CHECK(lat[0] == value_at(2 * world_rank(), 0, 1.f));
  CHECK(lat.back() == value_at(2 * world_rank() + 1, kPerFrame - 1, 1.f));
  CHECK(prev.back() == value_at(2 * world_rank() + 1, kPerFrame - 1, -1.f));
  // The same holds for latents.h5.
  const std::string latents = dir.path + "/latents.h5";
  io::write_latents(MPI_COMM_WORLD, latents, stamp, {{frames, kLatentC, kLatentH, kLatentW}, 2 * world_rank(), 2}, lat.data());
  const io::H5File f = io::H5File::open(MPI_COMM_SELF, latents);
  CHECK(f.read_text("/run/config") == stamp.config_json);
}

TEST_CASE("checkpoint files: flipped bytes in one frame are refused by the rank that reads them") {
  set_process_rank(world_rank());
  SharedDir dir;
  const std::string path = dir.path + "/step-000003.h5";
  const std::int64_t frames = 2 * world_size(), damaged = frames - 2;  // the last rank's first frame
  write_test_checkpoint(path, test_stamp(1000), frames);
  if (world_rank() == 0) flip_frame(path, "/latents", damaged);
  MPI_Barrier(MPI_COMM_WORLD);
  std::vector<float> lat(static_cast<std::size_t>(2 * kPerFrame)), prev(lat.size());
  std::string error;
  try {
    io::read_checkpoint_frames(MPI_COMM_WORLD, path, 2 * world_rank(), 2, lat.data(), prev.data());
  } catch (const InputError& e) {
    error = e.what();
  }
  if (world_rank() == world_size() - 1) {
    CHECK(error.find(path + ": /latents (slices " + std::to_string(frames - 2) + " to " + std::to_string(frames - 1) +
                     " along axis 0) does not match its checksum") != std::string::npos);
  } else {
    CHECK(error.empty());
    CHECK(lat[5] == value_at(2 * world_rank(), 5, 1.f));
  }
  // The serial read of the metadata checks the same chunks: the last frame's is read, and a
  // damaged text embedding is found there too.
  if (world_rank() == 0) {
    CHECK_NOTHROW(io::read_checkpoint_info(path));  // frame `damaged` is not the last one
    flip_frame(path, "/state/previous_x0", frames - 1);
    std::string info_error;
    try {
      io::read_checkpoint_info(path);
    } catch (const InputError& e) {
      info_error = e.what();
    }
    CHECK(info_error.find(path + ": /state/previous_x0 (slices " + std::to_string(frames - 1) + " to " +
                          std::to_string(frames - 1) + " along axis 0) does not match its checksum") != std::string::npos);
  }
}

TEST_CASE("checkpoint files: a flipped byte in a dataset's header fails the metadata checksum") {
  set_process_rank(world_rank());
  SharedDir dir;
  const std::string path = dir.path + "/step-000003.h5";
  write_test_checkpoint(path, test_stamp(1000), 2 * world_size());
  if (world_rank() == 0) {
    const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    H5O_info_t info{};
    REQUIRE(H5Oget_info_by_name2(f, "/latents", &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0);
    H5Fclose(f);
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto pos = static_cast<std::streamoff>(info.addr + 16);  // past the signature, among the messages
    char byte = 0;
    io.seekg(pos);
    io.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x5a);
    io.seekp(pos);
    io.write(&byte, 1);
    REQUIRE(io.good());
    io.close();
    std::string error;
    try {
      io::read_checkpoint_info(path);
    } catch (const InputError& e) {  // an input error: --resume auto skips the file
      error = e.what();
    }
    CHECK(error.find(path + ": ") != std::string::npos);
    CHECK(error.find("does not match its checksum") != std::string::npos);
  }
}

TEST_CASE("checkpoint files: format version 1 (configuration in attributes, no checksums) is still read") {
  set_process_rank(world_rank());
  SharedDir dir;
  const std::string path = dir.path + "/step-000002.h5";
  if (world_rank() == 0) {
    io::H5File f = io::H5File::create(MPI_COMM_SELF, path);
    f.set_text("/", "format", io::kCheckpointFormat);
    f.set_int("/", "format_version", 1);
    f.set_text("/", "config", "{\"video\":{\"frames\":2}}");
    f.set_text("/", "numerics", "{\"sampler\":{\"steps\":2}}");
    for (const char* key : {"model_fingerprint", "noise_mode", "scheduler", "vinf_version"}) f.set_text("/", key, "x");
    for (const char* key : {"seed", "world_size", "cfg_size", "clip_size"}) f.set_int("/", key, 1);
    const std::vector<float> frames(static_cast<std::size_t>(2 * kPerFrame), 0.5f);
    f.write_frames("/latents", {2, kLatentC, kLatentH, kLatentW}, 0, 0, 2, frames.data());
    f.create_group("/state");
    f.set_int("/state", "step", 1);
    const std::int64_t timesteps[2] = {500, 1};
    const float sigmas[3] = {1.f, 0.5f, 0.f};
    f.write_small("/state/timesteps", DType::i64, {2}, timesteps);
    f.write_small("/state/sigmas", DType::f32, {3}, sigmas);
    f.write_frames("/state/previous_x0", {2, kLatentC, kLatentH, kLatentW}, 0, 0, 2, frames.data());
    f.create_group("/text");
    const std::vector<float> embeds(6, 1.f);
    f.write_small("/text/prompt_embeds", DType::f32, {1, 2, 3}, embeds.data());
    f.close();
    const io::CheckpointInfo info = io::read_checkpoint_info(path);
    CHECK(info.format_version == 1);
    CHECK(info.stamp.config_json == "{\"video\":{\"frames\":2}}");
    CHECK(info.stamp.numerics_json == "{\"sampler\":{\"steps\":2}}");
    CHECK(info.state.timesteps == std::vector<std::int64_t>{500, 1});
  }
}

TEST_CASE("checkpoint files: the run's files are checked before a run starts") {
  set_process_rank(world_rank());
  SharedDir dir;
  const io::RunStamp stamp = test_stamp(100000);
  io::check_run_files(MPI_COMM_WORLD, dir.path, stamp);
  MPI_Barrier(MPI_COMM_WORLD);
  CHECK(std::filesystem::is_empty(dir.path));  // the probe is gone
  std::string error;
  try {
    io::check_run_files(MPI_COMM_WORLD, dir.path + "/missing/checkpoints", stamp);
  } catch (const InputError& e) {
    error = e.what();
  }
  CHECK(error.find("checked before the first step: cannot create " + dir.path + "/missing/checkpoints/") !=
        std::string::npos);
}

TEST_CASE("checkpoint files: an attribute holding several values is refused, not read into room for one") {
  // H5Aread writes every element of an attribute: an array under one of vinf's names overran the
  // buffer of one value it is read into (the stack for an integer, a string's bytes for text).
  set_process_rank(world_rank());
  SharedDir dir;
  const std::string path = dir.path + "/step-000001.h5";
  if (world_rank() == 0) {
    write_plain_v1(path, [](hid_t) {});
    CHECK(refusal(path).empty());
    write_plain_v1(path, [](hid_t file) {
      H5Adelete(file, "seed");
      const hsize_t n = 4;
      const hid_t space = H5Screate_simple(1, &n, nullptr);
      const hid_t attr = H5Acreate2(file, "seed", H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
      const std::int64_t values[4] = {1, 2, 3, 4};
      H5Awrite(attr, H5T_NATIVE_INT64, values);
      H5Aclose(attr);
      H5Sclose(space);
    });
    CHECK(refusal(path).find(path + ": attribute 'seed' holds 4 values, not one") != std::string::npos);
    write_plain_v1(path, [](hid_t file) {
      H5Adelete(file, "noise_mode");
      const hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, 8);
      const hsize_t n = 3;
      const hid_t space = H5Screate_simple(1, &n, nullptr);
      const hid_t attr = H5Acreate2(file, "noise_mode", type, space, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(attr, type, "invarianinvarianinvarian");
      H5Aclose(attr);
      H5Sclose(space);
      H5Tclose(type);
    });
    CHECK(refusal(path).find(path + ": attribute 'noise_mode' holds 3 values, not one") != std::string::npos);
  }
}

TEST_CASE("checkpoint files: a shape or text that claims more bytes than the file holds is refused before any allocation") {
  set_process_rank(world_rank());
  SharedDir dir;
  const std::string path = dir.path + "/step-000001.h5";
  if (world_rank() == 0) {
    write_plain_v1(path, [](hid_t file) {
      H5Ldelete(file, "/text/prompt_embeds", H5P_DEFAULT);
      const hsize_t dims[3] = {1, 2, hsize_t{1} << 40};  // 2^43 bytes of f32, none of them written
      const hid_t space = H5Screate_simple(3, dims, nullptr);
      H5Dclose(H5Dcreate2(file, "/text/prompt_embeds", H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
      H5Sclose(space);
    });
    CHECK(refusal(path).find(path + ": /text/prompt_embeds claims a shape [1, 2, 1099511627776] of 8796093022208 "
                             "bytes, but the file holds 0 bytes of it") != std::string::npos);
    // An empty dimension holds no bytes whatever the others claim; one frame of these would be 4 TiB.
    write_plain_v1(path, [](hid_t file) {
      for (const char* name : {"/latents", "/state/previous_x0"}) {
        H5Ldelete(file, name, H5P_DEFAULT);
        const hsize_t dims[4] = {0, 1, hsize_t{1} << 20, hsize_t{1} << 20};
        const hid_t space = H5Screate_simple(4, dims, nullptr);
        H5Dclose(H5Dcreate2(file, name, H5T_IEEE_F32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
        H5Sclose(space);
      }
    });
    CHECK(refusal(path).find(path + ": /latents has an empty dimension in its shape [0, 1, 1048576, 1048576]") !=
          std::string::npos);
    // A text attribute's size is bounded before it is allocated (here 2 MiB, in the newer file
    // format, which stores attributes over 64 KiB).
    {
      const hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
      H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_LATEST);
      const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, fapl);
      REQUIRE(file >= 0);
      const hid_t type = H5Tcopy(H5T_C_S1);
      H5Tset_size(type, std::size_t{2} << 20);
      const hid_t scalar = H5Screate(H5S_SCALAR);
      const hid_t attr = H5Acreate2(file, "format", type, scalar, H5P_DEFAULT, H5P_DEFAULT);
      REQUIRE(attr >= 0);
      const std::string value(std::size_t{2} << 20, 'x');
      REQUIRE(H5Awrite(attr, type, value.data()) >= 0);
      H5Aclose(attr);
      H5Sclose(scalar);
      H5Tclose(type);
      H5Fclose(file);
      H5Pclose(fapl);
    }
    CHECK(refusal(path).find(path + ": attribute 'format' claims 2097152 bytes of text, more than vinf writes") !=
          std::string::npos);
  }
  // A text dataset cannot claim more bytes than the file holds for it (format 2 keeps the
  // configuration in /run/config).
  write_test_checkpoint(path, test_stamp(100), 2 * world_size());
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    const hid_t file = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    REQUIRE(file >= 0);
    H5Ldelete(file, "/run/config", H5P_DEFAULT);
    const hid_t type = H5Tcopy(H5T_C_S1);
    H5Tset_size(type, std::size_t{1} << 30);
    const hid_t scalar = H5Screate(H5S_SCALAR);
    H5Dclose(H5Dcreate2(file, "/run/config", type, scalar, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT));
    H5Sclose(scalar);
    H5Tclose(type);
    H5Fclose(file);
    CHECK(refusal(path).find(path + ": /run/config claims 1073741824 bytes of text, but the file holds 0 bytes") !=
          std::string::npos);
  }
}

TEST_CASE("checkpoint files: a damaged object header without a checksum is an input error, not an internal one") {
  // Format 1 files carry no checksums: HDF5 fails on the damage itself. That is the file's fault
  // (exit 2, and --resume auto goes on to an older checkpoint), not vinf's (exit 1).
  set_process_rank(world_rank());
  SharedDir dir;
  const std::string path = dir.path + "/step-000001.h5";
  if (world_rank() == 0) {
    write_plain_v1(path, [](hid_t) {});
    haddr_t header = 0;
    {
      const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
      H5O_info_t info{};
      REQUIRE(H5Oget_info_by_name2(f, "/state/timesteps", &info, H5O_INFO_BASIC, H5P_DEFAULT) >= 0);
      header = info.addr;
      H5Fclose(f);
    }
    std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
    io.seekp(static_cast<std::streamoff>(header + 16));
    io.write("\xff\xff\xff\xff", 4);  // the first message's type and size
    REQUIRE(io.good());
    io.close();
    CHECK(refusal(path).find("cannot read " + path +
                             ": HDF5 could not complete opening dataset /state/timesteps (truncated or damaged?)") !=
          std::string::npos);
  }
}
