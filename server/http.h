// server/http.h — the HTTP front of ds4-server (cpp-httplib): routes, auth, SSE streaming,
// response shapes of the OpenAI and Anthropic APIs, /health and /metrics.
//
// Role: one HttpServer per process, over one Engine and one Scheduler. Each request runs on
// an httplib worker thread: parse + validate (api.h), render + tokenize, submit a Job, then
// turn the Job's token events into the API's response (streamed or whole).
// Invariants:
//   * Every error a client can cause is a 4xx with a JSON error body (api.h error_body),
//     including the ones httplib produces itself (413 body too large, 404 unknown route).
//   * A streaming client that goes away cancels its job at the next token write (or the next
//     1 s keep-alive while it waits), which frees its scheduler slot.
//   * While draining (shutdown), generation endpoints answer 503 and /health reports it.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <string>

#include "engine/engine.h"
#include "server/api.h"
#include "server/scheduler.h"

namespace ds4::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;                 // 0: any free port (port() tells which)
  std::string api_key;             // "" = no auth
  size_t max_body_bytes = 8u << 20;
  int read_timeout_s = 60;
  int write_timeout_s = 60;
  int http_threads = 64;           // concurrent connections served
  std::string model_name;          // reported id; also accepted as "model"
  int max_tokens = 4096;           // --max-tokens
  bool default_thinking = true;    // OpenAI requests without a thinking field
  std::string chat_page;           // HTML served at "/" ("" = 404)
};

class HttpServer {
 public:
  HttpServer(Engine& engine, Scheduler& scheduler, ServerOptions options);
  ~HttpServer();

  // Binds the listening socket (port 0 picks a free one). False with *error on failure.
  bool bind(std::string* error);
  int port() const;
  // Serves until stop(). Blocks.
  void serve();
  // Generation endpoints answer 503 from now on.
  void set_draining();
  // Closes the listening socket and returns after in-flight handlers end.
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4::server
