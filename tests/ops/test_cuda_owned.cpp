// cuda::Owned, the owner of cuDNN/cuBLAS/CUDA handles, on a fake create/destroy pair that counts
// its calls: an object built from several handles frees the ones it made when a later step throws,
// and each handle is destroyed exactly once through moves, resets and releases. Header-only, so
// this runs in every build, GPU or not.
#include <doctest/doctest.h>

#include <set>
#include <stdexcept>
#include <utility>

#include "cuda/owned.hpp"

namespace {

struct FakeObject {
  int id;
};
using FakeHandle = FakeObject*;

int created = 0;
std::multiset<int> destroyed;

// Like cudnnCreateTensorDescriptor: writes a handle, returns a status (0 = success); `fail` makes
// it fail the way a library does, leaving the output untouched.
int fake_create(FakeHandle* out, bool fail = false) {
  if (fail) return 1;
  *out = new FakeObject{++created};
  return 0;
}

int fake_destroy(FakeHandle h) {
  destroyed.insert(h->id);
  delete h;
  return 0;
}

using Fake = vinf::cuda::Owned<FakeHandle, fake_destroy>;

void check(int status) {
  if (status != 0) throw std::runtime_error("create failed");
}

// Shaped like CudaContext or the convolution's descriptors: members made one after another in
// the constructor, the third of which may fail.
struct ThreeHandles {
  Fake a, b, c;
  explicit ThreeHandles(bool third_fails) {
    check(fake_create(a.put()));
    check(fake_create(b.put()));
    check(fake_create(c.put(), third_fails));
  }
};

void reset_counts() {
  created = 0;
  destroyed.clear();
}

}  // namespace

TEST_CASE("cuda::Owned: a constructor that throws halfway frees the handles it had made") {
  reset_counts();
  CHECK_THROWS_AS(ThreeHandles(true), std::runtime_error);
  CHECK(created == 2);
  CHECK(destroyed == std::multiset<int>{1, 2});

  reset_counts();
  { ThreeHandles ok(false); }
  CHECK(created == 3);
  CHECK(destroyed == std::multiset<int>{1, 2, 3});
}

TEST_CASE("cuda::Owned: every handle is destroyed exactly once through moves, put, reset and release") {
  reset_counts();
  {
    Fake empty;
    CHECK_FALSE(empty);
    CHECK(empty.get() == nullptr);
  }
  CHECK(destroyed.empty());  // a null handle is never passed to destroy

  {
    Fake a;
    check(fake_create(a.put()));
    REQUIRE(a);
    Fake b(std::move(a));
    CHECK_FALSE(a);
    CHECK(b.get()->id == 1);
    Fake c;
    check(fake_create(c.put()));
    c = std::move(b);  // c's own handle (2) goes, it takes 1
    CHECK(destroyed == std::multiset<int>{2});
    CHECK(c.get()->id == 1);
    check(fake_create(c.put()));  // put frees 1 before the new handle 3 is written
    CHECK(destroyed == std::multiset<int>{1, 2});
    Fake& self = c;
    c = std::move(self);  // self-move keeps the handle
    CHECK(c.get()->id == 3);
  }
  CHECK(destroyed == std::multiset<int>{1, 2, 3});

  reset_counts();
  FakeHandle kept = nullptr;
  {
    Fake a;
    check(fake_create(a.put()));
    kept = a.release();
    CHECK_FALSE(a);
  }
  CHECK(destroyed.empty());  // released: the caller owns it now
  {
    Fake adopt(kept);
    Fake failed;
    CHECK_THROWS(check(fake_create(failed.put(), true)));
    CHECK_FALSE(failed);
    adopt.reset();
    CHECK(destroyed == std::multiset<int>{1});
    CHECK_FALSE(adopt);
  }
  CHECK(destroyed == std::multiset<int>{1});
}
