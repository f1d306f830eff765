// speculative/config.cpp — parse_confidence_grid (see config.h).
#include "speculative/config.h"

#include <cstdlib>
#include <string>

#include "speculative/drafter_weights.h"

namespace ds4::speculative {

Status parse_confidence_grid(std::string_view text, std::vector<float>* out) {
  out->clear();
  std::string s(text);
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    char* end = nullptr;
    const float v = std::strtof(item.c_str(), &end);
    if (item.empty() || end != item.c_str() + item.size() || !(v >= 0.0f && v <= 1.0f)) {
      const size_t index = out->size() + 1;  // 1-based, as a person counts the items
      out->clear();
      return invalid_argument("confidence grid '%s': item %zu '%s' is not a number in [0, 1]",
                              s.c_str(), index, item.c_str());
    }
    out->push_back(v);
    if (out->size() > static_cast<size_t>(kMaxBlockSize)) {
      out->clear();
      return invalid_argument("confidence grid '%s': more than %d values", s.c_str(), kMaxBlockSize);
    }
    i = j + 1;
  }
  return Status();
}

}  // namespace ds4::speculative
