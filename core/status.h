// core/status.h — the one error type of ds4cpp.
//
// Role: every fallible operation on user input (files, flags, prompts, HTTP bodies) returns a
// Status or an Expected<T>; nothing aborts on bad input (DEVELOPERS.md rule 4). Asserts
// (DS4_CHECK) are for programmer invariants only.
// Invariants: an ok Status carries no message; an error Status always has a non-empty
// message that names what is wrong (the key, tensor, flag or byte offset, expected vs actual).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <variant>

namespace ds4 {

enum class ErrorCode {
  kOk = 0,
  kInvalidArgument,  // bad flag, bad prompt, bad request
  kNotFound,         // missing file, key, tensor
  kCorrupt,          // malformed file contents
  kUnsupported,      // valid but not supported (e.g. quant type on this backend)
  kOutOfRange,       // context full, index out of range
  kResource,         // allocation / mmap / OS failure
  kInternal,         // a bug
};

const char* error_code_name(ErrorCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(ErrorCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }
  bool ok() const { return code_ == ErrorCode::kOk; }
  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "corrupt: tensor 'x' offset 12 out of range" — for logs and CLI errors.
  std::string to_string() const;

 private:
  ErrorCode code_ = ErrorCode::kOk;
  std::string message_;
};

// printf-style constructors: ds4::invalid_argument("unknown flag '%s'", name)
Status make_error(ErrorCode code, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
#define DS4_DECLARE_ERROR_FN(fn)                                               \
  Status fn(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
DS4_DECLARE_ERROR_FN(invalid_argument)
DS4_DECLARE_ERROR_FN(not_found)
DS4_DECLARE_ERROR_FN(corrupt)
DS4_DECLARE_ERROR_FN(unsupported)
DS4_DECLARE_ERROR_FN(out_of_range)
DS4_DECLARE_ERROR_FN(resource_error)
DS4_DECLARE_ERROR_FN(internal_error)
#undef DS4_DECLARE_ERROR_FN

// Expected<T>: a value or an error Status (std::expected is C++23; this is the subset we use).
template <typename T>
class [[nodiscard]] Expected {
 public:
  Expected(T value) : v_(std::move(value)) {}                     // NOLINT: implicit by design
  Expected(Status status) : v_(std::move(status)) {               // NOLINT: implicit by design
    if (std::get<Status>(v_).ok()) v_ = Status(ErrorCode::kInternal, "Expected built from ok Status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  explicit operator bool() const { return ok(); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(v_);
  }
  T& value() & { return std::get<T>(v_); }
  const T& value() const& { return std::get<T>(v_); }
  T&& value() && { return std::get<T>(std::move(v_)); }
  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Status> v_;
};

// Programmer-invariant check: prints and aborts. Never use on user input.
[[noreturn]] void check_failed(const char* expr, const char* file, int line, const char* msg);
#define DS4_CHECK(cond)                                                   \
  do {                                                                    \
    if (!(cond)) ::ds4::check_failed(#cond, __FILE__, __LINE__, nullptr); \
  } while (0)
#define DS4_CHECK_MSG(cond, msg)                                          \
  do {                                                                    \
    if (!(cond)) ::ds4::check_failed(#cond, __FILE__, __LINE__, (msg));   \
  } while (0)

// Propagation helpers.
#define DS4_RETURN_IF_ERROR(expr)          \
  do {                                     \
    ::ds4::Status ds4_status_ = (expr);    \
    if (!ds4_status_.ok()) return ds4_status_; \
  } while (0)

#define DS4_CONCAT_INNER(a, b) a##b
#define DS4_CONCAT(a, b) DS4_CONCAT_INNER(a, b)
// DS4_ASSIGN_OR_RETURN(auto x, f()); — binds the value or returns the error.
#define DS4_ASSIGN_OR_RETURN(lhs, rexpr) \
  DS4_ASSIGN_OR_RETURN_IMPL(DS4_CONCAT(ds4_expected_, __LINE__), lhs, rexpr)
#define DS4_ASSIGN_OR_RETURN_IMPL(tmp, lhs, rexpr) \
  auto tmp = (rexpr);                              \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

}  // namespace ds4
