// tests/unit/backend/cpu_graph_ops_test.cpp — the small graph ops that keep model math off the
// host (embed, add, hc_mean, argmax, get_rows) against their definitions, through backend buffers.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "backend/backend.h"
#include "core/reduce.h"
#include "quant/quant.h"

namespace ds4::backend {
namespace {

std::vector<float> randv(size_t n, uint32_t seed) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-3.0f, 3.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

template <typename T>
Array<T> upload(Backend& be, const std::vector<T>& v) {
  Array<T> a(be, v.size());
  be.upload(a.data(), v.data(), a.bytes());
  return a;
}

template <typename T>
std::vector<T> download(Backend& be, const Array<T>& a) {
  std::vector<T> v(a.size());
  be.download(v.data(), a.data(), a.bytes());
  return v;
}

TEST(CpuGraphOps, EmbedCopiesTheF16RowIntoEveryStream) {
  auto be = make_cpu_backend(2);
  const int V = 11, E = 40, nhc = 4;
  std::vector<uint16_t> table(static_cast<size_t>(V) * E);
  const auto vals = randv(table.size(), 1);
  for (size_t i = 0; i < table.size(); ++i) table[i] = quant::f32_to_f16(vals[i]);
  const std::vector<int32_t> toks = {3, 0, 10, 3, 7};
  const Array<uint16_t> t = upload(*be, table);
  const Array<int32_t> ids = upload(*be, toks);
  Array<float> out(*be, toks.size() * nhc * E);
  EmbedParams p;
  p.table = reinterpret_cast<const uint8_t*>(t.data());
  p.row_bytes = E * sizeof(uint16_t);
  p.tokens = ids.data();
  p.n_rows = static_cast<int>(toks.size());
  p.n_hc = nhc;
  p.n_embd = E;
  p.out = out.data();
  be->embed(p);
  const auto x = download(*be, out);
  for (size_t i = 0; i < toks.size(); ++i)
    for (int h = 0; h < nhc; ++h)
      for (int d = 0; d < E; ++d)
        ASSERT_EQ(x[(i * nhc + h) * E + d], quant::f16_to_f32(table[toks[i] * E + d])) << i << " " << h << " " << d;
}

TEST(CpuGraphOps, AddIsElementwiseAndMayAlias) {
  auto be = make_cpu_backend(2);
  const size_t n = 100000;  // above the inline threshold: split over the pool
  const auto a = randv(n, 2), b = randv(n, 3);
  Array<float> da = upload(*be, a);
  const Array<float> db = upload(*be, b);
  AddParams p{da.data(), db.data(), da.data(), static_cast<int64_t>(n)};
  be->add(p);
  const auto out = download(*be, da);
  for (size_t k = 0; k < n; ++k) ASSERT_EQ(out[k], a[k] + b[k]) << k;
}

TEST(CpuGraphOps, HcMeanSumsStreamsInOrderThenScales) {
  auto be = make_cpu_backend(2);
  const int E = 33, nhc = 4, rows = 3;
  const int64_t stride = 2 * E;  // two captured layers per row; this one writes the second
  const auto x = randv(static_cast<size_t>(rows) * nhc * E, 4);
  const Array<float> dx = upload(*be, x);
  Array<float> out(*be, rows * stride);
  HcMeanParams p;
  p.x = dx.data();
  p.n_hc = nhc;
  p.n_embd = E;
  p.n_rows = rows;
  p.out = out.data() + E;
  p.out_stride = stride;
  be->hc_mean(p);
  const auto y = download(*be, out);
  for (int i = 0; i < rows; ++i) {
    for (int d = 0; d < E; ++d) {
      const float* r = x.data() + static_cast<size_t>(i) * nhc * E;
      const float want = (((r[d] + r[E + d]) + r[2 * E + d]) + r[3 * E + d]) * (1.0f / 4.0f);
      ASSERT_EQ(y[i * stride + E + d], want);
      ASSERT_EQ(y[i * stride + d], 0.0f);  // the other layer's slot is untouched
    }
  }
}

TEST(CpuGraphOps, ArgmaxEqualsTopTwoPerRow) {
  auto be = make_cpu_backend(1);
  const int V = 257, rows = 4;
  auto x = randv(static_cast<size_t>(rows) * V, 5);
  x[1 * V + 17] = 50.0f;
  x[1 * V + 200] = 50.0f;  // tie: the smaller id wins
  x[2 * V + 3] = std::numeric_limits<float>::quiet_NaN();
  const Array<float> dx = upload(*be, x);
  Array<int32_t> ids(*be, rows);
  ArgmaxParams p{dx.data(), V, V, rows, ids.data()};
  be->argmax(p);
  const auto got = download(*be, ids);
  for (int i = 0; i < rows; ++i) {
    EXPECT_EQ(got[i], top_two(std::span<const float>(x.data() + i * V, V)).id) << i;
  }
  EXPECT_EQ(got[1], 17);
}

// get_rows gives, per id, exactly quant::dequantize_row of that weight row, for every weight
// type the drafter's Markov W1 can have, on 1 and 4 threads alike (rows split over threads).
TEST(CpuGraphOps, GetRowsEqualsDequantizeRowForEveryTypeAndThreadCount) {
  const int64_t n_in = 256, n_out = 37;
  const std::vector<int32_t> ids = {5, 0, 36, 5, 17, 1, 30, 2, 9};
  const int rows = static_cast<int>(ids.size());
  const auto src = randv(static_cast<size_t>(n_in * n_out), 11);
  for (GgmlType t : {GgmlType::kF32, GgmlType::kF16, GgmlType::kQ8_0, GgmlType::kQ4_K}) {
    const size_t rb = static_cast<size_t>(n_in / gguf::type_block_elems(t)) * gguf::type_block_bytes(t);
    std::vector<uint8_t> w(rb * n_out);
    for (int64_t o = 0; o < n_out; ++o) {
      if (t == GgmlType::kF32) {
        std::memcpy(w.data() + o * rb, src.data() + o * n_in, rb);
      } else if (t == GgmlType::kF16) {
        auto* h = reinterpret_cast<uint16_t*>(w.data() + o * rb);
        for (int64_t k = 0; k < n_in; ++k) h[k] = quant::f32_to_f16(src[o * n_in + k]);
      } else {
        quant::quantize_row(t, src.data() + o * n_in, w.data() + o * rb, n_in);
      }
    }
    std::vector<float> want(static_cast<size_t>(rows) * n_in);
    for (int i = 0; i < rows; ++i) {
      quant::dequantize_row(t, w.data() + static_cast<size_t>(ids[i]) * rb, want.data() + i * n_in, n_in);
    }
    for (int threads : {1, 4}) {
      auto be = make_cpu_backend(threads);
      const Array<uint8_t> dw = upload(*be, w);
      const Array<int32_t> did = upload(*be, ids);
      Array<float> out(*be, static_cast<size_t>(rows) * (n_in + 3));
      GetRowsParams p;
      p.w = Matrix{dw.data(), t, n_in, n_out, rb};
      p.ids = did.data();
      p.n_rows = rows;
      p.out = out.data();
      p.out_stride = n_in + 3;
      be->get_rows(p);
      const auto got = download(*be, out);
      for (int i = 0; i < rows; ++i) {
        EXPECT_EQ(0, std::memcmp(got.data() + i * (n_in + 3), want.data() + i * n_in, sizeof(float) * n_in))
            << gguf::type_name(t) << " row " << i << " threads " << threads;
        EXPECT_EQ(got[i * (n_in + 3) + n_in], 0.0f);  // the stride gap is not written
      }
    }
  }
}

}  // namespace
}  // namespace ds4::backend
