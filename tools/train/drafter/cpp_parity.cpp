// tools/train/drafter/cpp_parity.cpp — runs the C++ speculative::Drafter on captures given by
// cpp_parity.py, so the PyTorch twin (dspark_ref.py) and the engine's drafter can be compared
// on identical inputs.
//   drafter_cpp_parity TARGET.gguf DRAFTER.gguf CAPS.f32 TOKENS.i32 T P1 [P2 ...] OUT.f32
// CAPS: [T, capture_width] f32 (HC means of the capture layers), TOKENS: [T] i32. For each
// anchor position P: ring reset, commit rows 0..P-1, propose(anchor TOKENS[P], P, B drafts, no
// threshold). OUT per P and slot k: draft id (f32, -1 when not drafted), raw confidence logit,
// then Z_k [n_vocab] (zeros when not drafted). Errors exit 2 with a message.
// Built by hand against a build dir holding ds4_spec and its dependencies (README.md).
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "speculative/drafter.h"

int main(int argc, char** argv) {
  using namespace ds4;
  if (argc < 8) {
    std::fprintf(stderr, "usage: %s TARGET DRAFTER CAPS.f32 TOKENS.i32 T P... OUT.f32\n", argv[0]);
    return 2;
  }
  auto m = model::Model::open(argv[1]);
  if (!m.ok()) {
    std::fprintf(stderr, "target: %s\n", m.status().message().c_str());
    return 2;
  }
  auto be = backend::make_cpu_backend(1);
  auto d = speculative::load_drafter(**m, *be, argv[2]);
  if (!d.ok()) {
    std::fprintf(stderr, "drafter: %s\n", d.status().message().c_str());
    return 2;
  }
  speculative::Drafter& dr = **d;
  const int T = std::atoi(argv[5]);
  const int64_t cw = dr.capture_width();
  std::vector<float> caps(static_cast<size_t>(T) * cw);
  std::vector<int32_t> toks(T);
  auto read_all = [](const char* path, void* dst, size_t bytes) {
    std::FILE* f = std::fopen(path, "rb");
    const bool ok = f && std::fread(dst, 1, bytes, f) == bytes;
    if (f) std::fclose(f);
    return ok;
  };
  if (!read_all(argv[3], caps.data(), caps.size() * 4) || !read_all(argv[4], toks.data(), toks.size() * 4)) {
    std::fprintf(stderr, "cannot read captures / tokens for T=%d, width %lld\n", T, static_cast<long long>(cw));
    return 2;
  }
  std::FILE* out = std::fopen(argv[argc - 1], "wb");
  if (!out) return 2;
  const int B = dr.config().block_size;
  const int64_t V = (*m)->config().n_vocab;
  std::vector<float> zz(static_cast<size_t>(V));
  for (int ai = 6; ai < argc - 1; ++ai) {
    const int P = std::atoi(argv[ai]);
    if (P < 1 || P >= T) {
      std::fprintf(stderr, "anchor position %d outside [1, %d)\n", P, T);
      return 2;
    }
    dr.ring_reset();
    dr.commit_rows(0, P, caps.data());
    speculative::Proposal pr;
    dr.propose(toks[P], P, B, {}, &pr);
    for (int k = 0; k < B; ++k) {
      const float head[2] = {k < pr.n ? static_cast<float>(pr.tokens[k]) : -1.0f,
                             k < pr.n ? dr.last_conf_logit(k) : 0.0f};
      std::fwrite(head, 4, 2, out);
      std::fill(zz.begin(), zz.end(), 0.0f);
      if (k < pr.n) {
        auto z = dr.last_z(k);
        for (int64_t v = 0; v < V; ++v) zz[v] = z[v];
      }
      std::fwrite(zz.data(), 4, zz.size(), out);
    }
  }
  return std::fclose(out) == 0 ? 0 : 2;
}
