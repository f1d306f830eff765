// core/flags.cpp — FlagTable on top of CLI11; the project's only getenv.
//
// How env mirrors work: CLI11 parses the command line first (storing raw results); then for
// every flag that the command line did not give, its mirror is looked up once and, when set,
// fed through the same CLI11 conversion as a command-line value. So the command line wins
// and a malformed environment value gets the same kind of error as a malformed flag.
#include "core/flags.h"

#include <cstdio>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <vector>

namespace ds4 {

EnvLookup process_env() {
  return [](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());  // the one getenv (ENGINEERING.md style)
    if (v == nullptr) return std::nullopt;
    return std::string(v);
  };
}

namespace {

enum class Source { kDefault, kCommandLine, kEnv };

struct FlagEntry {
  CLI::Option* opt = nullptr;
  std::string names;
  std::string env;
  bool is_switch = false;
  Source source = Source::kDefault;
};

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return s;
}

// Accepted spellings for a switch's environment value; nullopt if none.
std::optional<bool> parse_switch_value(const std::string& value) {
  const std::string v = lower(value);
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off" || v.empty()) return false;
  return std::nullopt;
}

std::string with_env(const std::string& help, const std::string& env) {
  if (env.empty()) return help;
  return help + " [env " + env + "]";
}

// The long name of an option for messages ("--ctx"), falling back to the short one.
std::string display_name(const CLI::Option* opt) {
  if (!opt->get_lnames().empty()) return "--" + opt->get_lnames().front();
  if (!opt->get_snames().empty()) return "-" + opt->get_snames().front();
  return opt->get_name();
}

// CLI11's two most common messages, reworded to name the flag first:
//   "Could not convert: --temp = abc"  -> "invalid value 'abc' for --temp"
//   "--tokens: 1 required N missing"   -> "--tokens needs a value (N)"
std::string reword(const std::string& what) {
  static const std::string kConvert = "Could not convert: ";
  if (what.rfind(kConvert, 0) == 0) {
    const std::string rest = what.substr(kConvert.size());
    const size_t eq = rest.find(" = ");
    if (eq != std::string::npos) {
      return "invalid value '" + rest.substr(eq + 3) + "' for " + rest.substr(0, eq);
    }
  }
  const size_t colon = what.find(": 1 required ");
  if (colon != std::string::npos && what.size() > 8 &&
      what.compare(what.size() - 8, 8, " missing") == 0) {
    const size_t type_begin = colon + 13;
    return what.substr(0, colon) + " needs a value (" +
           what.substr(type_begin, what.size() - 8 - type_begin) + ")";
  }
  return what;
}

}  // namespace

struct FlagTable::Impl {
  Impl(std::string prog, std::string desc) : program(std::move(prog)), app(desc, program) {
    app.set_help_flag("-h,--help", "Print this help and exit");
    app.allow_extras(false);
    app.get_formatter()->column_width(34);
  }

  template <typename T>
  void add(const std::string& names, T* out, const std::string& help, const std::string& env,
           const std::string& value_name, const char* default_type) {
    CLI::Option* opt = app.add_option(names, *out, with_env(help, env));
    opt->capture_default_str();
    opt->type_name(value_name.empty() ? default_type : value_name);
    entries.push_back(FlagEntry{opt, names, env, false, Source::kDefault});
  }

  const FlagEntry* find(const std::string& name) const {
    for (const FlagEntry& e : entries) {
      if (e.opt->check_name(name)) return &e;
    }
    return nullptr;
  }

  std::string error(const std::string& what) const {
    return program + ": error: " + what + "\nRun '" + program + " --help' for the list of flags.";
  }

  std::string program;
  CLI::App app;
  std::vector<FlagEntry> entries;
};

FlagTable::FlagTable(std::string program, std::string description)
    : impl_(std::make_unique<Impl>(std::move(program), std::move(description))) {}
FlagTable::~FlagTable() = default;

FlagTable& FlagTable::option(const std::string& names, std::string* out, const std::string& help,
                             const std::string& env, const std::string& value_name) {
  impl_->add(names, out, help, env, value_name, "TEXT");
  return *this;
}
FlagTable& FlagTable::option(const std::string& names, int* out, const std::string& help,
                             const std::string& env, const std::string& value_name) {
  impl_->add(names, out, help, env, value_name, "N");
  return *this;
}
FlagTable& FlagTable::option(const std::string& names, int64_t* out, const std::string& help,
                             const std::string& env, const std::string& value_name) {
  impl_->add(names, out, help, env, value_name, "N");
  return *this;
}
FlagTable& FlagTable::option(const std::string& names, uint64_t* out, const std::string& help,
                             const std::string& env, const std::string& value_name) {
  impl_->add(names, out, help, env, value_name, "N");
  return *this;
}
FlagTable& FlagTable::option(const std::string& names, float* out, const std::string& help,
                             const std::string& env, const std::string& value_name) {
  impl_->add(names, out, help, env, value_name, "F");
  return *this;
}
FlagTable& FlagTable::option(const std::string& names, double* out, const std::string& help,
                             const std::string& env, const std::string& value_name) {
  impl_->add(names, out, help, env, value_name, "F");
  return *this;
}

FlagTable& FlagTable::flag(const std::string& names, bool* out, const std::string& help,
                           const std::string& env) {
  CLI::Option* opt = impl_->app.add_flag(names, *out, with_env(help, env));
  impl_->entries.push_back(FlagEntry{opt, names, env, true, Source::kDefault});
  return *this;
}

ParseResult FlagTable::parse(int argc, const char* const* argv, const EnvLookup& env) {
  ParseResult result;
  for (FlagEntry& e : impl_->entries) e.source = Source::kDefault;
  try {
    impl_->app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    result.kind = ParseResult::Kind::kHelp;
    result.message = help();
    return result;
  } catch (const CLI::ExtrasError&) {
    // Report unknown flags by name (their would-be values are noise); only when every
    // leftover is a bare word is it an "unexpected argument".
    std::vector<std::string> extra = impl_->app.remaining();
    std::vector<std::string> flags;
    for (const std::string& arg : extra) {
      if (arg.size() > 1 && arg[0] == '-') flags.push_back(arg.substr(0, arg.find('=')));
    }
    const std::vector<std::string>& shown = flags.empty() ? extra : flags;
    std::string what;
    for (const std::string& arg : shown) {
      if (!what.empty()) what += ", ";
      what += "'" + arg + "'";
    }
    const bool plural = shown.size() > 1;
    std::string kind = !flags.empty() ? (plural ? "unknown flags " : "unknown flag ")
                                      : (plural ? "unexpected arguments " : "unexpected argument ");
    result.kind = ParseResult::Kind::kError;
    result.exit_code = 2;
    result.message = impl_->error(kind + (what.empty() ? std::string("(none)") : what));
    return result;
  } catch (const CLI::ParseError& e) {
    result.kind = ParseResult::Kind::kError;
    result.exit_code = 2;
    result.message = impl_->error(reword(e.what()));
    return result;
  }

  for (FlagEntry& e : impl_->entries) {
    if (e.opt->count() > 0) {
      e.source = Source::kCommandLine;
      continue;
    }
    if (e.env.empty() || !env) continue;
    std::optional<std::string> value = env(e.env);  // exactly one lookup per mirror
    if (!value) continue;
    std::string v = *value;
    if (e.is_switch) {
      std::optional<bool> b = parse_switch_value(v);
      if (!b) {
        result.kind = ParseResult::Kind::kError;
        result.exit_code = 2;
        result.message = impl_->error("environment " + e.env + "='" + v + "' for " +
                                      display_name(e.opt) +
                                      ": expected 1/0, true/false, yes/no or on/off");
        return result;
      }
      v = *b ? "true" : "false";
    } else if (v.empty()) {
      continue;  // an empty mirror means "unset"
    }
    try {
      e.opt->add_result(v);
      e.opt->run_callback();
    } catch (const CLI::Error&) {
      result.kind = ParseResult::Kind::kError;
      result.exit_code = 2;
      result.message = impl_->error("environment " + e.env + "='" + v +
                                    "' is not a valid value for " + display_name(e.opt));
      return result;
    }
    e.source = Source::kEnv;
  }
  return result;
}

bool FlagTable::given(const std::string& name) const {
  const FlagEntry* e = impl_->find(name);
  return e != nullptr && e->source != Source::kDefault;
}

std::string FlagTable::source(const std::string& name) const {
  const FlagEntry* e = impl_->find(name);
  if (e == nullptr || e->source == Source::kDefault) return "default";
  if (e->source == Source::kCommandLine) return "command line";
  return "environment (" + e->env + ")";
}

std::string FlagTable::help() const { return impl_->app.help(); }

const std::string& FlagTable::program() const { return impl_->program; }

int print_parse_result(const ParseResult& pr) {
  std::fprintf(pr.kind == ParseResult::Kind::kHelp ? stdout : stderr, "%s\n", pr.message.c_str());
  return pr.exit_code;
}

int flag_error(const FlagTable& t, const Status& s) {
  std::fprintf(stderr, "%s: error: %s\nRun '%s --help' for the list of flags.\n", t.program().c_str(),
               s.message().c_str(), t.program().c_str());
  return 2;
}

}  // namespace ds4
