// tests/server/chat_test.cpp — the server's chat path on the shared code: request messages +
// tools rendered by the one V4 renderer (TextCodec::try_render_chat via render_messages), and
// the streaming OutputParser (engine/chat_output.h) reading back what that renderer writes.
// No model needed.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "engine/chat_output.h"
#include "engine/text.h"
#include "server/api.h"

namespace ds4::server {
namespace {

using nlohmann::json;

// Spellings of the DS4 special strings (｜ is U+FF5C, ▁ is U+2581).
const std::string kBos = "<\xEF\xBD\x9C" "begin\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kEos = "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>";
const std::string kUser = "<\xEF\xBD\x9CUser\xEF\xBD\x9C>";
const std::string kAsst = "<\xEF\xBD\x9C" "Assistant\xEF\xBD\x9C>";
std::string dsml_tag(std::string_view name) { return "<\xEF\xBD\x9C" "DSML\xEF\xBD\x9C" + std::string(name); }
std::string dsml_close_tag(std::string_view name) { return "</\xEF\xBD\x9C" "DSML\xEF\xBD\x9C" + std::string(name) + ">"; }

ChatMessage msg(std::string role, std::string content, std::string reasoning = {},
                std::vector<ChatToolCall> calls = {}, std::string call_id = {}) {
  ChatMessage m;
  m.role = std::move(role);
  m.content = std::move(content);
  m.reasoning = std::move(reasoning);
  m.tool_calls = std::move(calls);
  m.tool_call_id = std::move(call_id);
  return m;
}

std::string render(const ChatPrompt& p) {
  Expected<std::string> s = TextCodec::try_render_chat(render_messages(p), p.mode);
  EXPECT_TRUE(s.ok()) << s.status().message();
  return s.ok() ? *s : std::string();
}

// The DSML block the shared renderer writes for these history calls.
std::string rendered_calls(const std::vector<ChatToolCall>& calls) {
  ChatPrompt p;
  p.mode = ThinkMode::kNoThink;
  p.messages = {msg("user", "x"), msg("assistant", "", "", calls)};
  const std::string s = render(p);
  const std::string before = kBos + kUser + "x" + kAsst + "</think>";
  EXPECT_EQ(s.substr(0, before.size()), before);
  EXPECT_TRUE(s.ends_with(kEos));
  return s.substr(before.size(), s.size() - before.size() - kEos.size());
}

TEST(RenderChat, SingleTurnMatchesTheTemplate) {
  ChatPrompt p;
  p.messages = {msg("system", "Be brief."), msg("user", "Hi")};
  p.mode = ThinkMode::kNoThink;
  EXPECT_EQ(render(p), kBos + "Be brief." + kUser + "Hi" + kAsst + "</think>");
  p.mode = ThinkMode::kThink;
  EXPECT_EQ(render(p), kBos + "Be brief." + kUser + "Hi" + kAsst + "<think>");
  p.mode = ThinkMode::kThinkMax;
  const std::string s = render(p);
  EXPECT_TRUE(s.starts_with(kBos + "Reasoning Effort: Absolute maximum")) << s;
  EXPECT_TRUE(s.ends_with("\n\nBe brief." + kUser + "Hi" + kAsst + "<think>")) << s;
}

TEST(RenderChat, HistoryEndsWithEosAndDropsOldReasoning) {
  ChatPrompt p;
  p.messages = {msg("system", "A"), msg("system", "B"), msg("user", "q1"), msg("assistant", "a1", "r1"),
                msg("user", "q2")};
  p.mode = ThinkMode::kThink;
  // Thinking without tools: history before the last user message gets </think> only, and
  // consecutive system messages are written back to back (V4 encoding).
  EXPECT_EQ(render(p), kBos + "AB" + kUser + "q1" + kAsst + "</think>a1" + kEos + kUser + "q2" + kAsst + "<think>");
}

TEST(RenderChat, ToolsToolCallsAndResults) {
  ChatPrompt p;
  p.tools = {{"get_weather", "Weather now", R"({"type":"object","properties":{"city":{"type":"string"}}})"}};
  p.messages = {msg("user", "Weather in Rome?"),
                msg("assistant", "", "need data",
                    {{"call_1", "get_weather", R"({"city":"Rome","days":2})"}, {"call_2", "get_time", "{}"}}),
                msg("tool", "late", "", {}, "call_2"), msg("tool", "sunny", "", {}, "call_1")};
  p.mode = ThinkMode::kThink;
  const std::string s = render(p);
  // No system message: one is inserted to carry the tools block.
  EXPECT_EQ(s.find(kBos + "\n\n## Tools"), 0u) << s;
  EXPECT_NE(s.find(R"({"name": "get_weather", "description": "Weather now", "parameters": {)"), std::string::npos) << s;
  // Tools present: reasoning is kept in the history.
  const std::string call = kAsst + "<think>need data</think>\n\n" + dsml_tag("tool_calls") + ">\n" +
                           dsml_tag("invoke") + " name=\"get_weather\">\n" + dsml_tag("parameter") +
                           " name=\"city\" string=\"true\">Rome" + dsml_close_tag("parameter") + "\n" +
                           dsml_tag("parameter") + " name=\"days\" string=\"false\">2" +
                           dsml_close_tag("parameter") + "\n" + dsml_close_tag("invoke") + "\n";
  EXPECT_NE(s.find(call), std::string::npos) << s;
  // Results merged under one user turn, in the order of the calls.
  EXPECT_TRUE(s.ends_with(kEos + kUser + "<tool_result>sunny</tool_result>\n\n<tool_result>late</tool_result>" +
                          kAsst + "<think>"))
      << s;
  p.tool_choice = "none";
  EXPECT_EQ(render(p).find("## Tools"), std::string::npos);
}

TEST(RenderChat, BadToolsJsonIsAnError) {
  std::vector<ChatMessage> m = {msg("system", "s"), msg("user", "u")};
  m[0].tools_json = "[{";
  EXPECT_FALSE(TextCodec::try_render_chat(m, ThinkMode::kThink).ok());
}

TEST(Dsml, ParsesWhatItRenders) {
  const std::vector<ChatToolCall> calls = {{"a", "f", R"({"s":"x <y> \"z\"","n":1.5,"o":{"k":[1,2]},"b":true})"},
                                       {"b", "g", "{}"}};
  const std::string block = rendered_calls(calls);
  OutputParser parser(false, true, {}, "id_");
  OutputDelta d;
  EXPECT_FALSE(parser.push("Sure." + block + " done", &d));
  parser.finish(&d);
  EXPECT_EQ(d.content, "Sure. done");  // the "\n\n" before a V4 block is part of the block
  ASSERT_EQ(d.tool_calls.size(), 2u);
  EXPECT_EQ(d.tool_calls[0].name, "f");
  EXPECT_EQ(json::parse(d.tool_calls[0].arguments), json::parse(calls[0].arguments));
  EXPECT_EQ(d.tool_calls[0].id, "id_0");
  EXPECT_EQ(d.tool_calls[1].name, "g");
  EXPECT_EQ(d.tool_calls[1].arguments, "{}");
  EXPECT_TRUE(d.tool_error.empty());
}

TEST(Dsml, StreamedOneByteAtATimeGivesTheSameCalls) {
  const std::vector<ChatToolCall> calls = {{"a", "search", R"({"q":"ünïcode ok","limit":3})"}};
  const std::string text = "Let me look." + rendered_calls(calls) + "\nAfter.";
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

// Feeds text one byte at a time to a parser that streams tool arguments; returns every piece
// as emitted (unmerged) and the merged delta.
std::vector<ToolCallPart> stream_bytes(const std::string& text, OutputDelta* all) {
  OutputParser parser(false, true, {}, "c");
  parser.set_stream_tool_arguments(true);
  std::vector<ToolCallPart> pieces;
  for (size_t i = 0; i <= text.size(); ++i) {
    OutputDelta d;
    if (i < text.size()) parser.push(std::string_view(text).substr(i, 1), &d);
    else parser.finish(&d);
    pieces.insert(pieces.end(), d.tool_call_parts.begin(), d.tool_call_parts.end());
    all->append(d);
  }
  return pieces;
}

bool valid_utf8(const std::string& s) {
  return json(s).dump(-1, ' ', false, json::error_handler_t::replace).find("\xEF\xBF\xBD") == std::string::npos;
}

TEST(Dsml, StreamedArgumentsArriveInPiecesThatConcatenateToTheCall) {
  const std::vector<ChatToolCall> calls = {
      {"a", "search", R"({"q":"ünïcode \"quoted\" <tag> text that is long enough to arrive in many pieces","limit":3,"o":{"k":[1,2]}})"},
      {"b", "noop", "{}"}};
  const std::string text = "Let me look." + rendered_calls(calls) + "\nAfter.";
  OutputDelta all;
  const std::vector<ToolCallPart> pieces = stream_bytes(text, &all);
  EXPECT_EQ(all.content, "Let me look.\nAfter.");
  ASSERT_EQ(all.tool_calls.size(), 2u);
  EXPECT_TRUE(all.tool_error.empty()) << all.tool_error;
  for (int i = 0; i < 2; ++i) {
    std::string joined;
    int n = 0;
    for (const ToolCallPart& p : pieces) {
      if (p.index != i) continue;
      if (n++ == 0) {  // the first piece names the call
        EXPECT_EQ(p.id, all.tool_calls[i].id);
        EXPECT_EQ(p.name, all.tool_calls[i].name);
      } else {
        EXPECT_TRUE(p.id.empty() && p.name.empty());
      }
      EXPECT_TRUE(valid_utf8(p.arguments)) << "a piece splits a UTF-8 sequence: " << p.arguments;
      joined += p.arguments;
    }
    EXPECT_EQ(joined, all.tool_calls[i].arguments) << i;
    EXPECT_EQ(json::parse(joined), json::parse(calls[i].arguments)) << i;
    if (i == 0) {
      EXPECT_GT(n, 20) << "the string parameter was not streamed piecewise";
    }
  }
  // append() merged the continuation pieces: one part per call.
  ASSERT_EQ(all.tool_call_parts.size(), 2u);
  EXPECT_EQ(all.tool_call_parts[0].arguments, all.tool_calls[0].arguments);
  EXPECT_EQ(all.tool_call_parts[1].arguments, "{}");
}

TEST(Dsml, ArgumentsKeepTheGeneratedParameterOrder) {
  const std::string open = dsml_tag("tool_calls") + ">";
  const std::string inv = dsml_tag("invoke") + " name=\"f\">" + dsml_tag("parameter") + " name=\"z\" string=\"false\">1" +
                          dsml_close_tag("parameter") + dsml_tag("parameter") + " name=\"a\" string=\"true\">x" +
                          dsml_close_tag("parameter") + dsml_close_tag("invoke");
  OutputDelta all;
  stream_bytes(open + inv + dsml_close_tag("tool_calls"), &all);
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].arguments, R"({"z":1,"a":"x"})");
  std::string name, partial;
  ASSERT_TRUE(partial_dsml_arguments(inv.substr(0, inv.size() - 30), &name, &partial));
  EXPECT_EQ(name, "f");
  EXPECT_TRUE(all.tool_calls[0].arguments.starts_with(partial)) << partial;
}

TEST(Dsml, AStreamedCallThatTurnsOutMalformedKeepsItsIndex) {
  const std::string open = dsml_tag("tool_calls") + ">";
  auto param = [](const char* name, const char* is_string, const std::string& v) {
    return dsml_tag("parameter") + " name=\"" + name + "\" string=\"" + is_string + "\">" + v + dsml_close_tag("parameter");
  };
  const std::string bad = dsml_tag("invoke") + " name=\"f\">" + param("s", "true", "some text") +
                          param("x", "false", "{bad") + dsml_close_tag("invoke");
  const std::string twice = dsml_tag("invoke") + " name=\"g\">" + param("s", "true", "a") + param("s", "true", "b") +
                            dsml_close_tag("invoke");
  const std::string good = dsml_tag("invoke") + " name=\"h\">" + param("n", "false", "2") + dsml_close_tag("invoke");
  OutputDelta all;
  const std::vector<ToolCallPart> pieces = stream_bytes(open + bad + twice + good + dsml_close_tag("tool_calls"), &all);
  ASSERT_EQ(all.tool_calls.size(), 1u);
  EXPECT_EQ(all.tool_calls[0].name, "h");
  EXPECT_EQ(all.tool_calls[0].id, "c2");  // indices 0 and 1 went to the malformed calls
  EXPECT_NE(all.tool_error.find("is not valid JSON"), std::string::npos) << all.tool_error;
  EXPECT_NE(all.tool_error.find("given twice"), std::string::npos) << all.tool_error;
  ASSERT_FALSE(pieces.empty());
  EXPECT_EQ(pieces.front().index, 0);
  EXPECT_EQ(pieces.front().name, "f");
  EXPECT_EQ(pieces.back().index, 2);
  EXPECT_NE(all.content.find("{bad"), std::string::npos);  // the raw text is kept
}

TEST(Dsml, NoPiecesUnlessAsked) {
  const std::string text = rendered_calls({{"a", "f", R"({"s":"x"})"}});
  OutputParser parser(false, true, {}, "c");
  OutputDelta d;
  for (char c : text) parser.push(std::string_view(&c, 1), &d);
  parser.finish(&d);
  EXPECT_EQ(d.tool_calls.size(), 1u);
  EXPECT_TRUE(d.tool_call_parts.empty());
}

TEST(Dsml, MalformedBlocksAreReportedNotThrown) {
  const std::string open = dsml_tag("tool_calls") + ">";
  const std::vector<std::string> bad = {
      open + dsml_tag("invoke") + ">" + dsml_close_tag("invoke") + dsml_close_tag("tool_calls"),  // no name
      open + "garbage" + dsml_close_tag("tool_calls"),
      open + dsml_tag("invoke") + " name=\"f\">" + dsml_tag("parameter") + " name=\"x\" string=\"false\">{bad" +
          dsml_close_tag("parameter") + dsml_close_tag("invoke") + dsml_close_tag("tool_calls"),
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

TEST(Dsml, WhitespaceBeforeABlockIsHeldNotLost) {
  // Held while a block may follow, then released as content when none does.
  OutputParser parser(false, true, {}, "c");
  OutputDelta all, d1, d2, d3;
  parser.push("a\n\n", &d1);
  EXPECT_EQ(d1.content, "a");
  parser.push("b\n", &d2);
  parser.finish(&d3);
  all.append(d1);
  all.append(d2);
  all.append(d3);
  EXPECT_EQ(all.content, "a\n\nb\n");
  // A malformed block gives its raw text back to the content with the whitespace before it.
  OutputParser bad(false, true, {}, "c");
  OutputDelta e;
  const std::string block = dsml_tag("tool_calls") + ">garbage" + dsml_close_tag("tool_calls");
  bad.push("x\n\n" + block, &e);
  bad.finish(&e);
  EXPECT_EQ(e.content, "x\n\n" + block);
  EXPECT_FALSE(e.tool_error.empty());
}

TEST(Dsml, RandomTextNeverBreaksTheParser) {
  // Fragments of the DSML vocabulary in random order: any split into calls, content and errors
  // is allowed; a throw or crash is not, and text without calls or errors is kept byte for byte.
  const std::vector<std::string> pieces = {dsml_tag("tool_calls") + ">", dsml_close_tag("tool_calls"),
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
    parser.set_stream_tool_arguments(iter % 3 != 0);
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
    // Streamed pieces: each completed call's pieces (merged by append) are its arguments.
    for (const ChatToolCall& c : all.tool_calls) {
      if (iter % 3 == 0) break;
      const int index = std::stoi(c.id.substr(1));
      auto it = std::find_if(all.tool_call_parts.begin(), all.tool_call_parts.end(),
                             [&](const ToolCallPart& p) { return p.index == index; });
      ASSERT_NE(it, all.tool_call_parts.end()) << text;
      EXPECT_EQ(it->arguments, c.arguments) << text;
      EXPECT_EQ(it->name, c.name) << text;
    }
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
