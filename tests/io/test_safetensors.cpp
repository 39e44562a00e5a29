// The safetensors reader on the fixture files and on every kind of broken file.
#include <doctest/doctest.h>

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "../support.hpp"
#include "core/error.hpp"
#include "io/safetensors.hpp"

using namespace vinf;

namespace {

std::string write_file(const std::string& name, const std::string& header, std::size_t data_bytes,
                       std::uint64_t claimed_len = 0) {
  const std::string path = "/tmp/vinf_test_" + std::to_string(::getpid()) + "_" + name;
  std::ofstream f(path, std::ios::binary);
  std::uint64_t n = claimed_len ? claimed_len : header.size();
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>((n >> (8 * i)) & 0xff));
  f << header;
  f << std::string(data_bytes, '\0');
  return path;
}

std::string error_of(const std::string& path) {
  try {
    io::SafetensorsFile f(path);
  } catch (const Error& e) {
    std::remove(path.c_str());
    return e.what();
  }
  std::remove(path.c_str());
  return "(no error)";
}

}  // namespace

TEST_CASE("reads the fixture inputs: names, dtypes, shapes, values, metadata") {
  io::SafetensorsFile f(test::fixture("tiny-unet3d/inputs.safetensors"));
  const auto* s = f.find("sample");
  REQUIRE(s != nullptr);
  CHECK(s->dtype == DType::f32);
  CHECK(s->shape == Shape{2, 4, 16, 8, 8});
  const Tensor t = f.tensor("timesteps");
  CHECK(t.dtype == DType::i64);
  CHECK(t.ptr<std::int64_t>()[0] == 900);
  CHECK(t.ptr<std::int64_t>()[1] == 500);
  CHECK(f.tensor("fps").ptr<std::int64_t>()[0] == 24);
  CHECK(f.metadata().at("preset") == "tiny");
  CHECK_THROWS_AS(f.tensor("no_such_tensor"), Error);
}

TEST_CASE("broken safetensors files are rejected with the file and tensor named") {
  CHECK(error_of("/nonexistent/x.safetensors").find("cannot open /nonexistent/x.safetensors") != std::string::npos);
  {
    const std::string path = "/tmp/vinf_test_" + std::to_string(::getpid()) + "_tiny";
    std::ofstream(path, std::ios::binary) << "abc";
    CHECK(error_of(path).find("is not a safetensors file: 3 bytes") != std::string::npos);
  }
  std::string m = error_of(write_file("trunc", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4));
  CHECK(m.find("tensor 'a' data [0, 8) lies outside the 4-byte data section") != std::string::npos);
  m = error_of(write_file("badlen", "{}", 0, 1000));
  CHECK(m.find("header length 1000 runs past the end of the file") != std::string::npos);
  m = error_of(write_file("badjson", "{not json", 0));
  CHECK(m.find("the header is not valid JSON") != std::string::npos);
  m = error_of(write_file("dtype", R"({"a":{"dtype":"C64","shape":[2],"data_offsets":[0,16]}})", 16));
  CHECK(m.find("tensor 'a' has dtype C64, which vinf does not read") != std::string::npos);
  {
    // Bytes (a picture beside the numbers) are kept as bytes: read raw, refused as numbers.
    const io::SafetensorsFile bytes(write_file("u8", R"({"a":{"dtype":"U8","shape":[3],"data_offsets":[0,3]}})", 3));
    CHECK(bytes.find("a")->opaque == "U8");
    CHECK(bytes.raw("a").size() == 3);
    CHECK_THROWS_WITH_AS(bytes.tensor("a"), doctest::Contains("dtype U8, which vinf does not compute with"),
                         InputError);
  }
  m = error_of(write_file("size", R"({"a":{"dtype":"F16","shape":[3],"data_offsets":[0,4]}})", 4));
  CHECK(m.find("tensor 'a' holds 4 bytes but F16[3] needs 6") != std::string::npos);
  m = error_of(write_file("fields", R"({"a":{"dtype":"F16","shape":[3]}})", 0));
  CHECK(m.find("tensor 'a' lacks dtype, shape or data_offsets") != std::string::npos);
}

TEST_CASE("safetensors data offsets must cover the data section without overlap or holes, in any order") {
  auto refused = [](const std::string& name, const std::string& header, std::size_t data_bytes) {
    const std::string path = write_file(name, header, data_bytes);
    std::string what = "(no InputError)";
    try {
      io::SafetensorsFile f(path);
    } catch (const InputError& e) {
      what = e.what();
    }
    std::remove(path.c_str());
    CHECK_MESSAGE(what.find(path) != std::string::npos, what);  // the file is named
    return what;
  };
  auto has = [](const std::string& text, const std::string& part) {
    CHECK_MESSAGE(text.find(part) != std::string::npos, "'", text, "' lacks '", part, "'");
  };
  // Overlap: 'z' comes first in the data, 'a' starts inside it.
  has(refused(
          "overlap",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"z":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
          12),
      "tensors 'z' [0, 8) and 'a' [4, 12) overlap in the data section");
  // Two tensors over the same bytes.
  has(refused(
          "alias",
          R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})",
          8),
      "tensors 'a' [0, 8) and 'b' [0, 8) overlap");
  // Holes: between two tensors, before the first, after the last.
  has(refused(
          "hole",
          R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
          12),
      "bytes [4, 8) of the data section belong to no tensor (a hole between 'a' and 'b')");
  has(refused("lead", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8),
      "bytes [0, 4) of the data section belong to no tensor (a hole before 'a', the first tensor)");
  has(refused("tail", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", 12),
      "bytes [4, 12) at the end of the data section belong to no tensor (after 'a')");
  // The checks that each tensor's own range must pass.
  has(refused("reversed", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[8,4]}})", 8),
      "tensor 'a' has data_offsets [8, 4] that end before they begin");
  has(refused("past-end", R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 12),
      "tensor 'a' data [0, 16) lies outside the 12-byte data section");
  has(refused("size", R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
      "tensor 'a' holds 8 bytes but F32[3] needs 12");
  has(refused("huge", R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", 8),
      "needs more than 2^64");

  // Contiguous in another order than the names, with empty tensors anywhere: read as written.
  const std::string path = write_file(
      "order",
      R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
      R"("e":{"dtype":"F32","shape":[0,3],"data_offsets":[12,12]},"f":{"dtype":"I64","shape":[0],"data_offsets":[0,0]}})",
      12);
  {
    io::SafetensorsFile f(path);
    CHECK(f.entries().size() == 4);
    CHECK(f.find("a")->offset == 4);
    CHECK(f.find("a")->bytes == 8);
    CHECK(f.find("b")->offset == 0);
    CHECK(f.find("e")->shape == Shape{0, 3});
  }
  std::remove(path.c_str());
}
