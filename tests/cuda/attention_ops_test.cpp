// tests/cuda/attention_ops_test.cpp — the CUDA attention ops (backend/cuda/attention.cu)
// against the CPU backend (the oracle), bit for bit.
//
// Each test draws random inputs at tiny and DS4 Flash-like shapes (head_dim 512 with n_rot 64
// and 64 heads, indexer 64 heads × 128, compressor ratios 4 and 128, raw rings that wrap,
// comp_allowed masks, several queries per call and more than one launch's worth, YaRN on and
// off, positions near 1e6), runs the op through backend::make_cpu_backend(1) on host buffers
// and through the ops.h launcher on device copies of the same buffers, and compares every
// output buffer's BITS (allowed masks byte for byte); a mismatch names the op, the buffer, the
// element and both values. Without a usable GPU every test skips with probe_device's reason.
// The KV stores are the target's: the raw ring f16, the compressor's rows FP8 stores, the
// indexer rows FP4 stores (also the sink keys); sink attention also runs on f32 keys (the
// DSpark drafter's ring and block).
// The CPU must compute its transcendentals by core/detmath.h and core/rope.h (the definitions
// the device code uses) for the ops with exp / sin / cos to match.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/ops.h"
#include "quant/half.h"
#include "quant/kv_sim.h"
#include "tests/cuda/device_buf.h"

namespace ds4::cuda {
namespace {

using backend::AttentionInputsParams;
using backend::CompressorStepParams;
using backend::IndexerSelectParams;
using backend::SinkAttentionParams;

using test_util::DeviceBuf;

// A buffer with a host copy (the CPU op's) and a device copy (the launcher's), equal at start.
template <typename T>
class Mirror {
 public:
  Mirror() = default;
  explicit Mirror(std::vector<T> v) : host_(std::move(v)), dev_(std::make_unique<DeviceBuf>(host_.size() * sizeof(T))) {
    if (!host_.empty()) dev_->put(host_.data(), host_.size() * sizeof(T));
  }
  T* h() { return host_.data(); }
  T* d() const { return static_cast<T*>(dev_->data()); }
  size_t size() const { return host_.size(); }
  const std::vector<T>& host() const { return host_; }
  std::vector<T> fetch() const {
    std::vector<T> v(host_.size());
    if (!v.empty()) dev_->get(v.data(), v.size() * sizeof(T));
    return v;
  }

 private:
  std::vector<T> host_;
  std::unique_ptr<DeviceBuf> dev_;
};

uint32_t bits_of(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// Elements whose bits differ (two NaNs match whatever their payloads: x86 and the GPU make
// different ones and nothing reads them); the first few are reported as failures.
size_t bit_mismatches(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  EXPECT_EQ(got.size(), want.size()) << what;
  size_t bad = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    const uint32_t a = bits_of(got[i]), b = bits_of(want[i]);
    if (a != b && !(std::isnan(got[i]) && std::isnan(want[i]))) {
      if (bad < 6)
        ADD_FAILURE() << what << " [" << i << "]: gpu " << got[i] << " (0x" << std::hex << a << ") cpu " << want[i]
                      << " (0x" << b << std::dec << ")";
      ++bad;
    }
  }
  return bad;
}

void expect_bits(const Mirror<float>& m, const std::string& what) {
  const size_t bad = bit_mismatches(m.fetch(), m.host(), what);
  EXPECT_EQ(0u, bad) << what << ": " << bad << " of " << m.size() << " elements differ";
}

// f16 stores: every 16-bit pattern equal.
void expect_bits(const Mirror<uint16_t>& m, const std::string& what) {
  const std::vector<uint16_t> got = m.fetch();
  const std::vector<uint16_t>& want = m.host();
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (bad < 6)
        ADD_FAILURE() << what << " [" << i << "]: gpu 0x" << std::hex << got[i] << " cpu 0x" << want[i] << std::dec;
      ++bad;
    }
  }
  EXPECT_EQ(0u, bad) << what << ": " << bad << " of " << m.size() << " f16 elements differ";
}

// FP4 stores (the indexer rows): every byte equal.
void expect_bits(const Mirror<uint8_t>& m, const std::string& what) {
  const std::vector<uint8_t> got = m.fetch();
  const std::vector<uint8_t>& want = m.host();
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i]) {
      if (bad < 6)
        ADD_FAILURE() << what << " [" << i << "]: gpu 0x" << std::hex << int{got[i]} << " cpu 0x" << int{want[i]}
                      << std::dec;
      ++bad;
    }
  }
  EXPECT_EQ(0u, bad) << what << ": " << bad << " of " << m.size() << " bytes differ";
}

// The FP4 stores of rows of head_dim values (each row through quant's FP4 round trip).
std::vector<uint8_t> to_fp4(std::vector<float> x, int head_dim) {
  const int rb = quant::fp4_row_bytes(head_dim);
  std::vector<uint8_t> out(x.size() / head_dim * rb);
  for (size_t r = 0; r < x.size() / head_dim; ++r)
    quant::fp4_e2m1_roundtrip_row_store(x.data() + r * head_dim, head_dim, out.data() + r * rb);
  return out;
}

// The FP8 stores of rows of head_dim values (each row through quant's FP8 round trip of its
// first head_dim - n_rot values, the RoPE dims as f16): the compressed rows as the State keeps them.
std::vector<uint8_t> to_fp8(std::vector<float> x, int head_dim, int n_rot) {
  const int rb = quant::fp8_row_bytes(head_dim, n_rot);
  std::vector<uint8_t> out(x.size() / head_dim * rb);
  for (size_t r = 0; r < x.size() / head_dim; ++r)
    quant::fp8_kv_row_store(x.data() + r * head_dim, head_dim, n_rot, out.data() + r * rb);
  return out;
}

// f16 bits of values (the stores' contents).
std::vector<uint16_t> to_f16(const std::vector<float>& x) {
  std::vector<uint16_t> h(x.size());
  quant::f32_to_f16_row(x.data(), h.data(), static_cast<int64_t>(x.size()));
  return h;
}

std::vector<float> gaussian(size_t n, std::mt19937& rng, float scale = 1.0f) {
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng) * scale;
  return x;
}

// Values with the shapes that exercise the FP8 / FP4 round trips: blocks of wide magnitudes,
// an all-zero block, a block below the FP8 minimum amax, exact grid ties.
std::vector<float> kv_like(size_t n, std::mt19937& rng) {
  std::vector<float> x = gaussian(n, rng);
  for (size_t b = 0; b < n / 64; ++b) {
    float* xb = x.data() + b * 64;
    const float mag = std::ldexp(1.0f, static_cast<int>(b % 23) - 11);
    for (int i = 0; i < 64; ++i) xb[i] *= mag;
    if (b % 17 == 5)
      for (int i = 0; i < 64; ++i) xb[i] = 0.0f;
    if (b % 17 == 9)
      for (int i = 0; i < 64; ++i) xb[i] *= 1e-6f;
    if (b % 17 == 12)
      for (int i = 0; i < 64; ++i) xb[i] = static_cast<float>(i - 32) * 0.25f;
  }
  return x;
}

RopeParams rope_yarn(bool on) {
  RopeParams rp;
  rp.freq_base = 160000.0f;
  rp.n_ctx_orig = 65536;
  if (on) {
    rp.freq_scale = 1.0f / 16.0f;
    rp.ext_factor = 1.0f;
    rp.attn_factor = 1.0f / (1.0f + 0.1f * logf(16.0f));
  }
  return rp;
}

class CudaAttentionOps : public ::testing::Test {
 protected:
  void SetUp() override {
    DeviceInfo info;
    const Status s = probe_device(0, &info);
    if (!s.ok()) GTEST_SKIP() << "no usable CUDA device: " << s.message();
    cpu_ = backend::make_cpu_backend(1);
  }
  void sync() {
    const Status s = synchronize();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  std::unique_ptr<backend::Backend> cpu_;
};

// ---- attention_inputs --------------------------------------------------------------------------

struct InputsCase {
  const char* name;
  int n_rows, head_dim, n_rot, n_head, n_idx_head, idx_first;
  int64_t pos0, raw_cap;
  bool yarn, with_q, with_raw, with_iq;
};

TEST_F(CudaAttentionOps, AttentionInputsBitsEqualCpu) {
  const InputsCase cases[] = {
      {"tiny", 5, 128, 64, 4, 2, 2, 6, 8, false, true, true, true},
      {"tiny-yarn-no-q", 3, 128, 64, 4, 2, 0, 1021, 4, true, false, true, true},
      {"tiny-no-rope", 4, 128, 0, 2, 2, 1, 37, 16, false, true, false, false},
      {"flash-yarn", 3, 512, 64, 64, 64, 1, 999998, 128, true, true, true, true},
      {"flash-dense", 2, 512, 64, 64, 64, 0, 1000003, 128, false, true, true, true},
      // Head counts off the kernel's 8-head groups, and rows before idx_first.
      {"odd-heads", 4, 128, 64, 13, 11, 2, 77, 8, true, true, true, true},
  };
  // Each case without norms, then with the folded norms (q_head_norm, kv_norm) as rms_norm
  // launches and inside the kernel (set_fused_norms).
  std::mt19937 rng(29);
  struct Restore {  // the process-wide switch back to its default, also when an assertion returns
    ~Restore() { set_fused_norms(false); }
  } restore;
  int case_no = 0;
  for (const int mode : {0, 1, 2})
  for (const InputsCase& c : cases) {
    // Rows of q padded (odd cases: one rms_norm launch per row) or packed (the session's layout).
    const int64_t pad = ++case_no % 2 == 1 ? 16 : 0;
    SCOPED_TRACE(std::string(c.name) + (mode == 0 ? "" : mode == 1 ? ", norms by rms_norm" : ", norms fused"));
    set_fused_norms(mode == 2);
    const int D = c.head_dim;
    Mirror<float> kv_w(gaussian(D, rng, 1.0f));
    const int64_t q_stride = static_cast<int64_t>(c.n_head) * D + pad;
    Mirror<float> q(gaussian(c.with_q ? c.n_rows * q_stride : 1, rng, 2.0f));
    Mirror<float> kv(kv_like(static_cast<size_t>(c.n_rows) * D, rng));
    Mirror<uint16_t> raw(to_f16(gaussian(c.with_raw ? c.raw_cap * D : 1, rng)));  // f16 ring
    const int idim = 128;
    Mirror<float> iq(gaussian(c.with_iq ? static_cast<size_t>(c.n_rows) * c.n_idx_head * idim : 1, rng, 3.0f));
    Mirror<float> iw(gaussian(c.with_iq ? static_cast<size_t>(c.n_rows) * c.n_idx_head : 1, rng));
    AttentionInputsParams p;
    p.n_rows = c.n_rows;
    p.pos0 = c.pos0;
    p.rope = rope_yarn(c.yarn);
    p.n_rot = c.n_rot;
    p.head_dim = D;
    p.q_stride = q_stride;
    p.n_head = c.n_head;
    p.raw_cap = c.raw_cap;
    p.n_idx_head = c.n_idx_head;
    p.idx_dim = idim;
    p.idx_first = c.idx_first;
    p.iw_scale = 0.0441941738f;
    p.q_head_norm = mode != 0;
    p.norm_eps = 1e-6f;
    AttentionInputsParams hp = p, dp = p;
    hp.kv_norm = mode != 0 ? kv_w.h() : nullptr;
    dp.kv_norm = mode != 0 ? kv_w.d() : nullptr;
    hp.q = c.with_q ? q.h() : nullptr;
    dp.q = c.with_q ? q.d() : nullptr;
    hp.kv = kv.h();
    dp.kv = kv.d();
    hp.raw = c.with_raw ? raw.h() : nullptr;
    dp.raw = c.with_raw ? raw.d() : nullptr;
    hp.iq = c.with_iq ? iq.h() : nullptr;
    dp.iq = c.with_iq ? iq.d() : nullptr;
    hp.iw = c.with_iq ? iw.h() : nullptr;
    dp.iw = c.with_iq ? iw.d() : nullptr;
    cpu_->attention_inputs(hp);
    const Status s = attention_inputs(dp, nullptr);
    ASSERT_TRUE(s.ok()) << s.to_string();
    sync();
    const std::string op = std::string("attention_inputs ") + c.name;
    expect_bits(q, op + " q");
    expect_bits(kv, op + " kv");
    expect_bits(raw, op + " raw ring");
    expect_bits(iq, op + " indexer q");
    expect_bits(iw, op + " indexer weights");
  }
}

// ---- compressor_step ---------------------------------------------------------------------------

struct CompressorCase {
  const char* name;
  int ratio, head_dim, n_rot;
  bool indexer, yarn;
  int64_t pos_first;
  int steps;
};

TEST_F(CudaAttentionOps, CompressorStepSequenceBitsEqualCpu) {
  const CompressorCase cases[] = {
      {"ratio4-tiny", 4, 128, 64, false, false, 0, 13},
      {"ratio4-indexer-tiny", 4, 128, 64, true, true, 5, 11},
      {"ratio4-flash", 4, 512, 64, false, true, 999981, 14},
      {"ratio4-flash-indexer", 4, 128, 64, true, true, 999981, 10},
      {"ratio128-flash", 128, 512, 64, false, true, 999807, 300},
  };
  std::mt19937 rng(4);
  for (const CompressorCase& c : cases) {
    SCOPED_TRACE(c.name);
    const int R = c.ratio, D = c.head_dim;
    const int coff = R == 4 ? 2 : 1;
    const int W = coff * D;
    const int state_rows = coff * R;
    // The first window sees a prior state; a few columns stay masked at -1e30 in every row
    // (pooled 0), one more only in the prior state.
    std::vector<float> init_score = gaussian(static_cast<size_t>(state_rows) * W, rng);
    for (int r = 0; r < state_rows; ++r) {
      init_score[static_cast<size_t>(r) * W + 3] = -1.0e30f;
      init_score[static_cast<size_t>(r) * W + 7] = -1.0e30f;
    }
    Mirror<float> skv(gaussian(static_cast<size_t>(state_rows) * W, rng));
    Mirror<float> ssc(init_score);
    std::vector<uint16_t> ape_h(static_cast<size_t>(R) * W);
    {
      const std::vector<float> a = gaussian(ape_h.size(), rng, 0.5f);
      for (size_t i = 0; i < a.size(); ++i) ape_h[i] = quant::f32_to_f16(a[i]);
    }
    Mirror<uint16_t> ape(ape_h);
    Mirror<float> norm(gaussian(D, rng, 0.3f));
    const int max_rows = c.steps / R + 2;
    const int rb8 = quant::fp8_row_bytes(D, c.n_rot);
    Mirror<uint8_t> out(std::vector<uint8_t>(static_cast<size_t>(max_rows) * rb8, 0));  // FP8 stores
    const int rb = quant::fp4_row_bytes(D);
    Mirror<uint8_t> out4(std::vector<uint8_t>(static_cast<size_t>(max_rows) * rb, 0));  // indexer FP4 stores
    Mirror<float> pooled(std::vector<float>(D, 0.0f));
    int emitted = 0;
    for (int t = 0; t < c.steps; ++t) {
      const int64_t pos = c.pos_first + t;
      std::vector<float> sc = gaussian(W, rng, 2.0f);
      for (int j : {3, 9}) sc[j] = -1.0e30f;  // column 9 masked only from the first step on
      Mirror<float> kv_cur(gaussian(W, rng));
      Mirror<float> sc_cur(sc);
      CompressorStepParams p;
      p.ratio = R;
      p.head_dim = D;
      p.n_rot = c.n_rot;
      p.pos = pos;
      p.eps = 1e-6f;
      p.rope = rope_yarn(c.yarn);
      p.indexer = c.indexer;
      CompressorStepParams hp = p, dp = p;
      hp.state_kv = skv.h(), dp.state_kv = skv.d();
      hp.state_score = ssc.h(), dp.state_score = ssc.d();
      hp.kv_cur = kv_cur.h(), dp.kv_cur = kv_cur.d();
      hp.sc_cur = sc_cur.h(), dp.sc_cur = sc_cur.d();
      hp.ape = ape.h(), dp.ape = ape.d();
      hp.norm = norm.h(), dp.norm = norm.d();
      hp.pooled = pooled.h(), dp.pooled = pooled.d();
      if (c.indexer) {
        hp.out_fp4 = out4.h() + static_cast<size_t>(emitted) * rb;
        dp.out_fp4 = out4.d() + static_cast<size_t>(emitted) * rb;
      } else {
        hp.out_fp8 = out.h() + static_cast<size_t>(emitted) * rb8;
        dp.out_fp8 = out.d() + static_cast<size_t>(emitted) * rb8;
      }
      cpu_->compressor_step(hp);
      const Status s = compressor_step(dp, nullptr);
      ASSERT_TRUE(s.ok()) << s.to_string();
      if (backend::compressor_emits(pos, R)) {
        ++emitted;
        sync();
        const std::string op = std::string("compressor_step ") + c.name + " pos " + std::to_string(pos);
        expect_bits(pooled, op + " pooled");
        expect_bits(out, op + " out FP8 rows");
        expect_bits(out4, op + " out FP4 rows");
      }
    }
    ASSERT_GE(emitted, 1) << "the case must close at least one window";
    sync();
    const std::string op = std::string("compressor_step ") + c.name + " final";
    expect_bits(skv, op + " state_kv");
    expect_bits(ssc, op + " state_score");
    expect_bits(out, op + " out FP8 rows");
    expect_bits(out4, op + " out FP4 rows");
    {  // the stores are the rows: nonzero codes were written
      size_t nonzero = 0;
      for (uint8_t b : (c.indexer ? out4 : out).host()) nonzero += b != 0;
      EXPECT_GT(nonzero, static_cast<size_t>(emitted) * (c.indexer ? rb : rb8) / 2);
    }
  }
}

// compressor_steps: the steps of a prefill group as the session issues them, two chains
// interleaved in one call (a ratio-4 layer's attention compressor, FP8 rows, and its indexer
// compressor, FP4 rows, sharing one pooled scratch), plus a ratio-128 chain; 70 steps per
// call, so several launches of up to 16 steps. The bits of the CPU's compressor_step per step.
TEST_F(CudaAttentionOps, CompressorStepsBatchedBitsEqualCpu) {
  std::mt19937 rng(17);
  struct Chain {
    int ratio, head_dim;
    bool indexer;
    Mirror<float> skv, ssc, norm;
    Mirror<uint16_t> ape;
    Mirror<uint8_t> out;
    int64_t n_out = 0;
  };
  const int n_rot = 64;
  auto make = [&](int R, int D, bool indexer, int max_rows) {
    const int W = (R == 4 ? 2 : 1) * D;
    const int state_rows = (R == 4 ? 2 : 1) * R;
    std::vector<uint16_t> ape_h(static_cast<size_t>(R) * W);
    const std::vector<float> a = gaussian(ape_h.size(), rng, 0.5f);
    for (size_t i = 0; i < a.size(); ++i) ape_h[i] = quant::f32_to_f16(a[i]);
    const int rb = indexer ? quant::fp4_row_bytes(D) : quant::fp8_row_bytes(D, n_rot);
    return Chain{R,
                 D,
                 indexer,
                 Mirror<float>(gaussian(static_cast<size_t>(state_rows) * W, rng)),
                 Mirror<float>(gaussian(static_cast<size_t>(state_rows) * W, rng)),
                 Mirror<float>(gaussian(D, rng, 0.3f)),
                 Mirror<uint16_t>(ape_h),
                 Mirror<uint8_t>(std::vector<uint8_t>(static_cast<size_t>(max_rows) * rb, 0))};
  };
  const int rows = 35;          // positions 1000 .. 1034: a ratio-128 window closes at 1023
  const int64_t pos0 = 1000;
  Chain chains[3] = {make(4, 512, false, rows / 4 + 2), make(4, 128, true, rows / 4 + 2), make(128, 512, false, 2)};
  Mirror<float> pooled(std::vector<float>(512, 0.0f));
  std::vector<Mirror<float>> inputs;  // kv_cur, sc_cur per (row, chain)
  inputs.reserve(static_cast<size_t>(rows) * 3 * 2);
  std::vector<CompressorStepParams> hsteps, dsteps;
  for (int i = 0; i < rows; ++i) {
    for (Chain& c : chains) {
      const int W = (c.ratio == 4 ? 2 : 1) * c.head_dim;
      inputs.emplace_back(gaussian(W, rng));
      Mirror<float>& kv = inputs.back();
      inputs.emplace_back(gaussian(W, rng, 2.0f));
      Mirror<float>& sc = inputs.back();
      CompressorStepParams p;
      p.ratio = c.ratio;
      p.head_dim = c.head_dim;
      p.n_rot = n_rot;
      p.pos = pos0 + i;
      p.eps = 1e-6f;
      p.rope = rope_yarn(true);
      p.indexer = c.indexer;
      CompressorStepParams hp = p, dp = p;
      hp.state_kv = c.skv.h(), dp.state_kv = c.skv.d();
      hp.state_score = c.ssc.h(), dp.state_score = c.ssc.d();
      hp.kv_cur = kv.h(), dp.kv_cur = kv.d();
      hp.sc_cur = sc.h(), dp.sc_cur = sc.d();
      hp.ape = c.ape.h(), dp.ape = c.ape.d();
      hp.norm = c.norm.h(), dp.norm = c.norm.d();
      hp.pooled = pooled.h(), dp.pooled = pooled.d();
      const int rb = c.indexer ? quant::fp4_row_bytes(c.head_dim) : quant::fp8_row_bytes(c.head_dim, n_rot);
      uint8_t* ho = c.out.h() + c.n_out * rb;
      uint8_t* dout = c.out.d() + c.n_out * rb;
      (c.indexer ? hp.out_fp4 : hp.out_fp8) = ho;
      (c.indexer ? dp.out_fp4 : dp.out_fp8) = dout;
      if (backend::compressor_emits(p.pos, c.ratio)) ++c.n_out;
      hsteps.push_back(hp);
      dsteps.push_back(dp);
    }
  }
  for (const CompressorStepParams& hp : hsteps) cpu_->compressor_step(hp);
  // Two calls (the session issues a group's steps per call): 70 steps, then the rest.
  const int first = 70;
  ASSERT_TRUE(compressor_steps(dsteps.data(), first, nullptr).ok());
  const Status st = compressor_steps(dsteps.data() + first, static_cast<int>(dsteps.size()) - first, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  sync();
  EXPECT_EQ(chains[2].n_out, 1);  // the ratio-128 chain closed a window inside the batch
  expect_bits(pooled, "compressor_steps pooled");
  for (const Chain& c : chains) {
    const std::string what = "compressor_steps ratio " + std::to_string(c.ratio) + (c.indexer ? " indexer" : "");
    expect_bits(c.skv, what + " state_kv");
    expect_bits(c.ssc, what + " state_score");
    expect_bits(c.out, what + " stored rows");
    size_t nonzero = 0;
    for (uint8_t b : c.out.host()) nonzero += b != 0;
    EXPECT_GT(nonzero, 0u) << what;
  }
  // An empty call does nothing; a bad step is an error naming the op, nothing launched.
  EXPECT_TRUE(compressor_steps(dsteps.data(), 0, nullptr).ok());
  CompressorStepParams bad = dsteps[0];
  bad.state_kv = nullptr;
  const Status e = compressor_steps(&bad, 1, nullptr);
  EXPECT_FALSE(e.ok());
  EXPECT_NE(e.message().find("compressor_step"), std::string::npos) << e.message();
}

// ---- indexer_select ----------------------------------------------------------------------------

struct IndexerQuery {
  int64_t n_rows;
  int top_k;
  int distinct;  // rows repeat every `distinct` rows (0: all random): ties at the threshold
};

void run_indexer_case(backend::Backend& cpu, const char* name, int n_head, int head_dim,
                      const std::vector<IndexerQuery>& qs, std::mt19937& rng) {
  SCOPED_TRACE(name);
  const int n = static_cast<int>(qs.size());
  int64_t max_rows = 0;
  for (const auto& q : qs) max_rows = std::max(max_rows, q.n_rows);
  // One shared row cache (each query sees its own prefix, as a verify batch does); rows
  // [0, 40) of a query with `distinct` > 0 are also copied into its repeats below.
  std::vector<float> rows_h = gaussian(static_cast<size_t>(max_rows) * head_dim, rng);
  for (int64_t c = 0; c < max_rows; c += 97)  // all-zero rows: score exactly 0
    std::fill(rows_h.begin() + c * head_dim, rows_h.begin() + (c + 1) * head_dim, 0.0f);
  std::vector<Mirror<float>> qv, wv, scores;
  std::vector<Mirror<uint8_t>> rows;  // FP4 indexer stores
  std::vector<Mirror<int32_t>> order;
  std::vector<Mirror<uint8_t>> allowed;
  for (int i = 0; i < n; ++i) {
    std::vector<float> r(rows_h.begin(), rows_h.begin() + qs[i].n_rows * head_dim);
    if (qs[i].distinct > 0)
      for (int64_t c = qs[i].distinct; c < qs[i].n_rows; ++c)
        std::copy_n(r.begin() + (c % qs[i].distinct) * head_dim, head_dim, r.begin() + c * head_dim);
    rows.emplace_back(to_fp4(r, head_dim));
    qv.emplace_back(gaussian(static_cast<size_t>(n_head) * head_dim, rng));
    std::vector<float> w = gaussian(n_head, rng, 0.1f);
    if (i % 2 == 1)
      for (auto& x : w) x = std::fabs(x);  // non-negative scores (ties at 0 are plenty)
    wv.emplace_back(w);
    scores.emplace_back(std::vector<float>(qs[i].n_rows, 0.0f));
    order.emplace_back(std::vector<int32_t>(qs[i].n_rows, 0));
    allowed.emplace_back(std::vector<uint8_t>(qs[i].n_rows, 7));
  }
  std::vector<IndexerSelectParams> hp(n), dp(n);
  for (int i = 0; i < n; ++i) {
    IndexerSelectParams p;
    p.n_rows = qs[i].n_rows;
    p.n_head = n_head;
    p.head_dim = head_dim;
    p.top_k = qs[i].top_k;
    hp[i] = dp[i] = p;
    hp[i].q = qv[i].h(), dp[i].q = qv[i].d();
    hp[i].w = wv[i].h(), dp[i].w = wv[i].d();
    hp[i].rows = rows[i].h(), dp[i].rows = rows[i].d();
    hp[i].scores = scores[i].h(), dp[i].scores = scores[i].d();
    hp[i].order = order[i].h(), dp[i].order = order[i].d();
    hp[i].allowed = allowed[i].h(), dp[i].allowed = allowed[i].d();
  }
  cpu.indexer_select(hp.data(), n);
  const Status s = indexer_select(dp.data(), n, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  const Status sy = synchronize();
  ASSERT_TRUE(sy.ok()) << sy.to_string();
  for (int i = 0; i < n; ++i) {
    const std::string op = std::string("indexer_select ") + name + " query " + std::to_string(i) + " (" +
                           std::to_string(qs[i].n_rows) + " rows, top " + std::to_string(qs[i].top_k) + ")";
    expect_bits(scores[i], op + " scores");
    const std::vector<uint8_t> got = allowed[i].fetch();
    const std::vector<uint8_t>& want = allowed[i].host();
    int64_t n_got = 0, bad = 0;
    for (int64_t c = 0; c < qs[i].n_rows; ++c) {
      n_got += got[c] == 1;
      if (got[c] != want[c]) {
        if (bad < 6)
          ADD_FAILURE() << op << " allowed[" << c << "]: gpu " << int{got[c]} << " cpu " << int{want[c]}
                        << " (score " << scores[i].host()[c] << ")";
        ++bad;
      }
    }
    EXPECT_EQ(0, bad) << op << ": " << bad << " mask bytes differ";
    EXPECT_EQ(std::min<int64_t>(qs[i].top_k, qs[i].n_rows), n_got) << op << ": selected count";
  }
}

// compressor_rows: a chain's steps as a prefill group issues them, one call per group, against
// the CPU's steps one by one (Backend::compressor_rows' default): calls that start and end
// mid-window, cover whole windows, emit nothing or only a window closed by rows of an earlier
// call (ratio 4's previous lane from the state, or the copy made in this call), a chain from
// position 0 (the initial previous lane), and ratio 128 windows closing inside a call. The
// state (every row, the ones the call did not rewrite included) and the stored rows after
// each call equal the CPU's bits; `pooled` is scratch (the device pools in shared memory).
TEST_F(CudaAttentionOps, CompressorRowsBitsEqualCpu) {
  struct Case {
    const char* name;
    int ratio, head_dim, n_rot;
    bool indexer;
    int64_t pos0;
    std::vector<int> calls;  // rows per call
  };
  const Case cases[] = {
      {"ratio4-flash", 4, 512, 64, false, 1001, {1, 3, 7, 32, 0, 5, 2, 64}},
      {"ratio4-indexer", 4, 128, 64, true, 998, {2, 1, 9, 40, 4}},
      {"ratio4-tiny-from-0", 4, 128, 64, false, 0, {3, 1, 12, 6}},
      {"ratio128-flash", 128, 512, 64, false, 900, {100, 20, 3, 256, 1}},
      {"ratio128-from-0", 128, 128, 64, false, 0, {127, 1, 130}},
  };
  std::mt19937 rng(23);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const int R = c.ratio, D = c.head_dim;
    const int W = (R == 4 ? 2 : 1) * D;
    const int state_rows = (R == 4 ? 2 : 1) * R;
    int total = 0;
    for (int n : c.calls) total += n;
    std::vector<float> init_score = gaussian(static_cast<size_t>(state_rows) * W, rng);
    for (int r = 0; r < state_rows; ++r) init_score[static_cast<size_t>(r) * W + 3] = -1.0e30f;  // a masked column
    Mirror<float> skv(gaussian(static_cast<size_t>(state_rows) * W, rng));
    Mirror<float> ssc(init_score);
    std::vector<uint16_t> ape_h(static_cast<size_t>(R) * W);
    {
      const std::vector<float> a = gaussian(ape_h.size(), rng, 0.5f);
      for (size_t i = 0; i < a.size(); ++i) ape_h[i] = quant::f32_to_f16(a[i]);
    }
    Mirror<uint16_t> ape(ape_h);
    Mirror<float> norm(gaussian(D, rng, 0.3f));
    Mirror<float> hpooled(std::vector<float>(D, 0.0f)), dpooled(std::vector<float>(D, 0.0f));
    const int rb = c.indexer ? quant::fp4_row_bytes(D) : quant::fp8_row_bytes(D, c.n_rot);
    const int max_rows = total / R + 2;
    Mirror<uint8_t> out(std::vector<uint8_t>(static_cast<size_t>(max_rows) * rb, 0));
    int64_t pos = c.pos0, n_out = 0;
    for (int n : c.calls) {
      std::vector<float> sc = gaussian(static_cast<size_t>(std::max(n, 1)) * W, rng, 2.0f);
      for (int i = 0; i < n; ++i) sc[static_cast<size_t>(i) * W + 3] = -1.0e30f;
      Mirror<float> kv(gaussian(static_cast<size_t>(std::max(n, 1)) * W, rng));
      Mirror<float> scm(sc);
      backend::CompressorRowsParams p;
      p.n = n;
      p.step.ratio = R;
      p.step.head_dim = D;
      p.step.n_rot = c.n_rot;
      p.step.pos = pos;
      p.step.eps = 1e-6f;
      p.step.rope = rope_yarn(true);
      p.step.indexer = c.indexer;
      backend::CompressorRowsParams hp = p, dp = p;
      hp.step.state_kv = skv.h(), dp.step.state_kv = skv.d();
      hp.step.state_score = ssc.h(), dp.step.state_score = ssc.d();
      hp.step.kv_cur = kv.h(), dp.step.kv_cur = kv.d();
      hp.step.sc_cur = scm.h(), dp.step.sc_cur = scm.d();
      hp.step.ape = ape.h(), dp.step.ape = ape.d();
      hp.step.norm = norm.h(), dp.step.norm = norm.d();
      hp.step.pooled = hpooled.h(), dp.step.pooled = dpooled.d();
      (c.indexer ? hp.step.out_fp4 : hp.step.out_fp8) = out.h() + n_out * rb;
      (c.indexer ? dp.step.out_fp4 : dp.step.out_fp8) = out.d() + n_out * rb;
      cpu_->compressor_rows(hp);
      bool done = false;
      const Status s = compressor_rows(dp, nullptr, &done);
      ASSERT_TRUE(s.ok()) << s.to_string();
      ASSERT_TRUE(done) << "compressor_rows declined the shape";
      sync();
      const std::string op = std::string("compressor_rows ") + c.name + " rows " + std::to_string(pos) + ".." +
                             std::to_string(pos + n - 1);
      expect_bits(skv, op + " state_kv");
      expect_bits(ssc, op + " state_score");
      expect_bits(out, op + " stored rows");
      n_out += (pos + n) / R - pos / R;
      pos += n;
    }
    ASSERT_GE(n_out, 2) << "the case must close windows";
    size_t nonzero = 0;
    for (uint8_t b : out.host()) nonzero += b != 0;
    EXPECT_GT(nonzero, static_cast<size_t>(n_out) * rb / 2) << "the stores were written";
  }
  // A bad chain is an error naming the op; a ratio past 128 is declined (the steps run).
  backend::CompressorRowsParams bad;
  bad.n = 4;
  bad.step.ratio = 4;
  bad.step.head_dim = 128;
  bool done = true;
  const Status e = compressor_rows(bad, nullptr, &done);
  EXPECT_FALSE(e.ok());
  EXPECT_NE(e.message().find("compressor_step"), std::string::npos) << e.message();
}

TEST_F(CudaAttentionOps, IndexerSelectScoresAndMaskEqualCpu) {
  std::mt19937 rng(512);
  run_indexer_case(*cpu_, "tiny", 4, 128, {{40, 8, 0}, {33, 8, 5}, {100, 16, 3}}, rng);
  // Ties everywhere; then a prefill group of 40 rows (two launches of up to 32 queries), each
  // over one more row than the last.
  std::vector<IndexerQuery> many;
  for (int i = 0; i < 11; ++i) many.push_back({50 + 7 * i, 4 + i, i % 3 == 0 ? 0 : 2 + i});
  run_indexer_case(*cpu_, "tiny-11-queries", 2, 128, many, rng);
  std::vector<IndexerQuery> group;
  for (int i = 0; i < 40; ++i) group.push_back({600 + i, 512, i % 7 == 0 ? 50 : 0});
  run_indexer_case(*cpu_, "prefill-group-40", 64, 128, group, rng);
  // A head_dim off the register fast path, with a 64-lane tail of 8.
  run_indexer_case(*cpu_, "dim-160", 3, 160, {{300, 20, 0}, {90, 12, 6}}, rng);
  run_indexer_case(*cpu_, "flash", 64, 128, {{4096, 512, 0}, {3000, 512, 700}, {65536, 512, 0}}, rng);
}

// ---- sink_attention ----------------------------------------------------------------------------

struct SinkQuerySpec {
  int n_raw;
  int64_t raw_first;
  int64_t n_comp;
  int allowed_pct;  // -1: comp_allowed null
  int n_rot;
  int64_t pos;
  int64_t masked_first = 0;  // compressed rows [0, masked_first) disallowed (allowed_pct >= 0)
};

// stored: the keys are the target's stores (raw rows f16, compressed rows FP8 stores, which
// need (head_dim - n_rot) % 64 == 0); otherwise f32 (the drafter).
// fused: through sink_attention_fused whatever the query count (it must take the shapes).
void run_sink_case(backend::Backend& cpu, const char* name, int n_head, int head_dim, int64_t raw_cap, bool yarn,
                   const std::vector<SinkQuerySpec>& qs, std::mt19937& rng, bool stored, bool fused = false) {
  SCOPED_TRACE(std::string(name) + (stored ? " (stored keys)" : " (f32 keys)") + (fused ? ", fused kernel" : ""));
  const int n = static_cast<int>(qs.size());
  const int D = head_dim;
  const std::vector<float> raw_v = kv_like(static_cast<size_t>(raw_cap) * D, rng);
  Mirror<float> raw(raw_v);
  Mirror<uint16_t> raw16(to_f16(raw_v));
  Mirror<float> sinks(gaussian(n_head, rng, 2.0f));
  std::vector<Mirror<float>> q, comp, scores, out;
  std::vector<Mirror<uint8_t>> comp8;
  std::vector<Mirror<uint8_t>> allowed;
  std::vector<SinkAttentionParams> hp(n), dp(n);
  for (int i = 0; i < n; ++i) {
    const SinkQuerySpec& s = qs[i];
    q.emplace_back(gaussian(static_cast<size_t>(n_head) * D, rng, 1.5f));
    comp.emplace_back(kv_like(static_cast<size_t>(std::max<int64_t>(s.n_comp, 1)) * D, rng));
    // FP8 stores only for the stored-key runs: the f32 runs' odd head_dims have no FP8 form.
    comp8.emplace_back(stored ? to_fp8(comp.back().host(), D, s.n_rot) : std::vector<uint8_t>(1, 0));
    std::vector<uint8_t> a(std::max<int64_t>(s.n_comp, 1), 1);
    std::uniform_int_distribution<int> pct(0, 99);
    for (auto& x : a) x = pct(rng) < s.allowed_pct ? 1 : 0;
    for (int64_t c = 0; c < std::min<int64_t>(s.masked_first, s.n_comp); ++c) a[static_cast<size_t>(c)] = 0;
    allowed.emplace_back(a);
    scores.emplace_back(std::vector<float>(static_cast<size_t>(n_head) * (s.n_raw + s.n_comp) + 1, 0.0f));
    out.emplace_back(std::vector<float>(static_cast<size_t>(n_head) * D, 0.0f));
    SinkAttentionParams p;
    p.raw_cap = raw_cap;
    p.raw_first = s.raw_first;
    p.n_raw = s.n_raw;
    p.n_comp = s.n_comp;
    p.n_head = n_head;
    p.head_dim = D;
    p.n_rot = s.n_rot;
    p.pos = s.pos;
    p.rope = rope_yarn(yarn);
    hp[i] = dp[i] = p;
    hp[i].q = q[i].h(), dp[i].q = q[i].d();
    if (stored) {
      hp[i].raw_f16 = raw16.h(), dp[i].raw_f16 = raw16.d();
      hp[i].comp_fp8 = comp8[i].h(), dp[i].comp_fp8 = comp8[i].d();
    } else {
      hp[i].raw = raw.h(), dp[i].raw = raw.d();
      hp[i].comp = comp[i].h(), dp[i].comp = comp[i].d();
    }
    hp[i].comp_allowed = s.allowed_pct < 0 ? nullptr : allowed[i].h();
    dp[i].comp_allowed = s.allowed_pct < 0 ? nullptr : allowed[i].d();
    hp[i].sinks = sinks.h(), dp[i].sinks = sinks.d();
    hp[i].scores = scores[i].h(), dp[i].scores = scores[i].d();
    hp[i].out = out[i].h(), dp[i].out = out[i].d();
  }
  cpu.sink_attention(hp.data(), n);
  bool done = true;
  const Status st = fused ? sink_attention_fused(dp.data(), n, nullptr, &done) : sink_attention(dp.data(), n, nullptr);
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(done) << "the fused kernel declined the shapes";
  const Status sy = synchronize();
  ASSERT_TRUE(sy.ok()) << sy.to_string();
  for (int i = 0; i < n; ++i) {
    const std::string op = std::string("sink_attention ") + name + " query " + std::to_string(i) + " (raw " +
                           std::to_string(qs[i].n_raw) + " from " + std::to_string(qs[i].raw_first) + ", comp " +
                           std::to_string(qs[i].n_comp) + ")";
    expect_bits(scores[i], op + " scores");
    expect_bits(out[i], op + " out");
  }
}

// The sink cases, through sink_attention (fused false: queries in launches of 8, the split
// kernels unless a call reaches the fused kernel's count) or sink_attention_fused itself.
void run_sink_cases(backend::Backend& cpu, bool fused) {
  for (const bool stored : {true, false}) {
    std::mt19937 rng(128);
    // Tiny: ring of 16 wrapping, masks, no keys at all, no de-rotation, 10 queries (2 launches).
    run_sink_case(cpu, "tiny", 4, 128, 16, false,
                  {{16, 9, 20, 60, 64, 24},
                   {5, 30, 0, -1, 64, 34},
                   {0, 0, 0, -1, 64, 0},
                   {3, 14, 40, 0, 64, 16},
                   {16, 100, 33, -1, 0, 115},
                   {1, 15, 7, 50, 64, 15},
                   {12, 4, 18, 90, 64, 15},
                   {0, 0, 25, 40, 64, 99},
                   {16, 17, 1, 100, 64, 32},
                   {8, 2, 3, 30, 64, 9}},
                  rng, stored, fused);
    run_sink_case(cpu, "flash-yarn", 64, 512, 128, true,
                  {{128, 999873, 2000, 25, 64, 1000000},
                   {128, 999874, 300, -1, 64, 1000001},
                   {77, 999930, 5000, 10, 64, 1000006}},
                  rng, stored, fused);
    run_sink_case(cpu, "flash-dense", 64, 512, 128, false,
                  {{128, 4000, 0, -1, 64, 4127}, {100, 4030, 0, -1, 64, 4129}}, rng, stored, fused);
    // The 1K frontier of the bench (128 raw + 256 compressed, every row allowed) next to a masked 8K one.
    run_sink_case(cpu, "flash-1k", 64, 512, 128, true,
                  {{128, 897, 256, -1, 64, 1024}, {128, 8065, 2048, 30, 64, 8192}}, rng, stored, fused);
    // A prefill group of 40 rows at 2K (the fused kernel's launches of 32 and 8): the raw window
    // sliding through a ring of 160, each row's compressed rows and mask its own.
    std::vector<SinkQuerySpec> group;
    for (int i = 0; i < 40; ++i) group.push_back({128, 1921 + i, 512 + i / 4, i % 5 == 0 ? -1 : 40 + i, 64, 2048 + i});
    run_sink_case(cpu, "prefill-group", 64, 512, 160, true, group, rng, stored, fused);
    // Whole chunks of slots (the fused kernel compacts 512 at a time) with no key before keys;
    // a query with no key at all.
    run_sink_case(cpu, "empty-chunks", 16, 512, 128, true,
                  {{0, 0, 1400, 50, 64, 5000, 1100}, {128, 4000, 1400, 30, 64, 5001, 1300}, {0, 0, 600, 40, 64, 2500, 600}},
                  rng, stored, fused);
    // Odd shapes for the score tiles (8 slots), head groups (16 heads per score block, 8 per
    // combine block) and dim slices (32 dims, cut at 32s - 1 when an odd head_dim is
    // de-rotated): 5 heads, head_dims 135 / 65 / 1, chunks of the combine pass (256 slots)
    // overrun, one slot, masks dropping whole tiles; 20 heads and the largest head_dim (1024,
    // past the fused kernel's 512: the split kernels only).
    // FP8 rows need (head_dim - n_rot) % 64 == 0 (an even n_rot, so an even head_dim): the
    // stored keys run the same shapes at head_dims 136 / 66 / 2, with FP8 parts of 2, 1 or 0
    // blocks.
    if (stored) {
      run_sink_case(cpu, "odd-136", 5, 136, 20, false,
                    {{20, 33, 900, 50, 8, 56}, {7, 3, 33, -1, 72, 12}, {0, 0, 1, -1, 136, 7}, {20, 1, 1700, 3, 8, 40}},
                    rng, stored, fused);
      run_sink_case(cpu, "odd-66", 6, 66, 8, false, {{5, 5, 800, -1, 2, 12}, {8, 9, 70, 70, 66, 20}}, rng, stored,
                    fused);
      run_sink_case(cpu, "dim-2", 3, 2, 4, false, {{4, 1, 5, 50, 2, 8}}, rng, stored, fused);
      // 20 heads: head groups of 16 / 8 with a part-filled last one.
      run_sink_case(cpu, "heads-20", 20, 136, 24, true, {{24, 50, 700, 60, 8, 80}, {10, 3, 2, -1, 72, 13}}, rng,
                    stored, fused);
      if (!fused)
        run_sink_case(cpu, "dim-1024", 20, 1024, 12, false, {{12, 7, 300, 60, 64, 400}, {9, 0, 3, -1, 512, 9}}, rng,
                      stored);
    } else {
      run_sink_case(cpu, "odd-135", 5, 135, 20, false,
                    {{20, 33, 900, 50, 16, 56}, {7, 3, 33, -1, 0, 12}, {0, 0, 1, -1, 16, 7}, {20, 1, 1700, 3, 134, 40}},
                    rng, stored, fused);
      run_sink_case(cpu, "odd-65", 6, 65, 8, false, {{5, 5, 800, -1, 64, 12}, {8, 9, 70, 70, 2, 20}}, rng, stored,
                    fused);
      run_sink_case(cpu, "dim-1", 3, 1, 4, false, {{4, 1, 5, 50, 0, 8}}, rng, stored, fused);
      run_sink_case(cpu, "heads-20", 20, 135, 24, true, {{24, 50, 700, 60, 16, 80}, {10, 3, 2, -1, 0, 13}}, rng,
                    stored, fused);
      if (!fused)
        run_sink_case(cpu, "dim-1023", 20, 1023, 12, false, {{12, 7, 300, 60, 64, 400}, {9, 0, 3, -1, 0, 9}}, rng,
                      stored);
    }
  }
}

TEST_F(CudaAttentionOps, SinkAttentionBitsEqualCpu) { run_sink_cases(*cpu_, false); }

// The fused kernel (prefill groups under --cuda-attn fused) on every case the split kernels
// take up to head_dim 512; past it, it declines (the split kernels run).
TEST_F(CudaAttentionOps, SinkAttentionFusedBitsEqualCpu) {
  run_sink_cases(*cpu_, true);
  SinkAttentionParams wide;
  wide.n_head = 2, wide.head_dim = 1024, wide.n_rot = 64;
  std::vector<float> buf(2 * 1024);
  Mirror<float> q(buf), out(buf), sinks(std::vector<float>(2, 0.0f));
  wide.q = q.d(), wide.out = out.d(), wide.sinks = sinks.d();
  bool done = true;
  const Status s = sink_attention_fused(&wide, 1, nullptr, &done);
  EXPECT_TRUE(s.ok()) << s.to_string();
  EXPECT_FALSE(done) << "head_dim 1024 is past the fused kernel's 512";
}

// Arguments the kernels do not support come back as an error Status naming the op and the
// shapes, before anything touches the device (so this runs without a GPU).
TEST(CudaAttentionArgs, UnsupportedShapesAreErrorsNotAborts) {
  float* fake = reinterpret_cast<float*>(uintptr_t{256});  // never dereferenced
  auto expect_error = [](const Status& s, const char* op, const char* detail) {
    ASSERT_FALSE(s.ok()) << op;
    EXPECT_NE(std::string::npos, s.message().find(op)) << s.message();
    EXPECT_NE(std::string::npos, s.message().find(detail)) << s.message();
  };
  AttentionInputsParams ai;
  ai.n_rows = 2;
  ai.head_dim = 512;
  ai.n_rot = 63;  // odd
  ai.kv = fake;
  expect_error(attention_inputs(ai, nullptr), "attention_inputs", "n_rot 63");
  ai.n_rot = 64;
  ai.iq = fake;
  ai.iw = fake;
  ai.n_idx_head = 4;
  ai.idx_dim = 64;  // the Hadamard is 128 wide
  expect_error(attention_inputs(ai, nullptr), "attention_inputs", "idx heads 4 x 64");

  CompressorStepParams cs;
  cs.ratio = 4;
  cs.head_dim = 192;  // not a multiple of 128 for the indexer
  cs.n_rot = 64;
  cs.indexer = true;
  cs.state_kv = cs.state_score = cs.pooled = fake;
  cs.out_fp4 = reinterpret_cast<uint8_t*>(fake);
  cs.kv_cur = cs.sc_cur = cs.norm = fake;
  cs.ape = reinterpret_cast<const uint16_t*>(fake);
  expect_error(compressor_step(cs, nullptr), "compressor_step", "head_dim 192");

  IndexerSelectParams is[2];
  for (auto& q : is) {
    q.q = q.w = q.scores = fake;
    q.rows = reinterpret_cast<const uint8_t*>(fake);
    q.order = reinterpret_cast<int32_t*>(fake);
    q.allowed = reinterpret_cast<uint8_t*>(fake);
    q.n_rows = 100;
    q.n_head = 4;
    q.head_dim = 128;
    q.top_k = 8;
  }
  is[1].top_k = 0;
  expect_error(indexer_select(is, 2, nullptr), "indexer_select", "query 1");

  SinkAttentionParams sa;
  sa.q = sa.sinks = sa.out = sa.scores = fake;
  sa.n_head = 4;
  sa.head_dim = 2048;  // above the per-block limit
  expect_error(sink_attention(&sa, 1, nullptr), "sink_attention", "heads 4 x 2048");
  // Keys of one type per query and per call: f32 and f16 mixed are refused.
  sa.head_dim = 128;
  sa.n_raw = 4;
  sa.raw_cap = 4;
  sa.raw = fake;
  sa.raw_f16 = reinterpret_cast<const uint16_t*>(fake);
  expect_error(sink_attention(&sa, 1, nullptr), "sink_attention", "mixed keys");
  SinkAttentionParams pair[2] = {sa, sa};
  pair[0].raw_f16 = nullptr;  // query 0: f32 keys
  pair[1].raw = nullptr;      // query 1: f16 keys
  expect_error(sink_attention(pair, 2, nullptr), "sink_attention", "query 1");
  // FP8 compressed rows need (head_dim - n_rot) % 64 == 0.
  SinkAttentionParams s8 = sa;
  s8.raw = nullptr;
  s8.comp_fp8 = reinterpret_cast<const uint8_t*>(fake);
  s8.n_comp = 3;
  s8.n_rot = 32;  // 96 FP8 dims
  expect_error(sink_attention(&s8, 1, nullptr), "sink_attention", "comp 3, n_rot 32, stored keys");
}

}  // namespace
}  // namespace ds4::cuda
