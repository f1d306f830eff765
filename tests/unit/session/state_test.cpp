// tests/unit/session/state_test.cpp — session::State without a model: initial compressor
// states, frontier save/restore (O(layers)), canonical serialization round trip and sizes.
// The state lives in CPU backend buffers; the tests read and write them through the host view.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "backend/backend.h"
#include "model/profiles.h"
#include "quant/kv_sim.h"
#include "session/state.h"

namespace ds4::session {
namespace {

TEST(SessionState, FreshStateMatchesSpecInitialValues) {
  const model::ModelConfig cfg = model::tiny_profile();
  auto be = backend::make_cpu_backend(1);
  State s(cfg, 300, *be);
  ASSERT_EQ(s.layers().size(), cfg.n_layer);
  EXPECT_EQ(s.raw_cap(), static_cast<int64_t>(cfg.n_swa) + kRollbackSlack);
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    const LayerState& L = s.layers()[il];
    EXPECT_EQ(L.ratio, static_cast<int>(cfg.compress_ratio(il)));
    EXPECT_EQ(L.n_comp, 0);
    for (float v : L.cmp_score.host()) ASSERT_EQ(v, kNegInf);
    for (float v : L.cmp_kv.host()) ASSERT_EQ(v, 0.0f);
    if (L.ratio == 4) {
      EXPECT_EQ(L.cmp_kv.size(), 8u * 2 * cfg.head_dim);
      EXPECT_EQ(L.idx_kv.size(), 8u * 2 * cfg.indexer_head_dim);
      EXPECT_EQ(s.comp_cap(il), 300 / 4 + 2);
    } else if (L.ratio == 128) {
      EXPECT_EQ(L.cmp_kv.size(), 128u * cfg.head_dim);
      EXPECT_TRUE(L.idx_kv.empty());
    } else {
      EXPECT_TRUE(L.cmp_kv.empty());
      EXPECT_TRUE(L.comp.empty());
    }
  }
  EXPECT_FALSE(s.has_logits());
}

TEST(SessionState, FrontierRestoresCountersAndCompressorStatesOnly) {
  const model::ModelConfig cfg = model::tiny_profile();
  auto be = backend::make_cpu_backend(1);
  State s(cfg, 300, *be);
  for (int i = 0; i < 10; ++i) s.tokens().push_back(i);
  s.layers()[2].n_comp = 2;
  s.layers()[2].cmp_kv.host()[5] = 1.5f;
  Frontier f = s.make_frontier();
  s.save_frontier(f);
  EXPECT_EQ(f.n_tokens, 10);
  // Mutate everything a speculative step touches.
  for (int i = 0; i < 3; ++i) s.tokens().push_back(100 + i);
  s.layers()[2].n_comp = 3;
  s.layers()[2].cmp_kv.host()[5] = -7.0f;
  s.layers()[3].cmp_score.host()[0] = 4.0f;
  s.layers()[2].comp.host()[0] = 0x48;  // append-only rows are not part of a frontier
  s.restore_frontier(f);
  EXPECT_EQ(s.tokens().size(), 10u);
  EXPECT_EQ(s.layers()[2].n_comp, 2);
  EXPECT_EQ(s.layers()[2].cmp_kv.host()[5], 1.5f);
  EXPECT_EQ(s.layers()[3].cmp_score.host()[0], kNegInf);
  EXPECT_EQ(s.layers()[2].comp.host()[0], 0x48);
  EXPECT_EQ(f.states.size(), s.frontier_state_floats());
}

TEST(SessionState, SerializeRoundTripsAndSizeMatchesPayloadBytes) {
  const model::ModelConfig cfg = model::tiny_profile();
  auto be = backend::make_cpu_backend(1);
  State a(cfg, 300, *be);
  for (int i = 0; i < 50; ++i) a.tokens().push_back(i * 3);
  a.logits().host()[17] = 2.5f;
  a.set_has_logits(true);
  for (size_t il = 0; il < a.layers().size(); ++il) {
    LayerState& L = a.layers()[il];
    for (size_t j = 0; j < L.raw.size(); ++j) L.raw.host()[j] = static_cast<uint16_t>(j % 97 + il);
    if (L.ratio != 0) {
      L.n_comp = 50 / L.ratio;
      for (size_t j = 0; j < L.comp.size(); ++j) L.comp.host()[j] = static_cast<uint8_t>(0x3c + j % 13);
    }
    if (L.ratio == 4) {
      L.n_index = L.n_comp;
      for (size_t j = 0; j < L.index.size(); ++j) L.index.host()[j] = static_cast<uint8_t>(0x30 + j % 251);
    }
  }
  std::vector<uint8_t> bytes;
  a.serialize(bytes);
  EXPECT_EQ(bytes.size(), a.payload_bytes());
  State b(cfg, 300, *be);
  ASSERT_TRUE(b.deserialize(bytes));
  std::vector<uint8_t> again;
  b.serialize(again);
  EXPECT_EQ(again, bytes);
  EXPECT_EQ(b.layers()[2].n_comp, 12);
  EXPECT_EQ(b.logits().host()[17], 2.5f);
  // The visible KV rows come back bit for bit (in the payload as in the store).
  const int64_t comp_row = quant::fp8_row_bytes(static_cast<int>(cfg.head_dim), static_cast<int>(cfg.n_rot));
  for (size_t il = 0; il < a.layers().size(); ++il) {
    const LayerState& A = a.layers()[il];
    const LayerState& B = b.layers()[il];
    for (int64_t j = 0; j < A.n_comp * comp_row; ++j) ASSERT_EQ(A.comp.host()[j], B.comp.host()[j]) << il;  // FP8 stores
    const int64_t idx_row = quant::fp4_row_bytes(static_cast<int>(cfg.indexer_head_dim));  // FP4 stores
    for (int64_t j = 0; j < A.n_index * idx_row; ++j) ASSERT_EQ(A.index.host()[j], B.index.host()[j]) << il;
    for (int64_t p = 0; p < 50; ++p) {
      const int64_t row = (p % a.raw_cap()) * cfg.head_dim;
      if (p >= 50 - std::min<int64_t>(50, cfg.n_swa)) {
        ASSERT_EQ(A.raw.host()[row], B.raw.host()[row]) << il << " pos " << p;
      }
    }
  }
  // A truncated or foreign payload is rejected.
  bytes.pop_back();
  EXPECT_FALSE(b.deserialize(bytes));
}

TEST(SessionState, EstimateEqualsWhatTheStateAllocates) {
  const model::ModelConfig cfg = model::tiny_profile();
  auto be = backend::make_cpu_backend(1);
  for (const int64_t n_ctx : {40, 1000}) {
    State s(cfg, n_ctx, *be);
    uint64_t bytes = s.tokens().capacity() * sizeof(int32_t) + s.logits().bytes();
    for (const LayerState& L : s.layers()) {
      bytes += L.raw.bytes() + L.comp.bytes() + L.index.bytes();
      bytes += L.cmp_kv.bytes() + L.cmp_score.bytes() + L.idx_kv.bytes() + L.idx_score.bytes();
      EXPECT_EQ(L.raw.bytes(), L.raw.size() * 2);  // the raw KV rows are f16
      if (L.ratio != 0) {  // the compressed rows FP8 stores: 194 bytes per 128 values (64 RoPE dims)
        EXPECT_EQ(L.comp.bytes(), static_cast<uint64_t>(s.comp_cap(static_cast<int>(&L - s.layers().data()))) *
                                      quant::fp8_row_bytes(static_cast<int>(cfg.head_dim), static_cast<int>(cfg.n_rot)));
        EXPECT_EQ(quant::fp8_row_bytes(static_cast<int>(cfg.head_dim), static_cast<int>(cfg.n_rot)), 194);
      }
      if (L.ratio == 4) {  // the indexer rows FP4 stores: 68 bytes per 128 values
        EXPECT_EQ(L.index.bytes(), static_cast<uint64_t>(s.comp_cap(static_cast<int>(&L - s.layers().data()))) *
                                       quant::fp4_row_bytes(static_cast<int>(cfg.indexer_head_dim)));
      }
    }
    EXPECT_EQ(State::estimate_bytes(cfg, n_ctx), bytes) << n_ctx;
  }
}

TEST(SessionState, EstimateGrowsWithContextAtTheSpecRate) {
  const model::ModelConfig cfg = model::flash_profile();
  const uint64_t a = State::estimate_bytes(cfg, 4096);
  const uint64_t b = State::estimate_bytes(cfg, 8192);
  // §6.1: 13 760 B/token of compressed KV as f32; as f16: 6 880 B/token. Stored here: the
  // indexer rows as FP4 (per ratio-4 layer a 128-value row per 4 tokens: 64 B/token as f16, 17
  // as FP4) and the compressed attention rows as FP8 (a 512-value row: 1,024 B as f16, 584 as
  // FP8 — per ratio-4 layer 256 -> 146 B/token, per ratio-128 layer 8 -> 4.5625), plus the 4 B
  // token id per token: 21·(146 + 17) + 20·4.5625 + 4 = 3 518.25.
  int ratio4 = 0, ratio128 = 0;
  for (uint32_t il = 0; il < cfg.n_layer; ++il) {
    ratio4 += cfg.compress_ratio(il) == 4;
    ratio128 += cfg.compress_ratio(il) == 128;
  }
  EXPECT_EQ(ratio4, 21);
  EXPECT_EQ(ratio128, 20);
  EXPECT_EQ(quant::fp8_row_bytes(static_cast<int>(cfg.head_dim), static_cast<int>(cfg.n_rot)), 584);
  const double per_token = static_cast<double>(b - a) / 4096.0;
  EXPECT_NEAR(per_token, ratio4 * (584.0 / 4 + 17.0) + ratio128 * (584.0 / 128) + 4.0, 1.0);
}

// Byte-level views of a host-addressable Array, whatever its element type (f16 raw rows, byte
// stores, f32 states).
template <typename T>
void scribble(backend::Array<T>& a) {
  if (!a.empty()) std::memset(static_cast<void*>(a.host().data()), 0x42, a.bytes());
}
template <typename T>
bool zero_bytes(const backend::Array<T>& a) {
  const auto* p = reinterpret_cast<const uint8_t*>(a.host().data());
  for (size_t i = 0; i < a.bytes(); ++i) {
    if (p[i] != 0) return false;
  }
  return true;
}

// The benchmark fill: counters of n decodes (one row per compressor_emits position), every
// row zero whatever was there, compressor states back at their initial values, no logits.
TEST(SessionState, FillSyntheticSetsCountersZeroRowsAndResetStates) {
  const model::ModelConfig cfg = model::tiny_profile();
  auto be = backend::make_cpu_backend(1);
  State s(cfg, 1000, *be);
  for (LayerState& L : s.layers()) {
    scribble(L.raw);
    scribble(L.comp);
    scribble(L.index);
    scribble(L.cmp_kv);
    scribble(L.cmp_score);
    scribble(L.idx_kv);
    scribble(L.idx_score);
    L.n_comp = 1;
  }
  s.set_has_logits(true);
  s.fill_synthetic(999, 7);
  ASSERT_EQ(s.tokens().size(), 999u);
  EXPECT_EQ(s.tokens().front(), 7);
  EXPECT_EQ(s.tokens().back(), 7);
  EXPECT_FALSE(s.has_logits());
  for (const LayerState& L : s.layers()) {
    int64_t emits = 0, idx_emits = 0;
    for (int64_t pos = 0; pos < 999; ++pos) {
      if (L.ratio != 0 && backend::compressor_emits(pos, L.ratio)) ++emits;
      if (L.ratio == 4 && backend::compressor_emits(pos, 4)) ++idx_emits;
    }
    EXPECT_EQ(L.n_comp, emits);
    EXPECT_EQ(L.n_index, idx_emits);
    EXPECT_TRUE(zero_bytes(L.raw));
    EXPECT_TRUE(zero_bytes(L.comp));
    EXPECT_TRUE(zero_bytes(L.index));
    EXPECT_TRUE(zero_bytes(L.cmp_kv));
    EXPECT_TRUE(zero_bytes(L.idx_kv));
    for (float v : L.cmp_score.host()) ASSERT_EQ(v, kNegInf);
    for (float v : L.idx_score.host()) ASSERT_EQ(v, kNegInf);
  }
  // Layer 2 has ratio 4, layer 3 ratio 128 (expected_compress_ratio).
  EXPECT_EQ(s.layers()[2].n_comp, 249);
  EXPECT_EQ(s.layers()[2].n_index, 249);
  EXPECT_EQ(s.layers()[3].n_comp, 7);
  EXPECT_EQ(s.layers()[3].n_index, 0);
}

}  // namespace
}  // namespace ds4::session
