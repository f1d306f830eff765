// speculative/drafter_weights.cpp — support GGUF metadata, layout validation and binding (see header).
#include "speculative/drafter_weights.h"

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>

#include "core/log.h"
#include "quant/quant.h"

namespace ds4::speculative {

namespace {

using gguf::GgmlType;

std::string fmt(const char* f, ...) __attribute__((format(printf, 1, 2)));
std::string fmt(const char* f, ...) {
  char buf[1024];
  va_list ap;
  va_start(ap, f);
  std::vsnprintf(buf, sizeof buf, f, ap);
  va_end(ap);
  return buf;
}

std::string shape_str(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(ne[i]);
  }
  return s + "]";
}

std::string shape_str(const gguf::TensorInfo& t) {
  std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
  return shape_str(ne);
}

// The key under the first spelling present, or "" (dspark-drafter.md §1.3). The standalone 0731
// layout has one spelling only: bare `dspark.<k>`.
std::string find_key(const gguf::File& f, const std::string& k, SupportLayout layout) {
  if (layout == SupportLayout::kStandalone0731) return f.has("dspark." + k) ? "dspark." + k : "";
  for (const std::string& p : {std::string("deepseek4.dspark."), std::string("deepseek4.dspark_"), std::string("dspark.")}) {
    if (f.has(p + k)) return p + k;
  }
  return "";
}

// The spelling a missing key is reported under.
std::string canonical_key(const std::string& k, SupportLayout layout) {
  return (layout == SupportLayout::kStandalone0731 ? "dspark." : "deepseek4.dspark.") + k;
}

SupportLayout detect_layout(const gguf::File& f) {
  auto arch = f.get_string_or("general.architecture", "");
  return arch.ok() && *arch == kStandaloneArchitecture ? SupportLayout::kStandalone0731
                                                       : SupportLayout::kDeepseek4Keys;
}

constexpr const char* kSourcePrefix = "dspark.source.";

bool type_in(GgmlType t, std::initializer_list<GgmlType> list) {
  return std::find(list.begin(), list.end(), t) != list.end();
}

bool kind_allows(DTensorKind k, GgmlType t) {
  switch (k) {
    case DTensorKind::kDense: return type_in(t, {GgmlType::kF16, GgmlType::kF32, GgmlType::kBF16, GgmlType::kQ8_0});
    case DTensorKind::kHcFn: return type_in(t, {GgmlType::kF16, GgmlType::kF32, GgmlType::kBF16});
    case DTensorKind::kVector: return type_in(t, {GgmlType::kF32, GgmlType::kF16, GgmlType::kBF16});
    case DTensorKind::kExpert: return type_in(t, {GgmlType::kIQ2_XXS, GgmlType::kQ2_K, GgmlType::kQ4_K});
  }
  return false;
}

const char* kind_allowed_str(DTensorKind k) {
  switch (k) {
    case DTensorKind::kDense: return "f16|f32|bf16|q8_0";
    case DTensorKind::kHcFn: return "f16|f32|bf16";
    case DTensorKind::kVector: return "f32|f16|bf16";
    case DTensorKind::kExpert: return "iq2_xxs|q2_K|q4_K";
  }
  return "";
}

// Stage index of a `mtp.N.` name, or -1.
int stage_of(const std::string& name) {
  if (name.rfind("mtp.", 0) != 0) return -1;
  size_t i = 4;
  int n = 0;
  bool digit = false;
  while (i < name.size() && name[i] >= '0' && name[i] <= '9') {
    n = n * 10 + (name[i] - '0');
    if (n > 1000) return -1;
    digit = true;
    ++i;
  }
  if (!digit || i >= name.size() || name[i] != '.') return -1;
  return n;
}

int count_stages(const gguf::File& f) {
  int max_s = -1;
  for (const gguf::TensorInfo& t : f.tensors()) max_s = std::max(max_s, stage_of(t.name));
  return max_s + 1;
}

}  // namespace

std::vector<DTensorSpec> drafter_tensor_specs(const model::ModelConfig& c, const DSparkConfig& d) {
  const int64_t E = c.n_embd, HC = c.hc_dim(), MIX = c.hc_mix_dim(), QL = c.q_lora_rank, Q = c.q_dim();
  const int64_t D = c.head_dim, OL = c.o_low_dim(), G = c.group_dim(), X = c.n_expert, F = c.n_ff_exp;
  const int64_t V = c.n_vocab, R = d.markov_rank, NC = static_cast<int64_t>(d.target_layers.size());
  std::vector<DTensorSpec> out;
  auto add = [&](std::string name, DTensorKind k, std::vector<int64_t> ne, int stage, float std, float center = 0.0f) {
    out.push_back(DTensorSpec{std::move(name), k, std::move(ne), stage, std, center});
  };
  auto inv = [](int64_t fan) { return 1.0f / std::sqrt(static_cast<float>(fan)); };
  for (int s = 0; s < d.n_stages; ++s) {
    const std::string p = "mtp." + std::to_string(s) + ".";
    add(p + "hc_attn_fn.weight", DTensorKind::kHcFn, {HC, MIX}, s, 0.3f * inv(HC));
    add(p + "hc_attn_scale.weight", DTensorKind::kVector, {3}, s, 0.05f, 0.5f);
    add(p + "hc_attn_base.weight", DTensorKind::kVector, {MIX}, s, 0.1f);
    add(p + "attn_norm.weight", DTensorKind::kVector, {E}, s, 0.05f, 1.0f);
    add(p + "attn_q_a.weight", DTensorKind::kDense, {E, QL}, s, inv(E));
    add(p + "attn_q_a_norm.weight", DTensorKind::kVector, {QL}, s, 0.05f, 1.0f);
    add(p + "attn_q_b.weight", DTensorKind::kDense, {QL, Q}, s, inv(QL));
    add(p + "attn_kv.weight", DTensorKind::kDense, {E, D}, s, inv(E));
    add(p + "attn_kv_a_norm.weight", DTensorKind::kVector, {D}, s, 0.05f, 1.0f);
    add(p + "attn_sinks.weight", DTensorKind::kVector, {static_cast<int64_t>(c.n_head)}, s, 0.01f);
    add(p + "attn_output_a.weight", DTensorKind::kDense, {G, OL}, s, inv(G));
    add(p + "attn_output_b.weight", DTensorKind::kDense, {OL, E}, s, inv(OL));
    add(p + "hc_ffn_fn.weight", DTensorKind::kHcFn, {HC, MIX}, s, 0.3f * inv(HC));
    add(p + "hc_ffn_scale.weight", DTensorKind::kVector, {3}, s, 0.05f, 0.5f);
    add(p + "hc_ffn_base.weight", DTensorKind::kVector, {MIX}, s, 0.1f);
    add(p + "ffn_norm.weight", DTensorKind::kVector, {E}, s, 0.05f, 1.0f);
    add(p + "ffn_gate_inp.weight", DTensorKind::kDense, {E, X}, s, inv(E));
    add(p + "exp_probs_b.bias", DTensorKind::kVector, {X}, s, 0.01f);
    add(p + "ffn_gate_exps.weight", DTensorKind::kExpert, {E, F, X}, s, inv(E));
    add(p + "ffn_up_exps.weight", DTensorKind::kExpert, {E, F, X}, s, inv(E));
    add(p + "ffn_down_exps.weight", DTensorKind::kExpert, {F, E, X}, s, inv(F));
    add(p + "ffn_gate_shexp.weight", DTensorKind::kDense, {E, F}, s, inv(E));
    add(p + "ffn_up_shexp.weight", DTensorKind::kDense, {E, F}, s, inv(E));
    add(p + "ffn_down_shexp.weight", DTensorKind::kDense, {F, E}, s, inv(F));
  }
  const std::string last = "mtp." + std::to_string(std::max(0, d.n_stages - 1)) + ".";
  add("mtp.0.main_proj.weight", DTensorKind::kDense, {NC * E, E}, -1, inv(NC * E));
  add("mtp.0.main_norm.weight", DTensorKind::kVector, {E}, -1, 0.05f, 1.0f);
  add(last + "norm.weight", DTensorKind::kVector, {E}, -1, 0.05f, 1.0f);
  add(last + "hc_head_base.weight", DTensorKind::kVector, {static_cast<int64_t>(c.n_hc)}, -1, 0.1f);
  add(last + "hc_head_fn.weight", DTensorKind::kHcFn, {HC, static_cast<int64_t>(c.n_hc)}, -1, 0.3f * inv(HC));
  add(last + "hc_head_scale.weight", DTensorKind::kVector, {1}, -1, 0.05f, 0.5f);
  add(last + "markov_head.markov_w1.weight", DTensorKind::kDense, {R, V}, -1, 1.0f);
  add(last + "markov_head.markov_w2.weight", DTensorKind::kDense, {R, V}, -1, 0.5f * inv(R));
  add(last + "confidence_head.proj.weight", DTensorKind::kDense, {E + R, 1}, -1, inv(E + R));
  return out;
}

namespace {

// Metadata of a support file. `target` may be null (describe_support): the checks that need the
// target (vocab, layer range, default window) are then skipped.
void read_metadata(const gguf::File& f, const model::ModelConfig* target, DSparkConfig* out,
                   std::vector<std::string>* errs_out) {
  DSparkConfig& d = *out;
  std::vector<std::string>& errs = *errs_out;
  const SupportLayout layout = detect_layout(f);
  d.layout = layout;
  d.n_stages = count_stages(f);
  if (d.n_stages < 1) errs.push_back("no 'mtp.N.*' tensors: not a DSpark support file");
  auto get_u32 = [&](const std::string& k, bool required, uint32_t def) -> uint32_t {
    const std::string key = find_key(f, k, layout);
    if (key.empty()) {
      if (required) errs.push_back(fmt("metadata %s: required key missing", canonical_key(k, layout).c_str()));
      return def;
    }
    auto v = f.get_u32(key);
    if (!v.ok()) {
      errs.push_back(fmt("metadata %s: %s", key.c_str(), v.status().message().c_str()));
      return def;
    }
    return *v;
  };
  const uint32_t bs = get_u32("block_size", true, 0);
  const uint32_t rank = get_u32("markov_rank", true, 0);
  const uint32_t noise = get_u32("noise_token_id", true, 0);
  const uint32_t window = get_u32("sliding_window", false, target ? target->n_swa : 1);
  if (!find_key(f, "block_size", layout).empty() && (bs < 1 || bs > static_cast<uint32_t>(kMaxBlockSize)))
    errs.push_back(fmt("metadata block_size: expected 1..%d, got %u", kMaxBlockSize, bs));
  if (!find_key(f, "markov_rank", layout).empty() && (rank == 0 || rank % 32 != 0))
    errs.push_back(fmt("metadata markov_rank: expected a positive multiple of 32, got %u", rank));
  if (target && !find_key(f, "noise_token_id", layout).empty() && noise >= target->n_vocab)
    errs.push_back(fmt("metadata noise_token_id: expected < target vocab %u, got %u", target->n_vocab, noise));
  if (window < 1 || window > 1u << 20) errs.push_back(fmt("metadata sliding_window: expected 1..2^20, got %u", window));
  d.block_size = static_cast<int>(bs);
  d.markov_rank = static_cast<int>(rank);
  d.noise_token_id = static_cast<int32_t>(noise);
  d.window = static_cast<int>(window);

  const std::string lk = find_key(f, "target_layer_ids", layout);
  if (lk.empty()) {
    errs.push_back(fmt("metadata %s: required key missing", canonical_key("target_layer_ids", layout).c_str()));
  } else {
    auto ids = f.get_array_i64(lk);
    if (!ids.ok()) {
      errs.push_back(fmt("metadata %s: %s", lk.c_str(), ids.status().message().c_str()));
    } else if (ids->empty() || ids->size() > static_cast<size_t>(kMaxCaptureLayers)) {
      errs.push_back(fmt("metadata %s: expected 1..%d entries, got %zu", lk.c_str(), kMaxCaptureLayers, ids->size()));
    } else {
      for (size_t i = 0; i < ids->size(); ++i) {
        const int64_t v = (*ids)[i];
        const int64_t n_layer = target ? static_cast<int64_t>(target->n_layer) : INT32_MAX;
        if (v < 0 || v >= n_layer) {
          errs.push_back(fmt("metadata %s[%zu]: expected a target layer in [0, %lld), got %lld", lk.c_str(), i,
                             static_cast<long long>(n_layer), static_cast<long long>(v)));
        } else if (i > 0 && v <= (*ids)[i - 1]) {
          errs.push_back(fmt("metadata %s: expected strictly increasing ids, got %lld after %lld", lk.c_str(),
                             static_cast<long long>(v), static_cast<long long>((*ids)[i - 1])));
        }
        d.target_layers.push_back(static_cast<int>(v));
      }
    }
  }
  if (layout != SupportLayout::kStandalone0731) return;

  // The 0731 standalone file: stage records agree with the tensor names, provenance strings,
  // and no second spelling of the keys (ds4's own validator refuses aliases there too).
  for (const char* k : {"stage_count", "n_layers"}) {
    const uint32_t v = get_u32(k, true, 0);
    if (!find_key(f, k, layout).empty() && d.n_stages >= 1 && v != static_cast<uint32_t>(d.n_stages))
      errs.push_back(fmt("metadata dspark.%s: expected %d (stages mtp.0..mtp.%d in the tensor names), got %u", k,
                         d.n_stages, d.n_stages - 1, v));
  }
  for (const gguf::KeyValue& kv : f.metadata()) {
    if (kv.key.rfind("deepseek4.dspark", 0) == 0) {
      errs.push_back(fmt("metadata %s: unexpected in a %s file (its keys are bare dspark.*)", kv.key.c_str(),
                         kStandaloneArchitecture));
      continue;
    }
    if (kv.key.rfind(kSourcePrefix, 0) != 0) continue;
    if (kv.type != gguf::ValueType::kString) {
      errs.push_back(fmt("metadata %s: expected a string, got %s", kv.key.c_str(), kv.type_string().c_str()));
      continue;
    }
    d.provenance.fields.emplace_back(kv.key, std::string(kv.str));
    if (kv.key == "dspark.source.revision") d.provenance.revision = std::string(kv.str);
  }
  if (!f.has("dspark.source.revision"))
    errs.push_back("metadata dspark.source.revision: required key missing (the target checkpoint the drafter was "
                   "trained for)");
}

}  // namespace

const char* support_layout_name(SupportLayout layout) {
  return layout == SupportLayout::kStandalone0731 ? "deepseek4-dspark (0731 standalone, bare dspark.* keys)"
                                                  : "deepseek4.dspark (keys under deepseek4.dspark.*)";
}

Expected<DSparkConfig> read_drafter_config(const gguf::File& f, const model::ModelConfig& target) {
  DSparkConfig d;
  std::vector<std::string> errs;
  read_metadata(f, &target, &d, &errs);
  if (!errs.empty()) {
    std::string msg = "DSpark support file";
    if (!f.path().empty()) msg += " '" + f.path() + "'";
    msg += ": ";
    for (size_t i = 0; i < errs.size(); ++i) msg += (i ? "; " : "") + errs[i];
    return invalid_argument("%s", msg.c_str());
  }
  return d;
}

SupportInfo describe_support(const gguf::File& f) {
  SupportInfo info;
  DSparkConfig d;
  read_metadata(f, nullptr, &d, &info.errors);
  info.layout = d.layout;
  info.n_stages = d.n_stages;
  info.provenance = d.provenance;
  const std::string k = find_key(f, "block_size", d.layout);
  if (!k.empty()) info.key_prefix = k.substr(0, k.size() - std::string("block_size").size());
  return info;
}

namespace {

bool same_revision(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  return true;
}

// "7872f01b… (DeepSeek-V4-Flash-0731)" for revisions we know, else the revision itself.
std::string revision_text(const std::string& rev) {
  if (same_revision(rev, model::kFlash0731Revision)) return rev + " (DeepSeek-V4-Flash-0731)";
  return rev;
}

}  // namespace

ProvenanceCheck check_provenance(const DSparkConfig& cfg, const model::ModelConfig& target) {
  ProvenanceCheck c;
  if (cfg.provenance.revision.empty()) return c;  // kNotRecorded
  if (target.source_revision.empty()) {
    c.match = ProvenanceMatch::kTargetUnknown;
    c.message = fmt("the DSpark support file was trained for target revision %s; the target model carries no "
                    "general.source.revision, so the pairing cannot be confirmed",
                    revision_text(cfg.provenance.revision).c_str());
    return c;
  }
  if (same_revision(cfg.provenance.revision, target.source_revision)) {
    c.match = ProvenanceMatch::kMatch;
    return c;
  }
  c.match = ProvenanceMatch::kMismatch;
  const std::string name = target.name.empty() ? std::string() : " '" + target.name + "'";
  c.message = fmt("the DSpark support file was trained for target revision %s, but the loaded model%s is revision "
                  "%s: output is still the target's own greedy text (every draft is verified), but fewer drafts "
                  "will be accepted and DSpark will be slower than with the drafter trained for this model",
                  revision_text(cfg.provenance.revision).c_str(), name.c_str(),
                  revision_text(target.source_revision).c_str());
  return c;
}

std::vector<std::string> validate_drafter(const gguf::File& f, const model::ModelConfig& target, DSparkConfig* out_cfg) {
  std::vector<std::string> errs;
  // The metadata problems themselves (bind_drafter and the tools add the file name once).
  DSparkConfig parsed;
  read_metadata(f, &target, &parsed, &errs);
  const DSparkConfig* cfg = &parsed;
  if (!errs.empty()) return errs;
  if (out_cfg) *out_cfg = *cfg;
  const std::vector<DTensorSpec> specs = drafter_tensor_specs(target, *cfg);
  std::set<std::string> expected;
  for (const DTensorSpec& s : specs) {
    expected.insert(s.name);
    const gguf::TensorInfo* t = f.find_tensor(s.name);
    if (t == nullptr) {
      errs.push_back(fmt("tensor '%s': missing (expected %s %s)", s.name.c_str(), kind_allowed_str(s.kind),
                         shape_str(s.ne).c_str()));
      continue;
    }
    if (!kind_allows(s.kind, t->type)) {
      errs.push_back(fmt("tensor '%s': type expected %s, got %s", s.name.c_str(), kind_allowed_str(s.kind),
                         gguf::type_name(t->type)));
    }
    std::vector<int64_t> got(t->ne.begin(), t->ne.begin() + t->n_dims);
    bool shape_ok = got == s.ne;
    // The confidence projection may be stored 1-D [E+R].
    if (!shape_ok && s.ne.size() == 2 && s.ne[1] == 1 && got.size() == 1 && got[0] == s.ne[0]) shape_ok = true;
    if (!shape_ok) {
      errs.push_back(fmt("tensor '%s': shape expected %s, got %s", s.name.c_str(), shape_str(s.ne).c_str(),
                         shape_str(*t).c_str()));
    }
  }
  for (int s = 0; s < cfg->n_stages; ++s) {
    const std::string p = "mtp." + std::to_string(s) + ".";
    const gguf::TensorInfo* g = f.find_tensor(p + "ffn_gate_exps.weight");
    const gguf::TensorInfo* u = f.find_tensor(p + "ffn_up_exps.weight");
    if (g && u && g->type != u->type) {
      errs.push_back(fmt("tensor '%sffn_up_exps.weight': type expected %s (same as gate), got %s", p.c_str(),
                         gguf::type_name(g->type), gguf::type_name(u->type)));
    }
  }
  {
    const gguf::TensorInfo* w1 = f.find_tensor("mtp." + std::to_string(cfg->n_stages - 1) + ".markov_head.markov_w1.weight");
    if (w1 && w1->ne[0] != cfg->markov_rank)
      errs.push_back(fmt("metadata markov_rank: expected markov_w1.ne[0] = %lld, got %d",
                         static_cast<long long>(w1->ne[0]), cfg->markov_rank));
  }
  for (const gguf::TensorInfo& t : f.tensors()) {
    if (expected.count(t.name)) continue;
    if (stage_of(t.name) >= 0) {
      errs.push_back(fmt("tensor '%s': unexpected in a DSpark support file (stages are SWA-only blocks with "
                         "learned routing: no compressor/indexer/tid2eid; head tensors only on mtp.%d)",
                         t.name.c_str(), cfg->n_stages - 1));
    }
  }
  return errs;
}

namespace {

// Converts a tensor to an owned F32 copy (rows of ne[0]).
const float* to_f32(DrafterWeights& w, const gguf::TensorInfo& t) {
  std::vector<float> v(static_cast<size_t>(t.n_elements()));
  const int64_t rows = t.n_elements() / t.ne[0];
  const uint64_t rb = t.row_bytes();
  for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t.type, t.data + r * rb, v.data() + r * t.ne[0], t.ne[0]);
  w.owned.push_back(std::move(v));
  return w.owned.back().data();
}

backend::Matrix matrix(DrafterWeights& w, const gguf::TensorInfo& t) {
  const int64_t n_in = t.ne[0];
  const int64_t n_out = t.n_elements() / n_in;
  if (t.type == GgmlType::kBF16) {
    const float* p = to_f32(w, t);
    return backend::Matrix{reinterpret_cast<const uint8_t*>(p), GgmlType::kF32, n_in, n_out, static_cast<size_t>(n_in) * 4};
  }
  return backend::Matrix{t.data, t.type, n_in, n_out, static_cast<size_t>(t.row_bytes())};
}

const float* vec(DrafterWeights& w, const gguf::TensorInfo& t) {
  if (t.type == GgmlType::kF32) return reinterpret_cast<const float*>(t.data);
  return to_f32(w, t);
}

backend::ExpertMatrix experts(const gguf::TensorInfo& t) {
  return backend::ExpertMatrix{t.data, t.type, t.ne[0], t.ne[1], t.ne[2], static_cast<size_t>(t.row_bytes())};
}

}  // namespace

Expected<std::unique_ptr<DrafterWeights>> bind_drafter(std::unique_ptr<gguf::File> file, const model::ModelConfig& target) {
  return bind_drafter(std::move(file), target, DrafterLoadOptions{});
}

Expected<std::unique_ptr<DrafterWeights>> bind_drafter(std::unique_ptr<gguf::File> file, const model::ModelConfig& target,
                                                       const DrafterLoadOptions& opt) {
  DSparkConfig cfg;
  std::vector<std::string> errs = validate_drafter(*file, target, &cfg);
  if (!errs.empty()) {
    std::string msg = "DSpark support file";
    if (!file->path().empty()) msg += " '" + file->path() + "'";
    msg += " does not match the target model: ";
    for (size_t i = 0; i < errs.size(); ++i) msg += (i ? "; " : "") + errs[i];
    return invalid_argument("%s", msg.c_str());
  }
  auto w = std::make_unique<DrafterWeights>();
  w->config = cfg;
  // Warning, not refusal, by default: verification keeps the output exact whatever the drafter,
  // so a mismatched pair costs speed only, and revision strings can legitimately differ (a
  // requantized or re-uploaded target); callers that want the strict check opt in.
  const ProvenanceCheck pc = check_provenance(cfg, target);
  if (pc.match == ProvenanceMatch::kMismatch) {
    if (opt.require_matching_provenance) {
      return invalid_argument("DSpark support file '%s' refused: %s", file->path().c_str(), pc.message.c_str());
    }
    DS4_LOG_WARN("%s", pc.message.c_str());
    w->warnings.push_back(pc.message);
  } else if (pc.match == ProvenanceMatch::kTargetUnknown) {
    DS4_LOG_INFO("%s", pc.message.c_str());
  }
  // owned: converted copies; moving an inner vector keeps its buffer, so pointers stay valid.
  w->stages.resize(cfg.n_stages);
  auto T = [&](const std::string& name) -> const gguf::TensorInfo& {
    const gguf::TensorInfo* t = file->find_tensor(name);
    DS4_CHECK(t != nullptr);
    ++w->n_tensors;
    return *t;
  };
  for (int s = 0; s < cfg.n_stages; ++s) {
    const std::string p = "mtp." + std::to_string(s) + ".";
    StageWeights& st = w->stages[s];
    st.hc_attn_fn = matrix(*w, T(p + "hc_attn_fn.weight"));
    st.hc_attn_scale = vec(*w, T(p + "hc_attn_scale.weight"));
    st.hc_attn_base = vec(*w, T(p + "hc_attn_base.weight"));
    st.attn_norm = vec(*w, T(p + "attn_norm.weight"));
    st.attn_q_a = matrix(*w, T(p + "attn_q_a.weight"));
    st.q_a_norm = vec(*w, T(p + "attn_q_a_norm.weight"));
    st.attn_q_b = matrix(*w, T(p + "attn_q_b.weight"));
    st.attn_kv = matrix(*w, T(p + "attn_kv.weight"));
    st.kv_a_norm = vec(*w, T(p + "attn_kv_a_norm.weight"));
    st.sinks = vec(*w, T(p + "attn_sinks.weight"));
    st.attn_output_a = matrix(*w, T(p + "attn_output_a.weight"));
    st.attn_output_b = matrix(*w, T(p + "attn_output_b.weight"));
    st.hc_ffn_fn = matrix(*w, T(p + "hc_ffn_fn.weight"));
    st.hc_ffn_scale = vec(*w, T(p + "hc_ffn_scale.weight"));
    st.hc_ffn_base = vec(*w, T(p + "hc_ffn_base.weight"));
    st.ffn_norm = vec(*w, T(p + "ffn_norm.weight"));
    st.ffn_gate_inp = matrix(*w, T(p + "ffn_gate_inp.weight"));
    st.exp_probs_b = vec(*w, T(p + "exp_probs_b.bias"));
    st.gate_exps = experts(T(p + "ffn_gate_exps.weight"));
    st.up_exps = experts(T(p + "ffn_up_exps.weight"));
    st.down_exps = experts(T(p + "ffn_down_exps.weight"));
    st.ffn_gate_shexp = matrix(*w, T(p + "ffn_gate_shexp.weight"));
    st.ffn_up_shexp = matrix(*w, T(p + "ffn_up_shexp.weight"));
    st.ffn_down_shexp = matrix(*w, T(p + "ffn_down_shexp.weight"));
  }
  const std::string last = "mtp." + std::to_string(cfg.n_stages - 1) + ".";
  w->main_proj = matrix(*w, T("mtp.0.main_proj.weight"));
  w->main_norm = vec(*w, T("mtp.0.main_norm.weight"));
  w->norm = vec(*w, T(last + "norm.weight"));
  w->hc_head_base = vec(*w, T(last + "hc_head_base.weight"));
  w->hc_head_fn = matrix(*w, T(last + "hc_head_fn.weight"));
  w->hc_head_scale = vec(*w, T(last + "hc_head_scale.weight"));
  w->markov_w1 = matrix(*w, T(last + "markov_head.markov_w1.weight"));
  w->markov_w2 = matrix(*w, T(last + "markov_head.markov_w2.weight"));
  w->confidence = matrix(*w, T(last + "confidence_head.proj.weight"));
  w->confidence.n_out = 1;
  w->file = std::move(file);
  return w;
}

Expected<std::unique_ptr<DrafterWeights>> open_drafter_weights(const std::string& path, const model::ModelConfig& target) {
  auto f = gguf::File::open(path);
  if (!f.ok()) return f.status();
  return bind_drafter(std::move(f).value(), target);
}

Expected<std::unique_ptr<DrafterWeights>> open_drafter_weights(const std::string& path, const model::ModelConfig& target,
                                                               const DrafterLoadOptions& opt) {
  auto f = gguf::File::open(path);
  if (!f.ok()) return f.status();
  return bind_drafter(std::move(f).value(), target, opt);
}

}  // namespace ds4::speculative
