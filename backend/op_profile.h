// backend/op_profile.h — the op-timeline profiler behind --cuda-profile (DS4_CUDA_GAP_PROFILE=1):
// per op its time on the device, the bytes it moves and the holes between ops.
//
// Role: three parts, usable on any backend (the CPU tests drive them with a fake clock):
//  * op_cost(params): the op class (dense Q8_0 / F16 / F32, head, routed experts, attention,
//    indexer, HC, norm, router, elementwise, copy) and the bytes one call reads and writes
//    (weights plus f32 activations and scratch), from the shapes in the params alone;
//  * ProfileStats: accumulates timed op records per phase (a phase = forwards of the same row
//    count: decode = 1 row, verify(r) / decode_batch(k) = r rows, prefill = more than
//    kProfileMaxPhaseRows rows; ops before the first forward are phase 0) and formats the
//    tables. An op belongs to the phase of the last forward issued before it, so what runs
//    between forwards (the next token's upload, a rollback, a snapshot) counts in the phase of
//    the forward before it;
//  * make_profiling_backend(): a ForwardingBackend that records a start and an end mark on an
//    OpClock around every op and copy (a preallocated ring of marks: nothing is allocated per
//    op), reads the marks back when the ring is half full at a host wait (download / sync) or
//    full, and prints the report when it is destroyed.
// Invariants:
//  * The wrapped backend computes exactly what it computes unwrapped (the wrapper only marks
//    time around calls; it downloads nothing and reorders nothing).
//  * Time attribution: an op's time is end − start of its marks; the gap before op i is
//    start(i) − end(i − 1). A gap after a host wait (download or sync) is a "host round trip"
//    (the token boundary: the host reads a result, then issues the next forward); every other
//    gap is "between ops" (launch overhead the device could not hide). A download's own time
//    counts as host round trip too (its end mark is recorded after the host has waited).
//  * The first gap after a read-back of the marks is excluded (it holds the read-back itself)
//    and counted as such; per-forward gap figures are extrapolated from the included gaps.
//  * Routed-expert bytes: a call of n rows reads min(n·n_used, n_expert) experts at most (rows
//    may share experts; the selection is in device memory and is not read back): exact for
//    one row, an upper bound for more (marked in the report).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "backend/backend.h"

namespace ds4::backend {

enum class OpClass : uint8_t {
  kDenseQ8_0,   // Q8_0 matmuls (attention, shared expert, compressors, indexer projections)
  kDenseF16,    // F16 matmuls
  kDenseF32,    // F32 matmuls (router logits)
  kDenseOther,  // matmuls of any other weight type
  kHead,        // the vocabulary projection (the one matmul with more than kHeadMinOutputs outputs)
  kExperts,     // routed experts (moe)
  kAttention,   // attention inputs, compressor steps, sink attention
  kIndexer,     // indexer scores + top-k
  kHc,          // hyper-connection pre / post / collapse
  kNorm,        // rms_norm
  kRouter,      // route
  kElementwise, // embed, add, hc_mean, swiglu, argmax, top_k, get_rows
  kCopy,        // upload, copy, fill
  kHostWait,    // download (the host waits for it)
  kCount
};
const char* op_class_name(OpClass c);

// Matmuls with at least this many outputs are the output head (DS4's only one is n_vocab;
// the widest other projection has 32768 outputs).
inline constexpr int64_t kHeadMinOutputs = 65536;
// Forwards of more rows than this are one phase, "prefill".
inline constexpr int kProfileMaxPhaseRows = 16;

struct OpCost {
  OpClass cls = OpClass::kElementwise;
  uint64_t bytes = 0;  // read + written by one call
};

uint64_t matrix_bytes(const Matrix& w);
OpCost op_cost(const MatmulParams& p);
OpCost op_cost(const MatmulParams* p, int n);  // matmul_grouped: the sum; class of p[0]
// The op key of matmul_grouped, written into buf (snprintf's truncation): "matmul_grouped q8_0
// 2x(4096x2048)" when the groups share one shape, "matmul_grouped q8_0 4096x(1024+512)" for
// mixed widths (q_a and kv of one row). No allocation: the profiler formats one per call.
void format_matmul_grouped_key(char* buf, size_t size, const MatmulParams* p, int n);
OpCost op_cost(const RmsNormParams& p);
OpCost op_cost(const HcPreParams& p);
OpCost op_cost(const HcPostParams& p);
OpCost op_cost(const HcCollapseParams& p);
OpCost op_cost(const AttentionInputsParams& p);
OpCost op_cost(const CompressorStepParams& p);
OpCost op_cost(const CompressorStepParams* p, int n);  // compressor_steps: the sum (n >= 0)
OpCost op_cost(const CompressorRowsParams& p);         // compressor_rows: its n steps' sum
OpCost op_cost(const IndexerSelectParams* p, int n);
OpCost op_cost(const SinkAttentionParams* p, int n);
OpCost op_cost(const SwigluParams& p);
OpCost op_cost(const RouteParams& p);
// distinct_experts < 0: min(n_rows·n_used, n_expert), exact for one row (see the header).
OpCost op_cost(const MoeParams& p, int distinct_experts = -1);
OpCost op_cost(const EmbedParams& p);
OpCost op_cost(const AddParams& p);
OpCost op_cost(const HcMeanParams& p);
OpCost op_cost(const ArgmaxParams& p);
OpCost op_cost(const TopKParams& p);
OpCost op_cost(const GetRowsParams& p);

// How the gap before an op is counted.
enum class GapKind : uint8_t {
  kNone,       // the first op ever: no gap
  kBetweenOps, // after another op, no host wait between
  kHostRound,  // after a host wait (download / sync): the token boundary
  kExcluded,   // holds the profiler's own read-back of the marks
};

// The accumulated profile. Keys are op names with their weight type and shape; each op is
// attributed to the phase of the forward it was issued in (the row count of the last embed
// before it, which the caller passes).
class ProfileStats {
 public:
  // A forward of `rows` rows was issued (counted in its phase: forwards and tokens).
  void begin_forward(int rows);
  // One timed op issued in a forward of `rows` rows: its time and the gap before it (gap_us
  // is read only for kBetweenOps / kHostRound), in microseconds.
  void add_op(int rows, std::string_view key, OpCost cost, double dur_us, double gap_us, GapKind gap);
  // The tables for every phase that ran (empty string when nothing was recorded).
  std::string report(std::string_view title) const;
  int64_t ops() const { return n_ops_; }

 private:
  struct OpStat {
    std::string key;
    OpClass cls;
    int64_t calls = 0;
    double us = 0;
    double bytes = 0;
  };
  struct Phase {
    int rows = 0;  // forward rows; kProfileMaxPhaseRows + 1 = prefill
    int64_t forwards = 0, tokens = 0, ops = 0;
    double busy_us = 0, host_wait_us = 0;
    double gap_us = 0, round_us = 0;
    int64_t n_gap = 0, n_round = 0, n_excluded = 0;
    std::vector<OpStat> stats;
  };
  Phase& phase(int rows);
  std::vector<Phase> phases_;
  int64_t n_ops_ = 0;
};

// Marks on a timeline: `capacity()` numbered slots, each recorded when the work issued before
// it is done (a CUDA event on the backend's stream; now() on a synchronous backend).
class OpClock {
 public:
  virtual ~OpClock() = default;
  virtual int capacity() const = 0;
  virtual void record(int mark) = 0;
  // Returns when `mark` has been reached.
  virtual void wait(int mark) = 0;
  // Microseconds from mark `from` to mark `to` (both reached).
  virtual double elapsed_us(int from, int to) = 0;
};

// now() at record (a synchronous backend such as the CPU's: each call returns when done).
std::unique_ptr<OpClock> make_steady_clock(int capacity);

// `inner` wrapped by the profiler; the report goes to `sink` (default: stderr) when the
// returned backend is destroyed. `title` names the device in the report.
using ReportSink = std::function<void(const std::string&)>;
std::unique_ptr<Backend> make_profiling_backend(std::unique_ptr<Backend> inner, std::unique_ptr<OpClock> clock,
                                                std::string title, ReportSink sink = nullptr);

}  // namespace ds4::backend
