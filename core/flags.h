// core/flags.h — the flag table: every command-line flag of a binary declared once.
//
// Role: each binary builds ONE FlagTable; every flag is declared once with its names, the
// variable it sets (whose current value is the default), help text and an optional `DS4_*`
// environment mirror. Parsing is CLI11 underneath (kept out of this header).
//
// Invariants:
//   * This file's .cpp is the only place in the project that calls getenv (process_env());
//     each mirror is looked up exactly once per parse(), and parse() runs once at start-up.
//   * Precedence: command line > environment mirror > default.
//   * Bad input never aborts: unknown flags, missing or malformed values (on the command line
//     or in an environment mirror) give one clear message and a non-zero exit code.
//   * --help lists every flag with its default and its environment mirror.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"

namespace ds4 {

// Environment access: name -> value (nullopt when unset). Tests inject their own.
using EnvLookup = std::function<std::optional<std::string>(const std::string& name)>;
// The process environment (getenv). The only getenv in ds4cpp.
EnvLookup process_env();

struct ParseResult {
  enum class Kind { kOk, kHelp, kError };
  Kind kind = Kind::kOk;
  int exit_code = 0;     // 0 for kOk/kHelp, 2 for kError
  std::string message;   // kHelp: the help text (stdout); kError: the error text (stderr)

  bool ok() const { return kind == Kind::kOk; }
  // True when the program should exit now with exit_code after printing message.
  bool should_exit() const { return kind != Kind::kOk; }
};

class FlagTable;

// For a frontend's main() when parse() ends the program: prints pr.message (help on stdout,
// an error on stderr) and returns the exit code to return.
int print_parse_result(const ParseResult& pr);
// A flag value rejected after parsing: "<program>: error: <message>" and the --help hint on
// stderr; returns 2 (the exit code of a usage error).
int flag_error(const FlagTable& t, const Status& s);

class FlagTable {
 public:
  FlagTable(std::string program, std::string description);
  ~FlagTable();
  FlagTable(const FlagTable&) = delete;
  FlagTable& operator=(const FlagTable&) = delete;

  // names: comma-separated, e.g. "-m,--model" or "--top-p". The pointee's current value is
  // the default (shown in --help). env: "" or the mirror's name, e.g. "DS4_MODEL".
  // value_name: placeholder shown in help ("FILE", "N", "F"; "" picks one from the type).
  FlagTable& option(const std::string& names, std::string* out, const std::string& help,
                    const std::string& env = "", const std::string& value_name = "");
  FlagTable& option(const std::string& names, int* out, const std::string& help,
                    const std::string& env = "", const std::string& value_name = "");
  FlagTable& option(const std::string& names, int64_t* out, const std::string& help,
                    const std::string& env = "", const std::string& value_name = "");
  FlagTable& option(const std::string& names, uint64_t* out, const std::string& help,
                    const std::string& env = "", const std::string& value_name = "");
  FlagTable& option(const std::string& names, float* out, const std::string& help,
                    const std::string& env = "", const std::string& value_name = "");
  FlagTable& option(const std::string& names, double* out, const std::string& help,
                    const std::string& env = "", const std::string& value_name = "");
  // A switch: present -> true. Its env mirror accepts 1/0, true/false, yes/no, on/off.
  FlagTable& flag(const std::string& names, bool* out, const std::string& help,
                  const std::string& env = "");

  // Parses argv[1..argc). Environment mirrors fill the flags not given on the command line.
  ParseResult parse(int argc, const char* const* argv, const EnvLookup& env = process_env());

  // Whether the flag (any of its names, e.g. "--ctx") was given on the command line or by
  // its environment mirror in the last parse().
  bool given(const std::string& name) const;
  // "command line", "environment (DS4_CTX)" or "default".
  std::string source(const std::string& name) const;

  std::string help() const;
  const std::string& program() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ds4
