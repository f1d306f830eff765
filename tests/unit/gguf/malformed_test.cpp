// tests/unit/gguf/malformed_test.cpp — every malformed-file class gives one clean error that
// names the problem; truncation at every byte and random corruption never crash; the
// committed seed corpus matches the case table and parses as expected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>

#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "raw_gguf.h"

namespace ds4::gguf {
namespace {

using testing::malformed_cases;
using testing::valid_cases;

class GgufMalformedFile : public ::testing::TestWithParam<testing::MalformedCase> {};

TEST_P(GgufMalformedFile, GivesOneNamedError) {
  const testing::MalformedCase& c = GetParam();
  Expected<std::unique_ptr<File>> f = File::from_bytes(c.bytes);
  ASSERT_FALSE(f.ok()) << c.name << " parsed but should fail";
  EXPECT_EQ(f.status().code(), c.code) << c.name << ": " << f.status().to_string();
  for (const std::string& s : c.expect) {
    EXPECT_NE(f.status().message().find(s), std::string::npos)
        << c.name << ": message '" << f.status().message() << "' lacks '" << s << "'";
  }
}

INSTANTIATE_TEST_SUITE_P(AllClasses, GgufMalformedFile, ::testing::ValuesIn(malformed_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(GgufMalformed, CaseNamesAreUnique) {
  std::set<std::string> names;
  for (const auto& c : malformed_cases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
  for (const auto& c : valid_cases()) EXPECT_TRUE(names.insert(c.name).second) << c.name;
}

TEST(GgufValidRaw, AllParse) {
  for (const auto& c : valid_cases()) {
    Expected<std::unique_ptr<File>> f = File::from_bytes(c.bytes);
    EXPECT_TRUE(f.ok()) << c.name << ": " << f.status().to_string();
  }
}

TEST(GgufValidRaw, SmallFileContents) {
  const std::vector<uint8_t> b = testing::small_valid_file();
  auto f = File::from_bytes(b);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->get_string("general.architecture").value(), "test");
  EXPECT_EQ((*f)->get_u32("test.n").value(), 7u);
  const TensorInfo* a = (*f)->find_tensor("a");
  ASSERT_NE(a, nullptr);
  float v[4];
  std::memcpy(v, a->data, sizeof v);
  EXPECT_EQ(v[3], 3.0f);
  // Directory ends at byte 164 (24 header + 66 metadata + 74 directory); data starts at the
  // next multiple of 32.
  EXPECT_EQ((*f)->data_offset(), 192u);
  EXPECT_EQ(a->data, b.data() + 192);
  EXPECT_EQ((*f)->find_tensor("b")->data, b.data() + 192 + 32);
}

// Every proper prefix of a valid file is an error, never a crash.
TEST(GgufMalformed, EveryTruncationFails) {
  Writer w;
  ASSERT_TRUE(w.set_string("k.s", "hello").ok());
  const std::vector<std::string> toks = {"a", "bc", ""};
  ASSERT_TRUE(w.set_array_string("k.toks", toks).ok());
  const std::vector<float> fs = {1.5f, -2.0f};
  ASSERT_TRUE(w.set_array_f32("k.f", fs).ok());
  std::vector<uint8_t> data(68, 7);
  ASSERT_TRUE(w.add_tensor("q", GgmlType::kQ8_0, {64}, data).ok());
  const std::string path = ::testing::TempDir() + "/trunc.gguf";
  ASSERT_TRUE(w.write(path).ok());
  std::ifstream in(path, std::ios::binary);
  std::vector<uint8_t> full((std::istreambuf_iterator<char>(in)), {});
  auto whole = File::from_bytes(full);
  ASSERT_TRUE(whole.ok());
  // The tail padding after the last tensor is optional; everything before its end is not.
  const TensorInfo& q = (*whole)->tensors().back();
  const size_t data_end = (*whole)->data_offset() + q.offset + q.nbytes;
  ASSERT_LT(data_end, full.size());
  for (size_t n = 0; n < full.size(); ++n) {
    std::vector<uint8_t> cut(full.begin(), full.begin() + n);  // exact-size heap copy (ASan)
    auto f = File::from_bytes(cut);
    if (n >= data_end) {
      EXPECT_TRUE(f.ok()) << n << ": " << f.status().to_string();
      continue;
    }
    ASSERT_FALSE(f.ok()) << "prefix of " << n << " bytes parsed";
    EXPECT_EQ(f.status().code(), ErrorCode::kCorrupt) << n << ": " << f.status().to_string();
  }
  std::filesystem::remove(path);
}

// Deterministic mini-fuzz: random byte edits of valid files parse or fail cleanly, and a
// successful parse keeps every tensor inside the buffer.
TEST(GgufMalformed, RandomCorruptionIsHandled) {
  std::mt19937_64 rng(1234);
  std::vector<std::vector<uint8_t>> seeds;
  for (const auto& c : valid_cases()) seeds.push_back(c.bytes);
  int parsed = 0;
  for (int it = 0; it < 4000; ++it) {
    std::vector<uint8_t> b = seeds[rng() % seeds.size()];
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits && !b.empty(); ++e) {
      const size_t at = rng() % b.size();
      switch (rng() % 3) {
        case 0: b[at] = static_cast<uint8_t>(rng()); break;
        case 1: b[at] ^= static_cast<uint8_t>(1u << (rng() % 8)); break;
        default: b.resize(at); break;
      }
    }
    auto f = File::from_bytes(b);
    if (!f.ok()) {
      EXPECT_FALSE(f.status().message().empty());
      continue;
    }
    ++parsed;
    for (const TensorInfo& t : (*f)->tensors()) {
      ASSERT_GE(t.data, b.data());
      ASSERT_LE(t.data + t.nbytes, b.data() + b.size()) << t.name;
    }
  }
  EXPECT_GT(parsed, 0);  // some edits (e.g. in tensor data) keep the file valid
}

std::vector<uint8_t> read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(in)), {});
}

// The committed corpus is exactly what tests/gguf/make_corpus writes from the case table, and
// every file in it behaves as its name says (bad_* fail cleanly, ok_* parse).
TEST(GgufCorpus, MatchesCaseTableAndParsesAsNamed) {
  const std::filesystem::path dir = std::filesystem::path(DS4_SOURCE_DIR) / "tests/gguf/corpus";
  ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir;
  for (const auto& c : malformed_cases()) {
    const auto p = dir / ("bad_" + c.name + ".gguf");
    ASSERT_TRUE(std::filesystem::exists(p)) << p << " missing: rerun gguf_make_corpus";
    EXPECT_EQ(read_file(p), c.bytes) << p << " is stale: rerun gguf_make_corpus";
  }
  for (const auto& c : valid_cases()) {
    const auto p = dir / ("ok_" + c.name + ".gguf");
    ASSERT_TRUE(std::filesystem::exists(p)) << p;
    EXPECT_EQ(read_file(p), c.bytes) << p << " is stale: rerun gguf_make_corpus";
  }
  int n_bad = 0, n_ok = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (e.path().extension() != ".gguf") continue;
    auto f = File::open(e.path().string());
    if (name.rfind("bad_", 0) == 0) {
      ++n_bad;
      ASSERT_FALSE(f.ok()) << name;
      const ErrorCode code = f.status().code();
      EXPECT_TRUE(code == ErrorCode::kCorrupt || code == ErrorCode::kUnsupported)
          << name << ": " << f.status().to_string();
      // File::open prefixes the path.
      EXPECT_NE(f.status().message().find(name), std::string::npos) << f.status().message();
    } else {
      ++n_ok;
      EXPECT_TRUE(f.ok()) << name << ": " << f.status().to_string();
    }
  }
  EXPECT_EQ(n_bad, static_cast<int>(malformed_cases().size()));
  EXPECT_GE(n_ok, static_cast<int>(valid_cases().size()));
}

TEST(GgufOpen, MissingFileIsNotFound) {
  auto f = File::open("/nonexistent/dir/x.gguf");
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(f.status().message().find("/nonexistent/dir/x.gguf"), std::string::npos);
}

TEST(GgufOpen, DirectoryIsRejected) {
  auto f = File::open(::testing::TempDir());
  ASSERT_FALSE(f.ok());
  EXPECT_EQ(f.status().code(), ErrorCode::kInvalidArgument);
}

}  // namespace
}  // namespace ds4::gguf
