// engine/engine.h — the public API of ds4cpp. Frontends (cli/, bench/, server/) include only
// this folder and core/.
//
// Engine: immutable after open — the mmapped model, its validated config, the tokenizer and
//   the backend (CPU now, CUDA later). Thread-safe for concurrent new_session() and
//   tokenization.
// Session: one mutable timeline (token history, per-layer KV state, last logits). Not
//   thread-safe; one thread drives a session at a time.
//
// Invariants (design.md §3-4):
//   * prefill(N tokens) leaves bit-identical state and logits to N decode() calls;
//   * verify(rows)[i] is bit-identical to decoding rows[0..i] one by one;
//   * checkpoint()/rollback() and commit_prefix() cost O(layers), not O(context);
//   * results do not depend on the thread count.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace ds4 {

// kAuto: CUDA when this build has it and the GPU `device` is usable, else the CPU.
enum class BackendKind { kCpu, kCuda, kAuto };

struct EngineOptions {
  std::string model_path;        // target GGUF (DS4 layout)
  std::string mtp_path;          // optional DSpark support GGUF ("" = none)
  BackendKind backend = BackendKind::kCpu;
  int device = 0;                // GPU index (CUDA backend)
  bool cuda_sync = false;        // CUDA: wait after every op (a fault names its op; slow)
  bool cuda_profile = false;     // CUDA: op-timeline profiler, report on stderr at exit
  int cuda_hc_fused = 2;         // CUDA: HC pre / collapse: 0 three launches, 1 fused, 2 staged kernel
  // CUDA: Q8_0 r = 1 kernel, auto|new|new-prequant|wide|wide-fused|old (A/B; same bits)
  std::string cuda_q8_r1 = "auto";
  // CUDA: graphs for decode forwards: 0 off, 1 one graph per forward, N a graph per N ops (same bits)
  int cuda_graphs = 0;
  std::string cuda_moe = "new";           // CUDA: routed-expert kernels, old|new|tc (A/B; same bits)
  std::string cuda_dense_rows = "wide";   // CUDA: F16/F32 matmul of 9+ rows, tiles|wide (A/B; same bits)
  bool cuda_pdl = true;                   // CUDA: programmatic dependent launch (A/B; same bits)
  bool cuda_pdl_all = true;               // CUDA: ... of every kernel (A/B; same bits)
  bool cuda_wide_persistent = false;      // CUDA: one-row Q8_0 kernel on a persistent grid (A/B; same bits)
  bool cuda_batch_steps = true;           // CUDA: compressor steps batched / rows in parallel (A/B; same bits)
  std::string cuda_attn = "split";        // CUDA: prefill groups' sink attention, split|fused (A/B; same bits)
  bool cuda_fuse_norms = true;            // CUDA: folded norms inside hc_pre / attention_inputs kernels (A/B; same bits)
  bool cuda_hc_products = false;          // CUDA: HC pre's decode dot over its products (A/B; same bits)
  bool cuda_fold_input_norm = false;      // CUDA: q_a's norm inside the one-row q_b kernel (A/B; same bits)
  bool cuda_lanes = true;                 // CUDA: independent ops of a layer on two streams (same bits)
  bool cuda_fold_hc_post = false;         // CUDA: a sublayer's HC post inside the next HC pre (A/B; same bits)
  int prefill_chunk = 0;  // rows per prefill forward, 1..256; 0 = the backend's (CPU 32, CUDA 256). Same bits
  int n_threads = 0;             // 0 = hardware concurrency
  std::string cpu_isa = "auto";  // CPU kernel path: auto|scalar|avx2|avx512 (same bits on all)
  // Reference numerics: slower; for parity checks. Matvecs against quantized weights (Q8_0
  // dense incl. the output head and shared expert, IQ2_XXS/Q2_K/Q4_K routed experts) use the
  // f32 activation against the dequantized weight row instead of quantizing the activation
  // to Q8_0/Q8_K. Everything else (FP8/f16 KV, FP4 indexer) is unchanged; results stay batch
  // and thread invariant. Default off: the production numerics (canonical hashes).
  bool f32_activations = false;
};

// What frontends may know about the loaded model (no tensors).
struct ModelInfo {
  std::string name;              // general.name
  std::string path;
  uint64_t file_bytes = 0;
  int n_layer = 0;
  int n_embd = 0;
  int n_vocab = 0;
  int n_ctx_train = 0;           // deepseek4.context_length
  int routed_quant_bits = 0;     // 2 (IQ2_XXS/Q2_K) or 4 (Q4_K)
  uint64_t kv_bytes_per_token = 0;   // steady-state growth of session state per token
  uint64_t session_fixed_bytes = 0;  // raw windows + compressor states, independent of ctx
  bool has_drafter = false;
  std::string backend;           // one line: the backend and what it runs on (Backend::description)
  // Identity of what a session state depends on (engine/state_file.h): FNV-1a-64 of the GGUF
  // metadata, its tensor table, the first bytes of every tensor, the file size and the
  // numerics options. Saved states load only into an engine with the same id.
  uint64_t model_id = 0;
};

// Chat rendering (the DeepSeek V4 encoding, ds4-architecture.md §8.5; rules in
// tokenizer/chat.h, reached through engine/text.h).
enum class ThinkMode { kThink, kNoThink, kThinkMax };
struct ChatToolCall {
  std::string id{};         // optional; orders the tool results of the next user turn
  std::string name{};
  std::string arguments{};  // JSON object text
};
struct ChatMessage {
  std::string role{};     // "system", "developer", "user", "assistant", "tool"
  std::string content{};
  std::string reasoning{};                 // assistant history: its thinking
  std::vector<ChatToolCall> tool_calls{};  // assistant history
  std::string tool_call_id{};              // tool: the call it answers
  std::string tools_json{};  // system/developer: JSON array of tool schemas (OpenAI form or
                           // bare function objects); "" = none
};

// Per-row result of a verify batch.
struct VerifyRow {
  int32_t argmax = 0;            // greedy next token after this row (ties -> smallest id)
  std::span<const float> logits; // [n_vocab] f32, valid until the next session call
};

class Session;
class TextCodec;  // engine/text.h: tokenizer + chat template + streaming detokenizer

using ProgressFn = std::function<void(int done, int total)>;

class Engine {
 public:
  static Expected<std::unique_ptr<Engine>> open(const EngineOptions& options);
  virtual ~Engine() = default;

  virtual const ModelInfo& info() const = 0;

  // n_ctx: the session's context limit in tokens; errors if memory cannot hold it.
  virtual Expected<std::unique_ptr<Session>> new_session(int n_ctx) = 0;
  // Bytes of backend memory new_session(n_ctx) allocates (state, speculation copies, scratch):
  // the estimate it checks against the free device memory (or the host's physical memory).
  virtual uint64_t session_bytes(int n_ctx) const = 0;

  // Batched decoding across requests: appends tokens[i] to sessions[i] for 1..8 distinct
  // sessions of this engine in ONE forward (the weights are read once for all rows; each row
  // attends to its own session's state). Each session ends bit-identical (state and logits) to
  // sessions[i]->decode(tokens[i]) — the sessions may differ in n_ctx and position. Errors
  // (nothing appended anywhere): kInvalidArgument (count, repeated or foreign session, token
  // id), kOutOfRange (a full session).
  virtual Status decode_batch(std::span<Session* const> sessions, std::span<const int32_t> tokens) = 0;

  // --- text (byte-level BPE + DS4 chat template) ---
  // Plain text: special-token strings are NOT recognized.
  virtual std::vector<int32_t> tokenize(std::string_view text) const = 0;
  // Rendered chat text: the DS4 special-token strings are emitted as their ids.
  virtual std::vector<int32_t> tokenize_rendered(std::string_view text) const = 0;
  // Renders a whole conversation, ending with the assistant generation prefix.
  virtual std::string render_chat(std::span<const ChatMessage> messages, ThinkMode mode) const = 0;
  // Bytes of one token (may be a partial UTF-8 sequence; use a streaming decoder to print).
  virtual std::string token_bytes(int32_t token) const = 0;
  virtual std::string detokenize(std::span<const int32_t> tokens) const = 0;
  virtual int32_t bos_token() const = 0;
  virtual int32_t eos_token() const = 0;
  // The full text codec (streams, transcripts) for frontends that need more than the above.
  virtual const TextCodec& text() const = 0;
};

class Session {
 public:
  virtual ~Session() = default;

  virtual int n_ctx() const = 0;
  virtual int n_tokens() const = 0;                   // == position of the next token
  virtual std::span<const int32_t> tokens() const = 0;

  // Appends tokens at the current position (prefill path; chunked internally).
  virtual Status prefill(std::span<const int32_t> tokens, const ProgressFn& progress = {}) = 0;
  // Appends one token (decode path).
  virtual Status decode(int32_t token) = 0;
  // Next-token logits after the last appended token: [n_vocab] f32.
  virtual std::span<const float> logits() const = 0;
  // The greedy next token (ties -> smallest id, NaN never wins, `banned` never chosen; -1
  // without logits), chosen where the logits live: on a GPU only the id is read back.
  virtual int32_t greedy_next(int32_t banned = -1);
  // The sampling read-out of the next-token logits: the k (1..256) largest as ids[j] /
  // values[j], value descending, ties -> smaller id, NaN and `banned` left out, padded with
  // id -1 / value -inf (core/reduce.h top_k_row). On a GPU only these 8·k bytes are read back
  // (engine/generate.h sample_next draws from them). false without logits.
  virtual bool top_candidates(int k, int32_t banned, int32_t* ids, float* values);

  // Runs rows (1..8) at consecutive positions and appends them. Row i's result equals
  // decoding rows[0..i] one by one. Follow with commit_prefix(k) to keep k rows, or
  // rollback() to the checkpoint taken before.
  virtual Expected<std::vector<VerifyRow>> verify(std::span<const int32_t> rows) = 0;

  // Speculation checkpoints: O(layers). rollback() returns to the last checkpoint.
  virtual void checkpoint() = 0;
  virtual void rollback() = 0;
  // After verify(r rows): keep the first k (1 <= k <= r) rows, as if only they had been
  // decoded; logits() becomes row k-1's logits. No replay.
  virtual Status commit_prefix(int k) = 0;

  // Full in-memory snapshot (bench frontier probe): O(context).
  virtual Status save_snapshot() = 0;
  virtual Status restore_snapshot() = 0;
  virtual uint64_t state_bytes() const = 0;           // bytes a snapshot payload holds

  virtual void reset() = 0;                            // empty timeline

  // BENCHMARK TOOL, timing only (ds4-bench --fill-ctx): brings an EMPTY session to n tokens
  // in the time of a memory fill instead of n forwards. The token history is n copies of token
  // 0, each layer's row counters are those n decodes leave, every KV row is zero, and there
  // are no logits (follow with decode()). A decode after it costs what a decode at context n
  // costs (the same ops over the same number of rows); every output is meaningless. Errors
  // (the session unchanged): kInvalidArgument for a non-empty session or n < 0, kOutOfRange
  // for n > n_ctx(). Base implementation: kUnsupported.
  virtual Status fill_synthetic(int n);

  // Disk cache (engine/state_file.h has the format and the file helpers): the whole state as
  // one self-checking image (header with model identity, n_ctx and token ids; payload;
  // checksum), and its import into a session of the same engine and n_ctx, which then
  // continues bit-identically to the session that exported it. A bad image (corrupt,
  // truncated, another model or shape) is an error naming the mismatch and leaves the
  // session empty. Base implementation: kUnsupported.
  virtual Status export_state(std::vector<uint8_t>* image) const;
  virtual Status import_state(std::span<const uint8_t> image);
};

}  // namespace ds4
