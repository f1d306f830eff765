// core/reduce.h — vectorized reductions over one float row (a logits row of n_vocab floats).
//
// Role: the greedy argmax and the top1 - top2 margin that plain decoding, the session's verify
// rows and DSpark's gates read after every forward. A scalar pass over 8192 logits costs
// several microseconds, ~1% of a tiny-model decode per pass, and DSpark needs both numbers.
//
// Invariants:
//  * Bit-exact with the scalar definition (top_two_scalar) on every input: the same id and the
//    same margin value, NaN and infinities included (tests/unit/core/reduce_test.cpp).
//  * id: the FIRST index holding the maximum (strict '>', ties -> smallest id) among the values
//    that are not NaN and not `excluded`; when no value qualifies, the first index that is not
//    `excluded`; -1 for an empty row (or a row whose only index is excluded).
//  * margin: top1 - top2 over the same values, both starting at -inf, top2 counting ties (two
//    equal maxima give +0, never -0). So +inf for a single finite candidate, NaN when top1 is
//    -inf.
//  * The fast path (SSE2, every x86-64) keeps per-lane top-2 pairs over NaN-masked values, then
//    scans for the first index equal to the maximum (early exit); rows whose maximum is -inf go
//    through the scalar definition.
#pragma once

#include <cstdint>
#include <span>

namespace ds4 {

struct TopTwo {
  int32_t id = -1;
  float margin = 0.0f;
};

TopTwo top_two(std::span<const float> row, int32_t excluded = -1);
// The definition, one scalar loop (tests compare top_two with it).
TopTwo top_two_scalar(std::span<const float> row, int32_t excluded = -1);

}  // namespace ds4
