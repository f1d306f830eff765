// engine/generate.cpp — the shared generation loop (see generate.h for the contract).
#include "engine/generate.h"

#include <algorithm>
#include <optional>
#include <string>

#include "core/timer.h"

namespace ds4 {

const char* stop_reason_name(StopReason reason) {
  switch (reason) {
    case StopReason::kEos: return "eos";
    case StopReason::kMaxTokens: return "max_tokens";
    case StopReason::kContextFull: return "context_full";
    case StopReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

int32_t sample_next(Session& session, Sampler& sampler, int32_t banned) {
  if (sampler.greedy()) return session.greedy_next(banned);
  int32_t ids[Sampler::kCandidates];
  float values[Sampler::kCandidates];
  const int k = sampler.candidates_wanted();
  if (session.top_candidates(k, banned, ids, values)) {
    const int32_t t = sampler.sample_candidates(std::span<const int32_t>(ids, static_cast<size_t>(k)),
                                                std::span<const float>(values, static_cast<size_t>(k)));
    if (t != Sampler::kNeedRow) return t;
  }
  return sampler.sample(session.logits(), banned);
}

Status PlainDecoder::step(Session& session, Sampler& sampler, const StepLimits& limits,
                          std::vector<int32_t>* out) {
  out->clear();
  if (session.n_tokens() >= session.n_ctx()) return Status();
  // The choice is made where the logits live: a GPU reads back the id (greedy) or the top
  // candidates (sampling); the tokens are those of the sampler on the whole row.
  const int32_t token = sample_next(session, sampler, limits.banned_token);
  out->push_back(token);
  if (token == limits.stop_token) return Status();
  return session.decode(token);
}

Expected<GenerateStats> generate(Session& session, const TextCodec& text,
                                 std::span<const int32_t> prompt, const GenerateOptions& options,
                                 const TokenCallback& on_token) {
  GenerateStats stats;
  if (prompt.empty() && session.n_tokens() == 0) {
    return invalid_argument("generate: empty prompt and empty session (nothing to continue)");
  }
  const int64_t needed = static_cast<int64_t>(session.n_tokens()) +
                         static_cast<int64_t>(prompt.size());
  if (needed >= session.n_ctx()) {
    if (session.n_tokens() == 0) {
      return out_of_range("prompt is %zu tokens but the context holds %d (it must be shorter "
                          "than the context; raise -c/--ctx)",
                          prompt.size(), session.n_ctx());
    }
    return out_of_range("context full: %d tokens in the session + %zu new > context of %d "
                        "tokens (start over or raise the context)",
                        session.n_tokens(), prompt.size(), session.n_ctx());
  }
  if (options.max_tokens < 0) {
    return invalid_argument("generate: max_tokens must be >= 0, got %d", options.max_tokens);
  }

  // Prefill.
  stats.prompt_tokens = static_cast<int>(prompt.size());
  if (!prompt.empty()) {
    Timer timer;
    const int total = static_cast<int>(prompt.size());
    for (int done = 0; done < total;) {
      if (options.cancel_prefill && options.cancel_prefill()) {
        stats.prefill_s = timer.seconds();
        stats.prompt_tokens = done;
        stats.prefill_cancelled = true;
        stats.stop = StopReason::kCancelled;
        return stats;
      }
      const int n = std::min(kPrefillSlice, total - done);
      ProgressFn progress;
      if (options.prefill_progress) {
        progress = [&](int d, int) { options.prefill_progress(done + d, total); };
      }
      DS4_RETURN_IF_ERROR(session.prefill(prompt.subspan(done, n), progress));
      done += n;
      // A device backend returns once the slice is queued: logits() waits for it (on the CPU it
      // is a view), so a cancel lands within one slice and prefill_s is the device's time.
      (void)session.logits();
    }
    stats.prefill_s = timer.seconds();
  }

  // Generation.
  std::optional<Sampler> own_sampler;
  Sampler* sampler = options.persistent_sampler;
  if (sampler == nullptr) {
    own_sampler.emplace(options.sampler, static_cast<int>(session.logits().size()));
    sampler = &*own_sampler;
  }
  PlainDecoder plain;
  Decoder* decoder = options.decoder != nullptr ? options.decoder : &plain;

  StepLimits limits;
  const int32_t eos = text.eos();
  limits.stop_token = options.stop_at_eos ? eos : -1;
  limits.banned_token = options.stop_at_eos ? -1 : eos;

  // Never more tokens than the context can still take.
  stats.tokens.reserve(static_cast<size_t>(
      std::min<int64_t>(options.max_tokens, session.n_ctx() - session.n_tokens())));
  TextStream stream = text.new_stream();
  std::vector<int32_t> step_tokens;
  step_tokens.reserve(16);
  std::string piece;
  piece.reserve(64);

  stats.stop = StopReason::kMaxTokens;
  Timer timer;
  bool done = options.max_tokens == 0;
  while (!done) {
    limits.max_new = options.max_tokens - stats.gen_tokens;
    DS4_RETURN_IF_ERROR(decoder->step(session, *sampler, limits, &step_tokens));
    if (step_tokens.empty()) {
      stats.stop = StopReason::kContextFull;
      break;
    }
    for (int32_t token : step_tokens) {
      if (options.stop_at_eos && token == eos) {
        stats.stop = StopReason::kEos;
        done = true;
        break;
      }
      stats.tokens.push_back(token);
      ++stats.gen_tokens;
      piece.clear();
      stream.push(token, &piece);
      // A cancel lets the rest of this step's tokens be reported too: they are already
      // in the session, and the text invariant needs every appended token delivered.
      if (on_token && !on_token(token, piece) && !done) {
        stats.stop = StopReason::kCancelled;
        done = true;
      }
    }
    if (!done && stats.gen_tokens >= options.max_tokens) {
      stats.stop = StopReason::kMaxTokens;
      done = true;
    }
  }
  stats.gen_s = timer.seconds();

  std::string rest = stream.flush();
  if (!rest.empty() && on_token) on_token(-1, rest);
  return stats;
}

}  // namespace ds4
