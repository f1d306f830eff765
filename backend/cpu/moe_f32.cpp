// backend/cpu/moe_f32.cpp — ActivationNumerics::kF32: matvecs against quantized weights with
// f32 activations (reference numerics for parity checks; see matmul.h).
//
// Role: the dense Q8_0 matmul (Matmul::matmul under kF32) and the routed-expert MoE
// (Backend::moe under kF32) without activation quantization: every output is
//   y[k][o] = dot_f32(dequantize_row(W row o), x_k)     (quant::dot_f32 64-lane order)
// i.e. exactly the float32 math of a reference that dequantizes the weights, up to the
// summation order. The production path (Q8_0 / Q8_K activations) is untouched.
// Invariants:
//  * a weight row is dequantized into a per-thread buffer (one row of n_in floats; grows only,
//    so nothing is allocated after the first call at a size) and dotted with every activation
//    row of the call that uses it; the whole weight is never copied;
//  * each (k, o) result depends only on W row o and x_k: threads and tasks split output rows,
//    never a reduction, so results are batch, thread-count and ISA invariant (dot_f32 is
//    bitwise the same on every kernel path);
//  * MoE keeps the quantized path's operation sequence: clamp + SiLU, router weight folded
//    into mid before down, down outputs summed in slot order; scratch <= moe_scratch_bytes().
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul.h"
#include "core/status.h"
#include "core/threadpool.h"
#include "quant/quant.h"

namespace ds4::backend::cpu {

namespace {

// Dense output rows per parallel chunk (fixed: chunking never depends on the thread count).
constexpr int64_t kRowGrain = 16;
// Expert output rows per MoE task.
constexpr int64_t kMoeChunkRows = 32;

// One dequantized weight row per thread; grows only.
float* row_buffer(int64_t n) {
  thread_local std::vector<float> buf;
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// IQ2_XXS grid points as floats and sign patterns as f32 sign-bit masks (built once).
struct Iq2Tables {
  float grid[256][8];     // kIq2XxsGrid bytes as floats
  uint32_t sign[128][8];  // 0x80000000 where kIq2Signs bit i is set
};
const Iq2Tables& iq2_tables() {
  static const Iq2Tables t = [] {
    Iq2Tables r{};
    for (int g = 0; g < 256; ++g) {
      for (int i = 0; i < 8; ++i) r.grid[g][i] = static_cast<float>((quant::kIq2XxsGrid[g] >> (8 * i)) & 0xffu);
    }
    for (int s = 0; s < 128; ++s) {
      for (int i = 0; i < 8; ++i) r.sign[s][i] = ((quant::kIq2Signs[s] >> i) & 1u) ? 0x80000000u : 0u;
    }
    return r;
  }();
  return t;
}

// quant::dequantize_row_iq2_xxs bit for bit: (db·mag)·(±1) == ±(db·mag) exactly (a sign flip).
void dequant_iq2_xxs(const quant::BlockIQ2XXS* src, float* dst, int64_t n) {
  const Iq2Tables& t = iq2_tables();
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const quant::BlockIQ2XXS& blk = src[b];
    const float d = quant::f16_to_f32(blk.d);
    float* y = dst + b * quant::kQKK;
    for (int g = 0; g < 8; ++g) {
      uint32_t aux[2];
      std::memcpy(aux, blk.qs + 4 * g, sizeof aux);
      const float db = (d * (0.5f + static_cast<float>(aux[1] >> 28))) * 0.25f;
      for (int k = 0; k < 4; ++k) {
        const float* mag = t.grid[(aux[0] >> (8 * k)) & 0xffu];
        const uint32_t* sg = t.sign[(aux[1] >> (7 * k)) & 127u];
        uint32_t bits[8];
        for (int i = 0; i < 8; ++i) {
          const float v = db * mag[i];
          uint32_t u;
          std::memcpy(&u, &v, sizeof u);
          bits[i] = u ^ sg[i];
        }
        std::memcpy(y + 32 * g + 8 * k, bits, sizeof bits);
      }
    }
  }
}

// quant::dequantize_row_q2_k bit for bit: the 4 values dl·q − ml of each 16-element sub-block
// are computed once (same two roundings) and looked up.
void dequant_q2_k(const quant::BlockQ2K* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / quant::kQKK; ++b) {
    const quant::BlockQ2K& blk = src[b];
    const float d = quant::f16_to_f32(blk.d);
    const float dmin = quant::f16_to_f32(blk.dmin);
    float* y = dst + b * quant::kQKK;
    for (int half = 0; half < 2; ++half) {
      for (int j = 0; j < 4; ++j) {
        for (int h = 0; h < 2; ++h) {
          const int sb = 8 * half + 2 * j + h;
          const float dl = d * static_cast<float>(blk.scales[sb] & 15);
          const float ml = dmin * static_cast<float>(blk.scales[sb] >> 4);
          float v[4];
          for (int q = 0; q < 4; ++q) v[q] = dl * static_cast<float>(q) - ml;
          const uint8_t* qs = blk.qs + 32 * half + 16 * h;
          float* yy = y + 128 * half + 32 * j + 16 * h;
          for (int l = 0; l < 16; ++l) yy[l] = v[(qs[l] >> (2 * j)) & 3];
        }
      }
    }
  }
}

// quant::dequantize_row_q8_0 bit for bit (f16(d)·q). The quants are copied to a local array
// first: stores through dst may not alias them then, so the loop vectorizes.
void dequant_q8_0(const quant::BlockQ8_0* src, float* dst, int64_t n) {
  for (int64_t b = 0; b < n / quant::kQK8_0; ++b) {
    const float d = quant::f16_to_f32(src[b].d);
    int8_t q[quant::kQK8_0];
    std::memcpy(q, src[b].qs, sizeof q);
    float* y = dst + b * quant::kQK8_0;
    for (int i = 0; i < quant::kQK8_0; ++i) y[i] = static_cast<float>(q[i]) * d;
  }
}

}  // namespace

void dequantize_weight_row(GgmlType t, const void* src, float* dst, int64_t n) {
  switch (t) {
    case GgmlType::kQ8_0:
      DS4_CHECK(n % quant::kQK8_0 == 0);
      dequant_q8_0(static_cast<const quant::BlockQ8_0*>(src), dst, n);
      return;
    case GgmlType::kIQ2_XXS:
      DS4_CHECK(n % quant::kQKK == 0);
      dequant_iq2_xxs(static_cast<const quant::BlockIQ2XXS*>(src), dst, n);
      return;
    case GgmlType::kQ2_K:
      DS4_CHECK(n % quant::kQKK == 0);
      dequant_q2_k(static_cast<const quant::BlockQ2K*>(src), dst, n);
      return;
    default:
      quant::dequantize_row(t, src, dst, n);
  }
}

namespace {

// y[k*y_stride + o] = dot_f32(deq(W row o), xrow(k)) for o in [o0, o1), k < n_rows.
template <typename XRow>
void dequant_dot_rows(const Matrix& w, int64_t o0, int64_t o1, int n_rows, const XRow& xrow,
                      float* y, int64_t y_stride) {
  float* buf = row_buffer(w.n_in);
  for (int64_t o = o0; o < o1; ++o) {
    dequantize_weight_row(w.type, w.data + static_cast<size_t>(o) * w.row_bytes, buf, w.n_in);
    for (int k = 0; k < n_rows; ++k) y[k * y_stride + o] = dot_f32(buf, xrow(k), w.n_in);
  }
}

template <typename T>
T* carve(uint8_t*& p, size_t count) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  a = (a + 63) & ~uintptr_t{63};
  T* out = reinterpret_cast<T*>(a);
  p = reinterpret_cast<uint8_t*>(a + count * sizeof(T));
  return out;
}

size_t moe_f32_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_pairs) {
  const size_t pairs = static_cast<size_t>(n_pairs);
  return 2 * pairs * n_ff * sizeof(float) + pairs * n_embd * sizeof(float) +
         pairs * 3 * sizeof(int32_t) + 64 * 4;
}

}  // namespace

void matmul_dequant_f32(const Matrix& w, const float* x, int64_t x_stride, int n_rows, float* y,
                        int64_t y_stride, ThreadPool* pool) {
  DS4_CHECK_MSG(quant::can_dequantize(w.type), "matmul_dequant_f32: unsupported weight type");
  parallel_for(pool, w.n_out, kRowGrain, [&](int64_t b, int64_t e) {
    dequant_dot_rows(w, b, e, n_rows, [&](int k) { return x + k * x_stride; }, y, y_stride);
  });
}

void moe_f32(const MoeParams& p, ThreadPool* pool) {
  const int64_t n_embd = p.gate.n_in;
  const int64_t n_ff = p.gate.n_out;
  const int U = p.n_used;
  const int n_pairs = p.n_rows * U;
  DS4_CHECK(moe_f32_scratch_bytes(n_embd, n_ff, n_pairs) <=
            moe_scratch_bytes(n_embd, n_ff, U, p.n_rows));
  uint8_t* cur = static_cast<uint8_t*>(p.scratch);
  float* gbuf = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);  // gate, then mid
  float* ubuf = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);
  float* down = carve<float>(cur, static_cast<size_t>(n_pairs) * n_embd);
  int32_t* order = carve<int32_t>(cur, static_cast<size_t>(n_pairs) * 3);
  int32_t* groups = order + n_pairs;  // start position of each expert group
  int32_t* inv = groups + n_pairs;    // pair -> sorted position

  // Pairs (row, slot) sorted by expert, so each expert row is dequantized once for all the
  // rows that use the expert.
  const int n_groups = group_pairs_by_expert(p.sel, n_pairs, order, groups, inv);
  auto group_span = [&](int g, int* q0, int* cnt) {
    *q0 = groups[g];
    *cnt = (g + 1 < n_groups ? groups[g + 1] : n_pairs) - *q0;
  };

  // Gate and up: task t = ((group, matrix), output chunk); x rows read in place.
  const int64_t gu_chunks = (n_ff + kMoeChunkRows - 1) / kMoeChunkRows;
  parallel_for(pool, 2 * n_groups * gu_chunks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int g = static_cast<int>(t / (2 * gu_chunks));
      const bool is_up = (t / gu_chunks) % 2 != 0;
      const int64_t o0 = (t % gu_chunks) * kMoeChunkRows;
      const int64_t o1 = std::min(o0 + kMoeChunkRows, n_ff);
      int q0, cnt;
      group_span(g, &q0, &cnt);
      const Matrix w = (is_up ? p.up : p.gate).expert(p.sel[order[q0]]);
      const float* x = p.x;
      dequant_dot_rows(w, o0, o1, cnt,
                       [&](int k) { return x + static_cast<int64_t>(order[q0 + k] / U) * n_embd; },
                       (is_up ? ubuf : gbuf) + static_cast<int64_t>(q0) * n_ff, n_ff);
    }
  });
  // mid = silu(min(g, c)) · clamp(u, −c, c) · w_router, in place over the gate outputs.
  const float clamp = p.clamp;
  for (int q = 0; q < n_pairs; ++q) {
    float* m = gbuf + static_cast<int64_t>(q) * n_ff;
    const float* uq = ubuf + static_cast<int64_t>(q) * n_ff;
    swiglu_row(m, uq, clamp, p.wt[order[q]], true, m, n_ff);
  }
  // Down: task t = (group, output chunk).
  const int64_t d_chunks = (n_embd + kMoeChunkRows - 1) / kMoeChunkRows;
  parallel_for(pool, n_groups * d_chunks, 1, [&](int64_t tb, int64_t te) {
    for (int64_t t = tb; t < te; ++t) {
      const int g = static_cast<int>(t / d_chunks);
      const int64_t o0 = (t % d_chunks) * kMoeChunkRows;
      const int64_t o1 = std::min(o0 + kMoeChunkRows, n_embd);
      int q0, cnt;
      group_span(g, &q0, &cnt);
      const Matrix w = p.down.expert(p.sel[order[q0]]);
      dequant_dot_rows(w, o0, o1, cnt,
                       [&](int k) { return gbuf + static_cast<int64_t>(q0 + k) * n_ff; },
                       down + static_cast<int64_t>(q0) * n_embd, n_embd);
    }
  });
  for (int i = 0; i < p.n_rows; ++i) {
    float* out = p.out + static_cast<int64_t>(i) * n_embd;
    for (int64_t o = 0; o < n_embd; ++o) out[o] = 0.0f;
    for (int sl = 0; sl < U; ++sl) {
      const float* d = down + static_cast<int64_t>(inv[i * U + sl]) * n_embd;
      for (int64_t o = 0; o < n_embd; ++o) out[o] = out[o] + d[o];
    }
    if (p.add != nullptr) {
      const float* a = p.add + static_cast<int64_t>(i) * n_embd;
      for (int64_t o = 0; o < n_embd; ++o) out[o] = out[o] + a[o];
    }
  }
}

}  // namespace ds4::backend::cpu
