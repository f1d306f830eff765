// core/log.cpp — stderr logger; one atomic level, one fprintf per message.
#include "core/log.h"

#include <atomic>
#include <cstdarg>
#include <cstdio>

namespace ds4 {

static std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load()); }

void log_message(LogLevel level, const char* fmt, ...) {
  if (static_cast<int>(level) < g_level.load()) return;
  static const char* kTags[] = {"debug", "info", "warn", "error"};
  char buf[2048];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  std::fprintf(stderr, "ds4 %s: %s\n", kTags[static_cast<int>(level)], buf);
}

}  // namespace ds4
