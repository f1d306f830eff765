// engine/dspark_calibrate.cpp — measures the DSpark cost gate's constants on this machine
// (speculative.h "Cost-gate calibration"): decode(1), verify(n), proposals, in decode(1) units.
//
// One implementation for ds4 --dspark-calibrate and ds4-bench-spec --calibrate. Every
// measurement starts from the same frontier: session calls are bracketed by checkpoint() /
// rollback(), proposals read the drafter ring synced to that frontier. Rounds interleave the
// kinds of call, so slow drift of a shared host spreads over all of them; medians are kept.
// Each verify is timed right after an (untimed) proposal, as in a cycle.
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/timer.h"
#include "engine/engine_internal.h"
#include "engine/speculative.h"
#include "sample/sampler.h"
#include "session/session.h"
#include "speculative/drafter.h"
#include "speculative/runtime.h"

namespace ds4 {
namespace {

// A fixed prompt of mixed content (prose, code, JSON): real text gives the verify rows and the
// drafter realistic expert routing, and the mix keeps any one kind of text from setting it.
// Repeated up to kCalibrationTokens (below).
constexpr const char* kCalibrationPrompt =
    "The lighthouse keeper climbed the spiral stairs every evening at dusk, carrying a can of oil "
    "and a notebook in which he recorded the wind and the ships that passed.\n\n"
    "def parse_entry(line):\n    key, _, value = line.partition('=')\n    return key.strip(), "
    "value.strip()\n\n"
    "{\"alpha_2\": \"IT\", \"alpha_3\": \"ITA\", \"name\": \"Italy\", \"numeric\": \"380\"}\n"
    "Quel ramo del lago di Como, che volge a mezzogiorno, tra due catene non interrotte di monti";

constexpr int kMaxVerifyRows = 8;
constexpr int kCtx = 512;
// Context the measurements run at: the prompt above, repeated, cut to this many tokens. A
// verify row's attention grows with the context while most of a decode's work does not, so
// verify(n) / decode(1) rises with it; ~450 tokens is mid-range of what the cost gate meets
// (ds4-bench-spec prompts: 250-600 tokens).
constexpr int kCalibrationTokens = 448;
static_assert(kCalibrationTokens + kMaxVerifyRows < kCtx, "the verify rows must fit the session");

}  // namespace

Expected<DsparkCostCalibration> calibrate_dspark_costs(Engine& engine, int reps, const ProgressFn& progress) {
  if (reps < 1) return invalid_argument("calibration rounds must be >= 1, got %d", reps);
  const speculative::DrafterModel* dm = engine_drafter(engine);
  if (dm == nullptr) {
    return invalid_argument("DSpark calibration needs a drafter: open the engine with a support GGUF (--mtp FILE)");
  }
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<Session> session, engine.new_session(kCtx));
  session::ModelSession* ms = model_session(*session);
  if (ms == nullptr) return internal_error("DSpark calibration: the session has no model session");
  session::ModelSession& s = *ms;
  const int n_rows = std::min<int>(kMaxVerifyRows, session::kMaxBatchRows);
  speculative::Drafter drafter(*dm);  // a timeline of its own: live decoders are untouched
  speculative::Drafter* dr = &drafter;

  // Prefill the prompt, capturing the drafter's context rows, and hand them to the drafter.
  std::vector<int32_t> prompt{engine.bos_token()};
  const std::vector<int32_t> text = engine.tokenize(kCalibrationPrompt);
  if (text.empty()) return internal_error("DSpark calibration: the calibration prompt tokenized to nothing");
  while (static_cast<int>(prompt.size()) < kCalibrationTokens) {
    const size_t take = std::min(text.size(), static_cast<size_t>(kCalibrationTokens) - prompt.size());
    prompt.insert(prompt.end(), text.begin(), text.begin() + static_cast<std::ptrdiff_t>(take));
  }
  const int64_t cw = dr->capture_width();
  backend::Backend& be = dm->backend();
  backend::Array<float> caps(be, prompt.size() * static_cast<size_t>(cw));  // the drafter reads it in place
  s.set_capture_layers(dr->config().target_layers);
  s.set_capture_sink([&](int64_t pos, std::span<const float> h) {
    if (pos >= 0 && static_cast<size_t>(pos) < prompt.size() && static_cast<int64_t>(h.size()) == cw) {
      be.copy(caps.data() + pos * cw, h.data(), h.size_bytes());  // h is backend memory
    }
  });
  const Status pre = s.prefill(prompt);
  s.set_capture_sink({});
  s.set_capture_layers({});
  if (!pre.ok()) return pre;
  const int64_t L = s.n_tokens();
  dr->commit_rows(0, static_cast<int>(L), caps.data());

  // The greedy continuation: the verify rows, and the check that each verify row's argmax is
  // what plain decoding picks.
  std::vector<int32_t> rows(static_cast<size_t>(n_rows));
  std::vector<int32_t> next(static_cast<size_t>(n_rows));
  s.checkpoint();
  rows[0] = argmax(s.logits());
  for (int k = 0; k < n_rows; ++k) {
    if (k > 0) rows[k] = next[k - 1];
    DS4_RETURN_IF_ERROR(s.decode(rows[k]));
    next[k] = argmax(s.logits());
  }
  s.rollback();

  const int B = dr->config().block_size;
  std::vector<float> thr_all(static_cast<size_t>(B), 0.0f), thr_rej(static_cast<size_t>(B), 1.01f);
  speculative::Proposal p;
  std::vector<double> t_dec, t_prop, t_rej, t_pair_prop, t_pair_rej;
  std::vector<std::vector<double>> t_ver(static_cast<size_t>(n_rows) + 1);
  for (int r = 0; r < reps; ++r) {
    {
      // Timed as plain decoding runs: decodes that follow decodes (the greedy continuation,
      // rows 1..n-1 after an untimed row 0), per token. A single decode right after the
      // previous round's pair (which split the pool) comes out slow.
      s.checkpoint();
      Status st = s.decode(rows[0]);
      if (st.ok()) {
        Timer t;
        for (int k = 1; k < n_rows && st.ok(); ++k) st = s.decode(rows[k]);
        t_dec.push_back(t.seconds() / (n_rows - 1));
      }
      s.rollback();
      DS4_RETURN_IF_ERROR(st);
    }
    for (int n = 1; n <= n_rows; ++n) {
      // In a cycle a verify follows the proposal it checks, whose drafter weights and ring
      // have just displaced part of the target's working set from the caches: time it so.
      dr->propose(rows[0], L, B, thr_all, &p);
      s.checkpoint();
      Timer t;
      // Ids + margins only, as the runtime's verify reads them (no logits rows).
      auto res = s.verify(std::span<const int32_t>(rows.data(), static_cast<size_t>(n)), -1, /*read_logits=*/false);
      t_ver[static_cast<size_t>(n)].push_back(t.seconds());
      if (res.ok()) {
        for (int i = 0; i < n; ++i) {
          if ((*res)[static_cast<size_t>(i)].argmax != next[static_cast<size_t>(i)]) {
            s.rollback();
            return internal_error("DSpark calibration: verify(%d) row %d picked token %d, plain decoding %d", n, i,
                                  (*res)[static_cast<size_t>(i)].argmax, next[static_cast<size_t>(i)]);
          }
        }
      }
      s.rollback();
      if (!res.ok()) return res.status();
    }
    for (int rej = 0; rej < 2; ++rej) {
      Timer t;
      dr->propose(rows[0], L, B, rej ? thr_rej : thr_all, &p);
      (rej ? t_rej : t_prop).push_back(t.seconds());
      if (rej ? !p.conf0_rejected : p.n != B) {
        return internal_error("DSpark calibration: the %s proposal did not behave as forced (n=%d)",
                              rej ? "conf0-rejected" : "full-chain", p.n);
      }
    }
    // Overlap: decode(1) and a proposal as one Backend::run_pair, then back.
    for (int rej = 0; rej < 2; ++rej) {
      struct Pair {
        session::ModelSession* s;
        speculative::Drafter* d;
        int32_t seed;
        int64_t L;
        std::span<const float> thr;
        speculative::Proposal* p;
        Status st;
      } q{&s, dr, rows[0], L, rej ? thr_rej : thr_all, &p, Status()};
      const backend::Task dec_task{[](void* c) {
                                     auto* x = static_cast<Pair*>(c);
                                     x->st = x->s->decode(x->seed);
                                   },
                                   &q};
      const backend::Task prop_task{[](void* c) {
                                      auto* x = static_cast<Pair*>(c);
                                      x->d->propose(x->seed, x->L, static_cast<int>(x->thr.size()), x->thr, x->p);
                                    },
                                    &q};
      s.checkpoint();
      Timer t;
      s.backend().run_pair(dec_task, prop_task);
      (rej ? t_pair_rej : t_pair_prop).push_back(t.seconds());
      s.rollback();
      DS4_RETURN_IF_ERROR(q.st);
    }
    if (progress) progress(r + 1, reps);
  }

  DsparkCostCalibration c;
  c.reps = reps;
  c.n_threads = s.backend().n_threads();
  const double dec = median_of(t_dec);
  c.decode_ms = dec * 1e3;
  c.verify.assign(static_cast<size_t>(n_rows) + 1, 0.0);
  for (int n = 1; n <= n_rows; ++n) c.verify[static_cast<size_t>(n)] = median_of(t_ver[static_cast<size_t>(n)]) / dec;
  // Least squares over n = 2..8 (or what the batch limit allows): DSpark blocks verify up to
  // 6 rows, lookup drafts (SpecConfig::lookup) up to kMaxBatchRows.
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int cnt = 0;
  for (int n = 2; n <= n_rows; ++n) {
    const double y = c.verify[static_cast<size_t>(n)];
    sx += n;
    sy += y;
    sxx += static_cast<double>(n) * n;
    sxy += n * y;
    ++cnt;
  }
  double row = cnt >= 2 ? (cnt * sxy - sx * sy) / (cnt * sxx - sx * sx) : c.verify[1];
  row = std::max(row, 0.01);  // a verify row is never free
  const double base = cnt >= 2 ? std::max(0.0, (sy - row * sx) / cnt) : 0.0;
  c.verify_row = static_cast<float>(row);
  c.verify_base = static_cast<float>(base);
  c.draft = static_cast<float>(median_of(t_prop) / dec);
  c.draft_reject = static_cast<float>(median_of(t_rej) / dec);
  c.overlap_draft_extra = static_cast<float>(median_of(t_pair_prop) / dec - 1.0);
  c.overlap_reject_extra = static_cast<float>(median_of(t_pair_rej) / dec - 1.0);
  return c;
}

namespace {

// The overlap prices to use: free (speculative::kFreeOverlapCost) when both measured pair extras are
// at least speculative::kFreeOverlapMargin below zero, else the sequential prices (speculative.h).
// Returns whether free.
bool overlap_prices(const DsparkCostCalibration& c, float* draft, float* reject) {
  const bool free = c.overlap_draft_extra <= -speculative::kFreeOverlapMargin && c.overlap_reject_extra <= -speculative::kFreeOverlapMargin;
  *draft = free ? speculative::kFreeOverlapCost : c.draft;
  *reject = free ? speculative::kFreeOverlapCost : c.draft_reject;
  return free;
}

}  // namespace

void apply_dspark_costs(const DsparkCostCalibration& c, SpecOptions* so) {
  so->cost_verify_base = c.verify_base;
  so->cost_verify_row = c.verify_row;
  so->cost_draft = c.draft;
  so->cost_draft_reject = c.draft_reject;
  overlap_prices(c, &so->cost_draft_overlap, &so->cost_draft_reject_overlap);
}

std::string format_dspark_costs(const DsparkCostCalibration& c) {
  float ov_draft = 0.0f, ov_reject = 0.0f;
  const bool free = overlap_prices(c, &ov_draft, &ov_reject);
  std::string out;
  char buf[256];
  std::snprintf(buf, sizeof buf, "dspark calibration: %d thread(s), %d round(s), decode(1) = %.3f ms (the unit)\n",
                c.n_threads, c.reps, c.decode_ms);
  out += buf;
  for (size_t n = 1; n < c.verify.size(); ++n) {
    std::snprintf(buf, sizeof buf, "  verify(%zu) = %.3f\n", n, c.verify[n]);
    out += buf;
  }
  std::snprintf(buf, sizeof buf,
                "  verify(n) ~ %.3f + %.3f n; proposal = %.3f, conf0-rejected = %.3f\n"
                "  beside a decode (overlap): %+.3f, rejected %+.3f (%s)\n",
                c.verify_base, c.verify_row, c.draft, c.draft_reject, c.overlap_draft_extra,
                c.overlap_reject_extra,
                free ? "free: overlap on under the cost gate, overlapped proposals priced 0"
                     : "not free: overlapped proposals priced as sequential ones");
  out += buf;
  std::snprintf(buf, sizeof buf,
                "DS4_DSPARK_COST_VERIFY_BASE=%.3f\nDS4_DSPARK_COST_VERIFY_ROW=%.3f\nDS4_DSPARK_COST_DRAFT=%.3f\n"
                "DS4_DSPARK_COST_DRAFT_REJECT=%.3f\nDS4_DSPARK_COST_DRAFT_OVERLAP=%.3f\n"
                "DS4_DSPARK_COST_DRAFT_REJECT_OVERLAP=%.3f\n",
                c.verify_base, c.verify_row, c.draft, c.draft_reject, ov_draft, ov_reject);
  out += buf;
  return out;
}

}  // namespace ds4
