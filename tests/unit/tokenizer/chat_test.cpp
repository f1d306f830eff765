// Chat template tests (ds4-architecture.md §8.5): exact rendered strings, exact id sequences
// with the committed trained vocabulary (ids of the BPE spans produced by the Python oracle
// tools/tokenizer/ds4_bpe.py), think-mode resolution, and the incremental transcript.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "gguf/gguf.h"
#include "tokenizer/chat.h"
#include "tokenizer/tokenizer.h"

namespace ds4::tok {
namespace {

using Ids = std::vector<int32_t>;

const Tokenizer& trained() {
  static Tokenizer* tok = [] {
    auto file = gguf::File::open(std::string(DS4_SOURCE_DIR) + "/tests/tokenizer/tok2k.gguf");
    EXPECT_TRUE(file.ok()) << file.status().to_string();
    auto t = Tokenizer::from_gguf(**file);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return new Tokenizer(std::move(t).value());
  }();
  return *tok;
}

Ids cat(std::initializer_list<Ids> parts) {
  Ids out;
  for (const Ids& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

// Python oracle ids (tools/tokenizer/ds4_bpe.py with tests/tokenizer/tok2k.gguf).
const Ids kSystemIds = {96, 118, 124, 269, 305, 269, 39, 279, 115, 119, 839, 115, 269, 737, 122, 525, 123};  // "You are a helpful assistant"
const Ids kUserIds = {74, 300, 118, 51, 403, 481, 112, 70};  // "Ciao, come stai?"
constexpr int32_t kBos = 0, kEos = 1, kUser = 2, kAssistant = 3, kThinkOpen = 4, kThinkClose = 5;

TEST(ChatTemplate, ThinkMaxPrefixShape) {
  const std::string_view p = kThinkMaxPrefix;
  EXPECT_TRUE(p.starts_with("Reasoning Effort: Absolute maximum with no shortcuts permitted.\n"));
  EXPECT_TRUE(p.ends_with("no assumption is left unchecked.\n\n"));
  EXPECT_EQ(std::count(p.begin(), p.end(), '\n'), 4);
  EXPECT_EQ(p.find("  "), std::string_view::npos);
}

TEST(ChatTemplate, SinglePromptStrings) {
  EXPECT_EQ(render_prompt("You are a helpful assistant", "Ciao, come stai?", ThinkMode::kThink),
            "<｜begin▁of▁sentence｜>You are a helpful assistant<｜User｜>Ciao, come stai?"
            "<｜Assistant｜><think>");
  EXPECT_EQ(render_prompt("You are a helpful assistant", "Ciao, come stai?", ThinkMode::kNoThink),
            "<｜begin▁of▁sentence｜>You are a helpful assistant<｜User｜>Ciao, come stai?"
            "<｜Assistant｜></think>");
  EXPECT_EQ(render_prompt("", "hi", ThinkMode::kThinkMax),
            "<｜begin▁of▁sentence｜>" + std::string(kThinkMaxPrefix) +
                "<｜User｜>hi<｜Assistant｜><think>");
  EXPECT_EQ(generation_prefix(ThinkMode::kThinkMax), "<｜Assistant｜><think>");
}

TEST(ChatTemplate, SinglePromptIds) {
  const Tokenizer& t = trained();
  EXPECT_EQ(encode_prompt(t, kDefaultSystemPrompt, "Ciao, come stai?", ThinkMode::kThink),
            cat({{kBos}, kSystemIds, {kUser}, kUserIds, {kAssistant, kThinkOpen}}));
  EXPECT_EQ(encode_prompt(t, kDefaultSystemPrompt, "Ciao, come stai?", ThinkMode::kNoThink),
            cat({{kBos}, kSystemIds, {kUser}, kUserIds, {kAssistant, kThinkClose}}));
  // ThinkMax: the prefix text is BPE-encoded together with the system text (no marker).
  const Ids max = encode_prompt(t, kDefaultSystemPrompt, "Ciao, come stai?", ThinkMode::kThinkMax);
  const Ids first_line = {89, 108, 327, 268, 822, 488, 462, 283, 123, 65, 450, 105, 1919, 1540, 374,
                          127, 112, 1506, 116, 39, 126, 112, 123, 111, 603, 265, 111, 283, 123, 634,
                          123, 122, 312, 401, 510, 107, 591};  // "Reasoning Effort: ... permitted.\n"
  ASSERT_GT(max.size(), 1 + first_line.size());
  EXPECT_EQ(Ids(max.begin() + 1, max.begin() + 1 + first_line.size()), first_line);
  EXPECT_EQ(max, cat({{kBos}, t.encode(std::string(kThinkMaxPrefix) + std::string(kDefaultSystemPrompt)),
                      {kUser}, kUserIds, {kAssistant, kThinkOpen}}));
  EXPECT_EQ(max[0], kBos);
}

TEST(ChatTemplate, ThinkModeForContext) {
  EXPECT_EQ(think_mode_for_context(ThinkMode::kThinkMax, 393215), ThinkMode::kThink);
  EXPECT_EQ(think_mode_for_context(ThinkMode::kThinkMax, 393216), ThinkMode::kThinkMax);
  EXPECT_EQ(think_mode_for_context(ThinkMode::kThinkMax, 1 << 20), ThinkMode::kThinkMax);
  EXPECT_EQ(think_mode_for_context(ThinkMode::kNoThink, 1 << 20), ThinkMode::kNoThink);
  EXPECT_EQ(think_mode_for_context(ThinkMode::kThink, 16), ThinkMode::kThink);
}

TEST(ChatTemplate, ConversationFollowsTheV4Encoding) {
  // Roles as the V4 encoding writes them: developer is a user turn, a tool result is a
  // <tool_result> block under <｜User｜>, every assistant reply ends with EOS, and an assistant
  // message written with its reasoning in `reasoning` gets reasoning + </think> in thinking mode.
  Message think_reply{.role = "assistant", .content = "La promessa sposa.", .reasoning = "ragiono"};
  const std::vector<Message> msgs = {
      {.role = "system", .content = "Sei un assistente."},
      {.role = "user", .content = "Chi è Renzo?"},
      {.role = "assistant", .content = "Un filatore."},
      {.role = "developer", .content = "Rispondi in breve."},
      think_reply,
      {.role = "tool", .content = "42"},
  };
  auto s = render_chat(msgs, ThinkMode::kNoThink);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  EXPECT_EQ(*s,
            "<｜begin▁of▁sentence｜>Sei un assistente."
            "<｜User｜>Chi è Renzo?<｜Assistant｜></think>Un filatore.<｜end▁of▁sentence｜>"
            "<｜User｜>Rispondi in breve.<｜Assistant｜></think>La promessa sposa.<｜end▁of▁sentence｜>"
            "<｜User｜><tool_result>42</tool_result><｜Assistant｜></think>");
  auto t = render_chat(msgs, ThinkMode::kThink);
  ASSERT_TRUE(t.ok());
  // Thinking without tools: the developer turn before the last user-like message is dropped,
  // the reply after it keeps its reasoning, older replies get no think markers.
  EXPECT_EQ(*t,
            "<｜begin▁of▁sentence｜>Sei un assistente."
            "<｜User｜>Chi è Renzo?<｜Assistant｜></think>Un filatore.<｜end▁of▁sentence｜>"
            "La promessa sposa.<｜end▁of▁sentence｜>"
            "<｜User｜><tool_result>42</tool_result><｜Assistant｜><think>");
  const std::vector<Message> bad = {{.role = "robot", .content = "x"}};
  auto e = render_chat(bad, ThinkMode::kThink);
  ASSERT_FALSE(e.ok());
  EXPECT_NE(e.status().message().find("unknown role 'robot'"), std::string::npos);
}

TEST(ChatTranscript, IncrementalSuffixesEqualFullTokenization) {
  const Tokenizer& t = trained();
  ChatTranscript tr(t, std::string(kDefaultSystemPrompt), ThinkMode::kThink);
  Ids session;  // what a live KV state would hold
  auto add = [&](const Ids& ids) { session.insert(session.end(), ids.begin(), ids.end()); };

  const Ids s0 = tr.start();
  EXPECT_EQ(s0, cat({{kBos}, kSystemIds}));
  add(s0);
  const Ids s1 = tr.user_turn("Ciao, come stai?", ThinkMode::kThink);
  EXPECT_EQ(s1, cat({{kUser}, kUserIds, {kAssistant, kThinkOpen}}));
  add(s1);
  // The model "generates" a canonical reply (no EOS): the transcript appends EOS.
  const Ids gen1 = t.encode_rendered("penso</think>Bene, grazie.");
  add(gen1);
  const Ids s2 = tr.assistant_generated(gen1);
  EXPECT_EQ(s2, Ids{kEos});
  add(s2);
  // Second turn without thinking; this reply already ends with EOS.
  add(tr.user_turn("Renzo e Lucia", ThinkMode::kNoThink));
  Ids gen2 = t.encode("Sì.");
  gen2.push_back(kEos);
  add(gen2);
  EXPECT_TRUE(tr.assistant_generated(gen2).empty());

  EXPECT_EQ(tr.text(),
            "<｜begin▁of▁sentence｜>You are a helpful assistant"
            "<｜User｜>Ciao, come stai?<｜Assistant｜><think>penso</think>Bene, grazie."
            "<｜end▁of▁sentence｜>"
            "<｜User｜>Renzo e Lucia<｜Assistant｜></think>Sì.<｜end▁of▁sentence｜>");
  EXPECT_EQ(tr.tokens(), session);
  EXPECT_EQ(t.encode_rendered(tr.text()), session);
}

TEST(ChatTranscript, ThinkMaxPrefixOnlyAtStart) {
  const Tokenizer& t = trained();
  ChatTranscript tr(t, "", ThinkMode::kThinkMax);
  const Ids s0 = tr.start();
  EXPECT_EQ(s0, cat({{kBos}, t.encode(kThinkMaxPrefix)}));
  const Ids s1 = tr.user_turn("hi", ThinkMode::kThinkMax);
  EXPECT_EQ(s1, cat({{kUser}, t.encode("hi"), {kAssistant, kThinkOpen}}));
  EXPECT_EQ(tr.tokens(), encode_prompt(t, "", "hi", ThinkMode::kThinkMax));
}

TEST(ChatTranscript, FirstTurnStartsImplicitly) {
  const Tokenizer& t = trained();
  ChatTranscript tr(t, std::string(kDefaultSystemPrompt), ThinkMode::kNoThink);
  const Ids s = tr.user_turn("Ciao, come stai?", ThinkMode::kNoThink);
  EXPECT_EQ(s, cat({{kBos}, kSystemIds, {kUser}, kUserIds, {kAssistant, kThinkClose}}));
  EXPECT_TRUE(tr.started());
  EXPECT_TRUE(tr.start().empty());
  EXPECT_EQ(tr.tokens(), s);
}

}  // namespace
}  // namespace ds4::tok
