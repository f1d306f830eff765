// tests/kernels/cpu_kernels_test.cpp — backend/cpu kernels == quant reference dots, bitwise.
//
// For every weight type, several shapes (tails not multiple of 16, n_out not multiple of the
// chunk grain, padded row / activation / output strides), every ISA this CPU supports,
// thread counts 1, 2, 3 and r = 1..8 (plus 11, more than one tile): each y[k][o] must have
// exactly the bits of quant::dot_<type>(weight row o, activation row k). Bytes outside the
// output rows must stay untouched.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/threadpool.h"
#include "quant/quant.h"

namespace ds4::backend::cpu {
namespace {

using gguf::GgmlType;
using quant::BlockQ8_0Act;
using quant::BlockQ8K;

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512})
    if (isa_supported(isa)) out.push_back(isa);
  return out;
}

// Restores the detected ISA after a test that forces one.
struct IsaGuard {
  ~IsaGuard() { set_isa(detect_isa()); }
};

enum class Kind { kF32, kF16, kBF16, kQ8_0, kIQ2_XXS, kQ2_K, kQ4_K };
enum class Act { kF32, kQ8_0, kQ8K };

struct TypeCase {
  const char* name;
  Kind kind;
  GgmlType ggml;
  Act act;
  int block;  // elements per weight block (and activation block)
};

const TypeCase kTypes[] = {
    {"f32", Kind::kF32, GgmlType::kF32, Act::kF32, 1},
    {"f16", Kind::kF16, GgmlType::kF16, Act::kF32, 1},
    {"bf16", Kind::kBF16, GgmlType::kBF16, Act::kF32, 1},
    {"q8_0", Kind::kQ8_0, GgmlType::kQ8_0, Act::kQ8_0, 32},
    {"iq2_xxs", Kind::kIQ2_XXS, GgmlType::kIQ2_XXS, Act::kQ8K, 256},
    {"q2_k", Kind::kQ2_K, GgmlType::kQ2_K, Act::kQ8K, 256},
    {"q4_k", Kind::kQ4_K, GgmlType::kQ4_K, Act::kQ8K, 256},
};

struct Shape {
  int64_t n_cols;
  int64_t n_out;
};

std::vector<Shape> shapes_for(const TypeCase& t) {
  // Dense: tails of every size class of the 64-lane order (0, 7, 44, 63) and rows shorter than
  // one lane chunk.
  if (t.block == 1) return {{16, 5}, {40, 7}, {263, 13}, {300, 77}, {1, 3}, {15, 2}, {127, 9}, {512, 6}};
  // 4128 = 129 blocks: crosses the kernels' 128-block column chunk.
  if (t.block == 32) return {{32, 3}, {96, 9}, {416, 37}, {1024, 100}, {4128, 19}, {4128, 21}};
  return {{256, 3}, {512, 11}, {768, 40}, {1024, 130}};
}

size_t act_elem_bytes(Act a) {
  switch (a) {
    case Act::kF32: return sizeof(float);
    case Act::kQ8_0: return sizeof(BlockQ8_0Act);
    case Act::kQ8K: return sizeof(BlockQ8K);
  }
  return 0;
}

// Fills one activation row of n_cols elements (n_cols/block act elements).
void fill_act(Act a, uint8_t* dst, int64_t n_cols, std::mt19937& rng, bool allow_min) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::uniform_int_distribution<int> q(allow_min ? -128 : -127, 127);
  if (a == Act::kF32) {
    float* x = reinterpret_cast<float*>(dst);
    for (int64_t i = 0; i < n_cols; ++i) x[i] = g(rng) * (i % 7 == 0 ? 100.0f : 1.0f);
    if (n_cols > 3) {
      x[1] = -0.0f;
      x[2] = 1e-40f;  // subnormal
    }
  } else if (a == Act::kQ8_0) {
    BlockQ8_0Act* x = reinterpret_cast<BlockQ8_0Act*>(dst);
    for (int64_t b = 0; b < n_cols / 32; ++b) {
      x[b].d = std::fabs(g(rng)) * 0.01f + 1e-6f;
      for (int i = 0; i < 32; ++i) x[b].qs[i] = static_cast<int8_t>(q(rng));
    }
    if (allow_min) x[0].qs[5] = -128;
  } else {
    BlockQ8K* x = reinterpret_cast<BlockQ8K*>(dst);
    for (int64_t b = 0; b < n_cols / 256; ++b) {
      x[b].d = g(rng) * 0.01f;
      for (int i = 0; i < 256; ++i) x[b].qs[i] = static_cast<int8_t>(q(rng));
      if (allow_min) x[b].qs[7] = -128;
      for (int j = 0; j < 16; ++j) {
        int s = 0;
        for (int i = 0; i < 16; ++i) s += x[b].qs[16 * j + i];
        x[b].bsums[j] = static_cast<int16_t>(s);
      }
    }
  }
}

float reference(const TypeCase& t, const uint8_t* w, const uint8_t* x, int64_t n_cols) {
  switch (t.kind) {
    case Kind::kF32:
      return quant::dot_f32(reinterpret_cast<const float*>(w), reinterpret_cast<const float*>(x), n_cols);
    case Kind::kF16:
      return quant::dot_f16(reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const float*>(x), n_cols);
    case Kind::kBF16:
      return quant::dot_bf16(reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const float*>(x), n_cols);
    case Kind::kQ8_0:
      return quant::dot_q8_0(reinterpret_cast<const quant::BlockQ8_0*>(w),
                             reinterpret_cast<const BlockQ8_0Act*>(x), n_cols / 32);
    case Kind::kIQ2_XXS:
      return quant::dot_iq2_xxs_q8_k(reinterpret_cast<const quant::BlockIQ2XXS*>(w),
                                     reinterpret_cast<const BlockQ8K*>(x), n_cols / 256);
    case Kind::kQ2_K:
      return quant::dot_q2_k_q8_k(reinterpret_cast<const quant::BlockQ2K*>(w),
                                  reinterpret_cast<const BlockQ8K*>(x), n_cols / 256);
    case Kind::kQ4_K:
      return quant::dot_q4_k_q8_k(reinterpret_cast<const quant::BlockQ4K*>(w),
                                  reinterpret_cast<const BlockQ8K*>(x), n_cols / 256);
  }
  return 0.0f;
}

void run_matmul(const TypeCase& t, const TensorRows& w, const uint8_t* x, int r, float* y,
                int64_t n_out, ThreadPool* pool, int64_t xs, int64_t ys) {
  switch (t.kind) {
    case Kind::kF32: matmul_f32(w, reinterpret_cast<const float*>(x), r, y, n_out, pool, xs, ys); break;
    case Kind::kF16: matmul_f16(w, reinterpret_cast<const float*>(x), r, y, n_out, pool, xs, ys); break;
    case Kind::kBF16: matmul_bf16(w, reinterpret_cast<const float*>(x), r, y, n_out, pool, xs, ys); break;
    case Kind::kQ8_0:
      matmul_q8_0(w, reinterpret_cast<const BlockQ8_0Act*>(x), r, y, n_out, pool, xs, ys);
      break;
    case Kind::kIQ2_XXS:
      matmul_iq2_xxs(w, reinterpret_cast<const BlockQ8K*>(x), r, y, n_out, pool, xs, ys);
      break;
    case Kind::kQ2_K:
      matmul_q2_k(w, reinterpret_cast<const BlockQ8K*>(x), r, y, n_out, pool, xs, ys);
      break;
    case Kind::kQ4_K:
      matmul_q4_k(w, reinterpret_cast<const BlockQ8K*>(x), r, y, n_out, pool, xs, ys);
      break;
  }
}

constexpr int kRowCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 11};
constexpr int kMaxR = 11;

class KernelsVsReference : public ::testing::TestWithParam<int> {};

TEST_P(KernelsVsReference, BitwiseEqualForEveryIsaThreadCountAndR) {
  const TypeCase& t = kTypes[GetParam()];
  IsaGuard guard;
  const std::vector<Isa> isas = supported_isas();
  ASSERT_FALSE(isas.empty());
  std::mt19937 rng(1234u + static_cast<unsigned>(GetParam()));
  ThreadPool pools[3] = {ThreadPool(1), ThreadPool(2), ThreadPool(3)};
  int shape_index = 0;
  for (const Shape& s : shapes_for(t)) {
    const bool padded = shape_index % 2 == 1;        // odd shapes: padded strides
    const bool allow_min = shape_index % 2 == 0;     // even shapes: -128 activation quants
    ++shape_index;
    // Weights: n_out rows (optionally padded by 64 bytes each).
    const size_t packed = quant::row_bytes(t.ggml, s.n_cols);
    const int64_t row_bytes = static_cast<int64_t>(packed) + (padded ? 64 : 0);
    std::vector<uint8_t> wbuf(static_cast<size_t>(row_bytes * s.n_out) + 64, 0xAB);
    for (int64_t o = 0; o < s.n_out; ++o)
      quant::fill_random_blocks(t.ggml, wbuf.data() + o * row_bytes, s.n_cols, 0.5f,
                                9000u + static_cast<uint64_t>(o) * 31u + static_cast<uint64_t>(s.n_cols));
    if (t.kind == Kind::kQ8_0) {  // the format allows -128 weight quants; cover them
      for (int64_t o = 0; o < s.n_out; o += 3)
        reinterpret_cast<quant::BlockQ8_0*>(wbuf.data() + o * row_bytes)[0].qs[3] = -128;
    }
    if (t.kind == Kind::kF16 && s.n_cols >= 8) {  // special f16 values: -0, subnormals, max
      uint16_t* w0 = reinterpret_cast<uint16_t*>(wbuf.data());
      w0[0] = 0x8000;
      w0[1] = 0x0001;
      w0[2] = 0x03ff;
      w0[3] = 0x7bff;
    }
    const TensorRows w{wbuf.data(), row_bytes, s.n_cols};
    // Activations: kMaxR rows, stride = packed (+1 element when padded).
    const int64_t act_elems = s.n_cols / t.block + (padded ? 1 : 0);
    const size_t act_row_bytes = static_cast<size_t>(act_elems) * act_elem_bytes(t.act);
    std::vector<uint8_t> xbuf(act_row_bytes * kMaxR);
    for (int k = 0; k < kMaxR; ++k) fill_act(t.act, xbuf.data() + k * act_row_bytes, s.n_cols, rng, allow_min);
    // Reference.
    std::vector<float> ref(static_cast<size_t>(kMaxR * s.n_out));
    for (int k = 0; k < kMaxR; ++k)
      for (int64_t o = 0; o < s.n_out; ++o)
        ref[static_cast<size_t>(k * s.n_out + o)] =
            reference(t, wbuf.data() + o * row_bytes, xbuf.data() + k * act_row_bytes, s.n_cols);
    const int64_t ys = s.n_out + (padded ? 3 : 0);
    for (Isa isa : isas) {
      ASSERT_TRUE(set_isa(isa));
      for (ThreadPool& pool : pools) {
        for (int r : kRowCounts) {
          const float sentinel = -12345.5f;
          std::vector<float> y(static_cast<size_t>(ys * kMaxR), sentinel);
          run_matmul(t, w, xbuf.data(), r, y.data(), s.n_out, &pool, padded ? act_elems : 0,
                     padded ? ys : 0);
          int mismatches = 0;
          for (int k = 0; k < kMaxR; ++k) {
            for (int64_t o = 0; o < ys; ++o) {
              const float got = y[static_cast<size_t>(k * ys + o)];
              const bool written = k < r && o < s.n_out;
              const float want = written ? ref[static_cast<size_t>(k * s.n_out + o)] : sentinel;
              if (bits(got) != bits(want) && mismatches++ < 3) {
                ADD_FAILURE() << t.name << " isa=" << isa_name(isa) << " threads=" << pool.n_threads()
                              << " n_cols=" << s.n_cols << " n_out=" << s.n_out << " r=" << r
                              << " k=" << k << " o=" << o << " got=" << got << " want=" << want;
              }
            }
          }
          ASSERT_EQ(mismatches, 0);
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(AllTypes, KernelsVsReference,
                         ::testing::Range(0, static_cast<int>(sizeof(kTypes) / sizeof(kTypes[0]))),
                         [](const ::testing::TestParamInfo<int>& i) {
                           return std::string(kTypes[i.param].name);
                         });

TEST(KernelHelpers, DotF32MatchesReferenceOnEveryIsa) {
  IsaGuard guard;
  std::mt19937 rng(7);
  std::normal_distribution<float> g(0.0f, 3.0f);
  std::vector<float> a(5000), b(5000);
  for (size_t i = 0; i < a.size(); ++i) {
    a[i] = g(rng);
    b[i] = g(rng);
  }
  for (Isa isa : supported_isas()) {
    ASSERT_TRUE(set_isa(isa));
    for (int64_t n = 0; n < 200; ++n)
      ASSERT_EQ(bits(dot_f32(a.data() + 1, b.data() + 3, n)), bits(quant::dot_f32(a.data() + 1, b.data() + 3, n)))
          << isa_name(isa) << " n=" << n;
    for (int64_t n : {512, 4099})
      ASSERT_EQ(bits(dot_f32(a.data(), b.data(), n)), bits(quant::dot_f32(a.data(), b.data(), n)))
          << isa_name(isa) << " n=" << n;
  }
}

// dot_f32_many (groups of rows sharing a) and the RMSNorm statistic (up to 8 rows) equal
// quant::dot_f32 / quant::sumsq_f64 per row on every ISA, for lengths around the lane chunk.
TEST(KernelHelpers, DotManyAndSumsqMatchReferenceOnEveryIsa) {
  IsaGuard guard;
  std::mt19937 rng(17);
  std::normal_distribution<float> g(0.0f, 3.0f);
  constexpr int kRows = 9;
  constexpr int64_t kStride = 4200;
  std::vector<float> a(kStride), b(kRows * kStride);
  for (auto& v : a) v = g(rng);
  for (auto& v : b) v = g(rng);
  const float* rows[kRows];
  for (int j = 0; j < kRows; ++j) rows[j] = b.data() + j * kStride;
  for (Isa isa : supported_isas()) {
    ASSERT_TRUE(set_isa(isa));
    for (int64_t n : {0, 1, 33, 63, 64, 65, 130, 191, 512, 1031, 4096, 4159}) {
      float out[kRows];
      dot_f32_many(a.data(), rows, kRows, n, out);
      for (int j = 0; j < kRows; ++j)
        ASSERT_EQ(bits(out[j]), bits(quant::dot_f32(rows[j], a.data(), n))) << isa_name(isa) << " n=" << n;
      for (int gr = 1; gr <= 8; ++gr) {
        double ss[8];
        sumsq_rows_f64(b.data() + 1, kStride, gr, n, ss);
        for (int k = 0; k < gr; ++k)
          ASSERT_EQ(ss[k], quant::sumsq_f64(b.data() + 1 + k * kStride, n)) << isa_name(isa) << " n=" << n;
      }
    }
  }
}

TEST(KernelHelpers, AxpyScaleAndF16RowAreElementwiseExact) {
  IsaGuard guard;
  std::mt19937 rng(11);
  std::normal_distribution<float> g(0.0f, 3.0f);
  const int64_t n = 1003;
  std::vector<float> x(n), y0(n);
  for (int64_t i = 0; i < n; ++i) {
    x[i] = g(rng);
    y0[i] = g(rng);
  }
  const float a = 0.37f;
  std::vector<float> want_axpy(n), want_scale(n);
  for (int64_t i = 0; i < n; ++i) {
    const float t = a * x[i];
    want_axpy[i] = y0[i] + t;
    want_scale[i] = y0[i] * a;
  }
  std::vector<uint16_t> h(65536);
  for (int i = 0; i < 65536; ++i) h[i] = static_cast<uint16_t>(i);
  for (Isa isa : supported_isas()) {
    ASSERT_TRUE(set_isa(isa));
    std::vector<float> y = y0;
    axpy(a, x.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(y[i]), bits(want_axpy[i])) << isa_name(isa);
    y = y0;
    scale(a, y.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(bits(y[i]), bits(want_scale[i])) << isa_name(isa);
    std::vector<float> f(65536);
    f16_to_f32_row(h.data(), f.data(), 65536);
    for (int i = 0; i < 65536; ++i) {
      const float want = quant::f16_to_f32(h[i]);
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(f[i])) << isa_name(isa) << " h=" << i;
      } else {
        ASSERT_EQ(bits(f[i]), bits(want)) << isa_name(isa) << " h=" << i;
      }
    }
  }
}

TEST(KernelIsa, NamesParseAndDetectionIsConsistent) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    Isa back = Isa::kScalar;
    ASSERT_TRUE(parse_isa(isa_name(isa), &back));
    EXPECT_EQ(back, isa);
  }
  Isa dummy;
  EXPECT_FALSE(parse_isa("sse9", &dummy));
  EXPECT_TRUE(isa_supported(Isa::kScalar));
  EXPECT_TRUE(isa_supported(detect_isa()));
#if defined(__x86_64__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c")) {
    EXPECT_TRUE(isa_supported(Isa::kAvx2));
  }
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vnni") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512dq")) {
    EXPECT_EQ(detect_isa(), Isa::kAvx512);
  }
#endif
  IsaGuard guard;
  ASSERT_TRUE(set_isa(Isa::kScalar));
  EXPECT_EQ(active_isa(), Isa::kScalar);
}

}  // namespace
}  // namespace ds4::backend::cpu
