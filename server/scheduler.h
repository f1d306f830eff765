// server/scheduler.h — one loaded Engine serving many requests: a bounded queue, up to 8
// active jobs, one scheduler thread that advances them.
//
// Role: HTTP handler threads submit() a Job (prompt ids + sampling) and read its token events;
// the scheduler thread owns every Session and is the only thread that calls into the engine.
// Each round it gives every active job one unit of work: a prefill slice (kPrefillSlice
// tokens) or one decoding step (one token; DSpark: an accepted draft prefix).
//
// Batching: in each round (run_round) the jobs due a decoding step (prompt done) advance
// together: each samples its token from its own logits, then one Engine::decode_batch forward
// appends all of them (weights read once for up to 8 rows). Prefill slices stay per job, in
// slot order. A DSpark job runs its speculative step only while it is the one job decoding;
// beside others it joins the batch (same greedy tokens, cheaper per token).
//
// Invariants:
//   * Determinism: every job has its own Session, Sampler and TextStream, created fresh, so a
//     greedy job's tokens are a pure function of its prompt whether it runs alone or beside
//     others (sampled jobs: of its prompt and seed). decode_batch rows are bit-identical to
//     each session decoding alone, so the batch a job lands in never changes its output.
//     DSpark gives the same greedy tokens as plain decoding (engine/speculative.h).
//   * DSpark: every greedy job without logprobs gets a SpeculativeDecoder when the engine has a
//     drafter (each owns its drafter timeline; the weights are shared) and speculates whenever
//     it is the only job decoding.
//   * Cancellation: a cancelled job stops before its next unit of work (one prefill slice or
//     one token) and its slot is freed in the same round.
//   * A job's events end with exactly one finish (finished() true, result() valid).
//   * Prefix reuse: a finished job's session goes to an LRU of idle sessions, restored to a
//     snapshot taken right after its prompt's shareable part. A new job whose prompt extends
//     that part (by >= 1 token) restores the snapshot and prefills only the rest — the same
//     state as prefilling the whole prompt (prefill is split-invariant, engine.h), so reuse never
//     changes an output. A DSpark job starts from an empty session instead (the
//     speculative decoder must be bound before the prompt).
//   * Disk cache (SchedulerOptions::disk): each snapshot prefix not yet on disk is saved when it
//     is taken; a job whose prompt extends a saved prefix longer than any live one loads it
//     (all checks in DiskCache::load) instead of prefilling — the same state, bit for bit, so
//     it never changes an output either; a file that fails its checks means a normal prefill.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/generate.h"
#include "engine/speculative.h"
#include "server/disk_cache.h"

namespace ds4::server {

struct TopLogprob {
  int32_t id = 0;
  float logprob = 0.0f;
};

// One generated token (or the final flush of held-back bytes, id == -1).
struct TokenEvent {
  int32_t id = -1;
  std::string text;             // complete UTF-8 text that became available with it
  float logprob = 0.0f;         // log-softmax of the model's logits (only with logprobs)
  std::vector<TopLogprob> top;  // the top alternatives, most probable first
};

struct JobParams {
  std::vector<int32_t> prompt;
  int max_tokens = 16;
  SamplerParams sampler;
  int top_logprobs = -1;  // -1: no logprobs; 0..20: the chosen token's + that many alternatives
  bool allow_dspark = true;
  // Prefix reuse: the session is snapshotted after prompt[0 .. size - reuse_tail), the part a
  // later request can share (chat: the generation prefix <｜Assistant｜><think> is left out, it
  // is rendered differently once the turn is history). >= 1.
  int reuse_tail = 1;
};

struct JobResult {
  StopReason stop = StopReason::kMaxTokens;
  int prompt_tokens = 0;
  int reused_tokens = 0;  // prompt tokens restored from a cached session instead of prefilled
  int gen_tokens = 0;
  double queue_s = 0.0;   // submit -> admitted
  double ttft_s = 0.0;    // submit -> first token (0 when none)
  double gen_s = 0.0;     // first token -> finish
  bool dspark = false;    // decoded speculatively
  SpecSummary spec;       // its counters (dspark only)
  std::string error;      // engine error (stop = kCancelled then)
};

class Job {
 public:
  explicit Job(JobParams params);

  // Consumer side (HTTP thread). Moves pending events into *out (appending); waits up to
  // timeout_ms when none. Returns true once the job has finished and every event was taken.
  bool take(std::vector<TokenEvent>* out, int timeout_ms);
  // Stops generation before the job's next unit of work (client gone, stop sequence hit).
  void cancel() { cancelled_.store(true); }
  bool cancelled() const { return cancelled_.load(); }
  // Valid once take() returned true.
  const JobResult& result() const { return result_; }
  const JobParams& params() const { return params_; }

 private:
  friend class Scheduler;
  void push(TokenEvent ev);
  void finish(JobResult r);

  JobParams params_;
  std::atomic<bool> cancelled_{false};
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> events_;
  bool finished_ = false;
  JobResult result_;
  double submitted_at_ = 0.0;  // seconds on the scheduler's clock
};

struct SchedulerOptions {
  int max_active = 8;   // jobs advanced together (1..8)
  int max_queue = 64;   // jobs waiting beyond the active ones
  int n_ctx = 4096;     // context of every session
  bool dspark = false;  // the engine has a drafter and speculation is on
  SpecOptions spec;     // DSpark policy (when dspark)
  // Idle sessions kept for reuse, LRU, bounded by this many bytes of session state (estimated
  // from ModelInfo: fixed + per-token bytes at n_ctx, plus the snapshot's tokens). 0: no prefix
  // reuse (no snapshots); up to max_active idle sessions are still kept and reset for new jobs,
  // so memory stays flat under load.
  uint64_t kv_memory_bytes = 0;
  // --kv-cache-dir (opened by the caller, outlives the scheduler; null: none). Needs
  // kv_memory_bytes > 0 (the shareable prefixes are the snapshots). A new job resumes the
  // longest prefix found live or on disk; every new snapshot prefix is saved there.
  DiskCache* disk = nullptr;
};

// Live counters for /metrics (all cumulative except queued/active).
struct SchedulerStats {
  int queued = 0;
  int active = 0;
  int64_t admitted = 0;
  int64_t finished = 0;
  int64_t cancelled = 0;
  int64_t prompt_tokens = 0;
  int64_t gen_tokens = 0;
  int64_t dspark_jobs = 0;
  int64_t dspark_proposed = 0;
  int64_t dspark_accepted = 0;
  int64_t reused_tokens = 0;   // prompt tokens restored from cached sessions
  int64_t reuse_hits = 0;      // jobs that resumed a cached session
  int64_t batched_steps = 0;   // decode_batch forwards of >= 2 jobs
  int64_t batched_rows = 0;    // tokens appended by them
  int idle_sessions = 0;
  uint64_t idle_bytes = 0;
  int64_t disk_reuse_hits = 0;  // jobs that resumed a state loaded from --kv-cache-dir
  DiskCacheStats disk;          // the disk cache's own counters (zero without one)
  // time to first token histogram (seconds)
  static constexpr int kBuckets = 10;
  static constexpr double kBucketBounds[kBuckets] = {0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
  int64_t ttft_counts[kBuckets] = {};  // cumulative counts per upper bound
  int64_t ttft_count = 0;
  double ttft_sum = 0.0;
};

class Scheduler {
 public:
  Scheduler(Engine& engine, SchedulerOptions options);
  ~Scheduler();  // stop(): cancels everything still running

  // kResource when the queue is full (HTTP 429); kUnsupported while shutting down (503).
  Expected<std::shared_ptr<Job>> submit(JobParams params);

  // Stop admitting; wait up to grace_s for queued and active jobs to finish; cancel the rest;
  // join the thread. Idempotent.
  void stop(double grace_s);

  SchedulerStats stats() const;
  const SchedulerOptions& options() const { return options_; }

 private:
  struct Slot;
  struct Idle {
    std::unique_ptr<Session> session;
    std::vector<int32_t> prefix;  // tokens at its snapshot (empty: no snapshot)
    uint64_t bytes = 0;
  };
  // A session for a new job: the longest cached prefix of the prompt (live, or on disk when
  // longer) restored, else an idle session emptied, else null (make one). *from_disk: loaded
  // from --kv-cache-dir (no in-memory snapshot yet).
  std::unique_ptr<Session> take_session(const std::vector<int32_t>& prompt, int* reused, bool* from_disk);
  void return_session(std::unique_ptr<Session> session, std::vector<int32_t> prefix);
  void run();
  void run_round(std::vector<std::unique_ptr<Slot>>& slots);
  bool admit(std::unique_ptr<Slot>* out, std::shared_ptr<Job> job);
  static constexpr int kMaxActive = 8;   // SchedulerOptions::max_active bound (decode_batch rows)
  bool pre_step(Slot& slot);             // non-decoding work; true when a decoding step is due
  void prepare_logprobs(Slot& slot);     // logprob inputs of the coming step
  void emit_step(Slot& slot);            // streams slot.step_out, finishes when done
  void advance_step(Slot& slot);         // a decoding step in the slot's own forward (DSpark)
  void finish(Slot& slot, StopReason stop, std::string error = {});
  void save_to_disk(Slot& slot);         // queues the slot's snapshot prefix for --kv-cache-dir
  double now() const;

  Engine& engine_;
  SchedulerOptions options_;
  const std::chrono::steady_clock::time_point t0_ = std::chrono::steady_clock::now();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool accepting_ = true;
  bool quit_ = false;
  int active_ = 0;
  SchedulerStats stats_;
  std::deque<Idle> idle_;  // most recently used first; scheduler thread only
  uint64_t idle_bytes_ = 0;
  uint64_t session_bytes_ = 0;  // estimate of one session's state at n_ctx
  std::thread thread_;
};

}  // namespace ds4::server
