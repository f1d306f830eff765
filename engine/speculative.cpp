// engine/speculative.cpp — SpeculativeDecoder (see speculative.h) over speculative::Runtime.
#include "engine/speculative.h"

#include "session/session.h"
#include "speculative/drafter.h"
#include "speculative/oracle_proposer.h"
#include "speculative/runtime.h"

namespace ds4 {

struct SpeculativeDecoder::Impl {
  // `p` is built before the runtime (which installs its capture layers on the session).
  Impl(session::ModelSession& s, std::unique_ptr<speculative::Drafter> d,
       std::unique_ptr<speculative::Proposer> p, const speculative::SpecConfig& cfg)
      : ms(s), drafter(std::move(d)), proposer(std::move(p)), runtime(s, *proposer, cfg) {}
  PlainDecoder plain;
  session::ModelSession& ms;
  std::unique_ptr<speculative::Drafter> drafter;  // this session's timeline over the shared weights (null: oracle)
  std::unique_ptr<speculative::Proposer> proposer;  // DSpark's over `drafter`, or the oracle
  speculative::Runtime runtime;
};

SpeculativeDecoder::SpeculativeDecoder() = default;
SpeculativeDecoder::~SpeculativeDecoder() = default;

std::unique_ptr<SpeculativeDecoder> SpeculativeDecoder::create(const speculative::DrafterModel& drafter, session::ModelSession& ms,
                                                               const SpecOptions& o) {
  std::unique_ptr<SpeculativeDecoder> d(new SpeculativeDecoder());
  auto timeline = std::make_unique<speculative::Drafter>(drafter);
  auto proposer = std::make_unique<speculative::DSparkProposer>(*timeline);
  d->impl_ = std::make_unique<Impl>(ms, std::move(timeline), std::move(proposer), o);
  return d;
}

std::unique_ptr<SpeculativeDecoder> SpeculativeDecoder::create_oracle(session::ModelSession& ms, const SpecOptions& o,
                                                                      const OracleScript& script, int block_size,
                                                                      int32_t avoid) {
  speculative::OracleOptions oo;
  oo.script = script.tokens;
  oo.start = script.start;
  oo.hit_rate = script.hit_rate;
  oo.seed = script.seed;
  oo.block_size = block_size;
  oo.n_vocab = static_cast<int32_t>(ms.config().n_vocab);
  oo.avoid = avoid;
  std::unique_ptr<SpeculativeDecoder> d(new SpeculativeDecoder());
  d->impl_ = std::make_unique<Impl>(ms, nullptr, std::make_unique<speculative::OracleProposer>(std::move(oo)), o);
  return d;
}

Status SpeculativeDecoder::step(Session& session, Sampler& sampler, const StepLimits& limits,
                                std::vector<int32_t>* out) {
  if (!sampler.greedy()) return impl_->plain.step(session, sampler, limits, out);
  if (session.n_tokens() != impl_->ms.n_tokens()) {
    return internal_error("speculative decoder: the session passed to step() is not the one it was built for");
  }
  return impl_->runtime.step(limits.max_new, limits.stop_token, limits.banned_token, out);
}

SpecSummary SpeculativeDecoder::summary() const {
  const speculative::SpecStats& s = impl_->runtime.stats();
  SpecSummary r;
  r.cycles = s.cycles;
  r.proposed = s.proposed_tokens;
  r.accepted = s.accepted_draft_tokens;
  r.accept_rate = s.proposed_tokens ? static_cast<double>(s.accepted_draft_tokens) / s.proposed_tokens : 0.0;
  return r;
}

std::string SpeculativeDecoder::stats_report() const { return impl_->runtime.report(); }

void SpeculativeDecoder::reset_policy() { impl_->runtime.reset_policy(); }

Status parse_dspark_confidence_grid(std::string_view text, std::vector<float>* out) {
  return speculative::parse_confidence_grid(text, out);
}

Status apply_dspark_policy(std::string_view name, const std::vector<float>& grid, float margin, SpecOptions* so) {
  // The seed's baseline, then the preset's knobs.
  so->scheduler = true;
  so->fold = false;
  so->fold_after_partial = false;
  so->confidence_grid.clear();
  so->backoff = false;
  so->margin_gate = 0.0f;
  so->cost_gate = false;
  so->lookup = false;
  auto all = [&] {
    so->fold = true;
    so->confidence_grid = grid;
    so->backoff = true;
    so->margin_gate = margin;
  };
  if (name == "baseline") {
  } else if (name == "fold") {
    so->fold = true;
  } else if (name == "grid") {
    so->confidence_grid = grid;
  } else if (name == "backoff") {
    so->backoff = true;
  } else if (name == "margin") {
    so->margin_gate = margin;
  } else if (name == "all") {
    all();
  } else if (name == "cost") {
    so->cost_gate = true;
  } else if (name == "costfold") {
    so->cost_gate = true;
    so->fold = true;
  } else if (name == "costall") {
    all();
    so->cost_gate = true;
    so->fold_after_partial = true;
  } else if (name == "costallseed") {
    all();
    so->cost_gate = true;
  } else if (name == "costlookup") {
    all();
    so->cost_gate = true;
    so->fold_after_partial = true;
    so->lookup = true;
  } else if (name == "noscheduler") {
    so->scheduler = false;
  } else {
    return invalid_argument("unknown DSpark policy '%.*s' (known: %s)", static_cast<int>(name.size()), name.data(),
                            kDsparkPolicies);
  }
  return Status();
}

Expected<std::unique_ptr<speculative::DrafterModel>> load_dspark_drafter(const model::Model& target,
                                                                        backend::Backend& backend,
                                                                        const std::string& mtp_path) {
  return speculative::load_drafter_model(target, backend, mtp_path);
}

}  // namespace ds4
