// speculative/drafter_weights.h — the DSpark support GGUF (dspark-drafter.md §1): metadata, tensor
// layout derived from the TARGET config, validation and zero-copy binding.
//
// Role: turns a support file into DrafterWeights that speculative/drafter.cpp runs. Shapes come from
// the target's ModelConfig (so the Flash file and tiny generated files use the same code) plus
// the drafter metadata; every error names the tensor or key with expected vs actual.
//
// Tensor layout (S stages `mtp.N.*`, 24 tensors each, plus the main projection, HC head,
// Markov and confidence heads), accepted types, the two metadata layouts (today's
// `deepseek4.dspark.*` keys and the 0731 standalone `dspark.*` file) and every key with its
// range: docs/formats/dspark-support-file.md.
// Provenance (check_provenance): a drafter trained for another checkpoint still gives the target's
// own greedy text (every draft is verified) but is slower, so a mismatch is a load-time warning,
// not a refusal; DrafterLoadOptions::require_matching_provenance turns it into an error.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "gguf/gguf.h"
#include "model/config.h"

namespace ds4::speculative {

inline constexpr int kMaxBlockSize = 16;
inline constexpr int kMaxCaptureLayers = 8;

// Which metadata layout a support file uses (see the header comment).
enum class SupportLayout : uint8_t {
  kDeepseek4Keys = 0,   // `deepseek4.dspark.*` (and aliases) in a deepseek4-architecture file
  kStandalone0731 = 1,  // general.architecture = deepseek4-dspark, bare `dspark.*` + provenance
};
inline constexpr const char* kStandaloneArchitecture = "deepseek4-dspark";
// "deepseek4.dspark" (legacy keys) | "deepseek4-dspark (0731 standalone)".
const char* support_layout_name(SupportLayout layout);

// `dspark.source.*` strings of a support file, in file order (empty for legacy files).
struct SupportProvenance {
  std::string revision;  // dspark.source.revision ("" if absent)
  std::vector<std::pair<std::string, std::string>> fields;  // every dspark.source.* key -> value
  bool empty() const { return fields.empty(); }
};

struct DSparkConfig {
  int n_stages = 0;                 // S
  int block_size = 0;               // B: drafts per proposal (anchor-first slots)
  int32_t noise_token_id = 0;       // MASK token of block slots 1..B-1
  int markov_rank = 0;              // R
  int window = 0;                   // W: context ring rows per stage
  std::vector<int> target_layers;   // capture layers (output of the block, HC mean)
  SupportLayout layout = SupportLayout::kDeepseek4Keys;
  SupportProvenance provenance;     // standalone layout only
};

// One stage = a V4 block without compressor/indexer (learned routing, exp_probs_b required).
struct StageWeights {
  backend::Matrix hc_attn_fn;      // [HC -> MIX]
  backend::Matrix attn_q_a;        // [E -> QL]
  backend::Matrix attn_q_b;        // [QL -> Q]
  backend::Matrix attn_kv;         // [E -> D]
  backend::Matrix attn_output_a;   // [G -> OL] (n_out_group blocks of o_lora rows)
  backend::Matrix attn_output_b;   // [OL -> E]
  backend::Matrix hc_ffn_fn;       // [HC -> MIX]
  backend::Matrix ffn_gate_inp;    // [E -> X] router
  backend::Matrix ffn_gate_shexp;  // [E -> F]
  backend::Matrix ffn_up_shexp;    // [E -> F]
  backend::Matrix ffn_down_shexp;  // [F -> E]
  backend::ExpertMatrix gate_exps, up_exps;  // [E -> F] x X
  backend::ExpertMatrix down_exps;           // [F -> E] x X
  const float* hc_attn_scale = nullptr;  // [3]
  const float* hc_attn_base = nullptr;   // [MIX]
  const float* attn_norm = nullptr;      // [E]
  const float* q_a_norm = nullptr;       // [QL]
  const float* kv_a_norm = nullptr;      // [D]
  const float* sinks = nullptr;          // [n_head]
  const float* hc_ffn_scale = nullptr;   // [3]
  const float* hc_ffn_base = nullptr;    // [MIX]
  const float* ffn_norm = nullptr;       // [E]
  const float* exp_probs_b = nullptr;    // [X]
};

struct DrafterWeights {
  DSparkConfig config;
  std::vector<StageWeights> stages;  // [S]
  backend::Matrix main_proj;         // [n_capture*E -> E]
  const float* main_norm = nullptr;  // [E]
  const float* norm = nullptr;       // [E] final norm (mtp.{S-1}.norm)
  backend::Matrix hc_head_fn;        // [HC -> n_hc]
  const float* hc_head_scale = nullptr;  // [1]
  const float* hc_head_base = nullptr;   // [n_hc]
  backend::Matrix markov_w1;         // V rows of R (row t = embedding of token t)
  backend::Matrix markov_w2;         // V rows of R (row v = weights of vocab entry v's bias)
  backend::Matrix confidence;        // 1 row of E+R (no bias)
  size_t n_tensors = 0;              // tensors bound (81 for the real 3-stage file)

  std::vector<std::string> warnings;         // load-time notes (provenance mismatch), also logged
  std::unique_ptr<gguf::File> file;          // keeps the mmapped bytes alive
  std::vector<std::vector<float>> owned;     // F32 copies of converted tensors
};

// Every problem of a support file against a target config (empty = valid). Also fills *cfg
// with what could be read.
std::vector<std::string> validate_drafter(const gguf::File& file, const model::ModelConfig& target,
                                          DSparkConfig* cfg);
// Reads metadata only (stage count from tensor names).
Expected<DSparkConfig> read_drafter_config(const gguf::File& file, const model::ModelConfig& target);
// Validates and binds (takes ownership of the file). kInvalidArgument lists every problem.
Expected<std::unique_ptr<DrafterWeights>> bind_drafter(std::unique_ptr<gguf::File> file,
                                                       const model::ModelConfig& target);
Expected<std::unique_ptr<DrafterWeights>> open_drafter_weights(const std::string& path,
                                                               const model::ModelConfig& target);

struct DrafterLoadOptions {
  // Refuse (kInvalidArgument) instead of warning when the support file's provenance names a
  // different target checkpoint than the loaded model's general.source.revision.
  bool require_matching_provenance = false;
};
Expected<std::unique_ptr<DrafterWeights>> bind_drafter(std::unique_ptr<gguf::File> file,
                                                       const model::ModelConfig& target,
                                                       const DrafterLoadOptions& opt);
Expected<std::unique_ptr<DrafterWeights>> open_drafter_weights(const std::string& path,
                                                               const model::ModelConfig& target,
                                                               const DrafterLoadOptions& opt);

// Provenance of a support file against a target model.
enum class ProvenanceMatch : uint8_t {
  kNotRecorded,    // the support file names no target (legacy layout): nothing to check
  kTargetUnknown,  // the target carries no general.source.revision: cannot confirm
  kMatch,
  kMismatch,
};
struct ProvenanceCheck {
  ProvenanceMatch match = ProvenanceMatch::kNotRecorded;
  std::string message;  // one line for the user ("" for kNotRecorded / kMatch)
};
ProvenanceCheck check_provenance(const DSparkConfig& cfg, const model::ModelConfig& target);

// What a support file says about itself, without a target (for `ds4-gguf inspect`): layout,
// stage count from tensor names, the metadata key spelling in use, provenance, and every
// problem found with the metadata alone (missing / mistyped keys, stage records).
struct SupportInfo {
  SupportLayout layout = SupportLayout::kDeepseek4Keys;
  int n_stages = 0;
  std::string key_prefix;  // "deepseek4.dspark." / "deepseek4.dspark_" / "dspark." ("" if none)
  SupportProvenance provenance;
  std::vector<std::string> errors;
};
SupportInfo describe_support(const gguf::File& file);

// ---- layout description (shared by validation, binding and the generator) ----
enum class DTensorKind : uint8_t {
  kDense,   // matrix: F16|F32|BF16|Q8_0
  kHcFn,    // matrix: F16|F32|BF16
  kVector,  // F32|F16|BF16
  kExpert,  // IQ2_XXS|Q2_K|Q4_K
};
struct DTensorSpec {
  std::string name;
  DTensorKind kind = DTensorKind::kDense;
  std::vector<int64_t> ne;  // GGUF order
  int stage = -1;           // -1 for head tensors
  float init_std = 0.0f;    // generator: element std
  float init_center = 0.0f; // generator: element mean
};
// Tensors of an S-stage drafter for `target` and drafter config `cfg`, in file order.
std::vector<DTensorSpec> drafter_tensor_specs(const model::ModelConfig& target,
                                              const DSparkConfig& cfg);

}  // namespace ds4::speculative
