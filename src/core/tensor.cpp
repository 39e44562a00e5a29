#include "core/tensor.hpp"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"

namespace vinf {

Shape::Shape(std::initializer_list<std::int64_t> dims) {
  for (auto d : dims) push_back(d);
}

std::int64_t Shape::numel() const {
  std::int64_t n = 1;
  for (int i = 0; i < rank_; ++i) n *= dims_[i];
  return n;
}

void Shape::push_back(std::int64_t d) {
  VINF_CHECK(rank_ < kMaxDims, "tensors have at most ", kMaxDims, " dimensions");
  VINF_CHECK(d >= -1, "negative dimension ", d);
  dims_[rank_++] = d;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank_; ++i) {
    if (i) s += ",";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  return a.rank_ == b.rank_ && std::equal(a.begin(), a.end(), b.begin());
}

Tensor Tensor::wrap(void* data, DType dtype, Device device, const Shape& shape) {
  Tensor t;
  t.data = data;
  t.dtype = dtype;
  t.device = device;
  t.shape = shape;
  std::int64_t s = 1;
  for (int i = shape.rank() - 1; i >= 0; --i) {
    VINF_CHECK(shape[i] >= 0, "cannot wrap a tensor of shape ", shape.str());
    t.strides[i] = s;
    s *= shape[i];
  }
  return t;
}

namespace {
int norm_dim(const Tensor& t, int dim) {
  const int d = dim < 0 ? dim + t.rank() : dim;
  VINF_CHECK(d >= 0 && d < t.rank(), "dimension ", dim, " out of range for ", t.describe());
  return d;
}
}  // namespace

std::int64_t Tensor::size(int dim) const { return shape[norm_dim(*this, dim)]; }
std::int64_t Tensor::stride(int dim) const { return strides[norm_dim(*this, dim)]; }

bool Tensor::is_contiguous() const {
  std::int64_t s = 1;
  for (int i = rank() - 1; i >= 0; --i) {
    if (shape[i] != 1 && strides[i] != s) return false;
    s *= shape[i];
  }
  return true;
}

Tensor Tensor::slice(int dim, std::int64_t start, std::int64_t length) const {
  const int d = norm_dim(*this, dim);
  VINF_CHECK(start >= 0 && length >= 0 && start + length <= shape[d], "slice [", start, ", ", start + length,
             ") of dimension ", d, " is out of range for ", describe());
  Tensor t = *this;
  t.shape[d] = length;
  if (length > 0 && data) t.data = static_cast<char*>(data) + start * strides[d] * static_cast<std::int64_t>(dtype_size(dtype));
  return t;
}

Tensor Tensor::every(int dim, std::int64_t start, std::int64_t step, std::int64_t count) const {
  const int d = norm_dim(*this, dim);
  VINF_CHECK(step >= 1 && count >= 0 && start >= 0 && (count == 0 || start + (count - 1) * step < shape[d]),
             "every ", step, " of dimension ", d, " from ", start, ", ", count, " times, is out of range for ",
             describe());
  Tensor t = slice(d, start, count > 0 ? 1 : 0);
  t.shape[d] = count;
  t.strides[d] = strides[d] * step;
  return t;
}

Tensor Tensor::select(int dim, std::int64_t index) const {
  const int d = norm_dim(*this, dim);
  Tensor s = slice(d, index, 1);
  Tensor t = s;
  t.shape = Shape();
  for (int i = 0, j = 0; i < rank(); ++i) {
    if (i == d) continue;
    t.shape.push_back(s.shape[i]);
    t.strides[j++] = s.strides[i];
  }
  return t;
}

Tensor Tensor::permute(std::initializer_list<int> order) const {
  VINF_CHECK(static_cast<int>(order.size()) == rank(), "permute needs ", rank(), " axes, got ", order.size());
  std::array<bool, kMaxDims> seen{};
  Tensor t = *this;
  t.shape = Shape();
  int j = 0;
  for (int axis : order) {
    const int a = norm_dim(*this, axis);
    VINF_CHECK(!seen[a], "permute repeats axis ", a);
    seen[a] = true;
    t.shape.push_back(shape[a]);
    t.strides[j++] = strides[a];
  }
  return t;
}

Tensor Tensor::transpose(int a, int b) const {
  const int x = norm_dim(*this, a), y = norm_dim(*this, b);
  Tensor t = *this;
  std::swap(t.shape[x], t.shape[y]);
  std::swap(t.strides[x], t.strides[y]);
  return t;
}

Tensor Tensor::reshape(const Shape& new_shape) const {
  Shape s = new_shape;
  int infer = -1;
  std::int64_t known = 1;
  for (int i = 0; i < s.rank(); ++i) {
    if (s[i] == -1) {
      VINF_CHECK(infer < 0, "reshape to ", new_shape.str(), " has more than one -1");
      infer = i;
    } else {
      known *= s[i];
    }
  }
  if (infer >= 0) {
    VINF_CHECK(known > 0 && numel() % known == 0, "cannot reshape ", describe(), " to ", new_shape.str());
    s[infer] = numel() / known;
  }
  VINF_CHECK(s.numel() == numel(), "cannot reshape ", describe(), " to ", new_shape.str(), ": element counts differ");
  if (is_contiguous() || numel() == 0) return wrap(data, dtype, device, s);
  // A view: dims that continue each other (each stride the next dim's extent times its stride)
  // form a block that splits and merges freely into new dims of the same element count, which
  // take strides within the block. From the innermost dims out, block by block.
  Tensor t = wrap(data, dtype, device, s);
  int nd = s.rank() - 1;  // the next new dim to give a stride, from the end
  std::int64_t unit = strides[rank() - 1], old_count = 1, new_count = 1;
  for (int d = rank() - 1; d >= 0; --d) {
    old_count *= shape[d];
    if (d > 0 && (shape[d - 1] == 1 || strides[d - 1] == old_count * unit)) continue;  // the block goes on
    while (nd >= 0 && (new_count < old_count || s[nd] == 1)) {
      t.strides[nd] = new_count * unit;
      new_count *= s[nd--];
    }
    VINF_CHECK(new_count == old_count, "cannot reshape the view ", describe(), " to ", s.str(),
               " without a copy (copy it first)");
    if (d > 0) {
      unit = strides[d - 1];
      old_count = new_count = 1;
    }
  }
  return t;
}

Tensor Tensor::expand(const Shape& target) const {
  VINF_CHECK(target.rank() >= rank(), "cannot expand ", describe(), " to ", target.str());
  Tensor t = *this;
  t.shape = target;
  const int lead = target.rank() - rank();
  for (int i = target.rank() - 1; i >= 0; --i) {
    const int src = i - lead;
    if (src < 0) {
      t.strides[i] = 0;
    } else if (shape[src] == target[i]) {
      t.strides[i] = strides[src];
    } else {
      VINF_CHECK(shape[src] == 1, "cannot expand ", describe(), " to ", target.str());
      t.strides[i] = 0;
    }
  }
  return t;
}

Tensor Tensor::unsqueeze(int dim) const {
  const int d = dim < 0 ? dim + rank() + 1 : dim;
  VINF_CHECK(d >= 0 && d <= rank(), "unsqueeze dimension ", dim, " out of range for ", describe());
  Tensor t = *this;
  t.shape = Shape();
  for (int i = 0, j = 0; i <= rank(); ++i) {
    if (i == d) {
      t.shape.push_back(1);
      t.strides[j++] = (d < rank()) ? strides[d] * shape[d] : 1;
    }
    if (i < rank()) {
      t.shape.push_back(shape[i]);
      t.strides[j++] = strides[i];
    }
  }
  return t;
}

Tensor Tensor::coalesced() const {
  Tensor t = *this;
  t.shape = Shape();
  int n = 0;
  std::array<std::int64_t, kMaxDims> sz{}, st{};
  for (int i = 0; i < rank(); ++i) {
    if (shape[i] == 1) continue;  // size-1 dims carry no layout information
    if (n > 0 && st[n - 1] == strides[i] * shape[i]) {
      sz[n - 1] *= shape[i];
      st[n - 1] = strides[i];
    } else {
      sz[n] = shape[i];
      st[n] = strides[i];
      ++n;
    }
  }
  if (n == 0) {  // scalar-like
    sz[0] = 1;
    st[0] = 1;
    n = 1;
  }
  for (int i = 0; i < n; ++i) {
    t.shape.push_back(sz[i]);
    t.strides[i] = st[i];
  }
  return t;
}

void* Tensor::at(std::initializer_list<std::int64_t> index) const {
  std::int64_t off = 0;
  int i = 0;
  for (auto v : index) off += v * strides[i++];
  return static_cast<char*>(data) + off * static_cast<std::int64_t>(dtype_size(dtype));
}

std::string Tensor::describe() const {
  std::string s = std::string(dtype_name(dtype)) + shape.str();
  if (!is_contiguous()) {
    s += "{strides ";
    for (int i = 0; i < rank(); ++i) {
      if (i) s += ',';
      s += std::to_string(strides[i]);
    }
    s += "}";
  }
  return s + " " + device.name();
}

bool same_shape(const Tensor& a, const Tensor& b) { return a.shape == b.shape; }

std::int64_t first_non_finite(const Tensor& t) {
  VINF_CHECK(t.device.is_cpu(), "first_non_finite: the tensor must be on the host, got ", t.describe());
  const std::int64_t n = t.numel();
  // Loaded through memcpy: a tensor mapped from a file need not be aligned (a safetensors header
  // may have any length).
  const auto* bytes = static_cast<const unsigned char*>(t.data);
  const auto scan = [n, bytes](auto mask) -> std::int64_t {
    using Bits = decltype(mask);
    for (std::int64_t i = 0; i < n; ++i) {
      Bits v;
      std::memcpy(&v, bytes + static_cast<std::size_t>(i) * sizeof(Bits), sizeof(Bits));
      if ((v & mask) == mask) return i;  // exponent bits all ones: infinity or NaN
    }
    return -1;
  };
  switch (t.dtype) {
    case DType::f64: return scan(std::uint64_t{0x7FF0000000000000});
    case DType::f32: return scan(std::uint32_t{0x7F800000});
    case DType::f16: return scan(std::uint16_t{0x7C00});
    case DType::bf16: return scan(std::uint16_t{0x7F80});
    default: return -1;
  }
}

void check_rank(const char* op, const char* arg, const Tensor& t, int rank) {
  VINF_CHECK(t.rank() == rank, op, ": ", arg, " must have ", rank, " dimensions, got ", t.describe());
}

void check_dtype(const char* op, const char* arg, const Tensor& t, DType dtype) {
  VINF_CHECK(t.dtype == dtype, op, ": ", arg, " must be ", dtype_name(dtype), ", got ", t.describe());
}

void check_float(const char* op, const char* arg, const Tensor& t) {
  VINF_CHECK(t.dtype == DType::f32 || t.dtype == DType::f16 || t.dtype == DType::bf16, op, ": ", arg,
             " must be f32, f16 or bf16, got ", t.describe());
}

void check_same_shape(const char* op, const char* a_name, const Tensor& a, const char* b_name, const Tensor& b) {
  VINF_CHECK(a.shape == b.shape, op, ": ", a_name, " ", a.describe(), " and ", b_name, " ", b.describe(),
             " must have the same shape");
}

void check_same_device(const char* op, const Tensor& a, const Tensor& b) {
  VINF_CHECK(a.device == b.device, op, ": tensors on different devices (", a.describe(), " and ", b.describe(), ")");
}

}  // namespace vinf
