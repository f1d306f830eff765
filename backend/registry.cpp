// backend/registry.cpp — the table behind make_backend(): each entry validates its options and
// builds its backend. The CPU entry owns the kernel ISA choice (backend/cpu/kernels.h).
#include "backend/registry.h"

#include "backend/cpu/kernels.h"
#if DS4_HAVE_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#endif

namespace ds4::backend {

namespace {

Expected<std::unique_ptr<Backend>> make_cpu(const BackendOptions& o) {
  if (o.cpu_isa != "auto" && !o.cpu_isa.empty()) {
    cpu::Isa isa;
    if (!cpu::parse_isa(o.cpu_isa, &isa)) {
      return invalid_argument("unknown CPU ISA '%s' (expected auto, scalar, avx2 or avx512)", o.cpu_isa.c_str());
    }
    if (!cpu::set_isa(isa)) {
      return unsupported("CPU ISA '%s' is not supported by this machine or build", o.cpu_isa.c_str());
    }
  }
  return make_cpu_backend(o.n_threads, o.act);
}

#if DS4_HAVE_CUDA
CudaBackendConfig cuda_config(const BackendOptions& o) {
  CudaBackendConfig c;
  c.device = o.device;
  c.sync_each_op = o.cuda_sync;
  c.profile = o.cuda_profile;
  c.hc_fused = o.cuda_hc_fused;
  c.q8_r1 = o.cuda_q8_r1;
  c.graphs = o.cuda_graphs;
  c.moe = o.cuda_moe;
  c.dense_rows = o.cuda_dense_rows;
  c.pdl = o.cuda_pdl;
  c.pdl_all = o.cuda_pdl_all;
  c.wide_persistent = o.cuda_wide_persistent;
  c.batch_steps = o.cuda_batch_steps;
  c.attn = o.cuda_attn;
  c.fuse_norms = o.cuda_fuse_norms;
  c.hc_products = o.cuda_hc_products;
  c.fold_input_norm = o.cuda_fold_input_norm;
  c.lanes = o.cuda_lanes;
  c.fold_hc_post = o.cuda_fold_hc_post;
  return c;
}

Expected<std::unique_ptr<Backend>> make_cuda(const BackendOptions& o) {
  if (o.act != ActivationNumerics::kQuantized) {
    return unsupported("the CUDA backend runs the production numerics only; reference numerics "
                       "(f32 activations) need the CPU backend");
  }
  if (o.device < 0) return invalid_argument("GPU index must be >= 0, got %d", o.device);
  return make_cuda_backend(cuda_config(o));
}
#endif

struct Entry {
  const char* name;
  Expected<std::unique_ptr<Backend>> (*make)(const BackendOptions&);
};

constexpr Entry kBackends[] = {
    {"cpu", make_cpu},
#if DS4_HAVE_CUDA
    {"cuda", make_cuda},
#endif
};

}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> names;
  for (const Entry& e : kBackends) names.emplace_back(e.name);
  return names;
}

std::string resolve_backend_name(std::string_view name, int device) {
  if (name != "auto" && !name.empty()) return std::string(name);
#if DS4_HAVE_CUDA
  if (device >= 0 && cuda::probe_device(device, nullptr).ok()) return "cuda";
#else
  (void)device;
#endif
  return "cpu";
}

Status apply_backend_switches(std::string_view name, const BackendOptions& options) {
#if DS4_HAVE_CUDA
  if (name == "cuda") return apply_cuda_switches(cuda_config(options));
#endif
  if (name == "cpu") return Status();  // no process-wide kernel switches (the ISA is chosen once)
  return invalid_argument("apply_backend_switches: no backend '%.*s' in this build", static_cast<int>(name.size()),
                          name.data());
}

Expected<std::unique_ptr<Backend>> make_backend(std::string_view name, const BackendOptions& options) {
  if (options.n_threads < 0) {
    return invalid_argument("thread count must be >= 0 (0 = all cores), got %d", options.n_threads);
  }
  for (const Entry& e : kBackends) {
    if (name == e.name) return e.make(options);
  }
  std::string known;
  for (const Entry& e : kBackends) known += std::string(known.empty() ? "" : ", ") + e.name;
  if (name == "cuda") {
    return unsupported("this ds4cpp was built without the CUDA backend (no nvcc at configure time, or "
                       "-DDS4_CUDA=OFF); available backends: %s", known.c_str());
  }
  return unsupported("backend '%.*s' is not built into this ds4cpp (available: %s)", static_cast<int>(name.size()),
                     name.data(), known.c_str());
}

}  // namespace ds4::backend
