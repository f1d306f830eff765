// model/weights.h — typed, zero-copy views of every DS4 tensor, and the one visitor that
// enumerates them.
//
// Role: GGUF tensor names become struct fields in exactly one place: for_each_tensor(). That
// visitor yields, for every tensor the config expects (ds4-architecture.md §2.2-§2.3), its
// TensorSpec (name, allowed types, published type, shape, required/optional) and the
// TensorView slot it binds to. Validation, binding, the generator, the quantizer, (later) CUDA
// upload and checksumming all iterate through it, so they cannot disagree about the layout.
//
// Invariants:
//  - A TensorView never owns memory: `data` points into the mmapped gguf::File (or a device
//    buffer later) and stays valid as long as the owning Model lives. Weights are never
//    copied on the CPU.
//  - ne uses GGUF order (ne[0] innermost). A 2-D weight [in, out] holds `out` rows of `in`
//    elements; row_bytes = bytes of one row. A 3-D expert tensor [in, out, n_expert] stores
//    expert e in bytes [e*out*row_bytes, (e+1)*out*row_bytes).
//  - An optional tensor that is absent has data == nullptr (present() == false).
//  - Routed experts: every layer uses the same ExpertQuant layout (q2: gate/up IQ2_XXS or
//    Q2_K, down Q2_K; q4: all three Q4_K); up has the same type as gate.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/types.h"
#include "model/config.h"

namespace ds4::gguf {
class File;
struct TensorInfo;
}  // namespace ds4::gguf

namespace ds4::model {

// Routed-expert quantization layout of a whole model.
enum class ExpertQuant : uint8_t {
  kQ2 = 0,  // gate/up IQ2_XXS (Q2_K accepted), down Q2_K — "q2" published files
  kQ4 = 1,  // gate/up/down Q4_K — "q4" published files
};
const char* expert_quant_name(ExpertQuant q);  // "q2", "q4"

struct TensorView {
  const uint8_t* data = nullptr;          // into the mmapped file; nullptr when absent
  gguf::GgmlType type = gguf::GgmlType::kF32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // GGUF order, unused dims 1
  uint64_t row_bytes = 0;                 // bytes of ne[0] elements
  uint64_t nbytes = 0;                    // whole tensor
  const char* name = nullptr;             // GGUF name, lives as long as the file

  bool present() const { return data != nullptr; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }  // rows of ne[0] elements
  const uint8_t* row(int64_t r) const { return data + static_cast<uint64_t>(r) * row_bytes; }
  // 3-D expert tensors [in, out, n_expert]: bytes of one expert (out * row_bytes).
  uint64_t expert_bytes() const { return static_cast<uint64_t>(ne[1]) * row_bytes; }
  const uint8_t* expert_data(int64_t e) const { return data + static_cast<uint64_t>(e) * expert_bytes(); }
  // 2-D view [in, out] of expert e (same type and row_bytes, name unchanged).
  TensorView expert(int64_t e) const;
  template <typename T>
  const T* as() const { return reinterpret_cast<const T*>(data); }  // F32/I32 tensors
};

// Per-layer tensors, `blk.{il}.` prefix (ds4-architecture.md §2.3). Shapes are written for the
// Flash config; symbols: E n_embd, HC n_hc*n_embd, M hc_mix_dim, QL q_lora_rank, Q q_dim,
// D head_dim, OL n_out_group*o_lora_rank, G group_dim, W comp_width (coff*D), IW 2*idx_dim,
// IQ n_indexer_head*idx_dim, F n_ff_exp, X n_expert, R compress ratio, V n_vocab.
struct LayerWeights {
  // hyper-connection before attention
  TensorView hc_attn_fn;     // hc_attn_fn.weight     [HC, M] f16      ([16384, 24])
  TensorView hc_attn_scale;  // hc_attn_scale.weight  [3] f32
  TensorView hc_attn_base;   // hc_attn_base.weight   [M] f32
  // attention
  TensorView attn_norm;      // attn_norm.weight      [E] f32
  TensorView attn_q_a;       // attn_q_a.weight       [E, QL] q8_0     ([4096, 1024])
  TensorView attn_q_a_norm;  // attn_q_a_norm.weight  [QL] f32
  TensorView attn_q_b;       // attn_q_b.weight       [QL, Q] q8_0     ([1024, 32768])
  TensorView attn_kv;        // attn_kv.weight        [E, D] q8_0      ([4096, 512])
  TensorView attn_kv_a_norm; // attn_kv_a_norm.weight [D] f32
  TensorView attn_sinks;     // attn_sinks.weight     [n_head] f32
  TensorView attn_output_a;  // attn_output_a.weight  [G, OL] q8_0     ([4096, 8192])
  TensorView attn_output_b;  // attn_output_b.weight  [OL, E] q8_0     ([8192, 4096])
  // attention compressor (ratio != 0)
  TensorView attn_compressor_ape;   // attn_compressor_ape.weight  [W, R] f16 ([1024,4]/[512,128])
  TensorView attn_compressor_kv;    // attn_compressor_kv.weight   [E, W] f16
  TensorView attn_compressor_gate;  // attn_compressor_gate.weight [E, W] f16
  TensorView attn_compressor_norm;  // attn_compressor_norm.weight [D] f32
  // indexer (ratio == 4)
  TensorView indexer_attn_q_b;          // indexer.attn_q_b.weight         [QL, IQ] f16 ([1024, 8192])
  TensorView indexer_proj;              // indexer.proj.weight             [E, n_idx_head] f16
  TensorView indexer_compressor_ape;    // indexer_compressor_ape.weight   [IW, 4] f16 ([256, 4])
  TensorView indexer_compressor_kv;     // indexer_compressor_kv.weight    [E, IW] f16
  TensorView indexer_compressor_gate;   // indexer_compressor_gate.weight  [E, IW] f16
  TensorView indexer_compressor_norm;   // indexer_compressor_norm.weight  [idx_dim] f32
  // hyper-connection before FFN
  TensorView hc_ffn_fn;      // hc_ffn_fn.weight      [HC, M] f16
  TensorView hc_ffn_scale;   // hc_ffn_scale.weight   [3] f32
  TensorView hc_ffn_base;    // hc_ffn_base.weight    [M] f32
  // FFN / MoE
  TensorView ffn_norm;       // ffn_norm.weight       [E] f32
  TensorView ffn_gate_inp;   // ffn_gate_inp.weight   [E, X] f16 (router)
  TensorView exp_probs_b;    // exp_probs_b.bias      [X] f32 (optional selection bias)
  TensorView ffn_gate_tid2eid;  // ffn_gate_tid2eid.weight [n_expert_used, V] i32 (hash layers only)
  TensorView ffn_gate_exps;  // ffn_gate_exps.weight  [E, F, X] iq2_xxs|q2_K (q2) / q4_K (q4)
  TensorView ffn_up_exps;    // ffn_up_exps.weight    [E, F, X] same type as gate
  TensorView ffn_down_exps;  // ffn_down_exps.weight  [F, E, X] q2_K (q2) / q4_K (q4)
  TensorView ffn_gate_shexp; // ffn_gate_shexp.weight [E, F] q8_0
  TensorView ffn_up_shexp;   // ffn_up_shexp.weight   [E, F] q8_0
  TensorView ffn_down_shexp; // ffn_down_shexp.weight [F, E] q8_0
};

// Global tensors (§2.2).
struct GlobalWeights {
  TensorView token_embd;       // token_embd.weight       [E, V] f16
  TensorView output_hc_base;   // output_hc_base.weight   [n_hc] f32
  TensorView output_hc_fn;     // output_hc_fn.weight     [HC, n_hc] f16
  TensorView output_hc_scale;  // output_hc_scale.weight  [1] f32
  TensorView output_norm;      // output_norm.weight      [E] f32
  TensorView output;           // output.weight           [E, V] q8_0 (LM head)
};

struct ModelWeights {
  GlobalWeights global;
  std::vector<LayerWeights> layers;  // [n_layer]
  ExpertQuant expert_quant = ExpertQuant::kQ2;
};

// What a tensor is, for policies that depend on its role (generator init scale, quantizer
// target type) rather than on its name.
enum class TensorRole : uint8_t {
  kEmbedding,     // token_embd
  kNorm,          // RMSNorm weights (~1)
  kHcFn,          // hc_*_fn, output_hc_fn (small, keeps Sinkhorn well-conditioned)
  kHcScale,       // hc_*_scale, output_hc_scale
  kHcBase,        // hc_*_base, output_hc_base
  kProjection,    // Q8_0 dense projections (attention, shared expert, LM head)
  kSinks,         // attn_sinks
  kCompressorProj,  // compressor / indexer F16 projections
  kApe,           // compressor APE
  kRouter,        // ffn_gate_inp
  kRouterBias,    // exp_probs_b
  kHashTable,     // ffn_gate_tid2eid
  kRoutedExpert,  // ffn_{gate,up,down}_exps
};

inline constexpr int kMaxAllowedTypes = 4;

struct TensorSpec {
  std::string name;                 // full GGUF name, "blk.3.attn_kv.weight"
  int layer = -1;                   // -1 for global tensors
  TensorRole role = TensorRole::kProjection;
  int n_dims = 1;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // expected shape, GGUF order
  // Types the validator accepts (first n_allowed entries).
  std::array<gguf::GgmlType, kMaxAllowedTypes> allowed{};
  int n_allowed = 0;
  // Type the published q2 / q4 files use (what generate/quantize write).
  gguf::GgmlType type_q2 = gguf::GgmlType::kF32;
  gguf::GgmlType type_q4 = gguf::GgmlType::kF32;
  bool required = true;

  bool allows(gguf::GgmlType t) const;
  gguf::GgmlType published_type(ExpertQuant q) const { return q == ExpertQuant::kQ4 ? type_q4 : type_q2; }
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  std::string shape_string() const;    // "[4096, 1024]"
  std::string allowed_string() const;  // "iq2_xxs|q2_K|q4_K"
};

// THE visitor: calls fn(spec, slot) for every tensor the config expects, in a fixed order
// (globals first, then layer by layer in §2.3 order), each exactly once. `slot` is the field
// of `weights` the tensor binds to; `weights.layers` is resized to n_layer first.
// Requires a config that passed validate_config().
using TensorVisitor = std::function<void(const TensorSpec& spec, TensorView& slot)>;
void for_each_tensor(const ModelConfig& cfg, ModelWeights& weights, const TensorVisitor& fn);
// The same visit over bound weights, read-only (e.g. a backend binding every tensor once).
using ConstTensorVisitor = std::function<void(const TensorSpec& spec, const TensorView& slot)>;
void for_each_tensor(const ModelConfig& cfg, const ModelWeights& weights, const ConstTensorVisitor& fn);
// Spec-only enumeration (no weights needed).
void for_each_tensor_spec(const ModelConfig& cfg, const std::function<void(const TensorSpec&)>& fn);
// Number of tensors the visitor yields (required + optional).
size_t expected_tensor_count(const ModelConfig& cfg);

// A tensor as found in a file directory (name, type, shape) — what layout validation checks.
struct TensorDesc {
  std::string name;
  gguf::GgmlType type = gguf::GgmlType::kF32;
  std::array<int64_t, 4> ne{1, 1, 1, 1};
};

struct LayoutReport {
  std::vector<std::string> errors;    // missing/mis-typed/mis-shaped tensors, q2/q4 mismatch,
                                      // DS4 tensors where the layer plan forbids them
  std::vector<std::string> warnings;  // unknown non-DS4 tensor names (ignored, not bound)
  bool expert_quant_known = false;
  ExpertQuant expert_quant = ExpertQuant::kQ2;
  bool ok() const { return errors.empty(); }
};

// Checks a tensor directory against the layout the config implies (§2.2-§2.3):
//  - every required tensor present, every present expected tensor of an allowed type and of
//    the expected shape (errors name the tensor with expected vs actual);
//  - routed experts: up type == gate type; each layer is q2 or q4; all layers agree;
//  - extra tensors: a name that looks like a DS4 tensor ("blk.N.<known suffix>", a known
//    global name, or any "blk.N." with N >= n_layer) but that this config does not expect
//    (e.g. a compressor in a dense layer, tid2eid in a non-hash layer) is an ERROR, because it
//    means the file's layer plan disagrees with its metadata; any other name is a WARNING and
//    is ignored (e.g. tensors added by other tools).
LayoutReport validate_layout(const ModelConfig& cfg, std::span<const TensorDesc> tensors);
std::vector<TensorDesc> describe_tensors(const gguf::File& file);

// Binds every expected tensor of `file` into views. Requires a layout that passed
// validate_layout (kInternal otherwise). No bytes are copied.
Expected<ModelWeights> bind_weights(const ModelConfig& cfg, const gguf::File& file);

// Checks hash tables: every tid2eid entry in [0, n_expert). Error names tensor, token, value.
Status check_hash_tables(const ModelConfig& cfg, const ModelWeights& w);

}  // namespace ds4::model
