// tests/cuda/device_buf.h — device-buffer and bit-comparison helpers shared by the CUDA tests.
//
// Role: DeviceBuf owns one device allocation (failures are test failures, never aborts),
// to_device copies a host vector up, bit_mismatches compares float outputs bit for bit.
// Invariants: two NaNs compare equal whatever their payload and sign (x86 produces
// 0xffc00000, the GPU 0x7fffffff; no caller reads a NaN's bits); every other difference,
// -0 vs +0 included, is a mismatch and the first few are reported with both values.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "backend/cuda/cuda_kernels.h"

namespace ds4::cuda::test_util {

class DeviceBuf {
 public:
  explicit DeviceBuf(size_t bytes) : bytes_(bytes) {
    const Status s = device_alloc(&p_, bytes);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  ~DeviceBuf() { device_free(p_); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  void* data() const { return p_; }
  size_t bytes() const { return bytes_; }
  void put(const void* src, size_t n) const {
    const Status s = upload(p_, src, n);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  void get(void* dst, size_t n) const {
    const Status s = download(dst, p_, n);
    EXPECT_TRUE(s.ok()) << s.to_string();
  }
  template <typename T>
  std::vector<T> get_vec(size_t count) const {
    std::vector<T> v(count);
    get(v.data(), count * sizeof(T));
    return v;
  }
  void poison() const {
    std::vector<uint8_t> junk(bytes_, 0xff);  // f32 0xffffffff is a NaN
    put(junk.data(), bytes_);
  }

 private:
  void* p_ = nullptr;
  size_t bytes_;
};

template <typename T>
std::unique_ptr<DeviceBuf> to_device(const std::vector<T>& v) {
  auto b = std::make_unique<DeviceBuf>(v.size() * sizeof(T) + (v.empty() ? 1 : 0));
  if (!v.empty()) b->put(v.data(), v.size() * sizeof(T));
  return b;
}

// Count of elements whose bits differ; reports the first few (what [index]: gpu vs cpu).
inline size_t bit_mismatches(const float* got, const float* want, size_t n, const std::string& what) {
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    uint32_t a, b;
    std::memcpy(&a, got + i, 4);
    std::memcpy(&b, want + i, 4);
    if (a != b && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      if (bad < 5)
        ADD_FAILURE() << what << " [" << i << "]: gpu " << got[i] << " (0x" << std::hex << a
                      << ") cpu " << want[i] << " (0x" << b << std::dec << ")";
      ++bad;
    }
  }
  return bad;
}

}  // namespace ds4::cuda::test_util
