// tests/unit/engine/backend_flags_test.cpp — the one backend flag table (engine/backend_flags.h):
// what a command line or an environment mirror turns into EngineOptions (backend, device,
// threads, ISA, numerics, the CUDA switches), the shorthands' precedence, and the errors for
// bad values.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/backend_flags.h"

namespace ds4 {
namespace {

EnvLookup env_of(std::map<std::string, std::string> vars) {
  return [vars](const std::string& name) -> std::optional<std::string> {
    auto it = vars.find(name);
    if (it == vars.end()) return std::nullopt;
    return it->second;
  };
}

// Parses args (+ env) with the backend table and applies it; the Status of apply.
Status apply(std::vector<const char*> args, EngineOptions* eo, std::map<std::string, std::string> env = {}) {
  BackendFlags f;
  FlagTable t("prog", "test");
  register_backend_flags(t, &f);
  args.insert(args.begin(), "prog");
  ParseResult pr = t.parse(static_cast<int>(args.size()), args.data(), env_of(std::move(env)));
  if (!pr.ok()) return invalid_argument("parse: %s", pr.message.c_str());
  return apply_backend_flags(f, t, eo);
}

TEST(BackendFlags, DefaultsAreAutoOnDeviceZero) {
  EngineOptions eo;
  eo.backend = BackendKind::kCpu;  // apply must overwrite it
  eo.device = 5;
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kAuto);
  EXPECT_EQ(eo.device, 0);
  EXPECT_EQ(eo.n_threads, 0);
  EXPECT_EQ(eo.cpu_isa, "auto");
  EXPECT_FALSE(eo.f32_activations);
  EXPECT_FALSE(eo.cuda_sync);
}

TEST(BackendFlags, CudaSyncFromTheFlagAndItsMirror) {
  EngineOptions eo;
  ASSERT_TRUE(apply({"--cuda-sync"}, &eo).ok());
  EXPECT_TRUE(eo.cuda_sync);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_SYNC", "1"}}).ok());
  EXPECT_TRUE(eo.cuda_sync);
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_FALSE(eo.cuda_sync);
}

TEST(BackendFlags, CudaProfileFromTheFlagAndItsMirror) {
  EngineOptions eo;
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_FALSE(eo.cuda_profile);
  ASSERT_TRUE(apply({"--cuda-profile"}, &eo).ok());
  EXPECT_TRUE(eo.cuda_profile);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_GAP_PROFILE", "1"}}).ok());
  EXPECT_TRUE(eo.cuda_profile);
  EXPECT_FALSE(eo.cuda_sync);
}

TEST(BackendFlags, CudaHcFusedFromTheFlagAndItsMirror) {
  EngineOptions eo;
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_EQ(2, eo.cuda_hc_fused);  // the staged kernel by default (the fastest token at Flash shape)
  ASSERT_TRUE(apply({"--cuda-hc-fused", "1"}, &eo).ok());
  EXPECT_EQ(1, eo.cuda_hc_fused);
  ASSERT_TRUE(apply({"--cuda-hc-fused", "0"}, &eo).ok());
  EXPECT_EQ(0, eo.cuda_hc_fused);  // the three launches
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_HC_FUSED", "1"}}).ok());
  EXPECT_EQ(1, eo.cuda_hc_fused);
  ASSERT_TRUE(apply({"--cuda-hc-fused", "0"}, &eo, {{"DS4_CUDA_HC_FUSED", "1"}}).ok());
  EXPECT_EQ(0, eo.cuda_hc_fused);  // the command line wins
  const Status s = apply({}, &eo, {{"DS4_CUDA_HC_FUSED", "3"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--cuda-hc-fused must be 0, 1 or 2, got 3 (from DS4_CUDA_HC_FUSED)"), std::string::npos)
      << s.message();
}

TEST(BackendFlags, CudaGraphsFromTheFlagAndItsMirror) {
  EngineOptions eo;
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_EQ(0, eo.cuda_graphs);  // off by default: every op launched from the host
  ASSERT_TRUE(apply({"--cuda-graphs", "1"}, &eo).ok());
  EXPECT_EQ(1, eo.cuda_graphs);  // a graph per decode forward
  ASSERT_TRUE(apply({"--cuda-graphs", "128"}, &eo).ok());
  EXPECT_EQ(128, eo.cuda_graphs);  // a graph per 128 ops
  ASSERT_TRUE(apply({"--cuda-graphs", "0"}, &eo).ok());
  EXPECT_EQ(0, eo.cuda_graphs);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_GRAPHS", "1"}}).ok());
  EXPECT_EQ(1, eo.cuda_graphs);
  ASSERT_TRUE(apply({"--cuda-graphs", "0"}, &eo, {{"DS4_CUDA_GRAPHS", "1"}}).ok());
  EXPECT_EQ(0, eo.cuda_graphs);  // the command line wins
  Status s = apply({}, &eo, {{"DS4_CUDA_GRAPHS", "-1"}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--cuda-graphs must be 0 (off), 1 (a graph per forward) or N in 2..65536"),
            std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("got -1 (from DS4_CUDA_GRAPHS)"), std::string::npos) << s.message();
  s = apply({"--cuda-graphs", "65537"}, &eo);
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.message().find("(from"), std::string::npos) << s.message();  // given on the command line
  EXPECT_FALSE(apply({"--cuda-graphs", "on"}, &eo).ok());  // not a number
}

TEST(BackendFlags, CudaQ8R1FromTheFlagAndItsMirror) {
  EngineOptions eo;
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_EQ("auto", eo.cuda_q8_r1);  // the default: the staged kernel only where it measured faster
  for (const char* v : {"new", "new-prequant", "wide", "wide-fused", "old", "auto"}) {
    ASSERT_TRUE(apply({"--cuda-q8-r1", v}, &eo).ok()) << v;
    EXPECT_EQ(v, eo.cuda_q8_r1);
    ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_Q8_R1", v}}).ok()) << v;
    EXPECT_EQ(v, eo.cuda_q8_r1);
  }
  ASSERT_TRUE(apply({"--cuda-q8-r1", "new"}, &eo, {{"DS4_CUDA_Q8_R1", "old"}}).ok());
  EXPECT_EQ("new", eo.cuda_q8_r1);  // the command line wins over the environment
  EXPECT_FALSE(apply({}, &eo, {{"DS4_CUDA_Q8_R1", "fast"}}).ok());
  const Status s = apply({"--cuda-q8-r1", "prequant"}, &eo);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--cuda-q8-r1 must be auto, new, new-prequant, wide, wide-fused or old, got 'prequant'"),
            std::string::npos)
      << s.message();
}

TEST(BackendFlags, BackendFromTheCommandLineAndTheEnvironment) {
  EngineOptions eo;
  ASSERT_TRUE(apply({"--backend", "cpu"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);
  ASSERT_TRUE(apply({"--backend", "cuda", "--device", "3"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCuda);
  EXPECT_EQ(eo.device, 3);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_BACKEND", "cpu"}}).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);
  // The command line beats the mirror.
  ASSERT_TRUE(apply({"--backend", "auto"}, &eo, {{"DS4_BACKEND", "cpu"}}).ok());
  EXPECT_EQ(eo.backend, BackendKind::kAuto);
}

TEST(BackendFlags, Shorthands) {
  EngineOptions eo;
  ASSERT_TRUE(apply({"--cpu"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);
  ASSERT_TRUE(apply({"--cuda"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCuda);
  // Agreeing with --backend (auto agrees with either), and beating DS4_BACKEND.
  ASSERT_TRUE(apply({"--backend", "cpu", "--cpu"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);
  ASSERT_TRUE(apply({"--backend", "auto", "--cuda"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCuda);
  ASSERT_TRUE(apply({"--cpu"}, &eo, {{"DS4_BACKEND", "cuda"}}).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);

  Status s = apply({"--cuda", "--cpu"}, &eo);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--cpu and --cuda are exclusive"), std::string::npos) << s.message();
  s = apply({"--backend", "cpu", "--cuda"}, &eo);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--cuda contradicts --backend cpu"), std::string::npos) << s.message();
}

TEST(BackendFlags, BadValuesNameTheFlag) {
  EngineOptions eo;
  Status s = apply({"--backend", "gpu"}, &eo);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--backend must be auto, cpu or cuda, got 'gpu'"), std::string::npos) << s.message();
  s = apply({}, &eo, {{"DS4_BACKEND", "CUDA"}});  // names are lower case
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("got 'CUDA' (from DS4_BACKEND)"), std::string::npos) << s.message();
  s = apply({"--device", "-1"}, &eo);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--device must be a GPU index >= 0, got -1"), std::string::npos) << s.message();
  s = apply({"-t", "-2"}, &eo);
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--threads"), std::string::npos) << s.message();
}

TEST(BackendFlags, DeviceOnTheCommandLineAsksForCuda) {
  EngineOptions eo;
  ASSERT_TRUE(apply({"--device", "2"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCuda);
  EXPECT_EQ(eo.device, 2);
  // From the environment it only says which GPU auto probes.
  ASSERT_TRUE(apply({}, &eo, {{"DS4_DEVICE", "2"}}).ok());
  EXPECT_EQ(eo.backend, BackendKind::kAuto);
  EXPECT_EQ(eo.device, 2);
  // With --backend cpu it changes nothing.
  ASSERT_TRUE(apply({"--backend", "cpu", "--device", "1"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);
}

TEST(BackendFlags, F32ActivationsAreCpuOnly) {
  EngineOptions eo;
  ASSERT_TRUE(apply({"--f32-activations"}, &eo).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);
  EXPECT_TRUE(eo.f32_activations);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_F32_ACTIVATIONS", "1"}}).ok());
  EXPECT_EQ(eo.backend, BackendKind::kCpu);
  for (std::vector<const char*> args : {std::vector<const char*>{"--f32-activations", "--cuda"},
                                        {"--f32-activations", "--backend", "cuda"},
                                        {"--f32-activations", "--device", "0"}}) {
    Status s = apply(args, &eo);
    EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument) << args[1];
    EXPECT_NE(s.message().find("--f32-activations"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find("cpu backend only"), std::string::npos) << s.message();
  }
}

TEST(BackendFlags, ThreadsAndIsaPassThrough) {
  EngineOptions eo;
  ASSERT_TRUE(apply({"-t", "3", "--isa", "scalar"}, &eo).ok());
  EXPECT_EQ(eo.n_threads, 3);
  EXPECT_EQ(eo.cpu_isa, "scalar");
  ASSERT_TRUE(apply({}, &eo, {{"DS4_THREADS", "2"}, {"DS4_CPU_ISA", "avx2"}}).ok());
  EXPECT_EQ(eo.n_threads, 2);
  EXPECT_EQ(eo.cpu_isa, "avx2");
}

TEST(BackendFlags, HelpListsEveryFlagAndMirror) {
  BackendFlags f;
  FlagTable t("prog", "test");
  register_backend_flags(t, &f);
  const std::string h = t.help();
  for (const char* s : {"--backend", "DS4_BACKEND", "--device", "DS4_DEVICE", "--cpu", "--cuda", "--threads",
                        "DS4_THREADS", "--isa", "DS4_CPU_ISA", "--f32-activations", "DS4_F32_ACTIVATIONS",
                        "--cuda-hc-fused", "DS4_CUDA_HC_FUSED", "--cuda-graphs", "DS4_CUDA_GRAPHS", "This build has: cpu"}) {
    EXPECT_NE(h.find(s), std::string::npos) << s;
  }
}

TEST(BackendFlags, StartUpLine) {
  ModelInfo info;
  info.backend = "cpu: avx2, 4 threads";
  EXPECT_EQ(backend_line("ds4-bench", info), "ds4-bench: backend cpu: avx2, 4 threads");
}

TEST(BackendFlags, CudaKernelSwitchesFromTheFlagsAndTheirMirrors) {
  EngineOptions eo;
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_EQ("new", eo.cuda_moe);          // the rewrites, measured faster on the device
  EXPECT_EQ("wide", eo.cuda_dense_rows);  // the many-row kernel
  ASSERT_TRUE(apply({"--cuda-moe", "old", "--cuda-dense-rows", "tiles"}, &eo).ok());
  EXPECT_EQ("old", eo.cuda_moe);
  EXPECT_EQ("tiles", eo.cuda_dense_rows);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_MOE", "old"}, {"DS4_CUDA_DENSE_ROWS", "tiles"}}).ok());
  EXPECT_EQ("old", eo.cuda_moe);
  EXPECT_EQ("tiles", eo.cuda_dense_rows);
  ASSERT_TRUE(apply({"--cuda-moe", "new"}, &eo, {{"DS4_CUDA_MOE", "old"}}).ok());
  EXPECT_EQ("new", eo.cuda_moe);  // the command line wins
  ASSERT_TRUE(apply({"--cuda-moe", "tc"}, &eo).ok());
  EXPECT_EQ("tc", eo.cuda_moe);
  EXPECT_FALSE(apply({"--cuda-moe", "tensor"}, &eo).ok());
  // The two switches are on by default; --no-* or a false mirror turns each off.
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_TRUE(eo.cuda_pdl);
  EXPECT_TRUE(eo.cuda_batch_steps);
  ASSERT_TRUE(apply({"--no-cuda-pdl"}, &eo).ok());
  EXPECT_FALSE(eo.cuda_pdl);
  EXPECT_TRUE(eo.cuda_batch_steps);
  ASSERT_TRUE(apply({"--no-cuda-pdl", "--cuda-pdl"}, &eo).ok());
  EXPECT_TRUE(eo.cuda_pdl);  // the last one wins
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_PDL", "0"}}).ok());
  EXPECT_FALSE(eo.cuda_pdl);
  ASSERT_TRUE(apply({"--cuda-pdl"}, &eo, {{"DS4_CUDA_PDL", "0"}}).ok());
  EXPECT_TRUE(eo.cuda_pdl);
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_TRUE(eo.cuda_pdl_all);  // every kernel with PDL: on since measured (2K decode +6%)
  ASSERT_TRUE(apply({"--no-cuda-pdl-all"}, &eo).ok());
  EXPECT_FALSE(eo.cuda_pdl_all);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_PDL_ALL", "0"}}).ok());
  EXPECT_FALSE(eo.cuda_pdl_all);
  EXPECT_FALSE(eo.cuda_wide_persistent);  // opt-in until measured
  ASSERT_TRUE(apply({"--cuda-wide-persistent"}, &eo).ok());
  EXPECT_TRUE(eo.cuda_wide_persistent);
  ASSERT_TRUE(apply({"--no-cuda-batch-steps"}, &eo).ok());
  EXPECT_FALSE(eo.cuda_batch_steps);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_BATCH_STEPS", "off"}}).ok());
  EXPECT_FALSE(eo.cuda_batch_steps);
  Status s = apply({}, &eo, {{"DS4_CUDA_MOE", "fast"}});
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.code(), ErrorCode::kInvalidArgument);
  EXPECT_NE(s.message().find("--cuda-moe must be old, new or tc, got 'fast' (from DS4_CUDA_MOE)"), std::string::npos)
      << s.message();
  s = apply({"--cuda-dense-rows", "8"}, &eo);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--cuda-dense-rows must be tiles or wide, got '8'"), std::string::npos) << s.message();
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_TRUE(eo.cuda_fuse_norms);  // on since measured (2K decode +2%)
  ASSERT_TRUE(apply({"--no-cuda-fuse-norms"}, &eo).ok());
  EXPECT_FALSE(eo.cuda_fuse_norms);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_FUSE_NORMS", "0"}}).ok());
  EXPECT_FALSE(eo.cuda_fuse_norms);
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_FALSE(eo.cuda_hc_products);  // off until measured on a GPU
  EXPECT_FALSE(eo.cuda_fold_input_norm);
  ASSERT_TRUE(apply({"--cuda-hc-products"}, &eo, {{"DS4_CUDA_FOLD_INPUT_NORM", "1"}}).ok());
  EXPECT_TRUE(eo.cuda_hc_products);
  EXPECT_TRUE(eo.cuda_fold_input_norm);
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_TRUE(eo.cuda_lanes);  // on: measured faster on an H100
  ASSERT_TRUE(apply({"--no-cuda-lanes"}, &eo).ok());
  EXPECT_FALSE(eo.cuda_lanes);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_LANES", "0"}}).ok());
  EXPECT_FALSE(eo.cuda_lanes);
  ASSERT_TRUE(apply({"--cuda-lanes"}, &eo, {{"DS4_CUDA_LANES", "0"}}).ok());
  EXPECT_TRUE(eo.cuda_lanes);  // the command line wins over the environment
  EXPECT_FALSE(eo.cuda_fold_hc_post);  // off until measured on a GPU
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_FOLD_HC_POST", "1"}}).ok());
  EXPECT_TRUE(eo.cuda_fold_hc_post);
  ASSERT_TRUE(apply({"--cuda-fold-hc-post"}, &eo).ok());
  EXPECT_TRUE(eo.cuda_fold_hc_post);
  EXPECT_EQ("split", eo.cuda_attn);  // the kernels measured on the device before the fused one
  ASSERT_TRUE(apply({"--cuda-attn", "fused"}, &eo).ok());
  EXPECT_EQ("fused", eo.cuda_attn);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_CUDA_ATTN", "fused"}}).ok());
  EXPECT_EQ("fused", eo.cuda_attn);
  s = apply({"--cuda-attn", "flash"}, &eo);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--cuda-attn must be split or fused, got 'flash'"), std::string::npos) << s.message();
}

TEST(BackendFlags, PrefillChunkFromTheFlagAndItsMirror) {
  EngineOptions eo;
  ASSERT_TRUE(apply({}, &eo).ok());
  EXPECT_EQ(0, eo.prefill_chunk);  // the backend's default chunk
  ASSERT_TRUE(apply({"--prefill-chunk", "256"}, &eo).ok());
  EXPECT_EQ(256, eo.prefill_chunk);
  ASSERT_TRUE(apply({}, &eo, {{"DS4_PREFILL_CHUNK", "64"}}).ok());
  EXPECT_EQ(64, eo.prefill_chunk);
  Status s = apply({"--prefill-chunk", "257"}, &eo);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("--prefill-chunk must be 1..256 rows (0 = the backend's default), got 257"), std::string::npos)
      << s.message();
  s = apply({}, &eo, {{"DS4_PREFILL_CHUNK", "-1"}});
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("got -1 (from DS4_PREFILL_CHUNK)"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace ds4
