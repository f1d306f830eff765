// core/status.cpp — Status formatting and the invariant-check handler.
#include "core/status.h"

#include <cstdarg>
#include <vector>

namespace ds4 {

const char* error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kOk: return "ok";
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kOutOfRange: return "out of range";
    case ErrorCode::kResource: return "resource";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return std::string(error_code_name(code_)) + ": " + message_;
}

static Status vmake(ErrorCode code, const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  std::string msg(n > 0 ? static_cast<size_t>(n) : 0, '\0');
  if (n > 0) std::vsnprintf(msg.data(), msg.size() + 1, fmt, ap);
  if (msg.empty()) msg = "(no message)";
  return Status(code, std::move(msg));
}

Status make_error(ErrorCode code, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  Status s = vmake(code, fmt, ap);
  va_end(ap);
  return s;
}

#define DS4_DEFINE_ERROR_FN(fn, code)        \
  Status fn(const char* fmt, ...) {          \
    va_list ap;                              \
    va_start(ap, fmt);                       \
    Status s = vmake(code, fmt, ap);         \
    va_end(ap);                              \
    return s;                                \
  }
DS4_DEFINE_ERROR_FN(invalid_argument, ErrorCode::kInvalidArgument)
DS4_DEFINE_ERROR_FN(not_found, ErrorCode::kNotFound)
DS4_DEFINE_ERROR_FN(corrupt, ErrorCode::kCorrupt)
DS4_DEFINE_ERROR_FN(unsupported, ErrorCode::kUnsupported)
DS4_DEFINE_ERROR_FN(out_of_range, ErrorCode::kOutOfRange)
DS4_DEFINE_ERROR_FN(resource_error, ErrorCode::kResource)
DS4_DEFINE_ERROR_FN(internal_error, ErrorCode::kInternal)
#undef DS4_DEFINE_ERROR_FN

void check_failed(const char* expr, const char* file, int line, const char* msg) {
  std::fprintf(stderr, "ds4: internal invariant failed: %s at %s:%d%s%s\n", expr, file, line,
               msg ? ": " : "", msg ? msg : "");
  std::abort();
}

}  // namespace ds4
