// engine/generate.h — the one generation loop, shared by the CLI, ds4-bench and the server.
//
// Role: prefill a prompt into a Session, then repeatedly pick the next token (sampler),
// append it, and stream complete UTF-8 text to a callback, until EOS, the token budget, a
// full context, or the callback asks to stop (Ctrl+C).
//
// Invariants:
//   * Every token passed to on_token with id >= 0 has been appended to the session, so a
//     multi-turn caller can extend the same session afterwards; an EOS that stops the loop
//     is neither appended nor passed to on_token.
//   * The concatenated text of all on_token calls equals detokenize(result.tokens), byte for
//     byte; bytes of an incomplete UTF-8 character are held back and, if still pending at
//     the end, delivered in one final call with id == -1.
//   * Greedy generation (temperature <= 0) is a pure function of the session state; sampled
//     generation is a pure function of the state and the sampler's seed and draw count.
//   * No allocation per token beyond the text the callback receives.
//
// Seam for speculative decoding: a Decoder chooses and appends the next token(s). The plain
// decoder appends one token per step; SpeculativeDecoder (engine/speculative.h) appends the
// seed plus an accepted draft prefix per step, with the same contract. Because speculative/
// sits below engine/ (it cannot see engine.h), that Decoder is a thin adapter living in engine/
// over the speculative runtime, selected by the frontend through GenerateOptions::decoder.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"
#include "engine/text.h"
#include "sample/sampler.h"

namespace ds4 {

enum class StopReason {
  kEos,          // the model produced EOS (stop_at_eos)
  kMaxTokens,    // max_tokens generated
  kContextFull,  // the session's context is full
  kCancelled,    // on_token returned false
};
const char* stop_reason_name(StopReason reason);

// What one decoding step may do.
struct StepLimits {
  int max_new = 1;            // append at most this many tokens (>= 1)
  int32_t stop_token = -1;    // sampling this id ends generation; it is not appended (-1: none)
  int32_t banned_token = -1;  // never chosen (bench: EOS excluded); -1: none
};

// Decoding strategy: PlainDecoder, or SpeculativeDecoder (DSpark).
class Decoder {
 public:
  virtual ~Decoder() = default;
  // The session's logits() predict the next token. Clears *out, then writes the tokens
  // chosen in this step. Every written token is appended to the session, except a final
  // limits.stop_token, which is written but not appended. Writes nothing (and returns ok)
  // when the context is full. Never appends past session.n_ctx().
  virtual Status step(Session& session, Sampler& sampler, const StepLimits& limits,
                      std::vector<int32_t>* out) = 0;
};

// The next token from the session's logits by `sampler`, `banned` never chosen — the one
// sampling path of the CLI, the bench and the server. Greedy: Session::greedy_next (the id is
// chosen where the logits live). Temperature: the backend's top-K read-out
// (Session::top_candidates, K = sampler.candidates_wanted()) through
// Sampler::sample_candidates, which gives exactly Sampler::sample(row)'s token; only when the
// candidates cannot decide (sampler.h) is the whole row read (Session::logits()).
int32_t sample_next(Session& session, Sampler& sampler, int32_t banned);

// Samples one token from the current logits and decode()s it.
class PlainDecoder final : public Decoder {
 public:
  Status step(Session& session, Sampler& sampler, const StepLimits& limits,
              std::vector<int32_t>* out) override;
};

struct GenerateOptions {
  int max_tokens = 64;              // generated-token budget (0: prefill only)
  SamplerParams sampler;            // used when persistent_sampler is null
  bool stop_at_eos = true;          // false: EOS is banned (bench's non-EOS greedy probe)
  ProgressFn prefill_progress;      // optional: (done, total) during the prompt prefill
  Sampler* persistent_sampler = nullptr;  // optional: keeps its RNG state across calls
  Decoder* decoder = nullptr;             // optional: nullptr = PlainDecoder
  // optional: polled between prefill slices (kPrefillSlice tokens); true stops the prefill
  // (Ctrl+C). The session then holds only the part of the prompt prefilled so far.
  std::function<bool()> cancel_prefill;
};

// Prompt tokens prefilled between two cancel_prefill polls. Slicing never changes a bit:
// prefill of N tokens equals any split into pieces (tests/model).
inline constexpr int kPrefillSlice = 256;

struct GenerateStats {
  int prompt_tokens = 0;    // tokens prefilled by this call
  double prefill_s = 0.0;
  int gen_tokens = 0;       // tokens generated and appended (EOS excluded)
  double gen_s = 0.0;
  StopReason stop = StopReason::kMaxTokens;
  bool prefill_cancelled = false;  // cancel_prefill stopped the prompt part way (stop = kCancelled)
  std::vector<int32_t> tokens;  // the generated ids, in order (EOS excluded)

  double prefill_tps() const { return prefill_s > 0 ? prompt_tokens / prefill_s : 0.0; }
  double gen_tps() const { return gen_s > 0 ? gen_tokens / gen_s : 0.0; }
};

// id: the generated token (-1 for the final flush of held-back bytes); text: the complete
// UTF-8 text that became available with it (may be empty). Return false to stop.
using TokenCallback = std::function<bool(int32_t id, std::string_view text)>;

// Prefills `prompt` (may be empty when the session already holds tokens), then generates.
// Errors: an empty session with an empty prompt; a prompt that does not fit the context
// (session.n_tokens() + prompt.size() >= n_ctx: kOutOfRange naming both numbers); any
// engine error. A context that fills up during generation is not an error (StopReason).
Expected<GenerateStats> generate(Session& session, const TextCodec& text,
                                 std::span<const int32_t> prompt, const GenerateOptions& options,
                                 const TokenCallback& on_token);

}  // namespace ds4
