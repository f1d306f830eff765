// engine/text.h — the engine's text facade: tokenizer + DS4 chat template behind one object.
//
// Role: TextCodec is built once from the model GGUF (it reads tokenizer.ggml.* metadata) and
// is immutable afterwards. The Engine implementation holds one and forwards its text methods
// to it; frontends (cli/, bench/, server/) that need more than the Engine text methods
// (streaming UTF-8 output, live multi-turn transcripts) use this header, never tokenizer/.
//
// Invariants:
//   * tokenize() never recognizes special-token strings; tokenize_rendered() emits the DS4
//     special strings as their ids (ds4-architecture.md §8.4).
//   * TextStream: the concatenation of every push() plus flush() equals detokenize() of the
//     same ids, byte for byte; push() only returns complete UTF-8 characters (a possible
//     prefix of a multi-byte character is held back until it completes).
//   * Chat rendering is the one DeepSeek V4 encoding of tokenizer/chat.h (no other renderer
//     exists); what the model writes back is split by engine/chat_output.h.
//   * Conversation appends only: each call returns the ids to append to the live session, so
//     earlier turns are never re-tokenized (the same turn pieces as the V4 encoding).
//   * All const methods are safe to call concurrently.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "engine/engine.h"

namespace ds4 {

namespace gguf {
class File;
}

class TextCodec;

// Streaming detokenizer: push ids one at a time, get back only complete UTF-8 text.
class TextStream {
 public:
  ~TextStream();
  TextStream(TextStream&&) noexcept;
  TextStream& operator=(TextStream&&) noexcept;

  // Newly completed text (possibly empty).
  std::string push(int32_t token);
  void push(int32_t token, std::string* out);  // appends to *out
  // Emits whatever is held back (an incomplete UTF-8 sequence, passed through unchanged).
  std::string flush();
  bool has_pending() const;

 private:
  friend class TextCodec;
  struct Impl;
  explicit TextStream(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// One live multi-turn chat transcript (interactive CLI). Typical loop:
//   auto conv = codec.new_conversation(system, mode);
//   session.prefill(conv.start());                      // BOS [+think-max prefix] + system
//   session.prefill(conv.user_turn("hi", mode));        // <｜User｜>hi<｜Assistant｜><think>
//   ... generate ids (already in the session) ...
//   session.prefill(conv.assistant_generated(ids));     // {EOS} (or {} if ids end with EOS)
class Conversation {
 public:
  ~Conversation();
  Conversation(Conversation&&) noexcept;
  Conversation& operator=(Conversation&&) noexcept;

  // Must be called first, exactly once.
  std::vector<int32_t> start();
  // <｜User｜>text + generation prefix for `mode`.
  std::vector<int32_t> user_turn(std::string_view text, ThinkMode mode);
  // The ids the model generated (already appended to the session); returns the suffix to
  // append after them ({EOS} unless the last id already is EOS).
  std::vector<int32_t> assistant_generated(std::span<const int32_t> generated);

  const std::string& text() const;              // everything rendered so far
  const std::vector<int32_t>& tokens() const;   // everything appended so far
  bool started() const;

 private:
  friend class TextCodec;
  struct Impl;
  explicit Conversation(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

class TextCodec {
 public:
  // Reads the tokenizer from the model's metadata; errors name the missing/invalid key.
  static Expected<std::unique_ptr<TextCodec>> from_gguf(const gguf::File& file);
  // Convenience for frontends that cannot see gguf/: opens (mmaps) the file and reads only
  // its tokenizer metadata.
  static Expected<std::unique_ptr<TextCodec>> open(const std::string& gguf_path);
  // The synthetic vocabulary of generated test models (tok::synthetic_vocab, n_vocab >= 263;
  // BOS=0, EOS=1 for sizes other than the real 129280). For tests without a model file.
  static Expected<std::unique_ptr<TextCodec>> synthetic(int n_vocab);
  ~TextCodec();

  // Plain text: special-token strings are NOT recognized.
  std::vector<int32_t> tokenize(std::string_view text) const;
  // Rendered chat text: the DS4 special-token strings are emitted as their ids.
  std::vector<int32_t> tokenize_rendered(std::string_view text) const;

  // Whole conversation in the DeepSeek V4 encoding (§8.5, rules in tokenizer/chat.h): tool
  // schemas, DSML tool calls, tool results and earlier reasoning included, ending with the
  // generation prefix when the last message is user/developer/tool. Pure text (no vocabulary
  // needed). Errors: unknown role, invalid tools JSON, empty developer message.
  static Expected<std::string> try_render_chat(std::span<const ChatMessage> messages,
                                               ThinkMode mode);
  // Same, for the Engine::render_chat signature: an unknown role is rendered as "user".
  std::string render_chat(std::span<const ChatMessage> messages, ThinkMode mode) const;
  // Single prompt (CLI -p): BOS [think-max prefix] system <｜User｜>user <｜Assistant｜>...
  std::vector<int32_t> encode_prompt(std::string_view system, std::string_view user,
                                     ThinkMode mode) const;

  // Bytes of one token (may be a partial UTF-8 sequence); out-of-range ids give U+FFFD.
  std::string token_bytes(int32_t token) const;
  std::string detokenize(std::span<const int32_t> tokens) const;
  int32_t bos() const;
  int32_t eos() const;
  int32_t n_vocab() const;

  TextStream new_stream() const;
  // Conversation keeps a pointer to this codec: the codec must outlive it.
  Conversation new_conversation(std::string system, ThinkMode mode) const;

  // ThinkMax only when n_ctx >= kThinkMaxMinContext (393216), else Think.
  static ThinkMode think_mode_for_context(ThinkMode mode, int64_t n_ctx);
  // CLI default system prompt ("You are a helpful assistant", no period).
  static std::string_view default_system_prompt();

 private:
  struct Impl;
  explicit TextCodec(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4
