// speculative/policies.cpp — the DSpark runtime's policies (see policies.h).
#include "speculative/policies.h"

#include <algorithm>
#include <bit>

#include "speculative/drafter.h"  // threshold_at

namespace ds4::speculative {

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

// ---- scheduler ----

bool Scheduler::take_pause() {
  if (pause_ > 0) {
    --pause_;
    return true;
  }
  return false;
}

void Scheduler::thresholds(float* thr, int n) const {
  for (int k = 0; k < n; ++k) {
    float t = cfg_.confidence_grid.empty() ? cfg_.confidence : threshold_at(cfg_.confidence_grid, k);
    if (k == 0 && cfg_.backoff) t += std::min(0.20f, 0.05f * static_cast<float>(streak_));
    thr[k] = t;
  }
}

// Window logic of dspark.md §2.5 on counters only, plus the optional backoff ladder.
void Scheduler::note(bool drafted, int accepted) {
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

void Scheduler::reset() {
  pause_ = 0;
  win_cycles_ = win_accepted_ = win_no_draft_ = 0;
  streak_ = 0;
}

// ---- margin gate ----

int MarginGate::bucket(float margin) {
  if (!(margin >= 2.0f)) return 0;
  if (margin < 4.0f) return 1;
  if (margin < 8.0f) return 2;
  return 3;
}

// ---- cost gate ----

CostGate::CostGate(const SpecConfig& cfg) : cfg_(cfg) { reset(); }

void CostGate::reset() {
  for (int i = 0; i < kStates; ++i) am_[i] = AcceptModel(i < MarginGate::kBuckets ? kColdPrior : kWarmPrior);
  state_ = 0;
  prev_warm_ = false;
  margin_ = 0.0f;
  warm_ = false;
  since_proposal_ = kProbeGapMin;  // a first probe at once
  probe_gap_ = kProbeGapMin;
  probing_ = false;
}

void CostGate::begin_cycle() {
  prev_warm_ = warm_;
  warm_ = false;
  state_ = prev_warm_ ? MarginGate::kBuckets : 0;
  probing_ = false;
  if (since_proposal_ < (1 << 30)) ++since_proposal_;
}

void CostGate::set_state(float margin) {
  state_ = (prev_warm_ ? MarginGate::kBuckets : 0) + MarginGate::bucket(margin);
}

void CostGate::observe_margin(float margin) {
  set_state(margin);
  margin_ = margin;
}

CostModel CostGate::cost_model(bool overlapped) const {
  CostModel c;
  c.verify_base = cfg_.cost_verify_base;
  c.verify_row = cfg_.cost_verify_row;
  c.draft = overlapped ? cfg_.cost_draft_overlap : cfg_.cost_draft;
  c.draft_reject = overlapped ? cfg_.cost_draft_reject_overlap : cfg_.cost_draft_reject;
  return c;
}

void CostGate::fill_accept(float* p, int n, bool with_cont) const {
  const AcceptModel& am = am_[state_];
  for (int k = 0; k < n; ++k) {
    p[k] = am.p_accept(k);
    if (with_cont && k > 0) p[k] *= am.p_cont(k);
  }
}

float CostGate::proposal_value(int n_allow, bool folding, bool overlapped) const {
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
  const float pd = am_[state_].p_draft();
  return pd * (post - c.draft) - (1.0f - pd) * c.draft_reject;
}

CostGate::Decision CostGate::decide(int n_allow, bool overlapped) {
  if (proposal_value(n_allow, false, overlapped) > 0.0f) return Decision::kPropose;
  if (prev_warm_ || since_proposal_ < probe_gap_ || !(margin_ >= cfg_.cost_probe_margin)) return Decision::kSkip;
  probing_ = true;  // cold and the probe gap has passed: propose anyway, to keep learning
  return Decision::kProbe;
}

void CostGate::note_proposal(bool drafted) {
  AcceptModel& am = am_[state_];
  am.decay(1.0f - 1.0f / static_cast<float>(std::max(1, cfg_.cost_window)));
  am.note_proposal(drafted);
  since_proposal_ = 0;
}

void CostGate::note_checked(int first, int m, int accepted, int n_drafted, int n_allow) {
  AcceptModel& am = am_[state_];
  for (int k = first; k < m; ++k) {
    am.note_accept(k, k < accepted);
    if (k >= accepted) break;
  }
  for (int k = 1; k <= accepted; ++k) {
    if (k < n_allow) am.note_cont(k, k < n_drafted);
  }
}

void CostGate::note_outcome(bool warm) {
  warm_ = warm;
  note_probe(warm);
}

// The probe ladder: a productive cycle (every verified draft kept) brings the probe gap back
// to its minimum; an unproductive probe doubles it (bounded).
void CostGate::note_probe(bool productive) {
  if (productive) {
    probe_gap_ = kProbeGapMin;
  } else if (probing_) {
    probe_gap_ = std::min(kProbeGapMax, 2 * probe_gap_);
  }
}

// ---- lookup ----

LookupPolicy::LookupPolicy(const SpecConfig& cfg) : cfg_(cfg) { reset(); }

void LookupPolicy::reset() {
  for (int i = 0; i < 2 * MarginGate::kBuckets; ++i) {
    lkm_[i] = LookupModel();
    if (i >= MarginGate::kBuckets) {
      lkm_[i].base = LookupModel::kContPrior;
      lkm_[i].flat_len = LookupModel::kContFlatLen;
    }
  }
  match_ = 0;
}

void LookupPolicy::fill(float* p, int n) const {
  for (int j = 0; j < n; ++j) p[j] = lkm_[table(j)].q(match_ + j);
}

void LookupPolicy::note(int first, int m, int accepted) {
  const float keep = 1.0f - 1.0f / static_cast<float>(std::max(1, cfg_.cost_window));
  for (int j = first; j < m; ++j) {
    lkm_[table(j)].note(match_ + j, j < accepted, keep);
    if (j >= accepted) break;
  }
}

// ---- fold ----

void FoldPolicy::reset() {
  armed_ = false;
  d0_hits_ = 0;
}

bool FoldPolicy::partial_open() const {
  return cfg_.fold && cfg_.fold_after_partial && std::popcount(d0_hits_) >= cfg_.fold_partial_min_hits;
}

FoldPolicy::LookupChoice FoldPolicy::choose_lookup(const CostModel& c, const float* p, int n, float dspark_value) {
  LookupChoice r;
  float fold_gain = 0.0f, verify_gain = 0.0f;
  r.m = best_fold_drafts(c, p, n, &fold_gain);
  best_verify_drafts(c, p, n, &verify_gain);
  r.use = fold_gain > 0.0f && fold_gain >= dspark_value && fold_gain >= p[0] * verify_gain;
  r.unfold = !r.use && p[0] * verify_gain > std::max(fold_gain, dspark_value);
  return r;
}

FoldPolicy::DsparkChoice FoldPolicy::choose_dspark(const CostModel& c, const float* p, int n) {
  DsparkChoice r;
  float fold_gain = 0.0f, verify_gain = 0.0f;
  r.m = best_fold_drafts(c, p, n, &fold_gain);
  best_verify_drafts(c, p, n, &verify_gain);
  r.unfold = p[0] * verify_gain > fold_gain;
  return r;
}

// ---- overlap ----

// Auto: without the cost gate on 2 threads (under the gate at 2-thread prices the pair lost),
// or under the gate when the prices say the pair is free.
OverlapPolicy::OverlapPolicy(const SpecConfig& cfg, int n_threads) {
  const bool free_prices = cfg.cost_gate && cfg.cost_draft_overlap <= kFreeOverlapCost &&
                           cfg.cost_draft_reject_overlap <= kFreeOverlapCost;
  on_ = cfg.overlap > 0 || (cfg.overlap < 0 && ((n_threads == 2 && !cfg.cost_gate) || (n_threads >= 2 && free_prices)));
  free_ = on_ && free_prices;
}

}  // namespace ds4::speculative
