// server/chat_format.h — the DS4 chat template as the server renders it, DSML tool calls, and
// the streaming split of generated text into reasoning / content / tool calls.
//
// Role: pure text functions (no engine, no HTTP), unit-tested in tests/server/.
//   * render_chat_prompt(): a whole conversation with server semantics
//     (ds4-architecture.md §8.5): BOS [think-max prefix] [tool schemas] [system texts joined
//     by "\n\n"], user turns, tool results as <tool_result> blocks under one <｜User｜>,
//     assistant history with its reasoning / DSML tool calls and EOS, then the generation
//     prefix. The result is tokenized with Engine::tokenize_rendered().
//   * DSML: tool calls are written by the model as
//       <｜DSML｜function_calls>
//       <｜DSML｜invoke name="NAME">
//       <｜DSML｜parameter name="P" string="true">raw text</｜DSML｜parameter>
//       <｜DSML｜parameter name="Q" string="false">JSON value</｜DSML｜parameter>
//       </｜DSML｜invoke>
//       </｜DSML｜function_calls>
//     render_dsml_calls() writes history calls in that form; parse_dsml_invoke() reads one.
//   * OutputParser: generated text in, deltas out, in three stages: stop sequences (on the raw
//     text), the thinking split at "</think>", then DSML blocks out of the content.
// Invariants:
//   * OutputParser never emits a byte twice nor drops one: reasoning + content + the raw text
//     of parsed tool blocks == the generated text up to (excluding) a matched stop sequence.
//   * Held-back text is only ever a proper prefix of a marker or stop sequence; finish()
//     releases it.
//   * A malformed DSML block never throws or aborts: its raw text goes to the content and
//     tool_error says what was wrong.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace ds4::server {

// Spellings of the DS4 special tokens (｜ is U+FF5C, ▁ is U+2581), as tokenize_rendered()
// recognizes them.
inline constexpr std::string_view kBosText =
    "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr std::string_view kEosText =
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
inline constexpr std::string_view kUserText = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
inline constexpr std::string_view kAssistantText = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";
inline constexpr std::string_view kThinkOpen = "<think>";
inline constexpr std::string_view kThinkClose = "</think>";
inline constexpr std::string_view kDsml = "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";

// "<｜DSML｜function_calls>" and friends.
std::string dsml_tag(std::string_view name);        // <｜DSML｜name
std::string dsml_close_tag(std::string_view name);  // </｜DSML｜name>

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON object text
};

struct ToolDef {
  std::string name;
  std::string description;
  std::string parameters_json;  // JSON Schema text ("{}" when none)
};

struct Message {
  std::string role;       // system, developer, user, assistant, tool
  std::string content;
  std::string reasoning;  // assistant history: its thinking
  std::vector<ToolCall> tool_calls;  // assistant history
};

struct ChatPrompt {
  std::vector<Message> messages;
  std::vector<ToolDef> tools;  // empty: no tool section
  // "" / "auto": model decides; "required": must call one; otherwise a tool name it must call.
  std::string tool_choice;
  ThinkMode mode = ThinkMode::kThink;  // already resolved for the context (think-max needs 384K)
};

// The think-max prefix of the DS4 template (three lines and a blank line).
std::string_view think_max_prefix();

// The system-text section describing the tools and the DSML call format.
std::string render_tool_section(const std::vector<ToolDef>& tools, const std::string& tool_choice);
// History tool calls as one DSML block (arguments: a JSON object; string values are written
// raw with string="true", other values as JSON with string="false").
std::string render_dsml_calls(const std::vector<ToolCall>& calls);
// Whole conversation with server semantics (header comment), ending with the generation prefix.
std::string render_chat_prompt(const ChatPrompt& prompt);

// Parses one "<｜DSML｜invoke ...>...</｜DSML｜invoke>" element (the text from the invoke tag to
// its close tag inclusive). Returns false with *error set on malformed input.
bool parse_dsml_invoke(std::string_view text, ToolCall* call, std::string* error);

// Text produced by one OutputParser call.
struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;  // completed calls (ids assigned by the parser)
  std::string tool_error;            // a malformed tool block (its text went to content)
  bool empty() const {
    return reasoning.empty() && content.empty() && tool_calls.empty() && tool_error.empty();
  }
  void append(const OutputDelta& d);
};

class OutputParser {
 public:
  // thinking: the prompt ended with <think>, so text is reasoning until </think>.
  // parse_tools: DSML blocks in the content become tool calls.
  // id_prefix: tool-call ids are id_prefix + a counter ("call_<request>_0", ...).
  OutputParser(bool thinking, bool parse_tools, std::vector<std::string> stops,
               std::string id_prefix);

  // Feeds generated text. Returns true when a stop sequence matched: the text before it has
  // been emitted and the caller should stop generating (stop_sequence() names it).
  bool push(std::string_view text, OutputDelta* out);
  // End of generation: releases held-back text; reports an unterminated tool block.
  void finish(OutputDelta* out);

  const std::string& stop_sequence() const { return matched_stop_; }
  int tool_calls_emitted() const { return n_calls_; }

 private:
  void route(std::string_view text, OutputDelta* out);       // after the stop stage
  void content(std::string_view text, OutputDelta* out);     // after the thinking stage
  void drain_dsml(OutputDelta* out, bool at_end);

  bool in_thinking_;
  bool parse_tools_;
  std::vector<std::string> stops_;
  std::string id_prefix_;
  std::string stop_buf_;    // held back: a possible start of a stop sequence
  std::string think_buf_;   // held back: a possible start of </think>
  std::string text_buf_;    // held back: a possible start of the DSML block tag
  std::string block_;       // inside a DSML block: its text so far
  bool in_block_ = false;
  int block_calls_ = 0;     // calls parsed in the current block
  std::string matched_stop_;
  bool stopped_ = false;
  int n_calls_ = 0;
};

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view text, std::string_view marker);

}  // namespace ds4::server
