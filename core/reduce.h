// core/reduce.h — vectorized reductions over one float row (a logits row of n_vocab floats).
//
// Role: the greedy argmax and the top1 - top2 margin that plain decoding, the session's verify
// rows and DSpark's gates read after every forward; the top-k candidates (top_k_row) the
// sampler draws from (backend TopKParams: its CPU implementation and the CUDA oracle). A scalar pass over 8192 logits costs
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

// The k largest values of `row` (NaN and `excluded` skipped) as (ids[j], values[j]), j < k,
// ordered value descending, equal values (+0 == -0, compared as floats) to the smaller id;
// when fewer than k values qualify the tail is id -1 / value -inf. One pass in index order
// over a heap of at most k kept in ids/values (an element enters only when it beats the worst
// kept one; blocks that cannot are skipped with SSE2 compares), then a heapsort, so it
// allocates nothing. k >= 1 (backend::kTopKMax bounds the backends' k).
void top_k_row(std::span<const float> row, int k, int32_t excluded, int32_t* ids, float* values);

}  // namespace ds4
