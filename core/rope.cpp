// core/rope.cpp — the host-side constants of the RoPE angles (core/rope.h, §3.8).
#include "core/rope.h"

#include <cmath>

namespace ds4 {

namespace {

// The YaRN correction dimension: the pair index where the wavelength equals n_ctx_orig/beta.
float yarn_corr_dim(int n_dims, uint32_t n_ctx_orig, float beta, float base) {
  return static_cast<float>(n_dims) *
         logf(static_cast<float>(n_ctx_orig) / (beta * 2.0f * static_cast<float>(M_PI))) / (2.0f * logf(base));
}

}  // namespace

RopeAngles rope_angles(const RopeParams& rp, int n_rot) {
  RopeAngles a;
  a.theta_scale = powf(rp.freq_base, -2.0f / static_cast<float>(n_rot));
  a.freq_scale = rp.freq_scale;
  a.ext_factor = rp.ext_factor;
  a.mscale = rp.attn_factor;
  if (rp.ext_factor != 0.0f) {
    const float start = floorf(yarn_corr_dim(n_rot, rp.n_ctx_orig, rp.beta_fast, rp.freq_base));
    const float end = ceilf(yarn_corr_dim(n_rot, rp.n_ctx_orig, rp.beta_slow, rp.freq_base));
    a.corr_lo = fmaxf(0.0f, start);
    a.corr_hi = fminf(static_cast<float>(n_rot - 1), end);
    a.mscale *= 1.0f + 0.1f * logf(1.0f / rp.freq_scale);
  }
  return a;
}

}  // namespace ds4
