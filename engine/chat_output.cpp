// engine/chat_output.cpp — the streaming split of generated text (stop sequences, thinking,
// DSML tool calls); the DSML spelling comes from tokenizer/chat.h, the renderer's own.
#include "engine/chat_output.h"

#include <algorithm>
#include <utility>

#include <nlohmann/json.hpp>

#include "tokenizer/chat.h"

namespace ds4 {

using nlohmann::json;

namespace {

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

// Reads attr="value" pairs from the inside of a tag ("name=\"x\" string=\"true\"").
bool parse_attributes(std::string_view s, std::vector<std::pair<std::string, std::string>>* out) {
  s = trim(s);
  while (!s.empty()) {
    const size_t eq = s.find('=');
    if (eq == std::string_view::npos || eq + 1 >= s.size() || s[eq + 1] != '"') return false;
    std::string key(trim(s.substr(0, eq)));
    const size_t end = s.find('"', eq + 2);
    if (end == std::string_view::npos || key.empty()) return false;
    out->emplace_back(std::move(key), std::string(s.substr(eq + 2, end - eq - 2)));
    s = trim(s.substr(end + 1));
  }
  return true;
}

const std::string* find_attr(const std::vector<std::pair<std::string, std::string>>& attrs,
                             std::string_view key) {
  for (const auto& [k, v] : attrs)
    if (k == key) return &v;
  return nullptr;
}


}  // namespace

namespace {

using ojson = nlohmann::ordered_json;  // parameters keep their generated order

std::string dump_ojson(const ojson& j) { return j.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// A parameter's JSON value: string="true" -> the raw text as a string; otherwise the text
// parsed as JSON, or (no string attribute) the raw text when it is not JSON. False when
// string="false" promised JSON that does not parse.
bool param_value(const std::string* is_string, const std::string& value, ojson* out) {
  if (is_string != nullptr && *is_string == "true") {
    *out = value;
    return true;
  }
  ojson v = ojson::parse(value, nullptr, /*allow_exceptions=*/false);
  if (v.is_discarded()) {
    if (is_string != nullptr) return false;
    *out = value;
    return true;
  }
  *out = std::move(v);
  return true;
}

// Bytes of s that end before an incomplete UTF-8 sequence at its end.
size_t complete_utf8_prefix(std::string_view s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 3 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: look further back
    const size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return len > back ? n - back : n;
  }
  return n;
}

// The invoke tag's name and the text after the tag; false while the tag is incomplete or
// nameless. *error is set only when the tag is complete but bad.
bool invoke_header(std::string_view text, std::string* name, std::string_view* rest, std::string* error) {
  const std::string open = tok::dsml_open(tok::kDsmlInvoke);
  if (!text.starts_with(open)) {
    if (error) *error = "tool call: expected an invoke element";
    return false;
  }
  std::string_view r = text.substr(open.size());
  const size_t gt = r.find('>');
  if (gt == std::string_view::npos) {
    if (error) *error = "tool call: unterminated invoke tag";
    return false;
  }
  std::vector<std::pair<std::string, std::string>> attrs;
  const std::string* n = nullptr;
  if (!parse_attributes(r.substr(0, gt), &attrs) || !(n = find_attr(attrs, "name")) || n->empty()) {
    if (error) *error = "tool call: invoke tag without a name=\"...\" attribute";
    return false;
  }
  *name = *n;
  *rest = r.substr(gt + 1);
  return true;
}

}  // namespace

bool parse_dsml_invoke(std::string_view text, ChatToolCall* call, std::string* error) {
  const std::string close = tok::dsml_close(tok::kDsmlInvoke);
  const std::string popen = tok::dsml_open(tok::kDsmlParameter);
  const std::string pclose = tok::dsml_close(tok::kDsmlParameter);
  text = trim(text);
  if (!text.ends_with(close)) {
    *error = "tool call: expected an invoke element";
    return false;
  }
  std::string_view rest;
  if (!invoke_header(text.substr(0, text.size() - close.size()), &call->name, &rest, error)) return false;
  ojson args = ojson::object();
  while (true) {
    rest = trim(rest);
    if (rest.empty()) break;
    if (!rest.starts_with(popen)) {
      *error = "tool call '" + call->name + "': unexpected text inside invoke";
      return false;
    }
    rest = rest.substr(popen.size());
    const size_t pgt = rest.find('>');
    if (pgt == std::string_view::npos) {
      *error = "tool call '" + call->name + "': unterminated parameter tag";
      return false;
    }
    std::vector<std::pair<std::string, std::string>> pattrs;
    const std::string* pname = nullptr;
    if (!parse_attributes(rest.substr(0, pgt), &pattrs) || !(pname = find_attr(pattrs, "name")) ||
        pname->empty()) {
      *error = "tool call '" + call->name + "': parameter without a name=\"...\" attribute";
      return false;
    }
    const std::string* is_string = find_attr(pattrs, "string");
    rest = rest.substr(pgt + 1);
    const size_t end = rest.find(pclose);
    if (end == std::string_view::npos) {
      *error = "tool call '" + call->name + "': parameter '" + *pname + "' is not closed";
      return false;
    }
    const std::string value(rest.substr(0, end));
    rest = rest.substr(end + pclose.size());
    if (args.contains(*pname)) {
      *error = "tool call '" + call->name + "': parameter '" + *pname + "' is given twice";
      return false;
    }
    ojson v;
    if (!param_value(is_string, value, &v)) {
      *error = "tool call '" + call->name + "': parameter '" + *pname + "' is not valid JSON";
      return false;
    }
    args[*pname] = std::move(v);
  }
  call->arguments = dump_ojson(args);
  return true;
}

bool partial_dsml_arguments(std::string_view invoke, std::string* name, std::string* arguments) {
  const std::string popen = tok::dsml_open(tok::kDsmlParameter);
  const std::string pclose = tok::dsml_close(tok::kDsmlParameter);
  std::string_view rest;
  if (!invoke_header(trim(invoke), name, &rest, nullptr)) return false;
  arguments->clear();
  ojson seen = ojson::object();  // complete parameters (for repeats: stop streaming there)
  while (true) {
    rest = trim(rest);
    if (!rest.starts_with(popen)) return true;  // more to come, the close tag, or malformed
    rest = rest.substr(popen.size());
    const size_t pgt = rest.find('>');
    if (pgt == std::string_view::npos) return true;
    std::vector<std::pair<std::string, std::string>> pattrs;
    const std::string* pname = nullptr;
    if (!parse_attributes(rest.substr(0, pgt), &pattrs) || !(pname = find_attr(pattrs, "name")) ||
        pname->empty() || seen.contains(*pname)) {
      return true;  // malformed: the complete element will say so
    }
    const std::string* is_string = find_attr(pattrs, "string");
    const bool raw_string = is_string != nullptr && *is_string == "true";
    rest = rest.substr(pgt + 1);
    const std::string key = dump_ojson(ojson(*pname)) + ":";
    const char* sep = arguments->empty() ? "{" : ",";
    const size_t end = rest.find(pclose);
    if (end == std::string_view::npos) {
      if (raw_string) {  // the value so far, without its closing quote
        std::string_view v = rest.substr(0, rest.size() - partial_suffix(rest, pclose));
        v = v.substr(0, complete_utf8_prefix(v));
        std::string esc = dump_ojson(ojson(std::string(v)));
        esc.pop_back();
        *arguments += sep + key + esc;
      }
      return true;
    }
    ojson v;
    if (!param_value(is_string, std::string(rest.substr(0, end)), &v)) return true;
    *arguments += sep + key + dump_ojson(v);
    seen[*pname] = true;
    rest = rest.substr(end + pclose.size());
  }
}

void OutputDelta::append(const OutputDelta& d) {
  reasoning += d.reasoning;
  content += d.content;
  tool_calls.insert(tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
  for (const ToolCallPart& p : d.tool_call_parts) {
    if (!tool_call_parts.empty() && tool_call_parts.back().index == p.index && p.id.empty()) {
      tool_call_parts.back().arguments += p.arguments;
    } else {
      tool_call_parts.push_back(p);
    }
  }
  if (!d.tool_error.empty()) {
    if (!tool_error.empty()) tool_error += "; ";
    tool_error += d.tool_error;
  }
}

size_t partial_suffix(std::string_view text, std::string_view marker) {
  const size_t max = std::min(text.size(), marker.empty() ? 0 : marker.size() - 1);
  for (size_t n = max; n > 0; --n) {
    if (text.substr(text.size() - n) == marker.substr(0, n)) return n;
  }
  return 0;
}

OutputParser::OutputParser(bool thinking, bool parse_tools, std::vector<std::string> stops,
                           std::string id_prefix)
    : in_thinking_(thinking), parse_tools_(parse_tools), stops_(std::move(stops)),
      id_prefix_(std::move(id_prefix)),
      block_open_(tok::dsml_open(tok::kDsmlToolCalls) + ">"),
      block_close_(tok::dsml_close(tok::kDsmlToolCalls)) {
  stops_.erase(std::remove_if(stops_.begin(), stops_.end(), [](const std::string& s) { return s.empty(); }),
               stops_.end());
}

bool OutputParser::push(std::string_view text, OutputDelta* out) {
  if (stopped_) return true;
  if (stops_.empty()) {
    route(text, out);
    return false;
  }
  stop_buf_.append(text);
  // Earliest match of any stop sequence.
  size_t best = std::string::npos;
  const std::string* best_stop = nullptr;
  for (const std::string& s : stops_) {
    const size_t at = stop_buf_.find(s);
    if (at != std::string::npos && at < best) {
      best = at;
      best_stop = &s;
    }
  }
  if (best_stop != nullptr) {
    route(std::string_view(stop_buf_).substr(0, best), out);
    matched_stop_ = *best_stop;
    stopped_ = true;
    stop_buf_.clear();
    return true;
  }
  size_t hold = 0;
  for (const std::string& s : stops_) hold = std::max(hold, partial_suffix(stop_buf_, s));
  const size_t emit = stop_buf_.size() - hold;
  route(std::string_view(stop_buf_).substr(0, emit), out);
  stop_buf_.erase(0, emit);
  return false;
}

void OutputParser::route(std::string_view text, OutputDelta* out) {
  if (text.empty()) return;
  if (!in_thinking_) {
    content(text, out);
    return;
  }
  think_buf_.append(text);
  const size_t at = think_buf_.find(tok::kThinkCloseText);
  if (at != std::string::npos) {
    out->reasoning.append(think_buf_, 0, at);
    in_thinking_ = false;
    std::string rest = think_buf_.substr(at + tok::kThinkCloseText.size());
    think_buf_.clear();
    content(rest, out);
    return;
  }
  const size_t hold = partial_suffix(think_buf_, tok::kThinkCloseText);
  out->reasoning.append(think_buf_, 0, think_buf_.size() - hold);
  think_buf_.erase(0, think_buf_.size() - hold);
}

void OutputParser::content(std::string_view text, OutputDelta* out) {
  if (text.empty()) return;
  if (!parse_tools_) {
    out->content.append(text);
    return;
  }
  if (in_block_) {
    block_.append(text);
    drain_dsml(out, false);
    return;
  }
  text_buf_.append(text);
  const std::string& open = block_open_;
  const size_t at = text_buf_.find(open);
  if (at != std::string::npos) {
    // The whitespace the V4 format writes before a block ("\n\n") belongs to the block.
    size_t lead = at;
    while (lead > 0 && is_space(text_buf_[lead - 1])) --lead;
    out->content.append(text_buf_, 0, lead);
    block_lead_ = text_buf_.substr(lead, at - lead);
    in_block_ = true;
    block_calls_ = 0;
    block_ = text_buf_.substr(at);
    text_buf_.clear();
    drain_dsml(out, false);
    return;
  }
  // Hold back a possible start of the block tag and the whitespace before it.
  size_t emit = text_buf_.size() - partial_suffix(text_buf_, open);
  while (emit > 0 && is_space(text_buf_[emit - 1])) --emit;
  out->content.append(text_buf_, 0, emit);
  text_buf_.erase(0, emit);
}

// A block that does not parse goes back to the content, with the whitespace held before it.
void OutputParser::emit_block_text(std::string_view raw, OutputDelta* out) {
  out->content.append(block_lead_);
  out->content.append(raw);
  block_lead_.clear();
}

// Emits every complete invoke of the current block; leaves the block when it closes.
void OutputParser::drain_dsml(OutputDelta* out, bool at_end) {
  const std::string& open = block_open_;
  const std::string& close = block_close_;
  const std::string inv_close = tok::dsml_close(tok::kDsmlInvoke);
  // block_ = "<｜DSML｜tool_calls>" + complete-or-partial invokes [+ close + rest]
  while (in_block_) {
    std::string_view body = std::string_view(block_).substr(open.size());
    const size_t ws = body.find_first_not_of(" \t\r\n");
    if (ws == std::string_view::npos) break;  // only whitespace so far
    body = body.substr(ws);
    if (body.starts_with(close)) {
      const std::string rest(body.substr(close.size()));
      if (block_calls_ == 0) {  // nothing parsed in this block: keep its text, say so
        emit_block_text(std::string_view(block_).substr(0, open.size() + ws + close.size()), out);
        if (!out->tool_error.empty()) out->tool_error += "; ";
        out->tool_error += "empty tool-call block";
      }
      in_block_ = false;
      block_.clear();
      block_lead_.clear();
      content(rest, out);
      return;
    }
    if (close.starts_with(body) && !at_end) break;  // a partial close tag
    const size_t end = body.find(inv_close);
    if (end == std::string_view::npos) {
      const std::string inv_open = tok::dsml_open(tok::kDsmlInvoke);
      const bool plausible = body.size() < inv_open.size() ? inv_open.starts_with(body)
                                                           : body.starts_with(inv_open);
      if (plausible && !at_end) {  // wait for more text
        if (stream_args_) stream_partial_call(body, out);
        break;
      }
      end_streamed_call();
      emit_block_text(block_, out);
      out->tool_error = at_end ? "unterminated tool-call block"
                               : "malformed tool-call block: expected an invoke element";
      in_block_ = false;
      block_.clear();
      return;
    }
    ChatToolCall call;
    std::string error;
    const std::string_view element = body.substr(0, end + inv_close.size());
    if (parse_dsml_invoke(element, &call, &error)) {
      call.id = id_prefix_ + std::to_string(next_index_);
      if (stream_args_) {
        if (!call_started_) {
          out->tool_call_parts.push_back(ToolCallPart{next_index_, call.id, call.name, {}});
          streamed_args_.clear();
        }
        if (call.arguments.starts_with(streamed_args_)) {
          if (call.arguments.size() > streamed_args_.size()) {
            out->tool_call_parts.push_back(ToolCallPart{next_index_, {}, {}, call.arguments.substr(streamed_args_.size())});
          }
        } else {  // cannot happen for valid UTF-8 (partial_dsml_arguments); never silent
          if (!out->tool_error.empty()) out->tool_error += "; ";
          out->tool_error += "tool call '" + call.name + "': streamed arguments differ from the parsed call";
        }
        call_started_ = false;
        streamed_args_.clear();
      }
      next_index_++;
      n_calls_++;
      block_calls_++;
      out->tool_calls.push_back(std::move(call));
    } else {
      end_streamed_call();
      out->content.append(element);
      if (!out->tool_error.empty()) out->tool_error += "; ";
      out->tool_error += error;
    }
    block_ = open + std::string(body.substr(element.size()));
  }
  if (at_end && in_block_) {
    end_streamed_call();
    // Only the closing tag is missing after complete invokes: accept silently.
    std::string_view body = std::string_view(block_).substr(open.size());
    in_block_ = false;
    if (!trim(body).empty()) {
      emit_block_text(body, out);
      out->tool_error = "unterminated tool-call block";
    } else if (block_calls_ == 0) {
      emit_block_text(block_, out);
      out->tool_error = "empty tool-call block";
    }
    block_.clear();
  }
}

void OutputParser::stream_partial_call(std::string_view invoke, OutputDelta* out) {
  std::string name, args;
  if (!partial_dsml_arguments(invoke, &name, &args)) return;
  if (!call_started_) {
    call_started_ = true;
    streamed_args_.clear();
    out->tool_call_parts.push_back(ToolCallPart{next_index_, id_prefix_ + std::to_string(next_index_), name, {}});
  }
  if (args.size() > streamed_args_.size() && args.starts_with(streamed_args_)) {
    out->tool_call_parts.push_back(ToolCallPart{next_index_, {}, {}, args.substr(streamed_args_.size())});
    streamed_args_ = std::move(args);
  }
}

void OutputParser::end_streamed_call() {
  if (!call_started_) return;
  call_started_ = false;
  streamed_args_.clear();
  next_index_++;
}

void OutputParser::finish(OutputDelta* out) {
  if (!stopped_ && !stop_buf_.empty()) {
    std::string rest = std::move(stop_buf_);
    stop_buf_.clear();
    route(rest, out);
  }
  if (in_thinking_ && !think_buf_.empty()) {
    out->reasoning.append(think_buf_);
    think_buf_.clear();
  }
  if (!text_buf_.empty()) {
    out->content.append(text_buf_);
    text_buf_.clear();
  }
  if (in_block_) drain_dsml(out, true);
}

}  // namespace ds4
