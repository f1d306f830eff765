// tools/ds4-gguf/inspect.cpp — `ds4-gguf inspect`: summary, metadata, tensors and the DS4
// validation report of a GGUF file, as text or JSON.
//
// JSON metadata values: scalars as JSON numbers/bools/strings; arrays as
// {"type": "array[T]", "count": N, "values": [...]} with all values when N <= kFullArrayMax,
// else {"count": N, "head": first kArrayHead values}. Text output abbreviates arrays the same
// way. Strings that are not valid UTF-8 are printed with U+FFFD replacements.
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <map>
#include <ostream>
#include <sstream>

#include "model/model.h"
#include "model/profiles.h"
#include "speculative/drafter_weights.h"
#include "tools/ds4-gguf/ds4_gguf.h"

namespace ds4::tools {

using gguf::ValueType;
using nlohmann::json;

namespace {

constexpr uint64_t kFullArrayMax = 64;
constexpr uint64_t kArrayHead = 16;

template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

json scalar_json(ValueType t, const uint8_t* p) {
  switch (t) {
    case ValueType::kU8: return load<uint8_t>(p);
    case ValueType::kI8: return load<int8_t>(p);
    case ValueType::kU16: return load<uint16_t>(p);
    case ValueType::kI16: return load<int16_t>(p);
    case ValueType::kU32: return load<uint32_t>(p);
    case ValueType::kI32: return load<int32_t>(p);
    case ValueType::kU64: return load<uint64_t>(p);
    case ValueType::kI64: return load<int64_t>(p);
    case ValueType::kF32: return static_cast<double>(load<float>(p));
    case ValueType::kF64: return load<double>(p);
    case ValueType::kBool: return load<uint8_t>(p) != 0;
    default: return nullptr;
  }
}

json kv_value_json(const gguf::KeyValue& kv) {
  if (kv.type == ValueType::kString) return std::string(kv.str);
  if (!kv.is_array()) return scalar_json(kv.type, kv.data);
  json arr = json::array();
  const uint64_t n = kv.array_count <= kFullArrayMax ? kv.array_count : kArrayHead;
  if (kv.array_type == ValueType::kString) {
    for (uint64_t i = 0; i < n && i < kv.strings.size(); ++i) arr.push_back(std::string(kv.strings[i]));
  } else {
    const uint32_t sz = gguf::value_type_size(kv.array_type);
    for (uint64_t i = 0; i < n; ++i) arr.push_back(scalar_json(kv.array_type, kv.data + i * sz));
  }
  json o;
  o["count"] = kv.array_count;
  o[kv.array_count <= kFullArrayMax ? "values" : "head"] = std::move(arr);
  return o;
}

json shape_json(const gguf::TensorInfo& t) {
  json s = json::array();
  for (uint32_t i = 0; i < t.n_dims; ++i) s.push_back(t.ne[i]);
  return s;
}

std::string human_bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / double(1ull << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.2f KiB", b / 1024.0);
  else std::snprintf(buf, sizeof buf, "%" PRIu64 " B", b);
  return buf;
}

std::string profile_match(const model::ModelConfig& cfg) {
  for (std::string_view name : model::profile_names()) {
    auto p = model::profile_by_name(name);
    if (p.ok() && model::diff_config(cfg, *p).empty()) return std::string(name);
  }
  return "custom";
}

// Text form of one JSON value; f32 values print with float precision ("1e-06", not the
// widened double "9.99999997e-07").
std::string scalar_text(const json& v, bool f32) {
  if (f32 && v.is_number_float()) {
    // Shortest spelling that reads back as the same float.
    const float f = static_cast<float>(v.get<double>());
    char buf[32];
    for (int prec = 6; prec <= 9; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, f);
      if (std::strtof(buf, nullptr) == f) break;
    }
    return buf;
  }
  return v.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string value_text(const json& v, const std::string& type) {
  const bool f32 = type.find("f32") != std::string::npos;
  if (v.is_object()) {
    const bool full = v.contains("values");
    const json& items = full ? v["values"] : v["head"];
    std::string s = "[";
    for (size_t i = 0; i < items.size(); ++i) s += (i ? "," : "") + scalar_text(items[i], f32);
    if (!full) s += ", ... (" + std::to_string(v["count"].get<uint64_t>()) + " items)";
    return s + "]";
  }
  std::string s = scalar_text(v, f32);
  if (s.size() > 200) s = s.substr(0, 200) + "...";
  return s;
}

bool looks_like_drafter(const gguf::File& file) {
  for (const auto& kv : file.metadata())
    if (kv.key.find("dspark") != std::string::npos) return true;
  return false;
}

}  // namespace

json inspect_json(const gguf::File& file, bool with_tensors) {
  json j;
  j["file"] = file.path();
  j["gguf_version"] = file.version();
  j["alignment"] = file.alignment();
  j["data_offset"] = file.data_offset();
  j["file_size"] = file.file_size();

  json meta = json::object();
  for (const auto& kv : file.metadata()) {
    json e;
    e["type"] = kv.type_string();
    e["value"] = kv_value_json(kv);
    meta[kv.key] = std::move(e);
  }
  j["metadata"] = std::move(meta);

  const bool drafter = looks_like_drafter(file);
  model::ValidationReport rep;
  if (drafter) {
    rep.errors.push_back("this is a DSpark drafter support file: `inspect` validates target "
                         "models only (the drafter is validated against its target when loaded)");
  } else {
    rep = model::validate_file(file);
  }
  std::map<std::string, uint64_t> bytes_by_type;
  std::map<std::string, uint64_t> count_by_type;
  uint64_t total = 0;
  for (const auto& t : file.tensors()) {
    bytes_by_type[gguf::type_name(t.type)] += t.nbytes;
    count_by_type[gguf::type_name(t.type)] += 1;
    total += t.nbytes;
  }
  json summary;
  auto arch = file.get_string_or("general.architecture", "");
  summary["architecture"] = arch.ok() ? *arch : std::string();
  auto name = file.get_string_or("general.name", "");
  summary["name"] = name.ok() ? *name : std::string();
  summary["kind"] = drafter ? "dspark-drafter" : "model";
  summary["tensor_count"] = file.tensors().size();
  summary["metadata_count"] = file.metadata().size();
  summary["tensor_bytes"] = total;
  json bt = json::object();
  for (const auto& [type, b] : bytes_by_type) bt[type] = {{"bytes", b}, {"tensors", count_by_type[type]}};
  summary["bytes_by_type"] = std::move(bt);
  if (rep.config_ok) {
    const model::ModelConfig& c = rep.config;
    summary["shape"] = {
        {"n_layer", c.n_layer}, {"n_embd", c.n_embd}, {"n_vocab", c.n_vocab},
        {"n_head", c.n_head}, {"head_dim", c.head_dim}, {"n_rot", c.n_rot},
        {"q_lora_rank", c.q_lora_rank}, {"o_lora_rank", c.o_lora_rank},
        {"n_out_group", c.n_out_group}, {"n_expert", c.n_expert},
        {"n_expert_used", c.n_expert_used}, {"n_ff_exp", c.n_ff_exp},
        {"n_hash_layer", c.n_hash_layer}, {"n_swa", c.n_swa}, {"n_hc", c.n_hc},
        {"n_indexer_head", c.n_indexer_head}, {"indexer_head_dim", c.indexer_head_dim},
        {"indexer_top_k", c.indexer_top_k}, {"context_length", c.context_length}};
    summary["layers"] = {{"dense", c.count_layers(model::LayerKind::kDense)},
                         {"ratio4", c.count_layers(model::LayerKind::kRatio4)},
                         {"ratio128", c.count_layers(model::LayerKind::kRatio128)}};
    summary["profile"] = profile_match(c);
    summary["expected_tensor_count"] = model::expected_tensor_count(c);
  }
  if (drafter) {
    // Which support-file layout, and which target checkpoint it names (provenance).
    const speculative::SupportInfo si = speculative::describe_support(file);
    json prov = json::object();
    for (const auto& [k, v] : si.provenance.fields) prov[k] = v;
    summary["dspark"] = {
        {"layout", si.layout == speculative::SupportLayout::kStandalone0731 ? "deepseek4-dspark" : "deepseek4.dspark"},
        {"layout_description", speculative::support_layout_name(si.layout)},
        {"key_prefix", si.key_prefix},
        {"stages", si.n_stages},
        {"provenance", std::move(prov)},
        {"metadata_errors", si.errors}};
  }
  summary["expert_quant"] = rep.expert_quant_known ? model::expert_quant_name(rep.expert_quant) : "unknown";
  j["summary"] = std::move(summary);

  if (with_tensors) {
    json ts = json::array();
    for (const auto& t : file.tensors()) {
      ts.push_back({{"name", t.name}, {"type", gguf::type_name(t.type)},
                    {"type_id", static_cast<uint32_t>(t.type)}, {"shape", shape_json(t)},
                    {"offset", t.offset}, {"nbytes", t.nbytes}});
    }
    j["tensors"] = std::move(ts);
  }
  j["validation"] = {{"ok", rep.ok()}, {"errors", rep.errors}, {"warnings", rep.warnings}};
  return j;
}

int inspect_file(const std::string& path, const InspectOptions& opt, std::ostream& out,
                 std::ostream& err) {
  auto file = gguf::File::open(path);
  if (!file.ok()) {
    err << "ds4-gguf inspect: " << file.status().to_string() << "\n";
    return 2;
  }
  const json j = inspect_json(**file, opt.tensors);
  const bool ok = j["validation"]["ok"].get<bool>();
  if (opt.json) {
    out << j.dump(2, ' ', false, json::error_handler_t::replace) << "\n";
    return ok ? 0 : 1;
  }
  const json& s = j["summary"];
  out << "file:          " << path << " (" << human_bytes(j["file_size"].get<uint64_t>()) << ")\n";
  out << "gguf:          v" << j["gguf_version"] << ", alignment " << j["alignment"]
      << ", data at " << j["data_offset"] << "\n";
  out << "architecture:  " << s["architecture"].get<std::string>() << "\n";
  out << "name:          " << s["name"].get<std::string>() << "\n";
  out << "kind:          " << s["kind"].get<std::string>() << "\n";
  if (s.contains("shape")) {
    const json& sh = s["shape"];
    out << "shape:         profile " << s["profile"].get<std::string>() << ": " << sh["n_layer"]
        << " layers (" << s["layers"]["dense"] << " dense, " << s["layers"]["ratio4"]
        << " ratio-4, " << s["layers"]["ratio128"] << " ratio-128), embd " << sh["n_embd"]
        << ", vocab " << sh["n_vocab"] << ", " << sh["n_head"] << " heads x " << sh["head_dim"]
        << " (rope " << sh["n_rot"] << "), experts " << sh["n_expert_used"] << "/"
        << sh["n_expert"] << " x ff " << sh["n_ff_exp"] << ", " << sh["n_hash_layer"]
        << " hash layers, window " << sh["n_swa"] << "\n";
  }
  if (s.contains("dspark")) {
    const json& d = s["dspark"];
    out << "dspark layout: " << d["layout_description"].get<std::string>() << ", " << d["stages"]
        << " stages\n";
    if (d["provenance"].empty()) {
      out << "provenance:    none recorded (the file names no target checkpoint)\n";
    } else {
      for (const auto& [k, v] : d["provenance"].items())
        out << "provenance:    " << k << " = " << v.get<std::string>() << "\n";
    }
    for (const auto& e : d["metadata_errors"]) out << "  dspark metadata error: " << e.get<std::string>() << "\n";
  }
  out << "experts:       " << s["expert_quant"].get<std::string>() << "\n";
  out << "tensors:       " << s["tensor_count"];
  if (s.contains("expected_tensor_count")) out << " (layout expects " << s["expected_tensor_count"] << ")";
  out << ", " << human_bytes(s["tensor_bytes"].get<uint64_t>()) << "\n";
  for (const auto& [type, e] : s["bytes_by_type"].items()) {
    char line[128];
    std::snprintf(line, sizeof line, "  %-10s %6" PRIu64 " tensors  %s\n", type.c_str(),
                  e["tensors"].get<uint64_t>(), human_bytes(e["bytes"].get<uint64_t>()).c_str());
    out << line;
  }
  out << "metadata (" << s["metadata_count"] << " keys):\n";
  for (const auto& [key, e] : j["metadata"].items()) {
    out << "  " << key << " [" << e["type"].get<std::string>() << "] = " << value_text(e["value"], e["type"].get<std::string>()) << "\n";
  }
  if (opt.tensors) {
    out << "tensor directory:\n";
    for (const auto& t : j["tensors"]) {
      char line[512];
      std::snprintf(line, sizeof line, "  %-44s %-8s %-22s %12s @%" PRIu64 "\n",
                    t["name"].get<std::string>().c_str(), t["type"].get<std::string>().c_str(),
                    t["shape"].dump().c_str(), human_bytes(t["nbytes"].get<uint64_t>()).c_str(),
                    t["offset"].get<uint64_t>());
      out << line;
    }
  }
  const json& v = j["validation"];
  out << "validation:    " << (ok ? "OK (valid DS4 model)" : "FAILED") << "\n";
  for (const auto& e : v["errors"]) out << "  error: " << e.get<std::string>() << "\n";
  for (const auto& w : v["warnings"]) out << "  warning: " << w.get<std::string>() << "\n";
  return ok ? 0 : 1;
}

}  // namespace ds4::tools
