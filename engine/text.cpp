// engine/text.cpp — TextCodec: thin adapter from the engine's text API to tokenizer/.
//
// Invariant: no text logic lives here (BPE, template, UTF-8 streaming are all tokenizer/);
// this file only maps types (ds4::ThinkMode <-> tok::ThinkMode, ChatMessage <-> tok::Message).
#include "engine/text.h"

#include <utility>

#include "gguf/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ds4 {

namespace {

tok::ThinkMode to_tok(ThinkMode mode) {
  switch (mode) {
    case ThinkMode::kThink: return tok::ThinkMode::kThink;
    case ThinkMode::kNoThink: return tok::ThinkMode::kNoThink;
    case ThinkMode::kThinkMax: return tok::ThinkMode::kThinkMax;
  }
  return tok::ThinkMode::kThink;
}

ThinkMode from_tok(tok::ThinkMode mode) {
  switch (mode) {
    case tok::ThinkMode::kThink: return ThinkMode::kThink;
    case tok::ThinkMode::kNoThink: return ThinkMode::kNoThink;
    case tok::ThinkMode::kThinkMax: return ThinkMode::kThinkMax;
  }
  return ThinkMode::kThink;
}

bool known_role(std::string_view role) {
  return role == "system" || role == "developer" || role == "user" || role == "tool" ||
         role == "assistant";
}

}  // namespace

// ---------------------------------------------------------------- TextStream

struct TextStream::Impl {
  explicit Impl(const tok::Tokenizer& t) : decoder(t) {}
  tok::StreamDecoder decoder;
};

TextStream::TextStream(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextStream::~TextStream() = default;
TextStream::TextStream(TextStream&&) noexcept = default;
TextStream& TextStream::operator=(TextStream&&) noexcept = default;

std::string TextStream::push(int32_t token) { return impl_->decoder.push(token); }
void TextStream::push(int32_t token, std::string* out) { impl_->decoder.push(token, out); }
std::string TextStream::flush() { return impl_->decoder.flush(); }
bool TextStream::has_pending() const { return impl_->decoder.has_pending(); }

// ---------------------------------------------------------------- Conversation

struct Conversation::Impl {
  Impl(const tok::Tokenizer& t, std::string system, tok::ThinkMode mode)
      : transcript(t, std::move(system), mode) {}
  tok::ChatTranscript transcript;
};

Conversation::Conversation(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Conversation::~Conversation() = default;
Conversation::Conversation(Conversation&&) noexcept = default;
Conversation& Conversation::operator=(Conversation&&) noexcept = default;

std::vector<int32_t> Conversation::start() { return impl_->transcript.start(); }
std::vector<int32_t> Conversation::user_turn(std::string_view text, ThinkMode mode) {
  return impl_->transcript.user_turn(text, to_tok(mode));
}
std::vector<int32_t> Conversation::assistant_generated(std::span<const int32_t> generated) {
  return impl_->transcript.assistant_generated(generated);
}
const std::string& Conversation::text() const { return impl_->transcript.text(); }
const std::vector<int32_t>& Conversation::tokens() const { return impl_->transcript.tokens(); }
bool Conversation::started() const { return impl_->transcript.started(); }

// ---------------------------------------------------------------- TextCodec

struct TextCodec::Impl {
  explicit Impl(tok::Tokenizer t) : tokenizer(std::move(t)) {}
  tok::Tokenizer tokenizer;
};

TextCodec::TextCodec(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TextCodec::~TextCodec() = default;

Expected<std::unique_ptr<TextCodec>> TextCodec::from_gguf(const gguf::File& file) {
  DS4_ASSIGN_OR_RETURN(tok::Tokenizer t, tok::Tokenizer::from_gguf(file));
  return std::unique_ptr<TextCodec>(new TextCodec(std::make_unique<Impl>(std::move(t))));
}

Expected<std::unique_ptr<TextCodec>> TextCodec::open(const std::string& gguf_path) {
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::open(gguf_path));
  return from_gguf(*file);
}

Expected<std::unique_ptr<TextCodec>> TextCodec::synthetic(int n_vocab) {
  DS4_ASSIGN_OR_RETURN(tok::VocabData vocab, tok::synthetic_vocab(n_vocab));
  DS4_ASSIGN_OR_RETURN(tok::Tokenizer t, tok::Tokenizer::create(std::move(vocab)));
  return std::unique_ptr<TextCodec>(new TextCodec(std::make_unique<Impl>(std::move(t))));
}

std::vector<int32_t> TextCodec::tokenize(std::string_view text) const {
  return impl_->tokenizer.encode(text);
}

std::vector<int32_t> TextCodec::tokenize_rendered(std::string_view text) const {
  return impl_->tokenizer.encode_rendered(text);
}

namespace {
tok::Message to_tok(const ChatMessage& m, bool unknown_as_user) {
  tok::Message t;
  t.role = unknown_as_user && !known_role(m.role) ? std::string("user") : m.role;
  t.content = m.content;
  t.reasoning = m.reasoning;
  t.tool_call_id = m.tool_call_id;
  t.tools_json = m.tools_json;
  t.tool_calls.reserve(m.tool_calls.size());
  for (const ChatToolCall& c : m.tool_calls) t.tool_calls.push_back({c.id, c.name, c.arguments});
  return t;
}

Expected<std::string> render(std::span<const ChatMessage> messages, ThinkMode mode,
                             bool unknown_as_user) {
  std::vector<tok::Message> msgs;
  msgs.reserve(messages.size());
  for (const ChatMessage& m : messages) msgs.push_back(to_tok(m, unknown_as_user));
  return tok::render_chat(msgs, to_tok(mode));
}
}  // namespace

Expected<std::string> TextCodec::try_render_chat(std::span<const ChatMessage> messages,
                                                 ThinkMode mode) {
  return render(messages, mode, /*unknown_as_user=*/false);
}

std::string TextCodec::render_chat(std::span<const ChatMessage> messages, ThinkMode mode) const {
  Expected<std::string> text = render(messages, mode, /*unknown_as_user=*/true);
  return text.ok() ? std::move(text).value() : std::string();
}

std::vector<int32_t> TextCodec::encode_prompt(std::string_view system, std::string_view user,
                                              ThinkMode mode) const {
  return tok::encode_prompt(impl_->tokenizer, system, user, to_tok(mode));
}

std::string TextCodec::token_bytes(int32_t token) const {
  return std::string(impl_->tokenizer.token_bytes(token));
}

std::string TextCodec::detokenize(std::span<const int32_t> tokens) const {
  return impl_->tokenizer.decode(tokens);
}

int32_t TextCodec::bos() const { return impl_->tokenizer.bos(); }
int32_t TextCodec::eos() const { return impl_->tokenizer.eos(); }
int32_t TextCodec::n_vocab() const { return impl_->tokenizer.n_vocab(); }

TextStream TextCodec::new_stream() const {
  return TextStream(std::make_unique<TextStream::Impl>(impl_->tokenizer));
}

Conversation TextCodec::new_conversation(std::string system, ThinkMode mode) const {
  return Conversation(
      std::make_unique<Conversation::Impl>(impl_->tokenizer, std::move(system), to_tok(mode)));
}

ThinkMode TextCodec::think_mode_for_context(ThinkMode mode, int64_t n_ctx) {
  return from_tok(tok::think_mode_for_context(to_tok(mode), n_ctx));
}

std::string_view TextCodec::default_system_prompt() { return tok::kDefaultSystemPrompt; }

}  // namespace ds4
