// engine/backend_flags.cpp — the backend flag table and its EngineOptions (see backend_flags.h).
#include "engine/backend_flags.h"

#include <initializer_list>

#include "backend/registry.h"
#include "session/state.h"

namespace ds4 {

namespace {

// "cpu, cuda": the backends this build has, for the help text.
std::string built_backends() {
  std::string s;
  for (const std::string& n : backend::backend_names()) s += (s.empty() ? "" : ", ") + n;
  return s;
}

bool on_command_line(const FlagTable& t, const std::string& name) { return t.source(name) == "command line"; }

// " (from DS4_BACKEND)" when the value came from the environment, so the user finds it.
std::string origin(const FlagTable& t, const std::string& name) {
  const std::string s = t.source(name);  // "environment (DS4_BACKEND)"
  const size_t open = s.find('(');
  return s.rfind("environment", 0) == 0 && open != std::string::npos ? " (from " + s.substr(open + 1) : "";
}

// kInvalidArgument "--flag must be a, b or c, got 'v' (from ENV)" unless v is one of choices.
Status one_of(const FlagTable& t, const char* flag, const std::string& v, std::initializer_list<const char*> choices) {
  std::string list;
  size_t i = 0;
  for (const char* c : choices) {
    if (v == c) return Status();
    list += (i == 0 ? "" : i + 1 == choices.size() ? " or " : ", ") + std::string(c);
    ++i;
  }
  return invalid_argument("%s must be %s, got '%s'%s", flag, list.c_str(), v.c_str(), origin(t, flag).c_str());
}

}  // namespace

void register_backend_flags(FlagTable& t, BackendFlags* f) {
  t.option("--backend", &f->backend,
           "Where the model runs: auto|cpu|cuda. auto = cuda when this build has it and GPU --device is "
           "usable, else cpu (--f32-activations: cpu). This build has: " + built_backends(),
           "DS4_BACKEND", "NAME")
      .option("--device", &f->device,
              "GPU index for the cuda backend; given on the command line with --backend auto it asks for "
              "cuda (an error without that GPU, never a silent CPU run)",
              "DS4_DEVICE", "N")
      .flag("--cpu", &f->cpu, "Shorthand for --backend cpu")
      .flag("--cuda", &f->cuda, "Shorthand for --backend cuda")
      .option("-t,--threads", &f->threads, "CPU threads (0 = all cores)", "DS4_THREADS")
      .option("--isa", &f->isa, "CPU kernel path: auto|scalar|avx2|avx512 (same bits on every path)",
              "DS4_CPU_ISA", "ISA")
      .flag("--f32-activations", &f->f32_activations,
            "Reference numerics, cpu backend only: no Q8_0/Q8_K activation quantization (slower; "
            "parity/quality checks)",
            "DS4_F32_ACTIVATIONS")
      .flag("--cuda-sync", &f->cuda_sync,
            "CUDA: wait for every op to finish, so a device fault names the op (and shapes) that caused "
            "it (slow; for debugging)",
            "DS4_CUDA_SYNC")
      .flag("--cuda-profile", &f->cuda_profile,
            "CUDA: time every op on the device (events) and print, at exit, per op and op class the "
            "time, bytes and GB/s, the ops per token and the gaps between ops and at token boundaries",
            "DS4_CUDA_GAP_PROFILE")
      .option("--cuda-hc-fused", &f->cuda_hc_fused,
              "CUDA: HC pre / collapse as the three-launch path (0: norm, mix matvec, finish), one fused "
              "kernel per call (1: the row read from global memory as the chains go) or one staged kernel "
              "per call (2: the row in shared memory, a thread per dot chain; the fastest whole token "
              "measured); for A/B timing. Same bits on every path",
              "DS4_CUDA_HC_FUSED", "0|1|2")
      .option("--cuda-q8-r1", &f->cuda_q8_r1,
              "CUDA: the Q8_0 matmul of one activation row (decode): auto (the staged kernel for the output "
              "head, where it measured faster on an H200; the wide kernel below it, quantizing rows of "
              "<= 4096 itself), new (the staged kernel wherever it takes the shape, quantizing the row "
              "itself: one launch), new-prequant (the staged kernel after a quantize launch), wide (the "
              "wide kernel after a quantize launch: a CTA's rows through coalesced 16-byte copies, one "
              "block pair per thread), wide-fused (the wide kernel quantizing the row itself) or old "
              "(the warp kernels); all give the same bits",
              "DS4_CUDA_Q8_R1", "auto|new|new-prequant|wide|wide-fused|old")
      .option("--cuda-graphs", &f->cuda_graphs,
              "CUDA: run each decode (one-row) forward as CUDA graphs instead of launching every op from the "
              "host: 0 off (default), 1 the forward's ops captured and launched as one graph, N >= 2 a graph "
              "per N ops (the GPU runs one while the host captures the next). Every forward is captured afresh "
              "(the first runs uncaptured as a warm-up); off under --cuda-sync and --cuda-profile. For A/B "
              "timing; same bits",
              "DS4_CUDA_GRAPHS", "0|1|N")
      .option("--cuda-moe", &f->cuda_moe,
              "CUDA: the routed-expert kernels: new (default: the one-row rewrite and the expert-grouped kernel "
              "for 2+ rows; 2K prefill +24% and decode +4% on an H100), tc (new, with the 2+ row kernel's "
              "integer dots on the int8 tensor cores; not yet measured) or old (the one-row kernel and the "
              "row-pair kernel); for A/B timing, same bits",
              "DS4_CUDA_MOE", "old|new|tc")
      .option("--cuda-dense-rows", &f->cuda_dense_rows,
              "CUDA: the F16/F32 matmul of 9 or more rows (prefill): wide (default: the many-row kernel) or "
              "tiles (8-row tiles); for A/B timing, same bits",
              "DS4_CUDA_DENSE_ROWS", "tiles|wide")
      .flag("--cuda-pdl,!--no-cuda-pdl", &f->cuda_pdl,
            "CUDA: programmatic dependent launch of the one-row Q8_0 kernel (on by default; --no-cuda-pdl "
            "turns it off): it starts streaming its weights while the kernel before it runs, then waits "
            "for it before reading the activation; for A/B timing, same bits",
            "DS4_CUDA_PDL")
      .flag("--cuda-pdl-all,!--no-cuda-pdl-all", &f->cuda_pdl_all,
            "CUDA: programmatic dependent launch of every other kernel too (on by default; --no-cuda-pdl-all "
            "turns it off): each one waits for the kernel before at its top, then lets the next one launch, so "
            "a launch overlaps the kernel before it (2K decode +6% on an H100); for A/B timing, same bits",
            "DS4_CUDA_PDL_ALL")
      .flag("--cuda-wide-persistent", &f->cuda_wide_persistent,
            "CUDA: the one-row Q8_0 kernel on a persistent grid (off: no whole-token gain measured on an H100): as many CTAs as the SMs "
            "hold, each walking several row groups with three weight chunks in flight, instead of a CTA per "
            "row group; for A/B timing, same bits",
            "DS4_CUDA_WIDE_PERSISTENT")
      .flag("--cuda-batch-steps,!--no-cuda-batch-steps", &f->cuda_batch_steps,
            "CUDA: batch the compressor steps (on by default; --no-cuda-batch-steps turns it off): a prefill "
            "group's windows pooled in parallel (two launches per compressor chain and group), a verify "
            "group's steps up to 16 per launch; off, one launch per step. For A/B timing, same bits",
            "DS4_CUDA_BATCH_STEPS")
      .option("--cuda-attn", &f->cuda_attn,
              "CUDA: the sink attention of a prefill group (9 or more rows): split (a score launch of many "
              "small blocks, then a combine launch) or fused (one block per 8 heads of a row, the scores and the "
              "weighted sum in one launch); decode and verify rows always run split. For A/B timing, same bits",
              "DS4_CUDA_ATTN", "split|fused")
      .flag("--cuda-fuse-norms,!--no-cuda-fuse-norms", &f->cuda_fuse_norms,
            "CUDA: four of a layer's five RMS norms inside the kernels before them (on by default; "
            "--no-cuda-fuse-norms turns it off): the sublayers' input norms in the staged HC-pre kernel, the "
            "query heads' and kv's norms in the attention-inputs kernel, instead of four rms_norm launches "
            "(2K decode +2% on an H100); for A/B timing, same bits",
            "DS4_CUDA_FUSE_NORMS")
      .flag("--cuda-hc-products,!--no-cuda-hc-products", &f->cuda_hc_products,
            "CUDA: the staged HC-pre kernel's decode dot over its products (all the block's threads "
            "multiply first, then the 64 chains only add; off by default: no gain measured on an H100); "
            "for A/B timing, same bits",
            "DS4_CUDA_HC_PRODUCTS")
      .flag("--cuda-fold-input-norm,!--no-cuda-fold-input-norm", &f->cuda_fold_input_norm,
            "CUDA: q_a's RMS norm inside the one-row q_b kernel instead of an rms_norm launch before it (off "
            "by default until measured on a GPU); for A/B timing, same bits",
            "DS4_CUDA_FOLD_INPUT_NORM")
      .flag("--cuda-lanes,!--no-cuda-lanes", &f->cuda_lanes,
            "CUDA: a layer's independent ops on two streams (the shared expert beside the router, the "
            "compressor and indexer projections and a decode row's compressor steps beside q_b), so one "
            "chain's small kernels fill the SMs the other leaves idle (default on: 2K decode +2% on an H100; "
            "off under --cuda-graphs and --cuda-profile; --no-cuda-lanes runs every op on one stream); same "
            "bits",
            "DS4_CUDA_LANES")
      .flag("--cuda-fold-hc-post,!--no-cuda-fold-hc-post", &f->cuda_fold_hc_post,
            "CUDA: each sublayer's HC post inside the next sublayer's staged HC-pre kernel (every block makes "
            "the HC state from the post's inputs) instead of an hc_post launch (off by default: 7.6% slower "
            "per decoded token on an H100); for A/B timing, same bits",
            "DS4_CUDA_FOLD_HC_POST")
      .option("--prefill-chunk", &f->prefill_chunk,
              "Rows per prefill forward, 1..256 (0 = the backend's default: 32 on the CPU, 256 on CUDA): a "
              "larger chunk reads each weight once for more prompt tokens and sizes the session's scratch and "
              "raw ring for that many rows. Same bits",
              "DS4_PREFILL_CHUNK", "N");
}

Status apply_backend_flags(const BackendFlags& f, const FlagTable& t, EngineOptions* options) {
  DS4_RETURN_IF_ERROR(one_of(t, "--backend", f.backend, {"auto", "cpu", "cuda"}));
  if (f.cpu && f.cuda) return invalid_argument("--cpu and --cuda are exclusive");
  if (f.device < 0) {
    return invalid_argument("--device must be a GPU index >= 0, got %d%s", f.device, origin(t, "--device").c_str());
  }
  if (f.threads < 0) return invalid_argument("-t/--threads must be >= 0, got %d", f.threads);
  if (f.cuda_hc_fused < 0 || f.cuda_hc_fused > 2) {
    return invalid_argument("--cuda-hc-fused must be 0, 1 or 2, got %d%s", f.cuda_hc_fused,
                            origin(t, "--cuda-hc-fused").c_str());
  }
  if (f.cuda_graphs < 0 || f.cuda_graphs > backend::kMaxCudaGraphSegmentOps) {
    return invalid_argument("--cuda-graphs must be 0 (off), 1 (a graph per forward) or N in 2..%d (a graph per N "
                            "ops), got %d%s",
                            backend::kMaxCudaGraphSegmentOps, f.cuda_graphs, origin(t, "--cuda-graphs").c_str());
  }
  DS4_RETURN_IF_ERROR(one_of(t, "--cuda-q8-r1", f.cuda_q8_r1, {"auto", "new", "new-prequant", "wide", "wide-fused", "old"}));
  if (f.prefill_chunk < 0 || f.prefill_chunk > session::kMaxChunkRows) {
    return invalid_argument("--prefill-chunk must be 1..%d rows (0 = the backend's default), got %d%s", session::kMaxChunkRows,
                            f.prefill_chunk, origin(t, "--prefill-chunk").c_str());
  }
  DS4_RETURN_IF_ERROR(one_of(t, "--cuda-moe", f.cuda_moe, {"old", "new", "tc"}));
  DS4_RETURN_IF_ERROR(one_of(t, "--cuda-dense-rows", f.cuda_dense_rows, {"tiles", "wide"}));
  DS4_RETURN_IF_ERROR(one_of(t, "--cuda-attn", f.cuda_attn, {"split", "fused"}));

  // The shorthand replaces an environment or default --backend; on the command line next to
  // --backend it must agree with it (auto agrees with either).
  std::string name = f.backend;
  if (f.cpu || f.cuda) {
    const std::string shorthand = f.cpu ? "cpu" : "cuda";
    if (on_command_line(t, "--backend") && f.backend != "auto" && f.backend != shorthand) {
      return invalid_argument("--%s contradicts --backend %s", shorthand.c_str(), f.backend.c_str());
    }
    name = shorthand;
  }
  if (name == "auto") {
    if (on_command_line(t, "--device")) {
      name = "cuda";
    } else if (f.f32_activations) {
      name = "cpu";
    }
  }
  if (name == "cuda" && f.f32_activations) {
    return invalid_argument("--f32-activations (reference numerics) runs on the cpu backend only; %s asks for "
                            "cuda: drop one of them",
                            f.cuda ? "--cuda" : (f.backend == "cuda" ? "--backend cuda" : "--device"));
  }
  options->backend = name == "cpu" ? BackendKind::kCpu : name == "cuda" ? BackendKind::kCuda : BackendKind::kAuto;
  options->device = f.device;
  options->n_threads = f.threads;
  options->cpu_isa = f.isa;
  options->f32_activations = f.f32_activations;
  options->cuda_sync = f.cuda_sync;
  options->cuda_profile = f.cuda_profile;
  options->cuda_hc_fused = f.cuda_hc_fused;
  options->cuda_q8_r1 = f.cuda_q8_r1;
  options->cuda_graphs = f.cuda_graphs;
  options->cuda_moe = f.cuda_moe;
  options->cuda_dense_rows = f.cuda_dense_rows;
  options->prefill_chunk = f.prefill_chunk;
  options->cuda_pdl = f.cuda_pdl;
  options->cuda_pdl_all = f.cuda_pdl_all;
  options->cuda_wide_persistent = f.cuda_wide_persistent;
  options->cuda_batch_steps = f.cuda_batch_steps;
  options->cuda_attn = f.cuda_attn;
  options->cuda_fuse_norms = f.cuda_fuse_norms;
  options->cuda_hc_products = f.cuda_hc_products;
  options->cuda_fold_input_norm = f.cuda_fold_input_norm;
  options->cuda_lanes = f.cuda_lanes;
  options->cuda_fold_hc_post = f.cuda_fold_hc_post;
  return Status();
}

std::string backend_line(const std::string& program, const ModelInfo& info) {
  return program + ": backend " + info.backend;
}

}  // namespace ds4
