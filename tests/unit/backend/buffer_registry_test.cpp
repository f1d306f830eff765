// tests/unit/backend/buffer_registry_test.cpp — backend memory (Buffer, upload / download /
// copy / fill, the weight binding) and the backend registry, on the CPU backend.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/registry.h"

namespace ds4::backend {
namespace {

TEST(Buffer, AllocIsZeroedAlignedAndOwning) {
  auto be = make_cpu_backend(1);
  Buffer b = be->alloc_array<float>(1000);
  ASSERT_EQ(b.bytes(), 4000u);
  EXPECT_EQ(b.count<float>(), 1000u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % 64, 0u);
  for (float v : b.host<float>()) EXPECT_EQ(v, 0.0f);
  Buffer moved = std::move(b);
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(b.data(), nullptr);
  EXPECT_EQ(moved.bytes(), 4000u);
  moved.reset();
  EXPECT_TRUE(moved.empty());
  EXPECT_TRUE(be->alloc(0).empty());
}

TEST(Buffer, UploadDownloadCopyFillRoundTrip) {
  auto be = make_cpu_backend(2);
  ASSERT_TRUE(be->host_addressable());
  std::vector<float> src(64);
  for (int i = 0; i < 64; ++i) src[i] = 0.5f * i - 7.0f;
  Buffer a = be->alloc_array<float>(64);
  Buffer b = be->alloc_array<float>(64);
  be->upload(a.as<float>(), src.data(), 64 * sizeof(float));
  be->copy(b.as<float>() + 8, a.as<float>(), 32 * sizeof(float));
  be->fill_f32(b.as<float>(), 8, -1.0e30f);
  be->fill_bytes(b.as<float>() + 40, 24 * sizeof(float), 0);
  be->sync();
  std::vector<float> out(64, 123.0f);
  be->download(out.data(), b.as<float>(), 64 * sizeof(float));
  for (int i = 0; i < 8; ++i) EXPECT_EQ(out[i], -1.0e30f);
  for (int i = 8; i < 40; ++i) EXPECT_EQ(out[i], src[i - 8]);
  for (int i = 40; i < 64; ++i) EXPECT_EQ(out[i], 0.0f);
  // The host view is the same memory on the CPU.
  EXPECT_EQ(b.host<float>().data(), b.as<float>());
}

TEST(WeightSet, CpuBindingIsZeroCopyAndChecksRanges) {
  auto be = make_cpu_backend(1);
  std::vector<uint8_t> t0(100), t1(50);
  const WeightRange ranges[] = {{t0.data(), t0.size()}, {t1.data(), t1.size()}};
  auto ws = be->bind_weights(ranges);
  EXPECT_EQ(ws->map(t0.data()), t0.data());
  EXPECT_EQ(ws->map(t0.data() + 99), t0.data() + 99);
  EXPECT_EQ(ws->map(t1.data() + 10), t1.data() + 10);
  EXPECT_EQ(ws->map(static_cast<const void*>(nullptr)), nullptr);
  uint8_t other = 0;
  EXPECT_DEATH(ws->map(&other), "outside the bound weights");
}

TEST(Registry, KnowsCpuAndRejectsUnknownNamesAndOptions) {
  const std::vector<std::string> names = backend_names();
  ASSERT_FALSE(names.empty());
  EXPECT_EQ(names[0], "cpu");
  BackendOptions o;
  o.n_threads = 2;
  auto cpu = make_backend("cpu", o);
  ASSERT_TRUE(cpu.ok()) << cpu.status().message();
  EXPECT_STREQ((*cpu)->name(), "cpu");
  EXPECT_EQ((*cpu)->n_threads(), 2);
  auto bad = make_backend("tpu", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("tpu"), std::string::npos);
  o.cpu_isa = "sse9";
  auto bad_isa = make_backend("cpu", o);
  ASSERT_FALSE(bad_isa.ok());
  EXPECT_NE(bad_isa.status().message().find("sse9"), std::string::npos);
  o.cpu_isa = "auto";
  o.n_threads = -1;
  EXPECT_FALSE(make_backend("cpu", o).ok());
}

// The process-wide switches alone (an A/B tool's between-forwards flip): the CPU has none, an
// unknown backend is an error naming it, and a CUDA build validates the values as make_backend
// does (no GPU needed: nothing touches the device), then restores the defaults.
TEST(Registry, ApplyBackendSwitchesValidates) {
  BackendOptions o;
  EXPECT_TRUE(apply_backend_switches("cpu", o).ok());
  const Status unknown = apply_backend_switches("tpu", o);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.message().find("tpu"), std::string::npos);
  const std::vector<std::string> names = backend_names();
  if (std::find(names.begin(), names.end(), "cuda") == names.end()) return;  // a build without CUDA
  o.cuda_moe = "newest";
  const Status bad = apply_backend_switches("cuda", o);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.message().find("--cuda-moe must be old, new or tc, got 'newest'"), std::string::npos)
      << bad.message();
  o.cuda_moe = "tc";  // the tensor-core dots of the grouped kernel: a switch, not a device call
  EXPECT_TRUE(apply_backend_switches("cuda", o).ok());
  o.cuda_moe = "new";
  o.cuda_q8_r1 = "widest";
  EXPECT_FALSE(apply_backend_switches("cuda", o).ok());
  EXPECT_TRUE(apply_backend_switches("cuda", BackendOptions{}).ok());
}

}  // namespace
}  // namespace ds4::backend
