// core/rope.h — RoPE parameters of one layer (ds4-architecture.md §3.8).
//
// Role: the one struct both the model (which derives it from GGUF metadata,
// model::ModelConfig::rope_params) and the backend ops (which rotate by it) need; it lives
// here so that backend/ does not depend on model/. Also the angles themselves, defined once
// for the host and the device (rope_pair): every backend rotates by the same bits.
#pragma once

#include <cmath>
#include <cstdint>

#include "core/detmath.h"

namespace ds4 {

struct RopeParams {
  float freq_base = 10000.0f;
  float freq_scale = 1.0f;   // 1 / rope_scaling_factor for compressed layers
  float ext_factor = 0.0f;   // 1 for compressed layers (YaRN ramp on)
  float attn_factor = 1.0f;  // 1 / (1 + 0.1 ln(1/freq_scale)) for compressed layers
  uint32_t n_ctx_orig = 0;
  float beta_fast = 32.0f;
  float beta_slow = 1.0f;
};

// The per-call constants of the angles (they depend on the params and n_rot only), computed on
// the host with libm's powf / logf (rope_angles, core/rope.cpp) and handed to rope_pair.
struct RopeAngles {
  float theta_scale = 1.0f;  // freq_base^(-2/n_rot)
  float freq_scale = 1.0f;
  float ext_factor = 0.0f;
  float corr_lo = 0.0f, corr_hi = 0.0f;  // YaRN ramp ends (pair indices), when ext_factor != 0
  float mscale = 1.0f;       // attn_factor, · (1 + 0.1·ln(1/freq_scale)) when ext_factor != 0
};
RopeAngles rope_angles(const RopeParams& rp, int n_rot);

// §3.8: cos θ·mscale and sin θ·mscale of pair i (dims 2i, 2i+1 of the rotated tail) at pos:
// θ_extrap = pos·theta_scale^i (i sequential float products from (float)pos), θ = freq_scale·
// θ_extrap, or with YaRN θ·(1 - mix) + θ_extrap·mix, mix = ramp(i)·ext_factor; sin / cos from
// core/detmath.h. The inverse rotation uses -(sin θ·mscale), exact.
DS4_HD void rope_pair(const RopeAngles& a, int64_t pos, int i, float* c, float* s) {
  float theta_extrap = static_cast<float>(pos);
  for (int k = 0; k < i; ++k) theta_extrap *= a.theta_scale;
  const float theta_interp = a.freq_scale * theta_extrap;
  float theta = theta_interp;
  if (a.ext_factor != 0.0f) {
    const float y = (static_cast<float>(i) - a.corr_lo) / fmaxf(0.001f, a.corr_hi - a.corr_lo);
    const float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
    const float ramp_mix = ramp * a.ext_factor;
    theta = theta_interp * (1.0f - ramp_mix) + theta_extrap * ramp_mix;
  }
  float sn, cs;
  detmath::sincos_f32(theta, &sn, &cs);
  *c = cs * a.mscale;
  *s = sn * a.mscale;
}

}  // namespace ds4
