// tools/ds4-gguf/quantize.cpp — `ds4-gguf quantize`: float DS4-layout GGUF -> published layout.
//
// Input: every tensor of the layout (model::for_each_tensor_spec) in F32, F16 or BF16 (tid2eid
// in I32 or I64), with the layout's shape; the config comes from the input's metadata and must
// pass validate_config. Output types: TensorSpec::published_type(quant). Each row is
// dequantized to f32 and re-quantized with quant::quantize_row, streamed through the writer
// (rows are independent, so chunking cannot change the bytes). Tensors already in their target
// type are copied bit for bit. Metadata is copied verbatim, in order.
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <unordered_set>
#include <vector>

#include "core/timer.h"
#include "gguf/writer.h"
#include "quant/quant.h"
#include "tools/ds4-gguf/ds4_gguf.h"
#include "tools/ds4-gguf/parallel.h"

namespace ds4::tools {

using gguf::GgmlType;
using gguf::ValueType;

namespace {

template <typename T>
std::vector<T> unpack(const gguf::KeyValue& kv) {
  std::vector<T> v(kv.array_count);
  if (kv.array_count) std::memcpy(v.data(), kv.data, kv.array_count * sizeof(T));
  return v;
}
template <typename T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

}  // namespace

Status copy_kv(gguf::Writer& w, const gguf::KeyValue& kv) {
  const std::string& k = kv.key;
  if (!kv.is_array()) {
    switch (kv.type) {
      case ValueType::kU8: return w.set_u8(k, load<uint8_t>(kv.data));
      case ValueType::kI8: return w.set_i8(k, load<int8_t>(kv.data));
      case ValueType::kU16: return w.set_u16(k, load<uint16_t>(kv.data));
      case ValueType::kI16: return w.set_i16(k, load<int16_t>(kv.data));
      case ValueType::kU32: return w.set_u32(k, load<uint32_t>(kv.data));
      case ValueType::kI32: return w.set_i32(k, load<int32_t>(kv.data));
      case ValueType::kU64: return w.set_u64(k, load<uint64_t>(kv.data));
      case ValueType::kI64: return w.set_i64(k, load<int64_t>(kv.data));
      case ValueType::kF32: return w.set_f32(k, load<float>(kv.data));
      case ValueType::kF64: return w.set_f64(k, load<double>(kv.data));
      case ValueType::kBool: return w.set_bool(k, load<uint8_t>(kv.data) != 0);
      case ValueType::kString: return w.set_string(k, kv.str);
      default: break;
    }
    return unsupported("metadata key '%s': cannot copy value type %s", k.c_str(),
                       kv.type_string().c_str());
  }
  switch (kv.array_type) {
    case ValueType::kU8: return w.set_array_u8(k, unpack<uint8_t>(kv));
    case ValueType::kI8: return w.set_array_i8(k, unpack<int8_t>(kv));
    case ValueType::kU16: return w.set_array_u16(k, unpack<uint16_t>(kv));
    case ValueType::kI16: return w.set_array_i16(k, unpack<int16_t>(kv));
    case ValueType::kU32: return w.set_array_u32(k, unpack<uint32_t>(kv));
    case ValueType::kI32: return w.set_array_i32(k, unpack<int32_t>(kv));
    case ValueType::kU64: return w.set_array_u64(k, unpack<uint64_t>(kv));
    case ValueType::kI64: return w.set_array_i64(k, unpack<int64_t>(kv));
    case ValueType::kF32: return w.set_array_f32(k, unpack<float>(kv));
    case ValueType::kF64: return w.set_array_f64(k, unpack<double>(kv));
    case ValueType::kBool: {
      std::vector<uint8_t> raw = unpack<uint8_t>(kv);
      std::unique_ptr<bool[]> b(new bool[raw.size() + 1]);
      for (size_t i = 0; i < raw.size(); ++i) b[i] = raw[i] != 0;
      return w.set_array_bool(k, std::span<const bool>(b.get(), raw.size()));
    }
    case ValueType::kString: return w.set_array_string(k, std::span<const std::string_view>(kv.strings));
    default: break;
  }
  return unsupported("metadata key '%s': cannot copy value type %s", k.c_str(),
                     kv.type_string().c_str());
}

namespace {

bool is_float_input(GgmlType t) {
  return t == GgmlType::kF32 || t == GgmlType::kF16 || t == GgmlType::kBF16;
}

struct Progress {
  bool enabled = false;
  uint64_t total = 0, done = 0;
  Timer timer;
  double last = 0.0;
  void add(uint64_t n, const std::string& name) {
    done += n;
    if (!enabled) return;
    const double now = timer.seconds();
    if (now - last < 2.0 && done < total) return;
    last = now;
    std::fprintf(stderr, "quantize: %6.2f / %.2f GB of output (%4.1f%%), %.1f s, at %s\n",
                 done / 1e9, total / 1e9, total ? 100.0 * done / total : 100.0, now, name.c_str());
  }
};

}  // namespace

Status quantize_model(const std::string& in_path, const std::string& out_path,
                      const QuantizeOptions& opt) {
  DS4_ASSIGN_OR_RETURN(std::shared_ptr<gguf::File> in, gguf::File::open(in_path));
  DS4_ASSIGN_OR_RETURN(model::ModelConfig cfg, model::config_from_gguf(*in));

  gguf::Writer w;
  for (const auto& kv : in->metadata()) DS4_RETURN_IF_ERROR(copy_kv(w, kv));

  auto progress = std::make_shared<Progress>();
  progress->enabled = opt.progress;
  std::vector<std::string> problems;
  std::vector<std::string> seen;
  Status st;
  model::for_each_tensor_spec(cfg, [&](const model::TensorSpec& spec) {
    if (!st.ok()) return;
    const gguf::TensorInfo* t = in->find_tensor(spec.name);
    if (!t) {
      if (spec.required) problems.push_back("tensor '" + spec.name + "': missing");
      return;
    }
    seen.push_back(spec.name);
    if (t->ne != spec.ne) {
      std::string got = t->shape_string();
      problems.push_back("tensor '" + spec.name + "': expected shape " + spec.shape_string() +
                         ", got " + got);
      return;
    }
    const GgmlType out_type = spec.published_type(opt.quant);
    std::vector<int64_t> ne(spec.ne.begin(), spec.ne.begin() + spec.n_dims);
    const std::string name = spec.name;
    if (t->type == out_type) {  // already in the published type: copy
      progress->total += t->nbytes;
      st = w.add_tensor(name, out_type, ne,
                        gguf::FillFn([in, t, progress, name](uint64_t off, std::span<uint8_t> out) {
                          std::memcpy(out.data(), t->data + off, out.size());
                          progress->add(out.size(), name);
                        }));
      return;
    }
    if (spec.role == model::TensorRole::kHashTable) {
      if (t->type != GgmlType::kI64) {
        problems.push_back("tensor '" + spec.name + "': expected type i32 or i64, got " +
                           gguf::type_name(t->type));
        return;
      }
      // Narrow I64 -> I32 (expert ids are < n_expert; validated after writing by open()).
      const uint32_t n_expert = cfg.n_expert;
      for (int64_t i = 0; i < t->n_elements(); ++i) {
        const int64_t v = load<int64_t>(t->data + 8 * i);
        if (v < 0 || v >= n_expert) {
          problems.push_back("tensor '" + spec.name + "': entry " + std::to_string(i) +
                             " = " + std::to_string(v) + " is not an expert id in [0, " +
                             std::to_string(n_expert) + ")");
          return;
        }
      }
      progress->total += static_cast<uint64_t>(t->n_elements()) * 4;
      st = w.add_tensor(name, GgmlType::kI32, ne,
                        gguf::FillFn([in, t, progress, name](uint64_t off, std::span<uint8_t> out) {
                          for (size_t k = 0; k < out.size() / 4; ++k) {
                            const int32_t v = static_cast<int32_t>(load<int64_t>(t->data + 2 * (off + 4 * k)));
                            std::memcpy(out.data() + 4 * k, &v, 4);
                          }
                          progress->add(out.size(), name);
                        }));
      return;
    }
    if (!is_float_input(t->type)) {
      problems.push_back("tensor '" + spec.name + "': expected a float input type (f32, f16, "
                         "bf16) or the published type " + gguf::type_name(out_type) + ", got " +
                         gguf::type_name(t->type));
      return;
    }
    auto nb = gguf::tensor_nbytes(out_type, ne);
    if (!nb.ok()) {
      st = nb.status();
      return;
    }
    progress->total += *nb;
    const int64_t ne0 = spec.ne[0];
    const uint64_t in_row = t->row_bytes();
    const uint64_t out_row = *nb / static_cast<uint64_t>(spec.n_elements() / ne0);
    const GgmlType in_type = t->type;
    st = w.add_tensor(
        name, out_type, ne,
        gguf::FillFn([in, t, progress, name, ne0, in_row, out_row, in_type, out_type](
                         uint64_t off, std::span<uint8_t> out) {
          DS4_CHECK(off % out_row == 0 && out.size() % out_row == 0);
          const uint64_t r0 = off / out_row;
          parallel_for(out.size() / out_row, 16, [&](uint64_t b, uint64_t e) {
            std::vector<float> row(static_cast<size_t>(ne0));
            for (uint64_t r = b; r < e; ++r) {
              quant::dequantize_row(in_type, t->data + (r0 + r) * in_row, row.data(), ne0);
              quant::quantize_row(out_type, row.data(), out.data() + r * out_row, ne0);
            }
          });
          progress->add(out.size(), name);
        }));
  });
  DS4_RETURN_IF_ERROR(st);
  if (!problems.empty()) {
    std::string msg = "'" + in_path + "' is not a float DS4-layout model: ";
    for (size_t i = 0; i < problems.size() && i < 12; ++i) msg += (i ? "; " : "") + problems[i];
    if (problems.size() > 12) msg += "; (+" + std::to_string(problems.size() - 12) + " more)";
    return invalid_argument("%s", msg.c_str());
  }
  // Tensors outside the DS4 layout: copied unchanged.
  std::unordered_set<std::string> layout(seen.begin(), seen.end());
  for (const auto& t : in->tensors()) {
    if (layout.count(t.name)) continue;
    std::fprintf(stderr, "quantize: warning: tensor '%s' is not part of the DS4 layout; copied "
                 "unchanged\n", t.name.c_str());
    std::vector<int64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    const gguf::TensorInfo* tp = &t;
    DS4_RETURN_IF_ERROR(w.add_tensor(t.name, t.type, ne,
                                     gguf::FillFn([in, tp](uint64_t off, std::span<uint8_t> out) {
                                       std::memcpy(out.data(), tp->data + off, out.size());
                                     })));
  }
  if (opt.progress)
    std::fprintf(stderr, "quantize: %s -> %s (%s experts), %.2f GB to write\n", in_path.c_str(),
                 out_path.c_str(), model::expert_quant_name(opt.quant), progress->total / 1e9);
  DS4_RETURN_IF_ERROR(w.write(out_path));
  if (opt.progress) std::fprintf(stderr, "quantize: done in %.1f s\n", progress->timer.seconds());
  return Status::ok_status();
}

}  // namespace ds4::tools
