// backend/cpu/cpu_ops.cpp — scalar formulas of ds4-architecture.md §3 in source order.
// Strict IEEE (-ffp-contract=off): every a*b+c below is two rounded operations.
#include "backend/cpu/cpu_ops.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/status.h"
#include "quant/dot.h"
#include "quant/half.h"
#include "quant/kv_sim.h"
#include "quant/quant.h"
#include "backend/cpu/kernels.h"

namespace ds4::backend::cpu {

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  const double ss = ds4::quant::sumsq_f64(x, n);
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(n)) + eps);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

namespace {

// Rows [0, g) of the group (g <= 8): per row the same Σ (double)x·x (quant::sumsq_f64's
// 64-lane order) as rms_norm_row, then out = x·scale (·w).
void rms_group(const float* x, const float* w, float* out, int64_t n, int64_t stride, int g, float eps) {
  double ss[8];
  ds4::backend::cpu::sumsq_rows_f64(x, stride, g, n, ss);
  for (int k = 0; k < g; ++k) {
    const float scale = 1.0f / sqrtf(static_cast<float>(ss[k] / static_cast<double>(n)) + eps);
    ds4::backend::cpu::scale_mul(x + k * stride, scale, w, out + k * stride, n);
  }
}

}  // namespace

void rope_tail_rows(float* x, int n_head, int head_dim, int n_rot, int64_t pos,
                    const RopeParams& rp, bool inverse) {
  const int n_nope = head_dim - n_rot;
  // The angles depend on (pos, rope params, pair index) only, so cos·mscale and sin·mscale
  // (core/rope.h's rope_pair, the definition every backend shares) are computed once per call
  // and reused for every head, and kept for later calls with the same key in a small
  // per-thread cache: q, kv, inverse and indexer RoPE of one row share them, and a compressor
  // step at another position in between must not evict them. The inverse's sign is applied
  // as −(sin·mscale), exact. 32 entries: a batch of up to 8 rows ropes every row's q and kv
  // before any row's inverse, in layers of two parameter sets (dense and compressed), plus the
  // compressor's positions (4 entries missed on every row of a verify(6)).
  constexpr int kMaxPairs = 128;
  constexpr int kEntries = 32;
  struct Cache {
    bool valid = false;
    int64_t pos = 0;
    int n_rot = 0;
    RopeParams rp;
    float cs[kMaxPairs], sn[kMaxPairs];
  };
  thread_local Cache caches[kEntries];
  thread_local int next_victim = 0;
  auto same_key = [&](const Cache& c) {
    return c.valid && c.pos == pos && c.n_rot == n_rot && c.rp.freq_base == rp.freq_base &&
           c.rp.freq_scale == rp.freq_scale && c.rp.ext_factor == rp.ext_factor &&
           c.rp.attn_factor == rp.attn_factor && c.rp.n_ctx_orig == rp.n_ctx_orig &&
           c.rp.beta_fast == rp.beta_fast && c.rp.beta_slow == rp.beta_slow;
  };
  if (n_rot > 2 * kMaxPairs) {
    // Not cached (no such model today): the same angles, recomputed per head.
    const RopeAngles a = rope_angles(rp, n_rot);
    for (int h = 0; h < n_head; ++h) {
      float* tail = x + static_cast<int64_t>(h) * head_dim + n_nope;
      for (int i = 0; i < n_rot; i += 2) {
        float c, s;
        rope_pair(a, pos, i / 2, &c, &s);
        if (inverse) s = -s;
        const float x0 = tail[i];
        const float x1 = tail[i + 1];
        tail[i] = x0 * c - x1 * s;
        tail[i + 1] = x0 * s + x1 * c;
      }
    }
    return;
  }
  Cache* found = nullptr;
  for (Cache& c : caches) {
    if (same_key(c)) {
      found = &c;
      break;
    }
  }
  if (found == nullptr) {
    found = &caches[next_victim];
    next_victim = (next_victim + 1) % kEntries;
    const RopeAngles a = rope_angles(rp, n_rot);
    for (int i = 0; i < n_rot / 2; ++i) rope_pair(a, pos, i, &found->cs[i], &found->sn[i]);
    found->valid = true;
    found->pos = pos;
    found->n_rot = n_rot;
    found->rp = rp;
  }
  for (int h = 0; h < n_head; ++h) {
    float* tail = x + static_cast<int64_t>(h) * head_dim + n_nope;
    for (int i = 0; i < n_rot; i += 2) {
      const float c = found->cs[i / 2];
      const float s = inverse ? -found->sn[i / 2] : found->sn[i / 2];
      const float x0 = tail[i];
      const float x1 = tail[i + 1];
      tail[i] = x0 * c - x1 * s;
      tail[i + 1] = x0 * s + x1 * c;
    }
  }
}

void rms_norm_rows(const float* x, const float* w, float* out, int64_t n, int64_t stride, int n_rows,
                   float eps) {
  for (int i = 0; i < n_rows; i += 8) {
    const int g = n_rows - i < 8 ? n_rows - i : 8;
    rms_group(x + i * stride, w, out + i * stride, n, stride, g, eps);
  }
}

namespace {

// §4.2 steps 3-4 of one row: pre, post, and comb after the row softmax + eps (before the
// first column normalization).
void sinkhorn_init(const float* mix, const float* scale, const float* base, int n_hc, float eps, float* pre,
                   float* post, float* comb) {
  for (int i = 0; i < n_hc; ++i) {
    const float z = mix[i] * scale[0] + base[i];
    pre[i] = 1.0f / (1.0f + detmath::exp_f32(-z)) + eps;
  }
  for (int i = 0; i < n_hc; ++i) {
    const int off = n_hc + i;
    const float z = mix[off] * scale[1] + base[off];
    post[i] = 2.0f / (1.0f + detmath::exp_f32(-z));
  }
  // comb[r * n_hc + c]: softmax row r (input stream) and column c (output stream).
  float* a = comb;
  for (int r = 0; r < n_hc; ++r) {
    float row_max = -1.0e30f;
    for (int c = 0; c < n_hc; ++c) {
      const int off = 2 * n_hc + r * n_hc + c;
      const float v = mix[off] * scale[2] + base[off];
      a[r * n_hc + c] = v;
      if (v > row_max) row_max = v;
    }
    float sum = 0.0f;
    for (int c = 0; c < n_hc; ++c) {
      const float e = detmath::exp_f32(a[r * n_hc + c] - row_max);
      a[r * n_hc + c] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int c = 0; c < n_hc; ++c) a[r * n_hc + c] = a[r * n_hc + c] * inv + eps;
  }
}

// §4.2 step 5: column normalization, then iters - 1 rounds of row then column normalization.
// T is float (one row) or a GCC vector of floats (one row per lane: the same operation
// sequence on every lane, so each lane's bits equal the scalar form's).
template <typename T>
void sinkhorn_iterate(T* a, int n_hc, int iters, float eps) {
  auto col_norm = [&]() {
    for (int c = 0; c < n_hc; ++c) {
      T sum = T{};
      for (int r = 0; r < n_hc; ++r) sum += a[r * n_hc + c];
      const T inv = 1.0f / (sum + eps);
      for (int r = 0; r < n_hc; ++r) a[r * n_hc + c] *= inv;
    }
  };
  col_norm();
  for (int it = 1; it < iters; ++it) {
    for (int r = 0; r < n_hc; ++r) {
      T sum = T{};
      for (int c = 0; c < n_hc; ++c) sum += a[r * n_hc + c];
      const T inv = 1.0f / (sum + eps);
      for (int c = 0; c < n_hc; ++c) a[r * n_hc + c] *= inv;
    }
    col_norm();
  }
}

}  // namespace

void hc_split_sinkhorn(const float* mix, const float* scale, const float* base, int n_hc,
                       int iters, float eps, float* pre, float* post, float* comb) {
  sinkhorn_init(mix, scale, base, n_hc, eps, pre, post, comb);
  sinkhorn_iterate(comb, n_hc, iters, eps);
}

void hc_pre_finish_rows(const HcPreParams& p) {
  DS4_CHECK(p.n_hc >= 1 && p.n_hc <= 16);
  const int64_t hc_dim = p.n_hc * p.n_embd;
  const int64_t mix_dim = 2 * p.n_hc + p.n_hc * p.n_hc;
  const int nn = p.n_hc * p.n_hc;
  // The Sinkhorn iterations of up to kLanes rows run side by side, one row per vector lane
  // (identical per-lane operation sequence); lanes past the last row repeat row i0.
  constexpr int kLanes = 8;
  typedef float LaneVec __attribute__((vector_size(4 * kLanes)));
  for (int i0 = 0; i0 < p.n_rows; i0 += kLanes) {
    const int g = p.n_rows - i0 < kLanes ? p.n_rows - i0 : kLanes;
    float pre[kLanes][16];
    for (int k = 0; k < g; ++k) {
      const int i = i0 + k;
      sinkhorn_init(p.mix + i * mix_dim, p.scale, p.base, p.n_hc, p.hc_eps, pre[k], p.post + i * p.n_hc,
                    p.comb + i * nn);
    }
    if (g == 1) {
      sinkhorn_iterate(p.comb + i0 * nn, p.n_hc, p.sinkhorn_iters, p.hc_eps);
    } else {
      LaneVec a[256];
      for (int e = 0; e < nn; ++e)
        for (int k = 0; k < kLanes; ++k) a[e][k] = p.comb[(i0 + (k < g ? k : 0)) * nn + e];
      sinkhorn_iterate(a, p.n_hc, p.sinkhorn_iters, p.hc_eps);
      for (int k = 0; k < g; ++k)
        for (int e = 0; e < nn; ++e) p.comb[(i0 + k) * nn + e] = a[e][k];
    }
    for (int k = 0; k < g; ++k) {
      const int i = i0 + k;
      const float* streams[16];
      const float* x = p.x + i * hc_dim;
      for (int h = 0; h < p.n_hc; ++h) streams[h] = x + h * p.n_embd;
      weighted_sum(nullptr, 0.0f, pre[k], streams, p.n_hc, p.y + i * p.n_embd, p.n_embd);
    }
  }
}

void hc_post_rows(const HcPostParams& p) {
  DS4_CHECK(p.n_hc >= 1 && p.n_hc <= 16);
  const int64_t hc_dim = p.n_hc * p.n_embd;
  for (int i = 0; i < p.n_rows; ++i) {
    const float* x = p.x + i * hc_dim;
    const float* comb = p.comb + i * p.n_hc * p.n_hc;
    const float* streams[16];
    for (int r = 0; r < p.n_hc; ++r) streams[r] = x + r * p.n_embd;
    for (int c = 0; c < p.n_hc; ++c) {
      float w[16];
      for (int r = 0; r < p.n_hc; ++r) w[r] = comb[r * p.n_hc + c];
      weighted_sum(p.f + i * p.n_embd, p.post[i * p.n_hc + c], w, streams, p.n_hc,
                   p.out + i * hc_dim + c * p.n_embd, p.n_embd);
    }
  }
}

namespace {

// Keys of element types KR (raw rows) and KC (compressed rows): float, or the target's
// stores (f16 bits, FP8 stores) decoded exactly, chunk by chunk, into a stack buffer. The heads
// [h_begin, h_end) of sink_attention_heads, the key chunks outer and the heads inner, so a
// chunk of stored keys is decoded once per pass for all the heads. Per head the operations are
// those of one head alone: the chunk size and the head range change no bit (every dot is its
// own; the weighted sum chains through oh exactly, y = oh·1).
template <typename KR, typename KC>
void sink_heads(const SinkAttentionParams& p, const KR* raw, const KC* comp, int64_t h_begin, int64_t h_end) {
  static_assert(std::is_same_v<KR, float> == std::is_same_v<KC, float>, "f32 keys or stored keys");
  const int D = p.head_dim;
  const float kq_scale = 1.0f / sqrtf(static_cast<float>(D));
  const int64_t n_all = p.n_raw + p.n_comp;
  // Elements per compressed row: D floats, or fp8_row_bytes(D, n_rot) bytes.
  const int64_t comp_stride = std::is_same_v<KC, float> ? D : ds4::quant::fp8_row_bytes(D, p.n_rot);
  // fn(keys, slots, n) for consecutive chunks of the keys in attention order (the raw window,
  // then the allowed compressed rows); slots index p.scores. Stack buffers: no allocation.
  constexpr int kChunk = 64;
  constexpr bool kWiden = !std::is_same_v<KR, float>;
  constexpr int64_t kWideFloats = kWiden ? 16384 : 1;  // stored keys decoded per chunk (64 KiB)
  const int chunk = kWiden ? static_cast<int>(std::min<int64_t>(kChunk, kWideFloats / D)) : kChunk;
  DS4_CHECK(chunk >= 1);
  auto for_chunks = [&](auto&& fn) {
    const float* kp[kChunk];
    int64_t sl[kChunk];
    [[maybe_unused]] float wide[kWideFloats];
    int n = 0;
    auto add = [&](const auto* key, int64_t slot) {
      using K = std::remove_cv_t<std::remove_pointer_t<decltype(key)>>;
      if constexpr (std::is_same_v<K, float>) {
        kp[n] = key;
      } else {
        float* w = wide + static_cast<int64_t>(n) * D;
        if constexpr (std::is_same_v<K, uint16_t>) {
          f16_to_f32_row(key, w, D);
        } else {
          ds4::quant::fp8_row_decode(key, D, p.n_rot, w);
        }
        kp[n] = w;
      }
      sl[n++] = slot;
      if (n == chunk) {
        fn(kp, sl, n);
        n = 0;
      }
    };
    // Ring slot of the oldest key, then advanced with a wrap (no division per key).
    int64_t slot = p.n_raw > 0 ? p.raw_first % p.raw_cap : 0;
    for (int r = 0; r < p.n_raw; ++r) {
      add(raw + slot * D, r);
      if (++slot == p.raw_cap) slot = 0;
    }
    for (int64_t c = 0; c < p.n_comp; ++c) {
      if (p.comp_allowed != nullptr && !p.comp_allowed[c]) continue;
      add(comp + c * comp_stride, p.n_raw + c);
    }
    if (n > 0) fn(kp, sl, n);
  };
  constexpr int64_t kRun = 64;  // heads per pass (their running max, denominator, first flag)
  for (int64_t h0 = h_begin; h0 < h_end; h0 += kRun) {
    const int64_t nh = std::min(kRun, h_end - h0);
    float mx[kRun], den[kRun];
    for (int64_t g = 0; g < nh; ++g) {
      float* score = p.scores + (h0 + g) * n_all;
      if (p.comp_allowed != nullptr) {
        for (int64_t c = 0; c < p.n_comp; ++c)
          if (!p.comp_allowed[c]) score[p.n_raw + c] = -1.0e30f;
      }
      mx[g] = p.sinks[h0 + g];
    }
    for_chunks([&](const float* const* kp, const int64_t* sl, int n) {
      for (int64_t g = 0; g < nh; ++g) {
        float* score = p.scores + (h0 + g) * n_all;
        float d[kChunk];
        dot_f32_many(p.q + (h0 + g) * D, kp, n, D, d);
        for (int t = 0; t < n; ++t) {
          const float sc = d[t] * kq_scale;
          score[sl[t]] = sc;
          if (sc > mx[g]) mx[g] = sc;
        }
      }
    });
    for (int64_t g = 0; g < nh; ++g) den[g] = detmath::exp_f32(p.sinks[h0 + g] - mx[g]);
    bool first = true;
    // Chunks chain through oh: y = oh·1 is exact, so the per-element sequence is unchanged.
    for_chunks([&](const float* const* kp, const int64_t* sl, int n) {
      for (int64_t g = 0; g < nh; ++g) {
        const float* score = p.scores + (h0 + g) * n_all;
        float* oh = p.out + (h0 + g) * D;
        float wv[kChunk];
        for (int t = 0; t < n; ++t) wv[t] = score[sl[t]];
        exp_sub_row(wv, mx[g], wv, n);
        for (int t = 0; t < n; ++t) den[g] += wv[t];
        weighted_sum(first ? nullptr : oh, 1.0f, wv, kp, n, oh, D);
      }
      first = false;
    });
    for (int64_t g = 0; g < nh; ++g) {
      float* oh = p.out + (h0 + g) * D;
      if (first)
        for (int j = 0; j < D; ++j) oh[j] = 0.0f;
      const float inv = 1.0f / den[g];
      for (int j = 0; j < D; ++j) oh[j] *= inv;
      if (p.n_rot > 0) rope_tail_rows(oh, 1, D, p.n_rot, p.pos, p.rope, true);
    }
  }
}

}  // namespace

void sink_attention_heads(const SinkAttentionParams& p, int64_t h_begin, int64_t h_end) {
  DS4_CHECK(p.keys_one_kind());
  DS4_CHECK(p.comp_fp8 == nullptr ||
            (p.n_rot >= 0 && p.n_rot <= p.head_dim && (p.head_dim - p.n_rot) % ds4::quant::kFp8BlockSize == 0));
  if (p.stored_keys()) {
    sink_heads(p, p.raw_f16, p.comp_fp8, h_begin, h_end);
  } else {
    sink_heads(p, p.raw, p.comp, h_begin, h_end);
  }
}

void attention_inputs_row(const AttentionInputsParams& p, int r) {
  const int64_t pos = p.pos0 + r;
  const int D = p.head_dim;
  if (p.q != nullptr) {
    float* q = p.q + r * p.q_stride;
    if (p.q_head_norm) {
      for (int h = 0; h < p.n_head; ++h) rms_norm_row(q + static_cast<int64_t>(h) * D, nullptr, q + h * D, D, p.norm_eps);
    }
    rope_tail_rows(q, p.n_head, D, p.n_rot, pos, p.rope, false);
  }
  float* kv = p.kv + static_cast<int64_t>(r) * D;
  if (p.kv_norm != nullptr) rms_norm_row(kv, p.kv_norm, kv, D, p.norm_eps);
  rope_tail_rows(kv, 1, D, p.n_rot, pos, p.rope, false);
  quant::fp8_e4m3_roundtrip(kv, D - p.n_rot);
  if (p.raw != nullptr) quant::f32_to_f16_row(kv, p.raw + (pos % p.raw_cap) * D, D);
  if (p.iq != nullptr && r >= p.idx_first) {
    const int nh = p.n_idx_head, dim = p.idx_dim;
    float* iq = p.iq + static_cast<int64_t>(r) * nh * dim;
    float* iw = p.iw + static_cast<int64_t>(r) * nh;
    rope_tail_rows(iq, nh, dim, p.n_rot, pos, p.rope, false);
    for (int k = 0; k < nh; ++k) quant::indexer_qat_row(iq + static_cast<int64_t>(k) * dim);
    for (int k = 0; k < nh; ++k) iw[k] = iw[k] * p.iw_scale;
  }
}

}  // namespace ds4::backend::cpu
