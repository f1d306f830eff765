// server/api.h — OpenAI (chat, completions) and Anthropic (messages) request bodies, parsed
// and validated into one ApiRequest.
//
// Role: pure JSON -> struct translation with every check a client mistake can fail
// (types, ranges, unknown model, unsupported features). No engine calls: tokenization and the
// context check happen in http.cpp.
// Invariants:
//   * parse_*() either return a complete request or throw ApiError (status 4xx, an error
//     type, a message naming the field and what was expected) — never anything else for any
//     JSON input.
//   * Unknown fields are ignored (clients send extras); known fields with the wrong type or
//     an out-of-range value are errors, never silently clamped — except max_tokens, which is
//     capped at the server's --max-tokens.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/generate.h"
#include "engine/chat_output.h"
#include "engine/engine.h"

namespace ds4::server {

enum class Api { kChat, kCompletion, kMessages };

struct ToolDef {
  std::string name;
  std::string description;
  std::string parameters_json;  // JSON Schema text ("" when none)
};

// A chat request before rendering: the messages plus the request-level tool list.
struct ChatPrompt {
  std::vector<ChatMessage> messages;
  std::vector<ToolDef> tools;  // empty: no tool section
  // "" / "auto": model decides; "none": tools are not rendered; "required" / a tool name:
  // validated, but not part of the published V4 prompt format (nothing is rendered for it).
  std::string tool_choice;
  ThinkMode mode = ThinkMode::kThink;  // already resolved for the context (think-max needs 384K)
};

// The messages the renderer (TextCodec::try_render_chat) takes: the tools become the tools
// JSON of the first system message (one is inserted at the front when there is none), as the
// V4 encoding attaches tool schemas to the system prompt.
std::vector<ChatMessage> render_messages(const ChatPrompt& prompt);

// A client error: HTTP status + OpenAI-style type and message (+ the offending field).
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string type, const std::string& message, std::string param = {})
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type;   // invalid_request_error, authentication_error, not_found_error, ...
  std::string param;
};

// Error body: {"type":"error","error":{"message","type","param","code"}} — OpenAI's shape
// (error.message/type/param/code) that also carries Anthropic's top-level "type":"error".
nlohmann::json error_body(int status, const std::string& type, const std::string& message,
                          const std::string& param = {});

struct ApiLimits {
  std::vector<std::string> model_names;  // accepted "model" values (the first is reported)
  int max_tokens = 4096;                  // cap and default of the generated-token budget
  int n_ctx = 4096;
  int n_vocab = 0;                        // token-array prompts are checked against it
  bool default_thinking = true;           // OpenAI default when no thinking field is given
};

struct ApiRequest {
  Api api = Api::kChat;
  std::string model;
  bool stream = false;
  bool include_usage = false;
  ChatPrompt chat;                 // kChat / kMessages
  std::string prompt_text;         // kCompletion (text form)
  std::vector<int32_t> prompt_ids; // kCompletion (token-array form)
  bool prompt_is_ids = false;
  int max_tokens = 0;              // resolved: min(request or default, cap)
  bool max_tokens_given = false;
  SamplerParams sampler;
  bool seed_given = false;
  std::vector<std::string> stops;
  int top_logprobs = -1;           // -1: no logprobs
  bool tools_enabled = false;      // parse DSML out of the output
};

ApiRequest parse_chat_request(const nlohmann::json& body, const ApiLimits& limits);
ApiRequest parse_completion_request(const nlohmann::json& body, const ApiLimits& limits);
ApiRequest parse_messages_request(const nlohmann::json& body, const ApiLimits& limits);

// Think mode from OpenAI's reasoning_effort / a "thinking" object / a "think" bool
// (none|minimal -> no thinking; low|medium|high -> thinking; xhigh|max -> think-max).
ThinkMode parse_think_mode(const nlohmann::json& body, bool default_thinking);

}  // namespace ds4::server
