// tests/gguf/make_corpus.cpp — writes the committed GGUF seed corpus from the case table in
// tests/unit/gguf/raw_gguf.h: bad_<name>.gguf for each malformed case, ok_<name>.gguf for each
// valid case. The unit test Corpus.MatchesCaseTableAndParsesAsNamed fails when the committed
// files are stale. Usage: gguf_make_corpus [DIR] (default: <repo>/tests/gguf/corpus).
#include <cstdio>
#include <string>

#include "raw_gguf.h"

static bool write_file(const std::string& path, const std::vector<uint8_t>& b) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) return false;
  const bool ok = std::fwrite(b.data(), 1, b.size(), f) == b.size();
  return std::fclose(f) == 0 && ok;
}

int main(int argc, char** argv) {
  const std::string dir = argc > 1 ? argv[1] : std::string(DS4_SOURCE_DIR) + "/tests/gguf/corpus";
  int n = 0;
  for (const auto& c : ds4::gguf::testing::malformed_cases()) {
    if (!write_file(dir + "/bad_" + c.name + ".gguf", c.bytes)) {
      std::fprintf(stderr, "cannot write %s/bad_%s.gguf\n", dir.c_str(), c.name.c_str());
      return 1;
    }
    ++n;
  }
  for (const auto& c : ds4::gguf::testing::valid_cases()) {
    if (!write_file(dir + "/ok_" + c.name + ".gguf", c.bytes)) {
      std::fprintf(stderr, "cannot write %s/ok_%s.gguf\n", dir.c_str(), c.name.c_str());
      return 1;
    }
    ++n;
  }
  std::printf("wrote %d files to %s\n", n, dir.c_str());
  return 0;
}
