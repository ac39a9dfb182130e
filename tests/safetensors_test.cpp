#include "formats/safetensors.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "formats/dtype.h"
#include "error_message.h"
#include "safetensors_writer.h"
#include "util/error.h"

namespace strata {
namespace {

using testfiles::raw_bytes;
using testfiles::safetensors_bytes;
using testfiles::safetensors_raw;
using testfiles::TensorSpec;

template <class T>
T element(const TensorView& t, size_t i) {
  T v;
  std::memcpy(&v, t.data + i * sizeof(T), sizeof(T));
  return v;
}

class SafetensorsTest : public ::testing::Test {
 protected:
  testfiles::TempDir dir_{"strata-safetensors"};

  // The one-line message opening `bytes` gets, which names the file.
  std::string error_for(const std::string& bytes) {
    auto path = dir_.write("bad.safetensors", bytes);
    return testfiles::error_message([&] { SafetensorsFile f(path); }, path.string() + ": ");
  }

  void expect_rejected(const std::string& bytes, const std::string& phrase) {
    testfiles::expect_phrase(error_for(bytes), phrase);
  }

  // A file with one header entry `entry` for tensor "x", and `data_bytes` of data.
  void expect_entry_rejected(const std::string& entry, size_t data_bytes, const std::string& phrase) {
    expect_rejected(safetensors_raw(R"({"x":)" + entry + "}", std::string(data_bytes, '\0')), phrase);
  }
};

TEST_F(SafetensorsTest, ReadsValuesOfEveryCommonDtype) {
  std::vector<TensorSpec> specs = {
      {"f32", "F32", {2, 2}, raw_bytes(std::vector<float>{1.5f, -2.0f, 0.25f, 3e38f})},
      {"bf16", "BF16", {3}, raw_bytes(std::vector<uint16_t>{0x3f80, 0xc000, 0x3ec0})},
      {"f16", "F16", {5}, raw_bytes(std::vector<uint16_t>{0x3c00, 0xc000, 0x3555, 0x0001, 0x7c00})},
      {"fp8", "F8_E4M3", {1, 5}, raw_bytes(std::vector<uint8_t>{0x38, 0xc0, 0x7e, 0x01, 0x7f})},
      {"i64", "I64", {3}, raw_bytes(std::vector<int64_t>{-1, int64_t{1} << 40, 7})},
  };
  auto path = dir_.write("ok.safetensors", safetensors_bytes(specs));
  SafetensorsFile f(path);
  ASSERT_EQ(f.tensors().size(), 5u);
  EXPECT_TRUE(f.metadata().empty());
  EXPECT_EQ(f.path(), path.string());

  const TensorView* t = f.find("f32");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F32);
  EXPECT_EQ(t->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(t->nbytes, 16u);
  EXPECT_EQ(t->numel(), 4);
  EXPECT_EQ(t->file, path.string());
  EXPECT_EQ(element<float>(*t, 0), 1.5f);
  EXPECT_EQ(element<float>(*t, 3), 3e38f);

  t = f.find("bf16");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::BF16);
  EXPECT_EQ(bf16_to_f32(element<uint16_t>(*t, 0)), 1.0f);
  EXPECT_EQ(bf16_to_f32(element<uint16_t>(*t, 1)), -2.0f);
  EXPECT_EQ(bf16_to_f32(element<uint16_t>(*t, 2)), 0.375f);

  t = f.find("f16");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F16);
  EXPECT_EQ(f16_to_f32(element<uint16_t>(*t, 0)), 1.0f);
  EXPECT_EQ(f16_to_f32(element<uint16_t>(*t, 1)), -2.0f);
  EXPECT_EQ(f16_to_f32(element<uint16_t>(*t, 2)), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(element<uint16_t>(*t, 3)), 0x1p-24f);
  EXPECT_TRUE(std::isinf(f16_to_f32(element<uint16_t>(*t, 4))));

  t = f.find("fp8");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::F8_E4M3);
  EXPECT_EQ(fp8_e4m3_to_f32(t->data[0]), 1.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(t->data[1]), -2.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(t->data[2]), 448.0f);
  EXPECT_EQ(fp8_e4m3_to_f32(t->data[3]), 0x1p-9f);
  EXPECT_TRUE(std::isnan(fp8_e4m3_to_f32(t->data[4])));

  t = f.find("i64");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->dtype, DType::I64);
  EXPECT_EQ(element<int64_t>(*t, 0), -1);
  EXPECT_EQ(element<int64_t>(*t, 1), int64_t{1} << 40);
  EXPECT_EQ(element<int64_t>(*t, 2), 7);
}

TEST_F(SafetensorsTest, TensorsAreViewsIntoOneMappingSortedByName) {
  auto bytes = safetensors_bytes({{"b", "U8", {3}, "abc"}, {"a", "U8", {2}, "de"}});
  SafetensorsFile f(dir_.write("m.safetensors", bytes));
  ASSERT_EQ(f.tensors().size(), 2u);
  EXPECT_EQ(f.tensors()[0].name, "a");
  EXPECT_EQ(f.tensors()[1].name, "b");
  // "b" was written first: "a" starts 3 bytes after it in the same mapping.
  EXPECT_EQ(f.find("a")->data - f.find("b")->data, 3);
  EXPECT_EQ(std::memcmp(f.find("a")->data, "de", 2), 0);
  EXPECT_EQ(f.find("missing"), nullptr);
  EXPECT_EQ(f.find("__metadata__"), nullptr);
}

TEST_F(SafetensorsTest, AcceptsHeaderPaddedWithSpaces) {
  std::string header = R"({"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
  header.append(37, ' ');
  SafetensorsFile f(dir_.write("pad.safetensors", safetensors_raw(header, raw_bytes(std::vector<float>{2.5f}))));
  ASSERT_NE(f.find("x"), nullptr);
  EXPECT_EQ(element<float>(*f.find("x"), 0), 2.5f);
}

TEST_F(SafetensorsTest, ReadsMetadata) {
  auto bytes = safetensors_bytes({{"x", "U8", {1}, "z"}}, {{"format", "pt"}, {"note", "hi"}});
  SafetensorsFile f(dir_.write("meta.safetensors", bytes));
  EXPECT_EQ(f.metadata(), (std::map<std::string, std::string>{{"format", "pt"}, {"note", "hi"}}));
  EXPECT_EQ(f.tensors().size(), 1u);
}

TEST_F(SafetensorsTest, ZeroSizeAndScalarTensorsAreLegal) {
  auto bytes = safetensors_bytes({{"empty", "F32", {0, 4}, ""}, {"scalar", "F32", {}, raw_bytes(std::vector<float>{9.f})},
                                  {"empty2", "BF16", {3, 0}, ""}});
  SafetensorsFile f(dir_.write("zero.safetensors", bytes));
  EXPECT_EQ(f.find("empty")->nbytes, 0u);
  EXPECT_EQ(f.find("empty")->numel(), 0);
  EXPECT_EQ(f.find("scalar")->numel(), 1);
  EXPECT_EQ(element<float>(*f.find("scalar"), 0), 9.f);
}

TEST_F(SafetensorsTest, EmptyHeaderObjectAndEmptyDataAreLegal) {
  SafetensorsFile f(dir_.write("none.safetensors", safetensors_raw("{}", "")));
  EXPECT_TRUE(f.tensors().empty());
}

TEST_F(SafetensorsTest, RejectsFileShorterThanLengthPrefix) {
  expect_rejected("", "too short");
  expect_rejected("\x02\0\0", "too short");
  expect_rejected(std::string(7, '\0'), "too short");
}

TEST_F(SafetensorsTest, RejectsHeaderLengthPastEndOfFile) {
  expect_rejected(safetensors_raw("{}", "", 3), "larger than the file");
  expect_rejected(safetensors_raw("{}  ", "", 100), "larger than the file");
}

TEST_F(SafetensorsTest, RejectsAbsurdHeaderLength) {
  expect_rejected(safetensors_raw("{}", "", SafetensorsFile::kMaxHeaderBytes + 1), "absurd");
  expect_rejected(safetensors_raw("{}", "", UINT64_MAX), "absurd");
  // A text file read as safetensors: its first 8 bytes are a huge length.
  expect_rejected("hello world, this is not a tensor file", "absurd");
}

TEST_F(SafetensorsTest, RejectsHeaderThatIsNotJsonObject) {
  expect_rejected(safetensors_raw("", ""), "not valid JSON");
  expect_rejected(safetensors_raw("{\"x\":", ""), "not valid JSON");
  expect_rejected(safetensors_raw("{}}", ""), "not valid JSON");
  expect_rejected(safetensors_raw(std::string("{\0}", 3), ""), "not valid JSON");
  expect_rejected(safetensors_raw("\"\xff\xfe\"", ""), "not valid JSON");  // invalid UTF-8
  expect_rejected(safetensors_raw("[1,2]", ""), "not a JSON object");
  expect_rejected(safetensors_raw("42", ""), "not a JSON object");
}

TEST_F(SafetensorsTest, RejectsBadMetadata) {
  expect_rejected(safetensors_raw(R"({"__metadata__":[1]})", ""), "__metadata__ is not a JSON object");
  expect_rejected(safetensors_raw(R"({"__metadata__":{"a":1}})", ""), "__metadata__ value for 'a' is not a string");
}

TEST_F(SafetensorsTest, RejectsEntryMissingFieldsOrWithWrongTypes) {
  expect_entry_rejected("[]", 0, "tensor 'x' entry is not a JSON object");
  expect_entry_rejected(R"({"shape":[1],"data_offsets":[0,4]})", 4, "missing 'dtype'");
  expect_entry_rejected(R"({"dtype":"F32","data_offsets":[0,4]})", 4, "missing 'shape'");
  expect_entry_rejected(R"({"dtype":"F32","shape":[1]})", 4, "missing 'data_offsets'");
  expect_entry_rejected(R"({"dtype":7,"shape":[1],"data_offsets":[0,4]})", 4, "dtype is not a string");
  expect_entry_rejected(R"({"dtype":"F32","shape":"1","data_offsets":[0,4]})", 4, "shape is not a JSON array");
  expect_entry_rejected(R"({"dtype":"F32","shape":[1.0],"data_offsets":[0,4]})", 4, "must be integers");
  expect_entry_rejected(R"({"dtype":"F32","shape":[[1]],"data_offsets":[0,4]})", 4, "must be integers");
  expect_entry_rejected(R"({"dtype":"F32","shape":[1],"data_offsets":{"a":0}})", 4, "must be [begin,end]");
  expect_entry_rejected(R"({"dtype":"F32","shape":[1],"data_offsets":[0,"4"]})", 4, "must be integers");
}

TEST_F(SafetensorsTest, RejectsUnknownDtypeByName) {
  expect_entry_rejected(R"({"dtype":"F42","shape":[1],"data_offsets":[0,4]})", 4, "unknown dtype 'F42'");
  expect_entry_rejected(R"({"dtype":"f32","shape":[1],"data_offsets":[0,4]})", 4, "unknown dtype 'f32'");
}

TEST_F(SafetensorsTest, RejectsNegativeDimsAndElementCountOverflow) {
  expect_entry_rejected(R"({"dtype":"F32","shape":[2,-1],"data_offsets":[0,0]})", 0, "negative shape dimensions -1");
  expect_entry_rejected(R"({"dtype":"U8","shape":[4294967296,4294967296],"data_offsets":[0,0]})", 0, "overflows");
  expect_entry_rejected(R"({"dtype":"U8","shape":[18446744073709551615],"data_offsets":[0,0]})", 0, "overflows");
  expect_entry_rejected(R"({"dtype":"U8","shape":[4611686018427387904,4,0],"data_offsets":[0,0]})", 0, "overflows");
  // Fits int64 as an element count, but not as a byte count.
  expect_entry_rejected(R"({"dtype":"F64","shape":[4611686018427387904],"data_offsets":[0,0]})", 0, "overflows");
}

TEST_F(SafetensorsTest, RejectsMalformedDataOffsets) {
  expect_entry_rejected(R"({"dtype":"U8","shape":[1],"data_offsets":[0]})", 1, "must be [begin,end]");
  expect_entry_rejected(R"({"dtype":"U8","shape":[1],"data_offsets":[0,1,2]})", 1, "must be [begin,end]");
  expect_entry_rejected(R"({"dtype":"U8","shape":[1],"data_offsets":[-1,0]})", 1, "negative data_offsets");
  expect_entry_rejected(R"({"dtype":"U8","shape":[0],"data_offsets":[3,2]})", 4, "begin > end");
}

TEST_F(SafetensorsTest, RejectsDataPastEndOfFile) {
  expect_entry_rejected(R"({"dtype":"F32","shape":[2],"data_offsets":[0,8]})", 6,
                        "tensor 'x' data [0,8) past end of file (data section is 6 bytes)");
  expect_entry_rejected(R"({"dtype":"U8","shape":[1],"data_offsets":[18446744073709551614,18446744073709551615]})", 6,
                        "past end of file");
}

TEST_F(SafetensorsTest, RejectsByteLengthMismatch) {
  expect_entry_rejected(R"({"dtype":"F32","shape":[3],"data_offsets":[0,8]})", 8, "has 8 bytes but F32 [3] needs 12");
  expect_entry_rejected(R"({"dtype":"BF16","shape":[2,2],"data_offsets":[0,16]})", 16, "needs 8");
}

TEST_F(SafetensorsTest, RejectsOverlappingTensorsNamingBoth) {
  std::string header = R"({"a":{"dtype":"U8","shape":[8],"data_offsets":[0,8]},)"
                       R"("z":{"dtype":"U8","shape":[0],"data_offsets":[4,4]},)"
                       R"("b":{"dtype":"U8","shape":[4],"data_offsets":[6,10]}})";
  std::string msg = error_for(safetensors_raw(header, std::string(10, '\0')));
  EXPECT_NE(msg.find("tensors 'a' [0,8) and 'b' [6,10) overlap"), std::string::npos) << msg;
  // Identical ranges, and a range nested inside an earlier longer one.
  header = R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},"b":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
  expect_rejected(safetensors_raw(header, std::string(4, '\0')), "overlap");
  header = R"({"a":{"dtype":"U8","shape":[9],"data_offsets":[0,9]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]},)"
           R"("c":{"dtype":"U8","shape":[2],"data_offsets":[5,7]}})";
  expect_rejected(safetensors_raw(header, std::string(9, '\0')), "overlap");
}

TEST_F(SafetensorsTest, RejectsTensorListedTwice) {
  std::string header = R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},)"
                       R"("a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})";
  expect_rejected(safetensors_raw(header, "xy"), "lists tensor 'a' twice");
}

TEST_F(SafetensorsTest, ControlCharactersInNamesAreEscapedInMessages) {
  expect_entry_rejected(R"({"dtype":"F32\n","shape":[1],"data_offsets":[0,4]})", 4, "unknown dtype 'F32\\x0a'");
}

TEST_F(SafetensorsTest, DeeplyNestedValuesAreRejectedWithoutRecursing) {
  // Echoing such a value with a recursive JSON dump would overflow the
  // stack; the header's depth is measured before it is parsed
  // (util/json_file.h), and a shallow nested value is echoed briefly.
  const size_t depth = 1'000'000;
  std::string nested = std::string(depth, '[') + std::string(depth, ']');
  expect_rejected(safetensors_raw(R"({"t":{"dtype":"U8","shape":)" + nested + R"(,"data_offsets":[0,0]}})", ""),
                  "JSON nested more than 128 levels deep");
  expect_rejected(safetensors_raw(R"({"t":{"dtype":"U8","shape":[0],"data_offsets":)" + nested + "}}", ""),
                  "JSON nested more than 128 levels deep");
  nested = std::string(100, '[') + std::string(100, ']');
  expect_entry_rejected(R"({"dtype":"U8","shape":)" + nested + R"(,"data_offsets":[0,0]})", 0,
                        "must be integers, got a nested JSON array");
  expect_entry_rejected(R"({"dtype":"U8","shape":[0],"data_offsets":)" + nested + "}", 0, "must be [begin,end]");
}

TEST_F(SafetensorsTest, RejectsTruncatedFile) {
  auto full = safetensors_bytes({{"w", "F32", {4, 4}, raw_bytes(std::vector<float>(16, 1.f))}});
  expect_rejected(full.substr(0, full.size() - 1), "tensor 'w' data [0,64) past end of file (data section is 63 bytes)");
  // Every shorter prefix is rejected cleanly too, wherever the cut falls.
  for (size_t n = 0; n < full.size(); ++n) {
    auto path = dir_.write("cut.safetensors", full.substr(0, n));
    EXPECT_THROW(SafetensorsFile{path}, Error) << "prefix of " << n << " bytes";
  }
}

TEST_F(SafetensorsTest, RandomByteCorruptionNeverCrashes) {
  auto full = safetensors_bytes({{"a", "BF16", {2, 3}, std::string(12, '\1')}, {"b", "I32", {2}, std::string(8, '\2')}},
                                {{"k", "v"}});
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 400; ++iter) {
    std::string bytes = full;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < flips; ++i) bytes[rng() % bytes.size()] = static_cast<char>(rng() & 0xff);
    auto path = dir_.write("fuzz.safetensors", bytes);
    try {
      SafetensorsFile f(path);
      for (const TensorView& t : f.tensors()) EXPECT_EQ(static_cast<int64_t>(t.nbytes), t.numel() * int64_t(dtype_size(t.dtype)));
    } catch (const Error&) {
      // Rejected cleanly: fine.
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << iter << ": non-strata exception: " << e.what();
    }
  }
}

TEST_F(SafetensorsTest, MissingFileIsAnError) {
  EXPECT_THROW(SafetensorsFile(dir_ / "nope.safetensors"), Error);
}

// A remote file's header length (its first 8 bytes, little-endian) against
// the size the source gives: zero, past the file or past the limit refused.
TEST(SafetensorsHeaderLength, ALengthThatCannotBeIsRefused) {
  const auto le = [](uint64_t n) {
    std::vector<uint8_t> b(8);
    for (int i = 0; i < 8; ++i) b[i] = static_cast<uint8_t>(n >> (8 * i));
    return b;
  };
  EXPECT_EQ(safetensors_header_length(le(300).data(), 1000, "f"), 300u);
  EXPECT_EQ(safetensors_header_length(le(992).data(), 1000, "f"), 992u);
  EXPECT_THROW(safetensors_header_length(le(993).data(), 1000, "f"), Error);
  EXPECT_THROW(safetensors_header_length(le(0).data(), 1000, "f"), Error);
  EXPECT_THROW(safetensors_header_length(le(4).data(), 7, "f"), Error);
  EXPECT_THROW(safetensors_header_length(le(SafetensorsFile::kMaxHeaderBytes + 1).data(), 1ull << 40, "f"), Error);
  EXPECT_THROW(safetensors_header_length(le(UINT64_MAX).data(), 1000, "f"), Error);
}

}  // namespace
}  // namespace strata
