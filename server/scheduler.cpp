// server/scheduler.cpp — the request queue and the scheduler thread (see scheduler.h).
#include "server/scheduler.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/log.h"
#include "engine/text.h"

namespace ds4::server {

// ---------------------------------------------------------------- Job

Job::Job(JobParams params) : params_(std::move(params)) {}

bool Job::take(std::vector<TokenEvent>* out, int timeout_ms) {
  std::unique_lock<std::mutex> lock(mu_);
  if (events_.empty() && !finished_) {
    cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                 [&] { return !events_.empty() || finished_; });
  }
  while (!events_.empty()) {
    out->push_back(std::move(events_.front()));
    events_.pop_front();
  }
  return finished_;
}

void Job::push(TokenEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    events_.push_back(std::move(ev));
  }
  cv_.notify_all();
}

void Job::finish(JobResult r) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    result_ = std::move(r);
    finished_ = true;
  }
  cv_.notify_all();
}

// ---------------------------------------------------------------- Slot

// Everything the scheduler thread keeps for one active job.
struct Scheduler::Slot {
  std::shared_ptr<Job> job;
  std::unique_ptr<Session> session;
  std::unique_ptr<SpeculativeDecoder> spec;  // destroyed before the session (declared after)
  std::unique_ptr<Sampler> sampler;
  TextStream stream;
  size_t prefilled = 0;   // prompt tokens appended so far (restored ones included)
  size_t reused = 0;      // prompt tokens restored from a cached session
  size_t snap_at = 0;     // snapshot after this many prompt tokens (0: none)
  bool snap_done = false;
  std::vector<int32_t> snap_prefix;  // the prompt tokens the snapshot holds
  int generated = 0;
  double admitted_at = 0.0;
  double first_token_at = 0.0;
  std::vector<int32_t> step_out;
  std::vector<std::pair<float, int32_t>> scratch;  // [n_vocab] logprob top-k selection
  std::vector<float> logits_copy;                  // [n_vocab] logits before the step (logprobs)
  double log_z = 0.0;                              // log-sum-exp of those logits (logprobs)
  TokenEvent first_ev;                             // the step's first event: its top alternatives
  bool done = false;                               // finish() ran

  explicit Slot(TextStream s) : stream(std::move(s)) {}
  ~Slot() { spec.reset(); }  // unbinds its hidden capture before the session goes
};

// ---------------------------------------------------------------- Scheduler

Scheduler::Scheduler(Engine& engine, SchedulerOptions options)
    : engine_(engine), options_(std::move(options)) {
  options_.max_active = std::clamp(options_.max_active, 1, kMaxActive);
  options_.max_queue = std::max(options_.max_queue, 0);
  const ModelInfo& info = engine_.info();
  session_bytes_ = info.session_fixed_bytes + info.kv_bytes_per_token * static_cast<uint64_t>(options_.n_ctx);
  thread_ = std::thread([this] { run(); });
}

Scheduler::~Scheduler() { stop(0.0); }

double Scheduler::now() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

Expected<std::shared_ptr<Job>> Scheduler::submit(JobParams params) {
  auto job = std::make_shared<Job>(std::move(params));
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!accepting_) return unsupported("the server is shutting down");
    // Jobs beyond the free active slots wait in the queue, up to max_queue of them.
    const int free_slots = options_.max_active - active_;
    if (static_cast<int>(queue_.size()) >= free_slots + options_.max_queue) {
      return resource_error("queue full: %d requests waiting (--max-queue %d)",
                            static_cast<int>(queue_.size()), options_.max_queue);
    }
    job->submitted_at_ = now();
    queue_.push_back(job);
  }
  cv_.notify_all();
  return job;
}

void Scheduler::stop(double grace_s) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    accepting_ = false;
    if (grace_s > 0) {
      cv_.wait_for(lock, std::chrono::duration<double>(grace_s),
                   [&] { return queue_.empty() && active_ == 0; });
    }
    quit_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  if (options_.disk != nullptr) options_.disk->close();  // writes what is queued, then stops
}

void Scheduler::save_to_disk(Slot& slot) {
  if (options_.disk != nullptr && slot.snap_done && !options_.disk->contains(slot.snap_prefix)) {
    options_.disk->save(*slot.session);
  }
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  SchedulerStats s = stats_;
  if (options_.disk != nullptr) s.disk = options_.disk->stats();
  s.queued = static_cast<int>(queue_.size());
  s.active = active_;
  return s;
}

std::unique_ptr<Session> Scheduler::take_session(const std::vector<int32_t>& prompt, int* reused, bool* from_disk) {
  constexpr size_t kNone = static_cast<size_t>(-1);
  *reused = 0;
  *from_disk = false;
  std::unique_ptr<Session> out;
  if (options_.kv_memory_bytes > 0) {
    // The longest cached prefix that the prompt extends by at least one token.
    size_t best = kNone, best_len = 0;
    for (size_t i = 0; i < idle_.size(); ++i) {
      const std::vector<int32_t>& pre = idle_[i].prefix;
      if (!pre.empty() && pre.size() < prompt.size() && pre.size() > best_len &&
          std::equal(pre.begin(), pre.end(), prompt.begin())) {
        best = i;
        best_len = pre.size();
      }
    }
    // A longer prefix on disk wins: it is loaded into the least recently used idle session
    // other than the live candidate (or a new one).
    std::string path;
    const size_t disk_len = options_.disk != nullptr ? options_.disk->best_prefix(prompt, best_len, &path) : 0;
    if (disk_len > 0) {
      std::unique_ptr<Session> holder;
      for (size_t i = idle_.size(); i-- > 0;) {
        if (i == best) continue;
        holder = std::move(idle_[i].session);
        idle_bytes_ -= idle_[i].bytes;
        idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(i));
        if (best != kNone && best > i) --best;
        break;
      }
      if (!holder) {
        Expected<std::unique_ptr<Session>> made = engine_.new_session(options_.n_ctx);
        if (made.ok()) holder = std::move(made).value();
      }
      if (holder && options_.disk->load(*holder, path, prompt, disk_len)) {
        *reused = static_cast<int>(disk_len);
        *from_disk = true;
        out = std::move(holder);
        best = kNone;
        std::lock_guard<std::mutex> lock(mu_);
        stats_.disk_reuse_hits++;
      } else if (holder && best == kNone) {
        out = std::move(holder);  // emptied by the failed load
      } else if (holder) {        // back among the idle ones; the live candidate serves
        Idle e;
        e.session = std::move(holder);
        e.bytes = session_bytes_;
        idle_bytes_ += e.bytes;
        idle_.push_back(std::move(e));
      }
    }
    if (!out && best != kNone) {
      Idle e = std::move(idle_[best]);
      idle_.erase(idle_.begin() + static_cast<std::ptrdiff_t>(best));
      idle_bytes_ -= e.bytes;
      out = std::move(e.session);
      const std::span<const int32_t> have = out->tokens();
      if (out->restore_snapshot().ok() && have.size() == best_len &&
          std::equal(have.begin(), have.end(), e.prefix.begin())) {
        *reused = static_cast<int>(best_len);
      } else {
        out->reset();
      }
    }
  }
  if (!out && !idle_.empty()) {  // the least recently used one, emptied
    out = std::move(idle_.back().session);
    idle_bytes_ -= idle_.back().bytes;
    idle_.pop_back();
    out->reset();
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.idle_sessions = static_cast<int>(idle_.size());
  stats_.idle_bytes = idle_bytes_;
  return out;
}

void Scheduler::return_session(std::unique_ptr<Session> session, std::vector<int32_t> prefix) {
  Idle e;
  e.bytes = session_bytes_ + engine_.info().kv_bytes_per_token * prefix.size();
  e.session = std::move(session);
  e.prefix = std::move(prefix);
  idle_bytes_ += e.bytes;
  idle_.push_front(std::move(e));
  if (options_.kv_memory_bytes > 0) {
    while (!idle_.empty() && idle_bytes_ > options_.kv_memory_bytes) {
      idle_bytes_ -= idle_.back().bytes;
      idle_.pop_back();
    }
  } else {
    while (static_cast<int>(idle_.size()) > options_.max_active) {
      idle_bytes_ -= idle_.back().bytes;
      idle_.pop_back();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.idle_sessions = static_cast<int>(idle_.size());
  stats_.idle_bytes = idle_bytes_;
}

bool Scheduler::admit(std::unique_ptr<Slot>* out, std::shared_ptr<Job> job) {
  auto slot = std::make_unique<Slot>(engine_.text().new_stream());
  slot->job = std::move(job);
  slot->admitted_at = now();
  const JobParams& p = slot->job->params();
  // DSpark: every greedy job without logprobs (a speculative step appends several tokens and
  // exposes no per-token logits); each SpeculativeDecoder owns its drafter timeline.
  const bool take_spec = options_.dspark && p.allow_dspark && p.sampler.temperature <= 0.0f &&
                         p.top_logprobs < 0;
  int reused = 0;
  bool from_disk = false;
  // DSpark jobs reuse cached prefixes too: their decoder, made below before the prompt's tail
  // is prefilled, drafts from the hidden rows of that tail on.
  slot->session = take_session(p.prompt, &reused, &from_disk);
  if (!slot->session) {
    Expected<std::unique_ptr<Session>> session = engine_.new_session(options_.n_ctx);
    if (!session.ok()) {
      JobResult r;
      r.stop = StopReason::kCancelled;
      r.error = session.status().message();
      slot->job->finish(std::move(r));
      return false;
    }
    slot->session = std::move(*session);
  }
  slot->prefilled = slot->reused = static_cast<size_t>(reused);
  if (options_.kv_memory_bytes > 0) {
    const size_t tail = static_cast<size_t>(std::max(1, p.reuse_tail));
    slot->snap_at = p.prompt.size() > tail ? p.prompt.size() - tail : 0;
    if (slot->snap_at > 0 && slot->snap_at == slot->reused) {  // the restored snapshot is that one
      slot->snap_done = true;
      slot->snap_prefix.assign(p.prompt.begin(), p.prompt.begin() + static_cast<std::ptrdiff_t>(slot->snap_at));
      if (from_disk && !slot->session->save_snapshot().ok()) {  // a load brings no in-memory snapshot
        slot->snap_done = false;
        slot->snap_prefix.clear();
      }
      save_to_disk(*slot);
    }
  }
  slot->sampler = std::make_unique<Sampler>(p.sampler, engine_.info().n_vocab);
  if (take_spec) {
    Expected<std::unique_ptr<SpeculativeDecoder>> d =
        new_speculative_decoder(engine_, *slot->session, options_.spec);
    if (d.ok()) {
      slot->spec = std::move(*d);
    } else {
      DS4_LOG_WARN("server: DSpark unavailable for a request: %s", d.status().message().c_str());
    }
  }
  if (p.top_logprobs >= 0) {
    slot->scratch.resize(static_cast<size_t>(engine_.info().n_vocab));
    slot->logits_copy.resize(static_cast<size_t>(engine_.info().n_vocab));
  }
  *out = std::move(slot);
  return true;
}

void Scheduler::finish(Slot& slot, StopReason stop, std::string error) {
  slot.done = true;
  if (std::string tail = slot.stream.flush(); !tail.empty()) {
    TokenEvent ev;
    ev.id = -1;
    ev.text = std::move(tail);
    slot.job->push(std::move(ev));
  }
  JobResult r;
  r.stop = stop;
  r.error = std::move(error);
  r.prompt_tokens = static_cast<int>(slot.job->params().prompt.size());
  r.reused_tokens = static_cast<int>(slot.reused);
  r.gen_tokens = slot.generated;
  r.queue_s = slot.admitted_at - slot.job->submitted_at_;
  const double t = now();
  if (slot.first_token_at > 0) {
    r.ttft_s = slot.first_token_at - slot.job->submitted_at_;
    r.gen_s = t - slot.first_token_at;
  }
  r.dspark = slot.spec != nullptr;
  if (slot.spec) r.spec = slot.spec->summary();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.finished++;
    if (stop == StopReason::kCancelled) stats_.cancelled++;
    stats_.prompt_tokens += static_cast<int64_t>(slot.prefilled - slot.reused);
    stats_.reused_tokens += static_cast<int64_t>(slot.reused);
    if (slot.reused > 0) stats_.reuse_hits++;
    stats_.gen_tokens += slot.generated;
    if (slot.spec) {
      stats_.dspark_jobs++;
      stats_.dspark_proposed += r.spec.proposed;
      stats_.dspark_accepted += r.spec.accepted;
    }
    if (slot.first_token_at > 0) {
      stats_.ttft_count++;
      stats_.ttft_sum += r.ttft_s;
      for (int b = 0; b < SchedulerStats::kBuckets; ++b) {
        if (r.ttft_s <= SchedulerStats::kBucketBounds[b]) stats_.ttft_counts[b]++;
      }
    }
  }
  const bool healthy = r.error.empty();
  slot.job->finish(std::move(r));
  slot.spec.reset();  // unbinds from the session before it is cached
  if (healthy) {
    if (slot.snap_done) {
      // Back to the shareable prefix; a failed restore caches the session without a prefix.
      if (!slot.session->restore_snapshot().ok()) slot.snap_prefix.clear();
    } else {
      slot.snap_prefix.clear();
    }
    return_session(std::move(slot.session), std::move(slot.snap_prefix));
  }
}

// The slot's work this round when it is not a decoding step: a cancellation, a prefill slice,
// or the max_tokens finish. Returns true (nothing done) when the slot is due a decoding step.
bool Scheduler::pre_step(Slot& slot) {
  Job& job = *slot.job;
  const JobParams& p = job.params();
  if (job.cancelled()) {
    finish(slot, StopReason::kCancelled);
    return false;
  }
  if (slot.prefilled < p.prompt.size()) {
    // Slices stop at the snapshot point (prefill is split-invariant: same bits).
    const size_t end = slot.snap_at > slot.prefilled ? slot.snap_at : p.prompt.size();
    const size_t n = std::min(end - slot.prefilled, static_cast<size_t>(kPrefillSlice));
    Status s = slot.session->prefill(std::span<const int32_t>(p.prompt).subspan(slot.prefilled, n));
    if (!s.ok()) {
      finish(slot, StopReason::kCancelled, s.message());
      return false;
    }
    slot.prefilled += n;
    if (slot.prefilled == slot.snap_at && !slot.snap_done) {
      if (slot.session->save_snapshot().ok()) {
        slot.snap_done = true;
        slot.snap_prefix.assign(p.prompt.begin(), p.prompt.begin() + static_cast<std::ptrdiff_t>(slot.snap_at));
        save_to_disk(slot);
      }
    }
    return false;
  }
  if (slot.generated >= p.max_tokens) {
    finish(slot, StopReason::kMaxTokens);
    return false;
  }
  return true;
}

// Logprobs of the distribution the next token is drawn from, read before the step appends it
// (the step invalidates the logits span): slot.log_z, slot.logits_copy and slot.first_ev.top.
void Scheduler::prepare_logprobs(Slot& slot) {
  const JobParams& p = slot.job->params();
  slot.first_ev = TokenEvent{};
  slot.log_z = 0.0;
  if (p.top_logprobs < 0) return;
  const std::span<const float> logits = slot.session->logits();
  float mx = -INFINITY;
  for (float l : logits) mx = std::max(mx, l);
  double z = 0.0;
  for (float l : logits) z += std::exp(static_cast<double>(l) - mx);
  slot.log_z = mx + std::log(z);
  std::copy(logits.begin(), logits.end(), slot.logits_copy.begin());
  if (p.top_logprobs > 0) {
    for (size_t i = 0; i < logits.size(); ++i) slot.scratch[i] = {logits[i], static_cast<int32_t>(i)};
    const size_t k = std::min<size_t>(static_cast<size_t>(p.top_logprobs), logits.size());
    std::partial_sort(slot.scratch.begin(), slot.scratch.begin() + static_cast<std::ptrdiff_t>(k),
                      slot.scratch.end(), [](const auto& a, const auto& b) {
                        return a.first > b.first || (a.first == b.first && a.second < b.second);
                      });
    for (size_t i = 0; i < k; ++i) {
      slot.first_ev.top.push_back({slot.scratch[i].second, static_cast<float>(slot.scratch[i].first - slot.log_z)});
    }
  }
}

// Streams the tokens of a finished step (slot.step_out) and finishes the job when it ended.
void Scheduler::emit_step(Slot& slot) {
  Job& job = *slot.job;
  const JobParams& p = job.params();
  if (slot.step_out.empty()) {
    finish(slot, StopReason::kContextFull);
    return;
  }
  for (size_t i = 0; i < slot.step_out.size(); ++i) {
    const int32_t tok = slot.step_out[i];
    if (tok == engine_.eos_token()) {  // EOS: written, not appended
      finish(slot, StopReason::kEos);
      return;
    }
    TokenEvent ev = i == 0 ? std::move(slot.first_ev) : TokenEvent{};
    ev.id = tok;
    slot.stream.push(tok, &ev.text);
    if (p.top_logprobs >= 0 && i == 0) {
      ev.logprob = static_cast<float>(slot.logits_copy[static_cast<size_t>(tok)] - slot.log_z);
    }
    slot.generated++;
    if (slot.first_token_at == 0) slot.first_token_at = now();
    job.push(std::move(ev));
  }
  if (slot.generated >= p.max_tokens) finish(slot, StopReason::kMaxTokens);
  else if (slot.session->n_tokens() >= slot.session->n_ctx()) finish(slot, StopReason::kContextFull);
}

// One decoding step in the slot's own forward (pre_step returned true): plain, one token;
// DSpark, an accepted draft prefix.
void Scheduler::advance_step(Slot& slot) {
  const JobParams& p = slot.job->params();
  prepare_logprobs(slot);
  StepLimits limits;
  limits.max_new = slot.spec ? std::max(1, p.max_tokens - slot.generated) : 1;
  limits.stop_token = engine_.eos_token();
  static PlainDecoder plain;  // stateless
  Decoder& decoder = slot.spec ? static_cast<Decoder&>(*slot.spec) : static_cast<Decoder&>(plain);
  Status s = decoder.step(*slot.session, *slot.sampler, limits, &slot.step_out);
  if (!s.ok()) {
    finish(slot, StopReason::kCancelled, s.message());
    return;
  }
  emit_step(slot);
}

// One round: every active job gets one unit of work. Cancellations and prefill slices run per
// slot (pre_step). The jobs then due a decoding step advance together: each samples its next
// token from its own logits and ONE Engine::decode_batch forward appends them all; its rows are
// bit-identical to decoding each alone, so batching never changes an output. A DSpark job takes
// a speculative step only while it is the one job decoding: beside others, a batched row costs
// a fraction of a decode (the weights are read once for all rows) while its own verify forward
// would cost more than one, and its greedy token is the same either way (the drafter timeline
// follows plain decodes through the session's hidden capture). No job is mid-cycle between
// rounds: a DSpark step commits within step().
void Scheduler::run_round(std::vector<std::unique_ptr<Slot>>& slots) {
  Slot* due[kMaxActive];
  int n_due = 0;
  for (auto& slot : slots) {
    if (pre_step(*slot)) due[n_due++] = slot.get();
  }
  if (n_due == 1 && due[0]->spec) {
    advance_step(*due[0]);
    return;
  }
  Session* sessions[kMaxActive];
  int32_t tokens[kMaxActive];
  Slot* batched[kMaxActive];
  int k = 0;
  const int32_t eos = engine_.eos_token();
  for (int d = 0; d < n_due; ++d) {
    Slot& slot = *due[d];
    prepare_logprobs(slot);
    slot.step_out.clear();
    if (slot.session->n_tokens() >= slot.session->n_ctx()) {  // PlainDecoder's full-context end
      emit_step(slot);
      continue;
    }
    // Chosen on the backend (a GPU reads back the id, or the top candidates when sampling;
    // engine/generate.h sample_next). With logprobs the row is on the host already.
    const int32_t token = slot.job->params().top_logprobs < 0 ? sample_next(*slot.session, *slot.sampler, -1)
                                                               : slot.sampler->sample(slot.session->logits(), -1);
    slot.step_out.push_back(token);
    if (token == eos) {  // written, not appended
      emit_step(slot);
      continue;
    }
    sessions[k] = slot.session.get();
    tokens[k] = token;
    batched[k] = &slot;
    ++k;
  }
  if (k == 0) return;
  const Status s = k == 1 ? sessions[0]->decode(tokens[0])
                          : engine_.decode_batch(std::span<Session* const>(sessions, static_cast<size_t>(k)),
                                                 std::span<const int32_t>(tokens, static_cast<size_t>(k)));
  if (k > 1) {
    std::lock_guard<std::mutex> lock(mu_);
    stats_.batched_steps++;
    stats_.batched_rows += k;
  }
  for (int i = 0; i < k; ++i) {
    if (!s.ok()) {
      finish(*batched[i], StopReason::kCancelled, s.message());
    } else {
      emit_step(*batched[i]);
    }
  }
}

void Scheduler::run() {
  std::vector<std::unique_ptr<Slot>> slots;
  while (true) {
    std::vector<std::shared_ptr<Job>> admitted;
    std::vector<std::shared_ptr<Job>> dropped;
    bool quitting = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return quit_ || !queue_.empty() || !slots.empty(); });
      if (quit_) {
        for (auto& j : queue_) j->cancel();  // dropped just below, never admitted
      }
      // Queued jobs whose client went away leave the queue now, not when a slot frees.
      for (auto it = queue_.begin(); it != queue_.end();) {
        if ((*it)->cancelled()) {
          dropped.push_back(std::move(*it));
          it = queue_.erase(it);
        } else {
          ++it;
        }
      }
      while (!queue_.empty() && static_cast<int>(slots.size() + admitted.size()) < options_.max_active) {
        admitted.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      active_ = static_cast<int>(slots.size() + admitted.size());
      quitting = quit_;
    }
    for (auto& job : dropped) {
      JobResult r;
      r.stop = StopReason::kCancelled;
      r.prompt_tokens = static_cast<int>(job->params().prompt.size());
      r.queue_s = now() - job->submitted_at_;
      {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.finished++;
        stats_.cancelled++;
      }
      job->finish(std::move(r));
    }
    for (auto& job : admitted) {
      std::unique_ptr<Slot> slot;
      if (admit(&slot, job)) {
        std::lock_guard<std::mutex> lock(mu_);
        stats_.admitted++;
        slots.push_back(std::move(slot));
      }
    }
    if (quitting) {
      for (auto& slot : slots) slot->job->cancel();
    }
    run_round(slots);
    slots.erase(std::remove_if(slots.begin(), slots.end(),
                               [](const std::unique_ptr<Slot>& s) { return s->done; }),
                slots.end());
    bool done = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      active_ = static_cast<int>(slots.size());
      done = quit_ && slots.empty() && queue_.empty();
    }
    cv_.notify_all();  // stop() waits for the queue to drain
    if (done) return;
  }
}

}  // namespace ds4::server
