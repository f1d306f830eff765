// tests/cuda/ffn_ops_test.cpp — the HC, elementwise, router and MoE launchers of
// backend/cuda/ops.h against the CPU backend (the oracle), bit for bit.
//
// Each GPU test draws random inputs at a tiny and a DS4 Flash-like shape (n_embd 4096, n_hc 4,
// 256 router experts choosing 6, n_ff 2048, IQ2_XXS/Q2_K and Q4_K experts; 1..8 rows and 11),
// runs the op through backend::make_cpu_backend on host buffers and through the CUDA launcher
// on device copies, and compares every output's BITS (scratch outputs such as the flattened
// norm and the mix too), naming the op, the shape, the element and both values on a mismatch.
// HC pre / collapse run on every path of ops.h: the three launches and the one-launch fused
// and staged kernels (which must also leave their counters zero and flat unwritten).
// matmul_grouped (the grouped output LoRA: one launch pair for all groups) is checked the same
// way at the Flash shape and odd ones; matmul of one Q8_0 row on every r = 1 path (the default
// fuses the activation quantization into the staged kernel: one launch, scratch unwritten);
// matmul of 9..100 rows on F16 / F32 weights on the many-row kernel and the 8-row tiles
// (DenseRowsKernel), with NaN / inf / ±0 / subnormal activations, each row alone too.
// Without a usable GPU these tests skip with the reason probe_device gives.
// The FfnMathHost tests need no GPU: they check ffn_math.h's host/device helpers (the code the
// kernels run) against the CPU backend where no transcendental is involved.
// Note: the ops that use exp / sigmoid / softplus / SiLU (hc_pre, hc_collapse, swiglu, route's
// probs, moe) match the CPU only once the CPU computes them with core/detmath.h too.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "backend/cuda/moe_r1.h"
#include "backend/row_math.h"
#include "backend/cuda/ops.h"
#include "quant/quant.h"
#include "tests/cuda/device_buf.h"
#include "tests/cuda/kernel_scopes.h"

namespace ds4::cuda {
namespace {

using backend::GgmlType;
using test_util::bit_mismatches;
using test_util::PersistentScope;
using test_util::R1KernelScope;
using test_util::DeviceBuf;

constexpr int kRowCounts[] = {1, 2, 3, 4, 5, 6, 7, 8, 11};
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> x(n);
  for (auto& v : x) v = g(rng) * scale;
  return x;
}

// A host vector and its device copy. out() buffers start with the same byte pattern on both
// sides, so elements an op must not write compare equal and elements it must write differ
// unless both sides wrote the same bits.
template <typename T>
struct Dual {
  std::vector<T> h;
  std::unique_ptr<DeviceBuf> d;
  T* hp() { return h.data(); }
  T* dp() const { return d->template as<T>(); }
  std::vector<T> device_values() const { return d->template get_vec<T>(h.size()); }
};

template <typename T>
Dual<T> dual(std::vector<T> v) {
  Dual<T> r;
  r.h = std::move(v);
  r.d = test_util::to_device(r.h);
  return r;
}

template <typename T>
Dual<T> out_buf(size_t n) {
  std::vector<T> v(n);
  std::memset(v.data(), 0x5a, n * sizeof(T));
  return dual(std::move(v));
}

// Random valid weight rows of type t: f32 / f16 / bf16 from Gaussians, blocks by
// quant::fill_random_blocks (any scales, any quant bits).
std::vector<uint8_t> random_weights(GgmlType t, int64_t n_in, int64_t n_out, uint64_t seed, float mag = 0.05f) {
  const size_t rb = quant::row_bytes(t, n_in);
  std::vector<uint8_t> w(rb * static_cast<size_t>(n_out));
  if (t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16) {
    const auto v = gaussian(static_cast<size_t>(n_in * n_out), static_cast<uint32_t>(seed), mag);
    quant::quantize_row(t, v.data(), w.data(), n_in * n_out);
  } else {
    quant::fill_random_blocks(t, w.data(), n_in * n_out, mag, seed);
  }
  return w;
}

class FfnOps : public ::testing::Test {
 protected:
  void SetUp() override {
    const Status s = probe_device(0, &info_);
    if (!s.ok()) GTEST_SKIP() << "no usable CUDA device: " << s.message();
    cpu_ = backend::make_cpu_backend(4);
  }
  void sync() {
    const Status s = synchronize();
    ASSERT_TRUE(s.ok()) << s.to_string();
  }
  void expect_ok(const Status& s) { ASSERT_TRUE(s.ok()) << s.to_string(); }
  // Compares the device copy of `o` with its host copy, bit for bit.
  static void same(const Dual<float>& o, const std::string& what) {
    const auto got = o.device_values();
    EXPECT_EQ(0u, bit_mismatches(got.data(), o.h.data(), o.h.size(), what)) << what;
  }
  static void same_ids(const Dual<int32_t>& o, const std::string& what) {
    const auto got = o.device_values();
    size_t bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      if (got[i] != o.h[i] && bad++ < 5) ADD_FAILURE() << what << " [" << i << "]: gpu " << got[i] << " cpu " << o.h[i];
    }
    EXPECT_EQ(0u, bad) << what;
  }
  DeviceInfo info_;
  std::unique_ptr<backend::Backend> cpu_;
};

std::string tag(const char* op, int64_t n_embd, int rows) {
  return std::string(op) + " n_embd=" + std::to_string(n_embd) + " rows=" + std::to_string(rows);
}

// ---- HC ---------------------------------------------------------------------------------------

// HC pre and collapse run every path of ops.h: the three launches (rms_norm -> flat,
// matvec_f16 -> mix, finish) and the one-launch kernels, fused and staged (one launch per
// kHcTicketRows rows, given the zeroed counters). All must give the CPU's bits for mix and
// every output; the one-launch ones must leave the counters zero (the next call relies on it)
// and flat unwritten. Shapes: the tiny n_embd 64, row lengths with a tail (n_hc·n_embd = 400
// and 132, not multiples of 64; 132: F16 rows of 264 bytes, not 16-byte aligned, so the staged
// kernel loads them without cp.async), Flash's 4096, 1..8 rows (staged: one output per block)
// and 11 (four per block), and at n_embd 64 more rows than one launch takes.
std::vector<int> hc_row_counts(int64_t n_embd) {
  std::vector<int> r(std::begin(kRowCounts), std::end(kRowCounts));
  if (n_embd == 64) r.push_back(kHcTicketRows + 5);
  return r;
}

// The fused path's counters must be zero after every call; flat keeps out_buf's pattern.
// kStaged: the staged kernel with its decode dot's chains over the weights and x (the default);
// kStagedProducts: over the products (set_hc_products(true)).
enum class HcPath { kThree, kFused, kStaged, kStagedProducts };
constexpr HcPath kHcPaths[] = {HcPath::kThree, HcPath::kFused, HcPath::kStaged, HcPath::kStagedProducts};
const char* hc_path_name(HcPath p) {
  return p == HcPath::kThree    ? "3-launch"
         : p == HcPath::kFused  ? "fused"
         : p == HcPath::kStaged ? "staged"
                                : "staged products";
}
HcKernel hc_kernel(HcPath p) {
  set_hc_products(p == HcPath::kStagedProducts);
  return p == HcPath::kStaged || p == HcPath::kStagedProducts ? HcKernel::kStaged : HcKernel::kFused;
}
// One shape's HC-pre weights: the F16 projection fn [n_hc·n_embd -> mix_dim], scale, base
// and the folded norm's weight, from `seed`.
struct HcPreWeights {
  int n_hc;
  int64_t n_embd, mix_dim, hc_dim;
  Dual<uint8_t> fn;
  Dual<float> scale, base, norm_w;
  HcPreWeights(int nh, int64_t e, uint64_t seed)
      : n_hc(nh), n_embd(e), mix_dim(2 * nh + nh * nh), hc_dim(nh * e),
        fn(dual(random_weights(GgmlType::kF16, hc_dim, mix_dim, seed + e))),
        scale(dual(std::vector<float>{0.7f, 0.3f, 0.9f})), base(dual(gaussian(mix_dim, seed + 1))),
        norm_w(dual(gaussian(e, seed + 2))) {}
  // The params' shapes and the host (device) weight pointers.
  backend::HcPreParams params(bool device, int rows, int iters) {
    backend::HcPreParams p;
    p.fn = backend::Matrix{device ? fn.dp() : fn.hp(), GgmlType::kF16, hc_dim, mix_dim,
                           quant::row_bytes(GgmlType::kF16, hc_dim)};
    p.scale = device ? scale.dp() : scale.hp();
    p.base = device ? base.dp() : base.hp();
    p.n_hc = n_hc;
    p.n_embd = n_embd;
    p.n_rows = rows;
    p.sinkhorn_iters = iters;
    p.norm_out_eps = 1e-6f;
    return p;
  }
};

// Puts the process-wide HC switches back to their defaults, also when an assertion returns.
struct RestoreHcSwitches {
  ~RestoreHcSwitches() {
    set_fused_norms(false);
    set_hc_products(false);
    set_fold_hc_post(false);
  }
};

void expect_fused_leftovers(const Dual<uint32_t>& tickets, const Dual<float>& flat, const std::string& t) {
  const auto tk = tickets.device_values();
  EXPECT_EQ(0, std::count_if(tk.begin(), tk.end(), [](uint32_t v) { return v != 0; })) << t << " tickets";
  const auto fl = flat.device_values();
  size_t written = 0;
  for (float v : fl) {
    uint32_t b;
    std::memcpy(&b, &v, 4);
    written += b != 0x5a5a5a5au;
  }
  EXPECT_EQ(0u, written) << t << " flat must stay unwritten on the fused path";
}

// Every path, without the folded norm, then with it (normed = rms_norm(y) · w, and unweighted)
// as an rms_norm launch and inside the staged kernel (set_fused_norms). n_hc = 4 (DS4: the
// lane-per-value Sinkhorn, 20 iterations and 7) and n_hc = 3 (the general warp Sinkhorn).
TEST_F(FfnOps, HcPreBitsEqualCpu) {
  auto tickets = dual(std::vector<uint32_t>(kHcTicketRows, 0u));
  RestoreHcSwitches restore;
  struct Shape {
    int n_hc, iters;
    int64_t n_embd;
  };
  for (const Shape& sh : {Shape{4, 20, 64}, Shape{4, 20, 100}, Shape{4, 20, 33}, Shape{4, 20, 4096},
                          Shape{4, 7, 64}, Shape{3, 20, 64}, Shape{3, 20, 33}}) {
    HcPreWeights hw(sh.n_hc, sh.n_embd, 11);
    const int n_hc = hw.n_hc;
    const int64_t n_embd = hw.n_embd, mix_dim = hw.mix_dim, hc_dim = hw.hc_dim;
    auto& norm_w = hw.norm_w;
    for (int rows : hc_row_counts(n_embd)) {
      auto x = dual(gaussian(rows * hc_dim, 100 + rows));
      for (int norm : {0, 1, 2, 3})  // none; weighted by rms_norm; weighted folded; unweighted folded
      for (HcPath path : kHcPaths) {
        // The fused kernel's folded norm is always an rms_norm launch after it: one shape will do.
        if (norm != 0 && path == HcPath::kFused && n_embd != 4096) continue;
        set_fused_norms(norm >= 2);
        const bool fused = path != HcPath::kThree;
        auto flat = out_buf<float>(rows * hc_dim), mix = out_buf<float>(rows * mix_dim);
        auto y = out_buf<float>(rows * n_embd), post = out_buf<float>(rows * n_hc);
        auto comb = out_buf<float>(rows * n_hc * n_hc);
        auto normed = out_buf<float>(rows * n_embd);
        backend::HcPreParams c = hw.params(false, rows, sh.iters);
        c.x = x.hp(), c.flat = flat.hp(), c.mix = mix.hp();
        c.y = y.hp(), c.post = post.hp(), c.comb = comb.hp();
        c.normed = norm != 0 ? normed.hp() : nullptr;
        c.norm_weight = norm == 1 || norm == 2 ? norm_w.hp() : nullptr;
        cpu_->hc_pre(c);
        backend::HcPreParams g = hw.params(true, rows, sh.iters);
        g.x = x.dp(), g.flat = flat.dp(), g.mix = mix.dp();
        g.y = y.dp(), g.post = post.dp(), g.comb = comb.dp();
        g.normed = norm != 0 ? normed.dp() : nullptr;
        g.norm_weight = norm == 1 || norm == 2 ? norm_w.dp() : nullptr;
        expect_ok(hc_pre(g, nullptr, fused ? tickets.dp() : nullptr, hc_kernel(path)));
        sync();
        const std::string t = tag((std::string("hc_pre ") + hc_path_name(path)).c_str(), n_embd, rows) +
                              " n_hc " + std::to_string(n_hc) + " iters " + std::to_string(sh.iters) +
                              (norm == 0 ? "" : norm == 1 ? ", norm by rms_norm" : norm == 2 ? ", norm folded" : ", unweighted norm folded");
        if (fused) {
          expect_fused_leftovers(tickets, flat, t);
        } else {
          same(flat, t + " flat");
        }
        same(mix, t + " mix");
        same(post, t + " post");
        same(comb, t + " comb");
        same(y, t + " y");
        same(normed, t + " normed");
      }
    }
  }
}

// HcPreParams::post_first (the previous sublayer's HC post, run first: it makes x): on every
// path, with the fold off (an hc_post launch first) and on (the staged kernel makes the row
// itself, each block writing its share of x). The post reads the post / comb that the HC pre
// then overwrites (the session's scratch), so the inputs start as values, not patterns. x, the
// post's output, must equal the CPU's too. Shapes: Flash's 4096 (float4 path), 64, 33 (the
// scalar path: rows of 4·33 floats are not 16-byte aligned past row 0), n_hc 3; the folded
// input norm on (the kernel's last phase reads its staged x).
TEST_F(FfnOps, HcPreWithPostFirstBitsEqualCpu) {
  auto tickets = dual(std::vector<uint32_t>(kHcTicketRows, 0u));
  RestoreHcSwitches restore;
  struct Shape {
    int n_hc;
    int64_t n_embd;
  };
  for (const Shape& sh : {Shape{4, 4096}, Shape{4, 64}, Shape{4, 33}, Shape{3, 64}}) {
    HcPreWeights hw(sh.n_hc, sh.n_embd, 21);
    const int n_hc = hw.n_hc;
    const int64_t n_embd = hw.n_embd, mix_dim = hw.mix_dim, hc_dim = hw.hc_dim;
    auto& norm_w = hw.norm_w;
    for (int rows : hc_row_counts(n_embd)) {
      auto f = dual(gaussian(rows * n_embd, 500 + rows));
      auto xb = dual(gaussian(rows * hc_dim, 600 + rows));
      for (HcPath path : kHcPaths) {
        for (const bool fold : {false, true}) {
          if (fold && path != HcPath::kStaged && path != HcPath::kStagedProducts) continue;  // no fold there
          set_fold_hc_post(fold);
          set_fused_norms(true);
          const bool fused = path != HcPath::kThree;
          auto x = out_buf<float>(rows * hc_dim);
          auto post = dual(gaussian(rows * n_hc, 700 + rows));
          auto comb = dual(gaussian(rows * n_hc * n_hc, 800 + rows));
          auto flat = out_buf<float>(rows * hc_dim), mix = out_buf<float>(rows * mix_dim);
          auto y = out_buf<float>(rows * n_embd), normed = out_buf<float>(rows * n_embd);
          backend::HcPreParams c = hw.params(false, rows, 20);
          c.post_first.n_hc = n_hc;
          c.post_first.n_embd = n_embd;
          c.post_first.n_rows = rows;
          backend::HcPreParams g = hw.params(true, rows, 20);
          g.post_first = c.post_first;
          c.x = x.hp(), c.flat = flat.hp(), c.mix = mix.hp();
          c.y = y.hp(), c.post = post.hp(), c.comb = comb.hp(), c.normed = normed.hp(), c.norm_weight = norm_w.hp();
          c.post_first.f = f.hp(), c.post_first.x = xb.hp(), c.post_first.post = post.hp();
          c.post_first.comb = comb.hp(), c.post_first.out = x.hp();
          cpu_->hc_pre(c);
          g.x = x.dp(), g.flat = flat.dp(), g.mix = mix.dp();
          g.y = y.dp(), g.post = post.dp(), g.comb = comb.dp(), g.normed = normed.dp(), g.norm_weight = norm_w.dp();
          g.post_first.f = f.dp(), g.post_first.x = xb.dp(), g.post_first.post = post.dp();
          g.post_first.comb = comb.dp(), g.post_first.out = x.dp();
          expect_ok(hc_pre(g, nullptr, fused ? tickets.dp() : nullptr, hc_kernel(path)));
          sync();
          const std::string t = tag((std::string("hc_pre + post ") + hc_path_name(path)).c_str(), n_embd, rows) +
                                " n_hc " + std::to_string(n_hc) + (fold ? ", folded" : ", post launch");
          if (fused) expect_fused_leftovers(tickets, flat, t);
          same(x, t + " x (the post's output)");
          same(mix, t + " mix");
          same(post, t + " post");
          same(comb, t + " comb");
          same(y, t + " y");
          same(normed, t + " normed");
        }
      }
    }
  }
  // A post_first that does not make x is refused, naming the op.
  backend::HcPreParams bad;
  bad.n_hc = 4;
  bad.n_embd = 64;
  bad.post_first.out = reinterpret_cast<float*>(tickets.dp());
  bad.post_first.n_hc = 4;
  bad.post_first.n_embd = 64;
  const Status st = hc_pre(bad, nullptr, tickets.dp(), HcKernel::kStaged);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("post_first must make x"), std::string::npos) << st.message();
}

TEST_F(FfnOps, HcPostBitsEqualCpu) {
  const int n_hc = 4;
  for (int64_t n_embd : {64, 4096}) {
    const int64_t hc_dim = n_hc * n_embd;
    for (int rows : kRowCounts) {
      auto f = dual(gaussian(rows * n_embd, 200 + rows));
      auto x = dual(gaussian(rows * hc_dim, 300 + rows));
      auto post = dual(gaussian(rows * n_hc, 400 + rows));
      auto comb = dual(gaussian(rows * n_hc * n_hc, 500 + rows, 0.5f));
      auto out = out_buf<float>(rows * hc_dim);
      backend::HcPostParams p;
      p.n_hc = n_hc, p.n_embd = n_embd, p.n_rows = rows;
      backend::HcPostParams c = p, g = p;
      c.f = f.hp(), c.x = x.hp(), c.post = post.hp(), c.comb = comb.hp(), c.out = out.hp();
      g.f = f.dp(), g.x = x.dp(), g.post = post.dp(), g.comb = comb.dp(), g.out = out.dp();
      cpu_->hc_post(c);
      expect_ok(hc_post(g, nullptr));
      sync();
      same(out, tag("hc_post", n_embd, rows) + " out");
    }
  }
}

TEST_F(FfnOps, HcCollapseBitsEqualCpu) {
  RestoreHcSwitches restore;
  const int n_hc = 4;
  auto tickets = dual(std::vector<uint32_t>(kHcTicketRows, 0u));
  for (int64_t n_embd : {64, 100, 33, 4096}) {
    const int64_t hc_dim = n_hc * n_embd;
    auto fn = dual(random_weights(GgmlType::kF16, hc_dim, n_hc, 21 + n_embd));
    auto base = dual(gaussian(n_hc, 22));
    for (int rows : hc_row_counts(n_embd)) {
      auto x = dual(gaussian(rows * hc_dim, 600 + rows));
      for (HcPath path : kHcPaths) {
        const bool fused = path != HcPath::kThree;
        auto flat = out_buf<float>(rows * hc_dim), mix = out_buf<float>(rows * n_hc), y = out_buf<float>(rows * n_embd);
        backend::HcCollapseParams p;
        p.fn = backend::Matrix{fn.hp(), GgmlType::kF16, hc_dim, n_hc, quant::row_bytes(GgmlType::kF16, hc_dim)};
        p.scale = 0.37f, p.n_hc = n_hc, p.n_embd = n_embd, p.n_rows = rows;
        backend::HcCollapseParams c = p, g = p;
        c.x = x.hp(), c.base = base.hp(), c.flat = flat.hp(), c.mix = mix.hp(), c.y = y.hp();
        g.fn.data = fn.dp();
        g.x = x.dp(), g.base = base.dp(), g.flat = flat.dp(), g.mix = mix.dp(), g.y = y.dp();
        cpu_->hc_collapse(c);
        expect_ok(hc_collapse(g, nullptr, fused ? tickets.dp() : nullptr, hc_kernel(path)));
        sync();
        const std::string t = tag((std::string("hc_collapse ") + hc_path_name(path)).c_str(), n_embd, rows);
        if (fused) {
          expect_fused_leftovers(tickets, flat, t);
        } else {
          same(flat, t + " flat");
        }
        same(mix, t + " mix");
        same(y, t + " y");
      }
    }
  }
}

// ---- Elementwise ------------------------------------------------------------------------------

TEST_F(FfnOps, EmbedBitsEqualCpu) {
  const int n_hc = 4, n_vocab = 37;
  for (int64_t n_embd : {64, 4096}) {
    const size_t row_bytes = 2 * n_embd + 4;  // padded rows: the stride is honoured
    std::vector<uint8_t> table(row_bytes * n_vocab);
    std::mt19937 rng(31);
    for (auto& b : table) b = static_cast<uint8_t>(rng());  // every f16 pattern: subnormals, inf, NaN
    auto dt = dual(table);
    for (int rows : kRowCounts) {
      std::vector<int32_t> tok(rows);
      for (auto& t : tok) t = static_cast<int32_t>(rng() % n_vocab);
      auto tokens = dual(tok);
      auto out = out_buf<float>(rows * n_hc * n_embd);
      backend::EmbedParams p;
      p.row_bytes = row_bytes, p.n_rows = rows, p.n_hc = n_hc, p.n_embd = n_embd;
      backend::EmbedParams c = p, g = p;
      c.table = dt.hp(), c.tokens = tokens.hp(), c.out = out.hp();
      g.table = dt.dp(), g.tokens = tokens.dp(), g.out = out.dp();
      cpu_->embed(c);
      expect_ok(embed(g, nullptr));
      sync();
      same(out, tag("embed", n_embd, rows) + " out");
    }
  }
}

// Values that exercise the NaN / inf / signed-zero / clamp paths, mixed into Gaussian data.
std::vector<float> with_specials(std::vector<float> v) {
  const float sp[] = {kNaN, kInf, -kInf, 0.0f, -0.0f, 10.0f, -10.0f, 1e-41f, -1e-41f, 30.0f, -30.0f, 88.0f, -100.0f};
  for (size_t i = 0; i < v.size(); i += 7) v[i] = sp[(i / 7) % (sizeof sp / sizeof sp[0])];
  return v;
}

TEST_F(FfnOps, AddBitsEqualCpu) {
  for (int64_t n : {1, 1000, 70001}) {
    auto a = dual(with_specials(gaussian(n, 41)));
    auto b = dual(gaussian(n, 42));
    auto out = out_buf<float>(n);
    cpu_->add(backend::AddParams{a.hp(), b.hp(), out.hp(), n});
    expect_ok(add(backend::AddParams{a.dp(), b.dp(), out.dp(), n}, nullptr));
    sync();
    same(out, "add n=" + std::to_string(n));
  }
}

TEST_F(FfnOps, HcMeanBitsEqualCpu) {
  const int n_hc = 4;
  for (int64_t n_embd : {64, 4096}) {
    for (int rows : kRowCounts) {
      auto x = dual(with_specials(gaussian(rows * n_hc * n_embd, 700 + rows)));
      const int64_t os = n_embd + 5;
      auto out = out_buf<float>(rows * os);
      backend::HcMeanParams p;
      p.n_hc = n_hc, p.n_embd = n_embd, p.n_rows = rows, p.out_stride = os;
      backend::HcMeanParams c = p, g = p;
      c.x = x.hp(), c.out = out.hp();
      g.x = x.dp(), g.out = out.dp();
      cpu_->hc_mean(c);
      expect_ok(hc_mean(g, nullptr));
      sync();
      same(out, tag("hc_mean", n_embd, rows) + " out");
    }
  }
}

TEST_F(FfnOps, SwigluBitsEqualCpu) {
  for (int64_t n : {1, 2048, 70001}) {
    auto gate = dual(with_specials(gaussian(n, 51, 8.0f)));
    auto up = dual(with_specials(gaussian(n, 52, 8.0f)));
    auto out = out_buf<float>(n);
    cpu_->swiglu(backend::SwigluParams{gate.hp(), up.hp(), out.hp(), n, 10.0f});
    expect_ok(swiglu(backend::SwigluParams{gate.dp(), up.dp(), out.dp(), n, 10.0f}, nullptr));
    sync();
    same(out, "swiglu n=" + std::to_string(n));
    // In place (out aliases gate).
    cpu_->swiglu(backend::SwigluParams{gate.hp(), up.hp(), gate.hp(), n, 7.0f});
    expect_ok(swiglu(backend::SwigluParams{gate.dp(), up.dp(), gate.dp(), n, 7.0f}, nullptr));
    sync();
    same(gate, "swiglu in place n=" + std::to_string(n));
  }
}

TEST_F(FfnOps, GetRowsBitsEqualCpu) {
  const GgmlType types[] = {GgmlType::kF32,  GgmlType::kF16,  GgmlType::kBF16, GgmlType::kQ8_0,
                            GgmlType::kQ8_K, GgmlType::kQ2_K, GgmlType::kQ4_K, GgmlType::kIQ2_XXS};
  const int64_t n_out = 40;
  for (GgmlType t : types) {
    for (int64_t n_in : {256, 4096}) {
      auto w = dual(random_weights(t, n_in, n_out, 61 + n_in + static_cast<int>(t), 0.5f));
      const backend::Matrix m{w.hp(), t, n_in, n_out, quant::row_bytes(t, n_in)};
      std::mt19937 rng(62);
      for (int rows : kRowCounts) {
        std::vector<int32_t> idv(rows);
        for (auto& i : idv) i = static_cast<int32_t>(rng() % n_out);
        auto ids = dual(idv);
        const int64_t os = n_in + 3;
        auto out = out_buf<float>(rows * os);
        backend::GetRowsParams c{m, ids.hp(), rows, out.hp(), os};
        backend::GetRowsParams g = c;
        g.w.data = w.dp(), g.ids = ids.dp(), g.out = out.dp();
        cpu_->get_rows(c);
        expect_ok(get_rows(g, nullptr));
        sync();
        same(out, std::string("get_rows ") + gguf::type_name(t) + " n_in=" + std::to_string(n_in) +
                      " rows=" + std::to_string(rows));
      }
    }
  }
}

TEST_F(FfnOps, ArgmaxEqualsCpu) {
  // Strides n + 1 (rows at every 16-byte misalignment: the kernel's scalar head) and n (the
  // head row's alignment: float4 loads from its first element).
  for (auto [n, stride] : {std::pair<int64_t, int64_t>{1, 2}, {7, 8}, {1000, 1001}, {129280, 129281}, {4096, 4096},
                           {129280, 129280}, {4099, 4099}}) {
    const int rows = 11;
    auto xv = gaussian(rows * stride, 71);
    std::mt19937 rng(72);
    for (int k = 0; k < rows; ++k) {
      float* r = xv.data() + k * stride;
      const int64_t a = static_cast<int64_t>(rng() % n), b = static_cast<int64_t>(rng() % n);
      switch (k % 6) {
        case 1: r[a] = 50.0f, r[b] = 50.0f; break;  // a tie: the smaller index wins
        case 2: r[0] = kNaN, r[a] = kNaN, r[b] = 60.0f; break;
        case 3: for (int64_t i = 0; i < n; ++i) r[i] = kNaN; break;  // all NaN: index 0
        case 4: r[a] = kInf, r[b] = kInf; break;
        case 5: for (int64_t i = 0; i < n; ++i) r[i] = -kInf; break;
        default: break;
      }
    }
    auto x = dual(xv);
    // Excluded ids: none, the first (the all-NaN fallback moves to 1), and a row's maximum.
    const int32_t top_of_row0 =
        static_cast<int32_t>(std::max_element(xv.begin(), xv.begin() + n) - xv.begin());
    for (int32_t excluded : {-1, 0, top_of_row0}) {
      auto out = out_buf<int32_t>(rows);
      cpu_->argmax(backend::ArgmaxParams{x.hp(), n, stride, rows, out.hp(), excluded});
      expect_ok(argmax(backend::ArgmaxParams{x.dp(), n, stride, rows, out.dp(), excluded}, nullptr));
      sync();
      same_ids(out, "argmax n=" + std::to_string(n) + " stride " + std::to_string(stride) + " excluded " +
                        std::to_string(excluded));
    }
  }
}

TEST_F(FfnOps, FillWritesValue) {
  auto out = out_buf<float>(1001);
  expect_ok(fill_f32(out.dp(), 1000, -0.0f, nullptr));
  sync();
  const auto got = out.device_values();
  for (int i = 0; i < 1000; ++i) ASSERT_TRUE(got[i] == 0.0f && std::signbit(got[i])) << "fill_f32 [" << i << "]";
  uint32_t last;
  std::memcpy(&last, &got[1000], 4);
  EXPECT_EQ(0x5a5a5a5au, last) << "fill_f32 wrote past n";
}

// ---- Router -----------------------------------------------------------------------------------

// Router logits with ties (equal scores must keep the lower expert id), both softplus tails, in
// row 1 a NaN (the kernel's sequential fallback) and in row 2 one value everywhere.
std::vector<float> router_logits(int rows, int n_expert, uint32_t seed) {
  auto v = gaussian(static_cast<size_t>(rows) * n_expert, seed, 2.0f);
  for (int k = 0; k < rows; ++k) {
    float* r = v.data() + static_cast<size_t>(k) * n_expert;
    for (int e = 5; e < n_expert; e += 13) r[e] = r[e - 3];
    r[1] = 25.0f, r[2] = -25.0f;
    r[n_expert - 1] = r[0];
    if (k == 1) r[7] = std::numeric_limits<float>::quiet_NaN();  // route_select's NaN path
    if (k == 2) std::fill(r, r + n_expert, 0.5f);                  // one tie over every tile
  }
  return v;
}

TEST_F(FfnOps, RouteBitsEqualCpu) {
  const int n_vocab = 50;
  // (n_expert, n_used): the Flash shape, partial 32-expert tiles, n_used above a tile, and a
  // shape with more candidate slots than the two-pass top-k holds (the all-pairs scan).
  const std::pair<int, int> shapes[] = {{16, 4}, {40, 6}, {256, 6}, {1000, 8}, {64, 40}, {4096, 16}};
  for (const auto& [n_expert, n_used] : shapes) {
    auto bias = dual(gaussian(n_expert, 81, 0.1f));
    std::vector<int32_t> table(n_vocab * n_used);
    std::mt19937 rng(82);
    for (auto& t : table) t = static_cast<int32_t>(rng() % n_expert);
    auto tid2eid = dual(table);
    for (int mode = 0; mode < 3; ++mode) {  // 0: top-k + bias, 1: top-k without bias, 2: hash rows
      for (int rows : kRowCounts) {
        auto logits = dual(router_logits(rows, n_expert, 83 + rows));
        std::vector<int32_t> tv(rows);
        for (auto& t : tv) t = static_cast<int32_t>(rng() % n_vocab);
        auto tokens = dual(tv);
        auto probs = out_buf<float>(rows * n_expert), wt = out_buf<float>(rows * n_used);
        auto sel = out_buf<int32_t>(rows * n_used);
        backend::RouteParams p;
        p.n_rows = rows, p.n_expert = n_expert, p.n_used = n_used, p.renorm = mode != 1, p.scale = 1.5f;
        backend::RouteParams c = p, g = p;
        c.logits = logits.hp(), c.probs = probs.hp(), c.sel = sel.hp(), c.wt = wt.hp(), c.tokens = tokens.hp();
        g.logits = logits.dp(), g.probs = probs.dp(), g.sel = sel.dp(), g.wt = wt.dp(), g.tokens = tokens.dp();
        if (mode == 0) c.bias = bias.hp(), g.bias = bias.dp();
        if (mode == 2) c.tid2eid = tid2eid.hp(), g.tid2eid = tid2eid.dp();
        cpu_->route(c);
        expect_ok(route(g, nullptr));
        sync();
        const std::string t = "route n_expert=" + std::to_string(n_expert) + " mode=" + std::to_string(mode) +
                              " rows=" + std::to_string(rows);
        same(probs, t + " probs");
        same_ids(sel, t + " sel");
        same(wt, t + " wt");
      }
    }
  }
}

// ---- MoE --------------------------------------------------------------------------------------

struct MoeCase {
  int64_t n_embd, n_ff;
  int n_expert, n_used;
  GgmlType gate_up, down;
  std::vector<int> rows;  // row counts to run
};

// Expert weights [n_expert × n_out rows × n_in]: the n_live experts listed in `live` hold
// random blocks, every other expert is zero bytes (a read of a wrong expert shows as a
// mismatch; the host only draws the experts the rows use).
std::vector<uint8_t> expert_weights(GgmlType t, int64_t n_in, int64_t n_out, int n_expert,
                                    const std::vector<int32_t>& live, uint64_t seed) {
  const size_t eb = quant::row_bytes(t, n_in) * static_cast<size_t>(n_out);
  std::vector<uint8_t> w(eb * static_cast<size_t>(n_expert), 0);
  const size_t rb = quant::row_bytes(t, n_in), bb = rb / static_cast<size_t>(n_in / quant::kQKK);
  for (int32_t e : live) {
    uint8_t* ew = w.data() + eb * static_cast<size_t>(e);
    quant::fill_random_blocks(t, ew, n_in * n_out, 0.05f, seed + e);
    // Holes: every 7th block of a live expert is zero bytes (scale 0, quants 0), as pruned or
    // padded weights are.
    for (int64_t o = 0; o < n_out; ++o)
      for (int64_t b = (o + e) % 7; b < n_in / quant::kQKK; b += 7) std::memset(ew + o * rb + b * bb, 0, bb);
  }
  return w;
}

// Flash-like cases have 256 experts of which 12 are live, spread over the id range (0 and 255
// included, so the largest expert offsets are exercised); each row picks n_used distinct live
// experts and rows share experts (40 rows: every live expert serves many rows). The small
// widths take the kernels' 2-byte staging path (rows not a multiple of 16 bytes), the Flash
// widths the 16-byte one; 10240 -> 3072 splits every row into several stages; 8 of 16 used runs
// the down sum over two slot groups. Every run adds a shared-expert row (MoeParams::add) in the
// final sum; the runs without one are MoeOneRowKernelsBitsEqualCpu's and MoeRows'.
TEST_F(FfnOps, MoeBitsEqualCpu) {
  const std::vector<int> all_rows(std::begin(kRowCounts), std::end(kRowCounts));
  std::vector<int> flash_rows = all_rows;
  flash_rows.push_back(40);
  const std::vector<int> few_rows = {1, 3, 8};
  const MoeCase cases[] = {
      {512, 256, 8, 3, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, all_rows},
      {512, 256, 8, 3, GgmlType::kQ4_K, GgmlType::kQ4_K, all_rows},
      {512, 256, 16, 8, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, few_rows},
      {4096, 2048, 256, 6, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, flash_rows},
      {4096, 2048, 256, 6, GgmlType::kQ4_K, GgmlType::kQ4_K, flash_rows},
      {10240, 3072, 4, 3, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, few_rows},
      {10240, 3072, 4, 3, GgmlType::kQ4_K, GgmlType::kQ4_K, few_rows},
  };
  for (const MoeCase& mc : cases) {
    const int64_t E = mc.n_embd, F = mc.n_ff;
    const uint64_t seed = static_cast<uint64_t>(E + F + static_cast<int>(mc.gate_up));
    std::vector<int32_t> live;
    if (mc.n_expert <= 12) {
      for (int e = 0; e < mc.n_expert; ++e) live.push_back(e);
    } else {
      for (int k = 0; k < 12; ++k) live.push_back(static_cast<int32_t>(k * (mc.n_expert - 1) / 11));
    }
    auto gw = dual(expert_weights(mc.gate_up, E, F, mc.n_expert, live, seed + 1000));
    auto uw = dual(expert_weights(mc.gate_up, E, F, mc.n_expert, live, seed + 2000));
    auto dw = dual(expert_weights(mc.down, F, E, mc.n_expert, live, seed + 3000));
    auto em = [&](const Dual<uint8_t>& w, GgmlType t, int64_t n_in, int64_t n_out, bool dev) {
      return backend::ExpertMatrix{dev ? w.dp() : w.h.data(), t, n_in, n_out, mc.n_expert, quant::row_bytes(t, n_in)};
    };
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (int rows : mc.rows) {
      std::vector<int32_t> sv;
      for (int i = 0; i < rows; ++i) {
        std::vector<int32_t> ids = live;
        std::shuffle(ids.begin(), ids.end(), rng);
        sv.insert(sv.end(), ids.begin(), ids.begin() + mc.n_used);
      }
      auto sel = dual(sv);
      std::vector<float> wv(sv.size());
      std::uniform_real_distribution<float> uni(0.05f, 0.6f);
      for (auto& w : wv) w = uni(rng);
      auto wt = dual(wv);
      auto x = dual(gaussian(rows * E, static_cast<uint32_t>(900 + rows)));
      auto sh = dual(gaussian(rows * E, static_cast<uint32_t>(950 + rows)));  // MoeParams::add
      auto out = out_buf<float>(rows * E);
      const size_t cpu_bytes = backend::moe_scratch_bytes(E, F, mc.n_used, rows);
      const size_t gpu_bytes = moe_device_scratch_bytes(E, F, mc.n_used, rows);
      ASSERT_LE(gpu_bytes, cpu_bytes) << "moe scratch: the CUDA layout must fit moe_scratch_bytes";
      std::vector<uint8_t> hs(cpu_bytes + 64);
      DeviceBuf ds(cpu_bytes);
      backend::MoeParams p;
      p.n_used = mc.n_used, p.n_rows = rows, p.clamp = 10.0f;
      backend::MoeParams c = p, g = p;
      c.x = x.hp(), c.sel = sel.hp(), c.wt = wt.hp(), c.out = out.hp(), c.scratch = hs.data();
      c.gate = em(gw, mc.gate_up, E, F, false), c.up = em(uw, mc.gate_up, E, F, false), c.down = em(dw, mc.down, F, E, false);
      g.x = x.dp(), g.sel = sel.dp(), g.wt = wt.dp(), g.out = out.dp(), g.scratch = ds.as<void>();
      g.gate = em(gw, mc.gate_up, E, F, true), g.up = em(uw, mc.gate_up, E, F, true), g.down = em(dw, mc.down, F, E, true);
      c.add = sh.hp(), g.add = sh.dp();  // the shared expert added by the final sum (every kernel)
      cpu_->moe(c);
      // The kernels before issue #30's rewrites, then the rewrites (moe_r1.cu at one row,
      // moe_rows.cu at two or more, its dp4a and its tensor-core dots): the same bits.
      const MoeR1Kernel saved_r1 = moe_r1_kernel();
      const MoeRowsKernel saved_rows = moe_rows_kernel();
      for (const MoeRowsKernel rows_kernel : {MoeRowsKernel::kPairs, MoeRowsKernel::kGrouped, MoeRowsKernel::kTensor}) {
        const bool rewritten = rows_kernel != MoeRowsKernel::kPairs;
        set_moe_r1_kernel(rewritten ? MoeR1Kernel::kNew : MoeR1Kernel::kOld);
        set_moe_rows_kernel(rows_kernel);
        out.d->poison();  // NaN everywhere: an output the kernels leave unwritten shows
        ds.poison();      // so does a scratch row (mid, midq, xq) the kernels leave unwritten
        expect_ok(moe(g, nullptr));
        sync();
        same(out, std::string("moe ") + gguf::type_name(mc.gate_up) + "/" + gguf::type_name(mc.down) +
                      " n_embd=" + std::to_string(E) + " n_ff=" + std::to_string(F) + " used=" +
                      std::to_string(mc.n_used) + " rows=" + std::to_string(rows) +
                      (!rewritten ? " (per-pair kernels)"
                       : rows_kernel == MoeRowsKernel::kTensor ? " (moe_r1 / moe_rows tensor-core kernels)"
                                                               : " (moe_r1 / moe_rows kernels)"));
      }
      set_moe_r1_kernel(saved_r1);
      set_moe_rows_kernel(saved_rows);
    }
  }
}

// Restores the process-wide one-row MoE kernel choice (MoeR1Kernel) when a scope ends.
struct MoeR1Scope {
  explicit MoeR1Scope(MoeR1Kernel k) : saved(moe_r1_kernel()) { set_moe_r1_kernel(k); }
  ~MoeR1Scope() { set_moe_r1_kernel(saved); }
  MoeR1Kernel saved;
};

// One token row (decode) under both MoeR1Kernel choices: kNew runs moe_r1.cu's kernels on every
// shape below (16-byte rows, at most 16 super-blocks, at most 8 slots: Flash's q2 and q4
// experts, small widths of 1..8 blocks, 8 slots), kOld the warp kernels; both must give the CPU
// backend's bits. x holds special values: an all-zero super-block (d = 0), a subnormal, a
// maximum of both signs, huge and tiny magnitudes in one block; one case routes a slot to an
// out-of-range expert id (NaN, no read) and one to a zero expert (zero weights).
TEST_F(FfnOps, MoeOneRowKernelsBitsEqualCpu) {
  struct Case {
    int64_t n_embd, n_ff;
    int n_expert, n_used;
    GgmlType gate_up, down;
    int bad_slot;  // -1: none; else that slot's id is n_expert (out of range)
  };
  const Case cases[] = {
      {4096, 2048, 256, 6, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, -1},
      {4096, 2048, 256, 6, GgmlType::kQ4_K, GgmlType::kQ4_K, -1},
      {4096, 2048, 256, 6, GgmlType::kQ2_K, GgmlType::kIQ2_XXS, -1},
      {2048, 1024, 16, 3, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, -1},
      {512, 256, 16, 8, GgmlType::kQ4_K, GgmlType::kQ4_K, -1},
      {3072, 1280, 16, 5, GgmlType::kQ4_K, GgmlType::kQ4_K, -1},
      {4096, 2048, 16, 6, GgmlType::kIQ2_XXS, GgmlType::kQ2_K, 4},
  };
  for (const Case& mc : cases) {
    const int64_t E = mc.n_embd, F = mc.n_ff;
    const uint64_t seed = static_cast<uint64_t>(3 * E + F + static_cast<int>(mc.gate_up));
    std::vector<int32_t> live;
    for (int k = 0; k < 12 && k < mc.n_expert; ++k)
      live.push_back(static_cast<int32_t>(k * (mc.n_expert - 1) / std::max(1, std::min(12, mc.n_expert) - 1)));
    auto gw = dual(expert_weights(mc.gate_up, E, F, mc.n_expert, live, seed + 1000));
    auto uw = dual(expert_weights(mc.gate_up, E, F, mc.n_expert, live, seed + 2000));
    auto dw = dual(expert_weights(mc.down, F, E, mc.n_expert, live, seed + 3000));
    auto em = [&](const Dual<uint8_t>& w, GgmlType t, int64_t n_in, int64_t n_out, bool dev) {
      return backend::ExpertMatrix{dev ? w.dp() : w.h.data(), t, n_in, n_out, mc.n_expert, quant::row_bytes(t, n_in)};
    };
    std::mt19937 rng(static_cast<uint32_t>(seed));
    std::vector<int32_t> ids = live;
    std::shuffle(ids.begin(), ids.end(), rng);
    std::vector<int32_t> sv(ids.begin(), ids.begin() + mc.n_used);
    if (mc.bad_slot >= 0) sv[static_cast<size_t>(mc.bad_slot)] = mc.n_expert;
    if (mc.n_expert > 12) sv[0] = mc.n_expert - 2;  // not live: all-zero weights (a read of zero bytes)
    auto sel = dual(sv);
    std::vector<float> wv(sv.size());
    std::uniform_real_distribution<float> uni(0.05f, 0.6f);
    for (auto& w : wv) w = uni(rng);
    auto wt = dual(wv);
    std::vector<float> xv = gaussian(static_cast<size_t>(E), static_cast<uint32_t>(seed + 7));
    std::fill(xv.begin(), xv.begin() + 256, 0.0f);  // super-block 0 all zero: d = 0
    if (E >= 512) {
      xv[300] = 1e-41f;                        // a subnormal
      xv[301] = 37.0f, xv[302] = -37.0f;       // the block's maximum with both signs
      xv[303] = 1e-30f, xv[304] = -3e-30f;     // far below the block's scale: code 0
    }
    if (E >= 1024) xv[700] = -1e4f;            // one huge value: the rest of its block rounds to 0
    auto x = dual(std::move(xv));
    for (MoeR1Kernel k : {MoeR1Kernel::kOld, MoeR1Kernel::kNew}) {
      MoeR1Scope scope(k);
      auto out = out_buf<float>(E);
      const size_t cpu_bytes = backend::moe_scratch_bytes(E, F, mc.n_used, 1);
      std::vector<uint8_t> hs(cpu_bytes + 64);
      DeviceBuf ds(cpu_bytes);
      backend::MoeParams p;
      p.n_used = mc.n_used, p.n_rows = 1, p.clamp = 10.0f;
      backend::MoeParams c = p, g = p;
      c.x = x.hp(), c.sel = sel.hp(), c.wt = wt.hp(), c.out = out.hp(), c.scratch = hs.data();
      c.gate = em(gw, mc.gate_up, E, F, false), c.up = em(uw, mc.gate_up, E, F, false), c.down = em(dw, mc.down, F, E, false);
      g.x = x.dp(), g.sel = sel.dp(), g.wt = wt.dp(), g.out = out.dp(), g.scratch = ds.as<void>();
      g.gate = em(gw, mc.gate_up, E, F, true), g.up = em(uw, mc.gate_up, E, F, true), g.down = em(dw, mc.down, F, E, true);
      if (mc.bad_slot < 0) cpu_->moe(c);  // an out-of-range id: the device's NaN, no CPU reference
      ds.poison();  // a fresh allocation may hold the last kernel's scratch: an unwritten row shows
      expect_ok(moe(g, nullptr));
      sync();
      const std::string what = std::string("moe one row ") + (k == MoeR1Kernel::kNew ? "new " : "old ") +
                               gguf::type_name(mc.gate_up) + "/" + gguf::type_name(mc.down) + " n_embd=" +
                               std::to_string(E) + " n_ff=" + std::to_string(F) + " used=" + std::to_string(mc.n_used);
      if (mc.bad_slot < 0) {
        same(out, what);
      } else {
        const auto got = out.device_values();
        for (int64_t o = 0; o < E; ++o) ASSERT_TRUE(std::isnan(got[static_cast<size_t>(o)])) << what << " o=" << o;
      }
    }
    // The rewritten kernels themselves take every shape above (a silent fall-back to the warp
    // kernels would pass the comparison): their entry points launch (done) on the case's
    // experts; the inputs here are zeros, the bits were compared through moe() above.
    auto ew = [](const backend::ExpertMatrix& m) {
      return ExpertWeights{m.data, m.row_bytes, m.expert_bytes(), m.n_in, m.n_out, m.n_expert};
    };
    const auto fmt = [](GgmlType t) {
      return t == GgmlType::kIQ2_XXS ? ExpertFormat::kIQ2_XXS
                                     : t == GgmlType::kQ2_K ? ExpertFormat::kQ2_K : ExpertFormat::kQ4_K;
    };
    DeviceBuf xq(sizeof(quant::BlockQ8K) * static_cast<size_t>(E / quant::kQKK)),
        mid(sizeof(float) * static_cast<size_t>(mc.n_used * F)),
        midq(sizeof(quant::BlockQ8K) * static_cast<size_t>(mc.n_used * F / quant::kQKK)), o(sizeof(float) * E);
    {
      const std::vector<uint8_t> zeros(std::max(xq.bytes(), midq.bytes()), 0);
      xq.put(zeros.data(), xq.bytes());
      midq.put(zeros.data(), midq.bytes());
    }
    bool done = false;
    expect_ok(expert_gate_up_r1(fmt(mc.gate_up), ew(em(gw, mc.gate_up, E, F, true)), ew(em(uw, mc.gate_up, E, F, true)),
                                sel.dp(), wt.dp(), mc.n_used, xq.as<quant::BlockQ8K>(), 10.0f, mid.as<float>(), nullptr,
                                &done));
    EXPECT_TRUE(done) << "expert_gate_up_r1 did not take " << gguf::type_name(mc.gate_up) << " " << E << "x" << F;
    done = false;
    expect_ok(expert_down_sum_r1(fmt(mc.down), ew(em(dw, mc.down, F, E, true)), sel.dp(), mc.n_used,
                                 midq.as<quant::BlockQ8K>(), nullptr, o.as<float>(), nullptr, &done));
    EXPECT_TRUE(done) << "expert_down_sum_r1 did not take " << gguf::type_name(mc.down) << " " << F << "x" << E;
    sync();
  }
}

// ---- Q8_0 matmul of one row (the fused path) ---------------------------------------------------

// Whether any byte of a poisoned (0xff) device buffer changed.
bool poison_changed(const DeviceBuf& b) {
  const auto v = b.get_vec<uint8_t>(b.bytes());
  return std::count(v.begin(), v.end(), uint8_t{0xff}) != static_cast<ptrdiff_t>(v.size());
}


// matmul of ONE row on Q8_0 weights (n_out rows g·n_out.. of a larger matrix, x inside a padded
// row) on every r = 1 path: kStaged must run it as one launch where the staged
// kernel takes the shape (n_in a multiple of 256): the row quantized inside the matvec, the
// scratch never written; kStagedPrequant and kWarp (and kStaged on other shapes, or an x not
// 16-byte aligned: x_off floats into its buffer) the two launches through the scratch; so does
// kWide (the wide kernel after a quantize launch); kWideFused is one launch (the wide kernel
// quantizing the row) where the shape is taken, and so is kAuto for n_in <= 4096. All give the
// CPU backend's bits.
void matmul_r1_case(backend::Backend& cpu, int64_t n_in, int64_t n_out, uint64_t seed, int64_t x_off = 0) {
  const int64_t g = 1, pad = 5;  // the second n_out rows of a 2·n_out-row matrix
  const size_t rb = quant::row_bytes(GgmlType::kQ8_0, n_in);
  const auto wh = random_weights(GgmlType::kQ8_0, n_in, 2 * n_out, seed);
  auto wd = test_util::to_device(wh);
  auto xv = gaussian(static_cast<size_t>(x_off + n_in + pad), static_cast<uint32_t>(seed) + 1);
  float* row = xv.data() + x_off;
  std::fill(row, row + std::min<int64_t>(32, n_in), 0.0f);  // an all-zero block: d = 0
  if (n_in >= 128) row[70] = 1e-41f, row[100] = -row[99];  // a subnormal; a maximum of both signs
  auto x = dual(std::move(xv));
  const bool takes = n_in % 256 == 0 && x_off % 4 == 0;
  for (Q8_0R1Kernel k : {Q8_0R1Kernel::kStaged, Q8_0R1Kernel::kStagedPrequant, Q8_0R1Kernel::kWarp,
                        Q8_0R1Kernel::kWide, Q8_0R1Kernel::kWideFused, Q8_0R1Kernel::kAuto}) {
    const char* mode = k == Q8_0R1Kernel::kStaged      ? "staged"
                       : k == Q8_0R1Kernel::kWarp      ? "warp"
                       : k == Q8_0R1Kernel::kWide      ? "wide"
                       : k == Q8_0R1Kernel::kWideFused ? "wide-fused"
                       : k == Q8_0R1Kernel::kAuto      ? "auto"
                                                       : "prequant";
    // One launch: the staged or the wide kernel quantizing the row itself (kAuto: the wide one
    // for rows of <= kR1WideFusedMaxIn inputs, and on the persistent grid up to
    // kR1WidePersistentFusedMaxIn; every n_out here is below the head).
    const bool auto_fuses = n_in <= kR1WideFusedMaxIn ||
                            (wide_persistent_takes(n_in, 1) && n_in <= kR1WidePersistentFusedMaxIn);
    const bool fused = takes && (k == Q8_0R1Kernel::kStaged || k == Q8_0R1Kernel::kWideFused ||
                                 (k == Q8_0R1Kernel::kAuto && auto_fuses));
    const std::string what = "matmul q8_0 " + std::to_string(n_in) + "x" + std::to_string(n_out) + " rows=1 x+" +
                             std::to_string(x_off) + " " + mode;
    auto y = out_buf<float>(static_cast<size_t>(n_out + pad));
    backend::MatmulParams hp, dp;
    for (int side = 0; side < 2; ++side) {
      backend::MatmulParams& p = side == 0 ? hp : dp;
      const uint8_t* base = side == 0 ? wh.data() : wd->as<uint8_t>();
      p.w = backend::Matrix{base, GgmlType::kQ8_0, n_in, 2 * n_out, rb}.rows(g * n_out, n_out);
      p.x = (side == 0 ? x.hp() : x.dp()) + x_off;
      p.x_stride = n_in + pad;
      p.y = side == 0 ? y.hp() : y.dp();
      p.y_stride = n_out + pad;
      p.n_rows = 1;
    }
    cpu.matmul(hp);
    DeviceBuf scratch(matmul_scratch_bytes(n_in, 1));
    scratch.poison();
    {
      R1KernelScope scope(k);
      const Status s = matmul(dp, OpScratch{scratch.data(), scratch.bytes()}, nullptr);
      ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
      ASSERT_TRUE(synchronize().ok());
    }
    const auto got = y.device_values();
    EXPECT_EQ(0u, bit_mismatches(got.data(), y.h.data(), y.h.size(), what)) << what;
    EXPECT_EQ(!fused, poison_changed(scratch))
        << what << ": one launch (scratch untouched) exactly when fused";
  }
}

TEST_F(FfnOps, MatmulR1FusedBitsEqualCpu) {
  // The Flash Q8_0 shapes decode runs at one row (attn_kv 4096 -> 512, the output-LoRA half
  // 4096 -> 1024, attn_q_b 1024 -> 32768, the output projections 8192 / 32768 -> 4096, the
  // shared expert 4096 <-> 2048), odd ones the staged kernel takes (72 blocks: a partial step;
  // one output row; a partial last CTA) and ones it does not (96, 1056, 4160 inputs: not whole
  // steps of 8 blocks), which keep the two launches. Row counts keep the selected rows 4-byte
  // aligned (the Q8_0 kernels' contract; DS4's rows are 272·k bytes).
  struct Shape {
    int64_t n_in, n_out;
  };
  // The wide kernel on both grids (a CTA per row group; persistent).
  for (const bool persistent : {false, true}) {
    SCOPED_TRACE(persistent ? "persistent wide grid" : "a CTA per row group");
    PersistentScope grid(persistent);
    for (const Shape sh : {Shape{4096, 512}, Shape{4096, 1024}, Shape{1024, 32768}, Shape{8192, 4096},
                           Shape{32768, 4096}, Shape{4096, 2048}, Shape{2048, 4096}, Shape{2304, 1030}, Shape{256, 1},
                           Shape{1024, 4099}, Shape{96, 14}, Shape{1056, 38}, Shape{4160, 3}}) {
      matmul_r1_case(*cpu_, sh.n_in, sh.n_out, 1300 + sh.n_in + sh.n_out);
      if (HasFatalFailure()) return;
    }
  }
  // x 4 bytes past 16-byte alignment: the fused kernel's 16-byte loads cannot take it.
  matmul_r1_case(*cpu_, 4096, 1024, 1400, /*x_off=*/1);
  matmul_r1_case(*cpu_, 4096, 1024, 1401, /*x_off=*/4);  // aligned again: fused
}

// A matmul's folded input norm (MatmulParams::normed; q_b after q_a's norm): the device's y and
// normed equal the CPU's bit for bit, weighted and unweighted, at one row (the wide kernel folds
// it under kAuto and kWideFused, set_fold_input_norm on; an rms_norm launch, then the matmul,
// under kStaged or with the switch off) and at three rows (rms_norm, then the matmul), x rows
// strided.
TEST_F(FfnOps, MatmulFoldedNormBitsEqualCpu) {
  struct FoldScope {  // set_fold_input_norm back to its default when the test ends
    ~FoldScope() { set_fold_input_norm(false); }
  } fold_scope;
  struct Shape {
    int64_t n_in, n_out;
  };
  for (const bool fold : {true, false}) {
    set_fold_input_norm(fold);
    SCOPED_TRACE(fold ? "the wide kernel folds the norm" : "rms_norm launch, then the matmul");
    for (const Shape sh : {Shape{1024, 32768}, Shape{1024, 160}, Shape{512, 12}, Shape{4096, 1024}}) {
      const int64_t pad = 4;  // x rows n_in + pad apart (16-byte aligned rows)
      const size_t rb = quant::row_bytes(GgmlType::kQ8_0, sh.n_in);
      const auto wh = random_weights(GgmlType::kQ8_0, sh.n_in, sh.n_out, 2100 + sh.n_out);
      auto wd = test_util::to_device(wh);
      auto nw = dual(gaussian(static_cast<size_t>(sh.n_in), 2200));
      for (int rows : {1, 3}) {
        auto xv = gaussian(static_cast<size_t>(rows * (sh.n_in + pad)), static_cast<uint32_t>(2300 + rows));
        for (int64_t i = 0; i < sh.n_in; i += 7) xv[i] *= 40.0f;  // a spread of magnitudes
        auto x = dual(std::move(xv));
        for (const bool weighted : {true, false})
        for (Q8_0R1Kernel k : {Q8_0R1Kernel::kAuto, Q8_0R1Kernel::kWideFused, Q8_0R1Kernel::kStaged}) {
          const std::string what = "matmul+norm " + std::to_string(sh.n_in) + "x" + std::to_string(sh.n_out) +
                                   " rows=" + std::to_string(rows) + (weighted ? " weighted" : " unweighted") +
                                   (k == Q8_0R1Kernel::kAuto ? " auto" : k == Q8_0R1Kernel::kWideFused ? " wide-fused" : " staged");
          auto y = out_buf<float>(static_cast<size_t>(rows * sh.n_out));
          auto normed = out_buf<float>(static_cast<size_t>(rows * (sh.n_in + pad)));
          backend::MatmulParams hp, dp;
          for (int side = 0; side < 2; ++side) {
            backend::MatmulParams& p = side == 0 ? hp : dp;
            p.w = backend::Matrix{side == 0 ? wh.data() : wd->as<uint8_t>(), GgmlType::kQ8_0, sh.n_in, sh.n_out, rb};
            p.x = side == 0 ? x.hp() : x.dp();
            p.x_stride = sh.n_in + pad;
            p.y = side == 0 ? y.hp() : y.dp();
            p.y_stride = sh.n_out;
            p.n_rows = rows;
            p.normed = side == 0 ? normed.hp() : normed.dp();
            p.norm_weight = weighted ? (side == 0 ? nw.hp() : nw.dp()) : nullptr;
            p.norm_eps = 1e-6f;
          }
          cpu_->matmul(hp);
          DeviceBuf scratch(matmul_scratch_bytes(sh.n_in, rows));
          scratch.poison();
          {
            R1KernelScope scope(k);
            const Status s = matmul(dp, OpScratch{scratch.data(), scratch.bytes()}, nullptr);
            ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
            ASSERT_TRUE(synchronize().ok());
          }
          same(y, what + " y");
          const auto got = normed.device_values();
          for (int r = 0; r < rows; ++r)  // the rows' first n_in values (the pad is not the op's)
            EXPECT_EQ(0u, bit_mismatches(got.data() + r * (sh.n_in + pad), normed.h.data() + r * (sh.n_in + pad),
                                         static_cast<size_t>(sh.n_in), what + " normed"))
                << what;
          if (fold && rows == 1 && k != Q8_0R1Kernel::kStaged && sh.n_in <= kR1WideFusedMaxIn) {
            EXPECT_FALSE(poison_changed(scratch)) << what << ": the row quantized in the kernel, not in the scratch";
          }
        }
      }
    }
  }
}

// ---- F16 / F32 matmul of many rows (prefill: the compressor / indexer projections) ------------

// Restores the process-wide dense many-row kernel choice when a test ends.
struct DenseRowsScope {
  explicit DenseRowsScope(DenseRowsKernel k) : saved(dense_rows_kernel()) { set_dense_rows_kernel(k); }
  ~DenseRowsScope() { set_dense_rows_kernel(saved); }
  DenseRowsKernel saved;
};

// matmul of n_rows rows on F16 / F32 weights (x rows x_stride = n_in + pad apart, y rows
// n_out + pad apart) under both DenseRowsKernel choices (kWide: the many-row kernel for
// n_rows > kMaxRows; kTiles8: the r <= 8 kernels per 8 rows) against the CPU backend, bit for
// bit; x carries with_specials' values (NaN, ±inf, ±0, subnormals) in its first rows, Gaussian
// rows after them. Then each of a few rows alone (n_rows = 1, its own pointer) must give the
// bits it got in the batch.
void matmul_dense_rows_case(backend::Backend& cpu, GgmlType t, int64_t n_in, int64_t n_out, int n_rows,
                            uint64_t seed) {
  const int64_t pad = 3;
  const size_t rb = quant::row_bytes(t, n_in);
  const auto wh = random_weights(t, n_in, n_out, seed);
  auto wd = test_util::to_device(wh);
  const int64_t xs = n_in + pad;
  auto xv = gaussian(static_cast<size_t>(n_rows * xs), static_cast<uint32_t>(seed) + 1);
  const size_t special_rows = static_cast<size_t>(std::min(n_rows, 3)) * static_cast<size_t>(xs);
  std::vector<float> head(xv.begin(), xv.begin() + static_cast<ptrdiff_t>(special_rows));
  head = with_specials(std::move(head));
  std::copy(head.begin(), head.end(), xv.begin());
  if (n_rows > 4) {  // a row of finite specials only: ±0, subnormals, large values
    float* r4 = xv.data() + 4 * xs;
    for (int64_t i = 0; i < n_in; i += 5) r4[i] = (i / 5) % 3 == 0 ? -0.0f : (i / 5) % 3 == 1 ? 1e-41f : -30.0f;
  }
  auto x = dual(std::move(xv));
  const std::string shape = std::string(gguf::type_name(t)) + " " + std::to_string(n_in) + "x" +
                            std::to_string(n_out) + " rows=" + std::to_string(n_rows);
  for (DenseRowsKernel k : {DenseRowsKernel::kWide, DenseRowsKernel::kTiles8}) {
    const std::string what = "matmul " + shape + (k == DenseRowsKernel::kWide ? " wide" : " tiles8");
    const int64_t ys = n_out + pad;
    auto y = out_buf<float>(static_cast<size_t>(n_rows * ys));
    backend::MatmulParams hp, dp;
    for (int side = 0; side < 2; ++side) {
      backend::MatmulParams& p = side == 0 ? hp : dp;
      p.w = backend::Matrix{side == 0 ? wh.data() : wd->as<uint8_t>(), t, n_in, n_out, rb};
      p.x = side == 0 ? x.hp() : x.dp();
      p.x_stride = xs;
      p.y = side == 0 ? y.hp() : y.dp();
      p.y_stride = ys;
      p.n_rows = n_rows;
    }
    cpu.matmul(hp);
    DenseRowsScope scope(k);
    const Status s = matmul(dp, OpScratch{}, nullptr);
    ASSERT_TRUE(s.ok()) << what << ": " << s.to_string();
    ASSERT_TRUE(synchronize().ok());
    const auto got = y.device_values();
    EXPECT_EQ(0u, bit_mismatches(got.data(), y.h.data(), y.h.size(), what)) << what;
    // Rows alone: the first, one with specials, the last.
    for (int row : {0, std::min(n_rows - 1, 2), n_rows - 1}) {
      auto y1 = out_buf<float>(static_cast<size_t>(n_out));
      backend::MatmulParams p1 = dp;
      p1.x = x.dp() + row * xs;
      p1.y = y1.dp();
      p1.y_stride = n_out;
      p1.n_rows = 1;
      const Status s1 = matmul(p1, OpScratch{}, nullptr);
      ASSERT_TRUE(s1.ok()) << what << " row alone: " << s1.to_string();
      ASSERT_TRUE(synchronize().ok());
      const auto alone = y1.device_values();
      EXPECT_EQ(0u, bit_mismatches(alone.data(), got.data() + row * ys, static_cast<size_t>(n_out),
                                   what + " row " + std::to_string(row) + " alone vs in the batch"));
    }
  }
}

TEST_F(FfnOps, MatmulDenseRowsBitsEqualCpu) {
  // The prefill shapes (compressor / indexer projections 4096 -> 256 / 512 / 1024 at the
  // 32-row chunk), partial tiles of rows (9, 17, 33, 100) and of outputs (3), odd n_in (4097: a
  // tail of 1, no 16-byte row alignment; 100: one step and a tail of 36).
  struct Shape {
    int64_t n_in, n_out;
  };
  for (GgmlType t : {GgmlType::kF16, GgmlType::kF32}) {
    for (const Shape sh : {Shape{4096, 256}, Shape{4096, 512}, Shape{4096, 1024}, Shape{4096, 3}, Shape{4097, 256},
                           Shape{100, 3}, Shape{100, 512}}) {
      for (int rows : {9, 16, 17, 32, 33, 100}) {
        matmul_dense_rows_case(*cpu_, t, sh.n_in, sh.n_out, rows, 1500 + sh.n_in + sh.n_out + rows);
        if (HasFatalFailure()) return;
      }
    }
  }
}

// ---- Grouped matmul (the attention output LoRA) ------------------------------------------------

// matmul_grouped as session/block.cpp's attention_output calls it: group g reads columns
// [g·n_in, +n_in) of x rows x_stride apart and writes columns [g·n_out, +n_out) of y rows
// y_stride apart, its weights rows [g·n_out, +n_out) of one matrix. `mixed` gives the last
// group half the rows (a list the one-launch path declines: the per-group loop).
// scratch_written (when given): whether the op wrote its scratch (the fused one-row path does not).
void grouped_case(backend::Backend& cpu, int n_groups, int64_t n_in, int64_t n_out, int rows, int64_t pad,
                  bool mixed, uint64_t seed, bool* scratch_written = nullptr) {
  const int64_t x_stride = n_groups * n_in + pad, y_stride = n_groups * n_out + pad;
  const auto wh = random_weights(GgmlType::kQ8_0, n_in, n_groups * n_out, seed);
  auto wd = test_util::to_device(wh);
  const size_t rb = quant::row_bytes(GgmlType::kQ8_0, n_in);
  auto xv = gaussian(static_cast<size_t>(rows * x_stride), static_cast<uint32_t>(seed) + 1);
  std::fill(xv.begin(), xv.begin() + std::min<int64_t>(32, n_in), 0.0f);  // an all-zero block: d = 0
  auto x = dual(std::move(xv));
  auto y = out_buf<float>(static_cast<size_t>(rows * y_stride));
  std::vector<backend::MatmulParams> hp(n_groups), dp(n_groups);
  for (int g = 0; g < n_groups; ++g) {
    const int64_t cnt = mixed && g == n_groups - 1 ? (n_out + 1) / 2 : n_out;
    for (int side = 0; side < 2; ++side) {
      backend::MatmulParams& p = side == 0 ? hp[g] : dp[g];
      const uint8_t* base = side == 0 ? wh.data() : wd->as<uint8_t>();
      p.w = backend::Matrix{base, GgmlType::kQ8_0, n_in, n_groups * n_out, rb}.rows(g * n_out, cnt);
      p.x = (side == 0 ? x.hp() : x.dp()) + g * n_in;
      p.x_stride = x_stride;
      p.y = (side == 0 ? y.hp() : y.dp()) + g * n_out;
      p.y_stride = y_stride;
      p.n_rows = rows;
    }
  }
  bool aligned = true;  // the grouped kernel needs each group's weights 4-byte aligned
  for (int g = 0; g < n_groups; ++g) aligned = aligned && reinterpret_cast<uintptr_t>(dp[g].w.data) % 4 == 0;
  EXPECT_EQ(!mixed && n_groups >= 2 && aligned, grouped_q8_0(dp.data(), n_groups));
  cpu.matmul_grouped(hp.data(), n_groups);
  DeviceBuf scratch(matmul_grouped_scratch_bytes(dp.data(), n_groups));
  scratch.poison();
  const OpScratch sc{scratch.data(), matmul_grouped_scratch_bytes(dp.data(), n_groups)};
  const Status s = matmul_grouped(dp.data(), n_groups, sc, nullptr);
  ASSERT_TRUE(s.ok()) << s.to_string();
  ASSERT_TRUE(synchronize().ok());
  if (scratch_written != nullptr) *scratch_written = poison_changed(scratch);
  const auto got = y.device_values();
  const std::string what = "matmul_grouped " + std::to_string(n_groups) + "x(" + std::to_string(n_in) + "x" +
                           std::to_string(n_out) + ") rows=" + std::to_string(rows) + (mixed ? " mixed" : "");
  EXPECT_EQ(0u, bit_mismatches(got.data(), y.h.data(), y.h.size(), what)) << what;
}

TEST_F(FfnOps, MatmulGroupedBitsEqualCpu) {
  // Flash: 8 groups of 4096 -> 1024 (heads 8 x 4096 wide, o_lora_rank 1024), strides exact.
  for (int rows : kRowCounts) grouped_case(*cpu_, 8, 4096, 1024, rows, 0, false, 900 + rows);
  // rows = 1 on every r = 1 path: kStaged fuses the quantization into the staged
  // kernel, one launch that never writes the scratch; kStagedPrequant (the staged kernel after a
  // quantize launch) and kWarp (the kernels before it) write it. A group list whose weights are
  // not 16-byte aligned (2 x 64 inputs: 68-byte rows) or not whole steps (96 inputs) keeps the
  // two launches under kStaged too.
  // kWide (the wide kernel after a quantize launch) writes it too; kWideFused (the wide kernel
  // quantizing each group's row) is one launch like kStaged.
  // The wide paths on both grids (persistent: each CTA walks several row groups of its group).
  for (const bool persistent : {false, true}) {
    PersistentScope grid(persistent);
    for (Q8_0R1Kernel k : {Q8_0R1Kernel::kStaged, Q8_0R1Kernel::kStagedPrequant, Q8_0R1Kernel::kWarp,
                           Q8_0R1Kernel::kWide, Q8_0R1Kernel::kWideFused}) {
      if (persistent && k != Q8_0R1Kernel::kWide && k != Q8_0R1Kernel::kWideFused) continue;
      R1KernelScope scope(k);
      const bool fused = k == Q8_0R1Kernel::kStaged || k == Q8_0R1Kernel::kWideFused;
      bool written = false;
      grouped_case(*cpu_, 8, 4096, 1024, 1, 0, false, 901, &written);
      EXPECT_EQ(!fused, written) << "8x(4096x1024) rows=1 mode " << static_cast<int>(k);
      grouped_case(*cpu_, 3, 2304, 37, 1, 3, false, 902, &written);
      EXPECT_EQ(!fused, written) << "3x(2304x37) rows=1 mode " << static_cast<int>(k);
      grouped_case(*cpu_, 2, 64, 4101, 1, 3, false, 903, &written);
      EXPECT_TRUE(written) << "2x(64x4101) rows=1 mode " << static_cast<int>(k);
      grouped_case(*cpu_, 3, 96, 38, 1, 3, false, 904, &written);
      EXPECT_TRUE(written) << "3x(96x38) rows=1 mode " << static_cast<int>(k);
      if (HasFatalFailure()) return;
    }
  }
  // Odd shapes (every group's first row 4-byte aligned: the Q8_0 kernels' contract, which every
  // DS4 matrix meets with its 272·k-byte rows): a tail chunk of blocks, row counts not a
  // multiple of the split kernel's 2 rows per block, >= 4096 rows (where a lone matmul takes the tensor-core kernel), one group,
  // padded strides, a mixed list, and 2304 inputs (72 blocks: the staged r = 1 kernel's
  // partial step).
  struct Shape {
    int groups;
    int64_t n_in, n_out;
  };
  for (const Shape sh : {Shape{3, 96, 38}, Shape{3, 2304, 37}, Shape{5, 4160, 3}, Shape{2, 64, 4101}, Shape{1, 128, 20},
                         Shape{kMaxMatvecGroups, 32, 10}}) {
    for (int rows : {1, 2, 5, 8, 11}) {
      grouped_case(*cpu_, sh.groups, sh.n_in, sh.n_out, rows, 3, false, 1000 + sh.groups * 16 + rows);
      if (HasFatalFailure()) return;
    }
  }
  for (int rows : {1, 4, 8}) grouped_case(*cpu_, 4, 256, 33, rows, 1, true, 1200 + rows);
}

// Argument validation happens on the host before any CUDA call: no GPU needed.
TEST(FfnOpsHost, LaunchersRejectBadShapes) {
  backend::MoeParams m;
  m.n_used = 2;
  m.gate = backend::ExpertMatrix{nullptr, GgmlType::kQ8_0, 256, 256, 4, quant::row_bytes(GgmlType::kQ8_0, 256)};
  m.up = m.gate;
  m.down = m.gate;
  const Status s = moe(m, nullptr);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(std::string::npos, s.message().find("moe")) << s.message();
  backend::RouteParams r;
  r.n_expert = 8, r.n_used = 65;
  EXPECT_FALSE(route(r, nullptr).ok());
  backend::GetRowsParams gr;
  gr.w.type = GgmlType::kQ8_0, gr.w.n_in = 33, gr.out_stride = 64;
  EXPECT_FALSE(get_rows(gr, nullptr).ok());
  Q8_0Group groups[kMaxMatvecGroups + 1];
  EXPECT_FALSE(matvec_q8_0_grouped(groups, kMaxMatvecGroups + 1, 34, 32, 4, 0, 1, 0, nullptr).ok());
  EXPECT_FALSE(matvec_q8_0_grouped(groups, 2, 34, 33, 4, 0, 1, 0, nullptr).ok());  // n_in not whole blocks
}

// ---- Host-side checks of ffn_math.h (no GPU) ----------------------------------------------------

TEST(FfnMathHost, MinMaxFollowStdSemantics) {
  const float v[] = {kNaN, -kNaN, kInf, -kInf, 0.0f, -0.0f, 1.0f, -1.0f, 10.0f, 1e-41f};
  for (float a : v) {
    for (float b : v) {
      const float m0 = std::min(a, b), m1 = backend::rowmath::std_min(a, b);
      const float x0 = std::max(a, b), x1 = backend::rowmath::std_max(a, b);
      EXPECT_EQ(0, std::memcmp(&m0, &m1, 4)) << "min(" << a << ", " << b << ")";
      EXPECT_EQ(0, std::memcmp(&x0, &x1, 4)) << "max(" << a << ", " << b << ")";
    }
  }
}

// route_select / route_weights (the kernel's code) against the CPU backend's route, fed the
// CPU's own probs (so no transcendental is involved).
TEST(FfnMathHost, RouteSelectionAndWeightsEqualCpu) {
  auto cpu = backend::make_cpu_backend(1);
  for (int n_expert : {16, 256}) {
    const int n_used = n_expert == 16 ? 4 : 6, rows = 11;
    const auto logits = router_logits(rows, n_expert, 91);
    const auto bias = gaussian(n_expert, 92, 0.1f);
    for (int mode = 0; mode < 3; ++mode) {
      std::vector<float> probs(rows * n_expert), wt(rows * n_used);
      std::vector<int32_t> sel(rows * n_used), tokens(rows), table(50 * n_used);
      for (int i = 0; i < rows; ++i) tokens[i] = (7 * i) % 50;
      for (size_t i = 0; i < table.size(); ++i) table[i] = static_cast<int32_t>((i * 37) % n_expert);
      backend::RouteParams p;
      p.logits = logits.data(), p.n_rows = rows, p.n_expert = n_expert, p.n_used = n_used;
      p.renorm = mode != 1, p.scale = 1.5f, p.probs = probs.data(), p.sel = sel.data(), p.wt = wt.data();
      p.tokens = tokens.data();
      if (mode == 0) p.bias = bias.data();
      if (mode == 2) p.tid2eid = table.data();
      cpu->route(p);
      for (int i = 0; i < rows; ++i) {
        const float* pr = probs.data() + i * n_expert;
        std::vector<int32_t> s(n_used);
        if (mode == 2) {
          std::copy_n(table.data() + tokens[i] * n_used, n_used, s.data());
        } else {
          backend::rowmath::route_select(pr, p.bias, n_expert, n_used, s.data());
        }
        std::vector<float> w(n_used);
        backend::rowmath::route_weights(pr, s.data(), n_used, p.renorm, p.scale, w.data());
        for (int j = 0; j < n_used; ++j) {
          EXPECT_EQ(sel[i * n_used + j], s[j]) << "route sel row " << i << " slot " << j << " mode " << mode;
          EXPECT_EQ(0, std::memcmp(&wt[i * n_used + j], &w[j], 4))
              << "route wt row " << i << " slot " << j << " mode " << mode << ": helper " << w[j] << " cpu "
              << wt[i * n_used + j];
        }
      }
    }
  }
}

}  // namespace
}  // namespace ds4::cuda
