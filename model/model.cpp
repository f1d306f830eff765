// model/model.cpp — Model::open and the full validation pass (see model.h).
#include "model/model.h"

#include <utility>

namespace ds4::model {

ValidationReport validate_file(const gguf::File& file) {
  ValidationReport rep;
  std::vector<std::string> read_problems;
  rep.config = read_config(file, &read_problems);
  if (!read_problems.empty()) {
    rep.errors = std::move(read_problems);
    return rep;  // shapes unknown: a layout check would only add noise
  }
  auto cfg_problems = validate_config(rep.config);
  if (!cfg_problems.empty()) {
    rep.errors = std::move(cfg_problems);
    return rep;
  }
  rep.config_ok = true;
  const auto descs = describe_tensors(file);
  LayoutReport layout = validate_layout(rep.config, descs);
  rep.errors = std::move(layout.errors);
  rep.warnings = std::move(layout.warnings);
  rep.expert_quant_known = layout.expert_quant_known;
  rep.expert_quant = layout.expert_quant;
  if (!rep.errors.empty()) return rep;
  auto w = bind_weights(rep.config, file);
  if (!w.ok()) {
    rep.errors.push_back(w.status().message());
    return rep;
  }
  Status st = check_hash_tables(rep.config, *w);
  if (!st.ok()) rep.errors.push_back(st.message());
  return rep;
}

namespace {

// At most this many problems are spelled out in one Status; the rest are counted.
constexpr size_t kMaxListedProblems = 12;

Status report_status(const gguf::File& file, const ValidationReport& rep) {
  std::string msg = "'" + (file.path().empty() ? std::string("<memory>") : file.path()) +
                    "' is not a valid DS4 model: ";
  for (size_t i = 0; i < rep.errors.size() && i < kMaxListedProblems; ++i) {
    if (i) msg += "; ";
    msg += rep.errors[i];
  }
  if (rep.errors.size() > kMaxListedProblems)
    msg += "; (+" + std::to_string(rep.errors.size() - kMaxListedProblems) + " more problems)";
  return Status(ErrorCode::kInvalidArgument, msg);
}

}  // namespace

Expected<std::unique_ptr<Model>> Model::open(const std::string& path) {
  DS4_ASSIGN_OR_RETURN(std::unique_ptr<gguf::File> file, gguf::File::open(path));
  return from_file(std::move(file));
}

Expected<std::unique_ptr<Model>> Model::from_file(std::unique_ptr<gguf::File> file) {
  ValidationReport rep = validate_file(*file);
  if (!rep.ok()) return report_status(*file, rep);
  std::unique_ptr<Model> m(new Model());
  m->config_ = std::move(rep.config);
  m->warnings_ = std::move(rep.warnings);
  DS4_ASSIGN_OR_RETURN(m->weights_, bind_weights(m->config_, *file));
  m->file_ = std::move(file);
  return m;
}

}  // namespace ds4::model
