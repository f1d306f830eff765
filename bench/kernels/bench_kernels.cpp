// bench/kernels/bench_kernels.cpp — CPU kernel micro-benchmarks (Google Benchmark).
//
// Role: (1) GB/s of weight streaming per weight type at DS4 Flash shapes and at tiny shapes,
// for r = 1 and 8 activation rows and 1..N threads; (2) the verify(r)/decode(1) table: time of
// the r-row kernel over the time of the 1-row kernel for r = 1..8, measured side by side in
// one run (interleaved rounds, best of each), printed as a table and as CSV.
// Weights rotate over several copies (~64 MiB in all) so big shapes stream from outside L2;
// they are random valid blocks (quant::fill_random_blocks), never real model weights.
// (3) pool/round_trip: one ThreadPool job of trivial chunks, the fixed cost every parallel op
// pays. (4) top_two (core/reduce.h) against its scalar definition on logits rows of the tiny (8192)
// and Flash (129280) vocabularies: the greedy argmax + margin read after every forward.
// (5) sample/*: temperature sampling at the Flash vocabulary, the whole-row sampler against
// the top-256 read-out (core top_k_row, the CPU backend's top_k op) + sample_candidates.
// Flags (before Google Benchmark's own): --isa=scalar|avx2|avx512, --threads=N (ratio table
// pool size, default 1), --ratios_only, --no_ratios, --all_shapes (the ratio table also
// covers the tiny shapes).
#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/reduce.h"
#include "core/threadpool.h"
#include "quant/quant.h"
#include "sample/sampler.h"

namespace {

using ds4::ThreadPool;
using ds4::gguf::GgmlType;
namespace cpu = ds4::backend::cpu;
namespace quant = ds4::quant;

struct Spec {
  const char* name;
  GgmlType type;
  int64_t n_in;
  int64_t n_out;
  bool flash;  // a DS4 Flash shape (enters the ratio table)
};

const Spec kSpecs[] = {
    {"q8_0_attn_4096x1024", GgmlType::kQ8_0, 4096, 1024, true},
    {"q8_0_head_4096x8192", GgmlType::kQ8_0, 4096, 8192, true},
    {"f16_hc_4096x24", GgmlType::kF16, 4096, 24, true},
    {"f32_4096x24", GgmlType::kF32, 4096, 24, true},
    {"iq2_xxs_expert_4096to2048", GgmlType::kIQ2_XXS, 4096, 2048, true},
    {"q2_k_expert_2048to4096", GgmlType::kQ2_K, 2048, 4096, true},
    {"q4_k_expert_4096to2048", GgmlType::kQ4_K, 4096, 2048, true},
    {"q8_0_tiny_256x256", GgmlType::kQ8_0, 256, 256, false},
    {"q8_0_tiny_head_256x8192", GgmlType::kQ8_0, 256, 8192, false},
    {"f16_tiny_256x64", GgmlType::kF16, 256, 64, false},
    {"f16_tiny_256x256", GgmlType::kF16, 256, 256, false},
    {"f16_tiny_hc_1024x24", GgmlType::kF16, 1024, 24, false},
    {"iq2_xxs_tiny_256to128", GgmlType::kIQ2_XXS, 256, 128, false},
    {"q2_k_tiny_128to256", GgmlType::kQ2_K, 256, 256, false},
};

constexpr int kMaxR = 8;
constexpr int64_t kRotateBytes = 64ll << 20;

enum class ActKind { kF32, kQ8_0, kQ8K };

ActKind act_kind(GgmlType t) {
  switch (t) {
    case GgmlType::kQ8_0: return ActKind::kQ8_0;
    case GgmlType::kIQ2_XXS:
    case GgmlType::kQ2_K:
    case GgmlType::kQ4_K: return ActKind::kQ8K;
    default: return ActKind::kF32;
  }
}

// Weights (n_copies identical copies at different addresses) and kMaxR activation rows.
struct Data {
  const Spec* spec = nullptr;
  int64_t row_bytes = 0;
  int64_t mat_bytes = 0;
  int n_copies = 1;
  std::vector<uint8_t> w;
  std::vector<float> xf;                 // [kMaxR][n_in]
  std::vector<quant::BlockQ8_0Act> xq8;  // [kMaxR][n_in/32]
  std::vector<quant::BlockQ8K> xk;       // [kMaxR][n_in/256]

  explicit Data(const Spec& s) : spec(&s) {
    row_bytes = static_cast<int64_t>(quant::row_bytes(s.type, s.n_in));
    mat_bytes = row_bytes * s.n_out;
    n_copies = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(16, kRotateBytes / mat_bytes)));
    w.resize(static_cast<size_t>(mat_bytes * n_copies));
    quant::fill_random_blocks(s.type, w.data(), s.n_in * s.n_out, 0.05f, 42);
    for (int c = 1; c < n_copies; ++c) std::memcpy(w.data() + c * mat_bytes, w.data(), static_cast<size_t>(mat_bytes));
    std::mt19937 rng(7);
    std::normal_distribution<float> g(0.0f, 1.0f);
    xf.resize(static_cast<size_t>(kMaxR * s.n_in));
    for (float& v : xf) v = g(rng);
    if (act_kind(s.type) == ActKind::kQ8_0) {
      xq8.resize(static_cast<size_t>(kMaxR * s.n_in / 32));
      quant::quantize_q8_0_act(xf.data(), xq8.data(), kMaxR * s.n_in);
    } else if (act_kind(s.type) == ActKind::kQ8K) {
      xk.resize(static_cast<size_t>(kMaxR * s.n_in / 256));
      quant::quantize_q8_k_act(xf.data(), xk.data(), kMaxR * s.n_in);
    }
  }

  void run(int copy, int r, float* y, ThreadPool* pool) const {
    const cpu::TensorRows rows{w.data() + copy * mat_bytes, row_bytes, spec->n_in};
    const int64_t n = spec->n_out;
    switch (spec->type) {
      case GgmlType::kF32: cpu::matmul_f32(rows, xf.data(), r, y, n, pool); break;
      case GgmlType::kF16: cpu::matmul_f16(rows, xf.data(), r, y, n, pool); break;
      case GgmlType::kQ8_0: cpu::matmul_q8_0(rows, xq8.data(), r, y, n, pool); break;
      case GgmlType::kIQ2_XXS: cpu::matmul_iq2_xxs(rows, xk.data(), r, y, n, pool); break;
      case GgmlType::kQ2_K: cpu::matmul_q2_k(rows, xk.data(), r, y, n, pool); break;
      case GgmlType::kQ4_K: cpu::matmul_q4_k(rows, xk.data(), r, y, n, pool); break;
      default: break;
    }
  }
};

// Random logits (one row, L1/L2-resident like a row just written by the output head).
void bm_top_two(benchmark::State& state, bool fast) {
  const int64_t n = state.range(0);
  std::vector<float> row(static_cast<size_t>(n));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 3.0f);
  for (float& v : row) v = nd(rng);
  for (auto _ : state) {
    const ds4::TopTwo t = fast ? ds4::top_two(row, 2) : ds4::top_two_scalar(row, 2);
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

// The sampling read-out at the Flash vocabulary, default settings (T = 1, min-p 0.05) on a
// peaked row (40 plausible tokens over a broad tail): the whole-row sampler against the
// top-256 read-out (core top_k_row, the CPU backend's top_k op) plus sample_candidates, and
// the read-out alone (what a GPU runs instead of sending the row over PCIe).
void bm_sample(benchmark::State& state, int mode) {
  const int64_t n = 129280;
  std::vector<float> row(static_cast<size_t>(n));
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  for (float& v : row) v = nd(rng);
  for (int i = 0; i < 40; ++i) row[static_cast<size_t>(i) * 3001 + 17] += 10.0f;
  ds4::Sampler sampler(ds4::SamplerParams{}, static_cast<int>(n));
  int32_t ids[ds4::Sampler::kCandidates];
  float vals[ds4::Sampler::kCandidates];
  for (auto _ : state) {
    int32_t t = 0;
    if (mode == 0) {
      t = sampler.sample(row);
    } else {
      ds4::top_k_row(row, ds4::Sampler::kCandidates, -1, ids, vals);
      if (mode == 1) t = sampler.sample_candidates(ids, vals);
    }
    benchmark::DoNotOptimize(t);
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

// One parallel_for of `chunks` chunks whose work is a single store each: the pool's own cost
// per job (publish, wake, claim, count, wait) at this many threads.
void bm_pool_round_trip(benchmark::State& state) {
  const int64_t chunks = state.range(0);
  ThreadPool pool(static_cast<int>(state.range(1)));
  struct alignas(64) Cell {
    int64_t v;
  };
  std::vector<Cell> cells(static_cast<size_t>(chunks));
  int64_t round = 0;
  for (auto _ : state) {
    ++round;
    pool.parallel_for(chunks, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) cells[static_cast<size_t>(c)].v = round;
    });
    benchmark::ClobberMemory();
  }
  state.counters["chunks"] = static_cast<double>(chunks);
}

void bm_matmul(benchmark::State& state, const Spec* spec) {
  const int r = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  Data d(*spec);
  ThreadPool pool(threads);
  std::vector<float> y(static_cast<size_t>(kMaxR * spec->n_out));
  int copy = 0;
  for (auto _ : state) {
    d.run(copy, r, y.data(), &pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    copy = copy + 1 == d.n_copies ? 0 : copy + 1;
  }
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations()) * d.mat_bytes);
  state.counters["rows"] = r;
  state.counters["copies"] = d.n_copies;
}

// One thread: this thread's CPU time (robust on a shared, oversubscribed machine); more
// threads: wall-clock time.
double now_seconds(int threads) {
  if (threads == 1) {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Seconds per call of the r-row kernel, best of 11 interleaved rounds.
void ratio_table(int threads, bool all_shapes) {
  std::printf("\nverify(r)/decode(1) = time(r-row kernel) / time(1-row kernel), isa=%s, threads=%d (%s)\n",
              cpu::isa_name(cpu::active_isa()), threads, threads == 1 ? "thread CPU time" : "wall time");
  std::printf("%-28s %10s", "shape", "1row_us");
  for (int r = 2; r <= kMaxR; ++r) std::printf("   r=%d", r);
  std::printf("\n");
  std::vector<std::string> csv;
  ThreadPool pool(threads);
  for (const Spec& s : kSpecs) {
    if (!s.flash && !all_shapes) continue;
    Data d(s);
    std::vector<float> y(static_cast<size_t>(kMaxR * s.n_out));
    // Calls per measurement: about 20 ms of 1-row work.
    auto time_calls = [&](int r, int calls, int* copy) {
      const double t0 = now_seconds(threads);
      for (int i = 0; i < calls; ++i) {
        d.run(*copy, r, y.data(), &pool);
        *copy = *copy + 1 == d.n_copies ? 0 : *copy + 1;
      }
      return (now_seconds(threads) - t0) / calls;
    };
    int copy = 0;
    const double probe = time_calls(1, 3, &copy);
    const int calls = static_cast<int>(std::clamp(0.02 / std::max(probe, 1e-7), 3.0, 20000.0));
    double best[kMaxR + 1];
    for (double& b : best) b = 1e30;
    for (int round = 0; round < 11; ++round)
      for (int r = 1; r <= kMaxR; ++r) best[r] = std::min(best[r], time_calls(r, calls, &copy));
    std::printf("%-28s %10.1f", s.name, best[1] * 1e6);
    std::string line = std::string(s.name) + "," + cpu::isa_name(cpu::active_isa()) + "," +
                       std::to_string(threads) + "," + std::to_string(best[1] * 1e6);
    for (int r = 2; r <= kMaxR; ++r) {
      std::printf(" %5.2f", best[r] / best[1]);
      line += "," + std::to_string(best[r] / best[1]);
    }
    std::printf("\n");
    csv.push_back(line);
  }
  std::printf("\ncsv: shape,isa,threads,decode1_us,ratio_r2,ratio_r3,ratio_r4,ratio_r5,ratio_r6,ratio_r7,ratio_r8\n");
  for (const auto& l : csv) std::printf("csv: %s\n", l.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  bool ratios_only = false, no_ratios = false, all_shapes = false;
  int threads = 1;
  std::vector<char*> rest;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (a.rfind("--isa=", 0) == 0) {
      cpu::Isa isa;
      if (!cpu::parse_isa(a.substr(6), &isa) || !cpu::set_isa(isa)) {
        std::fprintf(stderr, "bench_kernels: ISA '%s' unknown or unsupported here\n", a.c_str() + 6);
        return 2;
      }
    } else if (a.rfind("--threads=", 0) == 0) {
      threads = std::max(1, std::atoi(a.c_str() + 10));
    } else if (a == "--ratios_only") {
      ratios_only = true;
    } else if (a == "--all_shapes") {
      all_shapes = true;
    } else if (a == "--no_ratios") {
      no_ratios = true;
    } else {
      rest.push_back(argv[i]);
    }
  }
  int n = static_cast<int>(rest.size());
  const int hw = std::max(1u, std::thread::hardware_concurrency());
  for (const Spec& s : kSpecs) {
    for (int r : {1, 8}) {
      for (int t = 1; t <= hw; t *= 2) {
        // One thread: rates from this thread's CPU time (robust on a shared machine); more
        // threads: wall time (the workers' CPU time is not the caller's).
        auto* b = benchmark::RegisterBenchmark(("matmul/" + std::string(s.name)).c_str(), bm_matmul, &s)
                      ->Args({r, t})
                      ->ArgNames({"r", "threads"})
                      ->MinTime(0.1);
        if (t > 1) b->UseRealTime();
      }
    }
  }
  for (int64_t chunks : {2, 4, 8, 16, 64}) {
    for (int t = 2; t <= hw; t *= 2) {
      benchmark::RegisterBenchmark("pool/round_trip", bm_pool_round_trip)
          ->Args({chunks, t})
          ->ArgNames({"chunks", "threads"})
          ->MinTime(0.05)
          ->UseRealTime();
    }
  }
  for (bool fast : {false, true}) {
    for (int64_t v : {8192, 129280}) {
      benchmark::RegisterBenchmark(fast ? "top_two/sse2" : "top_two/scalar", bm_top_two, fast)->Arg(v)->ArgName("n_vocab");
    }
  }
  benchmark::RegisterBenchmark("sample/row", bm_sample, 0);
  benchmark::RegisterBenchmark("sample/top256+candidates", bm_sample, 1);
  benchmark::RegisterBenchmark("sample/top256_readout", bm_sample, 2);
  benchmark::Initialize(&n, rest.data());
  std::printf("isa=%s\n", cpu::isa_name(cpu::active_isa()));
  if (!ratios_only) benchmark::RunSpecifiedBenchmarks();
  if (!no_ratios) ratio_table(threads, all_shapes);
  benchmark::Shutdown();
  return 0;
}
