// engine/chat_output.h — the one parser of what the model writes in a chat reply: the
// streaming split of generated text into reasoning / content / DSML tool calls, plus stop
// sequences. Used by the server (and any frontend that exposes tool calls).
//
// Role: pure text (no model, no HTTP). The DSML spelling is the V4 encoding's, taken from
// tokenizer/chat.h (the renderer of history tool calls), so what the parser reads is exactly
// what the renderer writes:
//     <｜DSML｜tool_calls>
//     <｜DSML｜invoke name="NAME">
//     <｜DSML｜parameter name="P" string="true">raw text</｜DSML｜parameter>
//     <｜DSML｜parameter name="Q" string="false">JSON value</｜DSML｜parameter>
//     </｜DSML｜invoke>
//     </｜DSML｜tool_calls>
// OutputParser works in three stages: stop sequences (on the raw text), the thinking split at
// "</think>", then DSML blocks out of the content.
// Invariants:
//   * OutputParser never emits a byte twice nor drops one: reasoning + content + the raw text
//     of parsed tool blocks (with the whitespace before them) == the generated text up to (excluding) a matched stop sequence.
//   * Held-back text is only ever a proper prefix of a marker or stop sequence, or content
//     whitespace that may precede a DSML block (the V4 format writes "\n\n" before one and
//     that whitespace is part of the block's raw text); finish() releases it.
//   * A malformed DSML block never throws or aborts: its raw text goes to the content and
//     tool_error says what was wrong.
//   * Arguments are JSON objects with the parameters in generated order (a repeated parameter
//     name is malformed), so a streamed prefix of them is never contradicted later.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "engine/engine.h"

namespace ds4 {

// Parses one "<｜DSML｜invoke ...>...</｜DSML｜invoke>" element (the text from the invoke tag to
// its close tag inclusive). Returns false with *error set on malformed input. The arguments
// come back as compact JSON object text; call->id is left alone.
bool parse_dsml_invoke(std::string_view text, ChatToolCall* call, std::string* error);

// The arguments of a tool call as far as they were generated (OutputParser with
// set_stream_tool_arguments): the arguments JSON text of the complete parameters, then, inside
// a string parameter, its value so far ("{\"a\":1,\"s\":\"hel"). A JSON-valued parameter
// appears once it is closed. Every later prefix extends this one, and the complete call's
// arguments (parse_dsml_invoke) extend them all. Returns false until the invoke tag and its
// name are complete. `invoke` starts at the invoke tag and need not be complete.
bool partial_dsml_arguments(std::string_view invoke, std::string* name, std::string* arguments);

// One piece of a streamed tool call (OpenAI's tool_calls[].function.arguments deltas): the
// first piece of a call carries its id and name (and usually empty arguments); the later ones
// only more arguments text. The pieces of one index concatenate to that call's arguments.
struct ToolCallPart {
  int index = 0;
  std::string id;    // first piece only
  std::string name;  // first piece only
  std::string arguments;
};

// Text produced by one OutputParser call.
struct OutputDelta {
  std::string reasoning;
  std::string content;
  std::vector<ChatToolCall> tool_calls;  // completed calls (ids assigned by the parser)
  std::vector<ToolCallPart> tool_call_parts;  // streamed pieces (set_stream_tool_arguments)
  std::string tool_error;                // a malformed tool block (its text went to content)
  bool empty() const {
    return reasoning.empty() && content.empty() && tool_calls.empty() && tool_call_parts.empty() &&
           tool_error.empty();
  }
  void append(const OutputDelta& d);  // merges a continuation piece into the previous one
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

  // Also stream each tool call piecewise as tool_call_parts while it is generated (completed
  // calls still come in tool_calls). A call whose start was streamed and that then turns out
  // malformed keeps its index (the next call takes the following one); tool_error says why.
  void set_stream_tool_arguments(bool on) { stream_args_ = on; }

  const std::string& stop_sequence() const { return matched_stop_; }
  int tool_calls_emitted() const { return n_calls_; }

 private:
  void route(std::string_view text, OutputDelta* out);       // after the stop stage
  void content(std::string_view text, OutputDelta* out);     // after the thinking stage
  void drain_dsml(OutputDelta* out, bool at_end);
  void emit_block_text(std::string_view raw, OutputDelta* out);
  void stream_partial_call(std::string_view invoke, OutputDelta* out);  // stream_args_
  void end_streamed_call();  // an abandoned started call: its index stays used

  bool in_thinking_;
  bool parse_tools_;
  std::vector<std::string> stops_;
  std::string id_prefix_;
  std::string block_open_;   // "<｜DSML｜tool_calls>"
  std::string block_close_;  // "</｜DSML｜tool_calls>"
  std::string stop_buf_;    // held back: a possible start of a stop sequence
  std::string think_buf_;   // held back: a possible start of </think>
  std::string text_buf_;    // held back: a possible start of the DSML block tag
  std::string block_;       // inside a DSML block: its text so far
  std::string block_lead_;  // the whitespace before the current block (its raw text too)
  bool in_block_ = false;
  int block_calls_ = 0;     // calls parsed in the current block
  std::string matched_stop_;
  bool stopped_ = false;
  int n_calls_ = 0;         // completed calls
  int next_index_ = 0;      // index (and id suffix) of the next call
  bool stream_args_ = false;
  bool call_started_ = false;   // the current invoke's first piece was emitted
  std::string streamed_args_;   // its arguments text emitted so far
};

// Length of the longest suffix of `text` that is a proper prefix of `marker`.
size_t partial_suffix(std::string_view text, std::string_view marker);

}  // namespace ds4
