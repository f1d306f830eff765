// tests/unit/gguf/roundtrip_test.cpp — Writer -> File round trips: every metadata type and
// array type, typed-getter conversions and their errors, tensors of several types, alignment
// variants, streamed callbacks, byte-range fills and file holes (checked via st_blocks).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <numeric>

#include "gguf/gguf.h"
#include "gguf/writer.h"

namespace ds4::gguf {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/ds4_gguf_" + std::to_string(::getpid()) + "_" + name;
}

std::unique_ptr<File> write_and_open(const Writer& w, const std::string& name) {
  const std::string path = temp_path(name);
  Status s = w.write(path);
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto f = File::open(path);
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  std::filesystem::remove(path);  // the mapping stays valid after unlink
  return f.ok() ? std::move(f).value() : nullptr;
}

TEST(GgufRoundTrip, EveryScalarType) {
  Writer w;
  ASSERT_TRUE(w.set_u8("v.u8", 250).ok());
  ASSERT_TRUE(w.set_i8("v.i8", -100).ok());
  ASSERT_TRUE(w.set_u16("v.u16", 65000).ok());
  ASSERT_TRUE(w.set_i16("v.i16", -30000).ok());
  ASSERT_TRUE(w.set_u32("v.u32", 4000000000u).ok());
  ASSERT_TRUE(w.set_i32("v.i32", -2000000000).ok());
  ASSERT_TRUE(w.set_u64("v.u64", 1ull << 40).ok());
  ASSERT_TRUE(w.set_i64("v.i64", -(1ll << 40)).ok());
  ASSERT_TRUE(w.set_f32("v.f32", 0.1f).ok());
  ASSERT_TRUE(w.set_f64("v.f64", 1e300).ok());
  ASSERT_TRUE(w.set_bool("v.bool", true).ok());
  ASSERT_TRUE(w.set_string("v.str", std::string("with\0nul", 8)).ok());
  ASSERT_TRUE(w.set_string("v.empty", "").ok());
  auto f = write_and_open(w, "scalars.gguf");
  ASSERT_NE(f, nullptr);

  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->metadata().size(), 13u);
  // Insertion order is kept.
  EXPECT_EQ(f->metadata()[0].key, "v.u8");
  EXPECT_EQ(f->metadata()[12].key, "v.empty");
  EXPECT_EQ(f->find("v.i16")->type, ValueType::kI16);

  EXPECT_EQ(f->get_u8("v.u8").value(), 250);
  EXPECT_EQ(f->get_u32("v.u8").value(), 250u);
  EXPECT_EQ(f->get_i32("v.i8").value(), -100);
  EXPECT_EQ(f->get_u32("v.u16").value(), 65000u);
  EXPECT_EQ(f->get_i32("v.i16").value(), -30000);
  EXPECT_EQ(f->get_u32("v.u32").value(), 4000000000u);
  EXPECT_EQ(f->get_u64("v.u32").value(), 4000000000u);
  EXPECT_EQ(f->get_i32("v.i32").value(), -2000000000);
  EXPECT_EQ(f->get_u64("v.u64").value(), 1ull << 40);
  EXPECT_EQ(f->get_i64("v.i64").value(), -(1ll << 40));
  EXPECT_EQ(f->get_f32("v.f32").value(), 0.1f);
  EXPECT_EQ(f->get_f64("v.f32").value(), static_cast<double>(0.1f));
  EXPECT_EQ(f->get_f64("v.f64").value(), 1e300);
  EXPECT_EQ(f->get_bool("v.bool").value(), true);
  EXPECT_EQ(f->get_string("v.str").value(), std::string("with\0nul", 8));
  EXPECT_EQ(f->get_string("v.empty").value(), "");
}

TEST(GgufRoundTrip, GetterErrorsNameKeyAndTypes) {
  Writer w;
  ASSERT_TRUE(w.set_u32("big", 4000000000u).ok());
  ASSERT_TRUE(w.set_i32("neg", -5).ok());
  ASSERT_TRUE(w.set_string("s", "x").ok());
  ASSERT_TRUE(w.set_f32("f", 1.0f).ok());
  const std::vector<int32_t> arr = {1, -2};
  ASSERT_TRUE(w.set_array_i32("arr", arr).ok());
  auto f = write_and_open(w, "errors.gguf");
  ASSERT_NE(f, nullptr);

  auto e1 = f->get_i32("big");  // 4e9 does not fit i32
  ASSERT_FALSE(e1.ok());
  EXPECT_NE(e1.status().message().find("'big'"), std::string::npos);
  EXPECT_NE(e1.status().message().find("4000000000"), std::string::npos);
  EXPECT_NE(e1.status().message().find("i32"), std::string::npos);

  auto e2 = f->get_u32("neg");
  ASSERT_FALSE(e2.ok());
  EXPECT_NE(e2.status().message().find("-5"), std::string::npos);

  auto e3 = f->get_u32("s");
  ASSERT_FALSE(e3.ok());
  EXPECT_EQ(e3.status().message(), "metadata key 's' has type string, expected u32");

  auto e4 = f->get_u32("f");  // floats never convert to integers
  ASSERT_FALSE(e4.ok());
  EXPECT_NE(e4.status().message().find("type f32"), std::string::npos);

  auto e5 = f->get_string("arr");
  ASSERT_FALSE(e5.ok());
  EXPECT_NE(e5.status().message().find("array[i32]"), std::string::npos);

  auto e6 = f->get_array_u32("arr");  // item 1 is negative
  ASSERT_FALSE(e6.ok());
  EXPECT_NE(e6.status().message().find("item 1 = -2"), std::string::npos);

  auto e7 = f->get_u32("missing.key");
  ASSERT_FALSE(e7.ok());
  EXPECT_EQ(e7.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(e7.status().message().find("'missing.key'"), std::string::npos);

  auto e8 = f->get_u32("neg");
  EXPECT_EQ(e8.status().code(), ErrorCode::kCorrupt);

  // Defaults apply only to absent keys.
  EXPECT_EQ(f->get_u32_or("missing.key", 17).value(), 17u);
  EXPECT_EQ(f->get_f32_or("missing.key", 0.5f).value(), 0.5f);
  EXPECT_EQ(f->get_bool_or("missing.key", true).value(), true);
  EXPECT_EQ(f->get_string_or("missing.key", "d").value(), "d");
  EXPECT_EQ(f->get_i32_or("neg", 3).value(), -5);
  EXPECT_EQ(f->get_u64_or("big", 3).value(), 4000000000u);
  EXPECT_FALSE(f->get_u32_or("s", 1).ok());
  EXPECT_FALSE(f->has("missing.key"));
  EXPECT_TRUE(f->has("s"));
}

TEST(GgufRoundTrip, EveryArrayType) {
  Writer w;
  const std::vector<uint8_t> u8 = {0, 1, 255};
  const std::vector<int8_t> i8 = {-128, 0, 127};
  const std::vector<uint16_t> u16 = {0, 65535};
  const std::vector<int16_t> i16 = {-32768, 32767};
  const std::vector<uint32_t> u32 = {0, 7, 4294967295u};
  const std::vector<int32_t> i32 = {-1, 0, 2147483647};
  const std::vector<uint64_t> u64 = {1ull << 63};
  const std::vector<int64_t> i64 = {-(1ll << 62), 5};
  const std::vector<float> f32 = {0.5f, -1e30f, std::numeric_limits<float>::denorm_min()};
  const std::vector<double> f64 = {0.25, 1e-300};
  const bool bools[] = {true, false, true};
  const std::vector<std::string> strs = {"", "hello", std::string(300, 'x'), "\xe2\x96\x81"};
  ASSERT_TRUE(w.set_array_u8("a.u8", u8).ok());
  ASSERT_TRUE(w.set_array_i8("a.i8", i8).ok());
  ASSERT_TRUE(w.set_array_u16("a.u16", u16).ok());
  ASSERT_TRUE(w.set_array_i16("a.i16", i16).ok());
  ASSERT_TRUE(w.set_array_u32("a.u32", u32).ok());
  ASSERT_TRUE(w.set_array_i32("a.i32", i32).ok());
  ASSERT_TRUE(w.set_array_u64("a.u64", u64).ok());
  ASSERT_TRUE(w.set_array_i64("a.i64", i64).ok());
  ASSERT_TRUE(w.set_array_f32("a.f32", f32).ok());
  ASSERT_TRUE(w.set_array_f64("a.f64", f64).ok());
  ASSERT_TRUE(w.set_array_bool("a.bool", bools).ok());
  ASSERT_TRUE(w.set_array_string("a.str", strs).ok());
  ASSERT_TRUE(w.set_array_u32("a.empty", std::span<const uint32_t>()).ok());
  auto f = write_and_open(w, "arrays.gguf");
  ASSERT_NE(f, nullptr);

  const KeyValue* kv = f->find("a.i16");
  ASSERT_NE(kv, nullptr);
  EXPECT_EQ(kv->type, ValueType::kArray);
  EXPECT_EQ(kv->array_type, ValueType::kI16);
  EXPECT_EQ(kv->array_count, 2u);
  EXPECT_EQ(kv->type_string(), "array[i16]");

  EXPECT_EQ(f->get_array_u32("a.u8").value(), (std::vector<uint32_t>{0, 1, 255}));
  EXPECT_EQ(f->get_array_i32("a.i8").value(), (std::vector<int32_t>{-128, 0, 127}));
  EXPECT_EQ(f->get_array_u32("a.u16").value(), (std::vector<uint32_t>{0, 65535}));
  EXPECT_EQ(f->get_array_i32("a.i16").value(), (std::vector<int32_t>{-32768, 32767}));
  EXPECT_EQ(f->get_array_u32("a.u32").value(), u32);
  EXPECT_EQ(f->get_array_i32("a.i32").value(), i32);
  EXPECT_FALSE(f->get_array_u32("a.u64").ok());  // 2^63 does not fit
  EXPECT_EQ(f->get_array_i64("a.i64").value(), i64);
  EXPECT_EQ(f->get_array_f32("a.f32").value(), f32);
  EXPECT_EQ(f->get_array_f32("a.f64").value(),
            (std::vector<float>{0.25f, static_cast<float>(1e-300)}));
  const KeyValue* b = f->find("a.bool");
  ASSERT_EQ(b->array_count, 3u);
  EXPECT_EQ(b->data[0], 1);
  EXPECT_EQ(b->data[1], 0);
  EXPECT_EQ(f->get_array_string("a.str").value(), strs);
  auto views = f->get_array_string_views("a.str");
  ASSERT_TRUE(views.ok());
  ASSERT_EQ(views->size(), 4u);
  EXPECT_EQ((*views)[2].size(), 300u);
  // Views point into the mapping, not into copies.
  EXPECT_GE(reinterpret_cast<const uint8_t*>((*views)[1].data()), f->base());
  EXPECT_LT(reinterpret_cast<const uint8_t*>((*views)[1].data()), f->base() + f->file_size());
  EXPECT_EQ(f->get_array_u32("a.empty").value().size(), 0u);
  EXPECT_FALSE(f->get_array_string("a.u8").ok());
}

TEST(GgufWriter, RejectsDuplicatesAndBadInput) {
  Writer w;
  ASSERT_TRUE(w.set_u32("k", 1).ok());
  Status s = w.set_string("k", "again");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("duplicate metadata key 'k'"), std::string::npos);
  EXPECT_FALSE(w.set_u32("", 1).ok());
  EXPECT_FALSE(w.set_u64(kAlignmentKey, 64).ok());  // must be u32
  EXPECT_FALSE(w.set_alignment(0).ok());
  EXPECT_FALSE(w.set_alignment(48).ok());

  ASSERT_TRUE(w.add_tensor("t", GgmlType::kF32, {2}, TensorFill::kHole).ok());
  s = w.add_tensor("t", GgmlType::kF32, {2}, TensorFill::kHole);
  EXPECT_NE(s.message().find("duplicate tensor name 't'"), std::string::npos);
  s = w.add_tensor("q", GgmlType::kQ8_0, {33}, TensorFill::kHole);
  EXPECT_NE(s.message().find("'q'"), std::string::npos);
  EXPECT_NE(s.message().find("block size 32"), std::string::npos);
  s = w.add_tensor("z", GgmlType::kF32, {4, 0}, TensorFill::kHole);
  EXPECT_NE(s.message().find("ne[1] = 0"), std::string::npos);
  s = w.add_tensor("d5", GgmlType::kF32, {1, 1, 1, 1, 1}, TensorFill::kHole);
  EXPECT_FALSE(s.ok());
  s = w.add_tensor("u", static_cast<GgmlType>(4), {32}, TensorFill::kHole);
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
  const std::vector<uint8_t> three(3);
  s = w.add_tensor("short", GgmlType::kF32, {1}, three);
  EXPECT_NE(s.message().find("3 data bytes"), std::string::npos);
  s = w.add_tensor_ranges("r", GgmlType::kF32, {8}, {{0, 16}, {8, 16}},
                          [](uint64_t, std::span<uint8_t>) {});
  EXPECT_NE(s.message().find("overlap"), std::string::npos);
  s = w.add_tensor_ranges("r2", GgmlType::kF32, {8}, {{24, 16}},
                          [](uint64_t, std::span<uint8_t>) {});
  EXPECT_NE(s.message().find("outside"), std::string::npos);
  EXPECT_EQ(w.n_tensors(), 1u);
}

// Tensors of several types, with known bytes, in several alignments.
class GgufAlignment : public ::testing::TestWithParam<uint32_t> {};

TEST_P(GgufAlignment, TensorsRoundTrip) {
  const uint32_t align = GetParam();
  Writer w;
  if (align != 32) {
    ASSERT_TRUE(w.set_alignment(align).ok());
  }
  ASSERT_TRUE(w.set_string("general.architecture", "t").ok());
  struct Spec {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
  };
  const std::vector<Spec> specs = {
      {"f32.vec", GgmlType::kF32, {5}},
      {"f16.mat", GgmlType::kF16, {3, 7}},
      {"bf16", GgmlType::kBF16, {2, 2, 2}},
      {"q8_0", GgmlType::kQ8_0, {64, 3}},
      {"q2_k", GgmlType::kQ2_K, {256, 2, 1, 2}},
      {"q4_k", GgmlType::kQ4_K, {512}},
      {"iq2_xxs", GgmlType::kIQ2_XXS, {256, 3}},
      {"i32", GgmlType::kI32, {9}},
  };
  std::vector<std::vector<uint8_t>> datas;
  for (size_t i = 0; i < specs.size(); ++i) {
    const uint64_t nb = tensor_nbytes(specs[i].type, specs[i].ne).value();
    std::vector<uint8_t> d(nb);
    for (size_t j = 0; j < d.size(); ++j) d[j] = static_cast<uint8_t>(j * 31 + i * 7 + 1);
    ASSERT_TRUE(w.add_tensor(specs[i].name, specs[i].type, specs[i].ne, d).ok());
    datas.push_back(std::move(d));
  }
  const std::string path = temp_path("align" + std::to_string(align) + ".gguf");
  ASSERT_TRUE(w.write(path).ok());
  EXPECT_EQ(std::filesystem::file_size(path), w.file_size());
  auto fe = File::open(path);
  ASSERT_TRUE(fe.ok()) << fe.status().to_string();
  const File& f = **fe;
  EXPECT_EQ(f.alignment(), align);
  EXPECT_EQ(f.data_offset() % align, 0u);
  EXPECT_EQ(f.file_size() % align, 0u);
  EXPECT_EQ(f.has(kAlignmentKey), align != 32);
  ASSERT_EQ(f.tensors().size(), specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    const TensorInfo& t = f.tensors()[i];  // file order == insertion order
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(f.find_tensor(specs[i].name), &t);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.n_dims, specs[i].ne.size());
    int64_t n = 1;
    for (size_t d = 0; d < 4; ++d) {
      const int64_t want = d < specs[i].ne.size() ? specs[i].ne[d] : 1;
      EXPECT_EQ(t.ne[d], want) << t.name << " dim " << d;
      n *= want;
    }
    EXPECT_EQ(t.n_elements(), n);
    EXPECT_EQ(t.offset % align, 0u);
    EXPECT_EQ(t.data, f.base() + f.data_offset() + t.offset);
    ASSERT_EQ(t.nbytes, datas[i].size());
    EXPECT_EQ(std::memcmp(t.data, datas[i].data(), t.nbytes), 0) << t.name;
  }
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
  EXPECT_EQ(f.find_tensor("q8_0")->row_bytes(), 68u);
  EXPECT_EQ(f.find_tensor("f16.mat")->shape_string(), "[3, 7]");
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Values, GgufAlignment, ::testing::Values(1u, 8u, 32u, 64u, 4096u));

TEST(GgufTypes, TableAndNbytes) {
  EXPECT_STREQ(type_name(GgmlType::kQ8_0), "q8_0");
  EXPECT_EQ(type_block_elems(GgmlType::kQ2_K), 256u);
  EXPECT_EQ(type_block_bytes(GgmlType::kQ2_K), 84u);
  EXPECT_EQ(type_block_bytes(GgmlType::kQ4_K), 144u);
  EXPECT_EQ(type_block_bytes(GgmlType::kIQ2_XXS), 66u);
  EXPECT_EQ(type_block_bytes(GgmlType::kQ8_K), 292u);
  EXPECT_EQ(type_block_bytes(GgmlType::kQ8_0), 34u);
  EXPECT_EQ(static_cast<uint32_t>(GgmlType::kBF16), 30u);
  EXPECT_FALSE(type_known(static_cast<GgmlType>(4)));
  EXPECT_FALSE(type_known(static_cast<GgmlType>(31)));
  EXPECT_FALSE(type_known(static_cast<GgmlType>(1000)));
  EXPECT_STREQ(type_name(static_cast<GgmlType>(1000)), "unknown");
  const int64_t emb[] = {4096, 129280};
  EXPECT_EQ(tensor_nbytes(GgmlType::kF16, emb).value(), 4096ull * 129280 * 2);
  EXPECT_EQ(tensor_nbytes(GgmlType::kQ8_0, emb).value(), 4096ull / 32 * 34 * 129280);
  const int64_t bad[] = {100};
  EXPECT_FALSE(tensor_nbytes(GgmlType::kQ4_K, bad).ok());
  EXPECT_STREQ(value_type_name(ValueType::kF64), "f64");
  EXPECT_STREQ(value_type_name(static_cast<ValueType>(13)), "invalid");
}

// Streaming callback: chunks arrive in order, cover the tensor exactly, start on row
// boundaries, and never exceed kChunkBytes.
TEST(GgufStreaming, CallbackFillsTensorInChunks) {
  Writer w;
  // q8_0 rows of 4096 elements = 4352 bytes; 2048 rows = 8.9 MB > one chunk.
  const int64_t ne0 = 4096, ne1 = 2048;
  const uint64_t row = 4096 / 32 * 34;
  std::vector<std::pair<uint64_t, uint64_t>> calls;
  auto fill = [&](uint64_t off, std::span<uint8_t> out) {
    calls.emplace_back(off, out.size());
    for (size_t i = 0; i < out.size(); ++i) out[i] = static_cast<uint8_t>((off + i) % 251 + 1);
  };
  ASSERT_TRUE(w.add_tensor("big", GgmlType::kQ8_0, {ne0, ne1}, fill).ok());
  auto f = write_and_open(w, "stream.gguf");
  ASSERT_NE(f, nullptr);
  ASSERT_GE(calls.size(), 2u);
  uint64_t expect_off = 0;
  for (auto [off, n] : calls) {
    EXPECT_EQ(off, expect_off);
    EXPECT_EQ(off % row, 0u);
    EXPECT_LE(n, Writer::kChunkBytes);
    expect_off += n;
  }
  const TensorInfo* t = f->find_tensor("big");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(expect_off, t->nbytes);
  EXPECT_EQ(t->nbytes, row * ne1);
  bool same = true;
  for (uint64_t i = 0; i < t->nbytes && same; i += 997) same = t->data[i] == (i % 251 + 1);
  EXPECT_TRUE(same);
  EXPECT_EQ(t->data[t->nbytes - 1], (t->nbytes - 1) % 251 + 1);
}

uint64_t allocated_bytes(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0);
  return static_cast<uint64_t>(st.st_blocks) * 512;
}

// A 1 GiB hole costs (almost) no disk and reads as zeros; ranges fill only the chosen
// experts.
TEST(GgufHoles, LargeHoleAndExpertRanges) {
  Writer w;
  ASSERT_TRUE(w.add_tensor("hole", GgmlType::kF32, {1 << 20, 256}, TensorFill::kHole).ok());
  // 3-D expert tensor [256, 64, 8 experts] q8_0; fill experts 2 and 5 only.
  const std::vector<int64_t> ne = {256, 64, 8};
  const uint64_t nb = tensor_nbytes(GgmlType::kQ8_0, ne).value();
  const std::vector<int64_t> which = {5, 2};
  std::vector<ByteRange> ranges = Writer::outer_slices(nb, 8, which);
  ASSERT_EQ(ranges.size(), 2u);
  EXPECT_EQ(ranges[0].offset, 5 * nb / 8);
  uint64_t filled = 0;
  ASSERT_TRUE(w.add_tensor_ranges("experts", GgmlType::kQ8_0, ne, ranges,
                                  [&](uint64_t off, std::span<uint8_t> out) {
                                    filled += out.size();
                                    std::memset(out.data(), 0xAB, out.size());
                                  })
                  .ok());
  const std::string path = temp_path("holes.gguf");
  ASSERT_TRUE(w.write(path).ok());
  EXPECT_EQ(filled, 2 * nb / 8);
  const uint64_t size = std::filesystem::file_size(path);
  EXPECT_GE(size, 1ull << 30);
  EXPECT_LT(allocated_bytes(path), size / 100) << "hole was written out";
  auto fe = File::open(path);
  ASSERT_TRUE(fe.ok()) << fe.status().to_string();
  const TensorInfo* h = (*fe)->find_tensor("hole");
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(h->nbytes, 1ull << 30);
  EXPECT_EQ(h->data[0], 0);
  EXPECT_EQ(h->data[h->nbytes / 2 + 12345], 0);
  const TensorInfo* e = (*fe)->find_tensor("experts");
  const uint64_t slice = nb / 8;
  for (int x = 0; x < 8; ++x) {
    const uint8_t want = (x == 2 || x == 5) ? 0xAB : 0;
    EXPECT_EQ(e->data[x * slice], want) << "expert " << x;
    EXPECT_EQ(e->data[x * slice + slice - 1], want) << "expert " << x;
  }
  std::filesystem::remove(path);
}

// Zero chunks from a callback are left as holes too.
TEST(GgufHoles, ZeroChunksStaySparse) {
  Writer w;
  ASSERT_TRUE(w.add_tensor("z", GgmlType::kF16, {1 << 14, 2048},
                           [](uint64_t, std::span<uint8_t> out) {
                             std::fill(out.begin(), out.end(), 0);
                           })
                  .ok());
  const std::string path = temp_path("zeros.gguf");
  ASSERT_TRUE(w.write(path).ok());
  EXPECT_LT(allocated_bytes(path), std::filesystem::file_size(path) / 100);
  std::filesystem::remove(path);
}

// Writing over an existing file replaces it atomically and leaves no temp file behind.
TEST(GgufWriter, ReplacesExistingFileAndCleansUp) {
  const std::string dir = temp_path("dir");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/m.gguf";
  Writer a;
  ASSERT_TRUE(a.set_u32("which", 1).ok());
  ASSERT_TRUE(a.write(path).ok());
  Writer b;
  ASSERT_TRUE(b.set_u32("which", 2).ok());
  ASSERT_TRUE(b.write(path).ok());
  auto f = File::open(path);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ((*f)->get_u32("which").value(), 2u);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) ++n, (void)e;
  EXPECT_EQ(n, 1);
  EXPECT_FALSE(a.write(dir + "/no/such/dir/x.gguf").ok());
  std::filesystem::remove_all(dir);
}

// A vocabulary-sized file: 129,280 strings and 1,300 tensors parse and index correctly.
TEST(GgufScale, BigVocabularyAndManyTensors) {
  Writer w;
  std::vector<std::string> toks(129280);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = "tok" + std::to_string(i);
  ASSERT_TRUE(w.set_array_string("tokenizer.ggml.tokens", toks).ok());
  std::vector<float> scores(toks.size());
  std::iota(scores.begin(), scores.end(), 0.0f);
  ASSERT_TRUE(w.set_array_f32("tokenizer.ggml.scores", scores).ok());
  for (int i = 0; i < 1300; ++i) {
    ASSERT_TRUE(w.add_tensor("blk." + std::to_string(i) + ".w", GgmlType::kF32, {8},
                             TensorFill::kHole)
                    .ok());
  }
  auto f = write_and_open(w, "scale.gguf");
  ASSERT_NE(f, nullptr);
  auto v = f->get_array_string_views("tokenizer.ggml.tokens");
  ASSERT_TRUE(v.ok());
  ASSERT_EQ(v->size(), 129280u);
  EXPECT_EQ((*v)[129279], "tok129279");
  EXPECT_EQ(f->tensors().size(), 1300u);
  EXPECT_EQ(f->find_tensor("blk.1299.w")->offset, 1299u * 32);
}

}  // namespace
}  // namespace ds4::gguf
