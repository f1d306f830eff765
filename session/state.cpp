// session/state.cpp — allocation, frontier capture and canonical serialization of State.
#include "session/state.h"

#include <algorithm>
#include <cstring>

#include "core/status.h"
#include "quant/kv_sim.h"

namespace ds4::session {

namespace {

struct LayerShape {
  int64_t raw = 0;                       // f16 elements
  int64_t comp = 0, index = 0;           // bytes (FP8 stores, FP4 stores)
  int64_t cmp_state = 0, idx_state = 0;  // floats
};

LayerShape layer_shape(const model::ModelConfig& cfg, uint32_t il, int64_t n_ctx, int64_t raw_cap) {
  LayerShape s;
  const int64_t d = cfg.head_dim;
  s.raw = raw_cap * d;
  const uint32_t ratio = cfg.compress_ratio(il);
  if (ratio != 0) {
    const int64_t cap = n_ctx / ratio + 2;
    const int64_t coff = ratio == 4 ? 2 : 1;
    s.comp = cap * quant::fp8_row_bytes(static_cast<int>(d), static_cast<int>(cfg.n_rot));
    s.cmp_state = coff * ratio * coff * d;
    if (ratio == 4) {
      s.index = cap * quant::fp4_row_bytes(static_cast<int>(cfg.indexer_head_dim));
      s.idx_state = 2 * 4 * 2 * static_cast<int64_t>(cfg.indexer_head_dim);
    }
  }
  return s;
}

int64_t raw_cap_for(const model::ModelConfig& cfg, int64_t n_ctx, int chunk_rows) {
  return std::min<int64_t>(cfg.n_swa, n_ctx) + raw_slack(chunk_rows);
}

// Host values (counters, tokens) go to / come from the payload by memcpy; backend arrays by
// download / upload.
template <typename T>
void put(std::vector<uint8_t>& out, const T* p, size_t n) {
  const size_t off = out.size();
  out.resize(off + n * sizeof(T));
  if (n) std::memcpy(out.data() + off, p, n * sizeof(T));
}

template <typename T>
void put_dev(backend::Backend& be, std::vector<uint8_t>& out, const T* p, size_t n) {
  const size_t off = out.size();
  out.resize(off + n * sizeof(T));
  if (n) be.download(out.data() + off, p, n * sizeof(T));
}

template <typename T>
bool get(std::span<const uint8_t> in, size_t& off, T* p, size_t n) {
  if (off + n * sizeof(T) > in.size()) return false;
  if (n) std::memcpy(p, in.data() + off, n * sizeof(T));
  off += n * sizeof(T);
  return true;
}

template <typename T>
bool get_dev(backend::Backend& be, std::span<const uint8_t> in, size_t& off, T* p, size_t n) {
  if (off + n * sizeof(T) > in.size()) return false;
  if (n) be.upload(p, in.data() + off, n * sizeof(T));
  off += n * sizeof(T);
  return true;
}

}  // namespace

uint64_t State::estimate_bytes(const model::ModelConfig& cfg, int64_t n_ctx, int chunk_rows) {
  const int64_t raw_cap = raw_cap_for(cfg, n_ctx, chunk_rows);
  uint64_t bytes = 0, halves = 0, floats = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const LayerShape s = layer_shape(cfg, il, n_ctx, raw_cap);
    halves += s.raw;
    bytes += s.comp + s.index;
    floats += 2 * s.cmp_state + 2 * s.idx_state;
  }
  return bytes + halves * 2 + floats * 4 + static_cast<uint64_t>(n_ctx) * 4 + static_cast<uint64_t>(cfg.n_vocab) * 4;
}

State::State(const model::ModelConfig& cfg, int64_t n_ctx, backend::Backend& be, int chunk_rows)
    : cfg_(cfg), be_(be), n_ctx_(n_ctx) {
  raw_cap_ = raw_cap_for(cfg, n_ctx, chunk_rows);
  layers_.resize(cfg.n_layer);
  state_offsets_.resize(cfg.n_layer);
  frontier_floats_ = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const LayerShape s = layer_shape(cfg, il, n_ctx, raw_cap_);
    LayerState& L = layers_[il];
    L.ratio = static_cast<int>(cfg.compress_ratio(il));
    L.raw = backend::Array<uint16_t>(be, s.raw);
    L.comp = backend::Array<uint8_t>(be, s.comp);
    L.index = backend::Array<uint8_t>(be, s.index);
    L.cmp_kv = backend::Array<float>(be, s.cmp_state);
    L.cmp_score = backend::Array<float>(be, s.cmp_state);
    L.idx_kv = backend::Array<float>(be, s.idx_state);
    L.idx_score = backend::Array<float>(be, s.idx_state);
    state_offsets_[il] = frontier_floats_;
    frontier_floats_ += 2 * s.cmp_state + 2 * s.idx_state;
  }
  tokens_.reserve(n_ctx);
  logits_ = backend::Array<float>(be, cfg.n_vocab);
  reset();
}

int64_t State::comp_cap(int il) const {
  const int r = layers_[il].ratio;
  return r == 0 ? 0 : n_ctx_ / r + 2;
}

void State::reset() {
  for (LayerState& L : layers_) {
    L.n_comp = 0;
    L.n_index = 0;
    be_.fill_f32(L.cmp_kv.data(), L.cmp_kv.size(), 0.0f);
    be_.fill_f32(L.cmp_score.data(), L.cmp_score.size(), kNegInf);
    be_.fill_f32(L.idx_kv.data(), L.idx_kv.size(), 0.0f);
    be_.fill_f32(L.idx_score.data(), L.idx_score.size(), kNegInf);
  }
  tokens_.clear();
  be_.fill_f32(logits_.data(), logits_.size(), 0.0f);
  has_logits_ = false;
}

void State::fill_synthetic(int64_t n, int32_t token) {
  DS4_CHECK(n >= 0 && n <= n_ctx_ && token >= 0 && static_cast<uint64_t>(token) < cfg_.n_vocab);
  reset();
  for (LayerState& L : layers_) {
    // Zero bytes read as +0.0 in f16 and in FP8 / FP4 stores alike: finite keys, equal indexer scores.
    if (!L.raw.empty()) be_.fill_bytes(L.raw.data(), L.raw.bytes(), 0);
    if (!L.comp.empty()) be_.fill_bytes(L.comp.data(), L.comp.bytes(), 0);
    if (!L.index.empty()) be_.fill_bytes(L.index.data(), L.index.bytes(), 0);
    // compressor_emits(pos, r) holds for pos = r-1, 2r-1, ...: n / r of the first n positions.
    L.n_comp = L.ratio != 0 ? n / L.ratio : 0;
    L.n_index = L.ratio == 4 ? n / 4 : 0;
  }
  tokens_.assign(static_cast<size_t>(n), token);
  has_logits_ = false;
}

Frontier State::make_frontier() const {
  Frontier f;
  f.n_comp.assign(layers_.size(), 0);
  f.n_index.assign(layers_.size(), 0);
  f.states = backend::Array<float>(be_, frontier_floats_);
  f.row_base.assign(layers_.size(), -1);
  return f;
}

namespace {

// A layer whose compressor writes one phase row per step and never shifts rows, with more
// phase rows than a verify batch can touch: its prefix slots store rows only.
bool rows_only(const LayerState& L) { return L.ratio > kMaxBatchRows && L.idx_kv.empty(); }

// The compressor states of a layer to / from a frontier's packed floats: one copy_many call.
void copy_states_out(backend::Backend& be, const LayerState& L, float* dst) {
  backend::CopyRegion r[4];
  int n = 0;
  for (const backend::Array<float>* v : {&L.cmp_kv, &L.cmp_score, &L.idx_kv, &L.idx_score}) {
    if (!v->empty()) r[n++] = backend::CopyRegion{dst, v->data(), v->bytes()};
    dst += v->size();
  }
  be.copy_many(r, n);
}

void copy_states_in(backend::Backend& be, LayerState& L, const float* src) {
  backend::CopyRegion r[4];
  int n = 0;
  for (const backend::Array<float>* v : {&L.cmp_kv, &L.cmp_score, &L.idx_kv, &L.idx_score}) {
    if (!v->empty()) r[n++] = backend::CopyRegion{v->data(), src, v->bytes()};
    src += v->size();
  }
  be.copy_many(r, n);
}

}  // namespace

void State::save_layer_frontier(int il, Frontier& f) const {
  const LayerState& L = layers_[il];
  f.n_comp[il] = L.n_comp;
  f.n_index[il] = L.n_index;
  float* dst = f.states.data() + state_offsets_[il];
  if (!rows_only(L)) {
    f.row_base[il] = -1;
    copy_states_out(be_, L, dst);
    return;
  }
  // Rows the batch's rows 1 .. kMaxBatchRows-1 write (positions base+j). Those of rows up to
  // this one already hold this row's state (never written again in the batch: distinct phase
  // rows); the later ones still hold their pre-batch values, which a restore puts back.
  const int64_t base = static_cast<int64_t>(tokens_.size());
  const int64_t W = static_cast<int64_t>(L.cmp_kv.size()) / L.ratio;
  f.row_base[il] = base;
  backend::CopyRegion regions[2 * (kMaxBatchRows - 1)];
  int n = 0;
  for (int j = 1; j < kMaxBatchRows; ++j) {
    const int64_t r = (base + j) % L.ratio;
    regions[n++] = backend::CopyRegion{dst, L.cmp_kv.data() + r * W, W * sizeof(float)};
    regions[n++] = backend::CopyRegion{dst + W, L.cmp_score.data() + r * W, W * sizeof(float)};
    dst += 2 * W;
  }
  be_.copy_many(regions, n);
}

void State::save_frontier(Frontier& f) const {
  f.n_tokens = static_cast<int64_t>(tokens_.size());
  for (size_t il = 0; il < layers_.size(); ++il) {
    const LayerState& L = layers_[il];
    f.n_comp[il] = L.n_comp;
    f.n_index[il] = L.n_index;
    f.row_base[il] = -1;
    copy_states_out(be_, L, f.states.data() + state_offsets_[il]);
  }
}

void State::restore_frontier(const Frontier& f) {
  const int64_t live = static_cast<int64_t>(tokens_.size());
  DS4_CHECK(f.n_tokens <= live);
  for (size_t il = 0; il < layers_.size(); ++il) {
    LayerState& L = layers_[il];
    L.n_comp = f.n_comp[il];
    L.n_index = f.n_index[il];
    const float* src = f.states.data() + state_offsets_[il];
    const int64_t base = f.row_base[il];
    if (base < 0) {
      copy_states_in(be_, L, src);
      continue;
    }
    // Prefix slot of the batch [base, live): undo the steps of positions f.n_tokens .. live-1.
    DS4_CHECK_MSG(rows_only(L) && base < f.n_tokens && live - base <= kMaxBatchRows,
                  "restore_frontier: a prefix slot restores only onto the end of its own batch");
    const int64_t W = static_cast<int64_t>(L.cmp_kv.size()) / L.ratio;
    backend::CopyRegion regions[2 * kMaxBatchRows];
    int n = 0;
    for (int64_t p = f.n_tokens; p < live; ++p) {
      const int64_t r = p % L.ratio;
      const float* row = src + (p - base - 1) * 2 * W;
      regions[n++] = backend::CopyRegion{L.cmp_kv.data() + r * W, row, W * sizeof(float)};
      regions[n++] = backend::CopyRegion{L.cmp_score.data() + r * W, row + W, W * sizeof(float)};
    }
    be_.copy_many(regions, n);
  }
  tokens_.resize(f.n_tokens);
}

uint64_t State::payload_bytes() const {
  const int64_t idx_row = quant::fp4_row_bytes(static_cast<int>(cfg_.indexer_head_dim));
  const int64_t comp_row = quant::fp8_row_bytes(static_cast<int>(cfg_.head_dim), static_cast<int>(cfg_.n_rot));
  const int64_t n = static_cast<int64_t>(tokens_.size());
  const int64_t raw_live = std::min<int64_t>(n, std::min<int64_t>(cfg_.n_swa, n_ctx_));
  uint64_t b = 8 + 4 * static_cast<uint64_t>(n) + 4 * logits_.size();
  for (const LayerState& L : layers_) {
    b += 16;
    b += 2 * static_cast<uint64_t>(raw_live) * cfg_.head_dim;
    b += static_cast<uint64_t>(L.n_comp) * comp_row;
    b += static_cast<uint64_t>(L.n_index) * idx_row;
    b += 4 * (L.cmp_kv.size() + L.cmp_score.size() + L.idx_kv.size() + L.idx_score.size());
  }
  return b;
}

void State::serialize(std::vector<uint8_t>& out) const {
  const int64_t idx_row = quant::fp4_row_bytes(static_cast<int>(cfg_.indexer_head_dim));
  const int64_t comp_row = quant::fp8_row_bytes(static_cast<int>(cfg_.head_dim), static_cast<int>(cfg_.n_rot));
  out.clear();
  out.reserve(payload_bytes());
  const int64_t n = static_cast<int64_t>(tokens_.size());
  put(out, &n, 1);
  put(out, tokens_.data(), tokens_.size());
  put_dev(be_, out, logits_.data(), logits_.size());
  const int64_t d = cfg_.head_dim;
  const int64_t raw_live = std::min<int64_t>(n, std::min<int64_t>(cfg_.n_swa, n_ctx_));
  for (const LayerState& L : layers_) {
    put(out, &L.n_comp, 1);
    put(out, &L.n_index, 1);
    for (int64_t p = n - raw_live; p < n; ++p) put_dev(be_, out, L.raw.data() + (p % raw_cap_) * d, d);
    put_dev(be_, out, L.comp.data(), L.n_comp * comp_row);
    put_dev(be_, out, L.index.data(), L.n_index * idx_row);
    put_dev(be_, out, L.cmp_kv.data(), L.cmp_kv.size());
    put_dev(be_, out, L.cmp_score.data(), L.cmp_score.size());
    put_dev(be_, out, L.idx_kv.data(), L.idx_kv.size());
    put_dev(be_, out, L.idx_score.data(), L.idx_score.size());
  }
}

bool State::deserialize(std::span<const uint8_t> in) {
  const int64_t idx_row = quant::fp4_row_bytes(static_cast<int>(cfg_.indexer_head_dim));
  const int64_t comp_row = quant::fp8_row_bytes(static_cast<int>(cfg_.head_dim), static_cast<int>(cfg_.n_rot));
  size_t off = 0;
  int64_t n = 0;
  if (!get(in, off, &n, 1) || n < 0 || n > n_ctx_) return false;
  tokens_.resize(n);
  if (!get(in, off, tokens_.data(), n)) return false;
  for (int32_t t : tokens_) {
    if (t < 0 || static_cast<uint64_t>(t) >= cfg_.n_vocab) return false;
  }
  if (!get_dev(be_, in, off, logits_.data(), logits_.size())) return false;
  has_logits_ = n > 0;
  const int64_t d = cfg_.head_dim;
  const int64_t raw_live = std::min<int64_t>(n, std::min<int64_t>(cfg_.n_swa, n_ctx_));
  for (size_t il = 0; il < layers_.size(); ++il) {
    LayerState& L = layers_[il];
    if (!get(in, off, &L.n_comp, 1) || !get(in, off, &L.n_index, 1)) return false;
    const int64_t cap = comp_cap(static_cast<int>(il));
    if (L.n_comp < 0 || L.n_comp > cap || L.n_index < 0 || L.n_index > cap) return false;
    for (int64_t p = n - raw_live; p < n; ++p) {
      if (!get_dev(be_, in, off, L.raw.data() + (p % raw_cap_) * d, d)) return false;
    }
    if (!get_dev(be_, in, off, L.comp.data(), L.n_comp * comp_row)) return false;
    if (!get_dev(be_, in, off, L.index.data(), L.n_index * idx_row)) return false;
    if (!get_dev(be_, in, off, L.cmp_kv.data(), L.cmp_kv.size())) return false;
    if (!get_dev(be_, in, off, L.cmp_score.data(), L.cmp_score.size())) return false;
    if (!get_dev(be_, in, off, L.idx_kv.data(), L.idx_kv.size())) return false;
    if (!get_dev(be_, in, off, L.idx_score.data(), L.idx_score.size())) return false;
  }
  return off == in.size();
}

}  // namespace ds4::session
