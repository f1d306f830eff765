// core/rope.h — RoPE parameters of one layer (ds4-architecture.md §3.8).
//
// Role: the one struct both the model (which derives it from GGUF metadata,
// model::ModelConfig::rope_params) and the backend ops (which rotate by it) need; it lives
// here so that backend/ does not depend on model/.
#pragma once

#include <cstdint>

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

}  // namespace ds4
