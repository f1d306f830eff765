// backend/cpu/kernels.cpp — ISA selection and the threaded drivers of the CPU kernels.
//
// Role: picks the KernelTable (scalar / AVX2 / AVX-512) once, splits output rows over the
// thread pool in chunks whose boundaries depend only on the shape, and feeds the per-ISA
// row kernels tiles of at most kMaxTileRows activation rows.
// Invariants: threads split output rows only; a row's result depends on nothing but its
// own activation row and the weights (see kernels.h).
#include "backend/cpu/kernels.h"

#include "backend/cpu/kernels_internal.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "quant/blocks.h"

namespace ds4::backend::cpu {
namespace {

using detail::KernelTable;
using detail::RowsArgs;
using detail::RowsFn;

bool cpu_has_avx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool cpu_has_avx512() {
#if defined(__x86_64__)
  return cpu_has_avx2() && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

const KernelTable* table_for(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return &detail::scalar_table();
    case Isa::kAvx2:
      return cpu_has_avx2() ? detail::avx2_table() : nullptr;
    case Isa::kAvx512:
      return cpu_has_avx512() ? detail::avx512_table() : nullptr;
  }
  return nullptr;
}

struct Active {
  Isa isa;
  const KernelTable* table;
};

Active initial_active() {
  const Isa isa = detect_isa();
  return Active{isa, table_for(isa)};
}

Active& active() {
  static Active a = initial_active();
  return a;
}

inline const KernelTable& tbl() { return *active().table; }

// Output rows per chunk: about kChunkBytes of weights (fits L2 with the activations), and at
// least 4 chunks per thread when the matrix is big enough, so dynamic claiming balances an
// oversubscribed machine. Whole call inline when the work is tiny (a pool job costs about as
// much hand-off as a 32 KiB Q8_0 matvec). A chunk is never below kMinChunkBytes of work
// (weight bytes × rows, as `work` below), so many cores do not cut a small matvec into
// chunks cheaper than their hand-off. Measurements: docs/measurements/backend.md.
constexpr int64_t kChunkBytes = 64 * 1024;
constexpr int64_t kInlineBytes = 32 * 1024;
constexpr int64_t kMinChunkBytes = 16 * 1024;
constexpr int64_t kTileOutputs = 16;

int64_t choose_grain(int64_t n_out, int64_t row_bytes, int r, const ThreadPool* pool) {
  const int64_t rb = row_bytes > 0 ? row_bytes : 1;
  if (pool == nullptr || pool->n_threads() <= 1) return n_out;
  const int64_t rows = r < kMaxTileRows ? r : kMaxTileRows;
  const int64_t work = n_out * rb * rows;
  if (work <= kInlineBytes) return n_out;
  int64_t grain = kChunkBytes / rb;
  const int64_t balance = n_out / (4 * static_cast<int64_t>(pool->n_threads()));
  if (grain > balance) grain = balance;
  const int64_t min_grain = (kMinChunkBytes + rb * rows - 1) / (rb * rows);
  if (grain < min_grain) grain = min_grain;
  // Whole register tiles (the SIMD kernels take up to 16 outputs per tile; leftovers run
  // one output at a time, which is slower).
  grain = (grain + kTileOutputs - 1) / kTileOutputs * kTileOutputs;
  return grain;
}

void drive(RowsFn fn, const TensorRows& w, const void* x, int64_t x_stride_bytes, int r,
           float* y, int64_t n_out, int64_t y_stride, ThreadPool* pool) {
  if (r <= 0 || n_out <= 0) return;
  DS4_CHECK(w.data != nullptr && x != nullptr && y != nullptr);
  RowsArgs base;
  base.w = static_cast<const uint8_t*>(w.data);
  base.row_bytes = w.row_bytes;
  base.n_cols = w.n_cols;
  base.x = x;
  base.x_stride_bytes = x_stride_bytes;
  base.y = y;
  base.y_stride = y_stride;
  const int64_t grain = choose_grain(n_out, w.row_bytes, r, pool);
  parallel_for(pool, n_out, grain, [&](int64_t o_begin, int64_t o_end) {
    // Tiles of rows inside the chunk: the chunk's weights stay in cache across tiles.
    for (int k0 = 0; k0 < r; k0 += kMaxTileRows) {
      RowsArgs a = base;
      a.r = r - k0 < kMaxTileRows ? r - k0 : kMaxTileRows;
      a.x = static_cast<const uint8_t*>(x) + k0 * x_stride_bytes;
      a.y = y + k0 * y_stride;
      fn(a, o_begin, o_end);
    }
  });
}

template <typename Act>
void drive_typed(RowsFn fn, const TensorRows& w, int64_t elems_per_act, const Act* x, int r,
                 float* y, int64_t n_out, ThreadPool* pool, int64_t x_stride,
                 int64_t y_stride) {
  DS4_CHECK_MSG(w.n_cols % elems_per_act == 0, "n_cols must be a multiple of the block size");
  const int64_t xs = x_stride != 0 ? x_stride : w.n_cols / elems_per_act;
  const int64_t ys = y_stride != 0 ? y_stride : n_out;
  drive(fn, w, x, xs * static_cast<int64_t>(sizeof(Act)), r, y, n_out, ys, pool);
}

}  // namespace

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar:
      return "scalar";
    case Isa::kAvx2:
      return "avx2";
    case Isa::kAvx512:
      return "avx512";
  }
  return "?";
}

bool parse_isa(std::string_view name, Isa* out) {
  for (Isa isa : {Isa::kScalar, Isa::kAvx2, Isa::kAvx512}) {
    if (name == isa_name(isa)) {
      *out = isa;
      return true;
    }
  }
  return false;
}

bool isa_supported(Isa isa) { return table_for(isa) != nullptr; }

Isa detect_isa() {
  if (isa_supported(Isa::kAvx512)) return Isa::kAvx512;
  if (isa_supported(Isa::kAvx2)) return Isa::kAvx2;
  return Isa::kScalar;
}

Isa active_isa() { return active().isa; }

bool set_isa(Isa isa) {
  const KernelTable* t = table_for(isa);
  if (t == nullptr) return false;
  active() = Active{isa, t};
  return true;
}

void matmul_f32(const TensorRows& w, const float* x, int r, float* y, int64_t n_out,
                ThreadPool* pool, int64_t x_stride, int64_t y_stride) {
  drive_typed(tbl().f32, w, 1, x, r, y, n_out, pool, x_stride, y_stride);
}
void matmul_f16(const TensorRows& w, const float* x, int r, float* y, int64_t n_out,
                ThreadPool* pool, int64_t x_stride, int64_t y_stride) {
  drive_typed(tbl().f16, w, 1, x, r, y, n_out, pool, x_stride, y_stride);
}
void matmul_bf16(const TensorRows& w, const float* x, int r, float* y, int64_t n_out,
                 ThreadPool* pool, int64_t x_stride, int64_t y_stride) {
  drive_typed(tbl().bf16, w, 1, x, r, y, n_out, pool, x_stride, y_stride);
}
void matmul_q8_0(const TensorRows& w, const quant::BlockQ8_0Act* x, int r, float* y,
                 int64_t n_out, ThreadPool* pool, int64_t x_stride, int64_t y_stride) {
  drive_typed(tbl().q8_0, w, quant::kQK8_0, x, r, y, n_out, pool, x_stride, y_stride);
}
void matmul_iq2_xxs(const TensorRows& w, const quant::BlockQ8K* x, int r, float* y,
                    int64_t n_out, ThreadPool* pool, int64_t x_stride, int64_t y_stride) {
  drive_typed(tbl().iq2_xxs, w, quant::kQKK, x, r, y, n_out, pool, x_stride, y_stride);
}
void matmul_q2_k(const TensorRows& w, const quant::BlockQ8K* x, int r, float* y,
                 int64_t n_out, ThreadPool* pool, int64_t x_stride, int64_t y_stride) {
  drive_typed(tbl().q2_k, w, quant::kQKK, x, r, y, n_out, pool, x_stride, y_stride);
}
void matmul_q4_k(const TensorRows& w, const quant::BlockQ8K* x, int r, float* y,
                 int64_t n_out, ThreadPool* pool, int64_t x_stride, int64_t y_stride) {
  drive_typed(tbl().q4_k, w, quant::kQKK, x, r, y, n_out, pool, x_stride, y_stride);
}

float dot_f32(const float* a, const float* b, int64_t n) { return tbl().dot_f32(a, b, n); }
void axpy(float a, const float* x, float* y, int64_t n) { tbl().axpy(a, x, y, n); }
void scale(float a, float* y, int64_t n) { tbl().scale(a, y, n); }
void sumsq_rows_f64(const float* x, int64_t stride, int g, int64_t n, double* ss) {
  DS4_CHECK(g >= 1 && g <= 8);
  tbl().sumsq_rows_f64(x, stride, g, n, ss);
}
void scale_mul(const float* x, float a, const float* w, float* out, int64_t n) {
  tbl().scale_mul(x, a, w, out, n);
}
void exp_sub_row(const float* x, float m, float* out, int64_t n) { tbl().exp_sub(x, m, out, n); }
void swiglu_row(const float* g, const float* u, float c, float w, bool weighted, float* out, int64_t n) {
  tbl().swiglu(g, u, c, w, weighted, out, n);
}
void dot_f32_many(const float* a, const float* const* b, int nb, int64_t n, float* out) {
  tbl().dot_f32_many(a, b, nb, n, out);
}
void weighted_sum(const float* s, float a, const float* w, const float* const* x, int nx, float* y,
                  int64_t n) {
  tbl().weighted_sum(s, a, w, x, nx, y, n);
}
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n) {
  tbl().f16_to_f32_row(src, dst, n);
}
void quantize_q8_0_act(const float* x, quant::BlockQ8_0Act* out, int64_t n) {
  DS4_CHECK(n >= 0 && n % quant::kQK8_0 == 0);
  tbl().quantize_q8_0_act(x, out, n);
}
void quantize_q8_k_act(const float* x, quant::BlockQ8K* out, int64_t n) {
  DS4_CHECK(n >= 0 && n % quant::kQKK == 0);
  tbl().quantize_q8_k_act(x, out, n);
}

}  // namespace ds4::backend::cpu
