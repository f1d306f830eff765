// server/http.cpp — routes, streaming and response shapes (see http.h).
// (Writes to a vanished client can raise SIGPIPE inside cpp-httplib: main() ignores it.)
#include "server/http.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <httplib.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>

#include "core/log.h"
#include "engine/text.h"

namespace ds4::server {

using nlohmann::json;

namespace {

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

void send_error(httplib::Response& res, int status, const std::string& type, const std::string& message,
                const std::string& param = {}) {
  res.status = status;
  res.set_content(dump(error_body(status, type, message, param)), "application/json");
}

const char* error_type_for(int status) {
  switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 405: return "invalid_request_error";
    case 413: return "request_too_large";
    case 429: return "rate_limit_error";
    case 503: return "overloaded_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
  }
}

// The socket of a request's connection. cpp-httplib 0.11 does not hand it to handlers, so it is
// found among this process's sockets by its two endpoints (the handler runs while httplib holds
// the connection open, so the descriptor cannot be closed or reused meanwhile). -1: not found.
int find_connection_fd(const httplib::Request& req) {
  DIR* dir = opendir("/proc/self/fd");
  if (dir == nullptr) return -1;
  int found = -1;
  auto addr_port = [](const sockaddr_storage& ss, std::string* addr) {
    char buf[INET6_ADDRSTRLEN] = {};
    if (ss.ss_family == AF_INET) {
      const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
      inet_ntop(AF_INET, &a->sin_addr, buf, sizeof(buf));
      *addr = buf;
      return static_cast<int>(ntohs(a->sin_port));
    }
    if (ss.ss_family == AF_INET6) {
      const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
      inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof(buf));
      *addr = buf;
      return static_cast<int>(ntohs(a->sin6_port));
    }
    return -1;
  };
  while (dirent* e = readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    struct stat st {};
    if (fd <= 2 || fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage local {}, peer {};
    socklen_t ll = sizeof(local), pl = sizeof(peer);
    if (getsockname(fd, reinterpret_cast<sockaddr*>(&local), &ll) != 0 ||
        getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &pl) != 0) {
      continue;
    }
    std::string la, pa;
    if (addr_port(local, &la) == req.local_port && addr_port(peer, &pa) == req.remote_port &&
        pa == req.remote_addr) {
      found = fd;
      break;
    }
  }
  closedir(dir);
  return found;
}

// True once the client closed its side (EOF) or the connection broke. Bytes of a next,
// pipelined request keep it "open".
bool peer_closed(int fd) {
  if (fd < 0) return false;
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n == 0) return true;
  return n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

// What drive() gathered from one job.
struct Outcome {
  OutputDelta total;
  std::vector<TokenEvent> logprob_tokens;  // with logprobs only
  int completion_tokens = 0;
  bool stop_matched = false;
  std::string stop_sequence;
  bool client_gone = false;
  JobResult result;
};

// Emits one delta (with the token events it came from); false when the client is gone.
using EmitFn = std::function<bool(const OutputDelta& delta, std::span<const TokenEvent> tokens)>;
// Called when nothing arrived for a while (streaming keep-alive); false when the client is gone.
using IdleFn = std::function<bool()>;

void drive(Job& job, OutputParser& parser, bool keep_logprobs, const EmitFn& emit, const IdleFn& idle,
           int fd, Outcome* out) {
  std::vector<TokenEvent> events;
  int idle_ms = 0;
  bool finished = false;
  while (!finished) {
    events.clear();
    finished = job.take(&events, 100);
    // A client that closed its connection stops the job before its next token.
    if (!out->client_gone && !finished && peer_closed(fd)) {
      out->client_gone = true;
      job.cancel();
    }
    if (events.empty()) {
      idle_ms += 100;
      if (idle && idle_ms >= 1000) {
        idle_ms = 0;
        if (!idle()) {
          out->client_gone = true;
          job.cancel();
        }
      }
      continue;
    }
    idle_ms = 0;
    if (out->stop_matched || out->client_gone) continue;  // drain until the job ends
    for (size_t i = 0; i < events.size(); ++i) {
      const TokenEvent& ev = events[i];
      if (ev.id >= 0) out->completion_tokens++;
      OutputDelta d;
      const bool hit = parser.push(ev.text, &d);
      if (keep_logprobs && ev.id >= 0) out->logprob_tokens.push_back(ev);
      out->total.append(d);
      if (!d.empty() || (keep_logprobs && ev.id >= 0)) {
        if (!emit(d, std::span<const TokenEvent>(&events[i], 1))) {
          out->client_gone = true;
          job.cancel();
          break;
        }
      }
      if (hit) {
        out->stop_matched = true;
        out->stop_sequence = parser.stop_sequence();
        job.cancel();
        break;
      }
    }
  }
  out->result = job.result();
  if (!out->client_gone) {
    OutputDelta d;
    parser.finish(&d);
    out->total.append(d);
    if (!d.empty() && !emit(d, {})) out->client_gone = true;
  }
}

std::string openai_finish(const Outcome& o) {
  if (o.stop_matched) return "stop";
  if (!o.result.error.empty()) return "error";
  switch (o.result.stop) {
    case StopReason::kEos: return o.total.tool_calls.empty() ? "stop" : "tool_calls";
    case StopReason::kMaxTokens:
    case StopReason::kContextFull: return "length";
    case StopReason::kCancelled: return "stop";
  }
  return "stop";
}

std::string anthropic_stop(const Outcome& o) {
  if (o.stop_matched) return "stop_sequence";
  switch (o.result.stop) {
    case StopReason::kEos: return o.total.tool_calls.empty() ? "end_turn" : "tool_use";
    case StopReason::kMaxTokens:
    case StopReason::kContextFull: return "max_tokens";
    case StopReason::kCancelled: return "end_turn";
  }
  return "end_turn";
}

json dspark_json(const JobResult& r) {
  json d;
  d["used"] = r.dspark;
  d["proposed"] = r.spec.proposed;
  d["accepted"] = r.spec.accepted;
  d["acceptance"] = r.spec.proposed > 0 ? static_cast<double>(r.spec.accepted) / r.spec.proposed : 0.0;
  return d;
}

json timings_json(const JobResult& r) {
  json t;
  t["queue_s"] = r.queue_s;
  t["ttft_s"] = r.ttft_s;
  t["gen_s"] = r.gen_s;
  t["tokens_per_s"] = r.gen_s > 0 && r.gen_tokens > 1 ? (r.gen_tokens - 1) / r.gen_s : 0.0;
  return t;
}

json openai_usage(const Outcome& o, int prompt_tokens) {
  json u;
  u["prompt_tokens"] = prompt_tokens;
  u["completion_tokens"] = o.completion_tokens;
  u["total_tokens"] = prompt_tokens + o.completion_tokens;
  u["prompt_tokens_details"] = {{"cached_tokens", o.result.reused_tokens}};
  u["dspark"] = dspark_json(o.result);
  u["timings"] = timings_json(o.result);
  return u;
}

json token_logprob_json(const Engine& engine, const TokenEvent& ev) {
  auto entry = [&](int32_t id, float lp) {
    const std::string bytes = engine.token_bytes(id);
    json e;
    e["token"] = bytes;
    e["logprob"] = lp;
    json b = json::array();
    for (unsigned char c : bytes) b.push_back(static_cast<int>(c));
    e["bytes"] = std::move(b);
    return e;
  };
  json e = entry(ev.id, ev.logprob);
  json top = json::array();
  for (const TopLogprob& t : ev.top) top.push_back(entry(t.id, t.logprob));
  e["top_logprobs"] = std::move(top);
  return e;
}

json tool_calls_json(const std::vector<ChatToolCall>& calls, int first_index, bool with_index) {
  json arr = json::array();
  for (size_t i = 0; i < calls.size(); ++i) {
    json c;
    if (with_index) c["index"] = first_index + static_cast<int>(i);
    c["id"] = calls[i].id;
    c["type"] = "function";
    c["function"] = {{"name", calls[i].name}, {"arguments", calls[i].arguments}};
    arr.push_back(std::move(c));
  }
  return arr;
}

// Streamed pieces (OpenAI chunk form): the first piece of a call has id, type and name.
json tool_call_parts_json(const std::vector<ToolCallPart>& parts) {
  json arr = json::array();
  for (const ToolCallPart& p : parts) {
    json c;
    c["index"] = p.index;
    if (!p.id.empty()) {
      c["id"] = p.id;
      c["type"] = "function";
      c["function"] = {{"name", p.name}, {"arguments", p.arguments}};
    } else {
      c["function"] = {{"arguments", p.arguments}};
    }
    arr.push_back(std::move(c));
  }
  return arr;
}

std::string sse(const json& j) { return "data: " + dump(j) + "\n\n"; }
std::string sse_event(const char* name, const json& j) {
  return std::string("event: ") + name + "\ndata: " + dump(j) + "\n\n";
}

std::string new_id(const char* prefix) {
  static std::atomic<uint64_t> counter{0};
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%s%08llx%06llx", prefix,
                static_cast<unsigned long long>(unix_time() & 0xffffffff),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffffff));
  return buf;
}

}  // namespace

struct HttpServer::Impl {
  Engine& engine;
  Scheduler& scheduler;
  ServerOptions opt;
  ApiLimits limits;
  httplib::Server svr;
  int bound_port = -1;
  std::atomic<bool> draining{false};
  std::mutex metrics_mu;
  std::map<std::pair<std::string, int>, int64_t> requests;  // (endpoint, status) -> count
  std::atomic<int64_t> rejected_queue{0};
  std::atomic<int64_t> client_disconnects{0};

  Impl(Engine& e, Scheduler& s, ServerOptions o) : engine(e), scheduler(s), opt(std::move(o)) {
    limits.model_names = {opt.model_name};
    limits.max_tokens = opt.max_tokens;
    limits.n_ctx = scheduler.options().n_ctx;
    limits.n_vocab = engine.info().n_vocab;
    limits.default_thinking = opt.default_thinking;
    setup();
  }

  static std::string endpoint_label(const std::string& path) {
    for (const char* p : {"/v1/chat/completions", "/v1/completions", "/v1/messages", "/v1/models",
                          "/health", "/metrics"}) {
      if (path == p || (std::string(p) == "/v1/models" && path.rfind("/v1/models/", 0) == 0)) return p;
    }
    return path == "/" ? "/" : "other";
  }

  bool authorized(const httplib::Request& req) const {
    if (opt.api_key.empty()) return true;
    const std::string auth = req.get_header_value("Authorization");
    if (auth == "Bearer " + opt.api_key) return true;
    return req.get_header_value("x-api-key") == opt.api_key;
  }

  void setup() {
    const int threads = std::max(4, opt.http_threads);
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(static_cast<size_t>(threads)); };
    svr.set_payload_max_length(opt.max_body_bytes);
    svr.set_read_timeout(opt.read_timeout_s, 0);
    svr.set_write_timeout(opt.write_timeout_s, 0);
    svr.set_keep_alive_timeout(2);
    // No SO_REUSEPORT (httplib's default): a second server on a taken port must fail, not share
    // it. TCP_NODELAY (inherited by accepted sockets): SSE events are small writes that must not
    // wait for the client's delayed ACK.
    svr.set_socket_options([](int sock) {
      int yes = 1;
      setsockopt(sock, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
      setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
    });
    svr.set_keep_alive_max_count(1000);

    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      if (req.path == "/health" || req.path == "/") return httplib::Server::HandlerResponse::Unhandled;
      if (!authorized(req)) {
        send_error(res, 401, "authentication_error",
                   "missing or wrong API key (send 'Authorization: Bearer KEY' or 'x-api-key: KEY')");
        return httplib::Server::HandlerResponse::Handled;
      }
      return httplib::Server::HandlerResponse::Unhandled;
    });
    svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
      if (!res.body.empty()) return;
      std::string message;
      switch (res.status) {
        case 404: message = "no route for " + req.method + " " + req.path; break;
        case 413: message = "request body too large (--max-body)"; break;
        case 400: message = "malformed HTTP request"; break;
        default: message = "HTTP error " + std::to_string(res.status); break;
      }
      send_error(res, res.status, error_type_for(res.status), message);
    });
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
      std::string what = "internal error";
      try {
        std::rethrow_exception(ep);
      } catch (const std::exception& e) {
        what = std::string("internal error: ") + e.what();
      } catch (...) {
      }
      send_error(res, 500, "server_error", what);
    });
    svr.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
      std::lock_guard<std::mutex> lock(metrics_mu);
      requests[{endpoint_label(req.path), res.status}]++;
    });

    svr.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
      const SchedulerStats s = scheduler.stats();
      json j;
      j["status"] = draining ? "shutting_down" : "ok";
      j["model"] = opt.model_name;
      j["active"] = s.active;
      j["queued"] = s.queued;
      res.status = draining ? 503 : 200;
      res.set_content(dump(j), "application/json");
    });
    svr.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
      res.set_content(metrics_text(), "text/plain; version=0.0.4");
    });
    svr.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
      json list;
      list["object"] = "list";
      list["data"] = json::array({model_json()});
      res.set_content(dump(list), "application/json");
    });
    svr.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
      if (req.matches[1] != opt.model_name) {
        send_error(res, 404, "not_found_error", "model '" + std::string(req.matches[1]) + "' does not exist", "model");
        return;
      }
      res.set_content(dump(model_json()), "application/json");
    });
    svr.Get("/", [this](const httplib::Request&, httplib::Response& res) {
      if (opt.chat_page.empty()) {
        send_error(res, 404, "not_found_error", "no chat page in this build");
        return;
      }
      res.set_content(opt.chat_page, "text/html; charset=utf-8");
    });
    svr.Post("/v1/chat/completions",
             [this](const httplib::Request& req, httplib::Response& res) { generate(Api::kChat, req, res); });
    svr.Post("/v1/completions",
             [this](const httplib::Request& req, httplib::Response& res) { generate(Api::kCompletion, req, res); });
    svr.Post("/v1/messages",
             [this](const httplib::Request& req, httplib::Response& res) { generate(Api::kMessages, req, res); });
  }

  json model_json() const {
    json m;
    m["id"] = opt.model_name;
    m["object"] = "model";
    m["created"] = 0;
    m["owned_by"] = "ds4cpp";
    m["context_length"] = limits.n_ctx;
    m["max_tokens"] = limits.max_tokens;
    return m;
  }

  std::string metrics_text() {
    const SchedulerStats s = scheduler.stats();
    std::ostringstream o;
    auto metric = [&](const char* name, const char* type, const char* help, double v) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " " << type << "\n" << name << " " << v << "\n";
    };
    o << "# HELP ds4_http_requests_total HTTP requests answered, by endpoint and status.\n"
         "# TYPE ds4_http_requests_total counter\n";
    {
      std::lock_guard<std::mutex> lock(metrics_mu);
      for (const auto& [k, v] : requests) {
        o << "ds4_http_requests_total{endpoint=\"" << k.first << "\",status=\"" << k.second << "\"} " << v << "\n";
      }
    }
    metric("ds4_queue_depth", "gauge", "Requests waiting for a slot.", s.queued);
    metric("ds4_active_requests", "gauge", "Requests holding a slot (prefilling or decoding).", s.active);
    metric("ds4_slots", "gauge", "Slots (requests advanced together).", scheduler.options().max_active);
    metric("ds4_requests_admitted_total", "counter", "Requests that got a slot.", static_cast<double>(s.admitted));
    metric("ds4_requests_finished_total", "counter", "Requests that released their slot.", static_cast<double>(s.finished));
    metric("ds4_requests_cancelled_total", "counter", "Requests cancelled (disconnect, stop sequence, shutdown).",
           static_cast<double>(s.cancelled));
    metric("ds4_requests_rejected_queue_full_total", "counter", "Requests answered 429 (queue full).",
           static_cast<double>(rejected_queue.load()));
    metric("ds4_client_disconnects_total", "counter", "Streaming clients that went away mid-stream.",
           static_cast<double>(client_disconnects.load()));
    metric("ds4_prompt_tokens_total", "counter", "Prompt tokens prefilled (computed).", static_cast<double>(s.prompt_tokens));
    metric("ds4_prefix_reused_tokens_total", "counter", "Prompt tokens restored from cached sessions instead of prefilled.",
           static_cast<double>(s.reused_tokens));
    metric("ds4_prefix_reuse_hits_total", "counter", "Requests that resumed a cached session.",
           static_cast<double>(s.reuse_hits));
    metric("ds4_idle_sessions", "gauge", "Cached idle sessions.", s.idle_sessions);
    metric("ds4_idle_session_bytes", "gauge", "Estimated state bytes of the cached idle sessions.",
           static_cast<double>(s.idle_bytes));
    metric("ds4_kv_disk_hits_total", "counter", "Requests that resumed a state loaded from --kv-cache-dir.",
           static_cast<double>(s.disk_reuse_hits));
    metric("ds4_kv_disk_saves_total", "counter", "Session states written to --kv-cache-dir.",
           static_cast<double>(s.disk.saves));
    metric("ds4_kv_disk_rejected_total", "counter",
           "--kv-cache-dir files ignored (corrupt, truncated, another model or context).",
           static_cast<double>(s.disk.rejected));
    metric("ds4_kv_disk_skipped_total", "counter",
           "Saves to --kv-cache-dir skipped because the writer was behind (a cache: nothing is lost).",
           static_cast<double>(s.disk.skipped));
    metric("ds4_kv_disk_entries", "gauge", "Session states indexed in --kv-cache-dir.", static_cast<double>(s.disk.entries));
    metric("ds4_kv_disk_bytes", "gauge", "Bytes of the indexed --kv-cache-dir files.", static_cast<double>(s.disk.bytes));
    metric("ds4_generated_tokens_total", "counter", "Tokens generated.", static_cast<double>(s.gen_tokens));
    o << "# HELP ds4_time_to_first_token_seconds Time from submission to the first generated token.\n"
         "# TYPE ds4_time_to_first_token_seconds histogram\n";
    for (int b = 0; b < SchedulerStats::kBuckets; ++b) {
      o << "ds4_time_to_first_token_seconds_bucket{le=\"" << SchedulerStats::kBucketBounds[b] << "\"} "
        << s.ttft_counts[b] << "\n";
    }
    o << "ds4_time_to_first_token_seconds_bucket{le=\"+Inf\"} " << s.ttft_count << "\n";
    o << "ds4_time_to_first_token_seconds_sum " << s.ttft_sum << "\n";
    o << "ds4_time_to_first_token_seconds_count " << s.ttft_count << "\n";
    metric("ds4_batched_decode_steps_total", "counter", "Forwards that decoded several requests at once.",
           static_cast<double>(s.batched_steps));
    metric("ds4_batched_decode_rows_total", "counter", "Tokens decoded in those batched forwards.",
           static_cast<double>(s.batched_rows));
    metric("ds4_dspark_requests_total", "counter", "Requests decoded with DSpark.", static_cast<double>(s.dspark_jobs));
    metric("ds4_dspark_draft_tokens_total", "counter", "DSpark draft tokens proposed.",
           static_cast<double>(s.dspark_proposed));
    metric("ds4_dspark_accepted_tokens_total", "counter", "DSpark draft tokens accepted.",
           static_cast<double>(s.dspark_accepted));
    metric("ds4_dspark_acceptance_ratio", "gauge", "Accepted / proposed draft tokens since start.",
           s.dspark_proposed > 0 ? static_cast<double>(s.dspark_accepted) / s.dspark_proposed : 0.0);
    return o.str();
  }

  // ------------------------------------------------------------ generation endpoints

  void generate(Api api, const httplib::Request& req, httplib::Response& res) {
    try {
      generate_or_throw(api, req, res);
    } catch (const ApiError& e) {
      send_error(res, e.status, e.type, e.what(), e.param);
    }
  }

  void generate_or_throw(Api api, const httplib::Request& req, httplib::Response& res) {
    if (draining) throw ApiError(503, "overloaded_error", "the server is shutting down");
    json body;
    try {
      body = json::parse(req.body);
    } catch (const json::exception& e) {
      throw ApiError(400, "invalid_request_error", std::string("invalid JSON body: ") + e.what());
    }
    ApiRequest r = api == Api::kChat         ? parse_chat_request(body, limits)
                   : api == Api::kCompletion ? parse_completion_request(body, limits)
                                             : parse_messages_request(body, limits);
    // Prompt ids.
    std::vector<int32_t> prompt;
    bool thinking = false;
    if (api == Api::kCompletion) {
      if (r.prompt_is_ids) {
        prompt = std::move(r.prompt_ids);
      } else {
        prompt.push_back(engine.bos_token());
        std::vector<int32_t> body_ids = engine.tokenize(r.prompt_text);
        prompt.insert(prompt.end(), body_ids.begin(), body_ids.end());
      }
    } else {
      Expected<std::string> text = TextCodec::try_render_chat(render_messages(r.chat), r.chat.mode);
      if (!text.ok()) throw ApiError(400, "invalid_request_error", text.status().message(), "messages");
      prompt = engine.tokenize_rendered(*text);
      thinking = r.chat.mode != ThinkMode::kNoThink;
    }
    const int n_ctx = limits.n_ctx;
    if (static_cast<int64_t>(prompt.size()) >= n_ctx) {
      throw ApiError(400, "invalid_request_error",
                     "the prompt is " + std::to_string(prompt.size()) +
                         " tokens; this server's context limit is " + std::to_string(n_ctx) +
                         " tokens (--ctx), prompt and reply included",
                     api == Api::kCompletion ? "prompt" : "messages");
    }
    JobParams jp;
    jp.max_tokens = std::max(1, std::min(r.max_tokens, n_ctx - static_cast<int>(prompt.size())));
    jp.sampler = r.sampler;
    jp.top_logprobs = r.top_logprobs;
    jp.prompt = std::move(prompt);
    jp.reuse_tail = api == Api::kCompletion ? 1 : 2;  // chat: <｜Assistant｜> + <think> / </think>
    const int prompt_tokens = static_cast<int>(jp.prompt.size());
    Expected<std::shared_ptr<Job>> submitted = scheduler.submit(std::move(jp));
    if (!submitted.ok()) {
      if (submitted.status().code() == ErrorCode::kResource) {
        rejected_queue++;
        res.set_header("Retry-After", "1");
        throw ApiError(429, "rate_limit_error", submitted.status().message());
      }
      throw ApiError(503, "overloaded_error", submitted.status().message());
    }
    std::shared_ptr<Job> job = std::move(*submitted);
    const int fd = find_connection_fd(req);
    const std::string id = new_id(api == Api::kChat ? "chatcmpl-" : api == Api::kCompletion ? "cmpl-" : "msg_");
    auto parser = std::make_shared<OutputParser>(thinking, r.tools_enabled, r.stops, "call_" + id.substr(id.find_first_of("-_") + 1) + "_");
    // Streamed chat: tool-call arguments go out piecewise as they are generated.
    if (api == Api::kChat && r.stream) parser->set_stream_tool_arguments(true);
    auto req_copy = std::make_shared<ApiRequest>(std::move(r));
    if (!req_copy->stream) {
      Outcome o;
      drive(*job, *parser, req_copy->top_logprobs >= 0, [](const OutputDelta&, std::span<const TokenEvent>) { return true; },
            {}, fd, &o);
      if (o.client_gone) {
        client_disconnects++;
        res.status = 499;  // client closed the request (nobody reads this answer)
        return;
      }
      if (!o.result.error.empty() && o.completion_tokens == 0) {
        throw ApiError(500, "server_error", "generation failed: " + o.result.error);
      }
      res.set_content(dump(whole_response(api, *req_copy, id, prompt_tokens, o)), "application/json");
      return;
    }
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, api, job, parser, req_copy, id, prompt_tokens, fd](size_t, httplib::DataSink& sink) {
          stream_response(api, *job, *parser, *req_copy, id, prompt_tokens, fd, sink);
          sink.done();
          return true;
        },
        [job](bool) { job->cancel(); });  // no-op once finished; frees the slot otherwise
  }

  json whole_response(Api api, const ApiRequest& r, const std::string& id, int prompt_tokens, const Outcome& o) {
    json out;
    if (api == Api::kMessages) {
      out["id"] = id;
      out["type"] = "message";
      out["role"] = "assistant";
      out["model"] = r.model;
      json content = json::array();
      if (!o.total.reasoning.empty() || r.chat.mode != ThinkMode::kNoThink) {
        content.push_back({{"type", "thinking"}, {"thinking", o.total.reasoning}, {"signature", ""}});
      }
      if (!o.total.content.empty() || o.total.tool_calls.empty()) {
        content.push_back({{"type", "text"}, {"text", o.total.content}});
      }
      for (const ChatToolCall& c : o.total.tool_calls) {
        json input = json::parse(c.arguments, nullptr, false);
        content.push_back({{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", std::move(input)}});
      }
      out["content"] = std::move(content);
      out["stop_reason"] = anthropic_stop(o);
      out["stop_sequence"] = o.stop_matched ? json(o.stop_sequence) : json(nullptr);
      out["usage"] = {{"input_tokens", prompt_tokens},
                      {"cache_read_input_tokens", o.result.reused_tokens},
                      {"output_tokens", o.completion_tokens},
                      {"dspark", dspark_json(o.result)},
                      {"timings", timings_json(o.result)}};
      if (!o.total.tool_error.empty()) out["tool_call_error"] = o.total.tool_error;
      return out;
    }
    out["id"] = id;
    out["created"] = unix_time();
    out["model"] = r.model;
    json choice;
    choice["index"] = 0;
    choice["finish_reason"] = openai_finish(o);
    if (api == Api::kChat) {
      out["object"] = "chat.completion";
      json msg;
      msg["role"] = "assistant";
      msg["content"] = o.total.content;
      if (r.chat.mode != ThinkMode::kNoThink) msg["reasoning_content"] = o.total.reasoning;
      if (!o.total.tool_calls.empty()) msg["tool_calls"] = tool_calls_json(o.total.tool_calls, 0, false);
      choice["message"] = std::move(msg);
      if (r.top_logprobs >= 0) {
        json lp = json::array();
        for (const TokenEvent& ev : o.logprob_tokens) lp.push_back(token_logprob_json(engine, ev));
        choice["logprobs"] = {{"content", std::move(lp)}};
      } else {
        choice["logprobs"] = nullptr;
      }
      if (!o.total.tool_error.empty()) choice["tool_call_error"] = o.total.tool_error;
    } else {
      out["object"] = "text_completion";
      choice["text"] = o.total.content;
      choice["logprobs"] = r.top_logprobs >= 0 ? completion_logprobs(o.logprob_tokens) : json(nullptr);
    }
    out["choices"] = json::array({std::move(choice)});
    out["usage"] = openai_usage(o, prompt_tokens);
    return out;
  }

  json completion_logprobs(std::span<const TokenEvent> tokens) {
    json tok = json::array(), lps = json::array(), tops = json::array(), offs = json::array();
    int offset = 0;
    for (const TokenEvent& ev : tokens) {
      const std::string t = engine.token_bytes(ev.id);
      tok.push_back(t);
      lps.push_back(ev.logprob);
      json top = json::object();
      for (const TopLogprob& a : ev.top) top[engine.token_bytes(a.id)] = a.logprob;
      tops.push_back(std::move(top));
      offs.push_back(offset);
      offset += static_cast<int>(t.size());
    }
    return {{"tokens", tok}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offs}};
  }

  void stream_response(Api api, Job& job, OutputParser& parser, const ApiRequest& r, const std::string& id,
                       int prompt_tokens, int fd, httplib::DataSink& sink) {
    auto write = [&](const std::string& s) { return sink.is_writable() && sink.write(s.data(), s.size()); };
    const int64_t created = unix_time();
    Outcome o;
    IdleFn idle = [&] { return write(": keep-alive\n\n"); };
    if (api == Api::kMessages) {
      stream_anthropic(job, parser, r, id, prompt_tokens, write, idle, fd, &o);
    } else {
      json base;
      base["id"] = id;
      base["object"] = api == Api::kChat ? "chat.completion.chunk" : "text_completion";
      base["created"] = created;
      base["model"] = r.model;
      auto chunk = [&](json choice) {
        json c = base;
        choice["index"] = 0;
        if (!choice.contains("finish_reason")) choice["finish_reason"] = nullptr;
        c["choices"] = json::array({std::move(choice)});
        return c;
      };
      bool ok = true;
      if (api == Api::kChat) ok = write(sse(chunk({{"delta", {{"role", "assistant"}, {"content", ""}}}})));
      EmitFn emit = [&](const OutputDelta& d, std::span<const TokenEvent> toks) {
        json choice;
        if (api == Api::kChat) {
          json delta = json::object();
          if (!d.reasoning.empty()) delta["reasoning_content"] = d.reasoning;
          if (!d.content.empty()) delta["content"] = d.content;
          if (!d.tool_call_parts.empty()) delta["tool_calls"] = tool_call_parts_json(d.tool_call_parts);
          choice["delta"] = std::move(delta);
          if (r.top_logprobs >= 0 && !toks.empty()) {
            json lp = json::array();
            for (const TokenEvent& ev : toks) lp.push_back(token_logprob_json(engine, ev));
            choice["logprobs"] = {{"content", std::move(lp)}};
          }
        } else {
          choice["text"] = d.content;
          if (r.top_logprobs >= 0 && !toks.empty()) choice["logprobs"] = completion_logprobs(toks);
        }
        return write(sse(chunk(std::move(choice))));
      };
      if (ok) drive(job, parser, r.top_logprobs >= 0, emit, idle, fd, &o);
      else {
        o.client_gone = true;
        job.cancel();
      }
      if (!o.client_gone) {
        json last;
        if (api == Api::kChat) last["delta"] = json::object();
        else last["text"] = "";
        last["finish_reason"] = openai_finish(o);
        if (!o.total.tool_error.empty()) last["tool_call_error"] = o.total.tool_error;
        if (!o.result.error.empty()) last["error"] = o.result.error;
        bool w = write(sse(chunk(std::move(last))));
        if (w && r.include_usage) {
          json u = base;
          u["choices"] = json::array();
          u["usage"] = openai_usage(o, prompt_tokens);
          w = write(sse(u));
        }
        if (w) w = write("data: [DONE]\n\n");
        if (!w) o.client_gone = true;
      }
    }
    if (o.client_gone) {
      client_disconnects++;
      job.cancel();
    }
  }

  template <typename WriteFn>
  void stream_anthropic(Job& job, OutputParser& parser, const ApiRequest& r, const std::string& id,
                        int prompt_tokens, WriteFn& write, const IdleFn& idle, int fd, Outcome* o) {
    json msg;
    msg["id"] = id;
    msg["type"] = "message";
    msg["role"] = "assistant";
    msg["model"] = r.model;
    msg["content"] = json::array();
    msg["stop_reason"] = nullptr;
    msg["stop_sequence"] = nullptr;
    msg["usage"] = {{"input_tokens", prompt_tokens}, {"output_tokens", 0}};
    if (!write(sse_event("message_start", {{"type", "message_start"}, {"message", msg}}))) {
      o->client_gone = true;
      job.cancel();
      return;
    }
    int index = -1;
    std::string open;  // type of the open block ("" none)
    auto close_block = [&]() {
      if (open.empty()) return true;
      open.clear();
      return write(sse_event("content_block_stop", {{"type", "content_block_stop"}, {"index", index}}));
    };
    auto open_block = [&](const std::string& type, json block) {
      if (open == type) return true;
      if (!close_block()) return false;
      open = type;
      ++index;
      return write(sse_event("content_block_start",
                             {{"type", "content_block_start"}, {"index", index}, {"content_block", std::move(block)}}));
    };
    auto delta = [&](json d) {
      return write(sse_event("content_block_delta", {{"type", "content_block_delta"}, {"index", index}, {"delta", std::move(d)}}));
    };
    EmitFn emit = [&](const OutputDelta& d, std::span<const TokenEvent>) {
      bool ok = true;
      if (!d.reasoning.empty()) {
        ok = ok && open_block("thinking", {{"type", "thinking"}, {"thinking", ""}, {"signature", ""}});
        ok = ok && delta({{"type", "thinking_delta"}, {"thinking", d.reasoning}});
      }
      if (!d.content.empty()) {
        ok = ok && open_block("text", {{"type", "text"}, {"text", ""}});
        ok = ok && delta({{"type", "text_delta"}, {"text", d.content}});
      }
      for (const ChatToolCall& c : d.tool_calls) {
        ok = ok && close_block();
        open = "tool_use";
        ++index;
        ok = ok && write(sse_event("content_block_start",
                                   {{"type", "content_block_start"},
                                    {"index", index},
                                    {"content_block", {{"type", "tool_use"}, {"id", c.id}, {"name", c.name}, {"input", json::object()}}}}));
        ok = ok && delta({{"type", "input_json_delta"}, {"partial_json", c.arguments}});
        ok = ok && close_block();
      }
      return ok;
    };
    drive(job, parser, false, emit, idle, fd, o);
    if (o->client_gone) return;
    if (!o->result.error.empty()) {  // an engine failure mid-stream: Anthropic's error event
      if (!write(sse_event("error", {{"type", "error"},
                                     {"error", {{"type", "api_error"}, {"message", "generation failed: " + o->result.error}}}}))) {
        o->client_gone = true;
      }
      return;
    }
    bool ok = true;
    if (index < 0) ok = open_block("text", {{"type", "text"}, {"text", ""}});
    ok = ok && close_block();
    json md;
    md["type"] = "message_delta";
    md["delta"] = {{"stop_reason", anthropic_stop(*o)},
                   {"stop_sequence", o->stop_matched ? json(o->stop_sequence) : json(nullptr)}};
    md["usage"] = {{"output_tokens", o->completion_tokens}, {"dspark", dspark_json(o->result)}};
    if (!o->total.tool_error.empty()) md["tool_call_error"] = o->total.tool_error;
    ok = ok && write(sse_event("message_delta", md));
    ok = ok && write(sse_event("message_stop", {{"type", "message_stop"}}));
    if (!ok) o->client_gone = true;
  }
};

HttpServer::HttpServer(Engine& engine, Scheduler& scheduler, ServerOptions options)
    : impl_(std::make_unique<Impl>(engine, scheduler, std::move(options))) {}

HttpServer::~HttpServer() = default;

bool HttpServer::bind(std::string* error) {
  if (impl_->opt.port == 0) {
    impl_->bound_port = impl_->svr.bind_to_any_port(impl_->opt.host);
  } else if (impl_->svr.bind_to_port(impl_->opt.host, impl_->opt.port)) {
    impl_->bound_port = impl_->opt.port;
  }
  if (impl_->bound_port <= 0) {
    *error = "cannot listen on " + impl_->opt.host + ":" + std::to_string(impl_->opt.port) +
             " (address in use or not available)";
    return false;
  }
  return true;
}

int HttpServer::port() const { return impl_->bound_port; }
void HttpServer::serve() { impl_->svr.listen_after_bind(); }
void HttpServer::set_draining() { impl_->draining = true; }
void HttpServer::stop() { impl_->svr.stop(); }

}  // namespace ds4::server
