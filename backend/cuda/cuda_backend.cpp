// backend/cuda/cuda_backend.cpp — CudaBackend: backend.h on one CUDA device and stream.
//
// Role: memory (Buffers are device allocations; upload / download / copy / fill are
// stream-ordered copies), the weight binding (every tensor range copied once into one device
// allocation through pinned staging buffers, with progress and the GB/s reached) and the ops,
// each forwarded to backend/cuda/ops.h. All work runs on one non-blocking stream in issue
// order, so an op sees every earlier upload and op, and a download sees every earlier op.
// Invariants: nothing here allocates inside an op except the one-time growth of the matmul
// activation scratch (a new, larger shape); the fused HC ops' counters are allocated once at
// start-up (--cuda-hc-fused 0: none, the three-launch HC path); an op that fails ends the
// process with one message: a launch error names the op and its shapes; a device fault
// surfaces at the next synchronization, unless sync_each_op (--cuda-sync) makes every op wait
// and name itself.
// CUDA graphs (--cuda-graphs N, off by default; never with --cuda-sync or --cuda-profile): the
// ops of a one-row forward (between Backend::begin_forward / end_forward) are captured on the
// stream instead of launched, and the captured graph is launched in one call — the whole
// forward (N = 1) or every N ops (N >= 2, so the device runs one segment while the host
// captures the next). Arguments (positions, pointers, row counts) are baked per capture, so
// every forward is captured afresh; an executable graph per segment index and node count is
// kept and updated (cudaGraphExecUpdate), re-instantiated only when its topology changed. The
// first one-row forward runs uncaptured (it makes the kernels' one-time set-ups: table
// uploads, shared-memory opt-ins). A host round trip inside the bracket (upload, download,
// sync, alloc, scratch growth) first ends and launches the segment captured so far, then
// capture resumes. A capture that fails is the usual one-line fatal error. The bracket and
// the ops inside it must come from one thread (the capture is thread-local), as every use of
// a backend from one session already is.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/cuda_profile.h"
#include "backend/cuda/graph.h"
#include "backend/registry.h"
#include "backend/cuda/ops.h"
#include "core/log.h"

namespace ds4::backend {

namespace {

// A CUDA failure inside a Backend call, which cannot return a Status: one clear message, then
// exit. The device context is unusable after a fault, and continuing would produce garbage.
[[noreturn]] void fatal(const Status& s, const char* op) {
  std::fflush(stdout);
  std::fprintf(stderr, "ds4: CUDA backend error in %s: %s\n", op, s.message().c_str());
  std::fflush(stderr);
  std::_Exit(70);
}

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

double gib(double bytes) { return bytes / (1024.0 * 1024.0 * 1024.0); }

// Weights in one device allocation: range i at base + offset[i]. map() finds the range of a
// host address (sorted, binary search) and returns the same offset inside the device copy.
class CudaWeightSet final : public WeightSet {
 public:
  ~CudaWeightSet() override { cuda::device_free(base_); }

  static std::unique_ptr<CudaWeightSet> upload(std::span<const WeightRange> ranges, cuda::Stream stream,
                                               int device) {
    auto set = std::unique_ptr<CudaWeightSet>(new CudaWeightSet());
    size_t total = 0;
    for (const WeightRange& r : ranges) {
      if (r.host == nullptr || r.bytes == 0) continue;
      const auto* b = static_cast<const uint8_t*>(r.host);
      set->ranges_.push_back(Range{b, b + r.bytes, total});
      total += align_up(r.bytes);
    }
    std::sort(set->ranges_.begin(), set->ranges_.end(),
              [](const Range& a, const Range& b) { return a.begin < b.begin; });
    if (total == 0) return set;
    size_t free_b = 0, total_b = 0;
    if (!cuda::mem_info(&free_b, &total_b).ok()) free_b = 0;
    const Status a = cuda::device_alloc(&set->base_, total);
    if (!a.ok()) {
      fatal(resource_error("the weights need %.2f GiB of device memory; device %d has %.2f GiB free of %.2f GiB (%s)",
                           gib(total), device, gib(free_b), gib(total_b), a.message().c_str()),
            "bind_weights");
    }
    set->copy_in(stream, total, device);
    return set;
  }

  const void* map(const void* host) const override {
    if (host == nullptr) return nullptr;
    const auto* p = static_cast<const uint8_t*>(host);
    auto it = std::upper_bound(ranges_.begin(), ranges_.end(), p,
                               [](const uint8_t* v, const Range& r) { return v < r.begin; });
    DS4_CHECK_MSG(it != ranges_.begin() && p < std::prev(it)->end,
                  "WeightSet::map: address outside the bound weights");
    const Range& r = *std::prev(it);
    return static_cast<uint8_t*>(base_) + r.offset + static_cast<size_t>(p - r.begin);
  }

 private:
  struct Range {
    const uint8_t* begin;
    const uint8_t* end;
    size_t offset;  // in the device allocation
  };
  CudaWeightSet() = default;

  // Streams the ranges through two pinned staging buffers: the host copies chunk k + 1 from the
  // mmap (page faults, disk reads) while the device copies chunk k in. Progress on stderr for
  // large models; one summary line with the GB/s at the end.
  void copy_in(cuda::Stream stream, size_t total, int device) {
    constexpr size_t kChunk = size_t{64} << 20;
    void* stage[2] = {nullptr, nullptr};
    cuda::Event done[2] = {nullptr, nullptr};
    for (int i = 0; i < 2; ++i) {
      Status s = cuda::host_alloc_pinned(&stage[i], kChunk);
      if (s.ok()) s = cuda::event_create(&done[i]);
      if (!s.ok()) fatal(s, "bind_weights");
    }
    const bool show = total >= (size_t{1} << 30);
    const auto t0 = std::chrono::steady_clock::now();
    auto last = t0;
    size_t copied = 0;
    int k = 0;
    bool used[2] = {false, false};
    for (const Range& r : ranges_) {
      const size_t bytes = static_cast<size_t>(r.end - r.begin);
      for (size_t off = 0; off < bytes; off += kChunk, k ^= 1) {
        const size_t n = std::min(kChunk, bytes - off);
        if (used[k]) {
          const Status s = cuda::event_sync(done[k]);
          if (!s.ok()) fatal(s, "bind_weights");
        }
        std::memcpy(stage[k], r.begin + off, n);
        Status s = cuda::copy_async(static_cast<uint8_t*>(base_) + r.offset + off, stage[k], n, stream);
        if (s.ok()) s = cuda::event_record(done[k], stream);
        if (!s.ok()) fatal(s, "bind_weights");
        used[k] = true;
        copied += n;
        const auto now = std::chrono::steady_clock::now();
        if (show && now - last > std::chrono::milliseconds(500)) {
          const double sec = std::chrono::duration<double>(now - t0).count();
          std::fprintf(stderr, "\rds4: uploading weights to cuda:%d: %.1f / %.1f GB (%.2f GB/s)   ", device, copied / 1e9,
                       total / 1e9, copied / 1e9 / sec);
          last = now;
        }
      }
    }
    const Status s = cuda::stream_sync(stream);
    if (!s.ok()) fatal(s, "bind_weights");
    for (int i = 0; i < 2; ++i) {
      cuda::event_destroy(done[i]);
      cuda::host_free_pinned(stage[i]);
    }
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (show) std::fprintf(stderr, "\r");
    DS4_LOG_INFO("weights on cuda:%d: %.2f GB in %.2f s (%.2f GB/s)", device, copied / 1e9, sec,
                 sec > 0 ? copied / 1e9 / sec : 0.0);
    if (show) std::fprintf(stderr, "ds4: weights on cuda:%d: %.2f GB in %.1f s (%.2f GB/s)\n", device, copied / 1e9, sec,
                           sec > 0 ? copied / 1e9 / sec : 0.0);
  }

  std::vector<Range> ranges_;  // sorted by begin
  void* base_ = nullptr;
};

// --cuda-lanes: process-wide like the kernel switches (apply_cuda_switches), read at each fork.
std::atomic<bool> g_lanes{false};

// The side lane (backend.h's fork / join): its stream, the two ordering events and its own HC
// counters (zeroed, kHcTicketRows); all null where ops must run on one stream.
struct SideLane {
  cuda::Stream stream = nullptr;
  cuda::Event fork = nullptr, join = nullptr;
  uint32_t* tickets = nullptr;
  void release() {
    if (stream != nullptr) cuda::stream_destroy(stream);
    if (fork != nullptr) cuda::event_destroy(fork);
    if (join != nullptr) cuda::event_destroy(join);
    stream = nullptr;
    fork = join = nullptr;
  }
};

// The fused HC kernels' counters: allocated and zeroed once (ordered on `stream`).
Status alloc_hc_tickets(cuda::Stream stream, uint32_t** tickets) {
  const size_t bytes = sizeof(uint32_t) * cuda::kHcTicketRows;
  void* p = nullptr;
  Status s = cuda::device_alloc(&p, bytes);
  if (s.ok()) s = cuda::memset_async(p, 0, bytes, stream);
  if (!s.ok()) {
    cuda::device_free(p);
    return s;
  }
  *tickets = static_cast<uint32_t*>(p);
  return Status();
}

class CudaBackend final : public Backend {
 public:
  // hc_tickets: the fused HC kernels' counters (ops.h kHcTicketRows, zeroed), or nullptr for
  // the three-launch HC path; owned from here on, as are the lanes' stream, events and
  // counters (--cuda-lanes; a null side stream: every op on `stream`).
  // graphs: 0 no capture, 1 a forward as one graph, N >= 2 a graph per N ops (see the top).
  // batch_steps: compressor_steps as one launch per 16 steps and compressor_rows as its two parallel launches.
  CudaBackend(const cuda::DeviceInfo& info, cuda::Stream stream, bool sync_each_op, uint32_t* hc_tickets,
              cuda::HcKernel hc_kernel, int graphs, bool batch_steps, const SideLane& side)
      : info_(info), stream_(stream), cur_(stream), sync_each_op_(sync_each_op), hc_tickets_{hc_tickets, side.tickets},
        hc_kernel_(hc_kernel), side_(side), graphs_(graphs), batch_steps_(batch_steps) {}
  ~CudaBackend() override {
    if (capturing_) {  // a bracket left open: drop what was captured (it never ran)
      cuda::Graph g = nullptr;
      size_t n = 0;
      (void)cuda::capture_end(stream_, &g, &n);
      cuda::graph_destroy(g);
    }
    (void)cuda::stream_sync(stream_);  // a fault here was reported by the call that caused it
    if (side_.stream != nullptr) (void)cuda::stream_sync(side_.stream);
    for (auto& seg : execs_) {
      for (ExecSlot& e : seg) cuda::graph_exec_destroy(e.exec);
    }
    if (graphs_ > 0) {
      DS4_LOG_INFO("cuda graphs: %llu forwards captured, %llu graph launches, %llu instantiations, %llu updates",
                   static_cast<unsigned long long>(graph_forwards_), static_cast<unsigned long long>(graph_launches_),
                   static_cast<unsigned long long>(graph_instantiations_),
                   static_cast<unsigned long long>(graph_updates_));
    }
    for (int l = 0; l < 2; ++l) {
      cuda::device_free(scratch_[l].data);
      cuda::device_free(hc_tickets_[l]);
    }
    side_.release();
    cuda::stream_destroy(stream_);
  }

  const char* name() const override { return "cuda"; }
  int n_threads() const override { return 1; }
  bool host_addressable() const override { return false; }
  // 256-row chunks: 2K prefill 401 -> 977 tokens/s on the 30-layer Flash file with the defaults
  // below (H100, docs/CUDA.md); the session's scratch grows from 164 to 415 MiB at 1K context.
  int preferred_prefill_rows() const override { return 256; }

  std::string description() const override {
    size_t free_b = 0, total_b = 0;
    (void)cuda::mem_info(&free_b, &total_b);  // zeros on failure: only a log line
    char buf[256];
    std::snprintf(buf, sizeof buf, "cuda: device %d, %s (sm_%d%d, %d SMs, %.1f GiB, %.1f GiB free)", info_.device,
                  info_.name.c_str(), info_.cc_major, info_.cc_minor, info_.sm_count, gib(total_b), gib(free_b));
    std::string d = buf;
    if (side_.stream != nullptr && g_lanes.load(std::memory_order_relaxed)) d += ", two lanes (--cuda-lanes)";
    if (graphs_ > 0) {
      char g[160];
      if (graphs_ == 1) {
        std::snprintf(g, sizeof g, ", CUDA graphs: one per decode forward (%llu captured)",
                      static_cast<unsigned long long>(graph_forwards_));
      } else {
        std::snprintf(g, sizeof g, ", CUDA graphs: one per %d ops of a decode forward (%llu captured)", graphs_,
                      static_cast<unsigned long long>(graph_forwards_));
      }
      d += g;
    }
    return d;
  }

  Status check_memory(uint64_t bytes, const char* what) const override {
    size_t free_b = 0, total_b = 0;
    DS4_RETURN_IF_ERROR(cuda::mem_info(&free_b, &total_b));
    if (bytes > free_b) {
      return resource_error("%s needs %.2f GiB of device memory, but cuda:%d (%s) has %.2f GiB free of %.2f GiB",
                            what, gib(static_cast<double>(bytes)), info_.device, info_.name.c_str(), gib(free_b),
                            gib(total_b));
    }
    return Status();
  }

  // A host source (pageable) is not captured: the upload runs between two segments.
  void upload(void* dst, const void* src, size_t bytes) override {
    on_main("upload inside a lane fork (backend.h: only ops go between fork and join)");
    const bool resume = pause_capture();
    check(cuda::copy_async(dst, src, bytes, stream_), "upload");
    if (resume) resume_capture();
  }
  void download(void* dst, const void* src, size_t bytes) override {
    on_main("download inside a lane fork (backend.h: only ops go between fork and join)");
    const bool resume = pause_capture();
    check(cuda::copy_async(dst, src, bytes, stream_), "download");
    check_sync("download");
    if (resume) resume_capture();
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    on_main("copy inside a lane fork (backend.h: only ops go between fork and join)");
    if (dst != src) check(cuda::copy_async(dst, src, bytes, stream_), "copy");
    count_op();
  }
  void copy_many(const CopyRegion* regions, int n) override {
    on_main("copy_many inside a lane fork (backend.h: only ops go between fork and join)");
    check(cuda::copy_many(regions, n, stream_), "copy_many");
    count_op();
  }
  void fill_f32(float* dst, size_t n, float value) override {
    on_main("fill_f32 inside a lane fork (backend.h: only ops go between fork and join)");
    check(cuda::fill_f32(dst, n, value, stream_), "fill_f32");
    count_op();
  }
  void fill_bytes(void* dst, size_t bytes, uint8_t value) override {
    on_main("fill_bytes inside a lane fork (backend.h: only ops go between fork and join)");
    check(cuda::memset_async(dst, value, bytes, stream_), "fill_bytes");
    count_op();
  }
  void sync() override {
    on_main("sync inside a lane fork (backend.h: only ops go between fork and join)");
    const bool resume = pause_capture();
    check_sync("sync");
    if (resume) resume_capture();
  }

  std::unique_ptr<WeightSet> bind_weights(std::span<const WeightRange> ranges) override {
    on_main("bind_weights inside a lane fork (backend.h: only ops go between fork and join)");
    const bool resume = pause_capture();
    auto w = CudaWeightSet::upload(ranges, stream_, info_.device);
    if (resume) resume_capture();
    return w;
  }

  // The bracket: graphs on, one row, not the first one-row forward (the warm-up) -> capture.
  void begin_forward(int n_rows) override {
    DS4_CHECK_MSG(!in_forward_, "begin_forward: brackets do not nest");
    if (graphs_ == 0 || n_rows != 1) return;
    if (!warmed_up_) {
      warmed_up_ = true;
      return;
    }
    in_forward_ = true;
    segment_ = 0;
    resume_capture();
    ++graph_forwards_;
  }
  void end_forward() override {
    on_main("end_forward inside a lane fork (backend.h: only ops go between fork and join)");
    if (!in_forward_) return;
    pause_capture();
    in_forward_ = false;
  }

  // Lanes (backend.h): the side lane is a second stream that waits for the main one at the
  // fork; the main stream waits for it at the join. Each lane has its own matmul scratch and
  // HC counters, so every op may run on either. Without --cuda-lanes (g_lanes, read at the
  // fork) or a side lane all three do nothing.
  void fork() override {
    if (side_.stream == nullptr || !g_lanes.load(std::memory_order_relaxed)) return;
    DS4_CHECK_MSG(!forked_, "fork: forks do not nest");
    check(cuda::event_record(side_.fork, stream_), "fork");
    check(cuda::stream_wait_event(side_.stream, side_.fork), "fork");
    forked_ = true;
    cur_ = side_.stream;
  }
  void to_main() override {
    if (forked_) cur_ = stream_;
  }
  void join() override {
    if (!forked_) return;
    check(cuda::event_record(side_.join, side_.stream), "join");
    check(cuda::stream_wait_event(stream_, side_.join), "join");
    forked_ = false;
    cur_ = stream_;
  }

  void matmul(const MatmulParams& p) override {
    grow_scratch(cuda::matmul_scratch_bytes(p.w.n_in, p.n_rows));
    op(cuda::matmul(p, scratch(), cur_), "matmul", "%s [%lld -> %lld], %d rows", gguf::type_name(p.w.type),
       ll(p.w.n_in), ll(p.w.n_out), p.n_rows);
  }
  void matmul_grouped(const MatmulParams* p, int n) override {
    if (n <= 0) {
      count_op();
      return;
    }
    grow_scratch(cuda::matmul_grouped_scratch_bytes(p, n));
    op(cuda::matmul_grouped(p, n, scratch(), cur_), "matmul_grouped", "%d x %s [%lld -> %lld], %d rows", n,
       gguf::type_name(p[0].w.type), ll(p[0].w.n_in), ll(p[0].w.n_out), p[0].n_rows);
  }
  void rms_norm(const RmsNormParams& p) override {
    op(cuda::rms_norm(p, cur_), "rms_norm", "n %lld, %d rows", ll(p.n), p.n_rows);
  }
  void hc_pre(const HcPreParams& p) override {
    op(cuda::hc_pre(p, cur_, tickets(), hc_kernel_), "hc_pre", "n_hc %d, n_embd %lld, %d rows", p.n_hc, ll(p.n_embd),
       p.n_rows);
  }
  void hc_post(const HcPostParams& p) override {
    op(cuda::hc_post(p, cur_), "hc_post", "n_hc %d, n_embd %lld, %d rows", p.n_hc, ll(p.n_embd), p.n_rows);
  }
  void attention_inputs(const AttentionInputsParams& p) override {
    op(cuda::attention_inputs(p, cur_), "attention_inputs", "%d rows at %lld, %d heads of %d", p.n_rows,
       ll(p.pos0), p.n_head, p.head_dim);
  }
  void compressor_step(const CompressorStepParams& p) override {
    op(cuda::compressor_step(p, cur_), "compressor_step", "ratio %d, head_dim %d, pos %lld", p.ratio,
       p.head_dim, ll(p.pos));
  }
  void compressor_steps(const CompressorStepParams* p, int n) override {
    if (!batch_steps_) {
      Backend::compressor_steps(p, n);  // one launch per step
      return;
    }
    if (n <= 0) {
      count_op();
      return;
    }
    op(cuda::compressor_steps(p, n, cur_), "compressor_steps", "%d steps, first ratio %d, pos %lld", n,
       p[0].ratio, ll(p[0].pos));
  }
  void compressor_rows(const CompressorRowsParams& p) override {
    if (!batch_steps_) {
      Backend::compressor_rows(p);  // the steps, one launch each
      return;
    }
    bool done = false;
    const Status s = cuda::compressor_rows(p, cur_, &done);
    if (s.ok() && !done) {
      Backend::compressor_rows(p);  // declined: 16 steps per launch
      return;
    }
    op(s, "compressor_rows", "%d rows from %lld, ratio %d, head_dim %d", p.n, ll(p.step.pos), p.step.ratio,
       p.step.head_dim);
  }
  void indexer_select(const IndexerSelectParams* p, int n) override {
    op(cuda::indexer_select(p, n, cur_), "indexer_select", "%d queries, first over %lld rows, top %d", n,
       ll(p[0].n_rows), p[0].top_k);
  }
  void sink_attention(const SinkAttentionParams* p, int n) override {
    op(cuda::sink_attention(p, n, cur_), "sink_attention", "%d queries, %d heads of %d, first %d raw + %lld comp",
       n, p[0].n_head, p[0].head_dim, p[0].n_raw, ll(p[0].n_comp));
  }
  void swiglu(const SwigluParams& p) override { op(cuda::swiglu(p, cur_), "swiglu", "n %lld", ll(p.n)); }
  void route(const RouteParams& p) override {
    op(cuda::route(p, cur_), "route", "%d rows, %d experts, %d used", p.n_rows, p.n_expert, p.n_used);
  }
  void moe(const MoeParams& p) override {
    op(cuda::moe(p, cur_), "moe", "%d rows, %s [%lld -> %lld] x%lld, %d used", p.n_rows,
       gguf::type_name(p.gate.type), ll(p.gate.n_in), ll(p.gate.n_out), ll(p.gate.n_expert), p.n_used);
  }
  void hc_collapse(const HcCollapseParams& p) override {
    op(cuda::hc_collapse(p, cur_, tickets(), hc_kernel_), "hc_collapse", "n_hc %d, n_embd %lld, %d rows", p.n_hc, ll(p.n_embd),
       p.n_rows);
  }
  void embed(const EmbedParams& p) override {
    op(cuda::embed(p, cur_), "embed", "%d rows of %lld", p.n_rows, ll(p.n_embd));
  }
  void add(const AddParams& p) override { op(cuda::add(p, cur_), "add", "n %lld", ll(p.n)); }
  void hc_mean(const HcMeanParams& p) override {
    op(cuda::hc_mean(p, cur_), "hc_mean", "n_hc %d, n_embd %lld, %d rows", p.n_hc, ll(p.n_embd), p.n_rows);
  }
  void argmax(const ArgmaxParams& p) override {
    op(cuda::argmax(p, cur_), "argmax", "%d rows of %lld", p.n_rows, ll(p.n));
  }
  void top_k(const TopKParams& p) override {
    op(cuda::top_k(p, cur_), "top_k", "%d rows of %lld, k %d", p.n_rows, ll(p.n), p.k);
  }
  void get_rows(const GetRowsParams& p) override {
    op(cuda::get_rows(p, cur_), "get_rows", "%d rows of %s [%lld]", p.n_rows, gguf::type_name(p.w.type),
       ll(p.w.n_in));
  }

 protected:
  void* allocate(size_t bytes) override {
    on_main("alloc inside a lane fork (backend.h: only ops go between fork and join)");
    const bool resume = pause_capture();
    void* p = nullptr;
    check(cuda::device_alloc(&p, (bytes + 63) / 64 * 64), "alloc");
    check(cuda::memset_async(p, 0, bytes, stream_), "alloc");
    if (resume) resume_capture();
    return p;
  }
  // cudaFree waits for the device, so no op still in flight can touch the memory.
  void release(void* p, size_t) override {
    on_main("release inside a lane fork (backend.h: only ops go between fork and join)");
    const bool resume = pause_capture();
    cuda::device_free(p);
    if (resume) resume_capture();
  }

 private:
  static long long ll(int64_t v) { return static_cast<long long>(v); }
  // Host round trips and copies run on the main stream, outside a fork (backend.h).
  void on_main(const char* what) const { DS4_CHECK_MSG(!forked_, what); }
  int lane() const { return cur_ == stream_ ? 0 : 1; }
  const cuda::OpScratch& scratch() const { return scratch_[lane()]; }
  uint32_t* tickets() const { return hc_tickets_[lane()]; }
  void check(const Status& s, const char* op) {
    if (!s.ok()) fatal(s, op);
  }
  // A synchronization point: a device fault found here was caused by this or an earlier op.
  void check_sync(const char* where) {
    const Status s = cuda::stream_sync(stream_);
    if (s.ok()) return;
    fatal(resource_error("%s (the faulting kernel ran at or before this point; --cuda-sync / "
                         "DS4_CUDA_SYNC=1 makes the op that caused it name itself)",
                         s.message().c_str()),
          where);
  }
  // An op's launch status; with sync_each_op also its execution. On failure: the op and its
  // shapes (formatted only then).
  void op(const Status& launched, const char* name, const char* shape_fmt, ...)
      __attribute__((format(printf, 4, 5))) {
    Status s = launched;
    if (s.ok() && sync_each_op_) s = cuda::stream_sync(cur_);
    if (s.ok()) {
      count_op();
      return;
    }
    char shapes[192];
    va_list ap;
    va_start(ap, shape_fmt);
    std::vsnprintf(shapes, sizeof shapes, shape_fmt, ap);
    va_end(ap);
    char where[320];
    std::snprintf(where, sizeof where, "%s (%s)%s", name, shapes,
                  capturing_ ? " while capturing a CUDA graph (--cuda-graphs 0 runs the ops one by one)" : "");
    fatal(s, where);
  }

  // ---- CUDA graphs (see the top of the file) ----
  // One executable graph per (segment index, node count); kSlots per segment index (the node
  // counts of a segment differ at compressor-emit positions and once the indexer runs).
  struct ExecSlot {
    size_t nodes = 0;
    cuda::GraphExec exec = nullptr;
    uint64_t used = 0;  // the launch counter when last launched (least recently used goes)
  };
  static constexpr int kSlots = 4;

  // Starts capturing the next segment of the forward.
  void resume_capture() {
    const Status s = cuda::capture_begin(stream_);
    if (!s.ok()) fatal(s, "begin_forward (--cuda-graphs 0 runs the ops one by one)");
    capturing_ = true;
    segment_ops_ = 0;
  }
  // Ends the segment being captured (if any) and launches it; true when one was being captured
  // (the caller resumes after its host round trip).
  bool pause_capture() {
    if (!capturing_) return false;
    capturing_ = false;
    cuda::Graph g = nullptr;
    size_t nodes = 0;
    Status s = cuda::capture_end(stream_, &g, &nodes);
    if (!s.ok()) fatal(s, "end of a captured forward (--cuda-graphs 0 runs the ops one by one)");
    if (nodes > 0) {
      if (execs_.size() <= static_cast<size_t>(segment_)) execs_.resize(segment_ + 1);  // once per new index
      ExecSlot* slot = nullptr;
      for (ExecSlot& e : execs_[segment_]) {
        if (e.exec != nullptr && e.nodes == nodes) slot = &e;
      }
      if (slot != nullptr && cuda::graph_exec_update(slot->exec, g)) {
        ++graph_updates_;
      } else {
        if (slot == nullptr) {
          slot = &execs_[segment_][0];
          for (ExecSlot& e : execs_[segment_]) {
            if (e.exec == nullptr || e.used < slot->used) slot = &e;
            if (e.exec == nullptr) break;
          }
        }
        cuda::graph_exec_destroy(slot->exec);
        slot->exec = nullptr;
        s = cuda::graph_instantiate(&slot->exec, g);
        if (!s.ok()) {
          cuda::graph_destroy(g);
          fatal(s, "a captured forward (--cuda-graphs 0 runs the ops one by one)");
        }
        slot->nodes = nodes;
        ++graph_instantiations_;
      }
      slot->used = ++graph_launches_;
      s = cuda::graph_launch(slot->exec, stream_);
      if (!s.ok()) {
        cuda::graph_destroy(g);
        fatal(s, "a captured forward (--cuda-graphs 0 runs the ops one by one)");
      }
    }
    cuda::graph_destroy(g);
    ++segment_;
    return true;
  }
  // After every op: with segments (graphs_ >= 2), every graphs_ ops end and launch one.
  void count_op() {
    if (!capturing_ || graphs_ < 2) return;
    if (++segment_ops_ < graphs_) return;
    pause_capture();
    resume_capture();
  }
  // The matmul activation scratch grows to the largest (n_in, rows) seen; the first call of
  // each larger shape waits for the device (cudaFree), later calls never allocate.
  // Inside a captured forward the segment so far is launched first (the old scratch may be
  // in its nodes; cudaFree waits for them).
  void grow_scratch(size_t bytes) {
    cuda::OpScratch& sc = scratch_[lane()];
    if (bytes <= sc.bytes) return;
    const bool resume = pause_capture();
    const size_t want = std::max(bytes, size_t{1} << 20);
    cuda::device_free(sc.data);
    sc = cuda::OpScratch{};
    void* p = nullptr;
    check(cuda::device_alloc(&p, want), "matmul scratch");
    sc = cuda::OpScratch{p, want};
    if (resume) resume_capture();
  }

  cuda::DeviceInfo info_;
  cuda::Stream stream_ = nullptr;  // the main lane
  cuda::Stream cur_ = nullptr;     // the lane the next op runs on: stream_ or side_.stream
  bool sync_each_op_ = false;
  // Per lane (main, side): [kHcTicketRows] zero between ops; nullptr: unfused HC ops.
  uint32_t* hc_tickets_[2] = {nullptr, nullptr};
  cuda::HcKernel hc_kernel_ = cuda::HcKernel::kFused;  // with tickets: the one-launch kernel
  cuda::OpScratch scratch_[2];  // per lane
  SideLane side_;               // a null stream: no lanes (graphs, profiler)
  bool forked_ = false;         // between fork() and join()
  int graphs_ = 0;            // --cuda-graphs: 0 off, 1 a forward per graph, N a graph per N ops
  bool batch_steps_ = false;  // --cuda-batch-steps: compressor steps batched (rows in parallel)
  bool warmed_up_ = false;    // the first one-row forward ran uncaptured
  bool in_forward_ = false;   // inside a captured bracket
  bool capturing_ = false;    // the stream is being captured now
  int segment_ = 0;           // index of the segment being captured within the forward
  int segment_ops_ = 0;       // ops captured in it
  std::vector<std::array<ExecSlot, kSlots>> execs_;  // [segment index] executable graphs
  uint64_t graph_forwards_ = 0, graph_launches_ = 0, graph_instantiations_ = 0, graph_updates_ = 0;
};

}  // namespace

Status apply_cuda_switches(const CudaBackendConfig& c) {
  const std::string& q8_r1 = c.q8_r1;
  cuda::Q8_0R1Kernel r1 = cuda::Q8_0R1Kernel::kAuto;
  if (q8_r1 == "new") r1 = cuda::Q8_0R1Kernel::kStaged;
  else if (q8_r1 == "new-prequant") r1 = cuda::Q8_0R1Kernel::kStagedPrequant;
  else if (q8_r1 == "wide") r1 = cuda::Q8_0R1Kernel::kWide;
  else if (q8_r1 == "wide-fused") r1 = cuda::Q8_0R1Kernel::kWideFused;
  else if (q8_r1 == "old") r1 = cuda::Q8_0R1Kernel::kWarp;
  else if (q8_r1 != "auto")
    return invalid_argument(
        "cuda: the Q8_0 r = 1 kernel must be auto, new, new-prequant, wide, wide-fused or old, got '%s'",
        q8_r1.c_str());
  if (c.moe != "old" && c.moe != "new" && c.moe != "tc")
    return invalid_argument("cuda: --cuda-moe must be old, new or tc, got '%s'", c.moe.c_str());
  if (c.dense_rows != "tiles" && c.dense_rows != "wide")
    return invalid_argument("cuda: --cuda-dense-rows must be tiles or wide, got '%s'", c.dense_rows.c_str());
  if (c.attn != "split" && c.attn != "fused")
    return invalid_argument("cuda: --cuda-attn must be split or fused, got '%s'", c.attn.c_str());
  cuda::set_q8_0_r1_kernel(r1);
  cuda::set_moe_r1_kernel(c.moe == "old" ? cuda::MoeR1Kernel::kOld : cuda::MoeR1Kernel::kNew);
  cuda::set_moe_rows_kernel(c.moe == "old"  ? cuda::MoeRowsKernel::kPairs
                            : c.moe == "tc" ? cuda::MoeRowsKernel::kTensor
                                            : cuda::MoeRowsKernel::kGrouped);
  cuda::set_pdl(c.pdl);
  cuda::set_pdl_all(c.pdl_all);
  cuda::set_wide_persistent(c.wide_persistent);
  cuda::set_dense_rows_kernel(c.dense_rows == "wide" ? cuda::DenseRowsKernel::kWide : cuda::DenseRowsKernel::kTiles8);
  cuda::set_sink_kernel(c.attn == "fused" ? cuda::SinkKernel::kFused : cuda::SinkKernel::kSplit);
  cuda::set_fused_norms(c.fuse_norms);
  cuda::set_hc_products(c.hc_products);
  cuda::set_fold_input_norm(c.fold_input_norm);
  cuda::set_fold_hc_post(c.fold_hc_post);
  g_lanes.store(c.lanes, std::memory_order_relaxed);
  return Status();
}

Expected<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendConfig& c) {
  const int device = c.device, hc_fused = c.hc_fused;
  const bool sync_each_op = c.sync_each_op, profile = c.profile;
  int graphs = c.graphs;
  if (hc_fused < 0 || hc_fused > 2)
    return invalid_argument("cuda: the HC kernel choice must be 0, 1 or 2, got %d", hc_fused);
  if (graphs < 0 || graphs > kMaxCudaGraphSegmentOps)
    return invalid_argument("cuda: --cuda-graphs must be 0 (off), 1 (a graph per forward) or N in 2..%d (a graph "
                            "per N ops), got %d", kMaxCudaGraphSegmentOps, graphs);
  if (graphs != 0 && (sync_each_op || profile)) {
    // Both need every op issued on its own: --cuda-sync waits after each, the profiler times each.
    DS4_LOG_WARN("cuda: --cuda-graphs is off under %s (every op runs on its own)",
                 sync_each_op ? "--cuda-sync" : "--cuda-profile");
    graphs = 0;
  }
  // The side lane exists unless every op must run on one stream (a captured segment must end
  // with the lanes joined; the profiler times ops one by one); --cuda-lanes (the default) turns
  // it on. An info line, not a warning: the lanes are on by default, so the user asked only for
  // graphs or the profile.
  const bool side_lane = graphs == 0 && !profile;
  if (c.lanes && !side_lane) {
    DS4_LOG_INFO("cuda: the two lanes (--cuda-lanes) are off under %s: one stream",
                 profile ? "--cuda-profile" : "--cuda-graphs");
  }
  cuda::DeviceInfo info;
  DS4_RETURN_IF_ERROR(cuda::probe_device(device, &info));
  DS4_RETURN_IF_ERROR(apply_cuda_switches(c));
  cuda::Stream stream = nullptr;
  DS4_RETURN_IF_ERROR(cuda::stream_create(&stream));
  uint32_t* tickets = nullptr;  // the fused HC kernels' counters
  SideLane side;
  Status s = hc_fused != 0 ? alloc_hc_tickets(stream, &tickets) : Status();
  if (s.ok() && side_lane) {
    s = cuda::stream_create(&side.stream);
    if (s.ok()) s = cuda::event_create(&side.fork);
    if (s.ok()) s = cuda::event_create(&side.join);
    if (s.ok() && hc_fused != 0) s = alloc_hc_tickets(stream, &side.tickets);
  }
  if (!s.ok()) {
    cuda::device_free(tickets);
    cuda::device_free(side.tickets);
    side.release();
    cuda::stream_destroy(stream);
    return s;
  }
  std::unique_ptr<Backend> be(new CudaBackend(info, stream, sync_each_op, tickets,
                                              hc_fused == 2 ? cuda::HcKernel::kStaged : cuda::HcKernel::kFused,
                                              graphs, c.batch_steps, side));
  if (!profile) return be;
  // 2 events per op, 32K ops between read-backs (a Flash decode token issues ~1-2K ops).
  auto clock = make_cuda_event_clock(stream, 65536);
  if (!clock.ok()) return clock.status();
  char title[160];
  std::snprintf(title, sizeof title, "cuda:%d %s", device, info.name.c_str());
  return make_profiling_backend(std::move(be), std::move(clock).value(), title);
}

}  // namespace ds4::backend
