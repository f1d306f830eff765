// model/config.h — DS4 model hyper-parameters read from `deepseek4.*` GGUF metadata, their
// validation, derived sizes and the per-layer plan.
//
// Role: the one description of a model's shape. Nothing in the engine hard-codes 43 layers or
// 4096 dims; everything comes from a ModelConfig that passed validate_config(). The same code
// accepts the real Flash shape and the small profiles of model/profiles.h.
//
// Invariants of a ModelConfig that passed validate_config():
//  - compress_ratios.size() == swiglu_clamp.size() == n_layer, and compress_ratios[il] ==
//    expected_compress_ratio(il) (0 for il < 2, 4 for even il >= 2, 128 for odd il >= 3);
//  - n_head_kv == 1, head_dim == value_dim (one shared K = V head), n_rot even, n_rot <= head_dim,
//    (head_dim - n_rot) % 64 == 0 (FP8 blocks of 64), n_rot <= indexer_head_dim;
//  - n_embd % 256 == 0 (Q8_K activation blocks; implies % 32 for Q8_0), n_ff_exp % 256 == 0,
//    q_lora_rank, o_lora_rank, group_dim() multiples of 32 (Q8_0 matvec inputs);
//  - n_head % n_out_group == 0; indexer_head_dim a power of two >= 32 (Hadamard + FP4 blocks);
//  - 1 <= n_expert_used <= n_expert; n_hash_layer <= n_layer; n_swa >= 1; indexer_top_k >= 1;
//  - expert_group_count == expert_group_used_count == 0 (no group-limited routing);
//  - all float keys finite, eps > 0, clamps > 0.
// Float keys are compared to expected values (profiles) with |got - want| <= max(1,|want|)*1e-6.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/rope.h"
#include "core/status.h"

namespace ds4::gguf {
class File;
}  // namespace ds4::gguf

namespace ds4::model {

inline constexpr const char* kArchitecture = "deepseek4";
inline constexpr const char* kKeyPrefix = "deepseek4.";
// Most output LoRA groups a model may have (the forward issues them as one batched call).
inline constexpr uint32_t kMaxOutGroups = 64;

// What a layer keeps besides its raw sliding window (ds4-architecture.md §1.2).
enum class LayerKind : uint8_t {
  kDense = 0,     // ratio 0: raw window only (layers 0, 1)
  kRatio4 = 1,    // ratio 4: 2-lane compressor + indexer (even layers >= 2)
  kRatio128 = 2,  // ratio 128: 1-lane compressor, all compressed rows visible (odd >= 3)
};
const char* layer_kind_name(LayerKind kind);  // "dense", "ratio4", "ratio128"

// The fixed layer pattern: 0 if il < 2, else 4 if il is even, else 128.
constexpr uint32_t expected_compress_ratio(uint32_t il) {
  return il < 2 ? 0u : (il % 2 == 0 ? 4u : 128u);
}

// RoPE parameters of one layer (ds4-architecture.md §3.8); defined in core/ for the backend.
using RopeParams = ds4::RopeParams;

// Hugging Face revision of deepseek-ai/DeepSeek-V4-Flash-0731, the official release: what a 0731
// GGUF's general.source.revision and the 0731 DSpark support file's dspark.source.revision name.
inline constexpr const char* kFlash0731Revision = "7872f01b1d1fe23eabc4c98b48bffcef5a386062";
inline constexpr const char* kFlash0731Url = "https://huggingface.co/deepseek-ai/DeepSeek-V4-Flash-0731";

struct ModelConfig {
  // ---- informative keys ----
  std::string name;             // general.name ("" if absent)
  // general.source.revision ("" if absent): the Hugging Face revision of the checkpoint the file
  // was converted from (0731: 7872f01b…). Compared with a DSpark support file's provenance.
  std::string source_revision;
  uint64_t context_length = 0;  // deepseek4.context_length (0 if absent; printed only)

  // ---- shape (deepseek4.* keys, ds4-architecture.md §1.1) ----
  uint32_t n_layer = 0;           // block_count
  uint32_t n_embd = 0;            // embedding_length
  uint32_t n_vocab = 0;           // vocab_size (or len(tokenizer.ggml.tokens) if absent)
  uint32_t n_head = 0;            // attention.head_count
  uint32_t n_head_kv = 0;         // attention.head_count_kv (must be 1)
  uint32_t head_dim = 0;          // attention.key_length
  uint32_t value_dim = 0;         // attention.value_length (== head_dim)
  uint32_t n_rot = 0;             // rope.dimension_count (RoPE tail width)
  uint32_t q_lora_rank = 0;       // attention.q_lora_rank
  uint32_t o_lora_rank = 0;       // attention.output_lora_rank
  uint32_t n_out_group = 0;       // attention.output_group_count
  uint32_t n_expert = 0;          // expert_count
  uint32_t n_expert_used = 0;     // expert_used_count
  uint32_t n_expert_shared = 0;   // expert_shared_count (1 shared expert tensor set)
  uint32_t n_ff_exp = 0;          // expert_feed_forward_length
  uint32_t n_hash_layer = 0;      // hash_layer_count (layers 0..n_hash_layer-1 hash-routed)
  uint32_t expert_group_count = 0;       // optional, must be 0
  uint32_t expert_group_used_count = 0;  // optional, must be 0
  uint32_t n_swa = 0;             // attention.sliding_window (raw window incl. current token)
  uint32_t n_indexer_head = 0;    // attention.indexer.head_count
  uint32_t indexer_head_dim = 0;  // attention.indexer.key_length
  uint32_t indexer_top_k = 0;     // attention.indexer.top_k
  uint32_t n_hc = 0;              // hyper_connection.count
  uint32_t n_hc_sinkhorn_iter = 0;  // hyper_connection.sinkhorn_iterations

  float rms_eps = 0.0f;               // attention.layer_norm_rms_epsilon
  float hc_eps = 0.0f;                // hyper_connection.epsilon
  float expert_weights_scale = 0.0f;  // expert_weights_scale
  bool expert_weights_norm = true;    // expert_weights_norm (optional, default true)
  std::vector<float> swiglu_clamp;    // [n_layer] swiglu_clamp_exp (file may hold more)

  float rope_freq_base = 0.0f;           // rope.freq_base (dense layers)
  float compress_rope_freq_base = 0.0f;  // attention.compress_rope_freq_base
  float rope_scaling_factor = 0.0f;      // rope.scaling.factor (YaRN)
  uint32_t rope_orig_ctx = 0;            // rope.scaling.original_context_length
  float yarn_beta_fast = 0.0f;           // rope.scaling.yarn_beta_fast
  float yarn_beta_slow = 0.0f;           // rope.scaling.yarn_beta_slow

  std::vector<uint32_t> compress_ratios;  // [n_layer] attention.compress_ratios

  // ---- derived sizes ----
  uint32_t hc_mix_dim() const { return 2 * n_hc + n_hc * n_hc; }  // 24 for 4 streams
  uint32_t hc_dim() const { return n_hc * n_embd; }               // 16384
  uint32_t q_dim() const { return n_head * head_dim; }            // 32768
  uint32_t n_nope() const { return head_dim - n_rot; }            // 448 (FP8 dims)
  uint32_t o_low_dim() const { return n_out_group * o_lora_rank; }   // 8192
  uint32_t heads_per_group() const { return n_out_group ? n_head / n_out_group : 0; }  // 8
  uint32_t group_dim() const { return head_dim * heads_per_group(); }  // 4096
  uint32_t indexer_q_dim() const { return n_indexer_head * indexer_head_dim; }  // 8192

  // ---- per-layer plan (il < n_layer) ----
  uint32_t compress_ratio(uint32_t il) const { return compress_ratios[il]; }
  LayerKind layer_kind(uint32_t il) const;
  bool has_compressor(uint32_t il) const { return compress_ratios[il] != 0; }
  bool has_indexer(uint32_t il) const { return compress_ratios[il] == 4; }
  bool is_hash_layer(uint32_t il) const { return il < n_hash_layer; }
  // Compressor lanes: 2 for ratio 4 (overlapping windows), 1 for ratio 128, 0 for dense.
  uint32_t coff(uint32_t il) const;
  // Width of the attention compressor projections (coff * head_dim), 0 for dense layers.
  uint32_t comp_width(uint32_t il) const { return coff(il) * head_dim; }
  // Width of the indexer compressor projections (2 * indexer_head_dim; ratio-4 layers only).
  uint32_t indexer_comp_width() const { return 2 * indexer_head_dim; }
  // Compressed rows visible after n_tokens tokens: floor(n_tokens / ratio) (0 for dense).
  uint64_t n_comp_rows(uint32_t il, uint64_t n_tokens) const;
  // Compressed-row capacity for a context of ctx tokens: ctx / ratio + 2 (0 for dense).
  uint64_t comp_capacity(uint32_t il, uint64_t ctx) const;
  // Raw window rows kept for a context of ctx tokens: min(n_swa, ctx).
  uint64_t raw_capacity(uint64_t ctx) const { return ctx < n_swa ? ctx : n_swa; }
  RopeParams rope_params(uint32_t il) const;
  uint32_t count_layers(LayerKind kind) const;
};

// Float comparison rule of ds4's config check: |got - want| <= max(1, |want|) * 1e-6.
bool float_matches(double got, double want);

// Every violated rule, as "deepseek4.<key>: expected ..., got ..." strings (empty = valid).
std::vector<std::string> validate_config(const ModelConfig& cfg);
// validate_config() folded into one Status (kInvalidArgument; problems joined by "; ").
Status check_config(const ModelConfig& cfg);

// Reads every key of §1.1 (type errors name the key, expected vs actual type) and validates.
// Rejects files whose general.architecture is present and not "deepseek4". All problems are
// reported in one message.
Expected<ModelConfig> config_from_gguf(const gguf::File& file);
// Like config_from_gguf but does not run validate_config(): the raw values plus the list of
// read problems (missing keys, wrong types). Used by `ds4-gguf inspect` to print what it can.
ModelConfig read_config(const gguf::File& file, std::vector<std::string>* problems);

// Differences between two configs key by key ("deepseek4.block_count: expected 43, got 8"),
// floats compared with float_matches(); empty when equal. Used to tell a file "is the Flash
// shape" and by tests.
std::vector<std::string> diff_config(const ModelConfig& got, const ModelConfig& want);

// ---- key table (one place for names, types and optionality) ----
enum class KeyType : uint8_t {
  kU32,         // integer key (any GGUF integer type whose value fits in u32 is accepted)
  kU64,         // integer key, u64 range
  kF32,         // float key (f32 or f64; integers also accepted for the eps key)
  kBool,        // bool
  kArrayU32,    // u32 or i32 array, >= n_layer items (compress_ratios)
  kArrayF32,    // f32 or f64 array, >= n_layer items (swiglu_clamp_exp)
};
struct ConfigKey {
  const char* key;  // full key, "deepseek4.block_count"
  KeyType type;
  bool required;
};
// All deepseek4.* keys this engine reads, in the order the generator writes them.
std::span<const ConfigKey> config_keys();

// One key with its value taken from a config (same order as config_keys()); what the
// generator writes as metadata. Integer keys in `u`, floats in `f`, bools in `b`, arrays in
// `au` / `af`. Optional keys are always emitted (expert_group_* as 0, context_length as is).
struct ConfigValue {
  const char* key = nullptr;
  KeyType type = KeyType::kU32;
  uint64_t u = 0;
  float f = 0.0f;
  bool b = false;
  std::vector<uint32_t> au;
  std::vector<float> af;
};
std::vector<ConfigValue> config_values(const ModelConfig& cfg);

}  // namespace ds4::model
