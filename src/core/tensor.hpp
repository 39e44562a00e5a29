// The one tensor type: a small non-owning view (data pointer, dtype, device, shape, int64 element
// strides). Memory is owned elsewhere (an Arena, a mapped file, a caller's vector). Views such as
// slice, permute, reshape and expand never copy.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/dtype.hpp"

namespace vinf {

constexpr int kMaxDims = 6;

class Shape {
 public:
  Shape() = default;
  Shape(std::initializer_list<std::int64_t> dims);
  template <class It>
  Shape(It first, It last) {
    for (; first != last; ++first) push_back(*first);
  }

  int rank() const { return rank_; }
  std::int64_t operator[](int i) const { return dims_[i]; }
  std::int64_t& operator[](int i) { return dims_[i]; }
  std::int64_t numel() const;
  void push_back(std::int64_t d);
  const std::int64_t* begin() const { return dims_.data(); }
  const std::int64_t* end() const { return dims_.data() + rank_; }
  std::string str() const;  // "[2,4,16,8,8]"
  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<std::int64_t, kMaxDims> dims_{};
  int rank_ = 0;
};

struct Tensor {
  void* data = nullptr;
  DType dtype = DType::f32;
  Device device{};
  Shape shape;
  std::array<std::int64_t, kMaxDims> strides{};  // in elements; 0 means broadcast

  // A contiguous (row-major) view of existing memory.
  static Tensor wrap(void* data, DType dtype, Device device, const Shape& shape);

  int rank() const { return shape.rank(); }
  std::int64_t size(int dim) const;    // negative dims count from the end
  std::int64_t stride(int dim) const;
  std::int64_t numel() const { return shape.numel(); }
  std::size_t nbytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  bool empty() const { return numel() == 0; }
  bool is_contiguous() const;

  // Views.
  Tensor slice(int dim, std::int64_t start, std::int64_t length) const;
  Tensor select(int dim, std::int64_t index) const;  // drops the dimension
  // Indices start, start + step, ... (count of them) of dim, step >= 1.
  Tensor every(int dim, std::int64_t start, std::int64_t step, std::int64_t count) const;
  Tensor permute(std::initializer_list<int> order) const;
  Tensor transpose(int a, int b) const;
  Tensor reshape(const Shape& shape) const;  // contiguous tensors only (any -1 is inferred)
  Tensor expand(const Shape& shape) const;   // broadcast size-1 dims with stride 0
  Tensor unsqueeze(int dim) const;
  // Merges adjacent dimensions whose memory is contiguous with each other; keeps numel.
  Tensor coalesced() const;

  template <class T>
  T* ptr() const { return static_cast<T*>(data); }
  // Address of the element at a multi-index (no bounds check).
  void* at(std::initializer_list<std::int64_t> index) const;

  std::string describe() const;  // "f32[2,4,16] cpu"
};

bool same_shape(const Tensor& a, const Tensor& b);
// The index of the first NaN or infinity in a host tensor of a floating dtype, or -1 (always -1 for
// integer dtypes). Bit tests: the same answer for f64, f32, f16 and bf16 without converting.
std::int64_t first_non_finite(const Tensor& t);

// Shape and dtype checks for op entry points; they name the op and the argument in the message.
void check_rank(const char* op, const char* arg, const Tensor& t, int rank);
void check_dtype(const char* op, const char* arg, const Tensor& t, DType dtype);
void check_float(const char* op, const char* arg, const Tensor& t);
void check_same_shape(const char* op, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b);
void check_same_device(const char* op, const Tensor& a, const Tensor& b);

}  // namespace vinf
