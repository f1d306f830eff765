// tests/server/disk_cache_test.cpp — server/disk_cache (--kv-cache-dir) on the bundled tiny
// model: saves become indexed entries found by longest prefix, the disk bound deletes the
// oldest first, a restart (a new DiskCache on the folder) finds them again, stray temporaries
// are removed, foreign / truncated / swapped files are ignored (counted, never loaded).
#include "server/disk_cache.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "engine/state_file.h"

namespace ds4::server {
namespace {

namespace fs = std::filesystem;
constexpr int kCtx = 256;

class DiskCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string model = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
    if (!fs::exists(model)) GTEST_SKIP() << "no bundled tiny model at " << model;
    EngineOptions o;
    o.model_path = model;
    o.n_threads = 1;
    auto e = Engine::open(o);
    ASSERT_TRUE(e.ok()) << e.status().to_string();
    engine_ = std::move(e).value();
    // One directory per test and process: ctest runs the tests of this fixture side by side.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::path(::testing::TempDir()) /
           ("ds4_disk_cache_test_" + std::string(info->name()) + "_" + std::to_string(::getpid()));
    fs::remove_all(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<int32_t> tokens(int n, int salt) const {
    std::vector<int32_t> t(n);
    for (int i = 0; i < n; ++i) t[i] = 10 + (i * 7 + salt * 13) % 500;
    return t;
  }
  std::unique_ptr<Session> prefilled(const std::vector<int32_t>& t) {
    auto s = engine_->new_session(kCtx);
    EXPECT_TRUE(s.ok());
    EXPECT_TRUE((*s)->prefill(t).ok());
    return std::move(s).value();
  }
  std::vector<std::string> files(const char* suffix) const {
    std::vector<std::string> out;
    for (const auto& e : fs::directory_iterator(dir_)) {
      if (e.path().string().ends_with(suffix)) out.push_back(e.path().string());
    }
    return out;
  }

  std::unique_ptr<Engine> engine_;
  fs::path dir_;
};

TEST_F(DiskCacheTest, SavesAreFoundByLongestPrefixAcrossARestart) {
  const std::vector<int32_t> a = tokens(40, 1);
  std::vector<int32_t> b(a.begin(), a.begin() + 20);  // a prefix of a
  {
    DiskCache dc(*engine_, dir_.string(), kCtx, uint64_t{1} << 30);
    ASSERT_TRUE(dc.open().ok());
    dc.save(*prefilled(a));
    dc.save(*prefilled(b));
    dc.close();  // writes what is queued
    EXPECT_EQ(dc.stats().saves, 2);
    EXPECT_TRUE(dc.contains(a));
  }
  std::ofstream(dir_ / ("x" + std::string(kStateFileSuffix) + ".1.2.tmp")) << "partial";
  DiskCache dc(*engine_, dir_.string(), kCtx, uint64_t{1} << 30);
  ASSERT_TRUE(dc.open().ok());
  EXPECT_TRUE(files(".tmp").empty()) << "a stray temporary survived open()";
  EXPECT_EQ(dc.stats().entries, 2);
  std::vector<int32_t> prompt = a;
  prompt.push_back(3);
  std::string path;
  EXPECT_EQ(dc.best_prefix(prompt, 0, &path), a.size());
  EXPECT_EQ(dc.best_prefix(prompt, a.size(), &path), 0u);      // nothing longer than the live one
  EXPECT_EQ(dc.best_prefix(a, 0, &path), b.size());            // must extend by >= 1 token
  auto s = engine_->new_session(kCtx);
  ASSERT_TRUE(dc.load(**s, path, a, b.size()));
  auto ref = prefilled(b);
  ASSERT_EQ((*s)->n_tokens(), ref->n_tokens());
  EXPECT_EQ(0, std::memcmp((*s)->logits().data(), ref->logits().data(), ref->logits().size_bytes()));
  EXPECT_EQ(dc.stats().loads, 1);
}

TEST_F(DiskCacheTest, TheDiskBoundDeletesTheOldestFirst) {
  std::vector<uint8_t> image;
  ASSERT_TRUE(prefilled(tokens(30, 0))->export_state(&image).ok());
  // Room for two files of this size, not three.
  DiskCache dc(*engine_, dir_.string(), kCtx, image.size() * 2 + image.size() / 2);
  ASSERT_TRUE(dc.open().ok());
  for (int salt = 1; salt <= 3; ++salt) dc.save(*prefilled(tokens(30, salt)));  // written in order
  dc.close();
  EXPECT_EQ(dc.stats().entries, 2);
  EXPECT_EQ(files(kStateFileSuffix).size(), 2u);
  std::string path;
  std::vector<int32_t> p1 = tokens(30, 1), p3 = tokens(30, 3);
  p1.push_back(1);
  p3.push_back(1);
  EXPECT_EQ(dc.best_prefix(p1, 0, &path), 0u) << "the oldest entry was kept";
  EXPECT_EQ(dc.best_prefix(p3, 0, &path), 30u);
}

TEST_F(DiskCacheTest, ForeignTruncatedAndSwappedFilesAreNeverLoaded) {
  const std::vector<int32_t> a = tokens(40, 4), b = tokens(40, 5);
  {
    DiskCache dc(*engine_, dir_.string(), kCtx, uint64_t{1} << 30);
    ASSERT_TRUE(dc.open().ok());
    dc.save(*prefilled(a));
    dc.save(*prefilled(b));
    dc.close();
  }
  std::vector<std::string> f = files(kStateFileSuffix);
  ASSERT_EQ(f.size(), 2u);
  // Another context size: ignored at open (counted), kept on disk.
  {
    DiskCache other(*engine_, dir_.string(), kCtx * 2, uint64_t{1} << 30);
    ASSERT_TRUE(other.open().ok());
    EXPECT_EQ(other.stats().entries, 0);
    EXPECT_EQ(other.stats().rejected, 2);
  }
  EXPECT_EQ(files(kStateFileSuffix).size(), 2u);
  // Truncate one; swap the other's bytes for a's after indexing (its tokens no longer match).
  DiskCache dc(*engine_, dir_.string(), kCtx, uint64_t{1} << 30);
  {
    Expected<std::vector<uint8_t>> bytes = read_file_bytes(f[0]);
    ASSERT_TRUE(bytes.ok());
    bytes->resize(bytes->size() - 1);
    ASSERT_TRUE(write_file_atomic(f[0], *bytes).ok());
  }
  ASSERT_TRUE(dc.open().ok());
  EXPECT_EQ(dc.stats().entries, 1);
  EXPECT_EQ(dc.stats().rejected, 1);
  const std::string& kept = f[1];
  Expected<StateFileHeader> h = read_state_header(kept);
  ASSERT_TRUE(h.ok());
  const std::vector<int32_t>& kept_tokens = h->tokens == a ? a : b;
  const std::vector<int32_t>& other_tokens = h->tokens == a ? b : a;
  std::vector<uint8_t> foreign;
  ASSERT_TRUE(prefilled(other_tokens)->export_state(&foreign).ok());
  ASSERT_TRUE(write_file_atomic(kept, foreign).ok());
  std::vector<int32_t> prompt = kept_tokens;
  prompt.push_back(1);
  std::string path;
  ASSERT_EQ(dc.best_prefix(prompt, 0, &path), kept_tokens.size());
  auto s = engine_->new_session(kCtx);
  EXPECT_FALSE(dc.load(**s, path, prompt, kept_tokens.size()));
  EXPECT_EQ((*s)->n_tokens(), 0);
  EXPECT_EQ(dc.stats().entries, 0);  // dropped from the index
  EXPECT_EQ(dc.stats().rejected, 2);
  EXPECT_EQ(dc.best_prefix(prompt, 0, &path), 0u);
}

}  // namespace
}  // namespace ds4::server
