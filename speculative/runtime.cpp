// speculative/runtime.cpp — the DSpark speculative cycle (see runtime.h; dspark.md §2.2-§2.6).
#include "speculative/runtime.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/timer.h"

namespace ds4::speculative {

Runtime::Runtime(session::ModelSession& s, Proposer& p, SpecConfig cfg)
    : s_(s),
      p_(p),
      cfg_(std::move(cfg)),
      sched_(cfg_),
      margin_gate_(cfg_.margin_gate),
      cost_(cfg_),
      lookup_policy_(cfg_),
      fold_(cfg_),
      overlap_(cfg_, s.backend().n_threads()) {
  if (cfg_.lookup) lookup_.reserve(s_.n_ctx());  // no allocation in the cycles
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
                overlap_.on() ? 1 : 0, cfg_.fold && cfg_.fold_after_partial ? 1 : 0,
                cfg_.lookup ? 1 : 0);
  return buf + stats_.report();
}

void Runtime::reset_policy() {
  fold_.reset();
  sched_.reset();
  cost_.reset();
  overlap_.reset();
  lookup_policy_.reset();
}

const TopTwo& Runtime::top() {
  if (top_epoch_ != s_.logits_epoch() || top_banned_ != banned_) {
    top_ = s_.top_two_token(banned_);
    top_epoch_ = s_.logits_epoch();
    top_banned_ = banned_;
  }
  return top_;
}

void Runtime::seed_top(const session::RowResult& r) {
  top_ = TopTwo{r.argmax, r.margin};
  top_epoch_ = s_.logits_epoch();
  top_banned_ = banned_;
}

Expected<std::span<const session::RowResult>> Runtime::verify_rows(int n) {
  return s_.verify(std::span<const int32_t>(rows_, n), banned_, /*read_logits=*/false);
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
  sched_.thresholds(thr, n_allow);
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
  cost_.note_proposal(n > 0);
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
  sched_.thresholds(pair.thr, n_allow);
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

Status Runtime::commit(int keep, int rows, const int32_t* toks) {
  Timer t;
  if (keep == rows) {
    ++stats_.direct_full_commits;
    return Status();
  }
  if (!cfg_.replay) {
    // Prefix slots. No checkpoint was taken (it copies every compressor state and the logits,
    // which cost more than the prefix commit), so a refusal here is returned, not replayed:
    // commit_prefix refuses only a call that breaks its contract (no verify before it, k out
    // of range).
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
  if (!s_.has_logits()) return invalid_argument("speculative step: no logits (prefill a prompt first)");
  stop_ = stop_token;
  banned_ = banned_token;
  Timer t;
  ++stats_.cycles;
  cost_.begin_cycle();  // the margin bucket is added where the gate decides
  lookup_policy_.clear();
  const int32_t seed = top().id;  // fused with the margin the gates read: one pass per logits
  Status st;
  if (seed == stop_) {
    out->push_back(seed);
  } else {
    bool handled = false;
    if (fold_.armed()) st = fold_cycle(seed, max_new, out, &handled);
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
    if (!overlap_.free() && sched_.take_pause()) {
      ++stats_.scheduler_skips;
      want = false;
    }
  }
  // Overlap: propose while the seed decodes when the gates are predicted to pass, or always
  // when the pair is free.
  const bool pending = want && !have_proposal && overlap_.predict();
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
      lookup_policy_.note(0, 1, hit ? 1 : 0);
      if (hit) {
        if (pending) {
          ++stats_.overlap_discards;
          if (overlapped.conf0_rejected) ++stats_.overlap_discard_conf0;
        }
        return verify_after_hit(n, n, n_allow, out);
      }
      ++stats_.lookup_first_misses;
      lookup_policy_.clear();
    }
    if (pending) prop_ = overlapped;
  }
  if (!want) return Status();
  // A gate below says no: the cycle stays plain (an overlapped proposal is dropped uncounted).
  auto gated_out = [&] {
    overlap_.note_gated();
    if (pending) {
      ++stats_.overlap_discards;
      if (prop_.conf0_rejected) ++stats_.overlap_discard_conf0;
    }
  };

  if (!have_proposal && (margin_gate_.on() || cfg_.cost_gate)) {
    const float margin = top().margin;
    if (margin_gate_.closed(margin) && !overlap_.free()) {
      ++stats_.margin_skips;
      gated_out();
      return Status();
    }
    cost_.observe_margin(margin);
  }
  if (!have_proposal && cfg_.cost_gate) {
    const CostGate::Decision d = cost_.decide(n_allow, pending);
    if (d == CostGate::Decision::kSkip) {
      ++stats_.cost_skips;  // a plain cycle: the drafter's ring catches up at the next proposal
      gated_out();
      return Status();
    }
    if (d == CostGate::Decision::kProbe) ++stats_.cost_probes;
  }
  if (!have_proposal) overlap_.note_passed();
  const int n_drafted = have_proposal ? prop_.n : pending ? finish_proposal() : propose_drafts(seed, L, n_allow);
  if (n_drafted == 0) {
    ++stats_.no_draft;
    cost_.note_unproductive();
    sched_.note(false, 0);
    return Status();
  }
  stats_.proposed_tokens += n_drafted;
  // Free check: the seed's logits already say whether d_0 is right.
  const bool d0_hit = top().id == prop_.tokens[0];
  fold_.note_d0(d0_hit);
  if (!d0_hit) {
    ++stats_.first_misses;
    ++stats_.accepted_len_hist[0];
    cost_.note_accept(0, false);
    cost_.note_unproductive();
    sched_.note(true, 0);
    return Status();
  }
  cost_.note_accept(0, true);
  return verify_after_hit(n_drafted, n_drafted, n_allow, out);
}

int Runtime::propose_lookup(std::span<const int32_t> tail, int max_new) {
  // Not bound to the drafter's block: the verify batch (tail rows included) up to
  // kMaxBatchRows, within the token budget and the context.
  const int64_t room = s_.n_ctx() - (s_.n_tokens() + static_cast<int64_t>(tail.size()));
  int n_allow = static_cast<int>(std::min<int64_t>(
      {static_cast<int64_t>(max_new) - 1, room, static_cast<int64_t>(session::kMaxBatchRows) - static_cast<int64_t>(tail.size())}));
  if (cfg_.max_draft > 0) n_allow = std::min(n_allow, cfg_.max_draft);
  if (n_allow < 1) {
    lookup_policy_.clear();
    return 0;
  }
  lookup_.update(s_.tokens());
  int n = 0;
  const int k = lookup_.lookup(s_.tokens(), tail, std::min(n_allow, kMaxBlockSize), prop_.tokens, &n);
  prop_.n = n;
  prop_.conf0_rejected = false;
  prop_.no_context = false;
  n = k > 0 ? clean_drafts(prop_) : 0;
  lookup_policy_.begin(n > 0 ? k : 0, MarginGate::bucket(top().margin));
  return n;
}

void Runtime::fill_checked(float* p, int n) const {
  if (lookup_policy_.active()) {
    lookup_policy_.fill(p, n);
  } else {
    cost_.fill_accept(p, n, false);
  }
}

void Runtime::count_lookup(int n) {
  ++stats_.lookups;
  stats_.proposed_tokens += n;
  stats_.lookup_drafts += n;
}

Status Runtime::verify_after_hit(int n, int n_drafted, int n_allow, std::vector<int32_t>* out) {
  const bool from_lookup = lookup_policy_.active();
  if (cfg_.cost_gate && n > 1) {
    float p[kMaxBlockSize];
    fill_checked(p, n);
    const int m = best_verify_drafts(cost_.cost_model(), p, n, nullptr);
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
    auto rows = verify_rows(n);
    if (!rows.ok()) return rows.status();
    stats_.t_verify += t.seconds();
    ++stats_.verify_calls;
    stats_.verify_rows += n;
    for (int i = 1; i < n; ++i) {
      if ((*rows)[i - 1].argmax != rows_[i]) break;
      ++accepted;
    }
    const session::RowResult last = (*rows)[accepted - 1];
    DS4_RETURN_IF_ERROR(commit(accepted, n, rows_));
    seed_top(last);
  }
  if (from_lookup) {
    lookup_policy_.note(1, n, accepted);
  } else {
    cost_.note_checked(1, n, accepted, n_drafted, n_allow);
  }
  for (int i = 0; i < accepted; ++i) out->push_back(prop_.tokens[i]);
  stats_.accepted_draft_tokens += accepted;
  if (from_lookup) stats_.lookup_accepted += accepted;
  ++stats_.accepted_len_hist[accepted];
  if (accepted == n) {
    ++stats_.full_accepts;
    fold_.after_full();
  } else {
    ++stats_.partial_accepts;
    // The verify rows of the kept drafts were captured and are committed: the ring ends at the
    // next seed's position - 1 and the seed's logits are in hand, so the next cycle may fold.
    fold_.after_partial();
  }
  // The DSpark state, the probe ladder and the scheduler follow the drafter's proposals only.
  if (from_lookup) return Status();
  // Warm = a full accept of >= 2 drafts (one kept draft earns nothing): follow the streak.
  cost_.note_outcome(accepted == n && n >= 2);
  sched_.note(true, accepted);
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
  if (n_allow < 1 || (cfg_.tail_min_tokens > 0 && max_new < cfg_.tail_min_tokens) || sched_.paused()) {
    fold_.disarm();  // the standalone path counts and handles this cycle
    return Status();
  }
  // The DSpark proposal's expected value (cost gate; margin of the seed's row, the row after it
  // is not computed yet).
  float dspark_value = 0.0f;
  if (cfg_.cost_gate) {
    cost_.set_state(top().margin);
    dspark_value = cost_.proposal_value(n_allow, true, false);
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
        float p[kMaxBlockSize];
        fill_checked(p, n);
        const FoldPolicy::LookupChoice ch = FoldPolicy::choose_lookup(cost_.cost_model(), p, n, dspark_value);
        m = ch.m;
        use = ch.use;
        if (use && m < n) ++stats_.cost_trims;
        if (ch.unfold) {
          ++stats_.cost_unfolds;
          lookup_policy_.clear();
          fold_.disarm();  // the standalone path checks the lookup's d_0 for free
          return Status();
        }
      }
      if (use) {
        *handled = true;
        ++stats_.seeds;
        count_lookup(m);
        return fold_verify(seed, m, n, n_allow, out);
      }
      lookup_policy_.clear();
    }
  }
  if (cfg_.cost_gate && !(dspark_value > 0.0f)) {
    fold_.disarm();  // the standalone path decides (and counts) this cycle
    return Status();
  }
  *handled = true;
  const int n_drafted = propose_drafts(seed, L, n_allow);
  int n = n_drafted;
  if (n > 0 && cfg_.cost_gate) {
    // Fold [seed, d_0..d_{m-1}] or decode the seed and free-check d_0 (same proposal)?
    float p[kMaxBlockSize];
    cost_.fill_accept(p, n, false);
    const FoldPolicy::DsparkChoice ch = FoldPolicy::choose_dspark(cost_.cost_model(), p, n);
    if (ch.unfold) {
      ++stats_.cost_unfolds;
      fold_.disarm();
      return standalone(seed, max_new, out, /*have_proposal=*/true);
    }
    if (ch.m < n) {
      ++stats_.cost_trims;
      n = ch.m;
    }
  }
  ++stats_.seeds;
  if (n == 0) {
    ++stats_.no_draft;
    fold_.disarm();
    sched_.note(false, 0);
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
  const bool from_lookup = lookup_policy_.active();
  ++stats_.folded_seeds;
  rows_[0] = seed;
  for (int i = 0; i < n; ++i) rows_[i + 1] = prop_.tokens[i];
  if (cfg_.replay) s_.checkpoint();  // commit(): only replay rolls back
  int accepted = 0;
  session::RowResult last;
  {
    Timer t;
    auto rows = verify_rows(n + 1);
    if (!rows.ok()) return rows.status();
    stats_.t_verify += t.seconds();
    ++stats_.verify_calls;
    stats_.verify_rows += n + 1;
    for (int i = 0; i < n; ++i) {
      if ((*rows)[i].argmax != rows_[i + 1]) break;
      ++accepted;
    }
    last = (*rows)[accepted];
  }
  fold_.note_d0(accepted > 0);
  DS4_RETURN_IF_ERROR(commit(1 + accepted, n + 1, rows_));
  seed_top(last);
  if (from_lookup) {
    lookup_policy_.note(0, n, accepted);
  } else {
    cost_.note_checked(0, n, accepted, n_drafted, n_allow);
  }
  for (int i = 0; i <= accepted; ++i) out->push_back(rows_[i]);
  stats_.accepted_draft_tokens += accepted;
  ++stats_.accepted_len_hist[accepted];
  if (accepted == 0) ++stats_.first_misses;
  if (from_lookup) {
    stats_.lookup_accepted += accepted;
    if (accepted == 0) ++stats_.lookup_first_misses;
  } else {
    cost_.note_outcome(accepted == n && n >= 2);
  }
  if (accepted == n) {
    ++stats_.full_accepts;
  } else if (accepted > 0) {
    ++stats_.partial_accepts;
    fold_.after_partial();  // rows L..L+accepted captured by this verify
  } else {
    fold_.disarm();  // d_0 miss: the next seed decodes standalone (free check again)
  }
  if (!from_lookup) sched_.note(true, accepted);
  return Status();
}

}  // namespace ds4::speculative
