// GGUF files: the writer→reader round trip, every validation failure of the
// reader, and random corruption (the HF-named view is in gguf_model_view_test.cpp).
#include "formats/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "formats/gguf_writer.h"
#include "gguf_test_fixture.h"
#include "gguf_writer.h"
#include "model/gguf_model.h"
#include "model/model.h"
#include "backend/rope.h"
#include "model/weights.h"
#include "util/error.h"

namespace strata {
namespace {

using namespace gguftest;
using nlohmann::json;
using testfiles::GgufBytes;
using testfiles::raw_bytes;

TEST_F(GgufTest, RoundTripsEveryMetadataType) {
  GgufWriter w;
  w.set("u8", GgufMeta::u8(200));
  w.set("i8", GgufMeta::i8(-100));
  w.set("u16", GgufMeta::u16(60000));
  w.set("i16", GgufMeta::i16(-30000));
  w.set_u32("u32", 4000000000u);
  w.set_i32("i32", -2000000000);
  w.set_u64("u64", 18000000000000000000ull);
  w.set("i64", GgufMeta::i64(-9000000000000000000ll));
  w.set_f32("f32", 0.1f);
  w.set_f64("f64", 0.1);
  w.set_bool("bool", true);
  w.set_string("string", "héllo");
  w.set_string("empty", "");
  w.set("a_u8", GgufMeta::array(std::vector<uint8_t>{1, 2, 255}));
  w.set("a_i8", GgufMeta::array(std::vector<int8_t>{-1, 2}));
  w.set("a_u16", GgufMeta::array(std::vector<uint16_t>{65535}));
  w.set("a_i16", GgufMeta::array(std::vector<int16_t>{-5, 5}));
  w.set("a_u32", GgufMeta::array(std::vector<uint32_t>{7, 8, 9}));
  w.set("a_i32", GgufMeta::array(std::vector<int32_t>{-7, 8}));
  w.set("a_u64", GgufMeta::array(std::vector<uint64_t>{1ull << 40}));
  w.set("a_i64", GgufMeta::array(std::vector<int64_t>{-(1ll << 40)}));
  w.set("a_f32", GgufMeta::array(std::vector<float>{1.5f, -2.25f}));
  w.set("a_f64", GgufMeta::array(std::vector<double>{1e300}));
  w.set("a_bool", GgufMeta::array(std::vector<bool>{true, false, true}));
  w.set_strings("a_str", {"a", "", "ü\xe2\x82\xac"});
  w.set("a_empty", GgufMeta::array(std::vector<float>{}));
  w.set("a_nested", GgufMeta::array_of_arrays({GgufMeta::array(std::vector<uint32_t>{1, 2}),
                                               GgufMeta::string_array({"x", "y"}),
                                               GgufMeta::array_of_arrays({GgufMeta::array(std::vector<int8_t>{-3})})}));
  GgufFile f(write(w.to_bytes({})));

  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.metadata().size(), 27u);
  EXPECT_EQ(f.metadata().front().first, "u8");  // file order kept
  EXPECT_EQ(f.get_int("u8"), 200);
  EXPECT_EQ(f.get_int("i8"), -100);
  EXPECT_EQ(f.get_int("u16"), 60000);
  EXPECT_EQ(f.get_int("i16"), -30000);
  EXPECT_EQ(f.get_u32("u32"), 4000000000u);
  EXPECT_EQ(f.get_int("i32"), -2000000000);
  EXPECT_EQ(f.find_value("u64")->u, 18000000000000000000ull);
  EXPECT_EQ(f.get_int("i64"), -9000000000000000000ll);
  EXPECT_EQ(f.get_float("f32"), static_cast<double>(0.1f));
  EXPECT_EQ(f.get_float("f64"), 0.1);
  EXPECT_EQ(f.get_float("u32"), 4000000000.0);  // integers read as numbers too
  EXPECT_TRUE(f.get_bool("bool"));
  EXPECT_EQ(f.get_string("string"), "héllo");
  EXPECT_EQ(f.get_string("empty"), "");
  EXPECT_EQ(f.get_int_array("a_u8"), (std::vector<int64_t>{1, 2, 255}));
  EXPECT_EQ(f.get_int_array("a_i8"), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(f.get_int_array("a_u16"), (std::vector<int64_t>{65535}));
  EXPECT_EQ(f.get_int_array("a_i16"), (std::vector<int64_t>{-5, 5}));
  EXPECT_EQ(f.get_int_array("a_u32"), (std::vector<int64_t>{7, 8, 9}));
  EXPECT_EQ(f.get_int_array("a_i32"), (std::vector<int64_t>{-7, 8}));
  EXPECT_EQ(f.get_int_array("a_u64"), (std::vector<int64_t>{1ll << 40}));
  EXPECT_EQ(f.get_int_array("a_i64"), (std::vector<int64_t>{-(1ll << 40)}));
  EXPECT_EQ(f.get_float_array("a_f32"), (std::vector<double>{1.5, -2.25}));
  EXPECT_EQ(f.get_float_array("a_f64"), (std::vector<double>{1e300}));
  const GgufValue* b = f.find_value("a_bool");
  ASSERT_EQ(b->count, 3u);
  EXPECT_EQ(b->elem_type, GgufType::BOOL);
  EXPECT_EQ(b->element_int(0), 1);
  EXPECT_EQ(b->element_int(1), 0);
  EXPECT_EQ(f.get_string_array("a_str"), (std::vector<std::string_view>{"a", "", "ü\xe2\x82\xac"}));
  EXPECT_EQ(f.get_array_length("a_empty"), 0u);
  EXPECT_TRUE(f.get_float_array("a_empty").empty());

  const GgufValue* n = f.find_value("a_nested");
  ASSERT_EQ(n->elem_type, GgufType::ARRAY);
  ASSERT_EQ(n->items.size(), 3u);
  EXPECT_EQ(n->items[0].elem_type, GgufType::U32);
  EXPECT_EQ(n->items[0].element_int(1), 2);
  EXPECT_EQ(n->items[1].strings, (std::vector<std::string_view>{"x", "y"}));
  ASSERT_EQ(n->items[2].items.size(), 1u);
  EXPECT_EQ(n->items[2].items[0].element_int(0), -3);
  EXPECT_TRUE(f.tensors().empty());
}

TEST_F(GgufTest, RoundTripsTensorsOfSeveralTypes) {
  struct Spec {
    std::string name;
    DType type;
    std::vector<int64_t> shape;  // HF order
  };
  const std::vector<Spec> specs = {
      {"f32", DType::F32, {3, 5}},        {"f16", DType::F16, {7}},          {"bf16", DType::BF16, {2, 3, 4}},
      {"q8_0", DType::Q8_0, {2, 64}},     {"q4_k", DType::Q4_K, {3, 256}},   {"mxfp4", DType::MXFP4, {2, 2, 32}},
      {"i32", DType::I32, {1, 1, 1, 5}},  {"f64", DType::F64, {2}},          {"q6_k", DType::Q6_K, {1, 512}},
  };
  for (uint32_t align : {32u, 64u}) {
    GgufWriter w(align);
    w.set_string("general.architecture", "test");
    std::vector<std::string> data;
    std::mt19937 rng(align);
    for (const Spec& s : specs) {
      uint64_t n = w.add_tensor(s.name, s.type, s.shape);
      std::string bytes(n, '\0');
      for (char& c : bytes) c = static_cast<char>(rng());
      data.push_back(bytes);
    }
    std::vector<std::string_view> views(data.begin(), data.end());
    const std::string file = w.to_bytes(views);
    EXPECT_EQ(file.size(), w.file_size());
    GgufFile f(write(file));
    EXPECT_EQ(f.alignment(), align);
    EXPECT_EQ(f.data_offset() % align, 0u);
    EXPECT_EQ(f.data_offset(), w.header_size());
    if (align != 32) {
      EXPECT_EQ(f.get_u32("general.alignment"), align);
    }
    ASSERT_EQ(f.tensors().size(), specs.size());
    for (size_t i = 0; i < specs.size(); ++i) {
      const TensorView& t = f.get(specs[i].name);
      const GgufTensorInfo& info = f.tensor_infos()[i];
      EXPECT_EQ(t.dtype, specs[i].type) << specs[i].name;
      EXPECT_EQ(t.shape, specs[i].shape) << specs[i].name;
      EXPECT_EQ(info.ne, std::vector<int64_t>(specs[i].shape.rbegin(), specs[i].shape.rend()));
      EXPECT_EQ(info.ggml_type, *ggml_type_of(specs[i].type));
      EXPECT_EQ(info.offset % align, 0u);
      EXPECT_EQ(t.nbytes, data[i].size());
      EXPECT_EQ(std::string(reinterpret_cast<const char*>(t.data), t.nbytes), data[i]) << specs[i].name;
      EXPECT_EQ(t.file, f.path());
    }
    std::vector<std::string> names = f.names();
    EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
    EXPECT_EQ(f.find("missing"), nullptr);
  }
}

TEST_F(GgufTest, MapsGgmlTypeIdsAsGgmlDoes) {
  // ggml.h: F32=0 F16=1 Q4_0=2 Q4_1=3 Q5_0=6 Q5_1=7 Q8_0=8 Q8_1=9 Q2_K..Q8_K=10..15
  // I8=24 I16=25 I32=26 I64=27 F64=28 BF16=30 MXFP4=39.
  const std::vector<std::pair<uint32_t, DType>> ids = {
      {0, DType::F32},   {1, DType::F16},   {2, DType::Q4_0},  {3, DType::Q4_1},  {6, DType::Q5_0},
      {7, DType::Q5_1},  {8, DType::Q8_0},  {9, DType::Q8_1},  {10, DType::Q2_K}, {11, DType::Q3_K},
      {12, DType::Q4_K}, {13, DType::Q5_K}, {14, DType::Q6_K}, {15, DType::Q8_K}, {24, DType::I8},
      {25, DType::I16},  {26, DType::I32},  {27, DType::I64},  {28, DType::F64},  {30, DType::BF16},
      {39, DType::MXFP4}};
  for (auto [id, d] : ids) {
    EXPECT_EQ(dtype_from_ggml(id), d) << id;
    EXPECT_EQ(ggml_type_of(d), id) << id;
  }
  EXPECT_EQ(dtype_from_ggml(16), std::nullopt);
  EXPECT_STREQ(ggml_type_name(16), "IQ2_XXS");
  EXPECT_EQ(ggml_type_name(4), nullptr);  // Q4_2, removed from ggml
  EXPECT_EQ(ggml_type_of(DType::F8_E4M3), std::nullopt);
}

// Every GGUF block type the kernels decode loads from a file and binds as a
// linear layer and as a table, giving gguf-py's values for the same blocks
// (tests/fixtures/quants, made by tools/make_quant_fixtures.py).
TEST_F(GgufTest, BlockTypesLoadAndDecodeAsGgufPyDoes) {
  const std::vector<DType> types = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0,
                                    DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K};
  auto slurp = [](const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    EXPECT_TRUE(in.good()) << p;
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  const std::filesystem::path dir = std::filesystem::path(STRATA_FIXTURES_DIR) / "quants";
  GgufWriter w;
  w.set_string("general.architecture", "test");
  std::vector<std::string> blocks, values;
  for (DType t : types) {
    blocks.push_back(slurp(dir / (std::string(dtype_name(t)) + ".blocks")));
    values.push_back(slurp(dir / (std::string(dtype_name(t)) + ".f32")));
    ASSERT_EQ(w.add_tensor(std::string(dtype_name(t)) + ".weight", t, {4, 256}), blocks.back().size());
  }
  std::vector<std::string_view> views(blocks.begin(), blocks.end());
  GgufFile f(write(w.to_bytes(views)));
  ModelConfig c;
  WeightBinder binder(f, c);
  for (size_t k = 0; k < types.size(); ++k) {
    const std::string name = dtype_name(types[k]);
    EXPECT_EQ(f.get(name + ".weight").dtype, types[k]);
    for (const kernels::WeightMatrix& m : {binder.linear(name, 4, 256), binder.table(name + ".weight", 4, 256)}) {
      std::vector<float> row(256);
      for (int64_t o = 0; o < 4; ++o) {
        kernels::dequantize_row(m, o, row.data());
        EXPECT_EQ(0, std::memcmp(row.data(), values[k].data() + o * 256 * 4, 256 * 4)) << name << " row " << o;
      }
    }
  }
}

TEST_F(GgufTest, ReadsVersion2) {
  GgufWriter w;
  w.set_string("general.architecture", "test");
  w.add_tensor("t", DType::F32, {4});
  std::string bytes = w.to_bytes({f32s(4)});
  testfiles::patch<uint32_t>(bytes, 4, 2);
  GgufFile f(write(bytes));
  EXPECT_EQ(f.version(), 2u);
  EXPECT_EQ(f.get("t").shape, std::vector<int64_t>{4});
}

TEST_F(GgufTest, StreamsTensorDataInPieces) {
  GgufWriter w;
  w.set_string("general.architecture", "test");
  w.add_tensor("a", DType::F32, {3, 7});
  w.add_tensor("b", DType::BF16, {5});
  w.add_tensor("c", DType::F32, {1});
  const std::string a = f32s(21), b(10, '\x11'), c = f32s(1, 9.0f);
  const std::string whole = GgufWriter(w).to_bytes({a, b, c});

  std::ostringstream out;
  w.write_header(out);
  const std::string all = a + b + c;
  for (size_t i = 0; i < all.size(); i += 5) w.write_data(out, all.data() + i, std::min<size_t>(5, all.size() - i));
  w.finish(out);
  EXPECT_EQ(out.str(), whole);
  EXPECT_EQ(out.str().size(), w.file_size());
  EXPECT_EQ(w.tensor_offset(1), 96u);  // 84 bytes padded to 96
}

TEST_F(GgufTest, WriterRejectsMisuse) {
  auto expect_error = [](auto&& fn, const std::string& phrase) {
    try {
      fn();
      ADD_FAILURE() << "no error; expected " << phrase;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(phrase), std::string::npos) << e.what();
    }
  };
  expect_error([] { GgufWriter w(48); }, "not a power of two");
  expect_error([] { GgufWriter w; w.set_u32("k", 1); w.set_u32("k", 2); }, "set twice");
  expect_error([] { GgufWriter w; w.add_tensor("t", DType::F32, {1}); w.add_tensor("t", DType::F32, {1}); },
               "declared twice");
  expect_error([] { GgufWriter w; w.add_tensor("t", DType::Q4_K, {2, 100}); }, "not whole Q4_K blocks");
  expect_error([] { GgufWriter w; w.add_tensor("t", DType::F8_E4M3, {2}); }, "cannot store type F8_E4M3");
  expect_error([] { GgufWriter w; w.add_tensor("t", DType::F32, {2, 0}); }, "not positive");
  expect_error([] { GgufWriter w; w.add_tensor("t", DType::F32, {1, 1, 1, 1, 1}); }, "1 to 4 dimensions");
  expect_error([] { GgufWriter w; w.add_tensor("t", DType::F32, {2}); w.to_bytes({"abc"}); }, "needs 8 bytes, got 3");
  expect_error(
      [] {
        GgufWriter w;
        w.add_tensor("t", DType::F32, {2});
        std::ostringstream out;
        w.write_header(out);
        w.write_data(out, "abcd", 4);
        w.finish(out);
      },
      "got 4 of its 8 bytes");
  expect_error(
      [] {
        GgufWriter w;
        w.add_tensor("t", DType::F32, {1});
        std::ostringstream out;
        w.write_header(out);
        w.write_data(out, "abcdefgh", 8);
      },
      "more tensor data");
  expect_error([] { GgufWriter w; std::ostringstream out; w.write_data(out, "a", 1); }, "before the header");
}

// --- typed metadata access --------------------------------------------------

TEST_F(GgufTest, TypedAccessorsNameKeyAndTypes) {
  GgufWriter w;
  w.set_string("qwen3moe.block_count", "48");
  w.set_i32("neg", -1);
  w.set_u64("big", 1ull << 40);
  w.set_f32("f", 1.0f);
  w.set_strings("strs", {"a"});
  GgufFile f(write(w.to_bytes({})));
  const std::string p = f.path() + ": ";
  auto message = [](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(message([&] { f.get_int("qwen3moe.block_count"); }),
            p + "metadata 'qwen3moe.block_count' is a string, expected an integer");
  EXPECT_EQ(message([&] { f.get_int("nope"); }), p + "metadata 'nope' is missing");
  EXPECT_EQ(message([&] { f.get_u32("neg"); }), p + "metadata 'neg' is -1, expected an integer in [0, 4294967295]");
  EXPECT_EQ(message([&] { f.get_u32("big"); }),
            p + "metadata 'big' is 1099511627776, expected an integer in [0, 4294967295]");
  EXPECT_EQ(message([&] { f.get_int("f"); }), p + "metadata 'f' is an f32, expected an integer");
  EXPECT_EQ(message([&] { f.get_string("f"); }), p + "metadata 'f' is an f32, expected a string");
  EXPECT_EQ(message([&] { f.get_bool("neg"); }), p + "metadata 'neg' is an i32, expected a bool");
  EXPECT_EQ(message([&] { f.get_float("strs"); }), p + "metadata 'strs' is an array of string, expected a number");
  EXPECT_EQ(message([&] { f.get_int_array("strs"); }),
            p + "metadata 'strs' is an array of string, expected an array of integers");
  EXPECT_EQ(message([&] { f.get_string_array("f"); }), p + "metadata 'f' is an f32, expected an array of string");
  EXPECT_EQ(f.find_int("nope"), std::nullopt);
  EXPECT_EQ(f.find_int("neg"), -1);
  EXPECT_EQ(f.get_int("big"), 1ll << 40);
  EXPECT_EQ(f.find_float("f"), 1.0);
}

// --- validation -------------------------------------------------------------

TEST_F(GgufTest, RejectsShortFilesAndBadMagic) {
  expect_rejected("", "file is 0 bytes, too short for a GGUF header");
  expect_rejected("GG", "too short");
  expect_rejected(std::string("\x89PNG\r\n\x1a\n", 8) + std::string(40, '\0'), "not a GGUF file (starts with");
  expect_rejected("{\"__metadata__\":{}}" + std::string(32, ' '), "not a GGUF file");
}

TEST_F(GgufTest, RejectsUnsupportedVersions) {
  GgufBytes v1, v4, big;
  v1.header(0, 0, 1);
  v4.header(0, 0, 4);
  big.header(0, 0, 0x03000000);
  expect_rejected(v1.bytes, "unsupported GGUF version 1 (supported: 2, 3)");
  expect_rejected(v4.bytes, "unsupported GGUF version 4");
  expect_rejected(big.bytes, "big-endian");
}

TEST_F(GgufTest, RejectsAbsurdCounts) {
  GgufBytes t, k, both;
  t.header(1000000, 0).zeros(100);
  k.header(0, 1ull << 60).zeros(100);
  both.header(3, 7).zeros(100);  // 3·24 + 7·13 > 100
  expect_rejected(t.bytes, "tensor count 1000000 is absurd for a file of");
  expect_rejected(k.bytes, "metadata count 1152921504606846976 is absurd");
  expect_rejected(both.bytes, "metadata count 7 is absurd");
}

TEST_F(GgufTest, RejectsStringsAndArraysLongerThanTheFile) {
  GgufBytes key, value, arr, strs;
  key.header(0, 1).u64(1ull << 62).zeros(20);
  value.header(0, 1).key("k", 8).u64(1000).raw("short").zeros(16);
  arr.header(0, 1).key("k", 9).u32(4).u64(1000000000).zeros(16);
  strs.header(0, 1).key("k", 9).u32(8).u64(100).str("a").zeros(16);
  expect_rejected(key.bytes, "metadata key #0: string length 4611686018427387904 at offset 24 runs past the end");
  expect_rejected(value.bytes, "metadata 'k': string length 1000");
  expect_rejected(arr.bytes, "array of 1000000000 u32 values at offset");
  expect_rejected(strs.bytes, "array of 100 string values");
}

TEST_F(GgufTest, RejectsBadValues) {
  GgufBytes type, elem, boolean, bools, dup, empty, deep;
  type.header(0, 1).key("k", 13).zeros(16);
  elem.header(0, 1).key("k", 9).u32(42).u64(1).zeros(16);
  boolean.header(0, 1).key("flag", 7).raw("\x02").zeros(16);
  bools.header(0, 1).key("flags", 9).u32(7).u64(3).raw(std::string("\x01\x00\x05", 3)).zeros(16);
  dup.header(0, 2).kv_u32("k", 1).kv_u32("k", 2).zeros(16);
  empty.header(0, 1).kv_u32("", 1).zeros(16);
  deep.header(0, 1).key("k", 9);
  for (int i = 0; i < 9; ++i) deep.u32(9).u64(1);
  deep.u32(4).u64(0).zeros(16);
  expect_rejected(type.bytes, "metadata 'k' has unknown value type 13");
  expect_rejected(elem.bytes, "metadata 'k' is an array of unknown value type 42");
  expect_rejected(boolean.bytes, "metadata 'flag' has bool value 2 (must be 0 or 1)");
  expect_rejected(bools.bytes, "metadata 'flags' element 2 has bool value 5");
  expect_rejected(dup.bytes, "metadata key 'k' appears twice");
  expect_rejected(empty.bytes, "metadata key #0 is empty");
  expect_rejected(deep.bytes, "nested deeper than 8");
}

TEST_F(GgufTest, RejectsBadAlignment) {
  GgufBytes three, wrong;
  three.header(0, 1).kv_u32("general.alignment", 3).zeros(16);
  wrong.header(0, 1).key("general.alignment", 10).u64(32).zeros(16);
  expect_rejected(three.bytes, "metadata 'general.alignment' is 3, not a power of two");
  expect_rejected(wrong.bytes, "metadata 'general.alignment' is a u64, expected a u32");
}

TEST_F(GgufTest, RejectsBadTensorTypesAndShapes) {
  expect_rejected(one_tensor({4}, 99), "tensor 't' has unknown ggml type 99");
  expect_rejected(one_tensor({256}, kIQ2XXS), "tensor 't' has ggml type 16 (IQ2_XXS), which strata does not support");
  expect_rejected(one_tensor({1, 1, 1, 1, 1}), "tensor 't' has 5 dimensions (1 to 4 allowed)");
  expect_rejected(one_tensor({}), "tensor 't' has 0 dimensions");
  expect_rejected(one_tensor({4, 0}), "tensor 't' dimension 1 is 0 (must be positive)");
  expect_rejected(one_tensor({-3}), "tensor 't' dimension 0 is -3");
  expect_rejected(one_tensor({1ll << 40, 1ll << 30}), "tensor 't' shape [1099511627776,1073741824] element count overflows");
  expect_rejected(one_tensor({100, 2}, kQ4K), "tensor 't' of type Q4_K has rows of 100 elements, not a multiple of the block size 256");
}

TEST_F(GgufTest, RejectsBadTensorPlacement) {
  expect_rejected(one_tensor({4}, kF32, 4), "tensor 't' offset 4 is not a multiple of the alignment 32");
  expect_rejected(one_tensor({4}, kF32, 0, 15), "tensor 't' data [0,16) runs past the end of the file (data section is 15 bytes)");
  expect_rejected(one_tensor({4}, kF32, 1ull << 63), "runs past the end of the file");
  expect_rejected(one_tensor({1ll << 40}, kF32, 0), "runs past the end of the file");

  GgufBytes overlap, dup;
  overlap.header(2, 0).tensor("a", {16}, kF32, 0).tensor("b", {8}, kF32, 32).pad().zeros(128);
  dup.header(2, 0).tensor("a", {8}, kF32, 0).tensor("a", {8}, kF32, 32).pad().zeros(128);
  expect_rejected(overlap.bytes, "tensors 'a' [0,64) and 'b' [32,64) overlap");
  expect_rejected(dup.bytes, "tensor 'a' is listed twice");
}

TEST_F(GgufTest, RejectsEveryTruncation) {
  GgufWriter w;
  w.set_string("general.architecture", "test");
  w.set_strings("tokenizer.ggml.tokens", {"a", "bb", "ccc"});
  w.set("nested", GgufMeta::array_of_arrays({GgufMeta::array(std::vector<uint32_t>{1, 2})}));
  w.set_f32("f", 2.0f);
  w.add_tensor("a", DType::F32, {2, 3});
  w.add_tensor("b", DType::Q8_0, {1, 32});
  const std::string bytes = w.to_bytes({f32s(6), std::string(34, '\x01')});
  const size_t data_end = w.header_size() + w.tensor_offset(1) + w.tensor_bytes(1);
  GgufFile ok(write(bytes));  // the whole file is fine
  EXPECT_EQ(ok.tensors().size(), 2u);
  for (size_t len = 0; len < data_end; ++len) {
    SCOPED_TRACE(len);
    std::string msg = error_for(bytes.substr(0, len));
    if (len >= 4 && len < w.header_size() - 32) {
      EXPECT_TRUE(msg.find("truncated") != std::string::npos || msg.find("runs past the end") != std::string::npos ||
                  msg.find("absurd") != std::string::npos)
          << msg;
    }
  }
}

TEST_F(GgufTest, RandomCorruptionNeverCrashes) {
  GgufWriter w;
  w.set_string("general.architecture", "qwen3moe");
  w.set_u32("qwen3moe.block_count", 1);
  w.set_strings("tokenizer.ggml.tokens", {"a", "b", "c", "d"});
  w.set("arr", GgufMeta::array(std::vector<int32_t>{1, -2, 3}));
  w.set("nested", GgufMeta::array_of_arrays({GgufMeta::string_array({"x"})}));
  w.add_tensor("token_embd.weight", DType::F32, {4, 8});
  w.add_tensor("blk.0.ffn_gate_exps.weight", DType::F32, {2, 4, 8});
  w.add_tensor("q", DType::Q8_0, {2, 32});
  const std::string good = w.to_bytes({f32s(32), f32s(64), std::string(68, '\x02')});

  std::mt19937 rng(20240917);
  int opened = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string bytes = good;
    const int edits = 1 + static_cast<int>(rng() % 6);
    for (int e = 0; e < edits; ++e) {
      size_t at = rng() % bytes.size();
      switch (rng() % 4) {
        case 0: bytes[at] = static_cast<char>(rng()); break;
        case 1: bytes[at] = '\xff'; break;
        case 2: bytes[at] = '\0'; break;
        default: bytes[at] ^= static_cast<char>(1u << (rng() % 8)); break;
      }
    }
    if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    auto path = write(bytes, "fuzz.gguf");
    try {
      GgufFile f(path);
      ++opened;
      // Every view must lie inside the mapping: touch all of its bytes.
      unsigned sum = 0;
      for (const TensorView& t : f.tensors())
        for (size_t i = 0; i < t.nbytes; ++i) sum += t.data[i];
      (void)sum;
      for (const auto& [k, v] : f.metadata()) (void)f.find_value(k);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path.string() + ": ", 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
  EXPECT_GT(opened, 0);  // some mutations hit only data bytes
}

// --- the HF view --------------------------------------------------------------

// Tensors of a model file: HF-order shape and F32 contents; element i of the
// k-th tensor is 10000·k + i, so every slice is recognisable.

}  // namespace
}  // namespace strata
