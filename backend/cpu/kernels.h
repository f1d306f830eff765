// backend/cpu/kernels.h — the hot CPU kernels: multi-row matmuls per weight type and the
// small vector helpers of the forward pass, with runtime ISA dispatch.
//
// Role: y[k][o] = dot(weight row o, activation row k) for k < r, o < n_out, where "dot" is
// EXACTLY the reference dot of quant/dot.h for that type (bit for bit, on every ISA path).
// Invariants (design.md §4, batch invariance):
//   * every weight block is loaded and decoded once per call chunk and dotted with all r
//     activation rows (exception: AVX2 dense rows re-read their cache-hot weights once per
//     group of 4 activation rows); each (k, o) result follows the reference per-row sequence,
//     so row k's result does not depend on r, on the other rows, on the thread count or on
//     the ISA (scalar / AVX2 / AVX-512);
//   * threads split OUTPUT rows o (deterministic chunk boundaries), never a reduction;
//   * no allocation, no environment reads; the ISA is chosen once by detect_isa() and can be forced
//     with set_isa() (the flag table maps DS4_CPU_ISA onto it);
//   * any r >= 0 is accepted (rows are processed in groups of at most kMaxTileRows, which
//     cannot change a row's result); n_cols must be a multiple of the type's block size.
// NaN weights: F16C conversion quiets signalling-NaN payloads; results are NaN either way.
#pragma once

#include <cstdint>
#include <string_view>

#include "quant/blocks.h"

namespace ds4 {
class ThreadPool;
}

namespace ds4::backend::cpu {

// ---- Instruction-set dispatch -------------------------------------------------------------
enum class Isa : int { kScalar = 0, kAvx2 = 1, kAvx512 = 2 };

const char* isa_name(Isa isa);               // "scalar", "avx2", "avx512"
bool parse_isa(std::string_view name, Isa* out);  // inverse of isa_name; false if unknown
bool isa_supported(Isa isa);                 // CPU + OS support it and it was compiled in
Isa detect_isa();                            // best supported ISA
Isa active_isa();                            // what the kernels use now (default detect_isa())
// Forces an ISA (tests, DS4_CPU_ISA). Returns false and changes nothing if unsupported.
// Not meant to be called while kernels run on other threads.
bool set_isa(Isa isa);

// ---- Weight views -------------------------------------------------------------------------
// A 2-D weight tensor as output rows: row o starts at data + o·row_bytes and holds n_cols
// elements of the tensor's type (n_cols/block_size blocks for quantized types).
struct TensorRows {
  const void* data = nullptr;  // [n_out][row_bytes] (mmapped; never copied)
  int64_t row_bytes = 0;       // stride between output rows, bytes
  int64_t n_cols = 0;          // reduction length, elements
};

// Rows per register tile; larger r is processed as consecutive tiles of this many rows.
inline constexpr int kMaxTileRows = 8;

// ---- Multi-row matmuls ----------------------------------------------------------------------
// Common arguments: x = r activation rows, row k at x + k·x_stride (x_stride in elements of
// the activation type: floats or blocks; 0 = packed, i.e. n_cols or n_cols/block);
// y = r output rows, row k at y + k·y_stride (0 = n_out); pool may be null (caller only).
//
// F32 / F16 / BF16 weights × f32 activations: quant::dot_f32 / dot_f16 / dot_bf16 (the
// canonical 64-lane order).
void matmul_f32(const TensorRows& w, const float* x, int r, float* y, int64_t n_out,
                ThreadPool* pool, int64_t x_stride = 0, int64_t y_stride = 0);
void matmul_f16(const TensorRows& w, const float* x, int r, float* y, int64_t n_out,
                ThreadPool* pool, int64_t x_stride = 0, int64_t y_stride = 0);
void matmul_bf16(const TensorRows& w, const float* x, int r, float* y, int64_t n_out,
                 ThreadPool* pool, int64_t x_stride = 0, int64_t y_stride = 0);
// Q8_0 weights × Q8_0 activations (quant::quantize_q8_0_act per row): quant::dot_q8_0.
void matmul_q8_0(const TensorRows& w, const quant::BlockQ8_0Act* x, int r, float* y,
                 int64_t n_out, ThreadPool* pool, int64_t x_stride = 0, int64_t y_stride = 0);
// Routed-expert weights × Q8_K activations (quant::quantize_q8_k_act per row):
// quant::dot_iq2_xxs_q8_k / dot_q2_k_q8_k / dot_q4_k_q8_k.
void matmul_iq2_xxs(const TensorRows& w, const quant::BlockQ8K* x, int r, float* y,
                    int64_t n_out, ThreadPool* pool, int64_t x_stride = 0, int64_t y_stride = 0);
void matmul_q2_k(const TensorRows& w, const quant::BlockQ8K* x, int r, float* y,
                 int64_t n_out, ThreadPool* pool, int64_t x_stride = 0, int64_t y_stride = 0);
void matmul_q4_k(const TensorRows& w, const quant::BlockQ8K* x, int r, float* y,
                 int64_t n_out, ThreadPool* pool, int64_t x_stride = 0, int64_t y_stride = 0);

// ---- Vector helpers (single-threaded; for the forward pass's inner loops) -----------------
// Each returns, on every ISA, exactly the bits of its scalar definition: per output element
// the same operations in the same order (the multi-row forms only run independent rows side
// by side in registers).
// Bitwise equal to quant::dot_f32 (canonical 64-lane order); attention scores use it.
float dot_f32(const float* a, const float* b, int64_t n);
// y[i] = y[i] + a·x[i]   (a multiply then an add, never fused; elementwise).
void axpy(float a, const float* x, float* y, int64_t n);
// y[i] = y[i]·a.
void scale(float a, float* y, int64_t n);
// ss[k] = quant::sumsq_f64(x + k·stride, n) for k < g (1 <= g <= 8): Σ (double)x² in the
// canonical 64-lane order (the RMSNorm statistic), bitwise on every ISA.
void sumsq_rows_f64(const float* x, int64_t stride, int g, int64_t n, double* ss);
// out[i] = x[i]·a, then ·w[i] when w is not null (left to right), elementwise; out may be x.
void scale_mul(const float* x, float a, const float* w, float* out, int64_t n);
// out[i] = exp(x[i] - m) (the subtraction in float, exp from core/detmath.h), elementwise,
// bitwise on every ISA; out may be x.
void exp_sub_row(const float* x, float m, float* out, int64_t n);
// SwiGLU with clamp: out[i] = silu(min(g[i], c)) · clamp(u[i], −c, c), then · w when weighted
// (left to right), SiLU from core/detmath.h; elementwise, bitwise on every ISA; out may be g.
void swiglu_row(const float* g, const float* u, float c, float w, bool weighted, float* out, int64_t n);
// out[j] = dot_f32(a, b[j], n) for j < nb, bit for bit (several rows per pass share the loads
// of a; each keeps its own canonical 64-lane order).
void dot_f32_many(const float* a, const float* const* b, int nb, int64_t n, float* out);
// y[i] = s[i]·a (0 when s is null), then y[i] = y[i] + w[j]·x[j][i] for j = 0..nx-1 in that
// order: elementwise, so bitwise equal to a copy+scale (or zero fill) followed by nx axpy
// calls, with y held in registers across the nx rows. s may equal y.
void weighted_sum(const float* s, float a, const float* w, const float* const* x, int nx, float* y,
                  int64_t n);
// dst[i] = f16_to_f32(src[i]) (exact) — e.g. the F16 embedding row fetch.
void f16_to_f32_row(const uint16_t* src, float* dst, int64_t n);
// Activation quantization, byte for byte equal to quant::quantize_q8_0_act /
// quant::quantize_q8_k_act (n a multiple of 32 / 256) on every ISA path.
void quantize_q8_0_act(const float* x, quant::BlockQ8_0Act* out, int64_t n);
void quantize_q8_k_act(const float* x, quant::BlockQ8K* out, int64_t n);

}  // namespace ds4::backend::cpu
