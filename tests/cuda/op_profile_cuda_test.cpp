// tests/cuda/op_profile_cuda_test.cpp — the op profiler on the GPU (--cuda-profile): the
// profiled CUDA backend computes the same bits as the plain one, and its report (stderr, when
// the backend is destroyed) names the device, the ops and a positive op time. The table logic
// itself is tested on the CPU (tests/unit/backend/op_profile_test.cpp, fake clock).
// Without a usable GPU the test skips with the reason probe_device gives.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"

namespace ds4::backend {
namespace {

std::vector<float> add_twice(Backend& be, int n_ops) {
  std::vector<float> host(1 << 20);
  for (size_t i = 0; i < host.size(); ++i) host[i] = 0.25f * static_cast<float>(i % 1000);
  Array<float> x(be, host.size());
  be.upload(x.data(), host.data(), host.size() * sizeof(float));
  AddParams a{x.data(), x.data(), x.data(), static_cast<int64_t>(host.size())};
  for (int i = 0; i < n_ops; ++i) be.add(a);
  be.download(host.data(), x.data(), host.size() * sizeof(float));
  return host;
}

TEST(CudaOpProfile, SameBitsAndAReport) {
  const Status s = cuda::probe_device(0, nullptr);
  if (!s.ok()) GTEST_SKIP() << "no usable CUDA device: " << s.message();
  std::vector<float> plain, profiled;
  {
    auto be = make_cuda_backend(CudaBackendConfig{});
    ASSERT_TRUE(be.ok()) << be.status().message();
    plain = add_twice(**be, 3);
  }
  testing::internal::CaptureStderr();
  {
    auto be = make_cuda_backend(CudaBackendConfig{.profile = true});
    ASSERT_TRUE(be.ok()) << be.status().message();
    profiled = add_twice(**be, 3);
    // More ops than half the ring between host waits: a read-back in the middle.
    for (int round = 0; round < 3; ++round) (void)add_twice(**be, 20000);
  }
  const std::string report = testing::internal::GetCapturedStderr();
  ASSERT_EQ(plain.size(), profiled.size());
  EXPECT_EQ(std::memcmp(plain.data(), profiled.data(), plain.size() * sizeof(float)), 0);
  EXPECT_NE(report.find("op profile, cuda:0"), std::string::npos) << report;
  EXPECT_NE(report.find("\n   add "), std::string::npos) << report;
  EXPECT_NE(report.find("excluded (mark read-back)"), std::string::npos) << report;
  std::printf("%s", report.c_str());
}

}  // namespace
}  // namespace ds4::backend
