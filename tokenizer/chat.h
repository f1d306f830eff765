// tokenizer/chat.h — the DeepSeek V4 chat encoding (ds4-architecture.md §8.5): the one
// renderer of system prompts, multi-turn history, think modes, tool definitions, DSML tool
// calls and tool results, shared by the CLI, the server and the bench (through engine/text.h).
//
// Role: renders conversations to text with the DS4 special-token strings, then tokenizes them
// with Tokenizer::encode_rendered() (the 7 special strings become their ids). Three users:
//   * whole conversations (server / API, Engine::render_chat): render_chat()/encode_chat();
//   * single prompt (CLI -p, logprob tests): render_prompt()/encode_prompt(), which is
//     render_chat() of [system, user];
//   * live multi-turn chat (interactive CLI, one KV state that only grows): ChatTranscript,
//     which hands out the token suffix to append for each new turn.
// Rules of render_chat: the published V4 encoding (BOS, think-max prefix, system + tools
// block, user turns with merged tool results, assistant reasoning / content / DSML tool calls,
// history dropping when thinking without tools), written out in docs/formats/chat-encoding.md.
// Invariants:
//   * Every turn starts with a special token (<｜User｜> / <｜Assistant｜>), and
//     encode_rendered() cuts at special tokens, so tokenizing a conversation turn by turn
//     gives the same ids as tokenizing the whole rendered text at once
//     (ChatTranscript::tokens() == encode_rendered(ChatTranscript::text()) whenever the
//     generated replies were canonical tokenizations of their text).
//   * ChatTranscript writes each turn exactly as render_chat writes it, except that a live KV
//     state cannot drop the reasoning of earlier replies (it is already in the cache).
//   * ThinkMax is only honoured when the context is >= kThinkMaxMinContext tokens
//     (think_mode_for_context); callers pass the resolved mode.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/tokenizer.h"

namespace ds4::tok {

// Same order as ds4::ThinkMode in engine/engine.h.
enum class ThinkMode { kThink, kNoThink, kThinkMax };

inline constexpr int64_t kThinkMaxMinContext = 393216;  // 384K tokens

// Exactly three lines, each ended by '\n', then one more '\n'.
inline constexpr std::string_view kThinkMaxPrefix =
    "Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"
    "You MUST be very thorough in your thinking and comprehensively decompose the problem to "
    "resolve the root cause, rigorously stress-testing your logic against all potential paths, "
    "edge cases, and adversarial scenarios.\n"
    "Explicitly write out your entire deliberation process, documenting every intermediate "
    "step, considered alternative, and rejected hypothesis to ensure absolutely no assumption "
    "is left unchecked.\n"
    "\n";

// CLI default system prompt (no period); ds4-bench uses kBenchSystemPrompt.
inline constexpr std::string_view kDefaultSystemPrompt = "You are a helpful assistant";
inline constexpr std::string_view kBenchSystemPrompt = "You are a helpful assistant.";

// DSML element names of a tool-call block, as the model writes them and history renders them.
inline constexpr std::string_view kDsmlToolCalls = "tool_calls";
inline constexpr std::string_view kDsmlInvoke = "invoke";
inline constexpr std::string_view kDsmlParameter = "parameter";
std::string dsml_open(std::string_view name);   // "<｜DSML｜name" (attributes and '>' follow)
std::string dsml_close(std::string_view name);  // "</｜DSML｜name>"

// ThinkMax only when n_ctx >= 393216, else Think; other modes pass through.
ThinkMode think_mode_for_context(ThinkMode mode, int64_t n_ctx);

// "<｜Assistant｜><think>" (Think/ThinkMax) or "<｜Assistant｜></think>" (NoThink).
std::string generation_prefix(ThinkMode mode);

struct ToolCall {
  std::string id{};              // optional; orders the tool results
  std::string name{};
  std::string arguments_json{};  // a JSON object; anything else becomes {"arguments": text}
};

struct Message {
  std::string role{};  // "system", "developer", "user", "assistant", "tool"
  std::string content{};
  std::string reasoning{};               // assistant: reasoning_content
  std::vector<ToolCall> tool_calls{};    // assistant
  std::string tools_json{};              // system/developer: JSON array of {"type":"function",
                                       // "function":{...}} (OpenAI form) or of function objects
  std::string tool_call_id{};            // tool
};

// The tools block for a JSON array of function schemas (each written on one line).
Expected<std::string> tool_prompt(std::string_view tools_json);
// One DSML tool_calls block (with its leading "\n\n"), as history renders it.
std::string render_tool_calls(std::span<const ToolCall> calls);

// Renders the conversation (ending with the generation prefix when the last message is
// user/developer/tool). Errors: unknown role, invalid tools JSON, empty developer message.
Expected<std::string> render_chat(std::span<const Message> messages, ThinkMode mode);
Expected<std::vector<int32_t>> encode_chat(const Tokenizer& tok,
                                           std::span<const Message> messages, ThinkMode mode);

// Single prompt: BOS [think-max prefix] system <｜User｜>user <｜Assistant｜>(<think>|</think>)
std::string render_prompt(std::string_view system, std::string_view user, ThinkMode mode);
std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view system,
                                   std::string_view user, ThinkMode mode);

// Incremental multi-turn transcript for one live session. Each call returns the token
// suffix to append to the session (and records its text), so earlier turns are never
// re-rendered. Typical interactive loop:
//   ChatTranscript t(tok, system, mode);
//   session.prefill(t.start());                       // BOS [+prefix] + system
//   session.prefill(t.user_turn("hi", mode));         // <｜User｜>hi<｜Assistant｜><think>
//   ... generate ids ...;  session.prefill(t.assistant_generated(ids));   // -> {EOS}
class ChatTranscript {
 public:
  // The ThinkMax prefix is emitted by start() only when mode == kThinkMax.
  ChatTranscript(const Tokenizer& tok, std::string system, ThinkMode mode);

  // BOS [+ think-max prefix] + system text. Returns {} when already started. Every other
  // append starts the transcript implicitly (its suffix then begins with these ids), so the
  // call order can never be wrong.
  std::vector<int32_t> start();
  // <｜User｜>text + generation prefix for `mode`: everything before the model's reply.
  std::vector<int32_t> user_turn(std::string_view text, ThinkMode mode);
  // Records the ids the model generated after the generation prefix (they are already in the
  // session; the caller appended them) and returns the suffix to append after them: {EOS},
  // or {} when the last generated id already is EOS. The text is recorded as decode(generated) [+ EOS string].
  std::vector<int32_t> assistant_generated(std::span<const int32_t> generated);

  // Everything appended so far, as rendered text and as ids.
  const std::string& text() const { return text_; }
  const std::vector<int32_t>& tokens() const { return tokens_; }
  bool started() const { return started_; }

 private:
  std::vector<int32_t> append_rendered(std::string rendered);
  std::vector<int32_t> append_turn(std::string rendered);  // start() if needed, then append
  const Tokenizer* tok_;
  std::string system_;
  ThinkMode start_mode_;
  bool started_ = false;
  std::string text_;
  std::vector<int32_t> tokens_;
};

}  // namespace ds4::tok
