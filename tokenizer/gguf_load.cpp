// tokenizer/gguf_load.cpp — Tokenizer::from_gguf: reads the vocabulary from GGUF metadata.
//
// Keys: tokenizer.ggml.tokens (string array, required), tokenizer.ggml.merges (string array,
// required), tokenizer.ggml.token_type (int array, optional). All validation of the contents
// is Tokenizer::create's; this file only maps missing/mistyped keys to clear errors.
#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"

namespace ds4::tok {

Expected<Tokenizer> Tokenizer::from_gguf(const gguf::File& file) {
  constexpr const char* kTokens = "tokenizer.ggml.tokens";
  constexpr const char* kMerges = "tokenizer.ggml.merges";
  constexpr const char* kTypes = "tokenizer.ggml.token_type";
  if (!file.has(kTokens))
    return not_found("tokenizer: GGUF metadata key '%s' is missing", kTokens);
  if (!file.has(kMerges))
    return not_found("tokenizer: GGUF metadata key '%s' is missing", kMerges);
  auto tokens = file.get_array_string(kTokens);
  if (!tokens.ok()) return tokens.status();
  auto merges = file.get_array_string(kMerges);
  if (!merges.ok()) return merges.status();
  std::vector<int32_t> types;
  if (file.has(kTypes)) {
    auto t = file.get_array_i32(kTypes);
    if (!t.ok()) return t.status();
    types = std::move(t).value();
  }
  return create(std::move(tokens).value(), std::move(merges).value(), std::move(types));
}

}  // namespace ds4::tok
