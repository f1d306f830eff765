// backend/cpu/cpu_backend.cpp — the CPU implementation of backend.h (the numerics oracle).
//
// Every op follows ds4-architecture.md §3-4 in source order, on top of the reference dots of
// quant/dot.h (through backend/cpu/matmul.h, which the SIMD kernels plug into without
// changing any bit). Parallelism splits independent outputs only (weight rows, heads,
// candidate rows), never a reduction, so results do not depend on the thread count. Small
// jobs (tiny models) run on the caller: waking workers would cost more than the work.
// Batched forms (rms_norm_rows, the expert-grouped MoE, hoisted RoPE angles) keep every
// row's own operation sequence, so a row's bits never depend on the batch.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/cpu_ops.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul.h"
#include "backend/row_math.h"
#include "core/reduce.h"
#include "core/threadpool.h"
#include "quant/half.h"
#include "quant/quant.h"

namespace ds4::backend {

size_t moe_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows) {
  const size_t pairs = static_cast<size_t>(n_used) * n_rows;
  size_t b = 0;
  b += static_cast<size_t>(n_rows) * (n_embd / quant::kQKK) * sizeof(quant::BlockQ8K);  // xq
  b += pairs * (n_embd / quant::kQKK) * sizeof(quant::BlockQ8K);          // gathered x
  b += 2 * pairs * n_ff * sizeof(float);                                  // gate / up outputs
  b += pairs * n_ff * sizeof(float);                                      // mid
  b += pairs * (n_ff / quant::kQKK) * sizeof(quant::BlockQ8K);            // midq
  b += pairs * n_embd * sizeof(float);                                    // down outputs
  b += pairs * 3 * sizeof(int32_t);                                       // order, groups, inverse
  return b + 64 * 10;
}

namespace {

using quant::BlockQ8K;

// Multiply-adds below which sink attention runs on the caller alone (a pool job costs ~1 us
// of hand-off on a 2-core AVX2 machine, i.e. a few thousand multiply-adds).
constexpr int64_t kInlineAttnWork = 1 << 15;
// Sink attention: at most this many heads of a query per task.
constexpr int64_t kAttnHeadRun = 8;
// Indexer scoring: about this many multiply-adds per parallel chunk (at least 16 rows).
constexpr int64_t kIndexerChunkWork = 1 << 15;
// Indexer head_dim limit: a row is widened from f16 into a stack buffer of this many floats.
constexpr int kMaxIndexerDim = 1024;
// Indexer rows (all queries together) below which the queries' top-k run on the caller.
constexpr int64_t kInlineTopKRows = 4096;
// Elements below which a row-wise or elementwise op (HC pre/post, RMSNorm, SwiGLU, the MoE
// activation step) runs on the caller alone; above, rows (or element ranges) are split over
// the pool. Each row's result never depends on the split.
constexpr int64_t kInlineRowElems = 1024;
// Grouped matmuls: total work (weight bytes x rows) below which they run on the caller, and
// the work of one piece of the pool job otherwise.
constexpr int64_t kInlineGroupBytes = 32 * 1024;
constexpr int64_t kGroupPieceBytes = 96 * 1024;
// Copy-like ops (embed, add, hc_mean): elements below which they run on the caller (memory-
// bound, a few us at most: less than waking the pool).
constexpr int64_t kInlineCopyElems = int64_t{1} << 16;
// RMSNorm: elements (all rows) below which a norm runs on the caller.
constexpr int64_t kInlineNormElems = 8192;
// Compressor pooling: elements one exp of a column's softmax counts as in split_rows.
constexpr int64_t kPoolExpElems = 8;
// Router: elements one expert score (exp, log1p, sqrtf) counts as in split_rows' decision.
constexpr int64_t kRouteScoreElems = 16;
// MoE: weight bytes per task, and total weight bytes below which a call runs inline.
constexpr int64_t kMoeTaskBytes = 64 * 1024;
constexpr int64_t kInlineMoeBytes = 48 * 1024;

template <typename T>
T* carve(uint8_t*& p, size_t count) {
  uintptr_t a = reinterpret_cast<uintptr_t>(p);
  a = (a + 63) & ~uintptr_t{63};
  T* out = reinterpret_cast<T*>(a);
  p = reinterpret_cast<uint8_t*>(a + count * sizeof(T));
  return out;
}

// Unweighted rms_norm_row of n_rows packed rows of n from x into out (distinct buffers).
void rms_norm_rows_to(const float* x, float* out, int64_t n, int n_rows, float eps) {
  cpu::rms_norm_rows(x, nullptr, out, n, n, n_rows, eps);
}

// y[d] = 0 + x[0][d]·w[0] + x[1][d]·w[1] + ... in stream order (elementwise over d).
void weighted_stream_sum(const float* x, const float* w, int n_hc, int64_t n_embd, float* y) {
  for (int64_t d = 0; d < n_embd; ++d) y[d] = 0.0f;
  for (int h = 0; h < n_hc; ++h) cpu::axpy(w[h], x + h * n_embd, y, n_embd);  // y + w·x, elementwise
}

// Top-k of one query's scores by (score desc, index asc): the same set as repeatedly taking the
// first strict maximum of the not-yet-selected rows (ties go to the lowest index).
void top_k_mask(const IndexerSelectParams& p) {
  const int64_t n = p.n_rows;
  for (int64_t c = 0; c < n; ++c) p.order[c] = static_cast<int32_t>(c);
  const int64_t k = std::min<int64_t>(p.top_k, n);
  const float* sc = p.scores;
  std::nth_element(p.order, p.order + (k - 1), p.order + n, [sc](int32_t a, int32_t b) {
    if (sc[a] != sc[b]) return sc[a] > sc[b];
    return a < b;
  });
  std::memset(p.allowed, 0, static_cast<size_t>(n));
  for (int64_t i = 0; i < k; ++i) p.allowed[p.order[i]] = 1;
}

// Zero-copy weight binding: a tensor's backend address is its mmapped host address. map()
// only checks that the address lies in a bound range (a weight the model did not bind would
// be a graph bug).
class CpuWeightSet final : public WeightSet {
 public:
  explicit CpuWeightSet(std::span<const WeightRange> ranges) {
    for (const WeightRange& r : ranges) {
      if (r.host != nullptr && r.bytes != 0) {
        const auto* b = static_cast<const uint8_t*>(r.host);
        ranges_.push_back({b, b + r.bytes});
      }
    }
    std::sort(ranges_.begin(), ranges_.end());
  }
  const void* map(const void* host) const override {
    if (host == nullptr) return nullptr;
    const auto* p = static_cast<const uint8_t*>(host);
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), std::pair<const uint8_t*, const uint8_t*>{p, nullptr},
                               [](const auto& a, const auto& b) { return a.first < b.first; });
    DS4_CHECK_MSG(it != ranges_.begin() && p < std::prev(it)->second,
                  "WeightSet::map: address outside the bound weights");
    return host;
  }

 private:
  std::vector<std::pair<const uint8_t*, const uint8_t*>> ranges_;  // [begin, end) sorted
};

class CpuBackend final : public Backend {
 public:
  CpuBackend(int n_threads, ActivationNumerics act) : pool_(n_threads), mm_(&pool_, act), mm_inline_(nullptr, act) {}

  const char* name() const override { return "cpu"; }
  int n_threads() const override { return pool_.n_threads(); }
  std::string description() const override {
    return std::string("cpu: ") + cpu::isa_name(cpu::active_isa()) + ", " + std::to_string(pool_.n_threads()) +
           (pool_.n_threads() == 1 ? " thread" : " threads");
  }

  // Memory: host memory, so every copy is a memcpy and Buffer::host() is valid.
  bool host_addressable() const override { return true; }
  void upload(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { copy_bytes(dst, src, bytes); }
  void fill_f32(float* dst, size_t n, float value) override { std::fill(dst, dst + n, value); }
  void fill_bytes(void* dst, size_t bytes, uint8_t value) override {
    if (bytes != 0) std::memset(dst, value, bytes);
  }
  void sync() override {}
  std::unique_ptr<WeightSet> bind_weights(std::span<const WeightRange> ranges) override {
    return std::make_unique<CpuWeightSet>(ranges);
  }

  // The pool splits in two for the pair: a on the caller with ceil(n/2) threads, b with the
  // rest (ThreadPool::run_split), every op of a task parallel over its own part. With 2
  // threads each task runs alone on one thread, its ops inline.
  void run_pair(Task a, Task b) override {
    pool_.run_split((pool_.n_threads() + 1) / 2, a, b);
  }

  void matmul(const MatmulParams& p) override {
    if (p.normed == nullptr) {
      mm_.matmul(p);
      return;
    }
    rms_norm(input_norm(p));  // the folded norm: the rms_norm op, then the matmul of its rows
    MatmulParams q = p;
    q.x = p.normed;
    q.normed = nullptr;
    mm_.matmul(q);
  }

  // One pool job for all the matmuls: each is cut into pieces of consecutive outputs (about
  // kGroupPieceBytes of weight bytes x rows each, whole 16-output tiles) and every piece runs
  // on one thread (mm_inline_). A row's output o is the same dot whichever piece computes it.
  // Small calls (and more matmuls than pieces) run on the caller, one matmul after the other.
  void matmul_grouped(const MatmulParams* p, int n) override {
    for (int i = 0; i < n; ++i) DS4_CHECK_MSG(p[i].normed == nullptr, "matmul_grouped: no folded norm");
    constexpr int kMaxPieces = 256;
    int64_t total = 0;
    for (int i = 0; i < n; ++i) total += work_bytes(p[i]);
    if (pool_.n_threads() == 1 || total < kInlineGroupBytes || n > kMaxPieces) {
      for (int i = 0; i < n; ++i) mm_.matmul(p[i]);
      return;
    }
    struct Piece {
      int m;
      int64_t o0, cnt;
    } pieces[kMaxPieces];
    int n_pieces = 0;
    const int64_t budget = std::max<int64_t>(1, kMaxPieces / std::max(1, n));
    for (int i = 0; i < n; ++i) {
      const int64_t n_out = p[i].w.n_out;
      const int64_t want = std::clamp<int64_t>((work_bytes(p[i]) + kGroupPieceBytes - 1) / kGroupPieceBytes, 1, budget);
      const int64_t step = std::min(n_out, ((n_out + want - 1) / want + 15) / 16 * 16);
      for (int64_t o0 = 0; o0 < n_out; o0 += step) {  // at most `want` <= budget pieces
        DS4_CHECK(n_pieces < kMaxPieces);
        pieces[n_pieces++] = Piece{i, o0, std::min(step, n_out - o0)};
      }
    }
    pool_.parallel_for(n_pieces, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) {
        MatmulParams q = p[pieces[k].m];
        q.w = q.w.rows(pieces[k].o0, pieces[k].cnt);
        q.y += pieces[k].o0;
        mm_inline_.matmul(q);
      }
    });
  }

  // A norm costs about one add per element and rms_norm_rows runs 8 rows' sums side by side,
  // so a batch below kInlineNormElems runs on the caller (splitting it costs more than it
  // saves; docs/measurements/backend.md).
  void rms_norm(const RmsNormParams& p) override {
    const int64_t stride = p.stride ? p.stride : p.n;
    split_rows(
        p.n_rows, p.n,
        [&](int64_t b, int64_t e) {
          cpu::rms_norm_rows(p.x + b * stride, p.weight, p.out + b * stride, p.n, stride, static_cast<int>(e - b),
                             p.eps);
        },
        kInlineNormElems);
  }

  // Several rows: each chunk of rows runs the whole chain (norm, mix matmul, Sinkhorn, stream
  // sum) on one thread; the matmul inside runs inline there (re-entrant pool use). One row:
  // the mix matmul itself is split over output rows.
  void hc_pre(const HcPreParams& p) override {
    if (p.post_first.out != nullptr) hc_post(p.post_first);  // the folded post: the op before
    const int64_t hc_dim = p.n_hc * p.n_embd;
    const int64_t mix_dim = 2 * p.n_hc + p.n_hc * p.n_hc;
    const int64_t nn = static_cast<int64_t>(p.n_hc) * p.n_hc;
    split_rows(p.n_rows, hc_dim, [&](int64_t b, int64_t e) {
      const int n = static_cast<int>(e - b);
      rms_norm_rows_to(p.x + b * hc_dim, p.flat + b * hc_dim, hc_dim, n, p.norm_eps);
      MatmulParams mp;
      mp.w = p.fn;
      mp.x = p.flat + b * hc_dim;
      mp.x_stride = hc_dim;
      mp.y = p.mix + b * mix_dim;
      mp.y_stride = mix_dim;
      mp.n_rows = n;
      mm_.matmul(mp);
      HcPreParams q = p;  // Sinkhorn split + weighted stream sum of rows [b, e)
      q.x = p.x + b * hc_dim;
      q.flat = p.flat + b * hc_dim;
      q.mix = p.mix + b * mix_dim;
      q.post = p.post + b * p.n_hc;
      q.comb = p.comb + b * nn;
      q.y = p.y + b * p.n_embd;
      q.n_rows = n;
      cpu::hc_pre_finish_rows(q);
      if (p.normed != nullptr) {
        cpu::rms_norm_rows(q.y, p.norm_weight, p.normed + b * p.n_embd, p.n_embd, p.n_embd, n, p.norm_out_eps);
      }
    });
  }

  void hc_post(const HcPostParams& p) override {
    const int64_t hc_dim = p.n_hc * p.n_embd;
    const int64_t nn = static_cast<int64_t>(p.n_hc) * p.n_hc;
    split_rows(p.n_rows, hc_dim, [&](int64_t b, int64_t e) {
      HcPostParams q = p;
      q.x = p.x + b * hc_dim;
      q.f = p.f + b * p.n_embd;
      q.post = p.post + b * p.n_hc;
      q.comb = p.comb + b * nn;
      q.out = p.out + b * hc_dim;
      q.n_rows = static_cast<int>(e - b);
      cpu::hc_post_rows(q);
    });
  }

  // Rows are independent (no state read): split over the pool like any row-wise op.
  void attention_inputs(const AttentionInputsParams& p) override {
    const int64_t per_row = (p.q != nullptr ? static_cast<int64_t>(p.n_head) * (p.q_head_norm ? p.head_dim : p.n_rot) : 0) +
                            p.head_dim +
                            (p.iq != nullptr ? static_cast<int64_t>(p.n_idx_head) * p.idx_dim : 0);
    split_rows(p.n_rows, per_row, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) cpu::attention_inputs_row(p, static_cast<int>(r));
    });
  }

  void compressor_step(const CompressorStepParams& p) override {
    const int R = p.ratio;
    const int D = p.head_dim;
    const int coff = R == 4 ? 2 : 1;
    const int W = coff * D;
    const int pm = static_cast<int>(p.pos % R);
    const int row = R == 4 ? R + pm : pm;
    float* skv = p.state_kv + static_cast<int64_t>(row) * W;
    float* ssc = p.state_score + static_cast<int64_t>(row) * W;
    const uint16_t* ape = p.ape + static_cast<int64_t>(pm) * W;
    std::memcpy(skv, p.kv_cur, sizeof(float) * W);
    quant::f16_to_f32_row(ape, ssc, W);
    for (int j = 0; j < W; ++j) ssc[j] = p.sc_cur[j] + ssc[j];  // sc + ape (IEEE + commutes)
    if (!compressor_emits(p.pos, R)) return;

    // The pooling of a window: columns are independent (a softmax over the window's rows each),
    // about 2R exps per column, so wide heads are split over the pool.
    float* pooled = p.pooled;
    split_rows(D, 2 * R * kPoolExpElems, [&](int64_t jb, int64_t je) { pool_columns(p, W, jb, je); });
    // The row is built in place in pooled (each element reads only itself), then stored (FP4 / FP8).
    cpu::rms_norm_row(pooled, p.norm, pooled, D, p.eps);
    cpu::rope_tail_rows(pooled, 1, D, p.n_rot, p.pos + 1 - R, p.rope, false);
    if (p.indexer) {
      DS4_CHECK(p.out_fp4 != nullptr);
      quant::indexer_qat_row_store(pooled, D, p.out_fp4);  // the indexer cache stores FP4
    } else {
      DS4_CHECK(p.out_fp8 != nullptr);
      quant::fp8_kv_row_store(pooled, D, p.n_rot, p.out_fp8);  // the compressed cache stores FP8
    }
    if (R == 4) {
      // The current window becomes the "previous" lane of the next one.
      std::memcpy(p.state_kv, p.state_kv + 4 * static_cast<int64_t>(W), sizeof(float) * 4 * W);
      std::memcpy(p.state_score, p.state_score + 4 * static_cast<int64_t>(W), sizeof(float) * 4 * W);
    }
  }

  // Scores of every (query, indexer row) pair in one parallel_for over the pairs of all the
  // queries (a pair's score is one fixed expression whichever thread computes it), then each
  // query's top-k, the queries in parallel.
  void indexer_select(const IndexerSelectParams* p, int n) override {
    int64_t total = 0;
    for (int i = 0; i < n; ++i) {
      DS4_CHECK(p[i].head_dim <= kMaxIndexerDim && p[i].head_dim % quant::kFp4BlockSize == 0);
      total += p[i].n_rows;
    }
    const int64_t per_row = std::max<int64_t>(1, static_cast<int64_t>(p[0].n_head) * p[0].head_dim);
    const int64_t grain = std::max<int64_t>(16, kIndexerChunkWork / per_row);
    const float* fp4 = quant::fp4_value_table();
    pool_.parallel_for(total, grain, [&](int64_t b, int64_t e) {
      int i = 0;
      int64_t base = 0;  // first pair of query i
      for (int64_t t = b; t < e; ++t) {
        while (t - base >= p[i].n_rows) base += p[i++].n_rows;
        const IndexerSelectParams& q = p[i];
        const int64_t c = t - base;
        float row[kMaxIndexerDim];  // the row's values (those of its f16 form) from its FP4 store
        quant::fp4_row_decode(q.rows + c * quant::fp4_row_bytes(q.head_dim), q.head_dim, row, fp4);
        float sc = 0.0f;
        for (int k = 0; k < q.n_head; ++k) {
          const float d = cpu::dot_f32(row, q.q + static_cast<int64_t>(k) * q.head_dim, q.head_dim);
          sc += (d > 0.0f ? d : 0.0f) * q.w[k];
        }
        q.scores[c] = sc;
      }
    });
    pool_.parallel_for(n, total < kInlineTopKRows ? n : 1, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) top_k_mask(p[i]);
    });
  }

  // n queries × n_head heads are independent units; waking workers costs more than a small
  // job (tiny models), so a batch below kInlineAttnWork multiply-adds runs on the caller.
  void sink_attention(const SinkAttentionParams* p, int n) override {
    const int nh = p[0].n_head;
    int64_t work = 0;
    for (int i = 0; i < n; ++i) {
      DS4_CHECK(p[i].n_head == nh);
      work += (p[i].n_raw + p[i].n_comp) * p[i].head_dim * nh;
    }
    // Units in runs of heads of one query (a run widens each chunk of f16 keys once): about
    // n_threads runs per query, at most kAttnHeadRun heads each. Heads are independent, so
    // the split changes no bit.
    const int64_t units = static_cast<int64_t>(n) * nh;
    const int64_t run = std::clamp<int64_t>(nh / std::max(1, pool_.n_threads()), 1, kAttnHeadRun);
    pool_.parallel_for(units, work < kInlineAttnWork ? units : run, [&](int64_t b, int64_t e) {
      for (int64_t u = b; u < e;) {
        const int64_t h = u % nh, end = std::min<int64_t>(nh, h + (e - u));
        cpu::sink_attention_heads(p[u / nh], h, end);
        u += end - h;
      }
    });
  }

  void embed(const EmbedParams& p) override {
    split_rows(p.n_rows, p.n_hc * p.n_embd, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const auto* row = reinterpret_cast<const uint16_t*>(p.table + static_cast<size_t>(p.tokens[i]) * p.row_bytes);
        float* x = p.out + i * p.n_hc * p.n_embd;
        quant::f16_to_f32_row(row, x, p.n_embd);
        for (int hh = 1; hh < p.n_hc; ++hh) std::memcpy(x + hh * p.n_embd, x, sizeof(float) * p.n_embd);
      }
    }, kInlineCopyElems);
  }

  void add(const AddParams& p) override {
    split_rows(p.n, 1, [&](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) p.out[k] = p.a[k] + p.b[k];
    }, kInlineCopyElems);
  }

  void hc_mean(const HcMeanParams& p) override {
    const float inv = 1.0f / static_cast<float>(p.n_hc);
    const int64_t E = p.n_embd;
    split_rows(p.n_rows, p.n_hc * E, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const float* x = p.x + i * p.n_hc * E;
        float* out = p.out + i * p.out_stride;
        for (int64_t d = 0; d < E; ++d) {
          float acc = x[d];
          for (int hh = 1; hh < p.n_hc; ++hh) acc += x[hh * E + d];
          out[d] = acc * inv;
        }
      }
    }, kInlineCopyElems);
  }

  void argmax(const ArgmaxParams& p) override {
    for (int i = 0; i < p.n_rows; ++i) {
      const TopTwo t = top_two(std::span<const float>(p.x + static_cast<int64_t>(i) * p.stride, p.n), p.excluded);
      p.out[i] = t.id;
      if (p.margin != nullptr) p.margin[i] = t.margin;
    }
  }

  void top_k(const TopKParams& p) override {
    DS4_CHECK_MSG(p.k >= 1 && p.k <= kTopKMax, "top_k: k out of range");
    for (int i = 0; i < p.n_rows; ++i) {
      top_k_row(std::span<const float>(p.x + static_cast<int64_t>(i) * p.stride, p.n), p.k, p.excluded,
                p.ids + static_cast<int64_t>(i) * p.k, p.values + static_cast<int64_t>(i) * p.k);
    }
  }

  void get_rows(const GetRowsParams& p) override {
    split_rows(p.n_rows, p.w.n_in, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        quant::dequantize_row(p.w.type, p.w.data + static_cast<size_t>(p.ids[i]) * p.w.row_bytes,
                              p.out + i * p.out_stride, p.w.n_in);
      }
    }, kInlineCopyElems);
  }

  void swiglu(const SwigluParams& p) override {
    split_rows(p.n, 1, [&](int64_t b, int64_t e) {
      cpu::swiglu_row(p.gate + b, p.up + b, p.clamp, 1.0f, false, p.out + b, e - b);
    });
  }

  // Pooled columns [jb, je) of the closing window (§4.4): per column the max over the window's
  // scores (ratio 4: the previous lane's first half and the current lane's second half), then
  // den = Σ exp(s - max), acc = Σ exp(s - max)·kv in row order, pooled = acc / den.
  static void pool_columns(const CompressorStepParams& p, int W, int64_t jb, int64_t je) {
    const int R = p.ratio;
    const int D = p.head_dim;
    float* pooled = p.pooled;
    for (int64_t j = jb; j < je; ++j) {
      float mx = -1.0e30f;
      if (R == 4) {
        for (int r = 0; r < 4; ++r) {
          const float sp = p.state_score[static_cast<int64_t>(r) * W + j];
          const float sc = p.state_score[static_cast<int64_t>(4 + r) * W + D + j];
          if (sp > mx) mx = sp;
          if (sc > mx) mx = sc;
        }
      } else {
        for (int r = 0; r < R; ++r) {
          const float s = p.state_score[static_cast<int64_t>(r) * W + j];
          if (s > mx) mx = s;
        }
      }
      if (mx <= -0.5e30f) {
        pooled[j] = 0.0f;
        continue;
      }
      float den = 0.0f, acc = 0.0f;
      // The weights exp(s - max) of a column in batches (kernels.h exp_sub_row), then the
      // sums in row order.
      constexpr int kBatch = 32;
      float wv[kBatch];
      if (R == 4) {
        for (int r = 0; r < 4; ++r) {
          wv[2 * r] = p.state_score[static_cast<int64_t>(r) * W + j];
          wv[2 * r + 1] = p.state_score[static_cast<int64_t>(4 + r) * W + D + j];
        }
        cpu::exp_sub_row(wv, mx, wv, 8);
        for (int r = 0; r < 4; ++r) {
          const int64_t ip = static_cast<int64_t>(r) * W + j;
          const int64_t ic = static_cast<int64_t>(4 + r) * W + D + j;
          const float wp = wv[2 * r], wc = wv[2 * r + 1];
          den += wp + wc;
          acc += wp * p.state_kv[ip];
          acc += wc * p.state_kv[ic];
        }
      } else {
        for (int r0 = 0; r0 < R; r0 += kBatch) {
          const int n = R - r0 < kBatch ? R - r0 : kBatch;
          for (int t = 0; t < n; ++t) wv[t] = p.state_score[static_cast<int64_t>(r0 + t) * W + j];
          cpu::exp_sub_row(wv, mx, wv, n);
          for (int t = 0; t < n; ++t) {
            den += wv[t];
            acc += wv[t] * p.state_kv[static_cast<int64_t>(r0 + t) * W + j];
          }
        }
      }
      pooled[j] = den > 0.0f ? acc / den : 0.0f;
    }
  }

  // Rows are independent (each its own probs row); a score costs a few transcendentals, so a
  // row weighs kRouteScoreElems elements in the inline-or-split decision.
  void route(const RouteParams& p) override {
    split_rows(p.n_rows, static_cast<int64_t>(p.n_expert) * kRouteScoreElems, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) route_row(p, static_cast<int>(i));
    });
  }
  // One row: the expressions of backend/row_math.h, which the CUDA kernels run too.
  static void route_row(const RouteParams& p, int i) {
    const int X = p.n_expert, U = p.n_used;
    const float* logits = p.logits + static_cast<int64_t>(i) * X;
    float* pr = p.probs + static_cast<int64_t>(i) * X;
    for (int e = 0; e < X; ++e) pr[e] = rowmath::route_prob(logits[e]);
    int32_t* sel = p.sel + static_cast<int64_t>(i) * U;
    if (p.tid2eid != nullptr) {
      for (int j = 0; j < U; ++j) sel[j] = p.tid2eid[static_cast<int64_t>(p.tokens[i]) * U + j];
    } else {
      rowmath::route_select(pr, p.bias, X, U, sel);
    }
    rowmath::route_weights(pr, sel, U, p.renorm, p.scale, p.wt + static_cast<int64_t>(i) * U);
  }

  void hc_collapse(const HcCollapseParams& p) override {
    const int64_t hc_dim = p.n_hc * p.n_embd;
    rms_norm_rows_to(p.x, p.flat, hc_dim, p.n_rows, p.norm_eps);
    MatmulParams mp;
    mp.w = p.fn;
    mp.x = p.flat;
    mp.x_stride = hc_dim;
    mp.y = p.mix;
    mp.y_stride = p.n_hc;
    mp.n_rows = p.n_rows;
    mm_.matmul(mp);
    for (int i = 0; i < p.n_rows; ++i) {
      float w[16];
      for (int h = 0; h < p.n_hc; ++h) w[h] = cpu::sigmoid_stable(p.mix[i * p.n_hc + h] * p.scale + p.base[h]) + p.hc_eps;
      const float* x = p.x + i * hc_dim;
      weighted_stream_sum(x, w, p.n_hc, p.n_embd, p.y + i * p.n_embd);
    }
  }

  // Pairs (row, slot) are sorted by expert (stable), so each expert's weights are read once
  // for all the rows using it: one multi-row kernel call per (expert, output chunk), all of
  // them in ONE parallel_for (the tasks split outputs, never a reduction). Every buffer
  // below is indexed by sorted pair position q; the final sum reads each row's pairs back in
  // slot order, so a row's bits equal its single-row (decode) result.
  void moe(const MoeParams& p) override {
    if (mm_.activation_numerics() == ActivationNumerics::kF32) return cpu::moe_f32(p, &pool_);
    const int64_t n_embd = p.gate.n_in;
    const int64_t n_ff = p.gate.n_out;
    const int U = p.n_used;
    const int n_pairs = p.n_rows * U;
    const int64_t xb = n_embd / quant::kQKK;
    const int64_t mb = n_ff / quant::kQKK;
    uint8_t* cur = static_cast<uint8_t*>(p.scratch);
    BlockQ8K* xq = carve<BlockQ8K>(cur, static_cast<size_t>(p.n_rows) * xb);
    BlockQ8K* xg = carve<BlockQ8K>(cur, static_cast<size_t>(n_pairs) * xb);
    float* gbuf = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);
    float* ubuf = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);
    float* mid = carve<float>(cur, static_cast<size_t>(n_pairs) * n_ff);
    BlockQ8K* midq = carve<BlockQ8K>(cur, static_cast<size_t>(n_pairs) * mb);
    float* down = carve<float>(cur, static_cast<size_t>(n_pairs) * n_embd);
    int32_t* order = carve<int32_t>(cur, static_cast<size_t>(n_pairs) * 3);
    int32_t* groups = order + n_pairs;  // start position of each expert group
    int32_t* inv = groups + n_pairs;    // pair -> sorted position

    for (int i = 0; i < p.n_rows; ++i) cpu::quantize_q8_k_act(p.x + i * n_embd, xq + i * xb, n_embd);
    const int n_groups = cpu::group_pairs_by_expert(p.sel, n_pairs, order, groups, inv);
    for (int q = 0; q < n_pairs; ++q) std::memcpy(xg + q * xb, xq + (order[q] / U) * xb, sizeof(BlockQ8K) * xb);
    auto group_span = [&](int g, int* q0, int* cnt) {
      *q0 = groups[g];
      *cnt = (g + 1 < n_groups ? groups[g + 1] : n_pairs) - *q0;
    };

    // Gate and up: task t = ((group, matrix), output chunk).
    const int64_t gu_rows = chunk_rows(p.gate.row_bytes, n_ff, 2 * n_groups);
    const int64_t gu_chunks = (n_ff + gu_rows - 1) / gu_rows;
    run_tasks(2 * n_groups * gu_chunks, 2 * n_groups * n_ff * static_cast<int64_t>(p.gate.row_bytes), [&](int64_t t) {
      const int g = static_cast<int>(t / (2 * gu_chunks));
      const bool is_up = (t / gu_chunks) % 2 != 0;
      const int64_t o0 = (t % gu_chunks) * gu_rows;
      const int64_t cnt_o = std::min(gu_rows, n_ff - o0);
      int q0, cnt;
      group_span(g, &q0, &cnt);
      const ExpertMatrix& em = is_up ? p.up : p.gate;
      float* y = (is_up ? ubuf : gbuf) + static_cast<int64_t>(q0) * n_ff + o0;
      cpu::expert_matmul(em.expert(p.sel[order[q0]]).rows(o0, cnt_o), xg + q0 * xb, xb, cnt, y, n_ff, nullptr);
    });
    const float clamp = p.clamp;
    split_rows(n_pairs, n_ff, [&](int64_t qb, int64_t qe) {
      for (int64_t q = qb; q < qe; ++q) {
        float* m = mid + q * n_ff;
        const float* gq = gbuf + q * n_ff;
        const float* uq = ubuf + q * n_ff;
        cpu::swiglu_row(gq, uq, clamp, p.wt[order[q]], true, m, n_ff);
        cpu::quantize_q8_k_act(m, midq + q * mb, n_ff);
      }
    });
    // Down: task t = (group, output chunk).
    const int64_t d_rows = chunk_rows(p.down.row_bytes, n_embd, n_groups);
    const int64_t d_chunks = (n_embd + d_rows - 1) / d_rows;
    run_tasks(n_groups * d_chunks, n_groups * n_embd * static_cast<int64_t>(p.down.row_bytes), [&](int64_t t) {
      const int g = static_cast<int>(t / d_chunks);
      const int64_t o0 = (t % d_chunks) * d_rows;
      const int64_t cnt_o = std::min(d_rows, n_embd - o0);
      int q0, cnt;
      group_span(g, &q0, &cnt);
      cpu::expert_matmul(p.down.expert(p.sel[order[q0]]).rows(o0, cnt_o), midq + q0 * mb, mb, cnt,
                         down + static_cast<int64_t>(q0) * n_embd + o0, n_embd, nullptr);
    });
    for (int i = 0; i < p.n_rows; ++i) {
      float* out = p.out + i * n_embd;
      for (int64_t o = 0; o < n_embd; ++o) out[o] = 0.0f;
      for (int sl = 0; sl < U; ++sl) {
        const float* d = down + static_cast<int64_t>(inv[i * U + sl]) * n_embd;
        for (int64_t o = 0; o < n_embd; ++o) out[o] = out[o] + d[o];
      }
      if (p.add != nullptr) {
        const float* a = p.add + i * n_embd;
        for (int64_t o = 0; o < n_embd; ++o) out[o] = out[o] + a[o];
      }
    }
  }

 private:
  // Output rows per MoE task: about kMoeTaskBytes of weights, but enough tasks (4 per thread)
  // across the n_mats expert matrices of the call; whole register tiles of 8 outputs.
  int64_t chunk_rows(size_t row_bytes, int64_t n_out, int64_t n_mats) const {
    const int64_t rb = std::max<int64_t>(1, static_cast<int64_t>(row_bytes));
    int64_t rows = std::max<int64_t>(8, kMoeTaskBytes / rb);
    const int64_t want_tasks = 4 * static_cast<int64_t>(pool_.n_threads());
    if (n_mats * ((n_out + rows - 1) / rows) < want_tasks) {
      const int64_t per_mat = (want_tasks + n_mats - 1) / n_mats;
      rows = std::max<int64_t>(8, (n_out + per_mat - 1) / per_mat);
    }
    rows = (rows + 7) / 8 * 8;
    return std::min(rows, n_out);
  }
  // fn(b, e) over [0, n_items) of items of item_elems elements each: on the caller alone when
  // the total is below inline_elems, else in about one chunk per thread (chunks are whole
  // items; what each item computes never depends on the chunking).
  template <typename F>
  void split_rows(int64_t n_items, int64_t item_elems, F&& fn, int64_t inline_elems = kInlineRowElems) {
    const int64_t nt = pool_.n_threads();
    int64_t grain = n_items;
    if (nt > 1 && n_items > 1 && n_items * item_elems >= inline_elems) {
      const int64_t chunks = std::min<int64_t>(n_items, nt);
      grain = (n_items + chunks - 1) / chunks;
    }
    pool_.parallel_for(n_items, grain, fn);
  }
  // Runs fn(t) for t < n_tasks over the pool (on the caller alone when the work is small).
  template <typename F>
  void run_tasks(int64_t n_tasks, int64_t work_bytes, F&& fn) {
    const int64_t grain = work_bytes < kInlineMoeBytes ? std::max<int64_t>(1, n_tasks) : 1;
    pool_.parallel_for(n_tasks, grain, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) fn(t);
    });
  }

  // Weight bytes x rows (up to one 8-row tile) of a matmul: its work in split decisions.
  static int64_t work_bytes(const MatmulParams& p) {
    return p.w.n_out * static_cast<int64_t>(p.w.row_bytes) * std::min(p.n_rows, 8);
  }

  void* allocate(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p != nullptr) std::memset(p, 0, bytes);
    return p;
  }
  void release(void* p, size_t) override { std::free(p); }
  static void copy_bytes(void* dst, const void* src, size_t bytes) {
    if (bytes != 0 && dst != src) std::memmove(dst, src, bytes);
  }

  ThreadPool pool_;
  cpu::Matmul mm_;
  cpu::Matmul mm_inline_;  // the same matmuls on the calling thread alone (pieces of a job)
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int n_threads, ActivationNumerics act) {
  return std::make_unique<CpuBackend>(n_threads, act);
}

}  // namespace ds4::backend
