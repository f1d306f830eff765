// speculative/runtime.cpp — the DSpark speculative cycle (see runtime.h; dspark.md §2.2-§2.6).
#include "speculative/runtime.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/timer.h"

namespace ds4::speculative {

Status parse_confidence_grid(std::string_view text, std::vector<float>* out) {
  out->clear();
  std::string s(text);
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0.0f && v <= 1.0f)) {
      const size_t index = out->size() + 1;  // 1-based, as a person counts the items
      out->clear();
      return invalid_argument("confidence grid '%s': item %zu '%s' is not a number in [0, 1]",
                              s.c_str(), index, item.c_str());
    }
    out->push_back(v);
    if (out->size() > static_cast<size_t>(kMaxBlockSize)) {
      out->clear();
      return invalid_argument("confidence grid '%s': more than %d values", s.c_str(), kMaxBlockSize);
    }
    i = j + 1;
  }
  return Status();
}

// ---- cost gate ----

void AcceptModel::decay(float keep) {
  draft_n *= keep;
  draft_hit *= keep;
  for (int k = 0; k < kMaxBlockSize; ++k) {
    acc_n[k] *= keep;
    acc_hit[k] *= keep;
    cont_n[k] *= keep;
    cont_hit[k] *= keep;
  }
}

void AcceptModel::note_proposal(bool drafted) {
  draft_n += 1.0f;
  if (drafted) draft_hit += 1.0f;
}

void AcceptModel::note_accept(int k, bool hit) {
  if (k < 0 || k >= kMaxBlockSize) return;
  acc_n[k] += 1.0f;
  if (hit) acc_hit[k] += 1.0f;
}

void AcceptModel::note_cont(int k, bool drafted) {
  if (k < 1 || k >= kMaxBlockSize) return;
  cont_n[k] += 1.0f;
  if (drafted) cont_hit[k] += 1.0f;
}

float AcceptModel::p_draft() const {
  return (draft_hit + kPriorWeight * prior_draft) / (draft_n + kPriorWeight);
}

float AcceptModel::p_accept(int k) const {
  if (k < 0 || k >= kMaxBlockSize) return 0.0f;
  return (acc_hit[k] + kPriorWeight) / (acc_n[k] + kPriorWeight);
}

float AcceptModel::p_cont(int k) const {
  if (k < 1 || k >= kMaxBlockSize) return 0.0f;
  return (cont_hit[k] + kPriorWeight) / (cont_n[k] + kPriorWeight);
}

float LookupModel::q(int l) const {
  const int top = std::clamp(l, 1, kMaxLen);
  float est = base;
  for (int i = 1; i <= top; ++i) {
    const float prior = i <= flat_len ? base : est + kLonger * (1.0f - est);
    est = (hit[i] + kPriorWeight * prior) / (n[i] + kPriorWeight);
  }
  return est;
}

void LookupModel::note(int l, bool accepted, float keep) {
  const int i = std::clamp(l, 1, kMaxLen);
  n[i] = n[i] * keep + 1.0f;
  hit[i] = hit[i] * keep + (accepted ? 1.0f : 0.0f);
}

int best_verify_drafts(const CostModel& c, const float* p, int n, float* gain) {
  int best_m = 1;
  float best = 0.0f, prod = 1.0f, expected = 0.0f;
  for (int m = 2; m <= n; ++m) {
    prod *= p[m - 1];
    expected += prod;  // E[accepted among d_1..d_{m-1}]
    const float g = 1.0f + expected - c.verify(m);
    if (g > best) {
      best = g;
      best_m = m;
    }
  }
  if (gain) *gain = best;
  return best_m;
}

int best_fold_drafts(const CostModel& c, const float* p, int n, float* gain) {
  int best_m = 1;
  float best = 0.0f, prod = 1.0f, expected = 0.0f;
  for (int m = 1; m <= n; ++m) {
    prod *= p[m - 1];
    expected += prod;  // E[accepted among d_0..d_{m-1}]
    const float g = 1.0f + expected - c.verify(m + 1);
    if (m == 1 || g > best) {
      best = g;
      best_m = m;
    }
  }
  if (gain) *gain = n >= 1 ? best : 0.0f;
  return best_m;
}

std::string SpecStats::report() const {
  char buf[2048];
  std::string r;
  const double accept_rate = proposed_tokens ? 100.0 * accepted_draft_tokens / proposed_tokens : 0.0;
  const double avg_accept = cycles ? static_cast<double>(accepted_draft_tokens) / cycles : 0.0;
  std::snprintf(buf, sizeof buf,
                "dspark: cycles=%lld seeds=%lld folded_seeds=%lld proposals=%lld proposed=%lld accepted=%lld "
                "accept_rate=%.1f%% avg_accept=%.3f\n",
                (long long)cycles, (long long)seeds, (long long)folded_seeds, (long long)proposals,
                (long long)proposed_tokens, (long long)accepted_draft_tokens, accept_rate, avg_accept);
  r += buf;
  std::snprintf(buf, sizeof buf,
                "dspark: full=%lld partial=%lld direct_full=%lld direct_partial=%lld replay=%lld miss_first=%lld "
                "no_draft=%lld conf0_rejects=%lld no_room=%lld invalid_draft=%lld\n",
                (long long)full_accepts, (long long)partial_accepts, (long long)direct_full_commits,
                (long long)direct_partial_commits, (long long)replay_fallbacks, (long long)first_misses,
                (long long)no_draft, (long long)conf0_rejects, (long long)no_room, (long long)invalid_draft);
  r += buf;
  std::snprintf(buf, sizeof buf,
                "dspark: scheduler_skips=%lld tail_skips=%lld margin_skips=%lld verify_calls=%lld verify_rows=%lld "
                "single_draft_decodes=%lld cost_skips=%lld cost_probes=%lld cost_trims=%lld cost_unfolds=%lld "
                "overlapped=%lld overlap_discards=%lld overlap_conf0=%lld overlap_discard_conf0=%lld\n",
                (long long)scheduler_skips, (long long)tail_skips, (long long)margin_skips, (long long)verify_calls,
                (long long)verify_rows, (long long)single_draft_decodes, (long long)cost_skips,
                (long long)cost_probes, (long long)cost_trims, (long long)cost_unfolds, (long long)overlapped,
                (long long)overlap_discards, (long long)overlap_conf0, (long long)overlap_discard_conf0);
  r += buf;
  r += "dspark: draft_len_hist=";
  for (int i = 0; i <= kMaxBlockSize; ++i) r += (i ? "," : "") + std::to_string(draft_len_hist[i]);
  r += " accepted_len_hist=";
  for (int i = 0; i <= kMaxBlockSize; ++i) r += (i ? "," : "") + std::to_string(accepted_len_hist[i]);
  r += "\n";
  std::snprintf(buf, sizeof buf,
                "dspark: lookups=%lld lookup_first_misses=%lld lookup_drafts=%lld lookup_accepted=%lld\n",
                (long long)lookups, (long long)lookup_first_misses, (long long)lookup_drafts,
                (long long)lookup_accepted);
  r += buf;
  std::snprintf(buf, sizeof buf,
                "dspark: time_ms total=%.1f decode=%.1f propose=%.1f sync=%.1f verify=%.1f commit=%.1f replay=%.1f\n",
                t_total * 1e3, t_decode * 1e3, t_propose * 1e3, t_sync * 1e3, t_verify * 1e3, t_commit * 1e3,
                t_replay * 1e3);
  r += buf;
  return r;
}

// ---- DSparkProposer ----

DSparkProposer::DSparkProposer(Drafter& drafter) : d_(drafter) {
  cap_ = d_.config().window + 2 * session::kMaxBatchRows;
  width_ = d_.capture_width();
  buf_.assign(static_cast<size_t>(cap_ * width_), 0.0f);
  tag_.assign(static_cast<size_t>(cap_), -1);
}

void DSparkProposer::on_capture(int64_t pos, std::span<const float> hidden) {
  if (static_cast<int64_t>(hidden.size()) != width_) return;  // capture layers changed under us
  if (pos < d_.ring_next()) d_.ring_truncate(pos);            // the timeline went back
  const int64_t slot = pos % cap_;
  std::memcpy(buf_.data() + slot * width_, hidden.data(), sizeof(float) * width_);
  tag_[slot] = pos;
}

void DSparkProposer::sync(int64_t n) {
  if (n < d_.ring_next()) d_.ring_truncate(n);
  const int64_t start = std::max<int64_t>(d_.ring_next(), n - d_.config().window);
  int64_t first = n;
  while (first > start && tag_[(first - 1) % cap_] == first - 1) --first;
  // Rows [first, n) are captured and committed; a missing row before them is a gap, which
  // commit_rows() turns into a ring reset.
  for (int64_t p = first; p < n;) {
    const int64_t slot = p % cap_;
    const int64_t run = std::min(n - p, cap_ - slot);
    d_.commit_rows(p, static_cast<int>(run), buf_.data() + slot * width_);
    p += run;
  }
}

void DSparkProposer::propose(int32_t anchor, int64_t pos, int n_max, std::span<const float> thr, Proposal* out) {
  d_.propose(anchor, pos, n_max, thr, out);
}

// ---- Runtime ----

Runtime::Runtime(session::ModelSession& s, Proposer& p, SpecConfig cfg) : s_(s), p_(p), cfg_(std::move(cfg)) {
  // Auto: without the cost gate on 2 threads (runtime.h "Overlap": under the gate at 2-thread
  // prices it lost up to 2.5%), or under the gate when the prices say the pair is free.
  const bool free_prices = cfg_.cost_gate && cfg_.cost_draft_overlap <= kFreeOverlapCost &&
                           cfg_.cost_draft_reject_overlap <= kFreeOverlapCost;
  const int n_threads = s_.backend().n_threads();
  overlap_on_ = cfg_.overlap > 0 ||
                (cfg_.overlap < 0 && ((n_threads == 2 && !cfg_.cost_gate) || (n_threads >= 2 && free_prices)));
  free_overlap_ = overlap_on_ && free_prices;
  if (cfg_.lookup) lookup_.reserve(s_.n_ctx());  // no allocation in the cycles
  reset_lookup_models();
  std::vector<int> layers = p_.capture_layers();
  if (!layers.empty()) {
    s_.set_capture_layers(layers);
    Proposer* prop = &p_;
    s_.set_capture_sink([prop](int64_t pos, std::span<const float> hidden) { prop->on_capture(pos, hidden); });
  }
}

Runtime::~Runtime() {
  if (cfg_.stats && stats_.cycles > 0) std::fputs(report().c_str(), stderr);  // DS4_DSPARK_STATS
  if (!p_.capture_layers().empty()) {
    s_.set_capture_sink({});
    s_.set_capture_layers({});
  }
}

std::string Runtime::report() const {
  char buf[192];
  std::snprintf(buf, sizeof buf,
                "dspark: policy fold=%d grid=%d backoff=%d margin=%g cost_gate=%d scheduler=%d overlap=%d "
                "fold_partial=%d lookup=%d\n",
                cfg_.fold ? 1 : 0, static_cast<int>(cfg_.confidence_grid.size()), cfg_.backoff ? 1 : 0,
                static_cast<double>(cfg_.margin_gate), cfg_.cost_gate ? 1 : 0, cfg_.scheduler ? 1 : 0,
                overlap_on_ ? 1 : 0, cfg_.fold && cfg_.fold_after_partial ? 1 : 0,
                cfg_.lookup ? 1 : 0);
  return buf + stats_.report();
}

void Runtime::reset_policy() {
  fold_armed_ = false;
  pause_ = 0;
  win_cycles_ = win_accepted_ = win_no_draft_ = 0;
  streak_ = 0;
  d0_hits_ = 0;
  for (int i = 0; i < 2 * kMarginBuckets; ++i) am_[i] = AcceptModel(i < kMarginBuckets ? kColdPrior : kWarmPrior);
  state_ = 0;
  prev_warm_ = false;
  warm_ = false;
  since_proposal_ = kProbeGapMin;  // a first probe at once (header: "Probe ladder")
  probe_gap_ = kProbeGapMin;
  probing_ = false;
  overlap_passes_ = kOverlapMinPasses;
  reset_lookup_models();
  lk_ = 0;
}

void Runtime::reset_lookup_models() {
  for (int i = 0; i < 2 * kMarginBuckets; ++i) {
    lkm_[i] = LookupModel();
    if (i >= kMarginBuckets) {
      lkm_[i].base = LookupModel::kContPrior;
      lkm_[i].flat_len = LookupModel::kContFlatLen;
    }
  }
}

CostModel Runtime::cost_model(bool overlapped) const {
  CostModel c;
  c.verify_base = cfg_.cost_verify_base;
  c.verify_row = cfg_.cost_verify_row;
  const bool ov = overlapped && overlap_on_;
  c.draft = ov ? cfg_.cost_draft_overlap : cfg_.cost_draft;
  c.draft_reject = ov ? cfg_.cost_draft_reject_overlap : cfg_.cost_draft_reject;
  return c;
}

// p[0] = P(d_0 accepted); p[k] = P(d_k accepted | d_{k-1} accepted), times P(d_k drafted)
// when with_cont (before the proposal, when its length is not known yet).
void Runtime::fill_accept(float* p, int n, bool with_cont) const {
  for (int k = 0; k < n; ++k) {
    p[k] = am().p_accept(k);
    if (with_cont && k > 0) p[k] *= am().p_cont(k);
  }
}

float Runtime::proposal_value(int n_allow, bool folding, bool overlapped) const {
  const CostModel c = cost_model(overlapped);
  float p[kMaxBlockSize];
  n_allow = std::min(n_allow, kMaxBlockSize);
  fill_accept(p, n_allow, true);
  float verify_gain = 0.0f;
  best_verify_drafts(c, p, n_allow, &verify_gain);
  float post = p[0] * verify_gain;
  if (folding) {
    float fold_gain = 0.0f;
    best_fold_drafts(c, p, n_allow, &fold_gain);
    post = std::max(post, fold_gain);
  }
  const float pd = am().p_draft();
  return pd * (post - c.draft) - (1.0f - pd) * c.draft_reject;
}

int Runtime::margin_bucket(float margin) {
  if (!(margin >= 2.0f)) return 0;
  if (margin < 4.0f) return 1;
  if (margin < 8.0f) return 2;
  return 3;
}

// The probe ladder: a productive cycle (every verified draft kept) brings the probe gap back
// to its minimum; an unproductive probe doubles it (bounded).
void Runtime::note_probe(bool productive) {
  if (productive) {
    probe_gap_ = kProbeGapMin;
  } else if (probing_) {
    probe_gap_ = std::min(kProbeGapMax, 2 * probe_gap_);
  }
}

void Runtime::note_checked(int first, int m, int accepted, int n_drafted, int n_allow) {
  for (int k = first; k < m; ++k) {
    am().note_accept(k, k < accepted);
    if (k >= accepted) break;
  }
  for (int k = 1; k <= accepted; ++k) {
    if (k < n_allow) am().note_cont(k, k < n_drafted);
  }
}

void Runtime::note_d0(bool hit) {
  d0_hits_ = ((d0_hits_ << 1) | (hit ? 1u : 0u)) & 0xffu;
}

bool Runtime::fold_after_partial_open() const {
  return cfg_.fold && cfg_.fold_after_partial && std::popcount(d0_hits_) >= cfg_.fold_partial_min_hits;
}

int32_t Runtime::choose(std::span<const float> logits) const {
  return top_two(logits, banned_).id;
}

const TopTwo& Runtime::top() {
  if (top_epoch_ != s_.logits_epoch() || top_banned_ != banned_) {
    top_ = top_two(s_.logits(), banned_);
    top_epoch_ = s_.logits_epoch();
    top_banned_ = banned_;
  }
  return top_;
}

int32_t Runtime::row_choice(const session::RowResult& r) const {
  const int32_t a = r.argmax;
  if (a < 0 || static_cast<size_t>(a) >= r.logits.size() || a == banned_ || std::isnan(r.logits[static_cast<size_t>(a)])) {
    return choose(r.logits);
  }
  return a;
}

void Runtime::thresholds(float* thr, int n) const {
  for (int k = 0; k < n; ++k) {
    float t = cfg_.confidence_grid.empty() ? cfg_.confidence : threshold_at(cfg_.confidence_grid, k);
    if (k == 0 && cfg_.backoff) t += std::min(0.20f, 0.05f * static_cast<float>(streak_));
    thr[k] = t;
  }
}

int Runtime::clean_drafts(Proposal& p) const {
  const int32_t V = static_cast<int32_t>(s_.config().n_vocab);
  for (int k = 0; k < p.n; ++k) {
    const int32_t t = p.tokens[k];
    if (t < 0 || t >= V || t == stop_ || t == banned_) {
      p.n = k;
      break;
    }
  }
  return p.n;
}

// One proposal from the seed at position L (ring synced to the committed rows first), drafts
// cleaned of invalid/banned/stop ids; counts it in the stats. Returns the number of drafts.
int Runtime::propose_drafts(int32_t seed, int64_t L, int n_allow) {
  {
    Timer t;
    p_.sync(L);
    stats_.t_sync += t.seconds();
  }
  float thr[kMaxBlockSize];
  thresholds(thr, n_allow);
  {
    Timer t;
    p_.propose(seed, L, n_allow, std::span<const float>(thr, n_allow), &prop_);
    stats_.t_propose += t.seconds();
  }
  return finish_proposal();
}

int Runtime::finish_proposal() {
  ++stats_.proposals;
  if (prop_.conf0_rejected) ++stats_.conf0_rejects;
  const int raw_n = prop_.n;
  const int n = clean_drafts(prop_);
  if (n < raw_n) ++stats_.invalid_draft;
  ++stats_.draft_len_hist[n];
  am().decay(1.0f - 1.0f / static_cast<float>(std::max(1, cfg_.cost_window)));
  am().note_proposal(n > 0);
  since_proposal_ = 0;
  return n;
}

// The pair: task a decodes the seed (target session), task b proposes from it (drafter). They
// share no mutable state: the decode's capture of row L goes to the proposer's capture buffer,
// which propose() does not read; propose() reads the ring, synced to L beforehand.
Status Runtime::decode_with_proposal(int32_t seed, int64_t L, int n_allow) {
  {
    Timer t;
    p_.sync(L);
    stats_.t_sync += t.seconds();
  }
  struct Pair {
    Runtime* rt;
    int32_t seed;
    int64_t L;
    int n_allow;
    float thr[kMaxBlockSize];
    Status decoded;
  } pair{this, seed, L, n_allow, {}, Status()};
  thresholds(pair.thr, n_allow);
  const backend::Task decode{[](void* c) {
                               auto* q = static_cast<Pair*>(c);
                               q->decoded = q->rt->s_.decode(q->seed);
                             },
                             &pair};
  const backend::Task propose{[](void* c) {
                                auto* q = static_cast<Pair*>(c);
                                q->rt->p_.propose(q->seed, q->L, q->n_allow,
                                                  std::span<const float>(q->thr, q->n_allow), &q->rt->prop_);
                              },
                              &pair};
  Timer t;
  s_.backend().run_pair(decode, propose);
  stats_.t_decode += t.seconds();
  ++stats_.overlapped;
  if (prop_.conf0_rejected) ++stats_.overlap_conf0;
  return pair.decoded;
}

bool Runtime::scheduler_paused() {
  if (pause_ > 0) {
    --pause_;
    return true;
  }
  return false;
}

// Window logic of dspark.md §2.5 on counters only, plus the optional backoff ladder.
void Runtime::scheduler_note(bool drafted, int accepted) {
  if (accepted > 0) {
    streak_ = 0;
  } else {
    streak_ = std::min(streak_ + 1, 16);
  }
  if (!cfg_.scheduler) return;
  const int mult = cfg_.backoff && streak_ > 0 ? std::min(8, 1 << std::min(streak_ - 1, 3)) : 1;
  ++win_cycles_;
  win_accepted_ += accepted;
  if (!drafted) {
    ++win_no_draft_;
    if (cfg_.no_draft_skip > 0) pause_ = std::max(pause_, cfg_.no_draft_skip * mult);
  }
  if (win_cycles_ >= std::max(1, cfg_.sched_window)) {
    int p = 0;
    if (2 * win_no_draft_ >= win_cycles_) {
      p = cfg_.sched_slow_skip;
    } else if (static_cast<float>(win_accepted_) < cfg_.sched_min_avg * static_cast<float>(win_cycles_)) {
      p = cfg_.sched_skip;
    }
    pause_ = std::max(pause_, p * mult);
    win_cycles_ = win_accepted_ = win_no_draft_ = 0;
  }
}

Status Runtime::commit(int keep, int rows, const int32_t* toks) {
  Timer t;
  if (keep == rows) {
    ++stats_.direct_full_commits;
    return Status();
  }
  if (!cfg_.replay) {
    // Prefix slots. No checkpoint was taken (a checkpoint copies every compressor state and
    // the logits, ~0.5 MB on the tiny model: 25-30 us per verify on the 2-core Zen 4; on the
    // 16-thread Xeon dropping it took the DSpark time outside decode/verify/propose from
    // 2.0-2.8% to 0.9-1.3%), so a refusal here is returned, not replayed: commit_prefix
    // refuses only a call that breaks its contract (no verify before it, k out of range).
    DS4_RETURN_IF_ERROR(s_.commit_prefix(keep));
    ++stats_.direct_partial_commits;
    stats_.t_commit += t.seconds();
    return Status();
  }
  // Replay: back to the pre-verify checkpoint, then ordinary decodes of the kept rows.
  s_.rollback();
  for (int j = 0; j < keep; ++j) DS4_RETURN_IF_ERROR(s_.decode(toks[j]));
  ++stats_.replay_fallbacks;
  stats_.t_replay += t.seconds();
  return Status();
}

Status Runtime::step(int max_new, int32_t stop_token, int32_t banned_token, std::vector<int32_t>* out) {
  out->clear();
  if (s_.n_tokens() >= s_.n_ctx()) return Status();
  if (max_new < 1) return invalid_argument("speculative step: token budget must be >= 1, got %d", max_new);
  if (s_.logits().empty()) return invalid_argument("speculative step: no logits (prefill a prompt first)");
  stop_ = stop_token;
  banned_ = banned_token;
  Timer t;
  ++stats_.cycles;
  // Cost gate state: warm = the previous cycle's proposal kept every draft it verified.
  prev_warm_ = warm_;
  warm_ = false;
  state_ = prev_warm_ ? kMarginBuckets : 0;  // the margin bucket is added where the gate decides
  probing_ = false;
  lk_ = 0;
  if (since_proposal_ < (1 << 30)) ++since_proposal_;
  const int32_t seed = top().id;  // fused with the margin the gates read: one pass per logits
  Status st;
  if (seed == stop_) {
    out->push_back(seed);
  } else {
    bool handled = false;
    if (fold_armed_) st = fold_cycle(seed, max_new, out, &handled);
    if (st.ok() && !handled) st = standalone(seed, max_new, out);
  }
  stats_.t_total += t.seconds();
  return st;
}

Status Runtime::standalone(int32_t seed, int max_new, std::vector<int32_t>* out, bool have_proposal) {
  const int64_t L = s_.n_tokens();
  const int64_t room = s_.n_ctx() - (L + 1);
  int n_allow = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(max_new) - 1, room,
                                                    static_cast<int64_t>(p_.block_size()),
                                                    static_cast<int64_t>(session::kMaxBatchRows)}));
  if (cfg_.max_draft > 0) n_allow = std::min(n_allow, cfg_.max_draft);
  bool want = true;
  bool can_lookup = false;  // the lookup ignores the scheduler's pause (it costs no proposal)
  if (have_proposal) {
    // A fold cycle's proposal of this seed (its gates already passed; fold proposals are never
    // margin gated).
  } else if (n_allow < 1) {
    ++stats_.no_room;
    want = false;
  } else if (cfg_.tail_min_tokens > 0 && max_new < cfg_.tail_min_tokens) {
    ++stats_.tail_skips;
    want = false;
  } else {
    can_lookup = cfg_.lookup;
    if (!free_overlap_ && scheduler_paused()) {
      ++stats_.scheduler_skips;
      want = false;
    }
  }
  // Overlap: propose while the seed decodes when the gates are predicted to pass (header), or
  // always when the pair is free.
  const bool pending =
      want && !have_proposal && overlap_on_ && (free_overlap_ || overlap_passes_ >= kOverlapMinPasses);
  if (pending) {
    DS4_RETURN_IF_ERROR(decode_with_proposal(seed, L, n_allow));
  } else {
    Timer t;
    DS4_RETURN_IF_ERROR(s_.decode(seed));
    stats_.t_decode += t.seconds();
  }
  out->push_back(seed);
  ++stats_.seeds;
  // Lookup first: its d_0 is checked for free against the seed's logits; on a hit its drafts
  // are verified (an overlapped DSpark proposal is dropped uncounted, as when a gate says no),
  // on a miss the cycle goes on as if there had been no lookup.
  if (can_lookup) {
    Proposal overlapped;
    if (pending) overlapped = prop_;
    const int n = propose_lookup({}, max_new);
    if (n > 0) {
      count_lookup(1);  // d_0 is checked; the rest count when verified
      const bool hit = top().id == prop_.tokens[0];
      note_lookup(0, 1, hit ? 1 : 0);
      if (hit) {
        if (pending) {
          ++stats_.overlap_discards;
          if (overlapped.conf0_rejected) ++stats_.overlap_discard_conf0;
        }
        return verify_after_hit(n, n, n_allow, out);
      }
      ++stats_.lookup_first_misses;
      lk_ = 0;
    }
    if (pending) prop_ = overlapped;
  }
  if (!want) return Status();
  // A gate below says no: the cycle stays plain (an overlapped proposal is dropped uncounted).
  auto gated_out = [&] {
    overlap_passes_ = 0;
    if (pending) {
      ++stats_.overlap_discards;
      if (prop_.conf0_rejected) ++stats_.overlap_discard_conf0;
    }
  };

  if (!have_proposal && (cfg_.margin_gate > 0.0f || cfg_.cost_gate)) {
    const float margin = top().margin;
    if (cfg_.margin_gate > 0.0f && margin < cfg_.margin_gate && !free_overlap_) {
      ++stats_.margin_skips;
      gated_out();
      return Status();
    }
    state_ = (prev_warm_ ? kMarginBuckets : 0) + margin_bucket(margin);
    margin_ = margin;
  }
  if (!have_proposal && cfg_.cost_gate && !(proposal_value(n_allow, false, pending) > 0.0f)) {
    if (prev_warm_ || since_proposal_ < probe_gap_ || !(margin_ >= cfg_.cost_probe_margin)) {
      ++stats_.cost_skips;  // a plain cycle: the drafter's ring catches up at the next proposal
      gated_out();
      return Status();
    }
    probing_ = true;  // cold and the probe gap has passed: propose anyway, to keep learning
    ++stats_.cost_probes;
  }
  if (!have_proposal) overlap_passes_ = std::min(overlap_passes_ + 1, kOverlapMinPasses);
  const int n_drafted = have_proposal ? prop_.n : pending ? finish_proposal() : propose_drafts(seed, L, n_allow);
  if (n_drafted == 0) {
    ++stats_.no_draft;
    note_probe(false);
    scheduler_note(false, 0);
    return Status();
  }
  stats_.proposed_tokens += n_drafted;
  // Free check: the seed's logits already say whether d_0 is right.
  const bool d0_hit = top().id == prop_.tokens[0];
  note_d0(d0_hit);
  if (!d0_hit) {
    ++stats_.first_misses;
    ++stats_.accepted_len_hist[0];
    am().note_accept(0, false);
    note_probe(false);
    scheduler_note(true, 0);
    return Status();
  }
  am().note_accept(0, true);
  return verify_after_hit(n_drafted, n_drafted, n_allow, out);
}

int Runtime::propose_lookup(std::span<const int32_t> tail, int max_new) {
  // Not bound to the drafter's block: the verify batch (tail rows included) up to
  // kMaxBatchRows, within the token budget and the context.
  const int64_t room = s_.n_ctx() - (s_.n_tokens() + static_cast<int64_t>(tail.size()));
  int n_allow = static_cast<int>(std::min<int64_t>(
      {static_cast<int64_t>(max_new) - 1, room, static_cast<int64_t>(session::kMaxBatchRows) - static_cast<int64_t>(tail.size())}));
  if (cfg_.max_draft > 0) n_allow = std::min(n_allow, cfg_.max_draft);
  if (n_allow < 1) return lk_ = 0;
  lookup_.update(s_.tokens());
  int n = 0;
  const int k = lookup_.lookup(s_.tokens(), tail, std::min(n_allow, kMaxBlockSize), prop_.tokens, &n);
  prop_.n = n;
  prop_.conf0_rejected = false;
  prop_.no_context = false;
  n = k > 0 ? clean_drafts(prop_) : 0;
  lk_ = n > 0 ? k : 0;
  lk_bucket_ = margin_bucket(top().margin);
  return n;
}

void Runtime::fill_checked(float* p, int n) const {
  if (lk_ == 0) return fill_accept(p, n, false);
  for (int j = 0; j < n; ++j) p[j] = lkm_[lk_table(j)].q(lk_ + j);
}

void Runtime::note_lookup(int first, int m, int accepted) {
  const float keep = 1.0f - 1.0f / static_cast<float>(std::max(1, cfg_.cost_window));
  for (int j = first; j < m; ++j) {
    lkm_[lk_table(j)].note(lk_ + j, j < accepted, keep);
    if (j >= accepted) break;
  }
}

void Runtime::count_lookup(int n) {
  ++stats_.lookups;
  stats_.proposed_tokens += n;
  stats_.lookup_drafts += n;
}

Status Runtime::verify_after_hit(int n, int n_drafted, int n_allow, std::vector<int32_t>* out) {
  const bool from_lookup = lk_ > 0;
  if (cfg_.cost_gate && n > 1) {
    float p[kMaxBlockSize];
    fill_checked(p, n);
    const int m = best_verify_drafts(cost_model(), p, n, nullptr);
    if (m < n) {
      ++stats_.cost_trims;
      n = m;
    }
  }
  if (from_lookup) {
    stats_.proposed_tokens += n - 1;
    stats_.lookup_drafts += n - 1;
  }
  int accepted = 1;
  if (n == 1) {
    // Single-draft shortcut: nothing left to check, an ordinary decode commits it.
    Timer t;
    DS4_RETURN_IF_ERROR(s_.decode(prop_.tokens[0]));
    stats_.t_decode += t.seconds();
    ++stats_.single_draft_decodes;
  } else {
    for (int i = 0; i < n; ++i) rows_[i] = prop_.tokens[i];
    if (cfg_.replay) s_.checkpoint();  // commit(): only replay rolls back
    Timer t;
    auto rows = s_.verify(std::span<const int32_t>(rows_, n));
    if (!rows.ok()) return rows.status();
    stats_.t_verify += t.seconds();
    ++stats_.verify_calls;
    stats_.verify_rows += n;
    for (int i = 1; i < n; ++i) {
      if (row_choice((*rows)[i - 1]) != rows_[i]) break;
      ++accepted;
    }
    DS4_RETURN_IF_ERROR(commit(accepted, n, rows_));
  }
  if (from_lookup) {
    note_lookup(1, n, accepted);
  } else {
    note_checked(1, n, accepted, n_drafted, n_allow);
  }
  for (int i = 0; i < accepted; ++i) out->push_back(prop_.tokens[i]);
  stats_.accepted_draft_tokens += accepted;
  if (from_lookup) stats_.lookup_accepted += accepted;
  ++stats_.accepted_len_hist[accepted];
  if (accepted == n) {
    ++stats_.full_accepts;
    fold_armed_ = cfg_.fold;
  } else {
    ++stats_.partial_accepts;
    // The verify rows of the kept drafts were captured and are committed: the ring ends at the
    // next seed's position - 1 and the seed's logits are in hand, so the next cycle may fold.
    fold_armed_ = fold_after_partial_open();
  }
  // The DSpark state, the probe ladder and the scheduler follow the drafter's proposals only.
  if (from_lookup) return Status();
  // Warm = a full accept of >= 2 drafts (one kept draft earns nothing): follow the streak.
  warm_ = accepted == n && n >= 2;
  note_probe(warm_);
  scheduler_note(true, accepted);
  return Status();
}

Status Runtime::fold_cycle(int32_t seed, int max_new, std::vector<int32_t>* out, bool* handled) {
  *handled = false;
  const int64_t L = s_.n_tokens();
  const int64_t room = s_.n_ctx() - (L + 1);
  int n_allow = static_cast<int>(std::min<int64_t>({static_cast<int64_t>(max_new) - 1, room,
                                                    static_cast<int64_t>(p_.block_size()),
                                                    static_cast<int64_t>(session::kMaxBatchRows - 1)}));
  if (cfg_.max_draft > 0) n_allow = std::min(n_allow, cfg_.max_draft);
  if (n_allow < 1 || (cfg_.tail_min_tokens > 0 && max_new < cfg_.tail_min_tokens) || pause_ > 0) {
    fold_armed_ = false;  // the standalone path counts and handles this cycle
    return Status();
  }
  // The DSpark proposal's expected value (cost gate; margin of the seed's row, the row after it
  // is not computed yet).
  float dspark_value = 0.0f;
  if (cfg_.cost_gate) {
    state_ = (prev_warm_ ? kMarginBuckets : 0) + margin_bucket(top().margin);
    dspark_value = proposal_value(n_allow, true, false);
  }
  if (cfg_.lookup) {
    const int32_t tail[1] = {seed};
    const int n = propose_lookup(tail, max_new);
    if (n > 0) {
      // Fold the lookup's drafts when that is worth more than DSpark's proposal and than the
      // standalone path, where the lookup's d_0 is checked for free.
      int m = n;
      bool use = true;
      if (cfg_.cost_gate) {
        const CostModel c = cost_model();
        float p[kMaxBlockSize];
        fill_checked(p, n);
        float fold_gain = 0.0f, verify_gain = 0.0f;
        m = best_fold_drafts(c, p, n, &fold_gain);
        best_verify_drafts(c, p, n, &verify_gain);
        use = fold_gain > 0.0f && fold_gain >= dspark_value && fold_gain >= p[0] * verify_gain;
        if (use && m < n) ++stats_.cost_trims;
        if (!use && p[0] * verify_gain > std::max(fold_gain, dspark_value)) {
          ++stats_.cost_unfolds;
          lk_ = 0;
          fold_armed_ = false;  // the standalone path checks the lookup's d_0 for free
          return Status();
        }
      }
      if (use) {
        *handled = true;
        ++stats_.seeds;
        count_lookup(m);
        return fold_verify(seed, m, n, n_allow, out);
      }
      lk_ = 0;
    }
  }
  if (cfg_.cost_gate && !(dspark_value > 0.0f)) {
    fold_armed_ = false;  // the standalone path decides (and counts) this cycle
    return Status();
  }
  *handled = true;
  const int n_drafted = propose_drafts(seed, L, n_allow);
  int n = n_drafted;
  if (n > 0 && cfg_.cost_gate) {
    // Fold [seed, d_0..d_{m-1}] or decode the seed and free-check d_0 (same proposal)?
    const CostModel c = cost_model();
    float p[kMaxBlockSize];
    fill_accept(p, n, false);
    float fold_gain = 0.0f, verify_gain = 0.0f;
    const int m = best_fold_drafts(c, p, n, &fold_gain);
    best_verify_drafts(c, p, n, &verify_gain);
    if (p[0] * verify_gain > fold_gain) {
      ++stats_.cost_unfolds;
      fold_armed_ = false;
      return standalone(seed, max_new, out, /*have_proposal=*/true);
    }
    if (m < n) {
      ++stats_.cost_trims;
      n = m;
    }
  }
  ++stats_.seeds;
  if (n == 0) {
    ++stats_.no_draft;
    fold_armed_ = false;
    scheduler_note(false, 0);
    Timer t;
    DS4_RETURN_IF_ERROR(s_.decode(seed));
    stats_.t_decode += t.seconds();
    out->push_back(seed);
    return Status();
  }
  stats_.proposed_tokens += n;
  return fold_verify(seed, n, n_drafted, n_allow, out);
}

Status Runtime::fold_verify(int32_t seed, int n, int n_drafted, int n_allow, std::vector<int32_t>* out) {
  const bool from_lookup = lk_ > 0;
  ++stats_.folded_seeds;
  rows_[0] = seed;
  for (int i = 0; i < n; ++i) rows_[i + 1] = prop_.tokens[i];
  if (cfg_.replay) s_.checkpoint();  // commit(): only replay rolls back
  int accepted = 0;
  {
    Timer t;
    auto rows = s_.verify(std::span<const int32_t>(rows_, n + 1));
    if (!rows.ok()) return rows.status();
    stats_.t_verify += t.seconds();
    ++stats_.verify_calls;
    stats_.verify_rows += n + 1;
    for (int i = 0; i < n; ++i) {
      if (row_choice((*rows)[i]) != rows_[i + 1]) break;
      ++accepted;
    }
  }
  note_d0(accepted > 0);
  DS4_RETURN_IF_ERROR(commit(1 + accepted, n + 1, rows_));
  if (from_lookup) {
    note_lookup(0, n, accepted);
  } else {
    note_checked(0, n, accepted, n_drafted, n_allow);
  }
  for (int i = 0; i <= accepted; ++i) out->push_back(rows_[i]);
  stats_.accepted_draft_tokens += accepted;
  ++stats_.accepted_len_hist[accepted];
  if (accepted == 0) ++stats_.first_misses;
  if (from_lookup) {
    stats_.lookup_accepted += accepted;
    if (accepted == 0) ++stats_.lookup_first_misses;
  } else {
    warm_ = accepted == n && n >= 2;
    note_probe(warm_);
  }
  if (accepted == n) {
    ++stats_.full_accepts;
  } else if (accepted > 0) {
    ++stats_.partial_accepts;
    fold_armed_ = fold_after_partial_open();  // rows L..L+accepted captured by this verify
  } else {
    fold_armed_ = false;  // d_0 miss: the next seed decodes standalone (free check again)
  }
  if (!from_lookup) scheduler_note(true, accepted);
  return Status();
}

}  // namespace ds4::speculative
