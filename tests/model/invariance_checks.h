// tests/model/invariance_checks.h — the batch-invariance checks of the forward pass on any
// backend (the CPU's in tests/model, the CUDA backend's in tests/cuda): a plain decode
// reference (logits after every position, state bytes where asked) and the verify / rollback /
// commit_prefix check against it.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <span>
#include <vector>

#include "tests/model/tiny_model.h"

namespace ds4::testing_tiny {

// Reference: decode tokens one by one, recording logits after each position and the state
// bytes at the requested positions (number of tokens appended).
struct Reference {
  std::vector<std::vector<float>> logits;           // [n][vocab]
  std::vector<std::vector<uint8_t>> states;         // [n + 1] (empty if not recorded)
};

inline Reference decode_reference(const Stack& st, const std::vector<int32_t>& toks, const std::vector<int>& record,
                                  int n_ctx) {
  Reference ref;
  auto s = st.session(n_ctx);
  ref.states.resize(toks.size() + 1);
  auto want = [&](int n) { return std::find(record.begin(), record.end(), n) != record.end(); };
  for (size_t i = 0; i < toks.size(); ++i) {
    EXPECT_TRUE(s->decode(toks[i]).ok());
    auto l = s->logits();
    ref.logits.emplace_back(l.begin(), l.end());
    if (want(static_cast<int>(i + 1))) ref.states[i + 1] = state_bytes(*s);
  }
  return ref;
}

// For base positions around compressor boundaries and r = 1..8: verify rows == decode, and
// rollback / commit_prefix leave exactly the states plain decoding leaves.
inline void check_verify(const Stack& st, const std::vector<int>& bases, int n_ctx) {
  const auto toks = prompt_tokens(n_ctx - 16, st.model->config().n_vocab, 23);
  std::vector<int> record;
  for (int p : bases) {
    for (int k = 0; k <= 8; ++k) record.push_back(p + k);
  }
  const Reference ref = decode_reference(st, toks, record, n_ctx);
  for (int base : bases) {
    auto s = st.session(n_ctx);
    ASSERT_TRUE(s->prefill(std::span<const int32_t>(toks).first(base)).ok());
    ASSERT_EQ(state_bytes(*s), ref.states[base]);
    for (int r = 1; r <= 8; ++r) {
      const auto rows = std::span<const int32_t>(toks).subspan(base, r);
      s->checkpoint();
      auto res = s->verify(rows);
      ASSERT_TRUE(res.ok()) << res.status().to_string();
      ASSERT_EQ(res->size(), static_cast<size_t>(r));
      for (int i = 0; i < r; ++i) {
        const auto& want = ref.logits[base + i];
        EXPECT_TRUE(same_floats((*res)[i].logits, want)) << "base " << base << " r " << r << " row " << i;
        const int32_t am = static_cast<int32_t>(std::max_element(want.begin(), want.end()) - want.begin());
        EXPECT_EQ((*res)[i].argmax, am);
      }
      EXPECT_EQ(state_bytes(*s), ref.states[base + r]) << "base " << base << " r " << r;
      s->rollback();
      EXPECT_EQ(state_bytes(*s), ref.states[base]) << "rollback base " << base << " r " << r;
      // commit_prefix(k) for every k == k plain decodes.
      for (int k = 1; k <= r; ++k) {
        s->checkpoint();
        ASSERT_TRUE(s->verify(rows).ok());
        ASSERT_TRUE(s->commit_prefix(k).ok());
        EXPECT_EQ(state_bytes(*s), ref.states[base + k]) << "base " << base << " r " << r << " k " << k;
        EXPECT_TRUE(same_floats(s->logits(), ref.logits[base + k - 1]));
        // Decoding on after a partial commit continues exactly like plain decoding.
        if (k < r) {
          ASSERT_TRUE(s->decode(toks[base + k]).ok());
          EXPECT_TRUE(same_floats(s->logits(), ref.logits[base + k])) << "base " << base << " k " << k;
          EXPECT_EQ(state_bytes(*s), ref.states[base + k + 1]);
        }
        s->rollback();
        ASSERT_EQ(s->n_tokens(), base);
      }
      // Rollback then re-decode: same logits as plain decoding.
      ASSERT_TRUE(s->decode(toks[base]).ok());
      EXPECT_TRUE(same_floats(s->logits(), ref.logits[base]));
      EXPECT_EQ(state_bytes(*s), ref.states[base + 1]);
      s->rollback();
    }
  }
}

}  // namespace ds4::testing_tiny
