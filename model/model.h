// model/model.h — a DS4 model file opened, validated and bound: config + weights + the mmapped
// gguf::File that keeps the weight bytes alive.
//
// Role: the single entry point the engine uses to load a model. open() runs, in order: GGUF
// parse (gguf::File), architecture check, config read + validate_config(), validate_layout()
// over the tensor directory, bind_weights() and check_hash_tables(). Any failure returns one
// Status naming the key/tensor with expected vs actual; nothing aborts on a bad file.
// Invariants: a Model is immutable after open(); its TensorViews point into file_'s mapping.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "gguf/gguf.h"
#include "model/config.h"
#include "model/weights.h"

namespace ds4::model {

// Everything a validation pass found (used by `ds4-gguf inspect`).
struct ValidationReport {
  bool config_ok = false;             // config read and validate_config() passed
  ModelConfig config;                 // what could be read (may be partial if !config_ok)
  std::vector<std::string> errors;    // config, layout and hash-table problems
  std::vector<std::string> warnings;  // ignored extra tensors
  bool expert_quant_known = false;
  ExpertQuant expert_quant = ExpertQuant::kQ2;
  bool ok() const { return config_ok && errors.empty(); }
};
// Runs every check on an already-parsed file and collects all problems.
ValidationReport validate_file(const gguf::File& file);

class Model {
 public:
  static Expected<std::unique_ptr<Model>> open(const std::string& path);
  // Takes ownership of an already-parsed file (tests build files in memory).
  static Expected<std::unique_ptr<Model>> from_file(std::unique_ptr<gguf::File> file);

  const ModelConfig& config() const { return config_; }
  const ModelWeights& weights() const { return weights_; }
  const gguf::File& file() const { return *file_; }
  ExpertQuant expert_quant() const { return weights_.expert_quant; }
  const std::vector<std::string>& warnings() const { return warnings_; }

 private:
  Model() = default;
  std::unique_ptr<gguf::File> file_;
  ModelConfig config_;
  ModelWeights weights_;
  std::vector<std::string> warnings_;
};

}  // namespace ds4::model
