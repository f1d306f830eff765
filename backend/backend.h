// backend/backend.h — the op-level compute interface the forward graph (session/) runs on.
//
// Role: every numeric step of the DS4 forward pass (ds4-architecture.md §3-4) is one op here,
// described by a small param struct, plus the memory the ops run on: Buffers allocated by the
// backend (host memory on the CPU, device memory on a GPU backend) and weights bound once per
// model (WeightSet). Every pointer in a param struct is in the backend's address space: inside
// a Buffer or a bound weight. The CPU backend (backend/cpu) is the correctness oracle.
// Invariants:
//  * Batch invariance: an op applied to r rows gives, for each row, the bits the same op gives
//    for that row alone (design.md §4). Threads split output rows, never a reduction.
//  * Weight views point into the bound weights; ops never copy or modify weights.
//  * Ops allocate nothing: callers pass scratch sized at session creation.
//  * The host reads or writes a Buffer only through upload / download / copy / fill, or, when
//    host_addressable() (the CPU backend), directly through Buffer::host<T>().
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/rope.h"
#include "core/status.h"
#include "gguf/types.h"

namespace ds4::backend {

using gguf::GgmlType;

class Backend;
class WeightSet;
struct WeightRange;

// An owning handle to `bytes` bytes of backend memory (RAII; move-only). data() is a pointer in
// the backend's address space, to pass in op params; the memory goes back to its backend when
// the handle dies, so a Buffer must not outlive the Backend that allocated it. Allocation is
// 64-byte aligned and zero-filled.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  bool empty() const { return bytes_ == 0; }
  // Typed backend-address pointer to the first element (for op params).
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  template <typename T>
  size_t count() const {
    return bytes_ / sizeof(T);
  }
  // Host view of the memory: only for a host-addressable backend (Backend::host_addressable(),
  // the CPU backend); a device backend's buffers are read through Backend::download. Checked.
  template <typename T>
  std::span<T> host() const {
    check_host();
    return std::span<T>(static_cast<T*>(data_), bytes_ / sizeof(T));
  }
  void reset();

 private:
  friend class Backend;
  void check_host() const;
  Backend* owner_ = nullptr;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

// One region of Backend::copy_many: bytes from src to dst, both backend addresses.
struct CopyRegion {
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
};

// A 2-D weight: n_out rows of n_in elements of `type`, row o at data + o * row_bytes.
struct Matrix {
  const uint8_t* data = nullptr;
  GgmlType type = GgmlType::kF32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  size_t row_bytes = 0;
  bool valid() const { return data != nullptr; }
  // Rows [first, first + count) as their own matrix (e.g. one output group of attn_output_a).
  Matrix rows(int64_t first, int64_t count) const {
    Matrix m = *this;
    m.data = data + static_cast<size_t>(first) * row_bytes;
    m.n_out = count;
    return m;
  }
};

// A 3-D routed-expert weight: n_expert matrices of n_out rows × n_in, stored back to back.
struct ExpertMatrix {
  const uint8_t* data = nullptr;
  GgmlType type = GgmlType::kF32;
  int64_t n_in = 0;
  int64_t n_out = 0;
  int64_t n_expert = 0;
  size_t row_bytes = 0;
  size_t expert_bytes() const { return row_bytes * static_cast<size_t>(n_out); }
  Matrix expert(int64_t e) const {
    return Matrix{data + static_cast<size_t>(e) * expert_bytes(), type, n_in, n_out, row_bytes};
  }
};

// y[i][o] = dot(W row o, x[i]) for i < n_rows. Q8_0 weights: each x row is first quantized to
// Q8_0 activation blocks (lrintf, f32 scale, §3.3); F16/F32 weights: canonical dense dot.
// Under ActivationNumerics::kF32 a Q8_0 row is dequantized and dotted with the f32 x row
// (quant::dot_f32 order) instead.
struct MatmulParams {
  Matrix w;
  const float* x = nullptr;  // [n_rows, x_stride] f32, first w.n_in used
  int64_t x_stride = 0;
  float* y = nullptr;        // [n_rows, y_stride] f32, first w.n_out written
  int64_t y_stride = 0;
  int n_rows = 1;
  // The input's RMS norm folded in (matmul only, not matmul_grouped): with normed set the op
  // first writes normed = rms_norm(x) (· norm_weight), RmsNormParams' bits, then multiplies
  // normed: the bits of an rms_norm op followed by the matmul, in one op (issue #30's "norm
  // into the next matvec"; on CUDA one launch for a decode row under --cuda-fold-input-norm).
  float* normed = nullptr;              // [n_rows, x_stride] f32 (first w.n_in written), or nullptr
  const float* norm_weight = nullptr;   // [w.n_in] or nullptr (unweighted)
  float norm_eps = 1e-6f;
};

// out[i] = rms_norm(x[i]) (· weight when given), double sum of squares (§3.2). In place ok.
struct RmsNormParams {
  const float* x = nullptr;       // [n_rows, n] (rows n_stride apart)
  const float* weight = nullptr;  // [n] or nullptr (unweighted)
  float* out = nullptr;           // [n_rows, n]
  int64_t n = 0;
  int64_t stride = 0;             // 0 = n
  int n_rows = 1;
  float eps = 1e-6f;
};

// The rms_norm op that a matmul's folded norm stands for (p.normed set).
inline RmsNormParams input_norm(const MatmulParams& p) {
  RmsNormParams r;
  r.x = p.x;
  r.weight = p.norm_weight;
  r.out = p.normed;
  r.n = p.w.n_in;
  r.stride = p.x_stride;
  r.n_rows = p.n_rows;
  r.eps = p.norm_eps;
  return r;
}

// Hyper-connection "post": out[c][d] = f[d]·post[c] + Σ_r comb[r][c]·x[r][d].
struct HcPostParams {
  const float* f = nullptr;      // [n_rows, n_embd] sublayer output
  const float* x = nullptr;      // [n_rows, n_hc*n_embd] residual streams
  const float* post = nullptr;   // [n_rows, n_hc]
  const float* comb = nullptr;   // [n_rows, n_hc*n_hc]
  float* out = nullptr;          // [n_rows, n_hc*n_embd] (must not alias x)
  int n_hc = 4;
  int64_t n_embd = 0;
  int n_rows = 1;
};

// Hyper-connection "pre" (§4.2): flatten-norm, F16 projection, Sinkhorn, weighted stream sum.
struct HcPreParams {
  const float* x = nullptr;      // [n_rows, n_hc * n_embd] stream-major HC state
  Matrix fn;                     // F16 [n_hc*n_embd -> mix_dim]
  const float* scale = nullptr;  // [3]
  const float* base = nullptr;   // [mix_dim]
  int n_hc = 4;
  int64_t n_embd = 0;
  int sinkhorn_iters = 20;
  float norm_eps = 1e-6f;        // rms eps of the flatten norm
  float hc_eps = 1e-6f;          // Sinkhorn / pre epsilon
  int n_rows = 1;
  float* flat = nullptr;         // scratch [n_rows, n_hc*n_embd]
  float* mix = nullptr;          // scratch [n_rows, mix_dim]
  float* y = nullptr;            // out [n_rows, n_embd]
  float* post = nullptr;         // out [n_rows, n_hc]
  float* comb = nullptr;         // out [n_rows, n_hc*n_hc]  comb[r*n_hc + c]: input r -> output c
  // With normed: also normed = rms_norm(y) · norm_weight (eps norm_out_eps), the sublayer's
  // input norm folded in so that a backend may run it in the same kernel (rms_norm's bits).
  const float* norm_weight = nullptr;  // [n_embd], or nullptr (unweighted)
  float* normed = nullptr;             // out [n_rows, n_embd], or nullptr (no norm)
  float norm_out_eps = 1e-6f;
  // With post_first.out != nullptr: the previous sublayer's HC post, run first; it makes x
  // (post_first.out == x, the same n_hc / n_embd / n_rows; its post / comb may be this op's
  // post / comb, which it reads before they are overwritten), so a backend may fold it into
  // this op's kernel (the two ops' bits).
  HcPostParams post_first;
};

// Row-local finish of the attention inputs of n_rows rows at positions pos0 .. pos0 + n_rows - 1
// (§4.3-§4.5): everything of a row that reads no state, so rows are independent and a backend
// may run them in any order or all at once. Per row, in this order:
//  * q (when given): with q_head_norm, each head's unweighted RMS norm (rms_norm of head_dim,
//    norm_eps; the §4.3 per-head norm), then RoPE (§3.8) on the tail dims [head_dim - n_rot,
//    head_dim) of each of n_head heads at the row's position;
//  * kv: with kv_norm, its RMS norm weighted by kv_norm (norm_eps; §4.3's kv_a_norm), then RoPE
//    of its tail, then the FP8 round trip of its non-RoPE dims; when raw is given, its
//    f16 bits (quant::f32_to_f16) go to ring row (pos % raw_cap); kv itself stays f32;
//  * indexer query (when iq is given, rows >= idx_first only): RoPE of each of n_idx_head heads,
//    the Hadamard + FP4 QAT of each head, then iw[k] = iw[k] * iw_scale.
struct AttentionInputsParams {
  int n_rows = 1;
  int64_t pos0 = 0;
  RopeParams rope;
  int n_rot = 0;
  int head_dim = 0;
  float* q = nullptr;        // [n_rows, q_stride] n_head heads of head_dim, in place; or nullptr
  int64_t q_stride = 0;
  int n_head = 0;
  float* kv = nullptr;       // [n_rows, head_dim] in place
  uint16_t* raw = nullptr;   // [raw_cap, head_dim] f16 raw KV ring, or nullptr
  int64_t raw_cap = 0;
  float* iq = nullptr;       // [n_rows, n_idx_head * idx_dim] in place, or nullptr
  float* iw = nullptr;       // [n_rows, n_idx_head] indexer head weights, in place
  int n_idx_head = 0;
  int idx_dim = 0;
  int idx_first = 0;
  float iw_scale = 1.0f;
  // The projections' norms, folded in so that a backend may run them in the same kernel (the
  // bits are rms_norm's either way).
  bool q_head_norm = false;          // each q head: rms_norm(head, no weight)
  const float* kv_norm = nullptr;    // [head_dim] kv's norm weight, or nullptr (no norm)
  float norm_eps = 1e-6f;
};

// One compressor step (§4.4) on precomputed projections of the current token. The token closes
// a window exactly when compressor_emits(pos, ratio); then the op writes the pooled, normed,
// roped (at pos + 1 - ratio), quantization-simulated row to the next row of the caller's
// compressed cache: an attention row to `out_fp8` as its FP8 store (quant::fp8_row_bytes(
// head_dim, n_rot) bytes), an indexer row to `out_fp4` as its FP4 store (quant::fp4_row_bytes(
// head_dim) bytes); either decodes to exactly the values of the row's f16 form. The row is
// built in f32 in `pooled`. The caller knows from pos and ratio alone whether a row was
// appended, without reading anything back.
struct CompressorStepParams {
  float* state_kv = nullptr;     // [coff*ratio, width] f32
  float* state_score = nullptr;  // [coff*ratio, width] f32
  const float* kv_cur = nullptr; // [width] Wkv · h
  const float* sc_cur = nullptr; // [width] Wgate · h (APE not yet added)
  const uint16_t* ape = nullptr; // F16 [ratio, width] (row = phase)
  const float* norm = nullptr;   // [head_dim]
  int ratio = 4;
  int head_dim = 0;              // D; width = coff * D
  int n_rot = 0;
  int64_t pos = 0;
  float eps = 1e-6f;
  RopeParams rope;
  bool indexer = false;          // true: Hadamard+FP4 row; false: FP8 on the non-RoPE dims
  float* pooled = nullptr;       // scratch [head_dim] f32 (pooled, then the row before its store)
  uint8_t* out_fp8 = nullptr;    // [fp8_row_bytes(head_dim, n_rot)] FP8 store (indexer false), written only when the step emits
  uint8_t* out_fp4 = nullptr;    // [fp4_row_bytes(head_dim)] FP4 store (indexer true), same
};

// Whether the compressor step at pos closes a window (and so appends a row).
constexpr bool compressor_emits(int64_t pos, int ratio) { return (pos + 1) % ratio == 0; }

// n consecutive steps of one compressor chain (a prefill group's rows): the bits of
// compressor_step at positions step.pos .. step.pos + n - 1 in order. Row i's projections are
// step.kv_cur / step.sc_cur + i * width (width = (ratio == 4 ? 2 : 1) * head_dim); the k-th row
// the steps emit goes to step.out_fp8 (out_fp4) + k row stores; the state after is the n steps'
// state, rows they did not rewrite included. Every emitted row depends only on the projections
// and the state before the call, so a device backend may pool the windows in parallel.
struct CompressorRowsParams {
  CompressorStepParams step;  // the chain, row 0's projections and position, the first output row
  int n = 0;
};

// Indexer scores + top-k (§4.5) for one query; only called when n_rows > top_k. The op takes
// a batch of independent queries (the rows of a verify batch or a prefill chunk, each over its
// own prefix of the indexer rows, with its own scratch and output).
struct IndexerSelectParams {
  const float* q = nullptr;       // [n_head, head_dim] roped + QAT'd indexer query
  const float* w = nullptr;       // [n_head] head weights (already scaled)
  const uint8_t* rows = nullptr;  // [n_rows, fp4_row_bytes(head_dim)] FP4 stores of the indexer rows
  int64_t n_rows = 0;
  int n_head = 0;
  int head_dim = 0;
  int top_k = 0;
  float* scores = nullptr;        // scratch [n_rows]
  int32_t* order = nullptr;       // scratch [n_rows]
  uint8_t* allowed = nullptr;     // out [n_rows] 1 = selected (exactly top_k ones)
};

// Sink attention for one query token over raw rows then compressed rows (§4.3), its output heads
// de-rotated at the query's position. The raw rows are a ring: positions raw_first ..
// raw_first + n_raw - 1, oldest first, position p at raw + (p % raw_cap) * head_dim. The op
// takes a batch of independent queries, each with its own keys, scratch and output.
// Keys are f32 (raw, comp: the drafter's ring and block rows) or the target's KV stores
// (raw_f16: f16 bits; comp_fp8: FP8 stores, quant::fp8_row_bytes(head_dim, n_rot) bytes per
// row, laid out with this query's head_dim and n_rot), never both kinds in one query; stored
// keys are decoded exactly, so a query's result is the bits it gets from the same keys as f32.
struct SinkAttentionParams {
  const float* q = nullptr;             // [n_head, head_dim]
  const float* raw = nullptr;           // [raw_cap, head_dim] f32 raw row ring, or
  const uint16_t* raw_f16 = nullptr;    // [raw_cap, head_dim] the same as f16 bits
  int64_t raw_cap = 0;
  int64_t raw_first = 0;                // position of the first (oldest) key
  int n_raw = 0;
  const float* comp = nullptr;          // [n_comp, head_dim] f32, or
  const uint8_t* comp_fp8 = nullptr;    // [n_comp, fp8_row_bytes(head_dim, n_rot)] FP8 stores
  int64_t n_comp = 0;
  const uint8_t* comp_allowed = nullptr;  // [n_comp] or nullptr (all allowed)
  const float* sinks = nullptr;         // [n_head]
  int n_head = 0;
  int head_dim = 0;
  float* scores = nullptr;              // scratch [n_head, n_raw + n_comp]
  float* out = nullptr;                 // [n_head, head_dim]
  // When n_rot > 0, each output head is de-rotated (inverse RoPE of its tail, §4.5) at pos.
  int n_rot = 0;
  int64_t pos = 0;
  RopeParams rope;
  bool stored_keys() const { return raw_f16 != nullptr || comp_fp8 != nullptr; }
  // Whether the key pointers are one kind (f32 or stored, not both).
  bool keys_one_kind() const { return !stored_keys() || (raw == nullptr && comp == nullptr); }
  const float* raw_row(int r) const { return raw + ((raw_first + r) % raw_cap) * head_dim; }
};

// Router (§4.6) of n_rows tokens: p_e = sqrtf(softplus(logit_e)); hash rows (tid2eid given)
// take tid2eid[token][0..n_used); other rows take the top n_used of p_e (+ bias_e) by
// insertion (ties keep the lower expert id first). w_j = p_{sel_j}, renormalized over the
// selection (sum clamped to >= 6.103515625e-5) when `renorm`, then × scale.
struct RouteParams {
  const float* logits = nullptr;    // [n_rows, n_expert] router logits
  const float* bias = nullptr;      // [n_expert] exp_probs_b or nullptr
  const int32_t* tid2eid = nullptr; // [n_vocab, n_used] hash table or nullptr
  const int32_t* tokens = nullptr;  // [n_rows] token ids (hash rows)
  int n_rows = 1;
  int n_expert = 0;
  int n_used = 0;
  bool renorm = true;
  float scale = 1.0f;
  float* probs = nullptr;           // scratch [n_rows, n_expert]
  int32_t* sel = nullptr;           // out [n_rows, n_used]
  float* wt = nullptr;              // out [n_rows, n_used]
};

// Output-head HC collapse (§4.7): m = fn · rms_norm(X) (unweighted), w_h = sigmoid_stable(
// m_h·scale + base_h) + hc_eps, y = Σ_h w_h·X[h] (no Sinkhorn, no post/comb).
struct HcCollapseParams {
  const float* x = nullptr;      // [n_rows, n_hc * n_embd]
  Matrix fn;                     // F16 [n_hc*n_embd -> n_hc]
  float scale = 1.0f;
  const float* base = nullptr;   // [n_hc]
  int n_hc = 4;
  int64_t n_embd = 0;
  float norm_eps = 1e-6f;
  float hc_eps = 1e-6f;
  int n_rows = 1;
  float* flat = nullptr;         // scratch [n_rows, n_hc*n_embd]
  float* mix = nullptr;          // scratch [n_rows, n_hc]
  float* y = nullptr;            // out [n_rows, n_embd]
};

// Shared-expert SwiGLU with clamp (§4.6): out[k] = silu(min(g[k], c)) · clamp(u[k], -c, c).
struct SwigluParams {
  const float* gate = nullptr;  // [n]
  const float* up = nullptr;    // [n]
  float* out = nullptr;         // [n] (may alias gate)
  int64_t n = 0;
  float clamp = 10.0f;
};

// Routed experts (§4.6) of n_rows tokens: row i uses experts sel[i][0..n_used) with weights
// wt[i][..]; x quantized to Q8_K, gate/up dots, clamp + SiLU, router weight before down,
// mid re-quantized to Q8_K, down outputs summed in slot order into out (overwritten).
// Under ActivationNumerics::kF32 nothing is quantized: every dot is quant::dot_f32 of the
// dequantized weight row and the f32 x / mid row.
// Rows may share expert weight reads; each row's bits equal its single-row result.
struct MoeParams {
  const float* x = nullptr;        // [n_rows, n_embd] ffn-normed input
  const int32_t* sel = nullptr;    // [n_rows, n_used]
  const float* wt = nullptr;       // [n_rows, n_used]
  int n_used = 0;
  int n_rows = 1;
  ExpertMatrix gate, up, down;     // [n_embd -> n_ff] ×E, [n_ff -> n_embd] ×E
  float clamp = 10.0f;
  const float* add = nullptr;      // [n_rows, n_embd] or null: out = routed sum + add (the shared
                                   // expert; the bits of an add op after the moe)
  float* out = nullptr;            // [n_rows, n_embd] (must not alias add)
  void* scratch = nullptr;         // moe_scratch_bytes(n_embd, n_ff, n_used, n_rows)
};

// Token embedding (§4.1): every one of the n_hc streams of row i starts as the f32 value of
// table row tokens[i].
struct EmbedParams {
  const uint8_t* table = nullptr;   // F16 [n_vocab, n_embd], rows row_bytes apart
  size_t row_bytes = 0;
  const int32_t* tokens = nullptr;  // [n_rows]
  int n_rows = 1;
  int n_hc = 4;
  int64_t n_embd = 0;
  float* out = nullptr;             // [n_rows, n_hc * n_embd]
};

// out[k] = a[k] + b[k] for k < n (out may alias a or b).
struct AddParams {
  const float* a = nullptr;
  const float* b = nullptr;
  float* out = nullptr;
  int64_t n = 0;
};

// Mean of the n_hc streams of each row: out[i][d] = (x[i][0][d] + x[i][1][d] + ...) · (1/n_hc),
// summed in stream order.
struct HcMeanParams {
  const float* x = nullptr;  // [n_rows, n_hc * n_embd]
  int n_hc = 4;
  int64_t n_embd = 0;
  int n_rows = 1;
  float* out = nullptr;      // [n_rows, out_stride], first n_embd of each row written
  int64_t out_stride = 0;
};

// Greedy argmax of each row (core/reduce.h top_two: ties -> the smallest id, NaN never wins,
// id `excluded` never chosen).
// With `margin` given, also top_two's margin of each row (top1 - top2 over the same values,
// ties counted, +0 for a tie): DSpark's verify rows read id + margin, not the row.
struct ArgmaxParams {
  const float* x = nullptr;  // [n_rows, stride], first n of each row read
  int64_t n = 0;
  int64_t stride = 0;
  int n_rows = 1;
  int32_t* out = nullptr;    // [n_rows]
  int32_t excluded = -1;     // an id never chosen (a banned token), -1: none
  float* margin = nullptr;   // [n_rows] or nullptr
};

// The sampling read-out: for each row, the k largest logits as (id, value) pairs in one fixed
// order — value descending, equal values (+0 == -0) to the smaller id — among the values that
// are not NaN and not `excluded`. A row with fewer than k such values pads its tail with
// id -1 / value -inf. Values are the row's own floats (bits unchanged). The sampler draws from
// these alone when it can prove the rest of the row cannot matter (sample/sampler.h), so a
// device backend reads back 8·k bytes per row instead of the row.
inline constexpr int kTopKMax = 256;
struct TopKParams {
  const float* x = nullptr;   // [n_rows, stride], first n of each row read
  int64_t n = 0;
  int64_t stride = 0;
  int n_rows = 1;
  int k = 1;                  // 1..kTopKMax
  int32_t excluded = -1;      // an id never returned, -1: none
  int32_t* ids = nullptr;     // [n_rows, k]
  float* values = nullptr;    // [n_rows, k]
};

// Row gather of a weight matrix: out row i = the f32 values of w row ids[i] (quant::dequantize_row
// of its type: F32 F16 BF16 Q8_0 Q8_K Q2_K Q4_K IQ2_XXS). The ids are read in backend memory,
// so a chain of ops can pick a row from an earlier op's result (e.g. an argmax) without a
// read-back. The DSpark drafter's Markov embedding W1[prev] (speculative/drafter.cpp).
struct GetRowsParams {
  Matrix w;                         // [n_in -> n_out] rows to gather from
  const int32_t* ids = nullptr;     // [n_rows] row ids, each in [0, w.n_out)
  int n_rows = 1;
  float* out = nullptr;             // [n_rows, out_stride], first w.n_in of each row written
  int64_t out_stride = 0;
};

// A piece of work for Backend::run_pair(): fn(ctx). No allocation, no ownership.
struct Task {
  void (*fn)(void* ctx) = nullptr;
  void* ctx = nullptr;
  void operator()() const { fn(ctx); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int n_threads() const = 0;
  // One line for logs: the backend and what it runs on (kernel path and threads, or the device,
  // its memory and how much is free).
  virtual std::string description() const { return name(); }
  // OK when `bytes` more bytes of backend memory fit now; otherwise an error saying how much
  // `what` needs and how much is free. Host memory is not checked (the OS overcommits).
  virtual Status check_memory(uint64_t bytes, const char* what) const {
    (void)bytes;
    (void)what;
    return Status();
  }
  // Rows per prefill forward when the user names none, or 0 for the session's default
  // (session::kDefaultChunkRows): the CPU's prefill measured the same at 32 and 256 rows, a GPU
  // reads each weight once per chunk and runs its batched kernels wider. Same bits at any chunk.
  virtual int preferred_prefill_rows() const { return 0; }

  // ---- memory ----
  // true when backend memory is host memory (the CPU backend): Buffer::host() is then valid
  // and a bound weight's backend address is its mmapped host address.
  virtual bool host_addressable() const = 0;
  // A zero-filled buffer of `bytes` bytes (0 gives an empty handle). Not for hot loops.
  Buffer alloc(size_t bytes);
  // Typed convenience: n elements of T.
  template <typename T>
  Buffer alloc_array(size_t n) {
    return alloc(n * sizeof(T));
  }
  // Host -> backend, backend -> host and backend -> backend copies of `bytes` bytes; dst / src
  // on the backend side are backend addresses (inside a Buffer). Ordered with the ops: a
  // download sees every op issued before it, an upload is seen by every op issued after it.
  virtual void upload(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void download(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void copy(void* dst, const void* src, size_t bytes) = 0;
  // n backend -> backend copies in one call, the same as copy() for each region in order (no
  // region's destination may overlap another region): the state snapshots of a verify batch
  // (hundreds of small copies per forward), which a device backend runs as one launch.
  virtual void copy_many(const CopyRegion* regions, int n) {
    for (int i = 0; i < n; ++i) copy(regions[i].dst, regions[i].src, regions[i].bytes);
  }
  // dst[0..n) = value (f32) / the byte value.
  virtual void fill_f32(float* dst, size_t n, float value) = 0;
  virtual void fill_bytes(void* dst, size_t bytes, uint8_t value) = 0;
  // Returns when every op and copy issued so far is complete (a no-op on the CPU, where each
  // call returns when its work is done).
  virtual void sync() = 0;

  // Binds a model's weights (the mmapped tensors, each a host range) once: the WeightSet maps a
  // host address inside a bound range to its backend address for the model's lifetime. The CPU
  // backend binds zero-copy (backend address = host address); a device backend uploads.
  virtual std::unique_ptr<WeightSet> bind_weights(std::span<const WeightRange> ranges) = 0;

  // ---- ops ----
  // Runs a and b, returns when both are done. A backend with threads to spare runs them
  // concurrently, each task's ops on the task's own threads (the CPU backend splits its pool
  // in two; so a and b must not share mutable state); otherwise a, then b. Results are the
  // same either way: every op is thread-count invariant. DSpark uses it to hide a proposal
  // behind the seed's decode (speculative/).
  virtual void run_pair(Task a, Task b) {
    a();
    b();
  }

  // ---- forward bracket (a performance hint: results never change) ----
  // The session brackets the ops of one forward of n_rows rows with begin_forward /
  // end_forward (the token upload before, every read-back after). A device backend may record
  // the ops in between and replay them as device-side launches instead of launching each op
  // from the host (the CUDA backend's --cuda-graphs: decode rows only); every op's bits are
  // the same either way. Brackets do not nest. A host round trip inside one (download, sync,
  // upload, alloc) stays legal: the backend first runs what it recorded. The defaults do
  // nothing (the CPU backend); ForwardingBackend does not forward them, so a wrapper that
  // observes ops one by one (the op profiler, test recorders) runs every op unrecorded.
  virtual void begin_forward(int n_rows) { (void)n_rows; }
  virtual void end_forward() {}

  // ---- lanes (a performance hint: results never change) ----
  // Inside a forward the session may fork two chains of independent ops: fork(), the side
  // lane's ops, to_main(), the main lane's ops, join(). The side lane starts once every op
  // issued before fork() is done; the main lane's ops may then run at the same time as the
  // side lane's; the ops issued after join() start once both lanes are done. So no op of one
  // lane may read or write what an op of the other lane writes. Only ops go between fork()
  // and join() (no copies, uploads, downloads, syncs or allocations) and forks do not nest.
  // A device backend runs the lanes on two streams: small latency-bound kernels of one lane
  // fill the SMs the other leaves idle (CUDA's --cuda-lanes). The defaults do nothing: the CPU
  // runs every op as it is issued (side lane first). ForwardingBackend does not forward them,
  // so a wrapper sees the ops one by one, in issue order.
  virtual void fork() {}
  virtual void to_main() {}
  virtual void join() {}

  virtual void matmul(const MatmulParams& p) = 0;
  // n independent matmuls p[0..n) in one call (n >= 1), each result the bits it gets alone: the
  // output LoRA's groups, which a backend can then run side by side instead of one by one.
  virtual void matmul_grouped(const MatmulParams* p, int n) = 0;
  virtual void rms_norm(const RmsNormParams& p) = 0;
  virtual void hc_pre(const HcPreParams& p) = 0;
  virtual void hc_post(const HcPostParams& p) = 0;
  virtual void attention_inputs(const AttentionInputsParams& p) = 0;
  virtual void compressor_step(const CompressorStepParams& p) = 0;
  // p[0..n) in order (n >= 0), each step seeing the state the steps before it left: the bits
  // of n compressor_step calls, which a device backend may issue as one launch. The default
  // (and ForwardingBackend's, so a decorator sees every step) calls compressor_step per step.
  virtual void compressor_steps(const CompressorStepParams* p, int n) {
    for (int i = 0; i < n; ++i) compressor_step(p[i]);
  }
  // A chain's n steps (CompressorRowsParams). The default (and ForwardingBackend's) issues them
  // through compressor_steps, 16 at a time, so a decorator sees every step.
  virtual void compressor_rows(const CompressorRowsParams& p);
  // n independent queries p[0..n) in one call (n >= 1): each query's result is the bits it
  // gets alone. Batching them lets a backend spread a verify batch's per-row attention over
  // its threads instead of running n small calls one after the other.
  virtual void indexer_select(const IndexerSelectParams* p, int n) = 0;
  virtual void sink_attention(const SinkAttentionParams* p, int n) = 0;
  virtual void swiglu(const SwigluParams& p) = 0;
  virtual void route(const RouteParams& p) = 0;
  virtual void moe(const MoeParams& p) = 0;
  virtual void hc_collapse(const HcCollapseParams& p) = 0;
  virtual void embed(const EmbedParams& p) = 0;
  virtual void add(const AddParams& p) = 0;
  virtual void hc_mean(const HcMeanParams& p) = 0;
  virtual void argmax(const ArgmaxParams& p) = 0;
  virtual void top_k(const TopKParams& p) = 0;
  virtual void get_rows(const GetRowsParams& p) = 0;

 protected:
  // The allocator behind alloc(): zero-filled, 64-byte aligned; release() gets back exactly
  // what allocate() returned.
  virtual void* allocate(size_t bytes) = 0;
  virtual void release(void* p, size_t bytes) = 0;

 private:
  friend class Buffer;
  friend class ForwardingBackend;
};

// A backend that forwards everything (memory included) to another one: the base of wrappers
// that observe some ops (timing, recording) and pass the rest through. run_pair is not
// forwarded (a wrapper's tasks run one after the other), so a wrapper needs no locking; nor
// are begin_forward / end_forward (the inner backend then runs every op as it is issued, so
// the wrapper's per-op observations stay true).
class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(Backend& inner) : inner_(inner) {}
  const char* name() const override { return inner_.name(); }
  int n_threads() const override { return inner_.n_threads(); }
  std::string description() const override { return inner_.description(); }
  Status check_memory(uint64_t bytes, const char* what) const override { return inner_.check_memory(bytes, what); }
  bool host_addressable() const override { return inner_.host_addressable(); }
  // The inner device's chunk size, so that a wrapped session (the op profiler's) prefills in
  // the chunks the unwrapped one does.
  int preferred_prefill_rows() const override { return inner_.preferred_prefill_rows(); }
  void upload(void* dst, const void* src, size_t bytes) override { inner_.upload(dst, src, bytes); }
  void download(void* dst, const void* src, size_t bytes) override { inner_.download(dst, src, bytes); }
  void copy(void* dst, const void* src, size_t bytes) override { inner_.copy(dst, src, bytes); }
  void copy_many(const CopyRegion* regions, int n) override { inner_.copy_many(regions, n); }
  void fill_f32(float* dst, size_t n, float value) override { inner_.fill_f32(dst, n, value); }
  void fill_bytes(void* dst, size_t bytes, uint8_t value) override { inner_.fill_bytes(dst, bytes, value); }
  void sync() override { inner_.sync(); }
  std::unique_ptr<WeightSet> bind_weights(std::span<const WeightRange> r) override { return inner_.bind_weights(r); }
  void matmul(const MatmulParams& p) override { inner_.matmul(p); }
  void matmul_grouped(const MatmulParams* p, int n) override { inner_.matmul_grouped(p, n); }
  void rms_norm(const RmsNormParams& p) override { inner_.rms_norm(p); }
  void hc_pre(const HcPreParams& p) override { inner_.hc_pre(p); }
  void hc_post(const HcPostParams& p) override { inner_.hc_post(p); }
  void attention_inputs(const AttentionInputsParams& p) override { inner_.attention_inputs(p); }
  void compressor_step(const CompressorStepParams& p) override { inner_.compressor_step(p); }
  void indexer_select(const IndexerSelectParams* p, int n) override { inner_.indexer_select(p, n); }
  void sink_attention(const SinkAttentionParams* p, int n) override { inner_.sink_attention(p, n); }
  void swiglu(const SwigluParams& p) override { inner_.swiglu(p); }
  void route(const RouteParams& p) override { inner_.route(p); }
  void moe(const MoeParams& p) override { inner_.moe(p); }
  void hc_collapse(const HcCollapseParams& p) override { inner_.hc_collapse(p); }
  void embed(const EmbedParams& p) override { inner_.embed(p); }
  void add(const AddParams& p) override { inner_.add(p); }
  void hc_mean(const HcMeanParams& p) override { inner_.hc_mean(p); }
  void argmax(const ArgmaxParams& p) override { inner_.argmax(p); }
  void top_k(const TopKParams& p) override { inner_.top_k(p); }
  void get_rows(const GetRowsParams& p) override { inner_.get_rows(p); }

 protected:
  void* allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void release(void* p, size_t bytes) override { inner_.release(p, bytes); }
  Backend& inner_;
};

// A Buffer of n elements of T: data() is the typed backend address, size() counts elements.
// The host reads the elements through host() on a host-addressable backend only (checked),
// otherwise through Backend::download.
template <typename T>
class Array {
 public:
  Array() = default;
  Array(Backend& be, size_t n) : buf_(be.alloc(n * sizeof(T))) {}
  T* data() const { return buf_.as<T>(); }
  size_t size() const { return buf_.count<T>(); }
  size_t bytes() const { return buf_.bytes(); }
  bool empty() const { return buf_.empty(); }
  std::span<T> host() const { return buf_.host<T>(); }
  const Buffer& buffer() const { return buf_; }

 private:
  Buffer buf_;
};

// One weight tensor's host bytes, as bind_weights() takes them.
struct WeightRange {
  const void* host = nullptr;
  size_t bytes = 0;
};

// A model's weights bound to one backend (Backend::bind_weights): lives as long as the model's
// sessions. Every Matrix / weight pointer an op gets comes from map().
class WeightSet {
 public:
  virtual ~WeightSet() = default;
  // Backend address of host address p inside a bound range (nullptr stays nullptr). Checked.
  virtual const void* map(const void* host) const = 0;
  template <typename T>
  const T* map(const T* host) const {
    return static_cast<const T*>(map(static_cast<const void*>(host)));
  }
};

// Scratch bytes MoeParams::scratch needs.
size_t moe_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_used, int n_rows);

// How matvecs against quantized weights (Q8_0 dense, IQ2_XXS/Q2_K/Q4_K routed experts) treat
// their f32 activations. F16/F32 weights and every other numeric step (FP8/f16 KV, FP4
// indexer, ...) are the same in both modes.
enum class ActivationNumerics {
  kQuantized,  // the model's production numerics: activations -> Q8_0 / Q8_K (§3.3-3.4)
  kF32,        // reference numerics (slower; for parity checks): dequantized weight row ·
               // f32 activation, quant::dot_f32 order; still batch and thread invariant
};

// The CPU backend (the oracle), for tests and tools that want it directly; the engine asks
// backend/registry.h for a backend by name. n_threads <= 0 picks hardware concurrency.
std::unique_ptr<Backend> make_cpu_backend(int n_threads,
                                          ActivationNumerics act = ActivationNumerics::kQuantized);

}  // namespace ds4::backend
