#include "ops/views.hpp"

#include "core/error.hpp"

namespace vinf::ops::detail {

bool rows_view(const Tensor& t, Tensor& out) {
  if (t.rank() < 1) return false;
  Tensor r = t;
  r.shape = Shape();
  if (t.rank() == 1) {
    r.shape = Shape{1, t.size(0)};
    r.strides[0] = t.size(0) * t.stride(0);
    r.strides[1] = t.stride(0);
    out = r;
    return true;
  }
  // Leading dims (all but the last) must merge into one.
  Tensor lead = t;
  lead.shape = Shape();
  for (int d = 0; d + 1 < t.rank(); ++d) {
    lead.shape.push_back(t.shape[d]);
    lead.strides[d] = t.strides[d];
  }
  const Tensor merged = lead.coalesced();
  if (merged.rank() != 1) return false;
  r.shape = Shape{merged.size(0), t.size(-1)};
  r.strides[0] = merged.strides[0];
  r.strides[1] = t.stride(-1);
  out = r;
  return true;
}

Tensor as_rows(const char* op, const char* arg, const Tensor& t) {
  VINF_CHECK(t.rank() >= 1, op, ": ", arg, " must have at least one dimension");
  Tensor r;
  VINF_CHECK(rows_view(t, r), op, ": the leading dims of ", arg, " ", t.describe(),
             " cannot be viewed as one (copy it to a contiguous tensor first)");
  return r;
}

Tensor as_nc_ts(const char* op, const char* arg, const Tensor& t, const Tensor* other) {
  VINF_CHECK(t.rank() >= 3, op, ": ", arg, " must be (N, C, ...) with at least one trailing dim, got ", t.describe());
  // Merge trailing dims that are contiguous with their outer neighbour, in t and in `other` alike.
  auto mergeable = [&](const Tensor& x, int outer, int inner) {
    return x.strides[outer] == x.strides[inner] * x.shape[inner];
  };
  std::int64_t size[kMaxDims], stride[kMaxDims];
  int innermost[kMaxDims];
  int n = 0;
  for (int d = 2; d < t.rank(); ++d) {
    if (t.shape[d] == 1) continue;
    if (n > 0 && mergeable(t, innermost[n - 1], d) && (!other || mergeable(*other, innermost[n - 1], d))) {
      size[n - 1] *= t.shape[d];
      stride[n - 1] = t.strides[d];
      innermost[n - 1] = d;
    } else {
      size[n] = t.shape[d];
      stride[n] = t.strides[d];
      innermost[n] = d;
      ++n;
    }
  }
  VINF_CHECK(n <= 2, op, ": the trailing dims of ", arg, " ", t.describe(),
             " do not merge into (frames, pixels); copy it to a contiguous tensor first");
  Tensor r = t;
  r.shape = Shape{t.size(0), t.size(1), n == 2 ? size[0] : 1, n >= 1 ? size[n - 1] : 1};
  r.strides[0] = t.stride(0);
  r.strides[1] = t.stride(1);
  r.strides[2] = n == 2 ? stride[0] : 0;
  r.strides[3] = n >= 1 ? stride[n - 1] : 1;
  return r;
}

}  // namespace vinf::ops::detail
