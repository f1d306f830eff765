// tools/ds4-gguf/generate.cpp — deterministic random-weight DS4 models (`ds4-gguf generate`).
//
// Values: every element is a pure function of (seed, tensor name, element index) or, for
// quantized tensors, of (seed, tensor name, row index) — a counter-based splitmix64 — so the
// file does not depend on how the writer chunks a tensor. Scales keep activations realistic
// through all layers (see init_scale()): norm weights ~1, projections ~1/sqrt(fan_in), HC fns
// small so Sinkhorn stays well-conditioned, router logits O(1), APE small, sinks ~0.
// Sparse mode: only K experts per layer hold data (the others are file holes, i.e. zero
// blocks, which are valid blocks that dequantize to 0); exp_probs_b gives the filled experts
// +kSparseBias and tid2eid rows name only filled experts, so routing always lands on data.
#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <vector>

#include "core/timer.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "tokenizer/tokenizer.h"
#include "tools/ds4-gguf/ds4_gguf.h"
#include "tools/ds4-gguf/parallel.h"

namespace ds4::tools {

using gguf::GgmlType;
using model::ModelConfig;
using model::TensorRole;
using model::TensorSpec;

namespace {

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
// Counter-based stream: value number i of stream `key`.
inline uint64_t counter_u64(uint64_t key, uint64_t i) {
  return mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull);
}
uint64_t name_hash(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return h;
}

uint64_t tensor_key(uint64_t seed, const std::string& name) {
  return mix64(seed * 0xd1342543de82ef95ull + name_hash(name));
}

// Center and spread of a tensor's element distribution (uniform around `center`).
struct Init {
  float center = 0.0f;
  float std = 0.0f;  // element std around center (uniform: half-width = std * sqrt(3))
};

Init init_scale(const TensorSpec& s) {
  const float fan_in = static_cast<float>(s.ne[0]);
  switch (s.role) {
    case TensorRole::kEmbedding: return {0.0f, 1.0f};
    case TensorRole::kNorm: return {1.0f, 0.05f};
    // m = fn · rms_norm(X) has std ~ std_fn * sqrt(HC): keep the mix logits ~0.3.
    case TensorRole::kHcFn: return {0.0f, 0.3f / std::sqrt(fan_in)};
    case TensorRole::kHcScale: return {0.5f, 0.05f};
    case TensorRole::kHcBase: return {0.0f, 0.1f};
    case TensorRole::kProjection: return {0.0f, 1.0f / std::sqrt(fan_in)};
    case TensorRole::kSinks: return {0.0f, 0.01f};
    case TensorRole::kCompressorProj: return {0.0f, 1.0f / std::sqrt(fan_in)};
    case TensorRole::kApe: return {0.0f, 0.02f};
    case TensorRole::kRouter: return {0.0f, 1.0f / std::sqrt(fan_in)};
    case TensorRole::kRouterBias: return {0.0f, 0.01f};
    case TensorRole::kHashTable: return {0.0f, 0.0f};
    case TensorRole::kRoutedExpert: return {0.0f, 1.0f / std::sqrt(fan_in)};
  }
  return {};
}

bool is_plain_float(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

// Everything a fill callback needs; copied into the callback (the writer keeps it).
struct TensorPlan {
  TensorSpec spec;
  GgmlType type = GgmlType::kF32;
  uint64_t key = 0;
  Init init;
  uint64_t row_bytes = 0;
  uint64_t nbytes = 0;
  bool quantize_real = true;
  std::vector<uint8_t> filled_mask;  // [n_expert] for router bias / experts (1 = filled)
  std::vector<uint32_t> filled;      // ascending filled expert ids (tid2eid choices)
  uint32_t n_expert = 0;
  uint32_t n_used = 0;
  bool sparse = false;
  std::vector<uint8_t> block_template;  // one block from quant::fill_random_blocks
  std::vector<uint32_t> scale_offsets;  // byte offsets of the f16 scale fields in a block
};

// Element values of a float stream: 4 elements per counter hash (16 bits each), uniform in
// [-1, 1). Element i depends only on (key, i).
struct SymStream {
  uint64_t key;
  uint64_t cached = ~0ull;
  uint64_t h = 0;
  float at(uint64_t i) {
    const uint64_t b = i >> 2;
    if (b != cached) {
      cached = b;
      h = counter_u64(key, b);
    }
    const int16_t v = static_cast<int16_t>(h >> (16 * (i & 3)));
    return static_cast<float>(v) * (1.0f / 32768.0f);
  }
};

float element_value(const TensorPlan& p, SymStream& s, uint64_t i) {
  if (p.spec.role == TensorRole::kRouterBias && p.sparse) {
    const uint64_t e = i % p.n_expert;
    return p.filled_mask[e] ? kSparseBias : 0.0f;
  }
  return p.init.center + p.init.std * 1.7320508f * s.at(i);
}

// tid2eid entry (token t, slot j): n_used distinct experts from p.filled per token
// (rejection sampling on a per-token counter stream; n_used <= kMaxHashSlots).
constexpr uint32_t kMaxHashSlots = 64;
int32_t hash_entry(const TensorPlan& p, uint64_t t, uint32_t j) {
  int32_t chosen[kMaxHashSlots];
  const uint32_t k = static_cast<uint32_t>(p.filled.size());
  for (uint32_t s = 0; s <= j; ++s) {
    uint64_t attempt = 0;
    for (;;) {
      const uint64_t r = counter_u64(p.key ^ (t * 0x632be59bd9b4e019ull), s * 1024 + attempt++);
      const int32_t e = static_cast<int32_t>(p.filled[r % k]);
      bool dup = false;
      for (uint32_t q = 0; q < s; ++q) dup |= chosen[q] == e;
      if (!dup) {
        chosen[s] = e;
        break;
      }
    }
  }
  return chosen[j];
}

// Random valid row of a block type: every byte random (any bit pattern of these formats is a
// valid block), then each block's f16 scale fields are set from a template block made by
// quant::fill_random_blocks at the wanted magnitude (so the RMS follows quant's formulas).
void random_blocks_row(const TensorPlan& p, uint64_t row, uint8_t* dst) {
  const uint64_t k = counter_u64(p.key, row);
  uint64_t j = 0;
  for (; j + 8 <= p.row_bytes; j += 8) {
    const uint64_t h = counter_u64(k, j >> 3);
    std::memcpy(dst + j, &h, 8);
  }
  if (j < p.row_bytes) {
    const uint64_t h = counter_u64(k, j >> 3);
    std::memcpy(dst + j, &h, p.row_bytes - j);
  }
  const uint64_t bb = gguf::type_block_bytes(p.type);
  for (uint64_t b = 0; b < p.row_bytes / bb; ++b) {
    for (uint32_t off : p.scale_offsets) std::memcpy(dst + b * bb + off, p.block_template.data() + off, 2);
  }
}

void fill_chunk(const TensorPlan& p, uint64_t off, std::span<uint8_t> out) {
  const GgmlType t = p.type;
  if (t == GgmlType::kI32) {
    DS4_CHECK(off % 4 == 0 && out.size() % 4 == 0);
    const uint64_t first = off / 4;
    for (size_t k = 0; k < out.size() / 4; ++k) {
      const uint64_t i = first + k;
      const int32_t v = hash_entry(p, i / p.n_used, static_cast<uint32_t>(i % p.n_used));
      std::memcpy(out.data() + 4 * k, &v, 4);
    }
    return;
  }
  if (is_plain_float(t)) {
    const uint64_t esz = gguf::type_block_bytes(t);
    DS4_CHECK(off % esz == 0 && out.size() % esz == 0);
    const uint64_t first = off / esz;
    parallel_for(out.size() / esz, 1 << 18, [&](uint64_t b, uint64_t e) {
      SymStream s{p.key};
      for (uint64_t k = b; k < e; ++k) {
        const float v = element_value(p, s, first + k);
        if (t == GgmlType::kF32) {
          std::memcpy(out.data() + 4 * k, &v, 4);
        } else {
          const uint16_t h = t == GgmlType::kF16 ? quant::f32_to_f16(v) : quant::f32_to_bf16(v);
          std::memcpy(out.data() + 2 * k, &h, 2);
        }
      }
    });
    return;
  }
  // Quantized: whole rows (the writer chunks on row boundaries when a row fits in a chunk).
  DS4_CHECK(off % p.row_bytes == 0 && out.size() % p.row_bytes == 0);
  const int64_t ne0 = p.spec.ne[0];
  const uint64_t first_row = off / p.row_bytes;
  const uint64_t n_rows = out.size() / p.row_bytes;
  const uint64_t min_rows = p.quantize_real ? 16 : std::max<uint64_t>(1, (1 << 20) / p.row_bytes);
  parallel_for(n_rows, min_rows, [&](uint64_t b, uint64_t e) {
    std::vector<float> row(p.quantize_real ? static_cast<size_t>(ne0) : 0);
    SymStream s{p.key};
    for (uint64_t r = b; r < e; ++r) {
      const uint64_t gr = first_row + r;
      uint8_t* dst = out.data() + r * p.row_bytes;
      if (p.quantize_real) {
        for (int64_t i = 0; i < ne0; ++i) row[i] = element_value(p, s, gr * ne0 + i);
        quant::quantize_row(t, row.data(), dst, ne0);
      } else {
        random_blocks_row(p, gr, dst);
      }
    }
  });
}

// Progress on stderr, at most every 2 s.
struct Progress {
  bool enabled = false;
  uint64_t total = 0;
  uint64_t done = 0;
  Timer timer;
  double last = 0.0;
  void add(uint64_t n, const std::string& name) {
    done += n;
    if (!enabled) return;
    const double now = timer.seconds();
    if (now - last < 2.0 && done < total) return;
    last = now;
    std::fprintf(stderr, "generate: %6.2f / %.2f GB written (%4.1f%%), %.1f s, at %s\n",
                 done / 1e9, total / 1e9, total ? 100.0 * done / total : 100.0, now, name.c_str());
  }
};

Status write_metadata(gguf::Writer& w, const ModelConfig& cfg, const GenerateOptions& opt) {
  DS4_RETURN_IF_ERROR(w.set_string("general.architecture", model::kArchitecture));
  DS4_RETURN_IF_ERROR(w.set_string("general.name", cfg.name.empty() ? "ds4-synthetic" : cfg.name));
  char desc[256];
  std::snprintf(desc, sizeof desc,
                "synthetic random weights: ds4-gguf generate quant=%s seed=%" PRIu64
                " sparse_experts=%u%s",
                model::expert_quant_name(opt.quant), opt.seed, opt.sparse_experts, opt.route_all ? " route_all" : "");
  std::string description = desc;
  if (!opt.vocab_path.empty()) description += " vocab=" + std::filesystem::path(opt.vocab_path).filename().string();
  DS4_RETURN_IF_ERROR(w.set_string("general.description", description));
  if (opt.release == Release::k0731) {
    DS4_RETURN_IF_ERROR(w.set_string("general.source.url", model::kFlash0731Url));
    DS4_RETURN_IF_ERROR(w.set_string("general.source.revision", model::kFlash0731Revision));
  }
  for (const model::ConfigValue& v : model::config_values(cfg)) {
    switch (v.type) {
      case model::KeyType::kU32:
        DS4_RETURN_IF_ERROR(w.set_u32(v.key, static_cast<uint32_t>(v.u)));
        break;
      case model::KeyType::kU64: DS4_RETURN_IF_ERROR(w.set_u64(v.key, v.u)); break;
      case model::KeyType::kF32: DS4_RETURN_IF_ERROR(w.set_f32(v.key, v.f)); break;
      case model::KeyType::kBool: DS4_RETURN_IF_ERROR(w.set_bool(v.key, v.b)); break;
      case model::KeyType::kArrayU32: DS4_RETURN_IF_ERROR(w.set_array_u32(v.key, v.au)); break;
      case model::KeyType::kArrayF32: DS4_RETURN_IF_ERROR(w.set_array_f32(v.key, v.af)); break;
    }
  }
  return write_tokenizer_metadata(w, static_cast<uint32_t>(cfg.n_vocab), opt.vocab_path);
}

}  // namespace

Status write_tokenizer_metadata(gguf::Writer& w, uint32_t n_vocab, const std::string& vocab_path) {
  if (!vocab_path.empty()) {
    DS4_ASSIGN_OR_RETURN(auto file, gguf::File::open(vocab_path));
    auto tok = tok::Tokenizer::from_gguf(*file);
    if (!tok.ok())
      return invalid_argument("vocabulary '%s': %s", vocab_path.c_str(),
                              tok.status().to_string().c_str());
    if (uint32_t(tok->n_vocab()) != n_vocab)
      return invalid_argument("vocabulary '%s' has %d tokens, the model needs %u (n_vocab)",
                              vocab_path.c_str(), tok->n_vocab(), n_vocab);
    for (const gguf::KeyValue& kv : file->metadata())
      if (kv.key.rfind("tokenizer.", 0) == 0) DS4_RETURN_IF_ERROR(copy_kv(w, kv));
    return Status::ok_status();
  }
  DS4_ASSIGN_OR_RETURN(tok::VocabData vocab, tok::synthetic_vocab(static_cast<int>(n_vocab)));
  DS4_RETURN_IF_ERROR(w.set_string("tokenizer.ggml.model", "gpt2"));
  DS4_RETURN_IF_ERROR(w.set_string("tokenizer.ggml.pre", "joyai-llm"));
  DS4_RETURN_IF_ERROR(w.set_array_string("tokenizer.ggml.tokens", std::span<const std::string>(vocab.tokens)));
  if (!vocab.token_types.empty())
    DS4_RETURN_IF_ERROR(w.set_array_i32("tokenizer.ggml.token_type", vocab.token_types));
  DS4_RETURN_IF_ERROR(w.set_array_string("tokenizer.ggml.merges", std::span<const std::string>(vocab.merges)));
  auto find_id = [&](std::string_view text) -> int64_t {
    for (size_t i = 0; i < vocab.tokens.size(); ++i)
      if (vocab.tokens[i] == text) return static_cast<int64_t>(i);
    return -1;
  };
  const int64_t bos = find_id(tok::kBosText), eos = find_id(tok::kEosText);
  if (bos >= 0) DS4_RETURN_IF_ERROR(w.set_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(bos)));
  if (eos >= 0) DS4_RETURN_IF_ERROR(w.set_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(eos)));
  return Status::ok_status();
}

std::string default_real_vocab_path() {
#ifdef DS4_REAL_VOCAB_GGUF
  std::error_code ec;
  if (std::filesystem::is_regular_file(DS4_REAL_VOCAB_GGUF, ec)) return DS4_REAL_VOCAB_GGUF;
#endif
  return {};
}

std::vector<uint32_t> filled_experts(const ModelConfig& cfg, const GenerateOptions& opt,
                                     uint32_t il) {
  std::vector<uint32_t> ids(cfg.n_expert);
  for (uint32_t e = 0; e < cfg.n_expert; ++e) ids[e] = e;
  const uint32_t k = opt.sparse_experts;
  if (k == 0 || k >= cfg.n_expert) return ids;
  // Partial Fisher-Yates on a per-layer counter stream, then sort.
  const uint64_t key = mix64(opt.seed ^ (0xa0761d6478bd642full * (il + 1)));
  for (uint32_t i = 0; i < k; ++i) {
    const uint32_t j = i + static_cast<uint32_t>(counter_u64(key, i) % (cfg.n_expert - i));
    std::swap(ids[i], ids[j]);
  }
  ids.resize(k);
  std::sort(ids.begin(), ids.end());
  return ids;
}

namespace {

Status check_sparse(const ModelConfig& cfg, const GenerateOptions& opt) {
  if (cfg.n_expert_used > kMaxHashSlots)
    return unsupported("generate: expert_used_count %u exceeds the generator's limit of %u",
                       cfg.n_expert_used, kMaxHashSlots);
  if (opt.sparse_experts != 0 && opt.sparse_experts < cfg.n_expert_used)
    return invalid_argument("--sparse-experts %u: expected >= expert_used_count (%u) so every "
                            "routed slot lands on a filled expert",
                            opt.sparse_experts, cfg.n_expert_used);
  if (opt.sparse_experts > cfg.n_expert)
    return invalid_argument("--sparse-experts %u: expected <= expert_count (%u)",
                            opt.sparse_experts, cfg.n_expert);
  if (opt.route_all && opt.sparse_experts == 0)
    return invalid_argument("--route-all applies to a sparse file: give --sparse-experts K too");
  return Status::ok_status();
}

// Adds tensors with values per init_scale(); `filled` lists the filled experts of the
// tensor's layer (router bias, tid2eid and sparse expert ranges use it).
struct TensorAdder {
  const ModelConfig& cfg;
  const GenerateOptions& opt;
  gguf::Writer& w;
  bool sparse = false;
  bool quantize_real = true;
  std::shared_ptr<Progress> progress = std::make_shared<Progress>();

  Status add(const TensorSpec& spec, const std::vector<uint32_t>* filled) {
    TensorPlan p;
    p.spec = spec;
    p.type = spec.published_type(opt.quant);
    p.key = tensor_key(opt.seed, spec.name);
    p.init = init_scale(spec);
    p.quantize_real = quantize_real;
    p.n_expert = cfg.n_expert;
    p.n_used = cfg.n_expert_used;
    // Routing is biased to the filled experts unless route_all: then only the expert tensors
    // keep their holes, and the router bias and tid2eid span every expert.
    const bool route_sparse = sparse && !opt.route_all;
    p.sparse = route_sparse;
    if (filled) {
      p.filled = *filled;
      if (!route_sparse && spec.role != TensorRole::kRoutedExpert) {
        p.filled.resize(cfg.n_expert);
        for (uint32_t e = 0; e < cfg.n_expert; ++e) p.filled[e] = e;
      }
      p.filled_mask.assign(cfg.n_expert, 0);
      for (uint32_t e : p.filled) p.filled_mask[e] = 1;
    }
    std::vector<int64_t> ne(spec.ne.begin(), spec.ne.begin() + spec.n_dims);
    DS4_ASSIGN_OR_RETURN(p.nbytes, gguf::tensor_nbytes(p.type, ne));
    p.row_bytes = p.nbytes / static_cast<uint64_t>(spec.n_elements() / spec.ne[0]);
    if (!is_plain_float(p.type) && p.type != GgmlType::kI32) {
      p.block_template.resize(gguf::type_block_bytes(p.type));
      quant::fill_random_blocks(p.type, p.block_template.data(), gguf::type_block_elems(p.type),
                                p.init.std, 0);
      switch (p.type) {
        case GgmlType::kQ2_K: p.scale_offsets = {offsetof(quant::BlockQ2K, d), offsetof(quant::BlockQ2K, dmin)}; break;
        case GgmlType::kQ4_K: p.scale_offsets = {offsetof(quant::BlockQ4K, d), offsetof(quant::BlockQ4K, dmin)}; break;
        case GgmlType::kQ8_0: p.scale_offsets = {offsetof(quant::BlockQ8_0, d)}; break;
        case GgmlType::kIQ2_XXS: p.scale_offsets = {offsetof(quant::BlockIQ2XXS, d)}; break;
        default:
          return unsupported("tensor '%s': no random-block generator for type %s",
                             spec.name.c_str(), gguf::type_name(p.type));
      }
    }
    const std::string name = spec.name;
    auto plan = std::make_shared<TensorPlan>(std::move(p));
    auto prog = progress;
    gguf::FillFn fill = [plan, prog, name](uint64_t off, std::span<uint8_t> out) {
      fill_chunk(*plan, off, out);
      prog->add(out.size(), name);
    };
    if (spec.role == TensorRole::kRoutedExpert && sparse) {
      std::vector<int64_t> idx(plan->filled.begin(), plan->filled.end());
      auto ranges = gguf::Writer::outer_slices(plan->nbytes, cfg.n_expert, idx);
      for (const auto& r : ranges) progress->total += r.size;
      return w.add_tensor_ranges(name, plan->type, ne, std::move(ranges), std::move(fill));
    }
    progress->total += plan->nbytes;
    return w.add_tensor(name, plan->type, ne, std::move(fill));
  }

  Status finish(const std::string& path) {
    if (opt.progress)
      std::fprintf(stderr, "generate: %zu tensors, %.2f GB apparent, %.2f GB of data to write -> %s\n",
                   w.n_tensors(), w.file_size() / 1e9, progress->total / 1e9, path.c_str());
    DS4_RETURN_IF_ERROR(w.write(path));
    if (opt.progress) std::fprintf(stderr, "generate: done in %.1f s\n", progress->timer.seconds());
    return Status::ok_status();
  }
};

bool want_real_quantization(const GenerateOptions& opt, uint64_t quant_elems) {
  return opt.fill == FillMode::kQuantize ||
         (opt.fill == FillMode::kAuto && quant_elems <= kAutoQuantizeMaxElements);
}

}  // namespace

Status generate_model(const ModelConfig& cfg, const GenerateOptions& opt, const std::string& path) {
  DS4_RETURN_IF_ERROR(model::check_config(cfg));
  DS4_RETURN_IF_ERROR(check_sparse(cfg, opt));
  uint64_t quant_elems = 0;
  model::for_each_tensor_spec(cfg, [&](const TensorSpec& s) {
    if (!is_plain_float(s.published_type(opt.quant)) && s.role != TensorRole::kHashTable)
      quant_elems += static_cast<uint64_t>(s.n_elements());
  });

  gguf::Writer w;
  DS4_RETURN_IF_ERROR(write_metadata(w, cfg, opt));
  TensorAdder adder{cfg, opt, w};
  adder.sparse = opt.sparse_experts != 0 && opt.sparse_experts < cfg.n_expert;
  adder.quantize_real = want_real_quantization(opt, quant_elems);
  adder.progress->enabled = opt.progress;

  std::vector<std::vector<uint32_t>> filled(cfg.n_layer);
  for (uint32_t il = 0; il < cfg.n_layer; ++il) filled[il] = filled_experts(cfg, opt, il);
  Status st;
  model::for_each_tensor_spec(cfg, [&](const TensorSpec& spec) {
    if (!st.ok()) return;
    // The selection bias is unused by hash layers (they route through tid2eid): omit it there.
    if (spec.role == TensorRole::kRouterBias && cfg.is_hash_layer(spec.layer)) return;
    st = adder.add(spec, spec.layer >= 0 ? &filled[spec.layer] : nullptr);
  });
  DS4_RETURN_IF_ERROR(st);
  return adder.finish(path);
}

}  // namespace ds4::tools
