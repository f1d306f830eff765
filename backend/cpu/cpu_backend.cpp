// backend/cpu/cpu_backend.cpp — the CPU implementation of backend.h (the numerics oracle).
//
// Every op follows ds4-architecture.md §3-4 in source order, on top of the reference dots of
// quant/dot.h (through backend/cpu/matmul.h, which the SIMD kernels plug into without
// changing any bit). Parallelism splits independent outputs only (weight rows, heads,
// candidate rows), never a reduction, so results do not depend on the thread count.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/matmul.h"
#include "core/threadpool.h"
#include "quant/quant.h"

namespace ds4::backend {

size_t moe_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  const size_t pairs = static_cast<size_t>(n_used) * n_rows;
  size_t b = 0;
  b += static_cast<size_t>(n_rows) * (n_embd / quant::kQKK) * sizeof(quant::BlockQ8K);  // xq
  b += pairs * n_ff * sizeof(float);                                      // mid
  b += pairs * (n_ff / quant::kQKK) * sizeof(quant::BlockQ8K);            // midq
  b += pairs * n_embd * sizeof(float);                                    // down outputs
  b += pairs * 2 * sizeof(int32_t);                                       // pair order
  const int64_t blocks = std::max(n_embd, n_ff) / quant::kQKK;
  b += pairs * blocks * sizeof(quant::BlockQ8K);                          // gathered activations
  b += 2 * pairs * n_ff * sizeof(float);                                  // gate / up outputs
  b += pairs * n_embd * sizeof(float);                                    // gathered down outputs
  return b + 64 * 10;
}

namespace {

using quant::BlockQ8K;

template <typename T>
T* carve(uint8_t*& p, size_t count) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  a = (a + 63) & ~uintptr_t{63};
  T* out = reinterpret_cast<T*>(a);
  p = reinterpret_cast<uint8_t*>(a + count * sizeof(T));
  return out;
}

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(int n_threads) : pool_(n_threads), mm_(&pool_) {}

  const char* name() const override { return "cpu"; }
  int n_threads() const override { return pool_.n_threads(); }

  void matmul(const MatmulParams& p) override { mm_.matmul(p); }

  void rms_norm(const RmsNormParams& p) override {
    const int64_t stride = p.stride ? p.stride : p.n;
    for (int i = 0; i < p.n_rows; ++i) {
      cpu::rms_norm_row(p.x + i * stride, p.weight, p.out + i * stride, p.n, p.eps);
    }
  }

  void hc_pre(const HcPreParams& p) override {
    const int64_t hc_dim = p.n_hc * p.n_embd;
    const int64_t mix_dim = 2 * p.n_hc + p.n_hc * p.n_hc;
    for (int i = 0; i < p.n_rows; ++i) {
      cpu::rms_norm_row(p.x + i * hc_dim, nullptr, p.flat + i * hc_dim, hc_dim, p.norm_eps);
    }
    MatmulParams mp;
    mp.w = p.fn;
    mp.x = p.flat;
    mp.x_stride = hc_dim;
    mp.y = p.mix;
    mp.y_stride = mix_dim;
    mp.n_rows = p.n_rows;
    mm_.matmul(mp);
    for (int i = 0; i < p.n_rows; ++i) {
      float pre[16];
      const float* x = p.x + i * hc_dim;
      cpu::hc_split_sinkhorn(p.mix + i * mix_dim, p.scale, p.base, p.n_hc, p.sinkhorn_iters,
                             p.hc_eps, pre, p.post + i * p.n_hc, p.comb + i * p.n_hc * p.n_hc);
      float* y = p.y + i * p.n_embd;
      for (int64_t d = 0; d < p.n_embd; ++d) {
        float acc = 0.0f;
        for (int h = 0; h < p.n_hc; ++h) acc += x[h * p.n_embd + d] * pre[h];
        y[d] = acc;
      }
    }
  }

  void hc_post(const HcPostParams& p) override {
    const int64_t hc_dim = p.n_hc * p.n_embd;
    for (int i = 0; i < p.n_rows; ++i) {
      const float* f = p.f + i * p.n_embd;
      const float* x = p.x + i * hc_dim;
      const float* post = p.post + i * p.n_hc;
      const float* comb = p.comb + i * p.n_hc * p.n_hc;
      float* out = p.out + i * hc_dim;
      for (int c = 0; c < p.n_hc; ++c) {
        for (int64_t d = 0; d < p.n_embd; ++d) {
          float acc = f[d] * post[c];
          for (int r = 0; r < p.n_hc; ++r) acc += comb[r * p.n_hc + c] * x[r * p.n_embd + d];
          out[c * p.n_embd + d] = acc;
        }
      }
    }
  }

  void rope_tail(const RopeTailParams& p) override {
    cpu::rope_tail_rows(p.x, p.n_head, p.head_dim, p.n_rot, p.pos, p.rope, p.inverse);
  }

  bool compressor_step(const CompressorStepParams& p) override {
    const int R = p.ratio;
    const int D = p.head_dim;
    const int coff = R == 4 ? 2 : 1;
    const int W = coff * D;
    const int pm = static_cast<int>(p.pos % R);
    const int row = R == 4 ? R + pm : pm;
    float* skv = p.state_kv + static_cast<int64_t>(row) * W;
    float* ssc = p.state_score + static_cast<int64_t>(row) * W;
    const uint16_t* ape = p.ape + static_cast<int64_t>(pm) * W;
    for (int j = 0; j < W; ++j) {
      skv[j] = p.kv_cur[j];
      ssc[j] = p.sc_cur[j] + quant::f16_to_f32(ape[j]);
    }
    if ((p.pos + 1) % R != 0) return false;

    float* pooled = p.pooled;
    for (int j = 0; j < D; ++j) {
      float mx = -1.0e30f;
      if (R == 4) {
        for (int r = 0; r < 4; ++r) {
          const float sp = p.state_score[static_cast<int64_t>(r) * W + j];
          const float sc = p.state_score[static_cast<int64_t>(4 + r) * W + D + j];
          if (sp > mx) mx = sp;
          if (sc > mx) mx = sc;
        }
      } else {
        for (int r = 0; r < R; ++r) {
          const float s = p.state_score[static_cast<int64_t>(r) * W + j];
          if (s > mx) mx = s;
        }
      }
      if (mx <= -0.5e30f) {
        pooled[j] = 0.0f;
        continue;
      }
      float den = 0.0f, acc = 0.0f;
      if (R == 4) {
        for (int r = 0; r < 4; ++r) {
          const int64_t ip = static_cast<int64_t>(r) * W + j;
          const int64_t ic = static_cast<int64_t>(4 + r) * W + D + j;
          const float wp = expf(p.state_score[ip] - mx);
          const float wc = expf(p.state_score[ic] - mx);
          den += wp + wc;
          acc += wp * p.state_kv[ip];
          acc += wc * p.state_kv[ic];
        }
      } else {
        for (int r = 0; r < R; ++r) {
          const int64_t ii = static_cast<int64_t>(r) * W + j;
          const float w = expf(p.state_score[ii] - mx);
          den += w;
          acc += w * p.state_kv[ii];
        }
      }
      pooled[j] = den > 0.0f ? acc / den : 0.0f;
    }
    cpu::rms_norm_row(pooled, p.norm, p.out_row, D, p.eps);
    cpu::rope_tail_rows(p.out_row, 1, D, p.n_rot, p.pos + 1 - R, p.rope, false);
    if (p.indexer) {
      for (int off = 0; off < D; off += quant::kHadamardDim) quant::indexer_qat_row(p.out_row + off);
    } else {
      quant::fp8_e4m3_roundtrip(p.out_row, D - p.n_rot);
    }
    if (R == 4) {
      // The current window becomes the "previous" lane of the next one.
      std::memcpy(p.state_kv, p.state_kv + 4 * static_cast<int64_t>(W), sizeof(float) * 4 * W);
      std::memcpy(p.state_score, p.state_score + 4 * static_cast<int64_t>(W), sizeof(float) * 4 * W);
    }
    return true;
  }

  void indexer_select(const IndexerSelectParams& p) override {
    const int64_t n = p.n_rows;
    pool_.parallel_for(n, 256, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        const float* row = p.rows + c * p.head_dim;
        float s = 0.0f;
        for (int k = 0; k < p.n_head; ++k) {
          const float d = cpu::dot_f32(row, p.q + static_cast<int64_t>(k) * p.head_dim, p.head_dim);
          s += (d > 0.0f ? d : 0.0f) * p.w[k];
        }
        p.scores[c] = s;
      }
    });
    // Top-k by (score desc, index asc): the same set as repeatedly taking the first strict
    // maximum of the not-yet-selected rows (ties go to the lowest index).
    for (int64_t c = 0; c < n; ++c) p.order[c] = static_cast<int32_t>(c);
    const int64_t k = std::min<int64_t>(p.top_k, n);
    const float* sc = p.scores;
    std::nth_element(p.order, p.order + (k - 1), p.order + n, [sc](int32_t a, int32_t b) {
      if (sc[a] != sc[b]) return sc[a] > sc[b];
      return a < b;
    });
    std::memset(p.allowed, 0, static_cast<size_t>(n));
    for (int64_t i = 0; i < k; ++i) p.allowed[p.order[i]] = 1;
  }

  void sink_attention(const SinkAttentionParams& p) override {
    const int D = p.head_dim;
    const float kq_scale = 1.0f / sqrtf(static_cast<float>(D));
    const int64_t n_all = p.n_raw + p.n_comp;
    pool_.parallel_for(p.n_head, 1, [&](int64_t hb, int64_t he) {
      for (int64_t h = hb; h < he; ++h) {
        const float* qh = p.q + h * D;
        float* score = p.scores + h * n_all;
        float mx = p.sinks[h];
        for (int r = 0; r < p.n_raw; ++r) {
          score[r] = cpu::dot_f32(qh, p.raw[r], D) * kq_scale;
          if (score[r] > mx) mx = score[r];
        }
        for (int64_t c = 0; c < p.n_comp; ++c) {
          if (p.comp_allowed != nullptr && !p.comp_allowed[c]) {
            score[p.n_raw + c] = -1.0e30f;
            continue;
          }
          const float s = cpu::dot_f32(qh, p.comp + c * D, D) * kq_scale;
          score[p.n_raw + c] = s;
          if (s > mx) mx = s;
        }
        float* oh = p.out + h * D;
        std::memset(oh, 0, sizeof(float) * D);
        float den = expf(p.sinks[h] - mx);
        for (int r = 0; r < p.n_raw; ++r) {
          const float w = expf(score[r] - mx);
          den += w;
          cpu::axpy(w, p.raw[r], oh, D);
        }
        for (int64_t c = 0; c < p.n_comp; ++c) {
          if (p.comp_allowed != nullptr && !p.comp_allowed[c]) continue;
          const float w = expf(score[p.n_raw + c] - mx);
          den += w;
          cpu::axpy(w, p.comp + c * D, oh, D);
        }
        const float inv = 1.0f / den;
        for (int j = 0; j < D; ++j) oh[j] *= inv;
      }
    });
  }

  void swiglu(const SwigluParams& p) override {
    for (int64_t k = 0; k < p.n; ++k) {
      const float g = std::min(p.gate[k], p.clamp);
      const float u = std::min(std::max(p.up[k], -p.clamp), p.clamp);
      p.out[k] = cpu::silu(g) * u;
    }
  }

  void route(const RouteParams& p) override {
    const int X = p.n_expert, U = p.n_used;
    for (int i = 0; i < p.n_rows; ++i) {
      const float* logits = p.logits + static_cast<int64_t>(i) * X;
      float* pr = p.probs;
      for (int e = 0; e < X; ++e) pr[e] = sqrtf(cpu::softplus_stable(logits[e]));
      int32_t* sel = p.sel + static_cast<int64_t>(i) * U;
      float* wt = p.wt + static_cast<int64_t>(i) * U;
      if (p.tid2eid != nullptr) {
        for (int j = 0; j < U; ++j) sel[j] = p.tid2eid[static_cast<int64_t>(p.tokens[i]) * U + j];
      } else {
        // Insertion top-k: insert before the first slot with a strictly smaller score, so
        // ties keep the lower expert id first; sel ends in descending score order.
        float best[64];
        int cnt = 0;
        for (int e = 0; e < X; ++e) {
          const float sc = p.bias != nullptr ? pr[e] + p.bias[e] : pr[e];
          int at = cnt;
          for (int j = 0; j < cnt; ++j) {
            if (best[j] < sc) {
              at = j;
              break;
            }
          }
          if (at >= U) continue;
          for (int j = std::min(cnt, U - 1); j > at; --j) {
            best[j] = best[j - 1];
            sel[j] = sel[j - 1];
          }
          best[at] = sc;
          sel[at] = e;
          if (cnt < U) ++cnt;
        }
      }
      float sum = 0.0f;
      for (int j = 0; j < U; ++j) {
        wt[j] = pr[sel[j]];
        sum += wt[j];
      }
      if (p.renorm) {
        const float denom = std::max(sum, 6.103515625e-5f);
        for (int j = 0; j < U; ++j) wt[j] = wt[j] / denom * p.scale;
      } else {
        for (int j = 0; j < U; ++j) wt[j] = wt[j] * p.scale;
      }
    }
  }

  void hc_collapse(const HcCollapseParams& p) override {
    const int64_t hc_dim = p.n_hc * p.n_embd;
    for (int i = 0; i < p.n_rows; ++i) {
      cpu::rms_norm_row(p.x + i * hc_dim, nullptr, p.flat + i * hc_dim, hc_dim, p.norm_eps);
    }
    MatmulParams mp;
    mp.w = p.fn;
    mp.x = p.flat;
    mp.x_stride = hc_dim;
    mp.y = p.mix;
    mp.y_stride = p.n_hc;
    mp.n_rows = p.n_rows;
    mm_.matmul(mp);
    for (int i = 0; i < p.n_rows; ++i) {
      float w[16];
      for (int h = 0; h < p.n_hc; ++h) w[h] = cpu::sigmoid_stable(p.mix[i * p.n_hc + h] * p.scale + p.base[h]) + p.hc_eps;
      const float* x = p.x + i * hc_dim;
      float* y = p.y + i * p.n_embd;
      for (int64_t d = 0; d < p.n_embd; ++d) {
        float acc = 0.0f;
        for (int h = 0; h < p.n_hc; ++h) acc += x[h * p.n_embd + d] * w[h];
        y[d] = acc;
      }
    }
  }

  void moe(const MoeParams& p) override {
    const int64_t n_embd = p.gate.n_in;
    const int64_t n_ff = p.gate.n_out;
    const int n_pairs = p.n_rows * p.n_used;
    const int64_t xb = n_embd / quant::kQKK;
    const int64_t mb = n_ff / quant::kQKK;
    uint8_t* cur = static_cast<uint8_t*>(p.scratch);
    BlockQ8K* xq = carve<BlockQ8K>(cur, static_cast<size_t>(p.n_rows) * xb);
    float* mid = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);
    BlockQ8K* midq = carve<BlockQ8K>(cur, static_cast<size_t>(n_pairs) * mb);
    float* down = carve<float>(cur, static_cast<size_t>(n_pairs) * n_embd);
    int32_t* order = carve<int32_t>(cur, static_cast<size_t>(n_pairs) * 2);

    for (int i = 0; i < p.n_rows; ++i) {
      quant::quantize_q8_k_act(p.x + i * n_embd, xq + i * xb, n_embd);
    }
    // Pairs (row, slot) sorted by expert so one weight read serves every row using it.
    for (int q = 0; q < n_pairs; ++q) order[q] = q;
    // Stable insertion sort by expert id (std::stable_sort may allocate; n_pairs is small).
    for (int q = 1; q < n_pairs; ++q) {
      const int32_t v = order[q];
      int j = q;
      for (; j > 0 && p.sel[order[j - 1]] > p.sel[v]; --j) order[j] = order[j - 1];
      order[j] = v;
    }
    int32_t* groups = order + n_pairs;  // start index of each expert group in `order`
    int n_groups = 0;
    for (int q = 0; q < n_pairs; ++q) {
      if (q == 0 || p.sel[order[q]] != p.sel[order[q - 1]]) groups[n_groups++] = q;
    }
    BlockQ8K* xg = carve<BlockQ8K>(cur, static_cast<size_t>(n_pairs) * std::max(xb, mb));
    float* gbuf = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);
    float* ubuf = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);
    float* dbuf = carve<float>(cur, static_cast<size_t>(n_pairs) * n_embd);
    const float clamp = p.clamp;
    // Gate/up: every pair of one expert in one multi-row call (rows gathered contiguously).
    for (int g = 0; g < n_groups; ++g) {
      const int q0 = groups[g];
      const int cnt = (g + 1 < n_groups ? groups[g + 1] : n_pairs) - q0;
      const int32_t e = p.sel[order[q0]];
      for (int k = 0; k < cnt; ++k) {
        std::memcpy(xg + k * xb, xq + (order[q0 + k] / p.n_used) * xb, sizeof(BlockQ8K) * xb);
      }
      cpu::expert_matmul(p.gate.expert(e), xg, xb, cnt, gbuf, n_ff, &pool_);
      cpu::expert_matmul(p.up.expert(e), xg, xb, cnt, ubuf, n_ff, &pool_);
      for (int k = 0; k < cnt; ++k) {
        const int pair = order[q0 + k];
        float* m = mid + static_cast<int64_t>(pair) * n_ff;
        const float w = p.wt[pair];
        for (int64_t r = 0; r < n_ff; ++r) {
          const float gv = std::min(gbuf[k * n_ff + r], clamp);
          const float uv = std::min(std::max(ubuf[k * n_ff + r], -clamp), clamp);
          m[r] = cpu::silu(gv) * uv * w;
        }
      }
    }
    for (int q = 0; q < n_pairs; ++q) {
      quant::quantize_q8_k_act(mid + static_cast<int64_t>(q) * n_ff, midq + q * mb, n_ff);
    }
    for (int g = 0; g < n_groups; ++g) {
      const int q0 = groups[g];
      const int cnt = (g + 1 < n_groups ? groups[g + 1] : n_pairs) - q0;
      const int32_t e = p.sel[order[q0]];
      for (int k = 0; k < cnt; ++k) std::memcpy(xg + k * mb, midq + order[q0 + k] * mb, sizeof(BlockQ8K) * mb);
      cpu::expert_matmul(p.down.expert(e), xg, mb, cnt, dbuf, n_embd, &pool_);
      for (int k = 0; k < cnt; ++k) {
        std::memcpy(down + static_cast<int64_t>(order[q0 + k]) * n_embd, dbuf + k * n_embd, sizeof(float) * n_embd);
      }
    }
    for (int i = 0; i < p.n_rows; ++i) {
      float* out = p.out + i * n_embd;
      for (int64_t o = 0; o < n_embd; ++o) {
        float acc = 0.0f;
        for (int s = 0; s < p.n_used; ++s) acc += down[static_cast<int64_t>(i * p.n_used + s) * n_embd + o];
        out[o] = acc;
      }
    }
  }

 private:
  ThreadPool pool_;
  cpu::Matmul mm_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads) {
  return std::make_unique<CpuBackend>(n_threads);
}

}  // namespace ds4::backend
