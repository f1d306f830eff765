// tokenizer/chat.cpp — the DeepSeek V4 chat encoding (rules in chat.h) and the incremental
// transcript built from the same pieces.
#include "tokenizer/chat.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include <nlohmann/json.hpp>

namespace ds4::tok {
namespace {

using OJson = nlohmann::ordered_json;

// The tools block of the V4 prompt format: the literal text the model was trained with (a
// format constant like kThinkMaxPrefix). "@D" stands for ｜DSML｜, "@S" for the schemas.
constexpr std::string_view kToolsTemplate =
    "## Tools\n"
    "\n"
    "You have access to a set of tools to help answer the user's question. You can invoke tools "
    "by writing a \"<@Dtool_calls>\" block like the following:\n"
    "\n"
    "<@Dtool_calls>\n"
    "<@Dinvoke name=\"$TOOL_NAME\">\n"
    "<@Dparameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</@Dparameter>\n"
    "...\n"
    "</@Dinvoke>\n"
    "<@Dinvoke name=\"$TOOL_NAME2\">\n"
    "...\n"
    "</@Dinvoke>\n"
    "</@Dtool_calls>\n"
    "\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types "
    "(numbers, booleans, arrays, objects), pass the value in JSON format and set "
    "`string=\"false\"`.\n"
    "\n"
    "If thinking_mode is enabled (triggered by <think>), you MUST output your complete reasoning "
    "inside <think>...</think> BEFORE any tool calls or final response.\n"
    "\n"
    "Otherwise, output directly after </think> with tool calls or final response.\n"
    "\n"
    "### Available Tool Schemas\n"
    "\n"
    "@S\n"
    "\n"
    "You MUST strictly follow the above defined tool name and parameter schemas to invoke tool "
    "calls.\n";

// Python json.dumps(v, ensure_ascii=False) with the default separators; keys keep their order.
void dump_py(const OJson& v, std::string* out) {
  if (v.is_object()) {
    out->push_back('{');
    bool first = true;
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!first) out->append(", ");
      first = false;
      out->append(OJson(it.key()).dump(-1, ' ', false));
      out->append(": ");
      dump_py(it.value(), out);
    }
    out->push_back('}');
  } else if (v.is_array()) {
    out->push_back('[');
    for (size_t i = 0; i < v.size(); ++i) {
      if (i) out->append(", ");
      dump_py(v[i], out);
    }
    out->push_back(']');
  } else if (v.is_boolean()) {
    out->append(v.get<bool>() ? "true" : "false");
  } else if (v.is_null()) {
    out->append("null");
  } else {
    out->append(v.dump(-1, ' ', false));
  }
}

Expected<std::string> to_json_py(const OJson& v) {
  std::string s;
  try {
    dump_py(v, &s);
  } catch (const std::exception& e) {
    return invalid_argument("chat: cannot write JSON: %s", e.what());
  }
  return s;
}

void replace_all(std::string* s, std::string_view from, std::string_view to) {
  for (size_t p = s->find(from); p != std::string::npos; p = s->find(from, p + to.size()))
    s->replace(p, from.size(), to);
}

std::string tool_calls_block(std::span<const ToolCall> calls) {
  const std::string d(kDsmlText);
  std::string invokes;
  for (size_t c = 0; c < calls.size(); ++c) {
    const ToolCall& tc = calls[c];
    OJson args;
    bool ok = false;
    try {
      args = OJson::parse(tc.arguments_json);
      ok = args.is_object();
    } catch (const std::exception&) {
    }
    if (!ok) {
      args = OJson::object();
      args["arguments"] = tc.arguments_json;
    }
    std::string params;
    bool first = true;
    for (auto it = args.begin(); it != args.end(); ++it) {
      if (!first) params += "\n";
      first = false;
      const bool is_str = it.value().is_string();
      std::string value;
      if (is_str) {
        value = it.value().get<std::string>();
      } else {
        auto j = to_json_py(it.value());
        value = j.ok() ? *j : std::string();
      }
      params += "<" + d + "parameter name=\"" + it.key() + "\" string=\"" +
                (is_str ? "true" : "false") + "\">" + value + "</" + d + "parameter>";
    }
    if (c) invokes += "\n";
    invokes += "<" + d + "invoke name=\"" + tc.name + "\">\n" + params + "\n</" + d + "invoke>";
  }
  return "\n\n<" + d + "tool_calls>\n" + invokes + "\n</" + d + "tool_calls>";
}

// A message after tool merging: user messages carry blocks.
struct Block {
  bool tool_result = false;
  std::string text;
  std::string tool_use_id;
};
struct Merged {
  const Message* msg = nullptr;  // original (null for a user made of tool results only)
  std::string role;
  std::vector<Block> blocks;  // user only
  bool has_blocks = false;
  bool drop_reasoning = false;
};

}  // namespace

Expected<std::string> tool_prompt(std::string_view tools_json) {
  OJson tools;
  try {
    tools = OJson::parse(tools_json);
  } catch (const std::exception& e) {
    return invalid_argument("chat: tools are not valid JSON: %s", e.what());
  }
  if (!tools.is_array()) return invalid_argument("chat: tools must be a JSON array");
  std::string schemas;
  for (size_t i = 0; i < tools.size(); ++i) {
    const OJson& t = tools[i];
    const OJson& fn = t.is_object() && t.contains("function") ? t["function"] : t;
    DS4_ASSIGN_OR_RETURN(std::string line, to_json_py(fn));
    if (i) schemas += "\n";
    schemas += line;
  }
  std::string out(kToolsTemplate);
  replace_all(&out, "@D", kDsmlText);
  replace_all(&out, "@S", schemas);
  return out;
}

Expected<std::string> render_chat(std::span<const Message> messages, ThinkMode mode) {
  const bool thinking = mode != ThinkMode::kNoThink;
  // 1. Merge tool results into user messages.
  std::vector<Merged> ms;
  for (const Message& m : messages) {
    if (m.role == "tool") {
      Block b{true, m.content, m.tool_call_id};
      if (!ms.empty() && ms.back().role == "user" && ms.back().has_blocks) {
        ms.back().blocks.push_back(std::move(b));
      } else {
        Merged u;
        u.role = "user";
        u.has_blocks = true;
        u.blocks.push_back(std::move(b));
        ms.push_back(std::move(u));
      }
    } else if (m.role == "user") {
      Block b{false, m.content, {}};
      if (!ms.empty() && ms.back().role == "user" && ms.back().has_blocks) {
        ms.back().blocks.push_back(std::move(b));
      } else {
        Merged u;
        u.msg = &m;
        u.role = "user";
        u.has_blocks = true;
        u.blocks.push_back(std::move(b));
        ms.push_back(std::move(u));
      }
    } else if (m.role == "system" || m.role == "developer" || m.role == "assistant") {
      Merged x;
      x.msg = &m;
      x.role = m.role;
      ms.push_back(std::move(x));
    } else {
      return invalid_argument("chat: unknown role '%s'", m.role.c_str());
    }
  }
  // 2. Tool results in the order of the last assistant's tool calls.
  std::map<std::string, size_t> order;
  for (Merged& x : ms) {
    if (x.role == "assistant" && !x.msg->tool_calls.empty()) {
      order.clear();
      for (size_t i = 0; i < x.msg->tool_calls.size(); ++i)
        if (!x.msg->tool_calls[i].id.empty()) order[x.msg->tool_calls[i].id] = i;
    } else if (x.role == "user" && !order.empty()) {
      std::vector<Block*> results;
      for (Block& b : x.blocks)
        if (b.tool_result) results.push_back(&b);
      if (results.size() > 1) {
        std::vector<Block> sorted;
        for (Block* b : results) sorted.push_back(*b);
        auto rank = [&](const Block& b) {
          auto it = order.find(b.tool_use_id);
          return it == order.end() ? size_t(0) : it->second;
        };
        std::stable_sort(sorted.begin(), sorted.end(),
                         [&](const Block& a, const Block& b) { return rank(a) < rank(b); });
        for (size_t i = 0; i < results.size(); ++i) *results[i] = std::move(sorted[i]);
      }
    }
  }
  // 3. History dropping (thinking without tools).
  bool any_tools = false;
  for (const Merged& x : ms)
    if (x.msg && !x.msg->tools_json.empty()) any_tools = true;
  const bool drop = !any_tools;
  auto last_user_index = [](const std::vector<Merged>& v) {
    for (size_t i = v.size(); i-- > 0;)
      if (v[i].role == "user" || v[i].role == "developer") return int64_t(i);
    return int64_t(-1);
  };
  if (thinking && drop) {
    const int64_t last = last_user_index(ms);
    std::vector<Merged> kept;
    for (size_t i = 0; i < ms.size(); ++i) {
      Merged& x = ms[i];
      if (x.role == "user" || x.role == "system" || int64_t(i) >= last) {
        kept.push_back(std::move(x));
      } else if (x.role == "assistant") {
        x.drop_reasoning = true;
        kept.push_back(std::move(x));
      }  // developer messages before the last user message are dropped
    }
    ms = std::move(kept);
  }
  // 4. Render.
  const int64_t last_user = last_user_index(ms);
  std::string out(kBosText);
  for (size_t i = 0; i < ms.size(); ++i) {
    const Merged& x = ms[i];
    if (i == 0 && mode == ThinkMode::kThinkMax) out += kThinkMaxPrefix;
    if (x.role == "system" || x.role == "developer") {
      if (x.role == "developer") {
        if (x.msg->content.empty())
          return invalid_argument("chat: a developer message needs content");
        out += kUserText;
      }
      out += x.msg->content;
      if (!x.msg->tools_json.empty()) {
        DS4_ASSIGN_OR_RETURN(std::string tools, tool_prompt(x.msg->tools_json));
        out += "\n\n" + tools;
      }
    } else if (x.role == "user") {
      out += kUserText;
      for (size_t b = 0; b < x.blocks.size(); ++b) {
        if (b) out += "\n\n";
        if (x.blocks[b].tool_result)
          out += "<tool_result>" + x.blocks[b].text + "</tool_result>";
        else
          out += x.blocks[b].text;
      }
    } else {  // assistant
      const Message& m = *x.msg;
      if (thinking && (!drop || int64_t(i) > last_user))
        out += (x.drop_reasoning ? std::string() : m.reasoning) + std::string(kThinkCloseText);
      out += m.content;
      if (!m.tool_calls.empty()) out += tool_calls_block(m.tool_calls);
      out += kEosText;
    }
    const bool next_is_assistant = i + 1 < ms.size() && ms[i + 1].role == "assistant";
    if (i + 1 < ms.size() && !next_is_assistant) continue;
    if (x.role == "user" || x.role == "developer") {
      out += kAssistantText;
      out += thinking && (!drop || int64_t(i) >= last_user) ? kThinkOpenText : kThinkCloseText;
    }
  }
  return out;
}

Expected<std::vector<int32_t>> encode_chat(const Tokenizer& tok,
                                           std::span<const Message> messages, ThinkMode mode) {
  DS4_ASSIGN_OR_RETURN(std::string text, render_chat(messages, mode));
  return tok.encode_rendered(text);
}


std::string dsml_open(std::string_view name) {
  std::string s("<");
  s.append(kDsmlText).append(name);
  return s;
}

std::string dsml_close(std::string_view name) {
  std::string s("</");
  s.append(kDsmlText).append(name).append(">");
  return s;
}

std::string render_tool_calls(std::span<const ToolCall> calls) { return tool_calls_block(calls); }

ThinkMode think_mode_for_context(ThinkMode mode, int64_t n_ctx) {
  if (mode == ThinkMode::kThinkMax && n_ctx < kThinkMaxMinContext) return ThinkMode::kThink;
  return mode;
}

std::string generation_prefix(ThinkMode mode) {
  std::string s(kAssistantText);
  s.append(mode == ThinkMode::kNoThink ? kThinkCloseText : kThinkOpenText);
  return s;
}

std::string render_prompt(std::string_view system, std::string_view user, ThinkMode mode) {
  Message msgs[2];
  msgs[0].role = "system";
  msgs[0].content = system;
  msgs[1].role = "user";
  msgs[1].content = user;
  // Only an unknown role or bad tools JSON can fail, and neither occurs here.
  Expected<std::string> s = render_chat(msgs, mode);
  return s.ok() ? std::move(s).value() : std::string();
}

std::vector<int32_t> encode_prompt(const Tokenizer& tok, std::string_view system,
                                   std::string_view user, ThinkMode mode) {
  return tok.encode_rendered(render_prompt(system, user, mode));
}

// The transcript's pieces are the pieces render_chat writes for the same messages: the start
// is BOS [+prefix] + system text, a user turn is <｜User｜>text + the generation prefix, and a
// reply ends with EOS.
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
  std::string s(kBosText);
  if (start_mode_ == ThinkMode::kThinkMax) s.append(kThinkMaxPrefix);
  s.append(system_);
  return append_rendered(std::move(s));
}

std::vector<int32_t> ChatTranscript::append_turn(std::string rendered) {
  std::vector<int32_t> ids = start();  // empty unless this is the first call
  std::vector<int32_t> more = append_rendered(std::move(rendered));
  ids.insert(ids.end(), more.begin(), more.end());
  return ids;
}

std::vector<int32_t> ChatTranscript::user_turn(std::string_view text, ThinkMode mode) {
  std::string s(kUserText);
  s.append(text);
  s.append(generation_prefix(mode));
  return append_turn(std::move(s));
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
