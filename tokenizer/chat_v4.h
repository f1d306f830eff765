// tokenizer/chat_v4.h — the DeepSeek V4 conversation encoding (system prompt, multi-turn,
// thinking modes, tool definitions, DSML tool calls, tool results).
//
// Role: renders a whole conversation to prompt text following the published V4 encoding rules
// (the encoding shipped with the V4 model files), for the server/API path and for checks; the
// text is then tokenized with Tokenizer::encode_rendered() (the 7 DS4 special strings become
// their ids). tokenizer/chat.h keeps ds4's CLI semantics (no EOS after history replies).
// Rules implemented (thinking = kThink or kThinkMax; chat = kNoThink):
//   * BOS, then for kThinkMax the think-max prefix (kThinkMaxPrefix) before the first message.
//   * system: its text; with tools: + "\n\n" + the tools block (tool_prompt()).
//   * developer: <｜User｜> + text [+ "\n\n" + tools block].
//   * user: <｜User｜> + text. tool messages are merged into the user message they follow
//     (consecutive tool results and a following user text join one user message): its blocks
//     are joined with "\n\n", a tool result being "<tool_result>" + text + "</tool_result>";
//     tool results are ordered like the tool calls of the last assistant message (by id).
//   * a user/developer message followed by an assistant message, or last: + <｜Assistant｜> +
//     (<think> when thinking and (tools are present or it is the last user-like message),
//     else </think>).
//   * assistant: [thinking: reasoning + </think>, only after the last user-like message or
//     when tools are present] + content + [tool calls] + <｜end▁of▁sentence｜>. Tool calls:
//     "\n\n<｜DSML｜tool_calls>\n" + invokes joined by "\n" + "\n</｜DSML｜tool_calls>"; an invoke
//     is "<｜DSML｜invoke name=\"N\">\n" + parameters joined by "\n" + "\n</｜DSML｜invoke>"; a
//     parameter is "<｜DSML｜parameter name=\"K\" string=\"true\">V</｜DSML｜parameter>" for a
//     string value (raw), string="false" with the value as JSON otherwise.
//   * thinking without tools drops history: assistant reasoning before the last user-like
//     message is not rendered and developer messages before it are dropped.
// JSON (tool schemas, non-string arguments) is written like Python's json.dumps with
// ensure_ascii=False: ", " and ": " separators, keys in their given order.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ds4::tok {

struct V4ToolCall {
  std::string id;              // optional; orders the tool results
  std::string name;
  std::string arguments_json;  // a JSON object; anything else becomes {"arguments": text}
};

struct V4Message {
  std::string role;  // "system", "developer", "user", "assistant", "tool"
  std::string content;
  std::string reasoning;                // assistant: reasoning_content
  std::vector<V4ToolCall> tool_calls;   // assistant
  std::string tools_json;               // system/developer: JSON array of {"type":"function",
                                        // "function":{...}} (OpenAI form) or of function objects
  std::string tool_call_id;             // tool
};

// The tools block for a JSON array of function schemas (each written on one line).
Expected<std::string> tool_prompt(std::string_view tools_json);

// Renders the conversation (ending with the generation prefix when the last message is
// user/developer/tool). Errors: unknown role, invalid tools JSON.
Expected<std::string> render_v4(std::span<const V4Message> messages, ThinkMode mode);
Expected<std::vector<int32_t>> encode_v4(const Tokenizer& tok,
                                         std::span<const V4Message> messages, ThinkMode mode);

}  // namespace ds4::tok
