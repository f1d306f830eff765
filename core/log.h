// core/log.h — leveled logging to stderr.
//
// Role: the one place diagnostics are printed. Level is set once at start-up (from the flag
// table / DS4_LOG_LEVEL); hot paths must not log per token.
#pragma once

namespace ds4 {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kQuiet = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
void log_message(LogLevel level, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

}  // namespace ds4

#define DS4_LOG_DEBUG(...) ::ds4::log_message(::ds4::LogLevel::kDebug, __VA_ARGS__)
#define DS4_LOG_INFO(...) ::ds4::log_message(::ds4::LogLevel::kInfo, __VA_ARGS__)
#define DS4_LOG_WARN(...) ::ds4::log_message(::ds4::LogLevel::kWarn, __VA_ARGS__)
#define DS4_LOG_ERROR(...) ::ds4::log_message(::ds4::LogLevel::kError, __VA_ARGS__)
