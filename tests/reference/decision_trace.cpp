// tests/reference/decision_trace.cpp — records the engine's discrete decisions for the
// decision-replay parity test (tools/reference/decision_replay.py).
//
// Role: decodes a golden prompt token by token on the CPU backend in f32-activation numerics
// (EngineOptions::f32_activations == ActivationNumerics::kF32) through session::ModelSession
// built on a recording Backend decorator, and writes, per layer and position:
//   experts.i32   [n_layer, T, n_used]   route op output (hash layers included)
//   raw_kv.f32    [n_layer, T, D]        the stored raw KV row (RoPE, FP8 on dims [0, D-n_rot),
//                                        f16), read from the session state after each step
//   comp_L<il>.f32  [n_comp, D]          compressed attention rows (FP8 + f16) at the end
//   index_L<il>.f32 [n_index, IDX]       indexer rows (Hadamard + FP4 + f16) at the end
//   idxq_L<il>.f32  [T, n_ih, IDX]       the Hadamard+FP4 indexer query passed to indexer_select
//   idxsel_L<il>.i32 [T, n_index_final]  indexer_select's allowed mask; row all -1 where the
//                                        op was not called (n_index <= top_k: every row visible)
//   logits.f32    [T, n_vocab]           the engine's next-token logits
// plus trace.json (shapes, dtypes, files, config). All files little-endian raw.
// Invariants: the decorator only forwards and copies op outputs; the numbers are those of a
// plain f32-activation session (the decorator is transparent).
// Layer attribution: within one decode step the forward runs layer by layer, attention
// (indexer_select) before the FFN (route), so the layer of an op is the count of route calls
// already seen in this step.
//
// Usage: ds4-decision-trace (--model PATH | --generate-seed S) --golden JSON --out DIR
//        [--threads N]

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/model.h"
#include "model/profiles.h"
#include "quant/half.h"
#include "quant/kv_sim.h"
#include "session/session.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace {

using namespace ds4;

class RecordingBackend final : public backend::ForwardingBackend {
 public:
  explicit RecordingBackend(backend::Backend& inner) : ForwardingBackend(inner), in_(inner) {}
  const char* name() const override { return "recording"; }
  int n_threads() const override { return in_.n_threads(); }
  void matmul(const backend::MatmulParams& p) override { in_.matmul(p); }
  void rms_norm(const backend::RmsNormParams& p) override { in_.rms_norm(p); }
  void hc_pre(const backend::HcPreParams& p) override { in_.hc_pre(p); }
  void hc_post(const backend::HcPostParams& p) override { in_.hc_post(p); }
  void matmul_grouped(const backend::MatmulParams* p, int n) override { in_.matmul_grouped(p, n); }
  void attention_inputs(const backend::AttentionInputsParams& p) override { in_.attention_inputs(p); }
  void compressor_step(const backend::CompressorStepParams& p) override { in_.compressor_step(p); }
  void sink_attention(const backend::SinkAttentionParams* p, int n) override { in_.sink_attention(p, n); }
  void swiglu(const backend::SwigluParams& p) override { in_.swiglu(p); }
  void moe(const backend::MoeParams& p) override { in_.moe(p); }
  void hc_collapse(const backend::HcCollapseParams& p) override { in_.hc_collapse(p); }

  void route(const backend::RouteParams& p) override {
    in_.route(p);
    if (p.n_rows != 1) ++bad_rows_;
    route_sel_.emplace_back(p.sel, p.sel + p.n_used);
  }
  void indexer_select(const backend::IndexerSelectParams* p, int n) override {
    in_.indexer_select(p, n);
    for (int i = 0; i < n; ++i) {
      IndexerCall c;
      c.layer = static_cast<int>(route_sel_.size());
      c.q.assign(p[i].q, p[i].q + static_cast<size_t>(p[i].n_head) * static_cast<size_t>(p[i].head_dim));
      c.allowed.assign(p[i].allowed, p[i].allowed + p[i].n_rows);
      idx_calls_.push_back(std::move(c));
    }
  }

  struct IndexerCall {
    int layer = 0;
    std::vector<float> q;          // [n_head, head_dim]
    std::vector<uint8_t> allowed;  // [n_rows]
  };
  void begin_step() {
    route_sel_.clear();
    idx_calls_.clear();
  }
  const std::vector<std::vector<int32_t>>& route_sel() const { return route_sel_; }
  const std::vector<IndexerCall>& idx_calls() const { return idx_calls_; }
  int bad_rows() const { return bad_rows_; }

 private:
  backend::Backend& in_;
  std::vector<std::vector<int32_t>> route_sel_;  // [layer] -> sel[n_used] of this step
  std::vector<IndexerCall> idx_calls_;
  int bad_rows_ = 0;
};

template <typename T>
bool write_raw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()), static_cast<std::streamsize>(v.size() * sizeof(T)));
  return f.good();
}

int die(const std::string& msg) {
  std::fprintf(stderr, "ds4-decision-trace: %s\n", msg.c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model_path, golden, out;
  int gen_seed = -1, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model_path = v;
    else if (a == "--generate-seed") gen_seed = std::stoi(v);
    else if (a == "--golden") golden = v;
    else if (a == "--out") out = v;
    else if (a == "--threads") threads = std::stoi(v);
    else return die("unknown option " + a);
  }
  if (golden.empty() || out.empty() || (model_path.empty() == (gen_seed < 0))) {
    return die("usage: (--model PATH | --generate-seed S) --golden JSON --out DIR [--threads N]");
  }
  std::ifstream gf(golden);
  if (!gf.good()) return die("cannot read " + golden);
  const auto gj = nlohmann::json::parse(gf);
  const auto tokens = gj.at("tokens").get<std::vector<int32_t>>();

  if (gen_seed >= 0) {
    model_path = out + "/model.gguf";
    tools::GenerateOptions opt;
    opt.quant = model::ExpertQuant::kQ2;
    opt.seed = static_cast<uint64_t>(gen_seed);
    const Status st = tools::generate_model(model::tiny_profile(), opt, model_path);
    if (!st.ok()) return die("generate: " + st.to_string());
  }
  auto m = model::Model::open(model_path);
  if (!m.ok()) return die("open model: " + m.status().to_string());
  const model::Model& model = *m.value();
  const model::ModelConfig& cfg = model.config();
  auto cpu = backend::make_cpu_backend(threads, backend::ActivationNumerics::kF32);
  RecordingBackend rec(*cpu);
  const int64_t T = static_cast<int64_t>(tokens.size());
  auto s_or = session::ModelSession::create(model, rec, T + 16, uint64_t{1} << 34);
  if (!s_or.ok()) return die("session: " + s_or.status().to_string());
  session::ModelSession& s = *s_or.value();

  const int64_t NL = cfg.n_layer, D = cfg.head_dim, NU = cfg.n_expert_used;
  const int64_t IDX = cfg.indexer_head_dim, NIH = cfg.n_indexer_head, V = cfg.n_vocab;
  std::vector<int32_t> experts(static_cast<size_t>(NL * T * NU), -1);
  std::vector<float> raw_kv(static_cast<size_t>(NL * T * D));
  std::vector<float> logits(static_cast<size_t>(T * V));
  std::vector<std::vector<float>> idxq(static_cast<size_t>(NL));
  std::vector<std::vector<std::vector<uint8_t>>> idxsel(static_cast<size_t>(NL));  // [il][t]
  for (int64_t il = 0; il < NL; ++il) {
    if (cfg.compress_ratios[il] == 4) {
      idxq[il].assign(static_cast<size_t>(T * NIH * IDX), 0.0f);
      idxsel[il].resize(static_cast<size_t>(T));
    }
  }
  const int64_t raw_cap = s.state().raw_cap();
  for (int64_t t = 0; t < T; ++t) {
    rec.begin_step();
    const Status st = s.decode(tokens[static_cast<size_t>(t)]);
    if (!st.ok()) return die("decode at " + std::to_string(t) + ": " + st.to_string());
    if (static_cast<int64_t>(rec.route_sel().size()) != NL) return die("route calls != n_layer");
    for (int64_t il = 0; il < NL; ++il) {
      const auto& sel = rec.route_sel()[il];
      std::memcpy(&experts[static_cast<size_t>((il * T + t) * NU)], sel.data(), NU * sizeof(int32_t));
      const session::LayerState& L = s.state().layers()[il];
      quant::f16_to_f32_row(L.raw.data() + (t % raw_cap) * D, &raw_kv[static_cast<size_t>((il * T + t) * D)], D);
    }
    for (const auto& c : rec.idx_calls()) {
      if (c.layer >= NL || idxq[c.layer].empty()) return die("indexer call outside a ratio-4 layer");
      std::memcpy(&idxq[c.layer][static_cast<size_t>(t * NIH * IDX)], c.q.data(), c.q.size() * sizeof(float));
      idxsel[c.layer][static_cast<size_t>(t)] = c.allowed;
    }
    const auto lg = s.logits();
    std::memcpy(&logits[static_cast<size_t>(t * V)], lg.data(), V * sizeof(float));
  }
  if (rec.bad_rows() != 0) return die("route op saw a batch of rows (expected decode rows)");

  nlohmann::json j;
  j["model"] = model_path;
  j["n_tokens"] = T;
  j["tokens"] = tokens;
  j["numerics"] = "cpu f32_activations, decode token by token";
  nlohmann::json arr;
  auto add = [&](const std::string& name, const char* dtype, std::vector<int64_t> shape) {
    arr[name] = {{"file", name + (std::string(dtype) == "i32" ? ".i32" : ".f32")},
                 {"dtype", dtype}, {"shape", shape}};
  };
  if (!write_raw(out + "/experts.i32", experts)) return die("write experts");
  add("experts", "i32", {NL, T, NU});
  if (!write_raw(out + "/raw_kv.f32", raw_kv)) return die("write raw_kv");
  add("raw_kv", "f32", {NL, T, D});
  if (!write_raw(out + "/logits.f32", logits)) return die("write logits");
  add("logits", "f32", {T, V});
  for (int64_t il = 0; il < NL; ++il) {
    const session::LayerState& L = s.state().layers()[il];
    const std::string sfx = "_L" + std::to_string(il);
    if (L.ratio != 0) {
      std::vector<float> comp(static_cast<size_t>(L.n_comp * D));  // the FP8 stores, decoded
      const int nr = static_cast<int>(cfg.n_rot);
      const int comp_row = quant::fp8_row_bytes(static_cast<int>(D), nr);
      for (int64_t r = 0; r < L.n_comp; ++r) {
        quant::fp8_row_decode(L.comp.data() + r * comp_row, static_cast<int>(D), nr, comp.data() + r * D);
      }
      if (!write_raw(out + "/comp" + sfx + ".f32", comp)) return die("write comp");
      add("comp" + sfx, "f32", {L.n_comp, D});
    }
    if (L.ratio == 4) {
      std::vector<float> index(static_cast<size_t>(L.n_index * IDX));  // the FP4 stores, decoded
      const int idx_row = quant::fp4_row_bytes(static_cast<int>(IDX));
      for (int64_t r = 0; r < L.n_index; ++r) {
        quant::fp4_row_decode(L.index.data() + r * idx_row, static_cast<int>(IDX), index.data() + r * IDX,
                              quant::fp4_value_table());
      }
      if (!write_raw(out + "/index" + sfx + ".f32", index)) return die("write index");
      add("index" + sfx, "f32", {L.n_index, IDX});
      if (!write_raw(out + "/idxq" + sfx + ".f32", idxq[il])) return die("write idxq");
      add("idxq" + sfx, "f32", {T, NIH, IDX});
      std::vector<int32_t> sel(static_cast<size_t>(T * L.n_index), -1);
      for (int64_t t = 0; t < T; ++t) {
        const auto& a = idxsel[il][static_cast<size_t>(t)];
        for (size_t r = 0; r < a.size(); ++r) sel[static_cast<size_t>(t * L.n_index) + r] = a[r];
        for (size_t r = a.size(); !a.empty() && r < static_cast<size_t>(L.n_index); ++r) {
          sel[static_cast<size_t>(t * L.n_index) + r] = 0;  // not yet visible at t
        }
      }
      if (!write_raw(out + "/idxsel" + sfx + ".i32", sel)) return die("write idxsel");
      add("idxsel" + sfx, "i32", {T, L.n_index});
    }
  }
  j["arrays"] = arr;
  std::ofstream jf(out + "/trace.json");
  jf << j.dump(1) << "\n";
  if (!jf.good()) return die("write trace.json");
  std::printf("ds4-decision-trace: %lld positions, %lld layers -> %s\n", static_cast<long long>(T),
              static_cast<long long>(NL), out.c_str());
  return 0;
}
