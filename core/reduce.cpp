// core/reduce.cpp — see reduce.h for the definition and the fast path's shape.
#include "core/reduce.h"

#include <cmath>
#include <utility>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace ds4 {

namespace {

// top_k_row's working set: a binary heap over ids/values[0..count) whose root is the WORST kept
// element (smallest value; among equal values the largest id), so the entry test is one
// compare with the root and an entry costs O(log k).
struct TopKHeap {
  int32_t* ids;
  float* values;
  int k;
  int count = 0;

  bool worse(int a, int b) const {
    return values[a] < values[b] || (values[a] == values[b] && ids[a] > ids[b]);
  }
  void swap(int a, int b) {
    std::swap(values[a], values[b]);
    std::swap(ids[a], ids[b]);
  }
  void sift_down(int p, int size) {
    for (;;) {
      const int l = 2 * p + 1;
      if (l >= size) return;
      const int c = (l + 1 < size && worse(l + 1, l)) ? l + 1 : l;
      if (!worse(c, p)) return;
      swap(p, c);
      p = c;
    }
  }
  // Indices arrive ascending, so an equal value ranks after every kept one: it enters only
  // while the heap is short or when it beats the root strictly.
  void consider(float v, int32_t i, int32_t excluded) {
    if (i == excluded || std::isnan(v)) return;
    if (count < k) {
      int p = count++;
      values[p] = v;
      ids[p] = i;
      while (p > 0 && worse(p, (p - 1) / 2)) {
        swap(p, (p - 1) / 2);
        p = (p - 1) / 2;
      }
    } else if (v > values[0]) {
      values[0] = v;
      ids[0] = i;
      sift_down(0, k);
    }
  }
  // Heapsort: the worst goes last each time, so the array ends best first (value descending,
  // ties -> smaller id), the order top_k_row defines.
  void sort() {
    for (int size = count; size > 1; --size) {
      swap(0, size - 1);
      sift_down(0, size - 1);
    }
  }
};

}  // namespace

void top_k_row(std::span<const float> row, int k, int32_t excluded, int32_t* ids, float* values) {
  const int32_t n = static_cast<int32_t>(row.size());
  const float* x = row.data();
  TopKHeap h{ids, values, k};
  int32_t i = 0;
#if defined(__SSE2__)
  // Once the heap is full, a block of 8 whose values are all <= the root's (or NaN: the
  // compare is false) cannot enter: skip it. Otherwise its elements go one by one in index
  // order, as in the scalar pass, so the result is the same.
  for (; i < n && h.count < k; ++i) h.consider(x[i], i, excluded);
  for (; i + 8 <= n; i += 8) {
    const __m128 t = _mm_set1_ps(values[0]);
    const int m = _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + i), t)) |
                  _mm_movemask_ps(_mm_cmpgt_ps(_mm_loadu_ps(x + i + 4), t));
    if (m == 0) continue;
    for (int32_t j = i; j < i + 8; ++j) h.consider(x[j], j, excluded);
  }
#endif
  for (; i < n; ++i) h.consider(x[i], i, excluded);
  h.sort();
  for (int j = h.count; j < k; ++j) {
    ids[j] = -1;
    values[j] = -INFINITY;
  }
}

TopTwo top_two_scalar(std::span<const float> row, int32_t excluded) {
  const int32_t n = static_cast<int32_t>(row.size());
  TopTwo r;
  float best = 0.0f;
  float top1 = -INFINITY, top2 = -INFINITY;
  for (int32_t i = 0; i < n; ++i) {
    if (i == excluded) continue;
    const float v = row[i];
    if (std::isnan(v)) continue;
    if (r.id < 0 || v > best) {
      r.id = i;
      best = v;
    }
    if (v > top1) {
      top2 = top1;
      top1 = v;
    } else if (v > top2) {
      top2 = v;
    }
  }
  if (r.id < 0) {  // every candidate NaN: the first allowed id
    for (int32_t i = 0; i < n; ++i) {
      if (i != excluded) {
        r.id = i;
        break;
      }
    }
  }
  r.margin = top1 - top2;
  if (r.margin == 0.0f) r.margin = 0.0f;  // +0 for ties, whichever zero sign won
  return r;
}

#if defined(__SSE2__)
namespace {

// Four independent (top1, top2) lane pairs: 16 values per step, no loop-carried chain longer
// than one max per 16 values. NaN lanes become -inf (they never win and never count as top2).
struct Lanes {
  __m128 t1[4], t2[4];
  Lanes() {
    for (int k = 0; k < 4; ++k) t1[k] = t2[k] = _mm_set1_ps(-INFINITY);
  }
  static __m128 clean(__m128 v) {
    const __m128 ok = _mm_cmpord_ps(v, v);
    return _mm_or_ps(_mm_and_ps(ok, v), _mm_andnot_ps(ok, _mm_set1_ps(-INFINITY)));
  }
  void add(int k, __m128 v) {
    v = clean(v);
    t2[k] = _mm_max_ps(t2[k], _mm_min_ps(t1[k], v));
    t1[k] = _mm_max_ps(t1[k], v);
  }
  void run(const float* x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
      add(0, _mm_loadu_ps(x + i));
      add(1, _mm_loadu_ps(x + i + 4));
      add(2, _mm_loadu_ps(x + i + 8));
      add(3, _mm_loadu_ps(x + i + 12));
    }
    for (; i + 4 <= n; i += 4) add(0, _mm_loadu_ps(x + i));
    if (i < n) {
      float tail[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
      for (int64_t j = 0; i + j < n; ++j) tail[j] = x[i + j];
      add(1, _mm_loadu_ps(tail));
    }
  }
};

// First index in [0, n) whose value equals m (m is not NaN); -1 if none.
int64_t first_equal(const float* x, int64_t n, float m) {
  const __m128 mv = _mm_set1_ps(m);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const int a = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i), mv));
    const int b = _mm_movemask_ps(_mm_cmpeq_ps(_mm_loadu_ps(x + i + 4), mv));
    const int mask = a | (b << 4);
    if (mask != 0) return i + __builtin_ctz(static_cast<unsigned>(mask));
  }
  for (; i < n; ++i) {
    if (x[i] == m) return i;
  }
  return -1;
}

}  // namespace

TopTwo top_two(std::span<const float> row, int32_t excluded) {
  const int64_t n = static_cast<int64_t>(row.size());
  const float* x = row.data();
  // The excluded index splits the row into two ranges.
  const int64_t cut = excluded >= 0 && excluded < n ? excluded : n;
  const int64_t rest = cut < n ? cut + 1 : n;
  Lanes l;
  l.run(x, cut);
  l.run(x + rest, n - rest);
  alignas(16) float a[16], b[16];
  for (int k = 0; k < 4; ++k) {
    _mm_store_ps(a + 4 * k, l.t1[k]);
    _mm_store_ps(b + 4 * k, l.t2[k]);
  }
  // Lane merge: top1 = max of the lane maxima, top2 = second of the multiset of all 32 values
  // (a lane's t2 never exceeds its t1, so this is the row's top-2 with ties counted).
  float top1 = -INFINITY, top2 = -INFINITY;
  for (int j = 0; j < 32; ++j) {
    const float v = j < 16 ? a[j] : b[j - 16];
    if (v > top1) {
      top2 = top1;
      top1 = v;
    } else if (v > top2) {
      top2 = v;
    }
  }
  if (!(top1 > -INFINITY)) return top_two_scalar(row, excluded);  // no value above -inf
  int64_t id = first_equal(x, cut, top1);
  if (id < 0) id = rest + first_equal(x + rest, n - rest, top1);
  float margin = top1 - top2;
  if (margin == 0.0f) margin = 0.0f;  // as top_two_scalar: +0 for ties (maxps may pick either zero)
  return TopTwo{static_cast<int32_t>(id), margin};
}

#else

TopTwo top_two(std::span<const float> row, int32_t excluded) { return top_two_scalar(row, excluded); }

#endif

}  // namespace ds4
