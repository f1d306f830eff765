// tests/server/chat_format_test.cpp — the server's DS4 template rendering, DSML tool calls
// and the streaming OutputParser (no model needed).
#include "server/chat_format.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

namespace ds4::server {
namespace {

using nlohmann::json;

std::string user() { return std::string(kUserText); }
std::string assistant() { return std::string(kAssistantText); }

TEST(RenderChat, SingleTurnMatchesTheTemplate) {
  ChatPrompt p;
  p.messages = {{"system", "Be brief.", "", {}}, {"user", "Hi", "", {}}};
  p.mode = ThinkMode::kNoThink;
  EXPECT_EQ(render_chat_prompt(p), std::string(kBosText) + "Be brief." + user() + "Hi" + assistant() + "</think>");
  p.mode = ThinkMode::kThink;
  EXPECT_EQ(render_chat_prompt(p), std::string(kBosText) + "Be brief." + user() + "Hi" + assistant() + "<think>");
  p.mode = ThinkMode::kThinkMax;
  EXPECT_EQ(render_chat_prompt(p), std::string(kBosText) + std::string(think_max_prefix()) + "Be brief." + user() +
                                       "Hi" + assistant() + "<think>");
}

TEST(RenderChat, SystemMessagesJoinAndHistoryEndsWithEos) {
  ChatPrompt p;
  p.messages = {{"system", "A", "", {}}, {"developer", "B", "", {}}, {"user", "q1", "", {}},
                {"assistant", "a1", "r1", {}}, {"user", "q2", "", {}}};
  p.mode = ThinkMode::kThink;
  // Thinking mode, no tools: history before the last user message gets </think> only.
  EXPECT_EQ(render_chat_prompt(p), std::string(kBosText) + "A\n\nB" + user() + "q1" + assistant() + "</think>a1" +
                                       std::string(kEosText) + user() + "q2" + assistant() + "<think>");
}

TEST(RenderChat, ToolsToolCallsAndResults) {
  ChatPrompt p;
  p.tools = {{"get_weather", "Weather now", R"({"type":"object","properties":{"city":{"type":"string"}}})"}};
  p.messages = {{"user", "Weather in Rome?", "", {}},
                {"assistant", "", "need data", {{"call_1", "get_weather", R"({"city":"Rome","days":2})"}}},
                {"tool", "sunny", "", {}},
                {"tool", "warm", "", {}}};
  p.mode = ThinkMode::kThink;
  const std::string s = render_chat_prompt(p);
  EXPECT_EQ(s.find(std::string(kBosText) + "## Tools"), 0u);
  EXPECT_NE(s.find(R"({"description":"Weather now","name":"get_weather","parameters":{)"), std::string::npos);
  // Tool context: reasoning is kept in the history.
  const std::string call = std::string(kAssistantText) + "<think>need data</think>" + dsml_tag("function_calls") +
                           ">\n" + dsml_tag("invoke") + " name=\"get_weather\">\n" + dsml_tag("parameter") +
                           " name=\"city\" string=\"true\">Rome" + dsml_close_tag("parameter") + "\n" +
                           dsml_tag("parameter") + " name=\"days\" string=\"false\">2" +
                           dsml_close_tag("parameter") + "\n" + dsml_close_tag("invoke") + "\n" +
                           dsml_close_tag("function_calls") + std::string(kEosText);
  EXPECT_NE(s.find(call), std::string::npos) << s;
  EXPECT_NE(s.find(user() + "<tool_result>sunny</tool_result><tool_result>warm</tool_result>" + assistant() + "<think>"),
            std::string::npos);
}

TEST(Dsml, ParsesWhatItRenders) {
  const std::vector<ToolCall> calls = {{"a", "f", R"({"s":"x <y> \"z\"","n":1.5,"o":{"k":[1,2]},"b":true})"},
                                       {"b", "g", "{}"}};
  const std::string block = render_dsml_calls(calls);
  OutputParser parser(false, true, {}, "id_");
  OutputDelta d;
  EXPECT_FALSE(parser.push("Sure." + block + " done", &d));
  parser.finish(&d);
  EXPECT_EQ(d.content, "Sure. done");
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json::parse(calls[0].arguments));
  EXPECT_EQ(d.tool_calls[0].id, "id_0");
  EXPECT_EQ(d.tool_calls[1].name, "g");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_TRUE(d.tool_error.empty());
}

TEST(Dsml, StreamedOneByteAtATimeGivesTheSameCalls) {
  const std::vector<ToolCall> calls = {{"a", "search", R"({"q":"ünïcode ok","limit":3})"}};
  const std::string text = "Let me look." + render_dsml_calls(calls) + "\nAfter.";
  OutputParser parser(false, true, {}, "c");
  OutputDelta all;
  for (char c : text) {
    OutputDelta d;
    parser.push(std::string_view(&c, 1), &d);
    all.append(d);
  }
  OutputDelta tail;
  parser.finish(&tail);
  all.append(tail);
  EXPECT_EQ(all.content, "Let me look.\nAfter.");
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(json::parse(all.tool_calls[0].arguments), json::parse(calls[0].arguments));
}

TEST(Dsml, MalformedBlocksAreReportedNotThrown) {
  const std::string open = dsml_tag("function_calls") + ">";
  const std::vector<std::string> bad = {
      open + dsml_tag("invoke") + ">" + dsml_close_tag("invoke") + dsml_close_tag("function_calls"),  // no name
      open + "garbage" + dsml_close_tag("function_calls"),
      open + dsml_tag("invoke") + " name=\"f\">" + dsml_tag("parameter") + " name=\"x\" string=\"false\">{bad" +
          dsml_close_tag("parameter") + dsml_close_tag("invoke") + dsml_close_tag("function_calls"),
      open + dsml_tag("invoke") + " name=\"f\">" + dsml_tag("parameter") + " name=\"x\">unclosed",  // EOS mid-call
      open,
  };
  for (const std::string& b : bad) {
    OutputParser parser(false, true, {}, "c");
    OutputDelta d;
    parser.push(b, &d);
    parser.finish(&d);
    EXPECT_FALSE(d.tool_error.empty()) << b;
    EXPECT_TRUE(d.tool_calls.empty()) << b;
    EXPECT_FALSE(d.content.empty()) << b;  // the raw text is kept, not dropped
  }
}

TEST(Dsml, RandomTextNeverBreaksTheParser) {
  // Fragments of the DSML vocabulary in random order: any split into calls, content and errors
  // is allowed; a throw or crash is not, and text without calls or errors is kept byte for byte.
  const std::vector<std::string> pieces = {dsml_tag("function_calls") + ">", dsml_close_tag("function_calls"),
                                           dsml_tag("invoke") + " name=\"f\">", dsml_close_tag("invoke"),
                                           dsml_tag("parameter") + " name=\"p\" string=\"true\">",
                                           dsml_tag("parameter") + " name=\"q\" string=\"false\">",
                                           dsml_close_tag("parameter"), "1", "{", "\"", "<", ">", " ", "x", "</think>"};
  std::mt19937 rng(7);
  for (int iter = 0; iter < 2000; ++iter) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 12);
    for (int i = 0; i < n; ++i) text += pieces[rng() % pieces.size()];
    OutputParser parser(iter % 2 == 0, true, {"STOP"}, "c");
    OutputDelta all;
    size_t pos = 0;
    while (pos < text.size()) {
      const size_t len = 1 + rng() % 7;
      OutputDelta d;
      parser.push(std::string_view(text).substr(pos, len), &d);
      all.append(d);
      pos += len;
    }
    OutputDelta tail;
    parser.finish(&tail);
    all.append(tail);
    if (all.tool_calls.empty() && all.tool_error.empty()) {
      EXPECT_EQ(all.reasoning.size() + all.content.size() +
                    (iter % 2 == 0 && text.find("</think>") != std::string::npos ? 8 : 0),
                text.size())
          << text;
    }
  }
}

TEST(OutputParser, ThinkingSplitAcrossPieces) {
  OutputParser parser(true, false, {}, "c");
  OutputDelta all;
  for (std::string_view piece : {"I reason", " here</th", "ink>The ans", "wer."}) {
    OutputDelta d;
    parser.push(piece, &d);
    all.append(d);
  }
  parser.finish(&all);
  EXPECT_EQ(all.reasoning, "I reason here");
  EXPECT_EQ(all.content, "The answer.");
}

TEST(OutputParser, StopSequenceAcrossPiecesCutsBeforeIt) {
  OutputParser parser(false, false, {"END", "xyz"}, "c");
  OutputDelta all;
  bool hit = false;
  for (std::string_view piece : {"abc E", "N", "Dmore"}) {
    OutputDelta d;
    hit = parser.push(piece, &d);
    all.append(d);
    if (hit) break;
  }
  EXPECT_TRUE(hit);
  EXPECT_EQ(all.content, "abc ");
  EXPECT_EQ(parser.stop_sequence(), "END");
  // A held-back partial match that never completes is released at the end.
  OutputParser p2(false, false, {"END"}, "c");
  OutputDelta d2;
  EXPECT_FALSE(p2.push("foo EN", &d2));
  EXPECT_EQ(d2.content, "foo ");
  p2.finish(&d2);
  EXPECT_EQ(d2.content, "foo EN");
}

TEST(OutputParser, PartialSuffix) {
  EXPECT_EQ(partial_suffix("abc</th", "</think>"), 4u);
  EXPECT_EQ(partial_suffix("abc", "</think>"), 0u);
  EXPECT_EQ(partial_suffix("</think>", "</think>"), 0u);  // a full match is not "partial"
}

}  // namespace
}  // namespace ds4::server
