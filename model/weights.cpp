// model/weights.cpp — the tensor visitor, layout validation and zero-copy binding.
//
// All DS4 tensor names appear in this file only, in emit_global()/emit_block(). Everything
// else (validation, binding, generator, quantizer) derives from the specs they produce.
#include "model/weights.h"

#include <cinttypes>
#include <cstdarg>
#include <cstring>
#include <unordered_map>
#include <unordered_set>

#include "gguf/gguf.h"
#include "model/layout_internal.h"

namespace ds4::model {

using gguf::GgmlType;
using detail::GlobalFn;
using detail::LayerFn;
using detail::SpecBuilder;

namespace {

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  vsnprintf(buf, sizeof(buf), f, ap);
  va_end(ap);
  return buf;
}

std::string shape_str(const std::array<int64_t, 4>& ne, int n_dims) {
  std::string s = "[";
  for (int i = 0; i < n_dims; ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

int used_dims(const std::array<int64_t, 4>& ne) {
  int n = 4;
  while (n > 1 && ne[n - 1] == 1) --n;
  return n;
}


void emit_global(const ModelConfig& c, const GlobalFn& fn) {
  const int64_t E = c.n_embd, V = c.n_vocab, H = c.n_hc, HC = c.hc_dim();
  auto g = [&](const char* name, TensorRole role, std::initializer_list<int64_t> ne) {
    return SpecBuilder(name, -1, role, ne);
  };
  fn(g("token_embd.weight", TensorRole::kEmbedding, {E, V}).only(GgmlType::kF16).s,
     &GlobalWeights::token_embd);
  fn(g("output_hc_base.weight", TensorRole::kHcBase, {H}).only(GgmlType::kF32).s,
     &GlobalWeights::output_hc_base);
  fn(g("output_hc_fn.weight", TensorRole::kHcFn, {HC, H}).only(GgmlType::kF16).s,
     &GlobalWeights::output_hc_fn);
  fn(g("output_hc_scale.weight", TensorRole::kHcScale, {1}).only(GgmlType::kF32).s,
     &GlobalWeights::output_hc_scale);
  fn(g("output_norm.weight", TensorRole::kNorm, {E}).only(GgmlType::kF32).s,
     &GlobalWeights::output_norm);
  fn(g("output.weight", TensorRole::kProjection, {E, V}).only(GgmlType::kQ8_0).s,
     &GlobalWeights::output);
}

}  // namespace

namespace detail {

// Emits the tensors of one V4 block (see layout_internal.h).
void emit_block(const ModelConfig& c, const BlockParams& bp, const LayerFn& fn) {
  const uint32_t ratio = bp.ratio;
  const bool hash = bp.hash;
  const int64_t E = c.n_embd, HC = c.hc_dim(), M = c.hc_mix_dim(), QL = c.q_lora_rank;
  const int64_t Q = c.q_dim(), D = c.head_dim, OL = c.o_low_dim(), G = c.group_dim();
  const int64_t F = c.n_ff_exp, X = c.n_expert, V = c.n_vocab;
  const int64_t coff = ratio == 0 ? 0 : (ratio == 4 ? 2 : 1);
  const int64_t W = coff * D;
  const int64_t IDX = c.indexer_head_dim, IW = 2 * IDX, IQ = c.indexer_q_dim();
  const int li = bp.layer;
  const std::string& pre = bp.prefix;
  using L = LayerWeights;
  using R = TensorRole;
  constexpr GgmlType kF16 = GgmlType::kF16, kF32 = GgmlType::kF32, kQ8 = GgmlType::kQ8_0;
  auto t = [&](const char* suffix, TensorRole role, std::initializer_list<int64_t> ne) {
    return SpecBuilder(pre + suffix, li, role, ne);
  };

  fn(t("hc_attn_fn.weight", R::kHcFn, {HC, M}).only(kF16).s, &L::hc_attn_fn);
  fn(t("hc_attn_scale.weight", R::kHcScale, {3}).only(kF32).s, &L::hc_attn_scale);
  fn(t("hc_attn_base.weight", R::kHcBase, {M}).only(kF32).s, &L::hc_attn_base);
  fn(t("attn_norm.weight", R::kNorm, {E}).only(kF32).s, &L::attn_norm);
  fn(t("attn_q_a.weight", R::kProjection, {E, QL}).only(kQ8).s, &L::attn_q_a);
  fn(t("attn_q_a_norm.weight", R::kNorm, {QL}).only(kF32).s, &L::attn_q_a_norm);
  fn(t("attn_q_b.weight", R::kProjection, {QL, Q}).only(kQ8).s, &L::attn_q_b);
  fn(t("attn_kv.weight", R::kProjection, {E, D}).only(kQ8).s, &L::attn_kv);
  fn(t("attn_kv_a_norm.weight", R::kNorm, {D}).only(kF32).s, &L::attn_kv_a_norm);
  fn(t("attn_sinks.weight", R::kSinks, {static_cast<int64_t>(c.n_head)}).only(kF32).s,
     &L::attn_sinks);
  fn(t("attn_output_a.weight", R::kProjection, {G, OL}).only(kQ8).s, &L::attn_output_a);
  fn(t("attn_output_b.weight", R::kProjection, {OL, E}).only(kQ8).s, &L::attn_output_b);
  if (ratio != 0) {
    fn(t("attn_compressor_ape.weight", R::kApe, {W, static_cast<int64_t>(ratio)}).only(kF16).s,
       &L::attn_compressor_ape);
    fn(t("attn_compressor_kv.weight", R::kCompressorProj, {E, W}).only(kF16).s,
       &L::attn_compressor_kv);
    fn(t("attn_compressor_gate.weight", R::kCompressorProj, {E, W}).only(kF16).s,
       &L::attn_compressor_gate);
    fn(t("attn_compressor_norm.weight", R::kNorm, {D}).only(kF32).s, &L::attn_compressor_norm);
  }
  if (ratio == 4) {
    fn(t("indexer.attn_q_b.weight", R::kCompressorProj, {QL, IQ}).only(kF16).s,
       &L::indexer_attn_q_b);
    fn(t("indexer.proj.weight", R::kCompressorProj, {E, static_cast<int64_t>(c.n_indexer_head)})
           .only(kF16).s,
       &L::indexer_proj);
    fn(t("indexer_compressor_ape.weight", R::kApe, {IW, 4}).only(kF16).s,
       &L::indexer_compressor_ape);
    fn(t("indexer_compressor_kv.weight", R::kCompressorProj, {E, IW}).only(kF16).s,
       &L::indexer_compressor_kv);
    fn(t("indexer_compressor_gate.weight", R::kCompressorProj, {E, IW}).only(kF16).s,
       &L::indexer_compressor_gate);
    fn(t("indexer_compressor_norm.weight", R::kNorm, {IDX}).only(kF32).s,
       &L::indexer_compressor_norm);
  }
  fn(t("hc_ffn_fn.weight", R::kHcFn, {HC, M}).only(kF16).s, &L::hc_ffn_fn);
  fn(t("hc_ffn_scale.weight", R::kHcScale, {3}).only(kF32).s, &L::hc_ffn_scale);
  fn(t("hc_ffn_base.weight", R::kHcBase, {M}).only(kF32).s, &L::hc_ffn_base);
  fn(t("ffn_norm.weight", R::kNorm, {E}).only(kF32).s, &L::ffn_norm);
  fn(t("ffn_gate_inp.weight", R::kRouter, {E, X}).only(kF16).s, &L::ffn_gate_inp);
  // Optional: looked up, not required (§2.3).
  fn(t("exp_probs_b.bias", R::kRouterBias, {X}).only(kF32).optional().s, &L::exp_probs_b);
  if (hash) {
    fn(t("ffn_gate_tid2eid.weight", R::kHashTable, {static_cast<int64_t>(c.n_expert_used), V})
           .only(GgmlType::kI32).s,
       &L::ffn_gate_tid2eid);
  }
  const auto iq2 = GgmlType::kIQ2_XXS, q2k = GgmlType::kQ2_K, q4k = GgmlType::kQ4_K;
  fn(t("ffn_gate_exps.weight", R::kRoutedExpert, {E, F, X}).types({iq2, q2k, q4k}, iq2, q4k).s,
     &L::ffn_gate_exps);
  fn(t("ffn_up_exps.weight", R::kRoutedExpert, {E, F, X}).types({iq2, q2k, q4k}, iq2, q4k).s,
     &L::ffn_up_exps);
  fn(t("ffn_down_exps.weight", R::kRoutedExpert, {F, E, X}).types({q2k, q4k}, q2k, q4k).s,
     &L::ffn_down_exps);
  fn(t("ffn_gate_shexp.weight", R::kProjection, {E, F}).only(kQ8).s, &L::ffn_gate_shexp);
  fn(t("ffn_up_shexp.weight", R::kProjection, {E, F}).only(kQ8).s, &L::ffn_up_shexp);
  fn(t("ffn_down_shexp.weight", R::kProjection, {F, E}).only(kQ8).s, &L::ffn_down_shexp);
}

}  // namespace detail

namespace {

using detail::BlockParams;
using detail::emit_block;

// Layer il of the target model.
void emit_layer(const ModelConfig& c, uint32_t il, uint32_t ratio, bool hash, const LayerFn& fn) {
  BlockParams bp;
  bp.prefix = "blk." + std::to_string(il) + ".";
  bp.layer = static_cast<int>(il);
  bp.ratio = ratio;
  bp.hash = hash;
  emit_block(c, bp, fn);
}

// Layer-layout class of a routed-expert triple; false when it is neither q2 nor q4.
bool classify_experts(GgmlType gate, GgmlType down, ExpertQuant* out) {
  if ((gate == GgmlType::kIQ2_XXS || gate == GgmlType::kQ2_K) && down == GgmlType::kQ2_K) {
    *out = ExpertQuant::kQ2;
    return true;
  }
  if (gate == GgmlType::kQ4_K && down == GgmlType::kQ4_K) {
    *out = ExpertQuant::kQ4;
    return true;
  }
  return false;
}

// Parses "blk.<N>.<suffix>"; false if the name does not have that form.
bool parse_layer_name(const std::string& name, uint64_t* layer, std::string* suffix) {
  if (name.rfind("blk.", 0) != 0) return false;
  size_t i = 4;
  uint64_t n = 0;
  size_t digits = 0;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9' && digits < 12) {
    n = n * 10 + static_cast<uint64_t>(name[i] - '0');
    ++i;
    ++digits;
  }
  if (digits == 0 || i >= name.size() || name[i] != '.') return false;
  *layer = n;
  *suffix = name.substr(i + 1);
  return true;
}

}  // namespace

void detail::check_tensor(const TensorSpec& spec, const TensorDesc& t,
                          std::vector<std::string>* errors) {
  if (!spec.allows(t.type))
    errors->push_back(fmt("tensor '%s': expected type %s, got %s", spec.name.c_str(),
                          spec.allowed_string().c_str(), gguf::type_name(t.type)));
  if (t.ne != spec.ne)
    errors->push_back(fmt("tensor '%s': expected shape %s, got %s", spec.name.c_str(),
                          spec.shape_string().c_str(),
                          shape_str(t.ne, std::max(used_dims(t.ne), spec.n_dims)).c_str()));
}

std::string detail::missing_message(const TensorSpec& spec) {
  return fmt("tensor '%s': missing (expected %s %s)", spec.name.c_str(),
             spec.allowed_string().c_str(), spec.shape_string().c_str());
}

const char* expert_quant_name(ExpertQuant q) { return q == ExpertQuant::kQ4 ? "q4" : "q2"; }

TensorView TensorView::expert(int64_t e) const {
  TensorView v = *this;
  v.data = expert_data(e);
  v.ne = {ne[0], ne[1], 1, 1};
  v.nbytes = expert_bytes();
  return v;
}

bool TensorSpec::allows(GgmlType t) const {
  for (int i = 0; i < n_allowed; ++i)
    if (allowed[i] == t) return true;
  return false;
}

std::string TensorSpec::shape_string() const { return shape_str(ne, n_dims); }

std::string TensorSpec::allowed_string() const {
  std::string s;
  for (int i = 0; i < n_allowed; ++i) {
    if (i) s += "|";
    s += gguf::type_name(allowed[i]);
  }
  return s;
}

void for_each_tensor(const ModelConfig& cfg, ModelWeights& weights, const TensorVisitor& fn) {
  weights.layers.resize(cfg.n_layer);
  emit_global(cfg, [&](const TensorSpec& spec, TensorView GlobalWeights::*slot) {
    fn(spec, weights.global.*slot);
  });
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    LayerWeights& lw = weights.layers[il];
    emit_layer(cfg, il, cfg.compress_ratio(il), cfg.is_hash_layer(il),
               [&](const TensorSpec& spec, TensorView LayerWeights::*slot) { fn(spec, lw.*slot); });
  }
}

void for_each_tensor(const ModelConfig& cfg, const ModelWeights& weights, const ConstTensorVisitor& fn) {
  DS4_CHECK(weights.layers.size() == cfg.n_layer);
  emit_global(cfg, [&](const TensorSpec& spec, TensorView GlobalWeights::*slot) {
    fn(spec, weights.global.*slot);
  });
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const LayerWeights& lw = weights.layers[il];
    emit_layer(cfg, il, cfg.compress_ratio(il), cfg.is_hash_layer(il),
               [&](const TensorSpec& spec, TensorView LayerWeights::*slot) { fn(spec, lw.*slot); });
  }
}

void for_each_tensor_spec(const ModelConfig& cfg,
                          const std::function<void(const TensorSpec&)>& fn) {
  emit_global(cfg, [&](const TensorSpec& spec, TensorView GlobalWeights::*) { fn(spec); });
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    emit_layer(cfg, il, cfg.compress_ratio(il), cfg.is_hash_layer(il),
               [&](const TensorSpec& spec, TensorView LayerWeights::*) { fn(spec); });
  }
}

size_t expected_tensor_count(const ModelConfig& cfg) {
  size_t n = 0;
  for_each_tensor_spec(cfg, [&](const TensorSpec&) { ++n; });
  return n;
}

std::vector<TensorDesc> describe_tensors(const gguf::File& file) {
  std::vector<TensorDesc> out;
  out.reserve(file.tensors().size());
  for (const auto& t : file.tensors()) out.push_back({t.name, t.type, t.ne});
  return out;
}

LayoutReport validate_layout(const ModelConfig& cfg, std::span<const TensorDesc> tensors) {
  LayoutReport rep;
  std::unordered_map<std::string_view, const TensorDesc*> by_name;
  by_name.reserve(tensors.size());
  for (const auto& t : tensors) by_name.emplace(t.name, &t);
  std::unordered_set<std::string_view> expected;

  for_each_tensor_spec(cfg, [&](const TensorSpec& spec) {
    auto it = by_name.find(spec.name);
    if (it == by_name.end()) {
      if (spec.required) rep.errors.push_back(detail::missing_message(spec));
      return;
    }
    expected.insert(it->first);
    detail::check_tensor(spec, *it->second, &rep.errors);
  });

  // Routed experts: up == gate type, each layer q2 or q4, all layers agree.
  int ref_layer = -1;
  bool experts_bad = false;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const std::string pre = "blk." + std::to_string(il) + ".";
    auto find = [&](const char* s) -> const TensorDesc* {
      auto it = by_name.find(pre + s);
      return it == by_name.end() ? nullptr : it->second;
    };
    const TensorDesc* gate = find("ffn_gate_exps.weight");
    const TensorDesc* up = find("ffn_up_exps.weight");
    const TensorDesc* down = find("ffn_down_exps.weight");
    if (!gate || !up || !down) continue;  // already reported as missing
    if (up->type != gate->type)
      rep.errors.push_back(fmt("tensor '%sffn_up_exps.weight': expected type %s (same as "
                               "ffn_gate_exps), got %s",
                               pre.c_str(), gguf::type_name(gate->type),
                               gguf::type_name(up->type)));
    experts_bad |= up->type != gate->type;
    ExpertQuant q;
    if (!classify_experts(gate->type, down->type, &q)) {
      rep.errors.push_back(fmt("layer %u routed experts: expected q2 layout (gate/up iq2_xxs or "
                               "q2_K, down q2_K) or q4 layout (gate/up/down q4_K), got gate %s, "
                               "down %s",
                               il, gguf::type_name(gate->type), gguf::type_name(down->type)));
      experts_bad = true;
      continue;
    }
    if (ref_layer < 0) {
      ref_layer = static_cast<int>(il);
      rep.expert_quant = q;
      rep.expert_quant_known = true;
    } else if (q != rep.expert_quant) {
      rep.errors.push_back(fmt("layer %u routed experts: expected the %s layout of layer %d "
                               "(all layers must agree), got %s (gate %s, down %s)",
                               il, expert_quant_name(rep.expert_quant), ref_layer,
                               expert_quant_name(q), gguf::type_name(gate->type),
                               gguf::type_name(down->type)));
      experts_bad = true;
    }
  }
  if (experts_bad) rep.expert_quant_known = false;  // known only for a consistent file

  // Extra tensors: DS4-looking names where the plan says none -> error; others -> warning.
  std::unordered_set<std::string> layer_suffixes, global_names;
  emit_global(cfg, [&](const TensorSpec& s, TensorView GlobalWeights::*) {
    global_names.insert(s.name);
  });
  for (uint32_t ratio : {0u, 4u, 128u}) {
    emit_layer(cfg, 0, ratio, true, [&](const TensorSpec& s, TensorView LayerWeights::*) {
      layer_suffixes.insert(s.name.substr(s.name.find('.', 4) + 1));
    });
  }
  for (const auto& t : tensors) {
    if (expected.count(t.name)) continue;
    uint64_t layer = 0;
    std::string suffix;
    if (parse_layer_name(t.name, &layer, &suffix)) {
      if (layer >= cfg.n_layer) {
        rep.errors.push_back(fmt("tensor '%s': unexpected, layer %" PRIu64
                                 " >= block_count (%u)",
                                 t.name.c_str(), layer, cfg.n_layer));
        continue;
      }
      if (layer_suffixes.count(suffix)) {
        const uint32_t il = static_cast<uint32_t>(layer);
        rep.errors.push_back(fmt("tensor '%s': unexpected in layer %u (ratio %u, %s): the layer "
                                 "plan has no such tensor there",
                                 t.name.c_str(), il, cfg.compress_ratio(il),
                                 cfg.is_hash_layer(il) ? "hash-routed" : "top-k routed"));
        continue;
      }
    }
    rep.warnings.push_back(fmt("tensor '%s': not part of the DS4 layout, ignored", t.name.c_str()));
  }
  return rep;
}

Expected<ModelWeights> bind_weights(const ModelConfig& cfg, const gguf::File& file) {
  ModelWeights w;
  Status st;
  for_each_tensor(cfg, w, [&](const TensorSpec& spec, TensorView& slot) {
    const gguf::TensorInfo* t = file.find_tensor(spec.name);
    if (!t) {
      if (spec.required && st.ok())
        st = internal_error("bind_weights: required tensor '%s' missing (layout not validated?)",
                            spec.name.c_str());
      return;
    }
    if ((!spec.allows(t->type) || t->ne != spec.ne) && st.ok()) {
      st = internal_error("bind_weights: tensor '%s' does not match its spec (layout not "
                          "validated?)", spec.name.c_str());
      return;
    }
    slot.data = t->data;
    slot.type = t->type;
    slot.ne = t->ne;
    slot.row_bytes = t->row_bytes();
    slot.nbytes = t->nbytes;
    slot.name = t->name.c_str();
  });
  if (!st.ok()) return st;
  if (cfg.n_layer > 0) {
    ExpertQuant q;
    if (!classify_experts(w.layers[0].ffn_gate_exps.type, w.layers[0].ffn_down_exps.type, &q))
      return internal_error("bind_weights: layer 0 routed experts are neither q2 nor q4");
    w.expert_quant = q;
  }
  return w;
}

Status check_hash_tables(const ModelConfig& cfg, const ModelWeights& w) {
  for (uint32_t il = 0; il < cfg.n_layer && il < w.layers.size(); ++il) {
    const TensorView& t = w.layers[il].ffn_gate_tid2eid;
    if (!t.present()) continue;
    const int64_t n = t.ne[0] * t.ne[1];
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, t.data + 4 * i, 4);
      if (v < 0 || static_cast<uint32_t>(v) >= cfg.n_expert)
        return invalid_argument("tensor '%s': token %" PRId64 " slot %" PRId64
                                ": expected an expert id in [0, %u), got %d",
                                t.name, i / t.ne[0], i % t.ne[0], cfg.n_expert, v);
    }
  }
  return Status::ok_status();
}

}  // namespace ds4::model
