// backend/cpu/cpu_ops.cpp — scalar formulas of ds4-architecture.md §3 in source order.
// Strict IEEE (-ffp-contract=off): every a*b+c below is two rounded operations.
#include "backend/cpu/cpu_ops.h"

#include <cmath>

namespace ds4::backend::cpu {

void rms_norm_row(const float* x, const float* w, float* out, int64_t n, float eps) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) ss += static_cast<double>(x[i]) * x[i];
  const float scale = 1.0f / sqrtf(static_cast<float>(ss / static_cast<double>(n)) + eps);
  if (w != nullptr) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

namespace {

// Rows [0, G) of the group: per row the same Σ (double)x·x in index order as rms_norm_row.
template <int G>
void rms_group(const float* x, const float* w, float* out, int64_t n, int64_t stride, float eps) {
  double ss[G];
  for (int k = 0; k < G; ++k) ss[k] = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    for (int k = 0; k < G; ++k) {
      const float v = x[k * stride + i];
      ss[k] += static_cast<double>(v) * v;
    }
  }
  for (int k = 0; k < G; ++k) {
    const float scale = 1.0f / sqrtf(static_cast<float>(ss[k] / static_cast<double>(n)) + eps);
    const float* xr = x + k * stride;
    float* o = out + k * stride;
    if (w != nullptr) {
      for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * scale * w[i];
    } else {
      for (int64_t i = 0; i < n; ++i) o[i] = xr[i] * scale;
    }
  }
}

float yarn_corr_dim(int n_dims, uint32_t n_ctx_orig, float beta, float base) {
  return static_cast<float>(n_dims) *
         logf(static_cast<float>(n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) /
         (2.0f * logf(base));
}

float yarn_ramp(float low, float high, int k) {
  const float y = (static_cast<float>(k) - low) / fmaxf(0.001f, high - low);
  return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

}  // namespace

void rope_tail_rows(float* x, int n_head, int head_dim, int n_rot, int64_t pos,
                    const model::RopeParams& rp, bool inverse) {
  const int n_nope = head_dim - n_rot;
  const float sin_sign = inverse ? -1.0f : 1.0f;
  float theta_scale = 0.0f, corr_lo = 0.0f, corr_hi = 0.0f;
  auto prepare = [&] {
    theta_scale = powf(rp.freq_base, -2.0f / static_cast<float>(n_rot));
    if (rp.ext_factor != 0.0f) {
      const float start = floorf(yarn_corr_dim(n_rot, rp.n_ctx_orig, rp.beta_fast, rp.freq_base));
      const float end = ceilf(yarn_corr_dim(n_rot, rp.n_ctx_orig, rp.beta_slow, rp.freq_base));
      corr_lo = fmaxf(0.0f, start);
      corr_hi = fminf(static_cast<float>(n_rot - 1), end);
    }
  };
  // The angles depend on (pos, rope params, pair index) only, so cos·mscale and sin·mscale
  // are computed once per call and reused for every head, and kept for the next call with the
  // same key (q, kv, inverse and indexer RoPE of one row share them). The inverse's sign is
  // applied as (−sin)·mscale = −(sin·mscale), exact, so the values are the per-head formula's.
  constexpr int kMaxPairs = 128;
  struct Cache {
    bool valid = false;
    int64_t pos = 0;
    int n_rot = 0;
    model::RopeParams rp;
    float cs[kMaxPairs], sn[kMaxPairs];
  };
  thread_local Cache cache;
  const bool hit = cache.valid && cache.pos == pos && cache.n_rot == n_rot &&
                   cache.rp.freq_base == rp.freq_base && cache.rp.freq_scale == rp.freq_scale &&
                   cache.rp.ext_factor == rp.ext_factor && cache.rp.attn_factor == rp.attn_factor &&
                   cache.rp.n_ctx_orig == rp.n_ctx_orig && cache.rp.beta_fast == rp.beta_fast &&
                   cache.rp.beta_slow == rp.beta_slow;
  if (n_rot > 2 * kMaxPairs) {
    // Not cached (no such model today): the per-head formula.
    prepare();
    for (int h = 0; h < n_head; ++h) {
      float* tail = x + static_cast<int64_t>(h) * head_dim + n_nope;
      float theta_extrap = static_cast<float>(pos);
      for (int i = 0; i < n_rot; i += 2) {
        const float theta_interp = rp.freq_scale * theta_extrap;
        float theta = theta_interp;
        float mscale = rp.attn_factor;
        if (rp.ext_factor != 0.0f) {
          const float ramp_mix = yarn_ramp(corr_lo, corr_hi, i / 2) * rp.ext_factor;
          theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
          mscale *= 1.0f + 0.1f * logf(1.0f / rp.freq_scale);
        }
        const float c = cosf(theta) * mscale;
        const float s = sin_sign * sinf(theta) * mscale;
        const float x0 = tail[i];
        const float x1 = tail[i + 1];
        tail[i] = x0 * c - x1 * s;
        tail[i + 1] = x0 * s + x1 * c;
        theta_extrap *= theta_scale;
      }
    }
    return;
  }
  if (!hit) {
    prepare();
    float theta_extrap = static_cast<float>(pos);
    for (int i = 0; i < n_rot; i += 2) {
      const float theta_interp = rp.freq_scale * theta_extrap;
      float theta = theta_interp;
      float mscale = rp.attn_factor;
      if (rp.ext_factor != 0.0f) {
        const float ramp_mix = yarn_ramp(corr_lo, corr_hi, i / 2) * rp.ext_factor;
        theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
        mscale *= 1.0f + 0.1f * logf(1.0f / rp.freq_scale);
      }
      cache.cs[i / 2] = cosf(theta) * mscale;
      cache.sn[i / 2] = sinf(theta) * mscale;
      theta_extrap *= theta_scale;
    }
    cache.valid = true;
    cache.pos = pos;
    cache.n_rot = n_rot;
    cache.rp = rp;
  }
  for (int h = 0; h < n_head; ++h) {
    float* tail = x + static_cast<int64_t>(h) * head_dim + n_nope;
    for (int i = 0; i < n_rot; i += 2) {
      const float c = cache.cs[i / 2];
      const float s = inverse ? -cache.sn[i / 2] : cache.sn[i / 2];
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
    const float* xi = x + i * stride;
    float* oi = out + i * stride;
    switch (n_rows - i < 8 ? n_rows - i : 8) {
      case 1: rms_group<1>(xi, w, oi, n, stride, eps); break;
      case 2: rms_group<2>(xi, w, oi, n, stride, eps); break;
      case 3: rms_group<3>(xi, w, oi, n, stride, eps); break;
      case 4: rms_group<4>(xi, w, oi, n, stride, eps); break;
      case 5: rms_group<5>(xi, w, oi, n, stride, eps); break;
      case 6: rms_group<6>(xi, w, oi, n, stride, eps); break;
      case 7: rms_group<7>(xi, w, oi, n, stride, eps); break;
      default: rms_group<8>(xi, w, oi, n, stride, eps); break;
    }
  }
}

float sigmoid_stable(float x) {
  if (x >= 0.0f) {
    const float e = expf(-x);
    return 1.0f / (1.0f + e);
  }
  const float e = expf(x);
  return e / (1.0f + e);
}

float softplus_stable(float x) {
  if (x > 20.0f) return x;
  if (x < -20.0f) return expf(x);
  return log1pf(expf(x));
}

void hc_split_sinkhorn(const float* mix, const float* scale, const float* base, int n_hc,
                       int iters, float eps, float* pre, float* post, float* comb) {
  for (int i = 0; i < n_hc; ++i) {
    const float z = mix[i] * scale[0] + base[i];
    pre[i] = 1.0f / (1.0f + expf(-z)) + eps;
  }
  for (int i = 0; i < n_hc; ++i) {
    const int off = n_hc + i;
    const float z = mix[off] * scale[1] + base[off];
    post[i] = 2.0f / (1.0f + expf(-z));
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
      const float e = expf(a[r * n_hc + c] - row_max);
      a[r * n_hc + c] = e;
      sum += e;
    }
    const float inv = 1.0f / sum;
    for (int c = 0; c < n_hc; ++c) a[r * n_hc + c] = a[r * n_hc + c] * inv + eps;
  }
  auto col_norm = [&]() {
    for (int c = 0; c < n_hc; ++c) {
      float sum = 0.0f;
      for (int r = 0; r < n_hc; ++r) sum += a[r * n_hc + c];
      const float inv = 1.0f / (sum + eps);
      for (int r = 0; r < n_hc; ++r) a[r * n_hc + c] *= inv;
    }
  };
  col_norm();
  for (int it = 1; it < iters; ++it) {
    for (int r = 0; r < n_hc; ++r) {
      float sum = 0.0f;
      for (int c = 0; c < n_hc; ++c) sum += a[r * n_hc + c];
      const float inv = 1.0f / (sum + eps);
      for (int c = 0; c < n_hc; ++c) a[r * n_hc + c] *= inv;
    }
    col_norm();
  }
}

}  // namespace ds4::backend::cpu
