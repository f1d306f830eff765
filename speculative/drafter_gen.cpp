// speculative/drafter_gen.cpp — random DSpark support GGUFs (see drafter_gen.h).
#include "speculative/drafter_gen.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "core/threadpool.h"
#include "gguf/writer.h"
#include "quant/quant.h"

namespace ds4::speculative {

namespace {

using gguf::GgmlType;

inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

uint64_t name_key(uint64_t seed, const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a
  for (unsigned char c : s) h = (h ^ c) * 0x100000001b3ull;
  return mix64(seed * 0x9e3779b97f4a7c15ull + h);
}

// Element i of a tensor: center + std*sqrt(3)*u, u uniform in [-1, 1).
float value_at(uint64_t key, uint64_t i, float center, float std) {
  const uint64_t h = mix64(key + (i + 1) * 0x9e3779b97f4a7c15ull);
  const float u = static_cast<float>(h >> 40) * 0x1p-23f - 1.0f;
  return center + std * 1.7320508f * u;
}

bool plain(GgmlType t) { return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16; }

// The file type of a spec's tensor (before the mutate hook).
GgmlType type_of(const DTensorSpec& s, const DrafterGenOptions& opt) {
  switch (s.kind) {
    case DTensorKind::kDense: return opt.dense_type;
    case DTensorKind::kHcFn: return opt.hc_fn_type;
    case DTensorKind::kVector: return GgmlType::kF32;
    case DTensorKind::kExpert:
      return s.name.find("down_exps") != std::string::npos ? opt.down_type : opt.gate_up_type;
  }
  return GgmlType::kF32;
}

DSparkConfig drafter_config(const model::ModelConfig& target, const DrafterGenOptions& opt) {
  DSparkConfig d;
  d.n_stages = opt.n_stages;
  d.block_size = opt.block_size;
  d.noise_token_id = opt.noise_token_id;
  d.markov_rank = opt.markov_rank;
  d.window = opt.window > 0 ? opt.window : static_cast<int>(target.n_swa);
  d.target_layers = opt.target_layers;
  return d;
}

// Rows per pool chunk: ~256 KiB of output each, at least one row.
int64_t rows_per_chunk(uint64_t row_bytes) {
  return std::max<int64_t>(1, static_cast<int64_t>((256u << 10) / std::max<uint64_t>(1, row_bytes)));
}

}  // namespace

const char* drafter_fill_name(DrafterFill f) {
  switch (f) {
    case DrafterFill::kAuto: return "auto";
    case DrafterFill::kQuantize: return "quantize";
    case DrafterFill::kRandomBlocks: return "random";
  }
  return "?";
}

DrafterFill resolved_fill(const model::ModelConfig& target, const DrafterGenOptions& in) {
  if (in.fill != DrafterFill::kAuto) return in.fill;
  const DrafterGenOptions opt = resolve_gen_options(target, in);
  uint64_t quant_elems = 0;
  for (const DTensorSpec& s : drafter_tensor_specs(target, drafter_config(target, opt))) {
    if (plain(type_of(s, opt))) continue;
    uint64_t n = 1;
    for (int64_t v : s.ne) n *= static_cast<uint64_t>(std::max<int64_t>(0, v));
    quant_elems += n;
  }
  return quant_elems <= kAutoQuantizeMaxElements ? DrafterFill::kQuantize : DrafterFill::kRandomBlocks;
}

DrafterGenOptions resolve_gen_options(const model::ModelConfig& target, DrafterGenOptions opt) {
  if (opt.markov_rank <= 0) opt.markov_rank = target.n_embd >= 4096 ? 256 : 64;
  if (opt.noise_token_id < 0) {
    opt.noise_token_id = target.n_vocab > 128799 ? 128799 : static_cast<int32_t>(target.n_vocab) - 2;
  }
  if (opt.target_layers.empty()) {
    const int n = static_cast<int>(target.n_layer);
    for (int il = std::max(0, n - 3); il < n; ++il) opt.target_layers.push_back(il);
  }
  return opt;
}

Status generate_drafter(const model::ModelConfig& target, const DrafterGenOptions& in, const std::string& path) {
  DS4_RETURN_IF_ERROR(model::check_config(target));
  const DrafterGenOptions opt = resolve_gen_options(target, in);
  if (opt.n_stages < 1 || opt.n_stages > 16) return invalid_argument("stages: expected 1..16, got %d", opt.n_stages);
  if (opt.block_size < 1 || opt.block_size > kMaxBlockSize)
    return invalid_argument("block size: expected 1..%d, got %d", kMaxBlockSize, opt.block_size);
  if (opt.markov_rank % 32 != 0) return invalid_argument("markov rank: expected a multiple of 32, got %d", opt.markov_rank);
  if (opt.threads < 0 || opt.threads > 1024) return invalid_argument("threads: expected 0..1024, got %d", opt.threads);
  const DSparkConfig d = drafter_config(target, opt);
  const bool random_blocks = resolved_fill(target, opt) == DrafterFill::kRandomBlocks;
  // Fill threads: the writer calls each fill on its own thread, chunk by chunk; a chunk's rows
  // (or elements) are split over the pool. Rows are independent, so the bytes are the same for
  // any thread count. The pool outlives w.write() below.
  ThreadPool pool(opt.threads);
  ThreadPool* tp = &pool;

  gguf::Writer w;
  const bool standalone = opt.layout == SupportLayout::kStandalone0731;
  const std::string p = standalone ? "dspark." : "deepseek4.dspark.";
  auto omitted = [&](const std::string& key) {
    return std::find(opt.omit_keys.begin(), opt.omit_keys.end(), key) != opt.omit_keys.end();
  };
  auto put_u32 = [&](const std::string& key, uint32_t v) {
    return omitted(key) ? Status::ok_status() : w.set_u32(key, v);
  };
  auto put_str = [&](const std::string& key, const std::string& v) {
    return omitted(key) ? Status::ok_status() : w.set_string(key, v);
  };
  DS4_RETURN_IF_ERROR(put_str("general.architecture", standalone ? kStandaloneArchitecture : "deepseek4"));
  DS4_RETURN_IF_ERROR(put_str("general.name", "ds4-dspark-synthetic"));
  DS4_RETURN_IF_ERROR(put_str("general.description", "synthetic random DSpark drafter: ds4-dspark-gguf generate seed=" +
                                                         std::to_string(opt.seed) +
                                                         (random_blocks ? " fill=random" : "")));
  DS4_RETURN_IF_ERROR(put_u32(p + "block_size", static_cast<uint32_t>(d.block_size)));
  DS4_RETURN_IF_ERROR(put_u32(p + "markov_rank", static_cast<uint32_t>(d.markov_rank)));
  DS4_RETURN_IF_ERROR(put_u32(p + "noise_token_id", static_cast<uint32_t>(d.noise_token_id)));
  std::vector<uint32_t> ids(d.target_layers.begin(), d.target_layers.end());
  if (!omitted(p + "target_layer_ids")) DS4_RETURN_IF_ERROR(w.set_array_u32(p + "target_layer_ids", ids));
  if (standalone) {
    DS4_RETURN_IF_ERROR(put_u32(p + "stage_count", static_cast<uint32_t>(d.n_stages)));
    DS4_RETURN_IF_ERROR(put_u32(p + "n_layers", static_cast<uint32_t>(d.n_stages)));
    std::string rev = opt.source_revision;
    if (rev.empty()) rev = target.source_revision.empty() ? model::kFlash0731Revision : target.source_revision;
    DS4_RETURN_IF_ERROR(put_str("dspark.source.revision", rev));
  }
  if (opt.window > 0) DS4_RETURN_IF_ERROR(put_u32(p + "sliding_window", static_cast<uint32_t>(opt.window)));
  for (const auto& [key, v] : opt.extra_u32_keys) DS4_RETURN_IF_ERROR(w.set_u32(key, v));

  std::vector<DTensorSpec> specs = drafter_tensor_specs(target, d);
  for (auto& [name, ne] : opt.extra_tensors) {
    specs.push_back(DTensorSpec{name, DTensorKind::kVector, ne, -1, 0.01f, 0.0f});
  }
  for (DTensorSpec& s : specs) {
    GgmlType type = type_of(s, opt);
    if (opt.mutate && !opt.mutate(s, type)) continue;
    const uint64_t key = name_key(opt.seed, s.name);
    const int64_t ne0 = s.ne[0];
    const float center = s.init_center, sd = s.init_std;
    if (plain(type)) {
      const uint64_t esz = type == GgmlType::kF32 ? 4 : 2;
      gguf::FillFn fill = [key, center, sd, type, esz, tp](uint64_t off, std::span<uint8_t> out) {
        const uint64_t first = off / esz;
        tp->parallel_for(static_cast<int64_t>(out.size() / esz), 1 << 16, [&](int64_t b, int64_t e) {
          for (int64_t k = b; k < e; ++k) {
            const float v = value_at(key, first + k, center, sd);
            if (type == GgmlType::kF32) {
              std::memcpy(out.data() + 4 * k, &v, 4);
            } else {
              const uint16_t h = type == GgmlType::kF16 ? quant::f32_to_f16(v) : quant::f32_to_bf16(v);
              std::memcpy(out.data() + 2 * k, &h, 2);
            }
          }
        });
      };
      DS4_RETURN_IF_ERROR(w.add_tensor(s.name, type, s.ne, std::move(fill)));
    } else {
      DS4_RETURN_IF_ERROR(quant::validate_row(type, ne0));
      const uint64_t rb = quant::row_bytes(type, ne0);
      // kRandomBlocks: row r is fill_random_blocks(seed = hash(key, r)) at RMS sd (centers are
      // only on F32 vectors, so no quantized tensor has one). kQuantize: row r quantizes the
      // hashed floats of elements [r * ne0, (r + 1) * ne0).
      gguf::FillFn fill = [key, center, sd, type, ne0, rb, random_blocks, tp](uint64_t off, std::span<uint8_t> out) {
        DS4_CHECK(off % rb == 0 && out.size() % rb == 0);
        const uint64_t r0 = off / rb;
        tp->parallel_for(static_cast<int64_t>(out.size() / rb), rows_per_chunk(rb), [&](int64_t b, int64_t e) {
          std::vector<float> row(random_blocks ? 0 : static_cast<size_t>(ne0));
          for (int64_t r = b; r < e; ++r) {
            uint8_t* dst = out.data() + r * rb;
            const uint64_t gr = r0 + static_cast<uint64_t>(r);
            if (random_blocks) {
              quant::fill_random_blocks(type, dst, ne0, sd, mix64(key ^ (gr + 1) * 0xd1b54a32d192ed03ull));
            } else {
              for (int64_t i = 0; i < ne0; ++i) row[i] = value_at(key, gr * ne0 + i, center, sd);
              quant::quantize_row(type, row.data(), dst, ne0);
            }
          }
        });
      };
      DS4_RETURN_IF_ERROR(w.add_tensor(s.name, type, s.ne, std::move(fill)));
    }
  }
  return w.write(path);
}

}  // namespace ds4::speculative
