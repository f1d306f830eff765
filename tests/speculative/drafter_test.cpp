// tests/speculative/drafter_test.cpp — support-file layout and validation errors, Markov tie-break,
// ring maintenance (gap resets, truncation, batch invariance) and the lazy proposal loop.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <cstdio>
#include <cstring>

#include "backend/backend.h"
#include "quant/quant.h"
#include "session/binding.h"
#include "speculative/drafter.h"
#include "speculative/drafter_gen.h"
#include "tests/speculative/spec_fixture.h"

namespace ds4::spec_test {
namespace {

using gguf::GgmlType;

std::string errors_of(const std::string& path, const model::ModelConfig& target) {
  auto f = gguf::File::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  if (!f.ok()) return "";
  std::string all;
  for (const std::string& e : speculative::validate_drafter(**f, target, nullptr)) all += e + "\n";
  return all;
}

std::string gen_and_validate(const std::string& stem, speculative::DrafterGenOptions opt) {
  if (opt.gate_up_type == GgmlType::kIQ2_XXS) opt.gate_up_type = GgmlType::kQ4_K;  // fast
  if (opt.down_type == GgmlType::kQ2_K) opt.down_type = GgmlType::kQ4_K;
  const std::string path = temp_path(stem);
  const Status st = speculative::generate_drafter(model::tiny_profile(), opt, path);
  EXPECT_TRUE(st.ok()) << st.to_string();
  return errors_of(path, model::tiny_profile());
}

TEST(DrafterWeights, FlashLayoutHas81Tensors) {
  speculative::DSparkConfig d;
  d.n_stages = 3;
  d.block_size = 5;
  d.markov_rank = 256;
  d.noise_token_id = 128799;
  d.target_layers = {40, 41, 42};
  const auto specs = speculative::drafter_tensor_specs(model::flash_profile(), d);
  ASSERT_EQ(specs.size(), 81u);
  auto find = [&](const std::string& n) -> const speculative::DTensorSpec* {
    for (const auto& s : specs)
      if (s.name == n) return &s;
    return nullptr;
  };
  ASSERT_TRUE(find("mtp.0.main_proj.weight"));
  EXPECT_EQ(find("mtp.0.main_proj.weight")->ne, (std::vector<int64_t>{12288, 4096}));
  EXPECT_EQ(find("mtp.2.markov_head.markov_w1.weight")->ne, (std::vector<int64_t>{256, 129280}));
  EXPECT_EQ(find("mtp.2.confidence_head.proj.weight")->ne, (std::vector<int64_t>{4352, 1}));
  EXPECT_EQ(find("mtp.1.ffn_down_exps.weight")->ne, (std::vector<int64_t>{2048, 4096, 256}));
  EXPECT_EQ(find("mtp.2.hc_head_fn.weight")->ne, (std::vector<int64_t>{16384, 4}));
  EXPECT_EQ(find("mtp.0.hc_attn_fn.weight")->ne, (std::vector<int64_t>{16384, 24}));
  EXPECT_EQ(find("mtp.0.attn_output_a.weight")->ne, (std::vector<int64_t>{4096, 8192}));
  EXPECT_TRUE(find("mtp.1.exp_probs_b.bias"));
  EXPECT_FALSE(find("mtp.0.hc_head_fn.weight"));
  EXPECT_FALSE(find("mtp.0.attn_compressor_kv.weight"));
}

TEST(DrafterWeights, GeneratedFileValidatesAndBinds) {
  const model::ModelConfig tiny = model::tiny_profile();
  const std::string path = tiny_drafter_path(3);
  EXPECT_EQ(errors_of(path, tiny), "");
  auto w = speculative::open_drafter_weights(path, tiny);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  const speculative::DSparkConfig& c = (*w)->config;
  EXPECT_EQ(c.n_stages, 3);
  EXPECT_EQ(c.block_size, 5);
  EXPECT_EQ(c.markov_rank, 64);
  EXPECT_EQ(c.noise_token_id, static_cast<int32_t>(tiny.n_vocab) - 2);
  EXPECT_EQ(c.target_layers, (std::vector<int>{5, 6, 7}));
  EXPECT_EQ(c.window, static_cast<int>(tiny.n_swa));
  EXPECT_EQ((*w)->n_tensors, 81u);
  EXPECT_TRUE((*w)->owned.empty());  // all mmapped (no BF16 / non-F32 vectors)
}

TEST(DrafterWeights, ValidationErrorsNameTheTensor) {
  speculative::DrafterGenOptions opt;
  opt.seed = 1;
  opt.mutate = [](speculative::DTensorSpec& s, GgmlType& t) {
    if (s.name == "mtp.1.attn_kv.weight") s.ne = {256, 256};
    if (s.name == "mtp.0.ffn_down_exps.weight") t = GgmlType::kQ8_0;
    if (s.name == "mtp.2.hc_head_fn.weight") t = GgmlType::kQ8_0;
    return s.name != "mtp.2.exp_probs_b.bias";
  };
  opt.extra_tensors = {{"mtp.1.attn_compressor_kv.weight", {256, 128}}, {"other.tool.tensor", {4}}};
  const std::string e = gen_and_validate("bad_layout", opt);
  EXPECT_NE(e.find("tensor 'mtp.1.attn_kv.weight': shape expected [256, 128], got [256, 256]"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'mtp.0.ffn_down_exps.weight': type expected iq2_xxs|q2_K|q4_K, got q8_0"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'mtp.2.hc_head_fn.weight': type expected f16|f32|bf16, got q8_0"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'mtp.2.exp_probs_b.bias': missing"), std::string::npos) << e;
  EXPECT_NE(e.find("tensor 'mtp.1.attn_compressor_kv.weight': unexpected"), std::string::npos) << e;
  EXPECT_EQ(e.find("other.tool.tensor"), std::string::npos) << "non-mtp tensors are ignored";

  auto bad = speculative::open_drafter_weights(temp_path("bad_layout"), model::tiny_profile());
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("mtp.1.attn_kv.weight"), std::string::npos);
}

TEST(DrafterWeights, MetadataAndTargetMismatch) {
  {
    speculative::DrafterGenOptions opt;
    opt.target_layers = {6, 5};
    opt.noise_token_id = 9000;
    const std::string e = gen_and_validate("bad_meta", opt);
    EXPECT_NE(e.find("strictly increasing"), std::string::npos) << e;
    EXPECT_NE(e.find("noise_token_id: expected < target vocab 8192, got 9000"), std::string::npos) << e;
  }
  {
    speculative::DrafterGenOptions opt;
    opt.target_layers = {5, 8};
    const std::string e = gen_and_validate("bad_layer", opt);
    EXPECT_NE(e.find("expected a target layer in [0, 8), got 8"), std::string::npos) << e;
  }
  {
    speculative::DrafterGenOptions opt;
    opt.gate_up_type = GgmlType::kQ2_K;
    opt.mutate = [](speculative::DTensorSpec& s, GgmlType& t) {
      if (s.name == "mtp.2.ffn_up_exps.weight") t = GgmlType::kIQ2_XXS;
      return true;
    };
    const std::string e = gen_and_validate("bad_up", opt);
    EXPECT_NE(e.find("tensor 'mtp.2.ffn_up_exps.weight': type expected q2_K (same as gate), got iq2_xxs"),
              std::string::npos)
        << e;
  }
  // A tiny drafter against the Flash target: shapes derive from the target, so they differ.
  const std::string e = errors_of(tiny_drafter_path(3), model::flash_profile());
  EXPECT_NE(e.find("tensor 'mtp.0.main_proj.weight': shape expected [12288, 4096], got [768, 256]"), std::string::npos)
      << e;
}

TEST(DrafterWeights, Bf16HeadsIq2AndQ4ExpertsAccepted) {
  speculative::DrafterGenOptions opt;
  opt.seed = 4;
  opt.dense_type = GgmlType::kBF16;
  opt.hc_fn_type = GgmlType::kBF16;
  opt.gate_up_type = GgmlType::kIQ2_XXS;
  opt.down_type = GgmlType::kQ4_K;
  const std::string path = temp_path("bf16");
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), opt, path).ok());
  Stack st = Stack::open(7);
  auto d = speculative::load_drafter(*st.model, *st.backend, path);
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_FALSE((*d)->weights().owned.empty());
  EXPECT_EQ((*d)->weights().markov_w1.type, GgmlType::kF32);  // converted copy
  // It runs: one committed row, one proposal.
  std::vector<float> h((*d)->capture_width(), 0.25f);
  (*d)->commit_rows(0, 1, h.data());
  speculative::Proposal p;
  (*d)->propose(3, 1, 5, {}, &p);
  EXPECT_EQ(p.n, 5);
}

std::vector<uint8_t> file_bytes(const std::string& path) {
  std::vector<uint8_t> b;
  FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) return b;
  uint8_t buf[65536];
  for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) b.insert(b.end(), buf, buf + n);
  std::fclose(f);
  return b;
}

TEST(DrafterGen, DeterministicPerSeed) {
  speculative::DrafterGenOptions opt;
  opt.gate_up_type = GgmlType::kQ4_K;
  opt.down_type = GgmlType::kQ4_K;
  opt.seed = 11;
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), opt, temp_path("det_a")).ok());
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), opt, temp_path("det_b")).ok());
  opt.seed = 12;
  ASSERT_TRUE(speculative::generate_drafter(model::tiny_profile(), opt, temp_path("det_c")).ok());
  const auto a = file_bytes(temp_path("det_a")), b = file_bytes(temp_path("det_b")), c = file_bytes(temp_path("det_c"));
  ASSERT_GT(a.size(), 1000u);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
}

// --fill random (the Flash-width drafter of the GPU sweep): the same bytes for the same seed
// whatever the thread count, other bytes for another seed, a file that validates and runs, and
// dequantized expert rows at the spec's RMS. Auto picks quantize for tiny, random for Flash.
TEST(DrafterGen, RandomFillDeterministicValidAndAtTheSpecRms) {
  const model::ModelConfig tiny = model::tiny_profile();
  speculative::DrafterGenOptions opt;  // default types: IQ2_XXS gate/up, Q2_K down, Q8_0 dense
  opt.fill = speculative::DrafterFill::kRandomBlocks;
  opt.seed = 21;
  opt.threads = 1;
  ASSERT_TRUE(speculative::generate_drafter(tiny, opt, temp_path("rnd_a")).ok());
  opt.threads = 3;
  ASSERT_TRUE(speculative::generate_drafter(tiny, opt, temp_path("rnd_b")).ok());
  opt.seed = 22;
  ASSERT_TRUE(speculative::generate_drafter(tiny, opt, temp_path("rnd_c")).ok());
  const auto a = file_bytes(temp_path("rnd_a")), b = file_bytes(temp_path("rnd_b")), c = file_bytes(temp_path("rnd_c"));
  ASSERT_GT(a.size(), 100000u);
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), c.size());
  EXPECT_NE(a, c);
  EXPECT_EQ(errors_of(temp_path("rnd_a"), tiny), "");

  // Quantize mode: the same layout (size), other bytes; thread count does not matter either.
  opt.seed = 21;
  opt.fill = speculative::DrafterFill::kQuantize;
  opt.gate_up_type = GgmlType::kQ4_K;  // fast quantizers
  opt.down_type = GgmlType::kQ4_K;
  opt.threads = 1;
  ASSERT_TRUE(speculative::generate_drafter(tiny, opt, temp_path("qnt_a")).ok());
  opt.threads = 3;
  ASSERT_TRUE(speculative::generate_drafter(tiny, opt, temp_path("qnt_b")).ok());
  EXPECT_EQ(file_bytes(temp_path("qnt_a")), file_bytes(temp_path("qnt_b")));

  // RMS of dequantized rows vs init_std (fill_random_blocks targets it within a few %).
  auto f = gguf::File::open(temp_path("rnd_a"));
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const std::pair<const char*, double> checks[] = {
      {"mtp.0.ffn_gate_exps.weight", 1.0 / std::sqrt(static_cast<double>(tiny.n_embd))},   // IQ2_XXS
      {"mtp.1.ffn_down_exps.weight", 1.0 / std::sqrt(static_cast<double>(tiny.n_ff_exp))},  // Q2_K
      {"mtp.2.attn_q_b.weight", 1.0 / std::sqrt(static_cast<double>(tiny.q_lora_rank))},    // Q8_0
  };
  for (const auto& [name, want] : checks) {
    const gguf::TensorInfo* t = (*f)->find_tensor(name);
    ASSERT_NE(t, nullptr) << name;
    const int64_t ne0 = t->ne[0], rows = 64;
    std::vector<float> x(static_cast<size_t>(ne0 * rows));
    const uint64_t rb = quant::row_bytes(t->type, ne0);
    for (int64_t r = 0; r < rows; ++r) quant::dequantize_row(t->type, t->data + r * rb, x.data() + r * ne0, ne0);
    double ss = 0;
    for (float v : x) {
      ASSERT_TRUE(std::isfinite(v)) << name;
      ss += static_cast<double>(v) * v;
    }
    const double rms = std::sqrt(ss / static_cast<double>(x.size()));
    EXPECT_GT(rms, 0.7 * want) << name;
    EXPECT_LT(rms, 1.4 * want) << name;
  }

  // It loads and proposes.
  Stack st = Stack::open(7);
  auto d = speculative::load_drafter(*st.model, *st.backend, temp_path("rnd_a"));
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  std::vector<float> h((*d)->capture_width(), 0.25f);
  (*d)->commit_rows(0, 1, h.data());
  speculative::Proposal p;
  (*d)->propose(3, 1, 5, {}, &p);
  EXPECT_EQ(p.n, 5);

  speculative::DrafterGenOptions autoopt;
  EXPECT_EQ(speculative::resolved_fill(tiny, autoopt), speculative::DrafterFill::kQuantize);
  EXPECT_EQ(speculative::resolved_fill(model::flash_profile(), autoopt), speculative::DrafterFill::kRandomBlocks);
}

TEST(Markov, ArgmaxTiesGoToSmallestId) {
  const float u[6] = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f, 3.0f};
  EXPECT_EQ(speculative::markov_argmax(u, nullptr, 6), 1);
  const float b[6] = {2.0f, 0.0f, 1.0f, 0.0f, 4.0f, 0.5f};  // sums 3,3,3,3,3,3.5
  EXPECT_EQ(speculative::markov_argmax(u, b, 6), 5);
  const float b2[6] = {2.0f, 0.0f, 1.0f, 0.0f, 4.0f, 0.0f};  // all 3: first wins
  EXPECT_EQ(speculative::markov_argmax(u, b2, 6), 0);
  const float nan_first[3] = {NAN, 1.0f, 1.0f};
  EXPECT_EQ(speculative::markov_argmax(nan_first, nullptr, 3), 1);  // NaN never wins
}

// The drafter's chain step on the backend (Z = U + bias by `add`, then `argmax`) picks what
// markov_argmax picks: ties to the smallest id, NaN never wins, -inf rows give 0.
TEST(Markov, BackendAddArgmaxEqualsMarkovArgmax) {
  auto be = backend::make_cpu_backend(2);
  const int64_t V = 301;
  std::vector<float> u(V), b(V);
  for (int64_t i = 0; i < V; ++i) {
    u[i] = std::sin(0.7f * static_cast<float>(i));
    b[i] = std::cos(0.3f * static_cast<float>(i));
  }
  struct Case {
    const char* name;
    std::function<void(std::vector<float>&, std::vector<float>&)> edit;
  };
  const std::vector<Case> cases = {
      {"plain", [](auto&, auto&) {}},
      {"tie", [](auto& uu, auto& bb) { uu[40] = uu[250] = 9.0f; bb[40] = bb[250] = 1.0f; }},
      {"nan", [](auto& uu, auto&) { uu[0] = NAN; uu[7] = 50.0f; uu[3] = NAN; }},
      {"nan_bias", [](auto&, auto& bb) { bb[11] = NAN; bb[12] = 40.0f; }},
      {"all_neg_inf", [](auto& uu, auto& bb) { std::fill(uu.begin(), uu.end(), -INFINITY); std::fill(bb.begin(), bb.end(), 0.0f); }},
  };
  for (const Case& c : cases) {
    std::vector<float> uu = u, bb = b;
    c.edit(uu, bb);
    backend::Array<float> du(*be, V), db(*be, V);
    backend::Array<int32_t> id(*be, 1);
    be->upload(du.data(), uu.data(), du.bytes());
    be->upload(db.data(), bb.data(), db.bytes());
    be->add(backend::AddParams{du.data(), db.data(), du.data(), V});
    be->argmax(backend::ArgmaxParams{du.data(), V, V, 1, id.data()});
    int32_t got = -1;
    be->download(&got, id.data(), sizeof(got));
    EXPECT_EQ(got, speculative::markov_argmax(uu.data(), bb.data(), V)) << c.name;
  }
}

class DrafterTest : public SharedStackTest {
 protected:
  // Deterministic fake captures: row p = f(p).
  std::vector<float> hidden_rows(const speculative::Drafter& d, int64_t pos0, int n) {
    std::vector<float> h(static_cast<size_t>(n) * d.capture_width());
    for (int i = 0; i < n; ++i)
      for (int64_t j = 0; j < d.capture_width(); ++j)
        h[i * d.capture_width() + j] = std::sin(0.37f * static_cast<float>(pos0 + i) + 0.011f * static_cast<float>(j));
    return h;
  }
};

TEST_F(DrafterTest, RingBatchInvarianceGapAndTruncate) {
  auto a = stack_->drafter(3);
  auto b = stack_->drafter(3);
  ASSERT_TRUE(a && b);
  const int W = a->config().window;
  const int64_t D = stack_->model->config().head_dim;
  // a: 45 rows in one call (only the last W are computed); b: one by one.
  auto h = hidden_rows(*a, 0, 45);
  a->commit_rows(0, 45, h.data());
  for (int p = 0; p < 45; ++p) b->commit_rows(p, 1, h.data() + p * a->capture_width());
  EXPECT_EQ(a->ring_next(), 45);
  EXPECT_EQ(a->ring_start(), 45 - W);
  EXPECT_EQ(b->ring_start(), 45 - W);
  for (int st = 0; st < 3; ++st) {
    EXPECT_EQ(a->ring_row(st, 45 - W - 1), nullptr);
    for (int64_t p = 45 - W; p < 45; ++p) {
      ASSERT_TRUE(a->ring_row(st, p));
      ASSERT_EQ(0, std::memcmp(a->ring_row(st, p), b->ring_row(st, p), sizeof(float) * D)) << st << " " << p;
    }
  }
  // Same rings => same proposals.
  speculative::Proposal pa, pb;
  a->propose(11, 45, 5, {}, &pa);
  b->propose(11, 45, 5, {}, &pb);
  ASSERT_EQ(pa.n, 5);
  for (int k = 0; k < 5; ++k) EXPECT_EQ(pa.tokens[k], pb.tokens[k]);

  // Anchor position must equal ring_next.
  a->propose(11, 44, 5, {}, &pa);
  EXPECT_TRUE(pa.no_context);
  EXPECT_EQ(pa.n, 0);

  // Truncate (timeline went back): rows past the point disappear, earlier stay.
  a->ring_truncate(40);
  EXPECT_EQ(a->ring_next(), 40);
  EXPECT_EQ(a->ring_row(0, 40), nullptr);
  EXPECT_NE(a->ring_row(0, 39), nullptr);
  // Re-committing the same rows restores the same ring.
  a->commit_rows(40, 5, h.data() + 40 * a->capture_width());
  for (int64_t p = 45 - W; p < 45; ++p) ASSERT_EQ(0, std::memcmp(a->ring_row(1, p), b->ring_row(1, p), sizeof(float) * D));

  // Gap: a row past ring_next resets the ring to start there.
  auto g = hidden_rows(*a, 50, 1);
  a->commit_rows(50, 1, g.data());
  EXPECT_EQ(a->ring_start(), 50);
  EXPECT_EQ(a->ring_next(), 51);
  EXPECT_EQ(a->ring_row(0, 44), nullptr);
  // Ring rows are position-dependent (RoPE): the same capture at another position differs.
  auto c = stack_->drafter(3);
  c->commit_rows(51, 1, g.data());
  EXPECT_NE(0, std::memcmp(a->ring_row(0, 50), c->ring_row(0, 51), sizeof(float) * D));
}

TEST_F(DrafterTest, LazyLoopAndConfidenceThresholds) {
  auto d = stack_->drafter(3);
  ASSERT_TRUE(d);
  auto h = hidden_rows(*d, 0, 20);
  d->commit_rows(0, 20, h.data());
  const int V = static_cast<int>(stack_->model->config().n_vocab);
  speculative::Proposal full;
  d->propose(77, 20, 5, {}, &full);
  ASSERT_EQ(full.n, 5);
  float conf_logit[5];
  for (int k = 0; k < 5; ++k) {
    conf_logit[k] = d->last_conf_logit(k);
    EXPECT_FLOAT_EQ(full.conf[k], 1.0f / (1.0f + std::exp(-conf_logit[k])));
    // d_k is the first argmax of Z_k.
    std::span<const float> z = d->last_z(k);
    EXPECT_EQ(full.tokens[k], speculative::markov_argmax(z.data(), nullptr, V));
  }
  EXPECT_FLOAT_EQ(full.conf0, full.conf[0]);
  // Deterministic.
  speculative::Proposal again;
  d->propose(77, 20, 5, {}, &again);
  for (int k = 0; k < 5; ++k) {
    EXPECT_EQ(again.tokens[k], full.tokens[k]);
    EXPECT_EQ(again.conf[k], full.conf[k]);
  }
  // n_max caps the chain; the prefix is the same.
  speculative::Proposal two;
  d->propose(77, 20, 2, {}, &two);
  ASSERT_EQ(two.n, 2);
  EXPECT_EQ(two.tokens[1], full.tokens[1]);
  // The chain stops at the first position below its threshold (last value extends).
  for (int j = 1; j < 5; ++j) {
    std::vector<float> thr(j + 1, 0.0f);
    thr[j] = std::nextafter(full.conf[j], 2.0f);
    speculative::Proposal p;
    d->propose(77, 20, 5, thr, &p);
    EXPECT_EQ(p.n, j) << "threshold at position " << j;
    for (int k = 0; k < p.n; ++k) EXPECT_EQ(p.tokens[k], full.tokens[k]);
  }
  // conf0 precheck: no vocab head, no drafts.
  const float thr0[1] = {std::nextafter(full.conf[0], 2.0f)};
  speculative::Proposal r;
  d->propose(77, 20, 5, thr0, &r);
  EXPECT_TRUE(r.conf0_rejected);
  EXPECT_EQ(r.n, 0);
  EXPECT_EQ(r.conf0, full.conf0);
  // The Markov bias depends on the previous token: another anchor changes Z_0.
  speculative::Proposal other;
  d->propose(78, 20, 1, {}, &other);
  std::vector<float> z78(d->last_z(0).begin(), d->last_z(0).end());
  d->propose(77, 20, 1, {}, &other);
  EXPECT_NE(0, std::memcmp(z78.data(), d->last_z(0).data(), sizeof(float) * V));
}

// The eager chain (device backends: every step run, one read-back) gives the lazy chain's
// proposal bit for bit: drafts, confidences, conf0 rejection and the stop at each threshold.
TEST_F(DrafterTest, EagerChainEqualsLazyChain) {
  auto lazy = stack_->drafter(3);
  auto eager = stack_->drafter(3);
  ASSERT_TRUE(lazy && eager);
  EXPECT_FALSE(lazy->eager_chain());  // the CPU backend reads lazily by default
  eager->set_eager_chain(true);
  auto h = hidden_rows(*lazy, 0, 20);
  lazy->commit_rows(0, 20, h.data());
  eager->commit_rows(0, 20, h.data());
  speculative::Proposal full;
  lazy->propose(77, 20, 5, {}, &full);
  ASSERT_EQ(full.n, 5);
  std::vector<std::vector<float>> thresholds = {{}, {0.0f}};
  for (int j = 0; j < 5; ++j) {  // stop (or conf0-reject) at each position in turn
    std::vector<float> thr(j + 1, 0.0f);
    thr[j] = std::nextafter(full.conf[j], 2.0f);
    thresholds.push_back(thr);
  }
  for (const std::vector<float>& thr : thresholds) {
    for (int n_max : {1, 3, 5}) {
      speculative::Proposal a, b;
      lazy->propose(77, 20, n_max, thr, &a);
      eager->propose(77, 20, n_max, thr, &b);
      const std::string what = "n_max " + std::to_string(n_max) + " thresholds " + std::to_string(thr.size());
      ASSERT_EQ(a.n, b.n) << what;
      EXPECT_EQ(a.conf0_rejected, b.conf0_rejected) << what;
      EXPECT_EQ(0, std::memcmp(&a.conf0, &b.conf0, sizeof(float))) << what;
      for (int k = 0; k < a.n; ++k) {
        EXPECT_EQ(a.tokens[k], b.tokens[k]) << what << " k " << k;
        EXPECT_EQ(0, std::memcmp(&a.conf[k], &b.conf[k], sizeof(float))) << what << " k " << k;
        EXPECT_EQ(0, std::memcmp(&a.conf, &b.conf, sizeof(float) * static_cast<size_t>(a.n))) << what;
      }
    }
  }
}

// A drafter over the target's BoundModel (the Engine's path: embedding and LM head from the
// target's binding) proposes exactly what the standalone drafter (its own binding) proposes.
TEST_F(DrafterTest, BoundTargetDrafterMatchesStandalone) {
  auto a = stack_->drafter(3);
  ASSERT_TRUE(a);
  auto bound = session::BoundModel::bind(*stack_->model, *stack_->backend);
  auto dm = speculative::load_drafter_model(*bound, tiny_drafter_path(3));
  ASSERT_TRUE(dm.ok()) << dm.status().to_string();
  speculative::Drafter b(**dm);
  auto h = hidden_rows(*a, 0, 20);
  a->commit_rows(0, 20, h.data());
  b.commit_rows(0, 20, h.data());
  for (int32_t anchor : {77, 3, 120}) {
    speculative::Proposal pa, pb;
    a->propose(anchor, 20, 5, {}, &pa);
    b.propose(anchor, 20, 5, {}, &pb);
    ASSERT_EQ(pa.n, pb.n);
    for (int k = 0; k < pa.n; ++k) {
      EXPECT_EQ(pa.tokens[k], pb.tokens[k]) << anchor << " " << k;
      EXPECT_EQ(0, std::memcmp(&pa.conf[k], &pb.conf[k], sizeof(float)));
    }
  }
}

}  // namespace
}  // namespace ds4::spec_test
