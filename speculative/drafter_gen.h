// speculative/drafter_gen.h — deterministic random DSpark support GGUFs for a given target config
// (`ds4-dspark-gguf generate`, tests).
//
// Invariants: the file bytes depend only on (target config, options), never on the fill thread
// count; every value is a pure function of (seed, tensor name, element or row index) through a
// counter-based hash (rows are filled independently, so threads split rows). Shapes come from
// drafter_tensor_specs(), so generated files always pass validate_drafter() unless a test
// mutates them on purpose. Scales keep activations sane: norms ~1, projections ~1/sqrt(fan_in),
// HC fns small, Markov bias O(0.5) logits.
// Fill modes (quantized tensors only; F32/F16/BF16 are always the hashed floats): kQuantize runs
// quant::quantize_row on hashed floats (realistic blocks; IQ2_XXS's scale search makes the
// Flash-width experts take tens of minutes), kRandomBlocks writes quant::fill_random_blocks rows
// (valid blocks at RMS ~ init_std, seeded per row: seconds), kAuto picks kQuantize up to
// kAutoQuantizeMaxElements quantized elements (the tiny and small profiles), else kRandomBlocks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/types.h"
#include "model/config.h"
#include "speculative/drafter_weights.h"

namespace ds4::speculative {

enum class DrafterFill : uint8_t { kAuto = 0, kQuantize, kRandomBlocks };
inline constexpr uint64_t kAutoQuantizeMaxElements = 1ull << 28;

struct DrafterGenOptions {
  uint64_t seed = 0;
  DrafterFill fill = DrafterFill::kAuto;
  int threads = 0;                // fill threads (0: hardware concurrency); bytes do not depend on it
  int n_stages = 3;
  int block_size = 5;
  int markov_rank = 0;            // 0: 256 when n_embd >= 4096, else 64
  int32_t noise_token_id = -1;    // -1: 128799 when the vocab holds it, else n_vocab - 2
  std::vector<int> target_layers; // empty: the last min(3, n_layer) target layers
  int window = 0;                 // 0: no sliding_window key (loader uses target n_swa)
  gguf::GgmlType dense_type = gguf::GgmlType::kQ8_0;    // projections / router / Markov / confidence
  gguf::GgmlType hc_fn_type = gguf::GgmlType::kF16;
  gguf::GgmlType gate_up_type = gguf::GgmlType::kIQ2_XXS;
  gguf::GgmlType down_type = gguf::GgmlType::kQ2_K;
  // Metadata layout: kDeepseek4Keys writes general.architecture = deepseek4 and
  // `deepseek4.dspark.*`; kStandalone0731 writes the published 0731 form: general.architecture =
  // deepseek4-dspark, bare `dspark.*` keys, dspark.stage_count / n_layers and
  // dspark.source.revision.
  SupportLayout layout = SupportLayout::kDeepseek4Keys;
  // Standalone layout: dspark.source.revision. "" = the target's general.source.revision, or
  // model::kFlash0731Revision when the target has none.
  std::string source_revision;
  // Test hooks: metadata keys (full names) left out of the file; extra u32 keys appended.
  std::vector<std::string> omit_keys;
  std::vector<std::pair<std::string, uint32_t>> extra_u32_keys;
  // Test hook: may change a tensor's spec/type; return false to leave the tensor out.
  std::function<bool(DTensorSpec& spec, gguf::GgmlType& type)> mutate;
  // Test hook: extra tensors (F32, given shape) appended after the layout.
  std::vector<std::pair<std::string, std::vector<int64_t>>> extra_tensors;
};

// Fills defaults that depend on the target (rank, noise id, capture layers). `fill` stays as
// given (kAuto is decided by generate_drafter from the quantized element count).
DrafterGenOptions resolve_gen_options(const model::ModelConfig& target, DrafterGenOptions opt);
Status generate_drafter(const model::ModelConfig& target, const DrafterGenOptions& opt,
                        const std::string& path);
// The fill generate_drafter uses for (target, opt): opt.fill unless kAuto.
DrafterFill resolved_fill(const model::ModelConfig& target, const DrafterGenOptions& opt);
const char* drafter_fill_name(DrafterFill f);

}  // namespace ds4::speculative
