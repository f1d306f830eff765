// model/profiles.cpp — the `tiny` and `flash` presets (see profiles.h).
#include "model/profiles.h"

#include <string>

namespace ds4::model {

namespace {

// Fields shared by both presets: the Flash values that do not set a size.
void set_common(ModelConfig& c) {
  c.n_head_kv = 1;
  c.n_expert_shared = 1;
  c.expert_group_count = 0;
  c.expert_group_used_count = 0;
  c.n_hc = 4;
  c.n_hc_sinkhorn_iter = 20;
  c.rms_eps = 1e-6f;
  c.hc_eps = 1e-6f;
  c.expert_weights_scale = 1.5f;
  c.expert_weights_norm = true;
  c.rope_freq_base = 10000.0f;
  c.compress_rope_freq_base = 160000.0f;
  c.rope_scaling_factor = 16.0f;
  c.rope_orig_ctx = 65536;
  c.yarn_beta_fast = 32.0f;
  c.yarn_beta_slow = 1.0f;
  c.n_hash_layer = 3;
}

void set_layer_arrays(ModelConfig& c) {
  c.compress_ratios.resize(c.n_layer);
  for (uint32_t il = 0; il < c.n_layer; ++il) c.compress_ratios[il] = expected_compress_ratio(il);
  c.swiglu_clamp.assign(c.n_layer, 10.0f);
}

}  // namespace

ModelConfig tiny_profile() {
  ModelConfig c;
  set_common(c);
  c.name = "ds4-tiny";
  c.context_length = 4096;
  c.n_layer = 8;
  c.n_embd = 256;
  c.n_vocab = 8192;
  c.n_head = 8;
  c.head_dim = 128;
  c.value_dim = 128;
  c.n_rot = 64;
  c.q_lora_rank = 64;
  c.o_lora_rank = 64;
  c.n_out_group = 4;
  c.n_expert = 16;
  c.n_expert_used = 4;
  c.n_ff_exp = 256;
  c.n_swa = 32;
  c.n_indexer_head = 4;
  c.indexer_head_dim = 128;
  c.indexer_top_k = 16;
  set_layer_arrays(c);
  return c;
}

ModelConfig flash_profile() {
  ModelConfig c;
  set_common(c);
  c.name = "DeepSeek-V4-Flash";
  c.context_length = 1048576;
  c.n_layer = 43;
  c.n_embd = 4096;
  c.n_vocab = 129280;
  c.n_head = 64;
  c.head_dim = 512;
  c.value_dim = 512;
  c.n_rot = 64;
  c.q_lora_rank = 1024;
  c.o_lora_rank = 1024;
  c.n_out_group = 8;
  c.n_expert = 256;
  c.n_expert_used = 6;
  c.n_ff_exp = 2048;
  c.n_swa = 128;
  c.n_indexer_head = 64;
  c.indexer_head_dim = 128;
  c.indexer_top_k = 512;
  set_layer_arrays(c);
  return c;
}

Status set_layer_count(ModelConfig& c, uint32_t n_layer) {
  // Layers 0-3 hold both uncompressed layers, one of each ratio (4, 128) and the hash layers.
  const uint32_t min_layers = c.n_hash_layer + 1 > 4 ? c.n_hash_layer + 1 : 4;
  if (n_layer < min_layers || n_layer > c.n_layer) {
    return invalid_argument("layer count %u: expected %u..%u for profile '%s' (the hash layers plus one layer of "
                            "each compression ratio, at most the profile's depth)",
                            n_layer, min_layers, c.n_layer, c.name.c_str());
  }
  c.n_layer = n_layer;
  set_layer_arrays(c);
  return Status();
}

std::vector<std::string_view> profile_names() { return {"tiny", "flash"}; }

Expected<ModelConfig> profile_by_name(std::string_view name) {
  if (name == "tiny") return tiny_profile();
  if (name == "flash") return flash_profile();
  return invalid_argument("unknown profile '%.*s', expected 'tiny' or 'flash'",
                          static_cast<int>(name.size()), name.data());
}

}  // namespace ds4::model
