// tests/model/state_file_test.cpp — the session-state file (engine/state_file.h) over a
// generated tiny model: export -> file -> import into another session (and another Engine
// over the same file, as after a restart) gives the same state bytes and logits, and decoding
// on continues bit-identically; a corrupt image (any flipped byte: header, tokens, payload,
// checksum), a truncated or padded file, another model, other numerics or another n_ctx are
// refused with an error and leave the session empty and usable; the header peek catches a
// truncation; atomic writes leave no temporary file behind.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "engine/engine.h"
#include "engine/engine_internal.h"
#include "engine/state_file.h"
#include "session/session.h"
#include "tests/model/tiny_model.h"

namespace ds4 {
namespace {

constexpr int kCtx = 320;
constexpr int kPrompt = 200;  // past the raw window (32) and one ratio-128 block

std::unique_ptr<Engine> open_engine(uint64_t seed, bool f32_act = false) {
  EngineOptions opt;
  opt.model_path = testing_tiny::tiny_model_path(model::ExpertQuant::kQ2, seed);
  opt.n_threads = 2;
  opt.f32_activations = f32_act;
  auto e = Engine::open(opt);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(e).value() : nullptr;
}

std::unique_ptr<Session> new_session(Engine& e, int n_ctx = kCtx) {
  auto s = e.new_session(n_ctx);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  return s.ok() ? std::move(s).value() : nullptr;
}

std::vector<uint8_t> state_of(Session& s) { return testing_tiny::state_bytes(*model_session(s)); }

int32_t argmax(std::span<const float> l) {
  return static_cast<int32_t>(std::max_element(l.begin(), l.end()) - l.begin());
}

// Both sessions decode the same greedy continuation; logits must match bit for bit each step.
void expect_same_continuation(Session& a, Session& b, int steps) {
  for (int i = 0; i < steps; ++i) {
    ASSERT_TRUE(testing_tiny::same_floats(a.logits(), b.logits())) << "step " << i;
    const int32_t t = argmax(a.logits());
    ASSERT_TRUE(a.decode(t).ok());
    ASSERT_TRUE(b.decode(t).ok());
  }
  EXPECT_EQ(state_of(a), state_of(b));
}

std::string temp_path(const char* name) { return ::testing::TempDir() + "ds4_state_" + name + kStateFileSuffix; }

class StateFile : public ::testing::Test {
 protected:
  void SetUp() override {
    engine_ = open_engine(7);
    ASSERT_TRUE(engine_);
    src_ = new_session(*engine_);
    ASSERT_TRUE(src_);
    prompt_ = testing_tiny::prompt_tokens(kPrompt, engine_->info().n_vocab, 5);
    ASSERT_TRUE(src_->prefill(prompt_).ok());
    ASSERT_TRUE(src_->export_state(&image_).ok());
  }
  // A refused image leaves the session empty, and it then prefills like a fresh one.
  void expect_refused(Session& s, std::span<const uint8_t> image, const char* what) {
    ASSERT_TRUE(s.prefill(std::span<const int32_t>(prompt_).first(3)).ok());
    const Status st = s.import_state(image);
    EXPECT_FALSE(st.ok()) << what;
    EXPECT_EQ(s.n_tokens(), 0) << what;
    EXPECT_TRUE(s.logits().empty()) << what;
  }

  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Session> src_;
  std::vector<int32_t> prompt_;
  std::vector<uint8_t> image_;
};

TEST_F(StateFile, RoundTripThroughAFileContinuesBitIdentically) {
  const std::string path = temp_path("roundtrip");
  ASSERT_TRUE(save_state_file(*src_, path).ok());
  auto dst = new_session(*engine_);
  ASSERT_TRUE(dst);
  ASSERT_TRUE(dst->prefill(std::span<const int32_t>(prompt_).first(7)).ok());  // overwritten by the load
  const Status st = load_state_file(*dst, path);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_EQ(dst->n_tokens(), kPrompt);
  EXPECT_TRUE(std::equal(prompt_.begin(), prompt_.end(), dst->tokens().begin()));
  EXPECT_EQ(state_of(*src_), state_of(*dst));
  expect_same_continuation(*src_, *dst, 40);  // crosses another raw window and compressions
  std::filesystem::remove(path);
}

TEST_F(StateFile, LoadsIntoAnotherEngineOverTheSameModel) {
  auto again = open_engine(7);  // a restarted server
  ASSERT_TRUE(again);
  EXPECT_EQ(again->info().model_id, engine_->info().model_id);
  auto dst = new_session(*again);
  ASSERT_TRUE(dst);
  ASSERT_TRUE(dst->import_state(image_).ok());
  // Its continuation equals the original engine's, and a prefill-from-scratch's.
  auto ref = new_session(*engine_);
  ASSERT_TRUE(ref->prefill(prompt_).ok());
  expect_same_continuation(*ref, *dst, 10);
}

TEST_F(StateFile, ARollbackAfterTheLoadReturnsToTheLoadedState) {
  auto dst = new_session(*engine_);
  ASSERT_TRUE(dst->import_state(image_).ok());
  const std::vector<uint8_t> loaded = state_of(*dst);
  ASSERT_TRUE(dst->decode(3).ok());
  dst->rollback();
  EXPECT_EQ(state_of(*dst), loaded);
}

TEST_F(StateFile, AnyFlippedByteIsRefused) {
  auto dst = new_session(*engine_);
  const size_t n = image_.size();
  // magic, version, model id, n_ctx, n_tokens, payload size, a token id, payload start/middle/end, checksum
  for (size_t off : {size_t{0}, size_t{8}, size_t{17}, size_t{25}, size_t{33}, size_t{41},
                     size_t{kStateHeaderBytes + 5}, size_t{kStateHeaderBytes + 4 * kPrompt + 3}, n / 2, n - 9, n - 1}) {
    std::vector<uint8_t> bad = image_;
    bad[off] ^= 0x10;
    expect_refused(*dst, bad, ("flipped byte " + std::to_string(off)).c_str());
  }
  // Still usable: the good image loads after all those refusals.
  ASSERT_TRUE(dst->import_state(image_).ok());
  EXPECT_EQ(state_of(*dst), state_of(*src_));
}

TEST_F(StateFile, TruncatedOrPaddedIsRefused) {
  auto dst = new_session(*engine_);
  for (size_t len : {size_t{0}, size_t{10}, size_t{kStateHeaderBytes}, image_.size() / 2, image_.size() - 1}) {
    expect_refused(*dst, std::span<const uint8_t>(image_).first(len), ("truncated to " + std::to_string(len)).c_str());
  }
  std::vector<uint8_t> padded = image_;
  padded.push_back(0);
  expect_refused(*dst, padded, "padded");
  // The header peek sees the truncation without reading the payload.
  const std::string path = temp_path("truncated");
  ASSERT_TRUE(write_file_atomic(path, std::span<const uint8_t>(image_).first(image_.size() - 100)).ok());
  EXPECT_FALSE(read_state_header(path).ok());
  ASSERT_TRUE(write_file_atomic(path, image_).ok());
  Expected<StateFileHeader> h = read_state_header(path);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  EXPECT_EQ(h->model_id, engine_->info().model_id);
  EXPECT_EQ(h->n_ctx, kCtx);
  EXPECT_EQ(h->tokens, prompt_);
  EXPECT_EQ(h->file_bytes, image_.size());
  std::filesystem::remove(path);
}

TEST_F(StateFile, ForeignStatesAreRefused) {
  // Another model (same shapes, other weights), other numerics, another context size.
  auto other = open_engine(8);
  ASSERT_TRUE(other);
  EXPECT_NE(other->info().model_id, engine_->info().model_id);
  auto s1 = new_session(*other);
  expect_refused(*s1, image_, "other model");
  auto f32 = open_engine(7, true);
  ASSERT_TRUE(f32);
  EXPECT_NE(f32->info().model_id, engine_->info().model_id);
  auto s2 = new_session(*f32);
  expect_refused(*s2, image_, "f32 activations");
  auto s3 = new_session(*engine_, kCtx + 64);
  expect_refused(*s3, image_, "other n_ctx");
  // A refused session then serves a normal prefill with the right result.
  ASSERT_TRUE(s3->prefill(prompt_).ok());
  auto ref = new_session(*engine_, kCtx + 64);
  ASSERT_TRUE(ref->prefill(prompt_).ok());
  EXPECT_TRUE(testing_tiny::same_floats(ref->logits(), s3->logits()));
}

TEST_F(StateFile, AnEmptySessionRoundTrips) {
  auto empty = new_session(*engine_);
  std::vector<uint8_t> img;
  ASSERT_TRUE(empty->export_state(&img).ok());
  auto dst = new_session(*engine_);
  ASSERT_TRUE(dst->prefill(prompt_).ok());
  ASSERT_TRUE(dst->import_state(img).ok());
  EXPECT_EQ(dst->n_tokens(), 0);
  EXPECT_EQ(state_of(*dst), state_of(*empty));
}

TEST(StateFileIo, AtomicWriteReplacesAndLeavesNoTemporary) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / "ds4_state_atomic";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "a.bin").string();
  const std::vector<uint8_t> one(1000, 1), two(10, 2);
  ASSERT_TRUE(write_file_atomic(path, one).ok());
  ASSERT_TRUE(write_file_atomic(path, two).ok());
  Expected<std::vector<uint8_t>> got = read_file_bytes(path);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, two);
  int files = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) files += e.is_regular_file() ? 1 : 0;
  EXPECT_EQ(files, 1);
  EXPECT_FALSE(write_file_atomic((dir / "missing" / "b.bin").string(), one).ok());
  std::filesystem::remove_all(dir);
}

TEST(StateFileIo, ChecksumSeesEveryByteAndTheLength) {
  std::vector<uint8_t> a(37, 0);
  const uint64_t h0 = state_checksum(a);
  for (size_t i = 0; i < a.size(); ++i) {
    std::vector<uint8_t> b = a;
    b[i] = 1;
    EXPECT_NE(state_checksum(b), h0) << i;
  }
  a.push_back(0);
  EXPECT_NE(state_checksum(a), h0);  // a zero byte appended still changes it
}

}  // namespace
}  // namespace ds4
