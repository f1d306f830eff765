// tools/dspark-gguf/main.cpp — `ds4-dspark-gguf`: flag parsing only.
//   generate --target TARGET.gguf --seed N -o FILE [--stages S] [--block-size B]
//            [--markov-rank R] [--layers a,b,c] [--window W] [--dense-type q8_0|f16|f32|bf16]
//            [--layout deepseek4|0731] [--source-revision REV] [--fill auto|quantize|random]
//            [--threads T]   (same bytes for any T; --fill random: seconds at the Flash width)
//   check    --target TARGET.gguf FILE      (exit 0 valid, 1 invalid, 2 unreadable; prints the
//            metadata layout, the provenance and whether it names the target's checkpoint)
//   bench    --target TARGET.gguf --drafter FILE [-n N] [--prompt-len P] [--threads T]
//            plain greedy vs DSpark greedy side by side (same prompt, same thread count),
//            plus an "oracle" run whose proposer knows the plain greedy future (the upper
//            bound of acceptance: measures what verify batches cost against decodes).
//   dump     --target TARGET.gguf --drafter FILE --rows P --anchor A -o PREFIX
//            commits P synthetic capture rows, proposes once and writes PREFIX.json +
//            PREFIX.bin (captures, ring rows, Z logits) for the Python reference check
//            (tests/speculative/dspark_ref.py).
#include <CLI/CLI.hpp>

#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/timer.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "sample/sampler.h"
#include "session/session.h"
#include "speculative/drafter.h"
#include "speculative/runtime.h"
#include "model/config.h"
#include "speculative/drafter_gen.h"
#include "speculative/drafter_weights.h"

namespace {

ds4::Expected<ds4::model::ModelConfig> target_config(const std::string& path) {
  auto f = ds4::gguf::File::open(path);
  if (!f.ok()) return f.status();
  return ds4::model::config_from_gguf(**f);
}

bool parse_type(const std::string& s, ds4::gguf::GgmlType* t) {
  if (s == "q8_0") *t = ds4::gguf::GgmlType::kQ8_0;
  else if (s == "f16") *t = ds4::gguf::GgmlType::kF16;
  else if (s == "f32") *t = ds4::gguf::GgmlType::kF32;
  else if (s == "bf16") *t = ds4::gguf::GgmlType::kBF16;
  else return false;
  return true;
}

// Proposes the known plain-greedy future (bench upper bound).
class FutureProposer final : public ds4::speculative::Proposer {
 public:
  FutureProposer(std::vector<int32_t> t, int block) : t_(std::move(t)), block_(block) {}
  int block_size() const override { return block_; }
  void propose(int32_t, int64_t pos, int n_max, std::span<const float>, ds4::speculative::Proposal* out) override {
    *out = ds4::speculative::Proposal();
    for (int k = 0; k < n_max && pos + 1 + k < static_cast<int64_t>(t_.size()); ++k) {
      out->tokens[k] = t_[pos + 1 + k];
      out->n = k + 1;
    }
  }

 private:
  std::vector<int32_t> t_;
  int block_;
};

int run_bench(const std::string& target, const std::string& drafter_path, int n_gen, int prompt_len, int threads,
              float confidence) {
  auto m = ds4::model::Model::open(target);
  if (!m.ok()) {
    std::fprintf(stderr, "ds4-dspark-gguf: %s\n", m.status().to_string().c_str());
    return 2;
  }
  auto be = ds4::backend::make_cpu_backend(threads);
  auto d = ds4::speculative::load_drafter(**m, *be, drafter_path);
  if (!d.ok()) {
    std::fprintf(stderr, "ds4-dspark-gguf: %s\n", d.status().to_string().c_str());
    return 2;
  }
  const auto& cfg = (*m)->config();
  std::vector<int32_t> prompt(prompt_len);
  uint64_t x = 88172645463325252ull;
  for (int32_t& t : prompt) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    t = static_cast<int32_t>(x % cfg.n_vocab);
  }
  const int64_t n_ctx = prompt_len + n_gen + 16;
  auto new_session = [&]() { return std::move(ds4::session::ModelSession::create(**m, *be, n_ctx, 1ull << 36)).value(); };
  // Plain.
  auto ps = new_session();
  (void)ps->prefill(prompt);
  std::vector<int32_t> plain;
  ds4::Timer t;
  for (int i = 0; i < n_gen; ++i) {
    const int32_t tok = ds4::argmax(ps->logits());
    (void)ps->decode(tok);
    plain.push_back(tok);
  }
  const double plain_s = t.seconds();
  std::vector<int32_t> timeline = prompt;
  timeline.insert(timeline.end(), plain.begin(), plain.end());
  auto run_spec = [&](ds4::speculative::Proposer& p, const ds4::speculative::SpecConfig& sc, const char* label) {
    auto s = new_session();
    ds4::speculative::Runtime rt(*s, p, sc);
    (void)s->prefill(prompt);
    std::vector<int32_t> got, step;
    ds4::Timer tt;
    while (static_cast<int>(got.size()) < n_gen) {
      if (!rt.step(n_gen - static_cast<int>(got.size()), -1, -1, &step).ok() || step.empty()) break;
      got.insert(got.end(), step.begin(), step.end());
    }
    const double sec = tt.seconds();
    std::printf("%-8s %6.1f tok/s (%.3f s, %d tokens)  identical_to_plain=%s  speed_vs_plain=%.2fx\n", label,
                got.size() / sec, sec, static_cast<int>(got.size()), got == plain ? "yes" : "NO", plain_s / sec);
    std::printf("%s", rt.stats().report().c_str());
  };
  std::printf("target %s: %u layers, n_embd %u, vocab %u; threads %d; prompt %d; generate %d\n", target.c_str(),
              cfg.n_layer, cfg.n_embd, cfg.n_vocab, threads, prompt_len, n_gen);
  std::printf("%-8s %6.1f tok/s (%.3f s, %d tokens)\n", "plain", n_gen / plain_s, plain_s, n_gen);
  ds4::speculative::SpecConfig sc;
  sc.confidence = confidence;
  ds4::speculative::DSparkProposer dp(**d);
  run_spec(dp, sc, "dspark");
  FutureProposer fp(timeline, (*d)->config().block_size);
  ds4::speculative::SpecConfig oc;
  oc.confidence = 0.0f;
  oc.scheduler = false;
  run_spec(fp, oc, "oracle");
  oc.fold = true;
  run_spec(fp, oc, "oracle+fold");
  return 0;
}

int run_dump(const std::string& target, const std::string& drafter_path, int rows, int anchor,
             const std::string& prefix) {
  auto m = ds4::model::Model::open(target);
  if (!m.ok()) {
    std::fprintf(stderr, "ds4-dspark-gguf: %s\n", m.status().to_string().c_str());
    return 2;
  }
  auto be = ds4::backend::make_cpu_backend(1);
  auto dr = ds4::speculative::load_drafter(**m, *be, drafter_path);
  if (!dr.ok()) {
    std::fprintf(stderr, "ds4-dspark-gguf: %s\n", dr.status().to_string().c_str());
    return 2;
  }
  ds4::speculative::Drafter& d = **dr;
  const auto& cfg = (*m)->config();
  const int64_t cw = d.capture_width();
  const int S = d.config().n_stages, B = d.config().block_size, W = d.config().window;
  const int64_t D = cfg.head_dim, V = cfg.n_vocab;
  std::vector<float> hidden(static_cast<size_t>(rows) * cw);
  for (int p = 0; p < rows; ++p)
    for (int64_t j = 0; j < cw; ++j)
      hidden[p * cw + j] = 2.0f * std::sin(0.37f * static_cast<float>(p) + 0.011f * static_cast<float>(j));
  d.commit_rows(0, rows, hidden.data());
  ds4::speculative::Proposal prop;
  d.propose(anchor, rows, B, {}, &prop);
  const int first = std::max(0, rows - W);
  FILE* f = std::fopen((prefix + ".bin").c_str(), "wb");
  if (!f) return 2;
  std::fwrite(hidden.data(), sizeof(float), hidden.size(), f);
  for (int s = 0; s < S; ++s)
    for (int p = first; p < rows; ++p) std::fwrite(d.ring_row(s, p), sizeof(float), D, f);
  for (int k = 0; k < prop.n; ++k) std::fwrite(d.last_z(k).data(), sizeof(float), V, f);
  std::fclose(f);
  FILE* j = std::fopen((prefix + ".json").c_str(), "w");
  if (!j) return 2;
  std::fprintf(j, "{\"rows\": %d, \"anchor\": %d, \"window\": %d, \"stages\": %d, \"head_dim\": %lld, "
                  "\"block\": %d, \"vocab\": %lld, \"capture_width\": %lld, \"first_ring\": %d, \"drafts\": [",
               rows, anchor, W, S, static_cast<long long>(D), B, static_cast<long long>(V), static_cast<long long>(cw), first);
  for (int k = 0; k < prop.n; ++k) std::fprintf(j, "%s%d", k ? ", " : "", prop.tokens[k]);
  std::fprintf(j, "], \"conf_logits\": [");
  for (int k = 0; k < prop.n; ++k) std::fprintf(j, "%s%.9g", k ? ", " : "", d.last_conf_logit(k));
  std::fprintf(j, "]}\n");
  std::fclose(j);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds4-dspark-gguf: random DSpark support GGUFs and support-file checks"};
  app.require_subcommand(1);
  std::string target, out, layers, dense = "q8_0";
  ds4::speculative::DrafterGenOptions opt;
  auto* gen = app.add_subcommand("generate", "write a random drafter shaped for the target");
  gen->add_option("--target", target, "target model GGUF (shapes come from it)")->required();
  gen->add_option("--seed", opt.seed, "random seed");
  gen->add_option("-o,--output", out, "output GGUF path")->required();
  gen->add_option("--stages", opt.n_stages, "drafter stages (3)");
  gen->add_option("--block-size", opt.block_size, "drafts per proposal (5)");
  gen->add_option("--markov-rank", opt.markov_rank, "Markov rank (0: 256 for Flash, 64 otherwise)");
  gen->add_option("--layers", layers, "capture layers, comma-separated (default: last 3)");
  gen->add_option("--window", opt.window, "context ring rows (0: target sliding window)");
  gen->add_option("--dense-type", dense, "dense tensor type: q8_0, f16, f32, bf16");
  std::string layout = "deepseek4";
  gen->add_option("--layout", layout,
                  "metadata layout: deepseek4 (deepseek4.dspark.* keys) or 0731 (the published "
                  "standalone form: architecture deepseek4-dspark, bare dspark.* keys, provenance)")
      ->check(CLI::IsMember({"deepseek4", "0731"}))
      ->capture_default_str();
  gen->add_option("--source-revision", opt.source_revision,
                  "0731 layout: dspark.source.revision (default: the target's "
                  "general.source.revision, else the DeepSeek-V4-Flash-0731 revision)");
  std::string fill = "auto";
  gen->add_option("--fill", fill,
                  "quantized tensors: quantize (real quantization of random floats; the Flash "
                  "width's IQ2_XXS experts take tens of minutes), random (random valid blocks at "
                  "the same RMS, seconds: for speed figures), auto (quantize for small targets)")
      ->check(CLI::IsMember({"auto", "quantize", "random"}))
      ->capture_default_str();
  gen->add_option("--threads", opt.threads, "fill threads (0: all cores; the bytes do not depend on it)")
      ->capture_default_str();
  std::string file;
  auto* chk = app.add_subcommand("check", "validate a support file against a target");
  chk->add_option("--target", target, "target model GGUF")->required();
  chk->add_option("file", file, "support GGUF")->required();
  std::string drafter_path;
  int n_gen = 256, prompt_len = 64, threads = 1;
  float confidence = 0.0f;
  auto* bench = app.add_subcommand("bench", "plain vs DSpark greedy tokens/s on the CPU backend");
  bench->add_option("--target", target, "target model GGUF")->required();
  bench->add_option("--drafter", drafter_path, "support GGUF")->required();
  bench->add_option("-n,--tokens", n_gen, "tokens to generate");
  bench->add_option("--prompt-len", prompt_len, "random prompt length");
  bench->add_option("--threads", threads, "CPU threads");
  bench->add_option("--confidence", confidence, "σ threshold of the DSpark run");
  int dump_rows = 40, dump_anchor = 5;
  std::string dump_prefix;
  auto* dump = app.add_subcommand("dump", "one proposal's intermediates for the reference check");
  dump->add_option("--target", target, "target model GGUF")->required();
  dump->add_option("--drafter", drafter_path, "support GGUF")->required();
  dump->add_option("--rows", dump_rows, "synthetic committed context rows");
  dump->add_option("--anchor", dump_anchor, "anchor token id");
  dump->add_option("-o,--output", dump_prefix, "output prefix")->required();
  CLI11_PARSE(app, argc, argv);
  if (dump->parsed()) return run_dump(target, drafter_path, dump_rows, dump_anchor, dump_prefix);
  if (bench->parsed()) return run_bench(target, drafter_path, n_gen, prompt_len, threads, confidence);

  auto cfg = target_config(target);
  if (!cfg.ok()) {
    std::fprintf(stderr, "ds4-dspark-gguf: target '%s': %s\n", target.c_str(), cfg.status().to_string().c_str());
    return 2;
  }
  if (gen->parsed()) {
    if (!parse_type(dense, &opt.dense_type)) {
      std::fprintf(stderr, "ds4-dspark-gguf: --dense-type '%s': expected q8_0, f16, f32 or bf16\n", dense.c_str());
      return 2;
    }
    std::stringstream ss(layers);
    for (std::string item; std::getline(ss, item, ',');) {
      try {
        opt.target_layers.push_back(std::stoi(item));
      } catch (...) {
        std::fprintf(stderr, "ds4-dspark-gguf: --layers: '%s' is not an integer\n", item.c_str());
        return 2;
      }
    }
    opt.layout = layout == "0731" ? ds4::speculative::SupportLayout::kStandalone0731
                                  : ds4::speculative::SupportLayout::kDeepseek4Keys;
    opt.fill = fill == "quantize" ? ds4::speculative::DrafterFill::kQuantize
               : fill == "random"   ? ds4::speculative::DrafterFill::kRandomBlocks
                                    : ds4::speculative::DrafterFill::kAuto;
    ds4::Timer timer;
    const ds4::Status st = ds4::speculative::generate_drafter(*cfg, opt, out);
    if (!st.ok()) {
      std::fprintf(stderr, "ds4-dspark-gguf: %s\n", st.to_string().c_str());
      return 1;
    }
    std::printf("wrote %s (fill %s, %.1f s)\n", out.c_str(),
                ds4::speculative::drafter_fill_name(ds4::speculative::resolved_fill(*cfg, opt)), timer.seconds());
    return 0;
  }
  auto f = ds4::gguf::File::open(file);
  if (!f.ok()) {
    std::fprintf(stderr, "ds4-dspark-gguf: '%s': %s\n", file.c_str(), f.status().to_string().c_str());
    return 2;
  }
  ds4::speculative::DSparkConfig d;
  const std::vector<std::string> errs = ds4::speculative::validate_drafter(**f, *cfg, &d);
  for (const std::string& e : errs) std::printf("error: %s\n", e.c_str());
  if (!errs.empty()) return 1;
  std::string ids;
  for (int l : d.target_layers) ids += (ids.empty() ? "" : ",") + std::to_string(l);
  std::printf("ok: stages=%d block=%d markov_rank=%d noise=%d window=%d target_layers=[%s] tensors=%zu\n",
              d.n_stages, d.block_size, d.markov_rank, d.noise_token_id, d.window, ids.c_str(), f.value()->tensors().size());
  std::printf("layout: %s\n", ds4::speculative::support_layout_name(d.layout));
  for (const auto& [k, v] : d.provenance.fields) std::printf("provenance: %s = %s\n", k.c_str(), v.c_str());
  const ds4::speculative::ProvenanceCheck pc = ds4::speculative::check_provenance(d, *cfg);
  switch (pc.match) {
    case ds4::speculative::ProvenanceMatch::kNotRecorded: std::printf("target: not recorded in this file\n"); break;
    case ds4::speculative::ProvenanceMatch::kMatch: std::printf("target: matches the model's general.source.revision\n"); break;
    case ds4::speculative::ProvenanceMatch::kTargetUnknown: std::printf("target: unconfirmed: %s\n", pc.message.c_str()); break;
    case ds4::speculative::ProvenanceMatch::kMismatch: std::printf("warning: %s\n", pc.message.c_str()); break;
  }
  return 0;
}
