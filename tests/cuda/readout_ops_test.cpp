// tests/cuda/readout_ops_test.cpp — the sampling and DSpark read-outs on the device against the
// CPU backend, bit for bit: the top_k op (backend TopKParams: ids and value bits, the order
// included) and the argmax op with a margin (ArgmaxParams::margin, DSpark's verify rows).
//
// Rows are drawn at the tiny vocabulary (8192), DS4 Flash's (129280) and small odd lengths,
// with the cases that decide an exact selection: long runs of equal values (the k-th value
// tied across the cut), +0 / -0 mixed, NaN, ±inf, all-NaN and all -inf rows, fewer qualifying
// values than k, and excluded ids (none, 0, the row's maximum). Row strides are not multiples
// of 4 for some cases (unaligned rows). Without a usable GPU these tests skip.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/ops.h"
#include "tests/cuda/device_buf.h"

namespace ds4::cuda {
namespace {

using test_util::bit_mismatches;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// Row k of `rows` rows of n values, `stride` apart, each a different hard case.
std::vector<float> hard_rows(int64_t n, int64_t stride, int rows, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(rows * stride), 0.0f);
  for (int k = 0; k < rows; ++k) {
    float* r = x.data() + k * stride;
    for (int64_t i = 0; i < n; ++i) r[i] = g(rng);
    const int64_t a = static_cast<int64_t>(rng() % n), b = static_cast<int64_t>(rng() % n);
    switch (k % 9) {
      case 1:  // coarse values: thousands of ties at every rank
        for (int64_t i = 0; i < n; ++i) r[i] = std::round(r[i]);
        break;
      case 2:  // +0 / -0 and a few large equal values
        for (int64_t i = 0; i < n; ++i) r[i] = (rng() % 3 == 0) ? ((rng() & 1) ? 0.0f : -0.0f) : -std::fabs(r[i]);
        r[a] = 7.0f, r[b] = 7.0f;
        break;
      case 3:
        for (int64_t i = 0; i < n; i += 3) r[i] = kNaN;
        r[a] = kInf, r[b] = -kInf;
        break;
      case 4:
        for (int64_t i = 0; i < n; ++i) r[i] = kNaN;
        break;
      case 5:
        for (int64_t i = 0; i < n; ++i) r[i] = -kInf;
        break;
      case 6:  // fewer qualifying values than most k
        for (int64_t i = 0; i < n; ++i) r[i] = (i % 97 == 5) ? g(rng) : kNaN;
        break;
      case 7:  // every value equal
        for (int64_t i = 0; i < n; ++i) r[i] = 1.5f;
        break;
      case 8:  // a bimodal row: the cut falls inside a block of equal values
        for (int64_t i = 0; i < n; ++i) r[i] = (rng() % 50 == 0) ? 4.0f : std::round(r[i] * 4.0f) / 4.0f - 5.0f;
        break;
      default:
        break;
    }
  }
  return x;
}

class ReadoutOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = probe_device(0, &info_);
    if (!s.ok()) GTEST_SKIP() << "no usable CUDA device: " << s.message();
    cpu_ = backend::make_cpu_backend(2);
  }
  void sync() {
    const Status s = synchronize();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  DeviceInfo info_;
  std::unique_ptr<backend::Backend> cpu_;
};

template <typename T>
std::vector<T> filled(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0x5a, n * sizeof(T));
  return v;
}

TEST_F(ReadoutOps, TopKEqualsCpuBitForBit) {
  const int rows = 9;
  for (int64_t n : {int64_t{1}, int64_t{5}, int64_t{300}, int64_t{8192}, int64_t{129280}}) {
    for (int64_t stride : {n, n + 3}) {
      const std::vector<float> xv = hard_rows(n, stride, rows, static_cast<uint32_t>(n + stride));
      auto dx = test_util::to_device(xv);
      const int32_t top0 = static_cast<int32_t>(std::max_element(xv.begin(), xv.begin() + n) - xv.begin());
      for (int k : {1, 2, 7, 64, 256}) {
        for (int32_t excluded : {-1, 0, top0}) {
          const std::string what = "top_k n=" + std::to_string(n) + " stride=" + std::to_string(stride) +
                                   " k=" + std::to_string(k) + " excluded=" + std::to_string(excluded);
          std::vector<int32_t> ids = filled<int32_t>(static_cast<size_t>(rows * k));
          std::vector<float> vals = filled<float>(static_cast<size_t>(rows * k));
          auto di = test_util::to_device(ids);
          auto dv = test_util::to_device(vals);
          backend::TopKParams p{xv.data(), n, stride, rows, k, excluded, ids.data(), vals.data()};
          cpu_->top_k(p);
          backend::TopKParams g = p;
          g.x = dx->as<float>(), g.ids = di->as<int32_t>(), g.values = dv->as<float>();
          const Status st = top_k(g, nullptr);
          ASSERT_TRUE(st.ok()) << st.to_string();
          sync();
          const auto got_ids = di->get_vec<int32_t>(ids.size());
          const auto got_vals = dv->get_vec<float>(vals.size());
          size_t bad = 0;
          for (size_t i = 0; i < ids.size(); ++i) {
            if (got_ids[i] != ids[i] && bad++ < 5) {
              ADD_FAILURE() << what << " id [" << i / k << "][" << i % k << "]: gpu " << got_ids[i] << " cpu "
                            << ids[i];
            }
          }
          EXPECT_EQ(0u, bad) << what;
          EXPECT_EQ(0u, bit_mismatches(got_vals.data(), vals.data(), vals.size(), what)) << what;
          if (bad != 0) return;
        }
      }
    }
  }
}

TEST_F(ReadoutOps, ArgmaxWithMarginEqualsCpu) {
  const int rows = 9;
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{8192}, int64_t{129280}}) {
    const int64_t stride = n + 1;
    const std::vector<float> xv = hard_rows(n, stride, rows, static_cast<uint32_t>(3 * n + 1));
    auto dx = test_util::to_device(xv);
    const int32_t top0 = static_cast<int32_t>(std::max_element(xv.begin(), xv.begin() + n) - xv.begin());
    for (int32_t excluded : {-1, 0, top0}) {
      const std::string what = "argmax+margin n=" + std::to_string(n) + " excluded=" + std::to_string(excluded);
      std::vector<int32_t> ids = filled<int32_t>(rows);
      std::vector<float> margins = filled<float>(rows);
      auto di = test_util::to_device(ids);
      auto dm = test_util::to_device(margins);
      backend::ArgmaxParams p{xv.data(), n, stride, rows, ids.data(), excluded, margins.data()};
      cpu_->argmax(p);
      backend::ArgmaxParams g = p;
      g.x = dx->as<float>(), g.out = di->as<int32_t>(), g.margin = dm->as<float>();
      const Status st = argmax(g, nullptr);
      ASSERT_TRUE(st.ok()) << st.to_string();
      sync();
      EXPECT_EQ(ids, di->get_vec<int32_t>(rows)) << what;
      const auto got = dm->get_vec<float>(rows);
      // NaN margins (a row whose maximum is -inf) compare by NaN-ness; the rest by bits.
      for (int r = 0; r < rows; ++r) {
        if (std::isnan(margins[r])) {
          EXPECT_TRUE(std::isnan(got[r])) << what << " row " << r;
        } else {
          EXPECT_EQ(0u, bit_mismatches(&got[r], &margins[r], 1, what)) << what << " row " << r;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ds4::cuda
