// tests/server/api_test.cpp — request validation of the OpenAI / Anthropic bodies (api.h):
// accepted shapes become the right ApiRequest, every rejected one throws ApiError with a
// 4xx status naming the field.
#include "server/api.h"

#include <gtest/gtest.h>

namespace ds4::server {
namespace {

using nlohmann::json;

ApiLimits limits() {
  ApiLimits l;
  l.model_names = {"ds4-tiny"};
  l.max_tokens = 100;
  l.n_ctx = 1024;
  l.n_vocab = 8192;
  return l;
}

int status_of(Api api, const std::string& body) {
  try {
    const json j = json::parse(body);
    if (api == Api::kChat) parse_chat_request(j, limits());
    else if (api == Api::kCompletion) parse_completion_request(j, limits());
    else parse_messages_request(j, limits());
  } catch (const ApiError& e) {
    EXPECT_FALSE(std::string(e.what()).empty());
    return e.status;
  }
  return 200;
}

TEST(ApiChat, Defaults) {
  const ApiRequest r = parse_chat_request(json::parse(R"({"messages":[{"role":"user","content":"hi"}]})"), limits());
  EXPECT_EQ(r.model, "ds4-tiny");
  EXPECT_EQ(r.max_tokens, 100);  // the cap is the default
  EXPECT_FALSE(r.stream);
  EXPECT_EQ(r.chat.mode, ThinkMode::kThink);
  EXPECT_EQ(r.top_logprobs, -1);
  ASSERT_EQ(r.chat.messages.size(), 1u);
  EXPECT_EQ(r.chat.messages[0].content, "hi");
}

TEST(ApiChat, FieldsAreRead) {
  const ApiRequest r = parse_chat_request(json::parse(R"({"model":"ds4-tiny","messages":[
      {"role":"system","content":[{"type":"text","text":"S"}]},{"role":"user","content":"q"}],
      "max_completion_tokens":1000,"temperature":0,"top_p":0.5,"top_k":7,"min_p":0.1,"seed":42,
      "stop":["a","b"],"logprobs":true,"top_logprobs":3,"stream":true,
      "stream_options":{"include_usage":true},"reasoning_effort":"none"})"), limits());
  EXPECT_EQ(r.max_tokens, 100);  // capped
  EXPECT_EQ(r.sampler.temperature, 0.0f);
  EXPECT_EQ(r.sampler.top_k, 7);
  EXPECT_EQ(r.sampler.seed, 42u);
  EXPECT_EQ(r.stops, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_TRUE(r.include_usage);
  EXPECT_EQ(r.chat.mode, ThinkMode::kNoThink);
  EXPECT_EQ(r.chat.messages[0].content, "S");
}

TEST(ApiChat, ThinkMaxFallsBackBelow384K) {
  const ApiRequest r = parse_chat_request(
      json::parse(R"({"messages":[{"role":"user","content":"q"}],"reasoning_effort":"max"})"), limits());
  EXPECT_EQ(r.chat.mode, ThinkMode::kThink);
}

TEST(ApiChat, Rejections) {
  const char* bad[] = {
      R"([])", R"("x")", R"({})", R"({"messages":[]})", R"({"messages":"hi"})",
      R"({"messages":[{"role":"robot","content":"x"}]})", R"({"messages":[{"role":"user","content":5}]})",
      R"({"messages":[{"role":"user","content":"x"}],"n":2})",
      R"({"messages":[{"role":"user","content":"x"}],"temperature":"hot"})",
      R"({"messages":[{"role":"user","content":"x"}],"temperature":3})",
      R"({"messages":[{"role":"user","content":"x"}],"top_p":-1})",
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":0})",
      R"({"messages":[{"role":"user","content":"x"}],"max_tokens":1.5})",
      R"({"messages":[{"role":"user","content":"x"}],"stop":5})",
      R"({"messages":[{"role":"user","content":"x"}],"stop":[""]})",
      R"({"messages":[{"role":"user","content":"x"}],"top_logprobs":2})",
      R"({"messages":[{"role":"user","content":"x"}],"logprobs":true,"top_logprobs":21})",
      R"({"messages":[{"role":"user","content":"x"}],"response_format":{"type":"json_object"}})",
      R"({"messages":[{"role":"user","content":"x"}],"tool_choice":"required"})",
      R"({"messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{}}]})",
      R"({"messages":[{"role":"user","content":"x"}],"reasoning_effort":"extreme"})",
      R"({"messages":[{"role":"user","content":"x"}],"stream":"yes"})",
      R"({"messages":[{"role":"user","content":"x"}],"presence_penalty":1})",
  };
  for (const char* b : bad) EXPECT_EQ(status_of(Api::kChat, b), 400) << b;
  EXPECT_EQ(status_of(Api::kChat, R"({"model":"gpt-4","messages":[{"role":"user","content":"x"}]})"), 404);
}

TEST(ApiCompletion, PromptForms) {
  EXPECT_EQ(parse_completion_request(json::parse(R"({"prompt":"abc"})"), limits()).prompt_text, "abc");
  EXPECT_EQ(parse_completion_request(json::parse(R"({"prompt":["abc"]})"), limits()).prompt_text, "abc");
  const ApiRequest ids = parse_completion_request(json::parse(R"({"prompt":[0,5,9]})"), limits());
  EXPECT_TRUE(ids.prompt_is_ids);
  EXPECT_EQ(ids.prompt_ids, (std::vector<int32_t>{0, 5, 9}));
  EXPECT_EQ(status_of(Api::kCompletion, R"({"prompt":["a","b"]})"), 400);
  EXPECT_EQ(status_of(Api::kCompletion, R"({"prompt":[8192]})"), 400);
  EXPECT_EQ(status_of(Api::kCompletion, R"({"prompt":""})"), 400);
  EXPECT_EQ(status_of(Api::kCompletion, R"({"prompt":"a","echo":true})"), 400);
  EXPECT_EQ(status_of(Api::kCompletion, R"({"prompt":"a","logprobs":6})"), 400);
}

TEST(ApiMessages, BlocksToolsAndThinking) {
  const ApiRequest r = parse_messages_request(json::parse(R"({"model":"ds4-tiny","max_tokens":5,
      "system":"sys","thinking":{"type":"enabled","budget_tokens":1024},
      "tools":[{"name":"f","input_schema":{"type":"object"}}],"tool_choice":{"type":"any"},
      "stop_sequences":["X"],
      "messages":[{"role":"user","content":"q"},
                  {"role":"assistant","content":[{"type":"thinking","thinking":"t"},
                     {"type":"tool_use","id":"tu1","name":"f","input":{"a":1}}]},
                  {"role":"user","content":[{"type":"tool_result","tool_use_id":"tu1","content":"r"}]}]})"),
                                              limits());
  EXPECT_EQ(r.chat.mode, ThinkMode::kThink);
  EXPECT_EQ(r.chat.tool_choice, "required");
  EXPECT_TRUE(r.tools_enabled);
  ASSERT_EQ(r.chat.messages.size(), 4u);
  EXPECT_EQ(r.chat.messages[0].role, "system");
  EXPECT_EQ(r.chat.messages[2].reasoning, "t");
  ASSERT_EQ(r.chat.messages[2].tool_calls.size(), 1u);
  EXPECT_EQ(r.chat.messages[2].tool_calls[0].arguments, R"({"a":1})");
  EXPECT_EQ(r.chat.messages[3].role, "tool");
  EXPECT_EQ(r.chat.messages[3].content, "r");
  EXPECT_EQ(r.stops, (std::vector<std::string>{"X"}));
}

TEST(ApiMessages, Rejections) {
  EXPECT_EQ(status_of(Api::kMessages, R"({"messages":[{"role":"user","content":"q"}]})"), 400);  // max_tokens
  EXPECT_EQ(status_of(Api::kMessages, R"({"max_tokens":5,"messages":[{"role":"system","content":"q"}]})"), 400);
  EXPECT_EQ(status_of(Api::kMessages, R"({"max_tokens":5,"temperature":1.5,"messages":[{"role":"user","content":"q"}]})"), 400);
  EXPECT_EQ(status_of(Api::kMessages,
                      R"({"max_tokens":5,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]})"), 400);
  EXPECT_EQ(status_of(Api::kMessages, R"({"max_tokens":5,"model":"claude","messages":[{"role":"user","content":"q"}]})"), 404);
}

}  // namespace
}  // namespace ds4::server
