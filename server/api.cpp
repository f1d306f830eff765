// server/api.cpp — request validation for the OpenAI and Anthropic endpoints (see api.h).
#include "server/api.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <limits>

#include "engine/text.h"

namespace ds4::server {

using nlohmann::json;

namespace {

constexpr size_t kMaxStops = 16;
constexpr size_t kMaxStopBytes = 256;
constexpr int kMaxTopLogprobs = 20;

[[noreturn]] void bad(const std::string& param, const std::string& message) {
  throw ApiError(400, "invalid_request_error", message, param);
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    case json::value_t::number_float: return "a number";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    default: return "an unsupported value";
  }
}

// The field, or nullptr when absent or null.
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

double get_number(const json& obj, const char* key, double def, double lo, double hi) {
  const json* v = field(obj, key);
  if (v == nullptr) return def;
  if (!v->is_number()) bad(key, std::string("'") + key + "' must be a number, got " + type_name(*v));
  const double x = v->get<double>();
  if (!std::isfinite(x) || x < lo || x > hi) {
    bad(key, std::string("'") + key + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() +
                 "], got " + v->dump());
  }
  return x;
}

int64_t get_int(const json& obj, const char* key, int64_t def, int64_t lo, int64_t hi) {
  const json* v = field(obj, key);
  if (v == nullptr) return def;
  bool integral = v->is_number_integer();
  if (v->is_number_float()) {  // 5.0 is fine, 5.5 is not
    const double d = v->get<double>();
    integral = std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9e15;
  }
  if (!integral) bad(key, std::string("'") + key + "' must be an integer, got " + type_name(*v));
  int64_t x = 0;
  if (v->is_number_unsigned()) {
    const uint64_t u = v->get<uint64_t>();
    x = u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ? std::numeric_limits<int64_t>::max()
                                                                         : static_cast<int64_t>(u);
  } else if (v->is_number_float()) {
    x = static_cast<int64_t>(v->get<double>());
  } else {
    x = v->get<int64_t>();
  }
  if (x < lo || x > hi) {
    bad(key, std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                 std::to_string(hi) + "], got " + v->dump());
  }
  return x;
}

bool get_bool(const json& obj, const char* key, bool def) {
  const json* v = field(obj, key);
  if (v == nullptr) return def;
  if (!v->is_boolean()) bad(key, std::string("'") + key + "' must be a boolean, got " + type_name(*v));
  return v->get<bool>();
}

std::string get_string(const json& obj, const char* key, const std::string& def) {
  const json* v = field(obj, key);
  if (v == nullptr) return def;
  if (!v->is_string()) bad(key, std::string("'") + key + "' must be a string, got " + type_name(*v));
  return v->get<std::string>();
}

void require_object(const json& body) {
  if (!body.is_object()) bad("", std::string("the request body must be a JSON object, got ") + type_name(body));
}

std::string check_model(const json& body, const ApiLimits& limits, bool required) {
  const json* v = field(body, "model");
  if (v == nullptr) {
    if (required) bad("model", "'model' is required");
    return limits.model_names.empty() ? std::string() : limits.model_names.front();
  }
  if (!v->is_string()) bad("model", std::string("'model' must be a string, got ") + type_name(*v));
  const std::string m = v->get<std::string>();
  for (const std::string& name : limits.model_names)
    if (m == name) return m;
  throw ApiError(404, "not_found_error",
                 "model '" + m + "' does not exist; this server serves '" +
                     (limits.model_names.empty() ? std::string() : limits.model_names.front()) + "'",
                 "model");
}

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{static_cast<uint64_t>(
      std::chrono::steady_clock::now().time_since_epoch().count())};
  return counter.fetch_add(0x9E3779B97F4A7C15ull);
}

int resolve_max_tokens(const json& body, const char* key, const ApiLimits& limits, bool* given) {
  const int64_t v = get_int(body, key, -1, 1, std::numeric_limits<int64_t>::max());
  *given = v > 0;
  if (v < 0) return limits.max_tokens;
  return static_cast<int>(std::min<int64_t>(v, limits.max_tokens));
}

void parse_sampling(const json& body, ApiRequest* r, double max_temperature) {
  r->sampler.temperature = static_cast<float>(get_number(body, "temperature", 1.0, 0.0, max_temperature));
  r->sampler.top_p = static_cast<float>(get_number(body, "top_p", 1.0, 0.0, 1.0));
  const int64_t top_k = get_int(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max());
  r->sampler.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  r->sampler.min_p = static_cast<float>(get_number(body, "min_p", 0.05, 0.0, 1.0));
  if (const json* s = field(body, "seed"); s != nullptr) {
    if (!s->is_number_integer()) bad("seed", std::string("'seed' must be an integer, got ") + type_name(*s));
    r->sampler.seed = s->is_number_unsigned() ? s->get<uint64_t>() : static_cast<uint64_t>(s->get<int64_t>());
    r->seed_given = true;
  } else {
    r->sampler.seed = fresh_seed();
  }
}

void parse_stops(const json& body, const char* key, ApiRequest* r) {
  const json* v = field(body, key);
  if (v == nullptr) return;
  auto add = [&](const json& s) {
    if (!s.is_string()) bad(key, std::string("'") + key + "' entries must be strings, got " + type_name(s));
    const std::string t = s.get<std::string>();
    if (t.empty()) bad(key, std::string("'") + key + "' entries must not be empty");
    if (t.size() > kMaxStopBytes) bad(key, std::string("'") + key + "' entries are limited to 256 bytes");
    r->stops.push_back(t);
  };
  if (v->is_string()) {
    add(*v);
  } else if (v->is_array()) {
    if (v->size() > kMaxStops) bad(key, std::string("'") + key + "' holds at most 16 sequences");
    for (const json& s : *v) add(s);
  } else {
    bad(key, std::string("'") + key + "' must be a string or an array of strings, got " + type_name(*v));
  }
}

// Penalties and biases the sampler does not implement: accepted only at their neutral value.
void reject_unsupported_openai(const json& body) {
  for (const char* k : {"presence_penalty", "frequency_penalty"}) {
    if (get_number(body, k, 0.0, -2.0, 2.0) != 0.0) {
      bad(k, std::string("'") + k + "' is not supported by this server (only 0)");
    }
  }
  if (const json* lb = field(body, "logit_bias"); lb != nullptr) {
    if (!lb->is_object()) bad("logit_bias", "'logit_bias' must be an object");
    if (!lb->empty()) bad("logit_bias", "'logit_bias' is not supported by this server");
  }
  if (get_int(body, "n", 1, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()) != 1) {
    bad("n", "'n' must be 1: this server returns one choice per request");
  }
  if (const json* rf = field(body, "response_format"); rf != nullptr) {
    if (!rf->is_object()) bad("response_format", "'response_format' must be an object");
    const std::string t = get_string(*rf, "type", "text");
    if (t != "text") {
      bad("response_format", "response_format type '" + t +
                                 "' is not supported: this server does not constrain output "
                                 "(requests for JSON output are rejected, not run unconstrained)");
    }
  }
}

// OpenAI message content: a string, null, or an array of {"type":"text","text":...} parts.
std::string content_text(const json& msg, size_t index) {
  const json* c = field(msg, "content");
  if (c == nullptr) return {};
  if (c->is_string()) return c->get<std::string>();
  const std::string where = "messages[" + std::to_string(index) + "].content";
  if (!c->is_array()) bad(where, "'" + where + "' must be a string or an array of parts, got " + type_name(*c));
  std::string out;
  for (const json& part : *c) {
    if (!part.is_object()) bad(where, "'" + where + "' parts must be objects");
    const std::string type = get_string(part, "type", "");
    if (type != "text") bad(where, "content part type '" + type + "' is not supported (only 'text')");
    out += get_string(part, "text", "");
  }
  return out;
}

void parse_openai_tools(const json& body, ApiRequest* r) {
  const json* tools = field(body, "tools");
  if (tools != nullptr) {
    if (!tools->is_array()) bad("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) bad(where, "'" + where + "' must be an object");
      if (get_string(t, "type", "function") != "function") bad(where, "'" + where + "' type must be 'function'");
      const json* f = field(t, "function");
      if (f == nullptr || !f->is_object()) bad(where, "'" + where + ".function' must be an object");
      ToolDef d;
      d.name = get_string(*f, "name", "");
      if (d.name.empty()) bad(where, "'" + where + ".function.name' must be a non-empty string");
      d.description = get_string(*f, "description", "");
      if (const json* p = field(*f, "parameters"); p != nullptr) {
        if (!p->is_object()) bad(where, "'" + where + ".function.parameters' must be an object");
        d.parameters_json = p->dump(-1, ' ', false, json::error_handler_t::replace);
      }
      r->chat.tools.push_back(std::move(d));
    }
  }
  const json* tc = field(body, "tool_choice");
  if (tc != nullptr) {
    if (tc->is_string()) {
      const std::string c = tc->get<std::string>();
      if (c != "none" && c != "auto" && c != "required") {
        bad("tool_choice", "'tool_choice' must be none, auto, required or a function object");
      }
      r->chat.tool_choice = c;
    } else if (tc->is_object()) {
      const json* f = field(*tc, "function");
      if (f == nullptr || !f->is_object()) bad("tool_choice", "'tool_choice.function' must be an object");
      r->chat.tool_choice = get_string(*f, "name", "");
    } else {
      bad("tool_choice", std::string("'tool_choice' must be a string or an object, got ") + type_name(*tc));
    }
    const std::string& c = r->chat.tool_choice;
    if (c != "none" && c != "auto") {
      if (r->chat.tools.empty()) bad("tool_choice", "'tool_choice' needs 'tools'");
      if (c != "required" && std::none_of(r->chat.tools.begin(), r->chat.tools.end(),
                                          [&](const ToolDef& d) { return d.name == c; })) {
        bad("tool_choice", "'tool_choice' names tool '" + c + "', which is not in 'tools'");
      }
    }
  }
  r->tools_enabled = !r->chat.tools.empty() && r->chat.tool_choice != "none";
}

ThinkMode resolve_mode(ThinkMode m, const ApiLimits& limits) {
  return TextCodec::think_mode_for_context(m, limits.n_ctx);
}

}  // namespace

json error_body(int status, const std::string& type, const std::string& message, const std::string& param) {
  json e;
  e["message"] = message;
  e["type"] = type;
  e["param"] = param.empty() ? json(nullptr) : json(param);
  e["code"] = status;
  json b;
  b["type"] = "error";
  b["error"] = std::move(e);
  return b;
}

ThinkMode parse_think_mode(const json& body, bool default_thinking) {
  if (const json* t = field(body, "thinking"); t != nullptr) {
    if (t->is_boolean()) return t->get<bool>() ? ThinkMode::kThink : ThinkMode::kNoThink;
    if (!t->is_object()) bad("thinking", "'thinking' must be an object like {\"type\": \"enabled\"}");
    const std::string type = get_string(*t, "type", "enabled");
    if (type == "enabled" || type == "adaptive") return ThinkMode::kThink;
    if (type == "disabled") return ThinkMode::kNoThink;
    if (type == "max") return ThinkMode::kThinkMax;
    bad("thinking", "'thinking.type' must be enabled, disabled or max, got '" + type + "'");
  }
  if (field(body, "think") != nullptr) return get_bool(body, "think", true) ? ThinkMode::kThink : ThinkMode::kNoThink;
  if (field(body, "reasoning_effort") != nullptr) {
    const std::string e = get_string(body, "reasoning_effort", "");
    if (e == "none" || e == "minimal") return ThinkMode::kNoThink;
    if (e == "low" || e == "medium" || e == "high") return ThinkMode::kThink;
    if (e == "xhigh" || e == "max") return ThinkMode::kThinkMax;
    bad("reasoning_effort", "'reasoning_effort' must be none, minimal, low, medium, high, xhigh or max, got '" + e + "'");
  }
  return default_thinking ? ThinkMode::kThink : ThinkMode::kNoThink;
}

namespace {

// The fields both OpenAI endpoints read first, in the order their errors are reported.
ApiRequest parse_openai_head(const json& body, const ApiLimits& limits, Api api) {
  require_object(body);
  ApiRequest r;
  r.api = api;
  r.model = check_model(body, limits, false);
  r.stream = get_bool(body, "stream", false);
  if (const json* so = field(body, "stream_options"); so != nullptr) {
    if (!so->is_object()) bad("stream_options", "'stream_options' must be an object");
    r.include_usage = get_bool(*so, "include_usage", false);
  }
  reject_unsupported_openai(body);
  return r;
}

}  // namespace

ApiRequest parse_chat_request(const json& body, const ApiLimits& limits) {
  ApiRequest r = parse_openai_head(body, limits, Api::kChat);
  parse_sampling(body, &r, 2.0);
  // max_completion_tokens supersedes the deprecated max_tokens.
  bool given = false;
  r.max_tokens = resolve_max_tokens(body, "max_tokens", limits, &given);
  r.max_tokens_given = given;
  if (field(body, "max_completion_tokens") != nullptr) {
    r.max_tokens = resolve_max_tokens(body, "max_completion_tokens", limits, &given);
    r.max_tokens_given = given;
  }
  parse_stops(body, "stop", &r);
  if (get_bool(body, "logprobs", false)) {
    r.top_logprobs = static_cast<int>(get_int(body, "top_logprobs", 0, 0, kMaxTopLogprobs));
  } else if (field(body, "top_logprobs") != nullptr) {
    get_int(body, "top_logprobs", 0, 0, kMaxTopLogprobs);
    bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
  }
  parse_openai_tools(body, &r);
  r.chat.mode = resolve_mode(parse_think_mode(body, limits.default_thinking), limits);

  const json* msgs = field(body, "messages");
  if (msgs == nullptr) bad("messages", "'messages' is required");
  if (!msgs->is_array()) bad("messages", std::string("'messages' must be an array, got ") + type_name(*msgs));
  if (msgs->empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where, "'" + where + "' must be an object, got " + type_name(m));
    ChatMessage msg;
    msg.role = get_string(m, "role", "");
    if (msg.role == "function") msg.role = "tool";
    if (msg.role != "system" && msg.role != "developer" && msg.role != "user" &&
        msg.role != "assistant" && msg.role != "tool") {
      bad(where + ".role", "'" + where + ".role' must be system, developer, user, assistant or tool, got '" +
                               msg.role + "'");
    }
    msg.content = content_text(m, i);
    if (msg.role == "assistant") {
      msg.reasoning = get_string(m, "reasoning_content", "");
      if (const json* calls = field(m, "tool_calls"); calls != nullptr) {
        if (!calls->is_array()) bad(where + ".tool_calls", "'" + where + ".tool_calls' must be an array");
        for (const json& c : *calls) {
          if (!c.is_object()) bad(where + ".tool_calls", "tool calls must be objects");
          const json* f = field(c, "function");
          if (f == nullptr || !f->is_object()) bad(where + ".tool_calls", "tool calls need a 'function' object");
          ChatToolCall call;
          call.id = get_string(c, "id", "");
          call.name = get_string(*f, "name", "");
          if (call.name.empty()) bad(where + ".tool_calls", "tool call function names must be non-empty");
          const json* a = field(*f, "arguments");
          if (a != nullptr && a->is_string()) {
            call.arguments = a->get<std::string>();
            if (!json::accept(call.arguments)) {
              bad(where + ".tool_calls", "tool call arguments must be a JSON object string");
            }
          } else if (a != nullptr && a->is_object()) {
            call.arguments = a->dump(-1, ' ', false, json::error_handler_t::replace);
          } else if (a != nullptr) {
            bad(where + ".tool_calls", "tool call arguments must be a JSON string");
          }
          msg.tool_calls.push_back(std::move(call));
        }
      }
    }
    if (msg.role == "tool") msg.tool_call_id = get_string(m, "tool_call_id", "");
    r.chat.messages.push_back(std::move(msg));
  }
  return r;
}

ApiRequest parse_completion_request(const json& body, const ApiLimits& limits) {
  ApiRequest r = parse_openai_head(body, limits, Api::kCompletion);
  if (get_bool(body, "echo", false)) bad("echo", "'echo' is not supported by this server");
  if (!get_string(body, "suffix", "").empty()) bad("suffix", "'suffix' is not supported by this server");
  if (get_int(body, "best_of", 1, 1, 1) != 1) bad("best_of", "'best_of' must be 1");
  parse_sampling(body, &r, 2.0);
  bool given = false;
  r.max_tokens = resolve_max_tokens(body, "max_tokens", limits, &given);
  r.max_tokens_given = given;
  parse_stops(body, "stop", &r);
  if (field(body, "logprobs") != nullptr) r.top_logprobs = static_cast<int>(get_int(body, "logprobs", 0, 0, 5));

  const json* p = field(body, "prompt");
  if (p == nullptr) bad("prompt", "'prompt' is required");
  auto take_ids = [&](const json& arr) {
    for (const json& t : arr) {
      if (!t.is_number_integer()) bad("prompt", "token-array prompts must hold integers");
      const int64_t id = t.get<int64_t>();
      if (id < 0 || id >= limits.n_vocab) {
        bad("prompt", "token id " + std::to_string(id) + " is outside the vocabulary");
      }
      r.prompt_ids.push_back(static_cast<int32_t>(id));
    }
    r.prompt_is_ids = true;
  };
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array()) {
    if (p->empty()) bad("prompt", "'prompt' must not be empty");
    if ((*p)[0].is_string() || (*p)[0].is_array()) {
      if (p->size() != 1) bad("prompt", "'prompt' may hold one prompt only (n = 1 per request)");
      const json& one = (*p)[0];
      if (one.is_string()) r.prompt_text = one.get<std::string>();
      else take_ids(one);
    } else {
      take_ids(*p);
    }
  } else {
    bad("prompt", std::string("'prompt' must be a string or an array, got ") + type_name(*p));
  }
  if (!r.prompt_is_ids && r.prompt_text.empty()) bad("prompt", "'prompt' must not be empty");
  if (r.prompt_is_ids && r.prompt_ids.empty()) bad("prompt", "'prompt' must not be empty");
  return r;
}

namespace {

// Anthropic content: a string or an array of blocks.
void anthropic_blocks(const json& m, size_t index, const std::string& role, ApiRequest* r) {
  const std::string where = "messages[" + std::to_string(index) + "].content";
  const json* c = field(m, "content");
  if (c == nullptr) bad(where, "'" + where + "' is required");
  ChatMessage msg;
  msg.role = role;
  if (c->is_string()) {
    msg.content = c->get<std::string>();
    r->chat.messages.push_back(std::move(msg));
    return;
  }
  if (!c->is_array()) bad(where, "'" + where + "' must be a string or an array of blocks, got " + type_name(*c));
  for (const json& b : *c) {
    if (!b.is_object()) bad(where, "'" + where + "' blocks must be objects");
    const std::string type = get_string(b, "type", "");
    if (type == "text") {
      msg.content += get_string(b, "text", "");
    } else if (type == "thinking" && role == "assistant") {
      msg.reasoning += get_string(b, "thinking", "");
    } else if (type == "redacted_thinking" && role == "assistant") {
      // nothing to render
    } else if (type == "tool_use" && role == "assistant") {
      ChatToolCall call;
      call.id = get_string(b, "id", "");
      call.name = get_string(b, "name", "");
      if (call.name.empty()) bad(where, "tool_use blocks need a non-empty 'name'");
      const json* in = field(b, "input");
      if (in != nullptr && !in->is_object()) bad(where, "tool_use 'input' must be an object");
      call.arguments = in == nullptr ? "{}" : in->dump(-1, ' ', false, json::error_handler_t::replace);
      msg.tool_calls.push_back(std::move(call));
    } else if (type == "tool_result" && role == "user") {
      ChatMessage tool;
      tool.role = "tool";
      tool.tool_call_id = get_string(b, "tool_use_id", "");
      const json* tc = field(b, "content");
      if (tc != nullptr && tc->is_string()) {
        tool.content = tc->get<std::string>();
      } else if (tc != nullptr && tc->is_array()) {
        for (const json& part : *tc) {
          if (!part.is_object() || get_string(part, "type", "") != "text") {
            bad(where, "tool_result content supports text blocks only");
          }
          tool.content += get_string(part, "text", "");
        }
      } else if (tc != nullptr) {
        bad(where, "tool_result 'content' must be a string or an array of text blocks");
      }
      if (get_bool(b, "is_error", false)) tool.content = "Error: " + tool.content;
      r->chat.messages.push_back(std::move(tool));
    } else {
      bad(where, "content block type '" + type + "' is not supported in a " + role + " message");
    }
  }
  if (!msg.content.empty() || !msg.reasoning.empty() || !msg.tool_calls.empty() || role == "assistant") {
    r->chat.messages.push_back(std::move(msg));
  }
}

}  // namespace

ApiRequest parse_messages_request(const json& body, const ApiLimits& limits) {
  require_object(body);
  ApiRequest r;
  r.api = Api::kMessages;
  r.model = check_model(body, limits, false);
  r.stream = get_bool(body, "stream", false);
  if (field(body, "max_tokens") == nullptr) bad("max_tokens", "'max_tokens' is required");
  bool given = false;
  r.max_tokens = resolve_max_tokens(body, "max_tokens", limits, &given);
  r.max_tokens_given = given;
  parse_sampling(body, &r, 1.0);
  parse_stops(body, "stop_sequences", &r);
  // Anthropic's default is no thinking; {"thinking": {"type": "enabled", ...}} turns it on.
  r.chat.mode = resolve_mode(parse_think_mode(body, false), limits);
  if (const json* t = field(body, "thinking"); t != nullptr && t->is_object()) {
    get_int(*t, "budget_tokens", 0, 0, std::numeric_limits<int32_t>::max());  // type check only
  }

  if (const json* sys = field(body, "system"); sys != nullptr) {
    ChatMessage s;
    s.role = "system";
    if (sys->is_string()) {
      s.content = sys->get<std::string>();
    } else if (sys->is_array()) {
      for (const json& b : *sys) {
        if (!b.is_object() || get_string(b, "type", "") != "text") bad("system", "'system' blocks must be text blocks");
        if (!s.content.empty()) s.content += "\n\n";
        s.content += get_string(b, "text", "");
      }
    } else {
      bad("system", std::string("'system' must be a string or an array of text blocks, got ") + type_name(*sys));
    }
    r.chat.messages.push_back(std::move(s));
  }
  if (const json* tools = field(body, "tools"); tools != nullptr) {
    if (!tools->is_array()) bad("tools", "'tools' must be an array");
    for (size_t i = 0; i < tools->size(); ++i) {
      const json& t = (*tools)[i];
      const std::string where = "tools[" + std::to_string(i) + "]";
      if (!t.is_object()) bad(where, "'" + where + "' must be an object");
      ToolDef d;
      d.name = get_string(t, "name", "");
      if (d.name.empty()) bad(where, "'" + where + ".name' must be a non-empty string");
      d.description = get_string(t, "description", "");
      if (const json* s = field(t, "input_schema"); s != nullptr) {
        if (!s->is_object()) bad(where, "'" + where + ".input_schema' must be an object");
        d.parameters_json = s->dump(-1, ' ', false, json::error_handler_t::replace);
      }
      r.chat.tools.push_back(std::move(d));
    }
  }
  if (const json* tc = field(body, "tool_choice"); tc != nullptr) {
    if (!tc->is_object()) bad("tool_choice", "'tool_choice' must be an object");
    const std::string type = get_string(*tc, "type", "auto");
    if (type == "auto" || type == "none") r.chat.tool_choice = type;
    else if (type == "any") r.chat.tool_choice = "required";
    else if (type == "tool") {
      r.chat.tool_choice = get_string(*tc, "name", "");
      if (std::none_of(r.chat.tools.begin(), r.chat.tools.end(),
                       [&](const ToolDef& d) { return d.name == r.chat.tool_choice; })) {
        bad("tool_choice", "'tool_choice' names tool '" + r.chat.tool_choice + "', which is not in 'tools'");
      }
    } else {
      bad("tool_choice", "'tool_choice.type' must be auto, any, tool or none");
    }
  }
  r.tools_enabled = !r.chat.tools.empty() && r.chat.tool_choice != "none";

  const json* msgs = field(body, "messages");
  if (msgs == nullptr) bad("messages", "'messages' is required");
  if (!msgs->is_array()) bad("messages", std::string("'messages' must be an array, got ") + type_name(*msgs));
  if (msgs->empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < msgs->size(); ++i) {
    const json& m = (*msgs)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) bad(where, "'" + where + "' must be an object, got " + type_name(m));
    const std::string role = get_string(m, "role", "");
    if (role != "user" && role != "assistant") {
      bad(where + ".role", "'" + where + ".role' must be user or assistant, got '" + role + "'");
    }
    anthropic_blocks(m, i, role, &r);
  }
  return r;
}

std::vector<ChatMessage> render_messages(const ChatPrompt& prompt) {
  std::vector<ChatMessage> out = prompt.messages;
  if (prompt.tools.empty() || prompt.tool_choice == "none") return out;
  // ordered_json: the schema keys keep the name, description, parameters order of the V4 tools
  // block (the parameter schema itself was re-written with sorted keys by the parser).
  nlohmann::ordered_json tools = nlohmann::ordered_json::array();
  for (const ToolDef& t : prompt.tools) {
    nlohmann::ordered_json f;
    f["name"] = t.name;
    if (!t.description.empty()) f["description"] = t.description;
    f["parameters"] = nlohmann::ordered_json::parse(t.parameters_json.empty() ? "{}" : t.parameters_json,
                                                    nullptr, /*allow_exceptions=*/false);
    tools.push_back(std::move(f));
  }
  auto sys = std::find_if(out.begin(), out.end(), [](const ChatMessage& m) { return m.role == "system"; });
  if (sys == out.end()) {
    ChatMessage m;
    m.role = "system";
    sys = out.insert(out.begin(), std::move(m));
  }
  sys->tools_json = tools.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
  return out;
}

}  // namespace ds4::server
