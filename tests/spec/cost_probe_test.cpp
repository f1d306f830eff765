// tests/spec/cost_probe_test.cpp — measures the per-backend cost parameters of the DSpark cost
// gate (spec/runtime.h, --dspark-cost-*) on the shipped tiny models: verify(n) for n = 1..8,
// one proposal (full chain, and stopped by the conf0 precheck) and the drafter's context-row
// ingestion (rows committed one at a time and in one batch), all in units of one decode(1).
//
// DISABLED by default (it measures wall time; the suite asserts no timings). Run with
//   build/tests/test_spec --gtest_also_run_disabled_tests --gtest_filter='*CostProbe*'
// Env: DS4_COST_PROBE_THREADS (2), DS4_COST_PROBE_REPS (40; interleaved, the median is kept).
// Prints a table and the fitted verify(n) ~ base + row * n (least squares over n = 2..6).
// The only assertions are correctness ones (each verify row's argmax equals a decode's).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "core/flags.h"
#include "core/timer.h"
#include "spec/runtime.h"
#include "tests/spec/spec_fixture.h"

namespace ds4::spec_test {
namespace {

int probe_env_int(const char* name, int def) {
  const std::optional<std::string> v = ds4::process_env()(name);
  return v && !v->empty() ? std::atoi(v->c_str()) : def;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

double lowest(const std::vector<double>& v) { return v.empty() ? 0.0 : *std::min_element(v.begin(), v.end()); }

TEST(CostProbe, DISABLED_MeasureCpuCosts) {
  const std::string target = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny.gguf";
  const std::string dpath = std::string(DS4_SOURCE_DIR) + "/models/ds4-tiny-dspark.gguf";
  if (!std::filesystem::exists(target) || !std::filesystem::exists(dpath)) GTEST_SKIP() << "shipped models missing";
  const int threads = probe_env_int("DS4_COST_PROBE_THREADS", 2);
  const int reps = probe_env_int("DS4_COST_PROBE_REPS", 40);
  auto m = model::Model::open(target);
  ASSERT_TRUE(m.ok());
  auto be = backend::make_cpu_backend(threads);
  auto d = spec::load_drafter(**m, *be, dpath);
  ASSERT_TRUE(d.ok());
  spec::Drafter& dr = **d;
  const uint32_t V = (*m)->config().n_vocab;
  const std::vector<int32_t> prompt = prompt_tokens(100, V, 3);
  auto sr = session::ModelSession::create(**m, *be, 512, uint64_t{1} << 34);
  ASSERT_TRUE(sr.ok());
  session::ModelSession& s = **sr;
  const std::vector<int> layers = dr.config().target_layers;
  s.set_capture_layers(layers);
  const int64_t cw = dr.capture_width();
  std::vector<float> caps;  // [pos, cw] captured rows of the prompt
  s.set_capture_sink([&](int64_t pos, std::span<const float> h) {
    if (static_cast<int64_t>(caps.size()) < (pos + 1) * cw) caps.resize(static_cast<size_t>((pos + 1) * cw));
    std::copy(h.begin(), h.end(), caps.begin() + pos * cw);
  });
  ASSERT_TRUE(s.prefill(prompt).ok());
  const int32_t seed = choose(s.logits(), -1);
  const int64_t L = s.n_tokens();
  dr.commit_rows(0, static_cast<int>(L), caps.data());

  constexpr int kMaxN = 8;
  std::vector<double> t_dec, t_ver[kMaxN + 1], t_prop_full, t_prop_rej, t_row1, t_row32, t_pair_full, t_pair_rej;
  int32_t rows[kMaxN];  // the greedy continuation (realistic expert routing), then back
  s.checkpoint();
  for (int k = 0; k < kMaxN; ++k) {
    rows[k] = k == 0 ? seed : choose(s.logits(), -1);
    ASSERT_TRUE(s.decode(rows[k]).ok());
  }
  s.rollback();
  const float thr_all[spec::kMaxBlockSize] = {};
  float thr_rej[spec::kMaxBlockSize];
  std::fill(thr_rej, thr_rej + spec::kMaxBlockSize, 1.01f);
  spec::Proposal p;
  for (int r = 0; r < reps; ++r) {
    {  // decode(1), then back
      s.checkpoint();
      Timer t;
      ASSERT_TRUE(s.decode(seed).ok());
      t_dec.push_back(t.seconds());
      s.rollback();
    }
    for (int n = 1; n <= kMaxN; ++n) {
      s.checkpoint();
      Timer t;
      auto res = s.verify(std::span<const int32_t>(rows, n));
      t_ver[n].push_back(t.seconds());
      ASSERT_TRUE(res.ok());
      s.rollback();
    }
    {
      Timer t;
      dr.propose(seed, L, dr.config().block_size, std::span<const float>(thr_all, dr.config().block_size), &p);
      t_prop_full.push_back(t.seconds());
      ASSERT_EQ(p.n, dr.config().block_size);
    }
    {
      Timer t;
      dr.propose(seed, L, dr.config().block_size, std::span<const float>(thr_rej, dr.config().block_size), &p);
      t_prop_rej.push_back(t.seconds());
      ASSERT_TRUE(p.conf0_rejected);
    }
    // Overlap (spec/runtime.h): decode(1) and a proposal as one Backend::run_pair, then back.
    for (int rej = 0; rej < 2; ++rej) {
      struct Pair {
        session::ModelSession* s;
        spec::Drafter* d;
        int32_t seed;
        int64_t L;
        const float* thr;
        spec::Proposal* p;
        bool ok = false;
      } q{&s, &dr, seed, L, rej ? thr_rej : thr_all, &p};
      const backend::Task dec_task{[](void* c) {
                                     auto* x = static_cast<Pair*>(c);
                                     x->ok = x->s->decode(x->seed).ok();
                                   },
                                   &q};
      const backend::Task prop_task{[](void* c) {
                                      auto* x = static_cast<Pair*>(c);
                                      const int b = x->d->config().block_size;
                                      x->d->propose(x->seed, x->L, b, std::span<const float>(x->thr, b), x->p);
                                    },
                                    &q};
      s.checkpoint();
      Timer t;
      be->run_pair(dec_task, prop_task);
      (rej ? t_pair_rej : t_pair_full).push_back(t.seconds());
      ASSERT_TRUE(q.ok);
      s.rollback();
    }
    {  // context-row ingestion: the last 32 rows again, one at a time and as one batch
      const int64_t n = std::min<int64_t>(32, L);
      dr.ring_truncate(L - n);
      Timer t1;
      for (int64_t q = L - n; q < L; ++q) dr.commit_rows(q, 1, caps.data() + q * cw);
      t_row1.push_back(t1.seconds() / static_cast<double>(n));
      dr.ring_truncate(L - n);
      Timer t2;
      dr.commit_rows(L - n, static_cast<int>(n), caps.data() + (L - n) * cw);
      t_row32.push_back(t2.seconds() / static_cast<double>(n));
      ASSERT_EQ(dr.ring_next(), L);
    }
  }
  const double dec = median(t_dec), dec_min = lowest(t_dec);
  std::printf("cost probe: threads %d, reps %d, decode(1) = %.3f ms median, %.3f ms min (unit); "
              "figures: median ratio [min ratio]\n", threads, reps, dec * 1e3, dec_min * 1e3);
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int cnt = 0;
  for (int n = 1; n <= kMaxN; ++n) {
    const double c = median(t_ver[n]) / dec;
    std::printf("  verify(%d) = %.3f [%.3f]\n", n, c, lowest(t_ver[n]) / dec_min);
    if (n >= 2 && n <= 6) {
      sx += n;
      sy += c;
      sxx += n * n;
      sxy += n * c;
      ++cnt;
    }
  }
  const double row = (cnt * sxy - sx * sy) / (cnt * sxx - sx * sx);
  const double base = (sy - row * sx) / cnt;
  std::printf("  verify(n) ~ %.3f + %.3f * n (n = 2..6)\n", base, row);
  std::printf("  propose full chain = %.3f [%.3f], conf0-rejected = %.3f [%.3f]\n", median(t_prop_full) / dec,
              lowest(t_prop_full) / dec_min, median(t_prop_rej) / dec, lowest(t_prop_rej) / dec_min);
  std::printf("  overlapped (decode || proposal, one thread each) minus decode(1): full chain = %.3f [%.3f], "
              "conf0-rejected = %.3f [%.3f]\n",
              median(t_pair_full) / dec - 1.0, lowest(t_pair_full) / dec_min - 1.0, median(t_pair_rej) / dec - 1.0,
              lowest(t_pair_rej) / dec_min - 1.0);
  std::printf("  ring ingestion per row: 1 at a time = %.4f, batch of 32 = %.4f\n", median(t_row1) / dec,
              median(t_row32) / dec);
}

}  // namespace
}  // namespace ds4::spec_test
