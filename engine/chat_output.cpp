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

std::string dump_json(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

}  // namespace

bool parse_dsml_invoke(std::string_view text, ChatToolCall* call, std::string* error) {
  const std::string open = tok::dsml_open(tok::kDsmlInvoke);
  const std::string close = tok::dsml_close(tok::kDsmlInvoke);
  const std::string popen = tok::dsml_open(tok::kDsmlParameter);
  const std::string pclose = tok::dsml_close(tok::kDsmlParameter);
  text = trim(text);
  if (!text.starts_with(open) || !text.ends_with(close)) {
    *error = "tool call: expected an invoke element";
    return false;
  }
  std::string_view rest = text.substr(open.size(), text.size() - open.size() - close.size());
  const size_t gt = rest.find('>');
  if (gt == std::string_view::npos) {
    *error = "tool call: unterminated invoke tag";
    return false;
  }
  std::vector<std::pair<std::string, std::string>> attrs;
  const std::string* name = nullptr;
  if (!parse_attributes(rest.substr(0, gt), &attrs) || !(name = find_attr(attrs, "name")) ||
      name->empty()) {
    *error = "tool call: invoke tag without a name=\"...\" attribute";
    return false;
  }
  call->name = *name;
  rest = rest.substr(gt + 1);
  json args = json::object();
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
    if (is_string != nullptr && *is_string == "true") {
      args[*pname] = value;
    } else {
      json v = json::parse(value, nullptr, /*allow_exceptions=*/false);
      if (v.is_discarded()) {
        if (is_string != nullptr) {  // string="false" promised JSON
          *error = "tool call '" + call->name + "': parameter '" + *pname + "' is not valid JSON";
          return false;
        }
        args[*pname] = value;  // no string attribute: take the raw text
      } else {
        args[*pname] = std::move(v);
      }
    }
  }
  call->arguments = dump_json(args);
  return true;
}

void OutputDelta::append(const OutputDelta& d) {
  reasoning += d.reasoning;
  content += d.content;
  tool_calls.insert(tool_calls.end(), d.tool_calls.begin(), d.tool_calls.end());
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
      if (plausible && !at_end) break;  // wait for more text
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
      call.id = id_prefix_ + std::to_string(n_calls_++);
      block_calls_++;
      out->tool_calls.push_back(std::move(call));
    } else {
      out->content.append(element);
      if (!out->tool_error.empty()) out->tool_error += "; ";
      out->tool_error += error;
    }
    block_ = open + std::string(body.substr(element.size()));
  }
  if (at_end && in_block_) {
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
