// tokenizer/chat.cpp — DS4 chat template rendering (§8.5) and the incremental transcript.
#include "tokenizer/chat.h"

#include <utility>

namespace ds4::tok {

ThinkMode think_mode_for_context(ThinkMode mode, int64_t n_ctx) {
  if (mode == ThinkMode::kThinkMax && n_ctx < kThinkMaxMinContext) return ThinkMode::kThink;
  return mode;
}

std::string generation_prefix(ThinkMode mode) {
  std::string s(kAssistantText);
  s.append(mode == ThinkMode::kNoThink ? kThinkCloseText : kThinkOpenText);
  return s;
}

namespace {
std::string render_start(std::string_view system, ThinkMode mode) {
  std::string s(kBosText);
  if (mode == ThinkMode::kThinkMax) s.append(kThinkMaxPrefix);
  s.append(system);
  return s;
}

std::string render_user(std::string_view text) {
  std::string s(kUserText);
  s.append(text);
  return s;
}

std::string render_tool(std::string_view text) {
  std::string s(kUserText);
  s.append("Tool: ");
  s.append(text);
  return s;
}

// CLI append_message semantics: </think> unless the content already opens/closes thinking.
std::string render_assistant_history(std::string_view text) {
  std::string s(kAssistantText);
  if (!text.starts_with(kThinkOpenText) && !text.starts_with(kThinkCloseText))
    s.append(kThinkCloseText);
  s.append(text);
  return s;
}
}  // namespace

std::string render_prompt(std::string_view system, std::string_view user, ThinkMode mode) {
  std::string s = render_start(system, mode);
  s.append(render_user(user));
  s.append(generation_prefix(mode));
  return s;
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view system,
                                   std::string_view user, ThinkMode mode) {
  return tok.encode_rendered(render_prompt(system, user, mode));
}

Expected<std::string> render_conversation(std::span<const Message> messages, ThinkMode mode) {
  std::string system;
  std::string body;
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& m = messages[i];
    if (m.role == "system" || m.role == "developer") {
      system.append(m.content);
    } else if (m.role == "user") {
      body.append(render_user(m.content));
    } else if (m.role == "tool") {
      body.append(render_tool(m.content));
    } else if (m.role == "assistant") {
      body.append(render_assistant_history(m.content));
    } else {
      return invalid_argument("chat: message %zu has unknown role '%s' (expected system, "
                              "developer, user, tool or assistant)",
                              i, m.role.c_str());
    }
  }
  std::string s = render_start(system, mode);
  s.append(body);
  s.append(generation_prefix(mode));
  return s;
}

ChatTranscript::ChatTranscript(const Tokenizer& tok, std::string system, ThinkMode mode)
    : tok_(&tok), system_(std::move(system)), start_mode_(mode) {}

std::vector<int32_t> ChatTranscript::append_rendered(std::string rendered) {
  std::vector<int32_t> ids = tok_->encode_rendered(rendered);
  text_.append(rendered);
  tokens_.insert(tokens_.end(), ids.begin(), ids.end());
  return ids;
}

std::vector<int32_t> ChatTranscript::start() {
  if (started_) return {};
  started_ = true;
  return append_rendered(render_start(system_, start_mode_));
}

std::vector<int32_t> ChatTranscript::append_turn(std::string rendered) {
  std::vector<int32_t> ids = start();  // empty unless this is the first call
  std::vector<int32_t> more = append_rendered(std::move(rendered));
  ids.insert(ids.end(), more.begin(), more.end());
  return ids;
}

std::vector<int32_t> ChatTranscript::user_turn(std::string_view text, ThinkMode mode) {
  return append_turn(render_user(text) + generation_prefix(mode));
}

std::vector<int32_t> ChatTranscript::tool_turn(std::string_view text, ThinkMode mode) {
  return append_turn(render_tool(text) + generation_prefix(mode));
}

std::vector<int32_t> ChatTranscript::user_message(std::string_view text) {
  return append_turn(render_user(text));
}

std::vector<int32_t> ChatTranscript::assistant_message(std::string_view text) {
  return append_turn(render_assistant_history(text));
}

std::vector<int32_t> ChatTranscript::assistant_generated(std::span<const int32_t> generated) {
  std::vector<int32_t> out = start();  // empty unless nothing was appended before
  const int32_t eos = tok_->eos();
  text_.append(tok_->decode(generated));
  tokens_.insert(tokens_.end(), generated.begin(), generated.end());
  if (!generated.empty() && generated.back() == eos) return out;
  text_.append(kEosText);
  tokens_.push_back(eos);
  out.push_back(eos);
  return out;
}

}  // namespace ds4::tok
