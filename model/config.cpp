// model/config.cpp — reading, validating and comparing ModelConfig (see config.h).
//
// The key table below is the one list of deepseek4.* keys: reading, diffing and the
// generator's metadata writer all iterate it, so a key cannot be read but not written.
#include "model/config.h"

#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstdio>

#include "gguf/gguf.h"

namespace ds4::model {

namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

struct U32Field {
  const char* key;
  uint32_t ModelConfig::*field;
  bool required;
  uint32_t def;
};
struct F32Field {
  const char* key;
  float ModelConfig::*field;
  bool required;
  float def;
};

// Integer keys (any GGUF integer type whose value fits in u32 is accepted).
const U32Field kU32Fields[] = {
    {"deepseek4.block_count", &ModelConfig::n_layer, true, 0},
    {"deepseek4.embedding_length", &ModelConfig::n_embd, true, 0},
    // vocab_size: falls back to len(tokenizer.ggml.tokens) when absent (handled in read).
    {"deepseek4.vocab_size", &ModelConfig::n_vocab, false, 0},
    {"deepseek4.attention.head_count", &ModelConfig::n_head, true, 0},
    {"deepseek4.attention.head_count_kv", &ModelConfig::n_head_kv, true, 0},
    {"deepseek4.attention.key_length", &ModelConfig::head_dim, true, 0},
    {"deepseek4.attention.value_length", &ModelConfig::value_dim, true, 0},
    {"deepseek4.rope.dimension_count", &ModelConfig::n_rot, true, 0},
    {"deepseek4.attention.q_lora_rank", &ModelConfig::q_lora_rank, true, 0},
    {"deepseek4.attention.output_lora_rank", &ModelConfig::o_lora_rank, true, 0},
    {"deepseek4.attention.output_group_count", &ModelConfig::n_out_group, true, 0},
    {"deepseek4.expert_count", &ModelConfig::n_expert, true, 0},
    {"deepseek4.expert_used_count", &ModelConfig::n_expert_used, true, 0},
    {"deepseek4.expert_shared_count", &ModelConfig::n_expert_shared, true, 0},
    {"deepseek4.expert_feed_forward_length", &ModelConfig::n_ff_exp, true, 0},
    {"deepseek4.hash_layer_count", &ModelConfig::n_hash_layer, true, 0},
    {"deepseek4.expert_group_count", &ModelConfig::expert_group_count, false, 0},
    {"deepseek4.expert_group_used_count", &ModelConfig::expert_group_used_count, false, 0},
    {"deepseek4.attention.sliding_window", &ModelConfig::n_swa, true, 0},
    {"deepseek4.attention.indexer.head_count", &ModelConfig::n_indexer_head, true, 0},
    {"deepseek4.attention.indexer.key_length", &ModelConfig::indexer_head_dim, true, 0},
    {"deepseek4.attention.indexer.top_k", &ModelConfig::indexer_top_k, true, 0},
    {"deepseek4.hyper_connection.count", &ModelConfig::n_hc, true, 0},
    {"deepseek4.hyper_connection.sinkhorn_iterations", &ModelConfig::n_hc_sinkhorn_iter, true, 0},
    {"deepseek4.rope.scaling.original_context_length", &ModelConfig::rope_orig_ctx, true, 0},
};

const F32Field kF32Fields[] = {
    {"deepseek4.attention.layer_norm_rms_epsilon", &ModelConfig::rms_eps, true, 0},
    {"deepseek4.hyper_connection.epsilon", &ModelConfig::hc_eps, true, 0},
    {"deepseek4.expert_weights_scale", &ModelConfig::expert_weights_scale, true, 0},
    {"deepseek4.rope.freq_base", &ModelConfig::rope_freq_base, true, 0},
    {"deepseek4.attention.compress_rope_freq_base", &ModelConfig::compress_rope_freq_base, true, 0},
    {"deepseek4.rope.scaling.factor", &ModelConfig::rope_scaling_factor, true, 0},
    {"deepseek4.rope.scaling.yarn_beta_fast", &ModelConfig::yarn_beta_fast, true, 0},
    {"deepseek4.rope.scaling.yarn_beta_slow", &ModelConfig::yarn_beta_slow, true, 0},
};

constexpr const char* kContextLengthKey = "deepseek4.context_length";
constexpr const char* kWeightsNormKey = "deepseek4.expert_weights_norm";
constexpr const char* kRatiosKey = "deepseek4.attention.compress_ratios";
constexpr const char* kSwigluKey = "deepseek4.swiglu_clamp_exp";
constexpr const char* kEpsKey = "deepseek4.attention.layer_norm_rms_epsilon";

std::vector<ConfigKey> build_key_table() {
  std::vector<ConfigKey> keys;
  keys.push_back({kContextLengthKey, KeyType::kU64, false});
  for (const auto& f : kU32Fields) keys.push_back({f.key, KeyType::kU32, f.required});
  for (const auto& f : kF32Fields) keys.push_back({f.key, KeyType::kF32, f.required});
  keys.push_back({kWeightsNormKey, KeyType::kBool, false});
  keys.push_back({kSwigluKey, KeyType::kArrayF32, true});
  keys.push_back({kRatiosKey, KeyType::kArrayU32, true});
  return keys;
}

bool is_pow2(uint32_t v) { return v != 0 && (v & (v - 1)) == 0; }

bool is_integer_type(gguf::ValueType t) {
  using gguf::ValueType;
  switch (t) {
    case ValueType::kU8: case ValueType::kI8: case ValueType::kU16: case ValueType::kI16:
    case ValueType::kU32: case ValueType::kI32: case ValueType::kU64: case ValueType::kI64:
      return true;
    default:
      return false;
  }
}

}  // namespace

const char* layer_kind_name(LayerKind kind) {
  switch (kind) {
    case LayerKind::kDense: return "dense";
    case LayerKind::kRatio4: return "ratio4";
    case LayerKind::kRatio128: return "ratio128";
  }
  return "?";
}

LayerKind ModelConfig::layer_kind(uint32_t il) const {
  const uint32_t r = compress_ratios[il];
  return r == 0 ? LayerKind::kDense : (r == 4 ? LayerKind::kRatio4 : LayerKind::kRatio128);
}

uint32_t ModelConfig::coff(uint32_t il) const {
  const uint32_t r = compress_ratios[il];
  return r == 0 ? 0u : (r == 4 ? 2u : 1u);
}

uint64_t ModelConfig::n_comp_rows(uint32_t il, uint64_t n_tokens) const {
  const uint32_t r = compress_ratios[il];
  return r == 0 ? 0 : n_tokens / r;
}

uint64_t ModelConfig::comp_capacity(uint32_t il, uint64_t ctx) const {
  const uint32_t r = compress_ratios[il];
  return r == 0 ? 0 : ctx / r + 2;
}

RopeParams ModelConfig::rope_params(uint32_t il) const {
  RopeParams p;
  p.n_ctx_orig = rope_orig_ctx;
  p.beta_fast = yarn_beta_fast;
  p.beta_slow = yarn_beta_slow;
  if (compress_ratios[il] == 0) {
    p.freq_base = rope_freq_base;
    p.freq_scale = 1.0f;
    p.ext_factor = 0.0f;
    p.attn_factor = 1.0f;
  } else {
    p.freq_base = compress_rope_freq_base;
    p.freq_scale = 1.0f / rope_scaling_factor;
    p.ext_factor = 1.0f;
    // Pre-cancels YaRN's magnitude scaling (§3.8): the kernel multiplies by (1 + 0.1 ln(1/s)).
    p.attn_factor = 1.0f / (1.0f + 0.1f * logf(1.0f / p.freq_scale));
  }
  return p;
}

uint32_t ModelConfig::count_layers(LayerKind kind) const {
  uint32_t n = 0;
  for (uint32_t il = 0; il < n_layer && il < compress_ratios.size(); ++il) n += layer_kind(il) == kind;
  return n;
}

bool float_matches(double got, double want) {
  const double tol = std::max(1.0, std::fabs(want)) * 1e-6;
  return std::fabs(got - want) <= tol;
}

std::span<const ConfigKey> config_keys() {
  static const std::vector<ConfigKey> kKeys = build_key_table();
  return kKeys;
}

std::vector<ConfigValue> config_values(const ModelConfig& c) {
  std::vector<ConfigValue> out;
  for (const ConfigKey& k : config_keys()) {
    ConfigValue v;
    v.key = k.key;
    v.type = k.type;
    const std::string_view key = k.key;
    if (key == kContextLengthKey) {
      v.u = c.context_length;
    } else if (key == kWeightsNormKey) {
      v.b = c.expert_weights_norm;
    } else if (key == kRatiosKey) {
      v.au = c.compress_ratios;
    } else if (key == kSwigluKey) {
      v.af = c.swiglu_clamp;
    } else if (k.type == KeyType::kU32) {
      for (const auto& f : kU32Fields)
        if (key == f.key) v.u = c.*f.field;
    } else {
      for (const auto& f : kF32Fields)
        if (key == f.key) v.f = c.*f.field;
    }
    out.push_back(std::move(v));
  }
  return out;
}

std::vector<std::string> validate_config(const ModelConfig& c) {
  std::vector<std::string> p;
  auto need = [&](bool ok, const std::string& msg) {
    if (!ok) p.push_back(msg);
  };
  const char* K = "deepseek4.";
  // Positivity of every size.
  struct Pos {
    const char* key;
    uint32_t v;
  };
  const Pos pos[] = {
      {"block_count", c.n_layer}, {"embedding_length", c.n_embd}, {"vocab_size", c.n_vocab},
      {"attention.head_count", c.n_head}, {"attention.key_length", c.head_dim},
      {"rope.dimension_count", c.n_rot}, {"attention.q_lora_rank", c.q_lora_rank},
      {"attention.output_lora_rank", c.o_lora_rank},
      {"attention.output_group_count", c.n_out_group}, {"expert_count", c.n_expert},
      {"expert_used_count", c.n_expert_used}, {"expert_feed_forward_length", c.n_ff_exp},
      {"attention.sliding_window", c.n_swa}, {"attention.indexer.head_count", c.n_indexer_head},
      {"attention.indexer.key_length", c.indexer_head_dim},
      {"attention.indexer.top_k", c.indexer_top_k}, {"hyper_connection.count", c.n_hc},
      {"hyper_connection.sinkhorn_iterations", c.n_hc_sinkhorn_iter},
      {"rope.scaling.original_context_length", c.rope_orig_ctx},
  };
  bool sizes_ok = true;
  for (const auto& e : pos) {
    if (e.v == 0) {
      p.push_back(fmt("%s%s: expected > 0, got 0", K, e.key));
      sizes_ok = false;
    }
  }
  need(c.n_head_kv == 1, fmt("%sattention.head_count_kv: expected 1 (one shared K=V head), got %u",
                             K, c.n_head_kv));
  need(c.value_dim == c.head_dim,
       fmt("%sattention.value_length: expected %u (== attention.key_length, K = V), got %u", K,
           c.head_dim, c.value_dim));
  if (c.n_rot != 0) {
    need(c.n_rot % 2 == 0, fmt("%srope.dimension_count: expected an even number, got %u", K, c.n_rot));
    need(c.n_rot <= c.head_dim,
         fmt("%srope.dimension_count: expected <= attention.key_length (%u), got %u", K,
             c.head_dim, c.n_rot));
    need(c.n_rot <= c.indexer_head_dim,
         fmt("%srope.dimension_count: expected <= attention.indexer.key_length (%u), got %u", K,
             c.indexer_head_dim, c.n_rot));
    if (c.n_rot <= c.head_dim)
      need((c.head_dim - c.n_rot) % 64 == 0,
           fmt("%sattention.key_length: expected key_length - rope.dimension_count to be a "
               "multiple of 64 (FP8 KV blocks), got %u - %u = %u",
               K, c.head_dim, c.n_rot, c.head_dim - c.n_rot));
  }
  need(c.n_embd % 256 == 0,
       fmt("%sembedding_length: expected a multiple of 256 (Q8_K blocks), got %u", K, c.n_embd));
  need(c.n_ff_exp % 256 == 0,
       fmt("%sexpert_feed_forward_length: expected a multiple of 256 (Q2_K/Q4_K/Q8_K blocks), "
           "got %u", K, c.n_ff_exp));
  need(c.q_lora_rank % 32 == 0,
       fmt("%sattention.q_lora_rank: expected a multiple of 32 (Q8_0 blocks), got %u", K,
           c.q_lora_rank));
  need(c.o_lora_rank % 32 == 0,
       fmt("%sattention.output_lora_rank: expected a multiple of 32 (Q8_0 blocks), got %u", K,
           c.o_lora_rank));
  if (c.n_out_group != 0) {
    need(c.n_out_group <= kMaxOutGroups,
         fmt("%sattention.output_group_count: expected at most %u, got %u", K, kMaxOutGroups, c.n_out_group));
    need(c.n_head % c.n_out_group == 0,
         fmt("%sattention.head_count: expected a multiple of attention.output_group_count (%u), "
             "got %u", K, c.n_out_group, c.n_head));
    if (c.n_head % c.n_out_group == 0)
      need(c.group_dim() % 32 == 0,
           fmt("%sattention.key_length: expected key_length * head_count / output_group_count "
               "to be a multiple of 32 (Q8_0 blocks), got %u", K, c.group_dim()));
  }
  need(c.indexer_head_dim == 0 || (is_pow2(c.indexer_head_dim) && c.indexer_head_dim >= 32),
       fmt("%sattention.indexer.key_length: expected a power of two >= 32 (Hadamard + FP4 "
           "blocks of 32), got %u", K, c.indexer_head_dim));
  need(c.n_expert_used <= c.n_expert,
       fmt("%sexpert_used_count: expected <= expert_count (%u), got %u", K, c.n_expert,
           c.n_expert_used));
  need(c.n_expert_shared == 1,
       fmt("%sexpert_shared_count: expected 1 (one shared expert tensor set), got %u", K,
           c.n_expert_shared));
  need(c.n_hash_layer <= c.n_layer,
       fmt("%shash_layer_count: expected <= block_count (%u), got %u", K, c.n_layer,
           c.n_hash_layer));
  need(c.expert_group_count == 0,
       fmt("%sexpert_group_count: expected 0 (no group-limited routing), got %u", K,
           c.expert_group_count));
  need(c.expert_group_used_count == 0,
       fmt("%sexpert_group_used_count: expected 0 (no group-limited routing), got %u", K,
           c.expert_group_used_count));

  auto pos_float = [&](const char* key, float v) {
    need(std::isfinite(v) && v > 0.0f, fmt("%s%s: expected a finite value > 0, got %g", K, key, v));
  };
  pos_float("attention.layer_norm_rms_epsilon", c.rms_eps);
  pos_float("hyper_connection.epsilon", c.hc_eps);
  pos_float("expert_weights_scale", c.expert_weights_scale);
  pos_float("rope.freq_base", c.rope_freq_base);
  pos_float("attention.compress_rope_freq_base", c.compress_rope_freq_base);
  pos_float("rope.scaling.yarn_beta_fast", c.yarn_beta_fast);
  pos_float("rope.scaling.yarn_beta_slow", c.yarn_beta_slow);
  need(std::isfinite(c.rope_scaling_factor) && c.rope_scaling_factor >= 1.0f,
       fmt("%srope.scaling.factor: expected a finite value >= 1, got %g", K, c.rope_scaling_factor));

  // Per-layer arrays.
  if (c.compress_ratios.size() != c.n_layer) {
    p.push_back(fmt("%s: expected %u entries (block_count), got %zu", kRatiosKey, c.n_layer,
                    c.compress_ratios.size()));
  } else {
    for (uint32_t il = 0; il < c.n_layer; ++il) {
      const uint32_t want = expected_compress_ratio(il);
      if (c.compress_ratios[il] != want) {
        p.push_back(fmt("%s[%u]: expected %u (layer pattern: 0 for layers 0-1, 4 for even, 128 "
                        "for odd layers), got %u",
                        kRatiosKey, il, want, c.compress_ratios[il]));
      }
    }
  }
  if (c.swiglu_clamp.size() != c.n_layer) {
    p.push_back(fmt("%s: expected %u entries (block_count), got %zu", kSwigluKey, c.n_layer,
                    c.swiglu_clamp.size()));
  } else {
    for (uint32_t il = 0; il < c.n_layer; ++il) {
      const float v = c.swiglu_clamp[il];
      need(std::isfinite(v) && v > 0.0f,
           fmt("%s[%u]: expected a finite value > 0, got %g", kSwigluKey, il, v));
    }
  }
  (void)sizes_ok;
  return p;
}

Status check_config(const ModelConfig& cfg) {
  const auto problems = validate_config(cfg);
  if (problems.empty()) return Status::ok_status();
  std::string msg = "invalid DS4 config: ";
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i) msg += "; ";
    msg += problems[i];
  }
  return Status(ErrorCode::kInvalidArgument, msg);
}

ModelConfig read_config(const gguf::File& file, std::vector<std::string>* problems) {
  ModelConfig c;
  auto problem = [&](std::string s) {
    if (problems) problems->push_back(std::move(s));
  };
  c.name = file.get_string_or("general.name", "").ok() ? *file.get_string_or("general.name", "")
                                                       : std::string();
  {
    auto arch = file.get_string_or("general.architecture", kArchitecture);
    if (!arch.ok()) {
      problem(arch.status().message());
    } else if (*arch != kArchitecture) {
      // The 0731 DSpark support file is a GGUF of its own architecture: say what it is.
      const char* hint = *arch == "deepseek4-dspark"
                             ? " (this is a DSpark support file: load it as the drafter, next to the model)"
                             : "";
      problem(fmt("general.architecture is '%s', expected '%s'%s", arch->c_str(), kArchitecture, hint));
      return c;  // a different model family: its keys would only produce noise
    }
  }
  {
    // Informative; the 0731 release names its checkpoint here (preview files carry none).
    auto rev = file.get_string_or("general.source.revision", "");
    if (rev.ok()) c.source_revision = *rev; else problem(rev.status().message());
  }
  {
    auto v = file.get_u64_or(kContextLengthKey, 0);
    if (v.ok()) c.context_length = *v; else problem(v.status().message());
  }
  for (const auto& f : kU32Fields) {
    if (!file.has(f.key)) {
      c.*f.field = f.def;
      if (f.required) problem(fmt("%s: missing (required integer key)", f.key));
      continue;
    }
    auto v = file.get_u32(f.key);
    if (v.ok()) c.*f.field = *v; else problem(v.status().message());
  }
  if (!file.has("deepseek4.vocab_size")) {
    auto toks = file.get_array_string_views("tokenizer.ggml.tokens");
    if (toks.ok()) {
      c.n_vocab = static_cast<uint32_t>(toks->size());
    } else {
      problem("deepseek4.vocab_size: missing, and tokenizer.ggml.tokens is not there to infer it");
    }
  }
  for (const auto& f : kF32Fields) {
    const gguf::KeyValue* kv = file.find(f.key);
    if (!kv) {
      c.*f.field = f.def;
      if (f.required) problem(fmt("%s: missing (required float key)", f.key));
      continue;
    }
    // The eps key also accepts integer types (ds4 reads f32/f64/u32/i32 there).
    if (std::string_view(f.key) == kEpsKey && is_integer_type(kv->type)) {
      auto v = file.get_i64(f.key);
      if (v.ok()) c.*f.field = static_cast<float>(*v); else problem(v.status().message());
      continue;
    }
    auto v = file.get_f32(f.key);
    if (v.ok()) c.*f.field = *v; else problem(v.status().message());
  }
  {
    auto v = file.get_bool_or(kWeightsNormKey, true);
    if (v.ok()) c.expert_weights_norm = *v; else problem(v.status().message());
  }
  if (!file.has(kRatiosKey)) {
    problem(fmt("%s: missing (required u32/i32 array)", kRatiosKey));
  } else {
    const gguf::KeyValue* kv = file.find(kRatiosKey);
    if (!kv->is_array() || !is_integer_type(kv->array_type)) {
      problem(fmt("%s: expected an array of u32 or i32, got %s", kRatiosKey,
                  kv->type_string().c_str()));
    } else {
      auto v = file.get_array_i64(kRatiosKey);
      if (!v.ok()) {
        problem(v.status().message());
      } else if (v->size() < c.n_layer) {
        problem(fmt("%s: expected at least %u entries (block_count), got %zu", kRatiosKey,
                    c.n_layer, v->size()));
      } else {
        for (uint32_t il = 0; il < c.n_layer; ++il) {
          const int64_t r = (*v)[il];
          if (r < 0 || r > UINT32_MAX) {
            problem(fmt("%s[%u]: expected 0, 4 or 128, got %" PRId64, kRatiosKey, il, r));
            c.compress_ratios.push_back(UINT32_MAX);
          } else {
            c.compress_ratios.push_back(static_cast<uint32_t>(r));
          }
        }
      }
    }
  }
  if (!file.has(kSwigluKey)) {
    problem(fmt("%s: missing (required f32/f64 array)", kSwigluKey));
  } else {
    auto v = file.get_array_f32(kSwigluKey);
    if (!v.ok()) {
      problem(v.status().message());
    } else if (v->size() < c.n_layer) {
      problem(fmt("%s: expected at least %u entries (block_count), got %zu", kSwigluKey,
                  c.n_layer, v->size()));
    } else {
      c.swiglu_clamp.assign(v->begin(), v->begin() + c.n_layer);
    }
  }
  return c;
}

Expected<ModelConfig> config_from_gguf(const gguf::File& file) {
  std::vector<std::string> problems;
  ModelConfig c = read_config(file, &problems);
  if (problems.empty()) problems = validate_config(c);
  if (problems.empty()) return c;
  std::string msg = "not a valid DS4 model: ";
  for (size_t i = 0; i < problems.size(); ++i) {
    if (i) msg += "; ";
    msg += problems[i];
  }
  return Status(ErrorCode::kInvalidArgument, msg);
}

std::vector<std::string> diff_config(const ModelConfig& got, const ModelConfig& want) {
  std::vector<std::string> d;
  for (const auto& f : kU32Fields) {
    if (got.*f.field != want.*f.field)
      d.push_back(fmt("%s: expected %u, got %u", f.key, want.*f.field, got.*f.field));
  }
  for (const auto& f : kF32Fields) {
    if (!float_matches(got.*f.field, want.*f.field))
      d.push_back(fmt("%s: expected %g, got %g", f.key, want.*f.field, got.*f.field));
  }
  if (got.expert_weights_norm != want.expert_weights_norm)
    d.push_back(fmt("%s: expected %s, got %s", kWeightsNormKey,
                    want.expert_weights_norm ? "true" : "false",
                    got.expert_weights_norm ? "true" : "false"));
  if (got.compress_ratios != want.compress_ratios) {
    if (got.compress_ratios.size() != want.compress_ratios.size()) {
      d.push_back(fmt("%s: expected %zu entries, got %zu", kRatiosKey, want.compress_ratios.size(),
                      got.compress_ratios.size()));
    } else {
      for (size_t i = 0; i < got.compress_ratios.size(); ++i)
        if (got.compress_ratios[i] != want.compress_ratios[i])
          d.push_back(fmt("%s[%zu]: expected %u, got %u", kRatiosKey, i, want.compress_ratios[i],
                          got.compress_ratios[i]));
    }
  }
  if (got.swiglu_clamp.size() != want.swiglu_clamp.size()) {
    d.push_back(fmt("%s: expected %zu entries, got %zu", kSwigluKey, want.swiglu_clamp.size(),
                    got.swiglu_clamp.size()));
  } else {
    for (size_t i = 0; i < got.swiglu_clamp.size(); ++i)
      if (!float_matches(got.swiglu_clamp[i], want.swiglu_clamp[i]))
        d.push_back(fmt("%s[%zu]: expected %g, got %g", kSwigluKey, i, want.swiglu_clamp[i],
                        got.swiglu_clamp[i]));
  }
  return d;
}

}  // namespace ds4::model
