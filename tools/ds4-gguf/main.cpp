// tools/ds4-gguf/main.cpp — `ds4-gguf` command line: flag parsing only; the work is in
// ds4_gguf_tool_lib (ds4_gguf.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <iostream>

#include "core/timer.h"
#include "model/profiles.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace {

ds4::model::ExpertQuant parse_quant(const std::string& s) {
  return s == "q4" ? ds4::model::ExpertQuant::kQ4 : ds4::model::ExpertQuant::kQ2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ds4-gguf: inspect, generate and quantize DeepSeek V4 Flash (DS4) GGUF files"};
  app.require_subcommand(1);

  // inspect
  std::string inspect_path;
  ds4::tools::InspectOptions iopt;
  auto* inspect = app.add_subcommand(
      "inspect",
      "Print summary, metadata and the DS4 validation report of a GGUF file. Exit code: 0 valid "
      "DS4 model, 1 readable GGUF that is not a valid DS4 model, 2 unreadable file.");
  inspect->add_option("FILE", inspect_path, "GGUF file")->required();
  inspect->add_flag("--json", iopt.json, "machine-readable JSON instead of text");
  inspect->add_flag("--tensors", iopt.tensors, "also list every tensor (name, type, shape, bytes)");

  // generate
  std::string profile = "tiny", gen_quant = "q2", gen_out, fill = "auto";
  uint64_t seed = 0;
  uint32_t sparse = 0;
  bool route_all = false;
  uint32_t layers = 0;
  bool quiet = false;
  auto* generate = app.add_subcommand(
      "generate",
      "Write a deterministic random-weight model in the published DS4 layout (same seed -> same "
      "bytes).");
  generate->add_option("--profile", profile, "shape preset")
      ->check(CLI::IsMember({"tiny", "flash"}))
      ->capture_default_str();
  generate->add_option("--quant", gen_quant,
                       "routed-expert layout: q2 (gate/up IQ2_XXS, down Q2_K) or q4 (all Q4_K)")
      ->check(CLI::IsMember({"q2", "q4"}))
      ->capture_default_str();
  generate->add_option("--seed", seed, "random seed")->capture_default_str();
  generate->add_option("-o,--output", gen_out, "output GGUF path")->required();
  generate->add_option("--sparse-experts", sparse,
                       "fill only K experts per layer (others are file holes) and bias routing "
                       "to them; K >= expert_used_count; 0 = fill all")
      ->capture_default_str();
  generate->add_flag("--route-all", route_all,
                     "with --sparse-experts: keep the holes but route over all experts (no bias), so "
                     "batches touch as many distinct experts as real text (GPU speed figures)");
  generate->add_option("--layers", layers,
                       "keep the profile's widths but only the first N layers (a reduced-depth file; "
                       "0 = the profile's depth)")
      ->capture_default_str();
  generate->add_option("--fill", fill,
                       "quantized tensors: quantize (real quantization of random floats), random "
                       "(random valid blocks, fast), auto (quantize for small models)")
      ->check(CLI::IsMember({"auto", "quantize", "random"}))
      ->capture_default_str();
  generate->add_flag("-q,--quiet", quiet, "no progress output");
  std::string release = "preview";
  generate->add_option("--release", release,
                       "identity metadata: preview (none, like the preview GGUFs) or 0731 "
                       "(general.source.revision/url of DeepSeek-V4-Flash-0731, which the 0731 "
                       "DSpark support file's provenance names)")
      ->check(CLI::IsMember({"preview", "0731"}))
      ->capture_default_str();
  std::string vocab = "auto";
  generate->add_option("--vocab", vocab,
                       "tokenizer: auto (flash: the real DeepSeek V4 vocabulary when built, else "
                       "synthetic; tiny: synthetic), real, synthetic, or a tokenizer GGUF path "
                       "(tools/tokenizer/import_deepseek_v4.py)")
      ->envname("DS4_VOCAB")
      ->capture_default_str();

  // quantize
  std::string q_in, q_out, q_quant = "q2";
  auto* quantize = app.add_subcommand(
      "quantize",
      "Convert a float (F32/F16/BF16) DS4-layout GGUF to the published layout: routed experts "
      "IQ2_XXS/Q2_K (q2) or Q4_K (q4), attention/shared/output Q8_0, HC/compressor/indexer/"
      "router/embedding F16, norms/biases F32, tid2eid I32. Metadata is copied.");
  quantize->add_option("IN", q_in, "input float GGUF")->required();
  quantize->add_option("-o,--output", q_out, "output GGUF path")->required();
  quantize->add_option("--quant", q_quant, "routed-expert layout: q2 or q4")
      ->check(CLI::IsMember({"q2", "q4"}))
      ->capture_default_str();
  quantize->add_flag("-q,--quiet", quiet, "no progress output");

  CLI11_PARSE(app, argc, argv);

  if (inspect->parsed()) {
    return ds4::tools::inspect_file(inspect_path, iopt, std::cout, std::cerr);
  }
  if (generate->parsed()) {
    auto cfg = ds4::model::profile_by_name(profile);
    if (!cfg.ok()) {
      std::cerr << "ds4-gguf generate: " << cfg.status().to_string() << "\n";
      return 2;
    }
    ds4::tools::GenerateOptions opt;
    opt.quant = parse_quant(gen_quant);
    opt.seed = seed;
    opt.sparse_experts = sparse;
    opt.route_all = route_all;
    if (layers != 0) {
      const ds4::Status ls = ds4::model::set_layer_count(*cfg, layers);
      if (!ls.ok()) {
        std::cerr << "ds4-gguf generate: --layers: " << ls.message() << "\n";
        return 2;
      }
    }
    opt.fill = fill == "quantize" ? ds4::tools::FillMode::kQuantize
               : fill == "random" ? ds4::tools::FillMode::kRandomBlocks
                                  : ds4::tools::FillMode::kAuto;
    opt.progress = !quiet;
    opt.release = release == "0731" ? ds4::tools::Release::k0731 : ds4::tools::Release::kPreview;
    const std::string real = ds4::tools::default_real_vocab_path();
    if (vocab == "real") {
      if (real.empty()) {
        std::cerr << "ds4-gguf generate: --vocab real: the DeepSeek V4 tokenizer GGUF was not "
                     "built (install tools/requirements.txt with scripts/setup.sh, then build "
                     "the ds4_real_vocab target)\n";
        return 2;
      }
      opt.vocab_path = real;
    } else if (vocab == "auto") {
      if (profile == "flash") {
        opt.vocab_path = real;
        if (real.empty() && !quiet)
          std::cerr << "ds4-gguf generate: the real DeepSeek V4 vocabulary is not built; using "
                       "the synthetic one\n";
      }
    } else if (vocab != "synthetic") {
      opt.vocab_path = vocab;
    }
    ds4::Status st = ds4::tools::generate_model(*cfg, opt, gen_out);
    if (!st.ok()) {
      std::cerr << "ds4-gguf generate: " << st.to_string() << "\n";
      return 1;
    }
    return 0;
  }
  if (quantize->parsed()) {
    ds4::tools::QuantizeOptions opt;
    opt.quant = parse_quant(q_quant);
    opt.progress = !quiet;
    ds4::Status st = ds4::tools::quantize_model(q_in, q_out, opt);
    if (!st.ok()) {
      std::cerr << "ds4-gguf quantize: " << st.to_string() << "\n";
      return 1;
    }
    return 0;
  }
  return 2;
}
