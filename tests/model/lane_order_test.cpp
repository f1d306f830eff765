// tests/model/lane_order_test.cpp — the forward's lane forks (backend.h fork / to_main / join,
// session::LaneFork) hold only independent ops, proved on the CPU: a wrapper backend runs each
// fork's main lane FIRST and its side lane at the join (the reverse of the issue order the CPU
// otherwise uses). Were any side op to read what a main op writes, or the other way round, or
// both to write one buffer, the wrapped forward would read stale or overwritten scratch (the
// scratch holds the previous layer's values) and its logits or state would differ from the
// plain CPU forward's. A device running the lanes on two streams may interleave them in any
// order, so both orders must give the same bits. The wrapper also rejects what backend.h
// forbids inside a fork (nesting, copies, host round trips) and counts the lanes' ops, so the
// test cannot pass with no fork at all.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <utility>
#include <vector>

#include "tests/model/invariance_checks.h"

namespace ds4 {
namespace {

using testing_tiny::decode_reference;
using testing_tiny::prompt_tokens;
using testing_tiny::Reference;
using testing_tiny::same_floats;
using testing_tiny::Stack;
using testing_tiny::state_bytes;

class MainFirstBackend final : public backend::ForwardingBackend {
 public:
  explicit MainFirstBackend(std::unique_ptr<backend::Backend> inner)
      : ForwardingBackend(*inner), owned_(std::move(inner)) {}

  int forks = 0;
  int side_ops = 0;
  int main_ops = 0;
  int misuse = 0;  // calls backend.h forbids between fork and join

  void fork() override {
    if (state_ != kOut) ++misuse;
    state_ = kSide;
    ++forks;
  }
  void to_main() override {
    if (state_ != kSide) ++misuse;
    state_ = kMain;
  }
  void join() override {
    if (state_ == kOut) ++misuse;
    state_ = kOut;
    for (auto& f : deferred_) f();
    deferred_.clear();
  }

  void upload(void* dst, const void* src, size_t bytes) override {
    not_forked();
    inner_.upload(dst, src, bytes);
  }
  void download(void* dst, const void* src, size_t bytes) override {
    not_forked();
    inner_.download(dst, src, bytes);
  }
  void copy(void* dst, const void* src, size_t bytes) override {
    not_forked();
    inner_.copy(dst, src, bytes);
  }
  void copy_many(const backend::CopyRegion* regions, int n) override {
    not_forked();
    inner_.copy_many(regions, n);
  }
  void fill_f32(float* dst, size_t n, float value) override {
    not_forked();
    inner_.fill_f32(dst, n, value);
  }
  void fill_bytes(void* dst, size_t bytes, uint8_t value) override {
    not_forked();
    inner_.fill_bytes(dst, bytes, value);
  }
  void sync() override {
    not_forked();
    inner_.sync();
  }

  // Every op: deferred on the side lane (params copied: the caller's arrays are gone by the
  // join), run now otherwise.
  void matmul(const backend::MatmulParams& p) override {
    run([this, p] { inner_.matmul(p); });
  }
  void matmul_grouped(const backend::MatmulParams* p, int n) override {
    run([this, v = std::vector<backend::MatmulParams>(p, p + n)] {
      inner_.matmul_grouped(v.data(), static_cast<int>(v.size()));
    });
  }
  void rms_norm(const backend::RmsNormParams& p) override {
    run([this, p] { inner_.rms_norm(p); });
  }
  void hc_pre(const backend::HcPreParams& p) override {
    run([this, p] { inner_.hc_pre(p); });
  }
  void hc_post(const backend::HcPostParams& p) override {
    run([this, p] { inner_.hc_post(p); });
  }
  void attention_inputs(const backend::AttentionInputsParams& p) override {
    run([this, p] { inner_.attention_inputs(p); });
  }
  void compressor_step(const backend::CompressorStepParams& p) override {
    run([this, p] { inner_.compressor_step(p); });
  }
  void indexer_select(const backend::IndexerSelectParams* p, int n) override {
    run([this, v = std::vector<backend::IndexerSelectParams>(p, p + n)] {
      inner_.indexer_select(v.data(), static_cast<int>(v.size()));
    });
  }
  void sink_attention(const backend::SinkAttentionParams* p, int n) override {
    run([this, v = std::vector<backend::SinkAttentionParams>(p, p + n)] {
      inner_.sink_attention(v.data(), static_cast<int>(v.size()));
    });
  }
  void swiglu(const backend::SwigluParams& p) override {
    run([this, p] { inner_.swiglu(p); });
  }
  void route(const backend::RouteParams& p) override {
    run([this, p] { inner_.route(p); });
  }
  void moe(const backend::MoeParams& p) override {
    run([this, p] { inner_.moe(p); });
  }
  void hc_collapse(const backend::HcCollapseParams& p) override {
    run([this, p] { inner_.hc_collapse(p); });
  }
  void embed(const backend::EmbedParams& p) override {
    run([this, p] { inner_.embed(p); });
  }
  void add(const backend::AddParams& p) override {
    run([this, p] { inner_.add(p); });
  }
  void hc_mean(const backend::HcMeanParams& p) override {
    run([this, p] { inner_.hc_mean(p); });
  }
  void argmax(const backend::ArgmaxParams& p) override {
    run([this, p] { inner_.argmax(p); });
  }
  void top_k(const backend::TopKParams& p) override {
    run([this, p] { inner_.top_k(p); });
  }
  void get_rows(const backend::GetRowsParams& p) override {
    run([this, p] { inner_.get_rows(p); });
  }

 private:
  enum State { kOut, kSide, kMain };
  void not_forked() {
    if (state_ != kOut) ++misuse;
  }
  void run(std::function<void()> f) {
    if (state_ == kSide) {
      ++side_ops;
      deferred_.push_back(std::move(f));
      return;
    }
    if (state_ == kMain) ++main_ops;
    f();
  }

  std::unique_ptr<backend::Backend> owned_;
  State state_ = kOut;
  std::vector<std::function<void()>> deferred_;
};

constexpr int kCtx = 640;

// Prefill, verify rows (then rollback), decodes: the main-lane-first forward against plain decodes.
void check_main_first(model::ExpertQuant quant) {
  const Stack plain = Stack::open(quant, 7, 2);
  Stack swapped = Stack::open(quant, 7, 2);
  auto* mf = new MainFirstBackend(std::move(swapped.backend));
  swapped.backend.reset(mf);

  constexpr int kPrompt = 450, kRows = 6;
  const auto toks = prompt_tokens(kPrompt + kRows + 2, plain.model->config().n_vocab, 31);
  const Reference ref = decode_reference(plain, toks, {kPrompt, kPrompt + kRows}, kCtx);

  auto s = swapped.session(kCtx);
  ASSERT_TRUE(s->prefill(std::span<const int32_t>(toks).first(kPrompt)).ok());
  EXPECT_TRUE(same_floats(s->logits(), ref.logits[kPrompt - 1]));
  EXPECT_EQ(state_bytes(*s), ref.states[kPrompt]);
  s->checkpoint();
  auto res = s->verify(std::span<const int32_t>(toks).subspan(kPrompt, kRows));
  ASSERT_TRUE(res.ok()) << res.status().to_string();
  for (int i = 0; i < kRows; ++i) EXPECT_TRUE(same_floats((*res)[i].logits, ref.logits[kPrompt + i])) << "row " << i;
  EXPECT_EQ(state_bytes(*s), ref.states[kPrompt + kRows]);
  s->rollback();
  for (int i = 0; i < kRows + 2; ++i) {
    ASSERT_TRUE(s->decode(toks[kPrompt + i]).ok());
    EXPECT_TRUE(same_floats(s->logits(), ref.logits[kPrompt + i])) << "decode " << i;
  }
  // The forks happened, each lane held ops, and nothing backend.h forbids ran inside one.
  const int n_layer = static_cast<int>(plain.model->config().n_layer);
  EXPECT_GE(mf->forks, 2 * n_layer);  // the FFN's and the compressor layers' attention forks
  EXPECT_GT(mf->side_ops, 0);
  EXPECT_GT(mf->main_ops, 0);
  EXPECT_EQ(mf->misuse, 0);
}

TEST(LaneOrder, MainLaneFirstGivesTheSameBitsQ2) { check_main_first(model::ExpertQuant::kQ2); }
TEST(LaneOrder, MainLaneFirstGivesTheSameBitsQ4) { check_main_first(model::ExpertQuant::kQ4); }

}  // namespace
}  // namespace ds4
