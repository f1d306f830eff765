// cli/debug_dump.cpp — the token/logprob inspection flags of `ds4` (names as in antirez/ds4):
//   --dump-tokens              print the prompt's token ids and pieces exactly as the engine
//                              would be fed (with --raw: BOS + plain text, no template), exit;
//   --dump-logprobs FILE       greedy continuation of the prompt (up to -n tokens, stopping
//                              after EOS or at a full context), each step with its top
//                              --logprobs-top-k N alternatives and log-probabilities, as JSON.
// Output formats:
//   dump-tokens (stdout): "<index>\t<id>\t<piece>" per token, the piece being the token's bytes
//   with \\, \n, \r, \t escaped and other bytes outside printable ASCII/valid UTF-8 as \xNN.
//   dump-logprobs (FILE): {"prompt_tokens": [ids], "steps": [{"token": id, "text": "...",
//   "bytes": "hex", "logprob": x, "top": [{"token": id, "text": "...", "logprob": x}, ...]}]}
//   where logprob = log softmax of the logits (double precision), top sorted by logit
//   descending then id ascending (so top[0] is the greedy token), "text" = the token's bytes
//   with invalid UTF-8 bytes replaced by U+FFFD and "bytes" their exact hex.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "cli/cli.h"
#include "core/flags.h"

namespace ds4::cli {
namespace {

// Length of the valid UTF-8 sequence at s[i], or 0.
size_t utf8_len(const std::string& s, size_t i) {
  const auto c = uint8_t(s[i]);
  size_t len;
  uint32_t min;
  if (c < 0x80) return 1;
  if (c >= 0xC2 && c <= 0xDF) len = 2, min = 0x80;
  else if (c >= 0xE0 && c <= 0xEF) len = 3, min = 0x800;
  else if (c >= 0xF0 && c <= 0xF4) len = 4, min = 0x10000;
  else return 0;
  if (i + len > s.size()) return 0;
  uint32_t cp = c & (0x7F >> len);
  for (size_t k = 1; k < len; ++k) {
    const auto b = uint8_t(s[i + k]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

std::string escape_piece(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const auto c = uint8_t(s[i]);
    const size_t len = utf8_len(s, i);
    char buf[8];
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (len == 0 || c < 0x20 || c == 0x7F) {
      std::snprintf(buf, sizeof buf, "\\x%02X", c);
      out += buf;
      i += 1;
      continue;
    } else {
      out.append(s, i, len);
      i += len;
      continue;
    }
    i += 1;
  }
  return out;
}

// JSON string of the token bytes: valid UTF-8 kept, invalid bytes -> U+FFFD.
std::string json_text(const std::string& s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = uint8_t(s[i]);
    const size_t len = utf8_len(s, i);
    if (len == 0) {
      out += "\xEF\xBF\xBD";
      i += 1;
    } else if (c == '"' || c == '\\') {
      out += '\\';
      out += char(c);
      i += 1;
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      i += 1;
    } else {
      out.append(s, i, len);
      i += len;
    }
  }
  return out + "\"";
}

std::string hex(const std::string& s) {
  static const char* d = "0123456789abcdef";
  std::string out;
  for (unsigned char c : s) {
    out += d[c >> 4];
    out += d[c & 15];
  }
  return out;
}

std::string fmt_double(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

int dump_tokens(const Loaded& loaded, const std::vector<int32_t>& prompt) {
  std::string out;
  for (size_t i = 0; i < prompt.size(); ++i) {
    out += std::to_string(i) + "\t" + std::to_string(prompt[i]) + "\t" +
           escape_piece(loaded.text->token_bytes(prompt[i])) + "\n";
  }
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fprintf(stderr, "ds4: %zu prompt tokens\n", prompt.size());
  return 0;
}

int dump_logprobs(const Options& o, Loaded& loaded, const std::vector<int32_t>& prompt) {
  if (o.logprobs_top_k < 1) {
    std::fprintf(stderr, "ds4: error: --logprobs-top-k must be >= 1, got %d\n", o.logprobs_top_k);
    return 2;
  }
  if (int(prompt.size()) >= o.ctx) {
    std::fprintf(stderr, "ds4: error: the prompt (%zu tokens) does not fit the context (%d)\n",
                 prompt.size(), o.ctx);
    return 1;
  }
  FILE* f = std::fopen(o.dump_logprobs.c_str(), "wb");
  if (!f) {
    std::fprintf(stderr, "ds4: error: cannot write '%s'\n", o.dump_logprobs.c_str());
    return 1;
  }
  Session& s = *loaded.session;
  if (Status st = s.prefill(prompt); !st.ok()) {
    std::fclose(f);
    std::fprintf(stderr, "ds4: error: %s\n", st.message().c_str());
    return 1;
  }
  std::string json = "{\"prompt_tokens\": [";
  for (size_t i = 0; i < prompt.size(); ++i) json += (i ? ", " : "") + std::to_string(prompt[i]);
  json += "], \"steps\": [";
  const int32_t eos = loaded.text->eos();
  std::vector<int32_t> order;
  int steps = 0;
  for (; steps < o.tokens && s.n_tokens() < s.n_ctx(); ++steps) {
    const std::span<const float> logits = s.logits();
    const int n = int(logits.size());
    double mx = -INFINITY;
    for (float v : logits) mx = std::max(mx, double(v));
    double sum = 0.0;
    for (float v : logits) sum += std::exp(double(v) - mx);
    const double lse = mx + std::log(sum);
    const int k = std::min(o.logprobs_top_k, n);
    order.resize(n);
    for (int i = 0; i < n; ++i) order[i] = i;
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
    });
    const int32_t tok = order[0];
    const std::string bytes = loaded.text->token_bytes(tok);
    json += steps ? ", " : "";
    json += "{\"token\": " + std::to_string(tok) + ", \"text\": " + json_text(bytes) +
            ", \"bytes\": \"" + hex(bytes) + "\", \"logprob\": " +
            fmt_double(double(logits[tok]) - lse) + ", \"top\": [";
    for (int j = 0; j < k; ++j) {
      const int32_t t = order[j];
      json += (j ? ", " : "") + std::string("{\"token\": ") + std::to_string(t) +
              ", \"text\": " + json_text(loaded.text->token_bytes(t)) +
              ", \"logprob\": " + fmt_double(double(logits[t]) - lse) + "}";
    }
    json += "]}";
    if (tok == eos) {
      ++steps;
      break;
    }
    if (Status st = s.decode(tok); !st.ok()) {
      std::fclose(f);
      std::fprintf(stderr, "ds4: error: %s\n", st.message().c_str());
      return 1;
    }
  }
  json += "]}\n";
  const bool ok = std::fwrite(json.data(), 1, json.size(), f) == json.size();
  if (std::fclose(f) != 0 || !ok) {
    std::fprintf(stderr, "ds4: error: writing '%s' failed\n", o.dump_logprobs.c_str());
    return 1;
  }
  std::fprintf(stderr, "ds4: %d steps written to %s\n", steps, o.dump_logprobs.c_str());
  return 0;
}

}  // namespace

void declare_debug_flags(FlagTable& t, Options& o) {
  t.flag("--dump-tokens", &o.dump_tokens,
         "Print the prompt's token ids and pieces as the engine will feed them (with --raw: no "
         "template), then exit")
      .option("--dump-logprobs", &o.dump_logprobs,
              "Write the greedy continuation (up to -n tokens) with each step's top-K "
              "alternatives and log-probabilities as JSON to FILE, then exit",
              "", "FILE")
      .option("--logprobs-top-k", &o.logprobs_top_k, "Alternatives per step for --dump-logprobs",
              "", "N");
}

bool debug_dump_requested(const Options& o) { return o.dump_tokens || !o.dump_logprobs.empty(); }

std::vector<int32_t> prompt_tokens(const Options& o, const Loaded& loaded,
                                   const std::string& prompt_text) {
  // The same prompt as the one-shot path (main.cpp run_one_shot).
  const ThinkMode mode = TextCodec::think_mode_for_context(
      o.nothink ? ThinkMode::kNoThink : ThinkMode::kThink, o.ctx);
  if (!o.raw) return loaded.text->encode_prompt(o.system, prompt_text, mode);
  std::vector<int32_t> prompt{loaded.text->bos()};
  std::vector<int32_t> body = loaded.text->tokenize(prompt_text);
  prompt.insert(prompt.end(), body.begin(), body.end());
  return prompt;
}

int run_debug_dump(const Options& o, Loaded& loaded, const std::string& prompt_text) {
  const std::vector<int32_t> prompt = prompt_tokens(o, loaded, prompt_text);
  if (o.dump_tokens) return dump_tokens(loaded, prompt);
  return dump_logprobs(o, loaded, prompt);
}

}  // namespace ds4::cli
