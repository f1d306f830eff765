// tests/unit/core/flags_test.cpp — the flag table: defaults, env mirrors (looked up once,
// command line wins), unknown/malformed flags, help text naming the env mirrors.
#include "core/flags.h"

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

namespace ds4 {
namespace {

struct Flags {
  std::string model = "models/default.gguf";
  int ctx = 4096;
  float temp = 1.0f;
  uint64_t seed = 7;
  bool nothink = false;
  std::string prompt;
};

void declare(FlagTable& t, Flags& f) {
  t.option("-m,--model", &f.model, "Model GGUF file", "DS4_MODEL", "FILE")
      .option("-c,--ctx", &f.ctx, "Context size in tokens", "DS4_CTX")
      .option("--temp", &f.temp, "Sampling temperature")
      .option("--seed", &f.seed, "RNG seed", "DS4_SEED")
      .flag("--nothink", &f.nothink, "Disable thinking", "DS4_NOTHINK")
      .option("-p,--prompt", &f.prompt, "Prompt text");
}

// Fake environment that counts lookups.
struct FakeEnv {
  std::map<std::string, std::string> vars;
  std::map<std::string, int> lookups;
  EnvLookup lookup() {
    return [this](const std::string& name) -> std::optional<std::string> {
      ++lookups[name];
      auto it = vars.find(name);
      if (it == vars.end()) return std::nullopt;
      return it->second;
    };
  }
};

ParseResult run(FlagTable& t, std::vector<std::string> args, FakeEnv& env) {
  std::vector<const char*> argv = {"prog"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  return t.parse(static_cast<int>(argv.size()), argv.data(), env.lookup());
}

TEST(Flags, DefaultsStayWhenNothingIsGiven) {
  Flags f;
  FlagTable t("prog", "test");
  declare(t, f);
  FakeEnv env;
  ParseResult r = run(t, {}, env);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(f.model, "models/default.gguf");
  EXPECT_EQ(f.ctx, 4096);
  EXPECT_FLOAT_EQ(f.temp, 1.0f);
  EXPECT_FALSE(f.nothink);
  EXPECT_FALSE(t.given("--ctx"));
  EXPECT_EQ(t.source("--ctx"), "default");
}

TEST(Flags, CommandLineValuesAreApplied) {
  Flags f;
  FlagTable t("prog", "test");
  declare(t, f);
  FakeEnv env;
  ParseResult r = run(t, {"-m", "x.gguf", "--ctx=512", "--temp", "0.5", "--nothink", "-p", "hi"}, env);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(f.model, "x.gguf");
  EXPECT_EQ(f.ctx, 512);
  EXPECT_FLOAT_EQ(f.temp, 0.5f);
  EXPECT_TRUE(f.nothink);
  EXPECT_EQ(f.prompt, "hi");
  EXPECT_TRUE(t.given("-c"));
  EXPECT_EQ(t.source("--ctx"), "command line");
}

TEST(Flags, EnvMirrorAppliesAndIsLookedUpOnce) {
  Flags f;
  FlagTable t("prog", "test");
  declare(t, f);
  FakeEnv env;
  env.vars = {{"DS4_MODEL", "env.gguf"}, {"DS4_CTX", "2048"}, {"DS4_NOTHINK", "yes"},
              {"DS4_SEED", "99"}};
  ParseResult r = run(t, {}, env);
  ASSERT_TRUE(r.ok()) << r.message;
  EXPECT_EQ(f.model, "env.gguf");
  EXPECT_EQ(f.ctx, 2048);
  EXPECT_TRUE(f.nothink);
  EXPECT_EQ(f.seed, 99u);
  EXPECT_EQ(t.source("--ctx"), "environment (DS4_CTX)");
  for (const char* name : {"DS4_MODEL", "DS4_CTX", "DS4_NOTHINK", "DS4_SEED"}) {
    EXPECT_EQ(env.lookups[name], 1) << name;
  }
  // Flags without a mirror never touch the environment.
  EXPECT_EQ(env.lookups.size(), 4u);
}

TEST(Flags, CommandLineBeatsEnv) {
  Flags f;
  FlagTable t("prog", "test");
  declare(t, f);
  FakeEnv env;
  env.vars = {{"DS4_MODEL", "env.gguf"}, {"DS4_CTX", "not-a-number"}};
  ParseResult r = run(t, {"--model", "cli.gguf", "-c", "64"}, env);
  ASSERT_TRUE(r.ok()) << r.message;  // the malformed DS4_CTX is never consulted
  EXPECT_EQ(f.model, "cli.gguf");
  EXPECT_EQ(f.ctx, 64);
  EXPECT_EQ(env.lookups.count("DS4_CTX"), 0u);
}

TEST(Flags, UnknownFlagIsAClearError) {
  Flags f;
  FlagTable t("prog", "test");
  declare(t, f);
  FakeEnv env;
  ParseResult r = run(t, {"--frobnicate", "3"}, env);
  ASSERT_EQ(r.kind, ParseResult::Kind::kError);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.message.find("unknown flag"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("--frobnicate"), std::string::npos) << r.message;
  EXPECT_NE(r.message.find("--help"), std::string::npos) << r.message;
}

TEST(Flags, MalformedValuesAreErrors) {
  {
    Flags f;
    FlagTable t("prog", "test");
    declare(t, f);
    FakeEnv env;
    ParseResult r = run(t, {"--ctx", "lots"}, env);
    EXPECT_EQ(r.kind, ParseResult::Kind::kError);
    EXPECT_NE(r.message.find("invalid value 'lots' for --ctx"), std::string::npos) << r.message;
  }
  {
    Flags f;
    FlagTable t("prog", "test");
    declare(t, f);
    FakeEnv env;
    env.vars = {{"DS4_CTX", "lots"}};
    ParseResult r = run(t, {}, env);
    EXPECT_EQ(r.kind, ParseResult::Kind::kError);
    EXPECT_NE(r.message.find("DS4_CTX"), std::string::npos) << r.message;
    EXPECT_NE(r.message.find("lots"), std::string::npos) << r.message;
  }
  {
    Flags f;
    FlagTable t("prog", "test");
    declare(t, f);
    FakeEnv env;
    env.vars = {{"DS4_NOTHINK", "maybe"}};
    ParseResult r = run(t, {}, env);
    EXPECT_EQ(r.kind, ParseResult::Kind::kError);
    EXPECT_NE(r.message.find("DS4_NOTHINK"), std::string::npos) << r.message;
  }
  {
    Flags f;
    FlagTable t("prog", "test");
    declare(t, f);
    FakeEnv env;
    ParseResult r = run(t, {"--ctx"}, env);  // missing value
    EXPECT_EQ(r.kind, ParseResult::Kind::kError);
    EXPECT_NE(r.message.find("--ctx needs a value"), std::string::npos) << r.message;
  }
}

TEST(Flags, HelpListsFlagsDefaultsAndEnvMirrors) {
  Flags f;
  FlagTable t("prog", "test program");
  declare(t, f);
  FakeEnv env;
  ParseResult r = run(t, {"--help"}, env);
  ASSERT_EQ(r.kind, ParseResult::Kind::kHelp);
  EXPECT_EQ(r.exit_code, 0);
  for (const char* s : {"--model", "DS4_MODEL", "DS4_CTX", "DS4_NOTHINK", "--temp", "4096",
                        "models/default.gguf"}) {
    EXPECT_NE(r.message.find(s), std::string::npos) << s << "\n" << r.message;
  }
}

TEST(Flags, ProcessEnvReadsTheRealEnvironment) {
  ::setenv("DS4_FLAGS_TEST_VAR", "abc", 1);
  ::unsetenv("DS4_FLAGS_TEST_UNSET");
  EnvLookup env = process_env();
  EXPECT_EQ(env("DS4_FLAGS_TEST_VAR").value_or(""), "abc");
  EXPECT_FALSE(env("DS4_FLAGS_TEST_UNSET").has_value());
}

}  // namespace
}  // namespace ds4
