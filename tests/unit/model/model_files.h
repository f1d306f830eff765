// tests/unit/model/model_files.h — helpers that build DS4-layout GGUF files for model/ tests
// without the generator: metadata from config_values(), tensors as writer holes (zeros read
// back; valid blocks for every type, and expert id 0 in tid2eid) unless a test overrides one.
#pragma once

#include <unistd.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "gguf/writer.h"
#include "model/config.h"
#include "model/weights.h"

namespace ds4::model::testing {

inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/ds4_model_" + std::to_string(::getpid()) + "_" + name;
}

inline Status put_config(gguf::Writer& w, const ModelConfig& cfg) {
  for (const ConfigValue& v : config_values(cfg)) {
    Status st;
    switch (v.type) {
      case KeyType::kU32: st = w.set_u32(v.key, static_cast<uint32_t>(v.u)); break;
      case KeyType::kU64: st = w.set_u64(v.key, v.u); break;
      case KeyType::kF32: st = w.set_f32(v.key, v.f); break;
      case KeyType::kBool: st = w.set_bool(v.key, v.b); break;
      case KeyType::kArrayU32: st = w.set_array_u32(v.key, v.au); break;
      case KeyType::kArrayF32: st = w.set_array_f32(v.key, v.af); break;
    }
    if (!st.ok()) return st;
  }
  return Status::ok_status();
}

struct FileEdits {
  std::string architecture = "deepseek4";
  ExpertQuant quant = ExpertQuant::kQ2;
  // name -> replacement type (shape kept) / dropped tensors / extra tensors (name -> ne)
  std::map<std::string, gguf::GgmlType> retype;
  std::vector<std::string> drop;
  std::map<std::string, std::vector<int64_t>> extra;
  // Filled tensors: name -> bytes (must match the tensor size).
  std::map<std::string, std::vector<uint8_t>> data;
};

// Writes a model for `cfg` to `path`; every tensor a hole unless edits.data has it.
inline Status write_model(const ModelConfig& cfg, const std::string& path,
                          const FileEdits& edits = {}) {
  gguf::Writer w;
  Status st = w.set_string("general.architecture", edits.architecture);
  if (st.ok()) st = put_config(w, cfg);
  if (!st.ok()) return st;
  for_each_tensor_spec(cfg, [&](const TensorSpec& s) {
    if (!st.ok()) return;
    for (const auto& d : edits.drop)
      if (d == s.name) return;
    gguf::GgmlType t = s.published_type(edits.quant);
    if (auto it = edits.retype.find(s.name); it != edits.retype.end()) t = it->second;
    std::vector<int64_t> ne(s.ne.begin(), s.ne.begin() + s.n_dims);
    if (auto it = edits.data.find(s.name); it != edits.data.end()) {
      st = w.add_tensor(s.name, t, ne, std::span<const uint8_t>(it->second));
    } else {
      st = w.add_tensor(s.name, t, ne, gguf::TensorFill::kHole);
    }
  });
  for (const auto& [name, ne] : edits.extra) {
    if (!st.ok()) break;
    st = w.add_tensor(name, gguf::GgmlType::kF32, ne, gguf::TensorFill::kHole);
  }
  if (!st.ok()) return st;
  return w.write(path);
}

// The tensor directory a published file of `cfg` has.
inline std::vector<TensorDesc> published_layout(const ModelConfig& cfg, ExpertQuant q) {
  std::vector<TensorDesc> out;
  for_each_tensor_spec(cfg, [&](const TensorSpec& s) {
    out.push_back({s.name, s.published_type(q), s.ne});
  });
  return out;
}

inline TensorDesc* find_desc(std::vector<TensorDesc>& v, const std::string& name) {
  for (auto& d : v)
    if (d.name == name) return &d;
  return nullptr;
}

}  // namespace ds4::model::testing
