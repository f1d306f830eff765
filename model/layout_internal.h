// model/layout_internal.h — building blocks of the tensor layout (weights.cpp): the spec
// builder and emit_block(), one V4 block's tensors under a name prefix. Internal to model/.
//
// Invariant: per-layer tensor names are built only through emit_block(); a V4 block emitted
// under another prefix (e.g. "mtp.0.") keeps the same suffixes, shapes and type rules.
#pragma once

#include <functional>
#include <initializer_list>
#include <string>
#include <vector>

#include "model/config.h"
#include "model/weights.h"

namespace ds4::model::detail {

struct SpecBuilder {
  TensorSpec s;
  SpecBuilder(std::string name, int layer, TensorRole role, std::initializer_list<int64_t> ne) {
    s.name = std::move(name);
    s.layer = layer;
    s.role = role;
    s.n_dims = static_cast<int>(ne.size());
    int i = 0;
    for (int64_t v : ne) s.ne[i++] = v;
  }
  SpecBuilder& types(std::initializer_list<gguf::GgmlType> allowed, gguf::GgmlType q2,
                     gguf::GgmlType q4) {
    s.n_allowed = 0;
    for (gguf::GgmlType t : allowed) s.allowed[s.n_allowed++] = t;
    s.type_q2 = q2;
    s.type_q4 = q4;
    return *this;
  }
  SpecBuilder& only(gguf::GgmlType t) { return types({t}, t, t); }
  SpecBuilder& optional() {
    s.required = false;
    return *this;
  }
};

using GlobalFn = std::function<void(const TensorSpec&, TensorView GlobalWeights::*)>;
using LayerFn = std::function<void(const TensorSpec&, TensorView LayerWeights::*)>;

struct BlockParams {
  std::string prefix;  // "blk.3."
  int layer = -1;      // TensorSpec::layer
  uint32_t ratio = 0;  // compress ratio: compressor tensors if != 0, indexer if == 4
  bool hash = false;   // emits ffn_gate_tid2eid
};
// One V4 block's tensors in §2.3 order.
void emit_block(const ModelConfig& c, const BlockParams& bp, const LayerFn& fn);

// Appends "expected type/shape" errors for one present tensor.
void check_tensor(const TensorSpec& spec, const TensorDesc& t, std::vector<std::string>* errors);
std::string missing_message(const TensorSpec& spec);

}  // namespace ds4::model::detail
