// Weight formats: each format's dequantization against values built
// independently from the format's definition (ggml's block layouts as its
// quantizers write them, compressed-tensors' pack_to_int32, transformers'
// convert_moe_packed_tensors), and the kernels' contract: every ISA gives the
// scalar reference's bits, and a row's result does not depend on batch size
// or thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "formats/dtype.h"
#include "kernels/dispatch.h"
#include "kernels/linear.h"
#include "kernels_test_support.h"
#include "weight_formats.h"
#include "util/thread_pool.h"

namespace strata {
namespace {

using kernels::Isa;
using kernel_tests::IsaGuard;
using kernel_tests::random_vector;
using kernel_tests::supported_isas;
using kernel_tests::to_f16;
using namespace kernel_tests::formats;

void PrintTo(const FmtCase& c, std::ostream* os) { *os << c.name; }

class Formats : public ::testing::TestWithParam<FmtCase> {};

// The scalar reference's own contract: dequantize, then the fixed-order dot.
TEST_P(Formats, ScalarIsDequantizeThenDot) {
  IsaGuard guard;
  kernels::set_isa(Isa::Scalar);
  const int64_t out = 5, in = GetParam().in;
  Mat m = random_matrix(GetParam().fmt, out, in, 1);
  std::vector<float> x = random_vector(static_cast<size_t>(in), 2), y(out), row(in);
  kernels::linear(m.w, x.data(), 1, y.data(), nullptr);
  for (int64_t o = 0; o < out; ++o) {
    kernels::dequantize_row(m.w, o, row.data());
    double ref = 0.0, mag = 0.0;
    for (int64_t i = 0; i < in; ++i) {
      ASSERT_TRUE(std::isfinite(row[i])) << o << "," << i;
      ref += static_cast<double>(row[i]) * x[i];
      mag += std::fabs(static_cast<double>(row[i]) * x[i]);
    }
    EXPECT_EQ(std::bit_cast<uint32_t>(y[o]), std::bit_cast<uint32_t>(kernels::dot(row.data(), x.data(), in)));
    EXPECT_NEAR(y[o], ref, 1e-5 * mag + 1e-7);
  }
}

// Every ISA the machine has gives the scalar reference's bits: products for
// several batch sizes (the n = 1 path, the few-row path in one group and in
// two, the batched tiles and their remainders), dequantized rows, the
// transposed product.
TEST_P(Formats, EveryIsaGivesScalarBits) {
  IsaGuard guard;
  const int64_t out = 37, in = GetParam().in;  // 37: partial row tiles
  Mat m = random_matrix(GetParam().fmt, out, in, 3);
  ThreadPool pool(2);
  for (size_t n : {1, 2, 3, 4, 5, 6, 8, 9, 67}) kernel_tests::expect_scalar_bits_on_every_isa(m.w, n, 10 + n, &pool);
  std::vector<float> xt = random_vector(out, 99);
  kernels::set_isa(Isa::Scalar);
  std::vector<std::vector<float>> rows(out, std::vector<float>(in));
  for (int64_t o = 0; o < out; ++o) kernels::dequantize_row(m.w, o, rows[o].data());
  std::vector<float> tref(in);
  kernels::linear_transposed(m.w, xt.data(), tref.data());
  for (Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    std::vector<float> row(in);
    for (int64_t o = 0; o < out; ++o) {
      kernels::dequantize_row(m.w, o, row.data());
      ASSERT_EQ(0, std::memcmp(row.data(), rows[o].data(), in * sizeof(float))) << kernels::isa_name(isa) << " row " << o;
    }
    std::vector<float> t(in);
    kernels::linear_transposed(m.w, xt.data(), t.data());
    EXPECT_EQ(0, std::memcmp(t.data(), tref.data(), in * sizeof(float))) << kernels::isa_name(isa);
  }
}

// A row's result alone equals its result inside a batch of 9 (the batched
// path on AVX2, groups on AVX-512) and of 7 (the few-row path), at 1, 2 and 3 threads, on every ISA (row
// slices included, as attention uses them).
TEST_P(Formats, RowIndependentOfBatchAndThreads) {
  Mat m = random_matrix(GetParam().fmt, 45, GetParam().in, 5);
  kernel_tests::expect_rows_independent(m.w, 9, 13, 20);
  kernel_tests::expect_rows_independent(m.w, 7, 13, 20);
}

// Rows wide enough that the few-row path walks the output rows in several
// slices (its groups of batch rows take turns on each), with a tail of
// columns: still the scalar bits.
TEST(DenseWide, FewRowsOverSeveralSlicesGiveScalarBits) {
  IsaGuard guard;
  const int64_t out = 42, in = 4100;  // slices of 4 rows (AVX-512), 2 (AVX2); 4100 = 256 · 16 + 4
  Mat m = random_matrix(Fmt::BF16, out, in, 9);
  ThreadPool pool(2);
  for (size_t n : {3, 5, 8}) kernel_tests::expect_scalar_bits_on_every_isa(m.w, n, 30 + n, &pool);
}

// A matrix without columns gives zeros at any row count on every path (the
// few-row path sizes its slices by the row width).
TEST(DenseWide, NoColumnsGiveZerosAtAnyRowCount) {
  IsaGuard guard;
  Mat m = random_matrix(Fmt::BF16, 12, 0, 10);
  const uint8_t none[1] = {};
  m.w.data = none;  // rows of no bytes, at some address
  for (size_t n : {1, 3, 5, 8, 9}) {
    const std::vector<float> x(1, 0.0f);
    for (Isa isa : supported_isas()) {
      kernels::set_isa(isa);
      std::vector<float> y(n * 12, -1.0f);
      kernels::linear(m.w, x.data(), n, y.data(), nullptr);
      for (size_t k = 0; k < y.size(); ++k) ASSERT_EQ(y[k], 0.0f) << kernels::isa_name(isa) << " n=" << n << " " << k;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(All, Formats, ::testing::ValuesIn(kCases), [](const auto& info) { return info.param.name; });

TEST(KernelDot, EveryIsaGivesScalarBitsAtEveryLength) {
  IsaGuard guard;
  for (size_t n : {0, 1, 7, 15, 16, 17, 31, 64, 100, 1000}) {
    std::vector<float> a = random_vector(n, n), b = random_vector(n, n + 1);
    kernels::set_isa(Isa::Scalar);
    const float ref = kernels::dot(a.data(), b.data(), n);
    // The documented order: 16 fused lanes, then the fixed tree.
    float acc[16] = {};
    for (size_t i = 0; i < n; ++i) acc[i % 16] = std::fma(a[i], b[i], acc[i % 16]);
    for (size_t w = 8; w > 0; w /= 2)
      for (size_t j = 0; j < w; ++j) acc[j] += acc[j + w];
    EXPECT_EQ(std::bit_cast<uint32_t>(ref), std::bit_cast<uint32_t>(acc[0])) << n;
    for (Isa isa : supported_isas()) {
      kernels::set_isa(isa);
      EXPECT_EQ(std::bit_cast<uint32_t>(kernels::dot(a.data(), b.data(), n)), std::bit_cast<uint32_t>(ref))
          << kernels::isa_name(isa) << " n=" << n;
    }
  }
}

// Many keys at once (attention scores): each result is dot()'s bits, for any
// count (whole groups of four and the rest) and length.
TEST(KernelDot, ManyKeysGiveEachDotsBits) {
  IsaGuard guard;
  for (size_t n : {1, 15, 16, 64, 100, 512}) {
    const std::vector<float> a = random_vector(n, 3 * n);
    std::vector<std::vector<float>> keys;
    std::vector<const float*> ptrs;
    for (size_t j = 0; j < 11; ++j) keys.push_back(random_vector(n, 3 * n + 1 + j));
    for (const auto& k : keys) ptrs.push_back(k.data());
    kernels::set_isa(Isa::Scalar);
    std::vector<float> ref;
    for (const float* k : ptrs) ref.push_back(kernels::dot(a.data(), k, n));
    for (Isa isa : supported_isas()) {
      kernels::set_isa(isa);
      for (size_t count : {0, 1, 4, 7, 11}) {
        std::vector<float> out(count + 1, -1.0f);
        kernels::dots(a.data(), ptrs.data(), count, n, out.data());
        for (size_t j = 0; j < count; ++j)
          EXPECT_EQ(std::bit_cast<uint32_t>(out[j]), std::bit_cast<uint32_t>(ref[j]))
              << kernels::isa_name(isa) << " n=" << n << " count=" << count << " j=" << j;
        EXPECT_EQ(out[count], -1.0f) << "wrote past count";
      }
    }
  }
}

// Many rows added at once (attention's weighted sum): the bits of one axpy
// after another, on every ISA, for lengths with and without a tail.
TEST(KernelAxpy, ManyRowsGiveSuccessiveAxpysBits) {
  IsaGuard guard;
  // Past each block of 64: one to four vectors, the last one full or not.
  for (size_t n : {1, 15, 16, 32, 40, 63, 64, 100, 127, 512}) {
    std::vector<std::vector<float>> rows;
    std::vector<const float*> ptrs;
    for (size_t j = 0; j < 11; ++j) rows.push_back(random_vector(n, 5 * n + j));
    for (const auto& r : rows) ptrs.push_back(r.data());
    const std::vector<float> w = random_vector(11, 7 * n), start = random_vector(n + 1, 9 * n);
    for (Isa isa : supported_isas()) {
      kernels::set_isa(isa);
      for (size_t count : {0, 1, 4, 11}) {
        std::vector<float> want = start, got = start;
        kernels::set_isa(Isa::Scalar);
        for (size_t j = 0; j < count; ++j) kernels::axpy(w[j], ptrs[j], want.data(), n);
        kernels::set_isa(isa);
        kernels::axpys(w.data(), ptrs.data(), count, got.data(), n);
        for (size_t i = 0; i <= n; ++i)  // element n is past the end: untouched
          EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << kernels::isa_name(isa) << " n=" << n << " count=" << count << " i=" << i;
      }
    }
  }
}

// Several queries against the same keys (a prompt's rows in attention):
// each result is dot()'s bits, for row counts in whole blocks and not, key
// counts in groups of four and not, and lengths with and without a tail.
TEST(KernelDot, ManyQueriesAgainstTheSameKeysGiveEachDotsBits) {
  IsaGuard guard;
  for (size_t n : {1, 15, 16, 64, 100, 512}) {
    std::vector<std::vector<float>> queries, keys;
    std::vector<const float*> qs, ks;
    for (size_t r = 0; r < 9; ++r) queries.push_back(random_vector(n, 11 * n + r));
    for (size_t j = 0; j < 11; ++j) keys.push_back(random_vector(n, 13 * n + j));
    for (const auto& q : queries) qs.push_back(q.data());
    for (const auto& k : keys) ks.push_back(k.data());
    for (Isa isa : supported_isas()) {
      for (size_t rows : {0, 1, 3, 4, 5, 8, 9}) {
        for (size_t count : {0, 1, 4, 7, 11}) {
          const size_t ldo = count + 2;
          std::vector<float> out(rows * ldo + 1, -1.0f);
          kernels::set_isa(isa);
          kernels::dots_rows(qs.data(), rows, ks.data(), count, n, out.data(), ldo);
          kernels::set_isa(Isa::Scalar);
          for (size_t r = 0; r < rows; ++r) {
            for (size_t j = 0; j < count; ++j)
              EXPECT_EQ(std::bit_cast<uint32_t>(out[r * ldo + j]), std::bit_cast<uint32_t>(kernels::dot(qs[r], ks[j], n)))
                  << kernels::isa_name(isa) << " n=" << n << " rows=" << rows << " count=" << count << " r=" << r
                  << " j=" << j;
            EXPECT_EQ(out[r * ldo + count], -1.0f) << "wrote between rows";
          }
          EXPECT_EQ(out[rows * ldo], -1.0f) << "wrote past the rows";
        }
      }
    }
  }
}

// Several rows of weights over the same values (a prompt's rows in
// attention's weighted sum): each output row has the bits of its own axpys.
TEST(KernelAxpy, ManyWeightRowsOverTheSameValuesGiveEachAxpysBits) {
  IsaGuard guard;
  for (size_t n : {1, 15, 16, 40, 63, 64, 100, 127, 512}) {
    std::vector<std::vector<float>> values;
    std::vector<const float*> xs;
    for (size_t j = 0; j < 11; ++j) values.push_back(random_vector(n, 17 * n + j));
    for (const auto& v : values) xs.push_back(v.data());
    std::vector<std::vector<float>> weights;
    std::vector<const float*> ws;
    for (size_t r = 0; r < 9; ++r) weights.push_back(random_vector(11, 19 * n + r));
    for (const auto& w : weights) ws.push_back(w.data());
    for (Isa isa : supported_isas()) {
      for (size_t rows : {0, 1, 3, 4, 5, 8, 9}) {
        for (size_t count : {0, 1, 4, 11}) {
          std::vector<std::vector<float>> want, got;
          std::vector<float*> ys;
          for (size_t r = 0; r < rows; ++r) {
            want.push_back(random_vector(n + 1, 23 * n + r));
            got.push_back(want.back());
          }
          for (auto& g : got) ys.push_back(g.data());
          kernels::set_isa(Isa::Scalar);
          for (size_t r = 0; r < rows; ++r) kernels::axpys(ws[r], xs.data(), count, want[r].data(), n);
          kernels::set_isa(isa);
          kernels::axpys_rows(ws.data(), rows, xs.data(), count, ys.data(), n);
          for (size_t r = 0; r < rows; ++r)
            for (size_t i = 0; i <= n; ++i)  // element n is past the end: untouched
              EXPECT_EQ(std::bit_cast<uint32_t>(got[r][i]), std::bit_cast<uint32_t>(want[r][i]))
                  << kernels::isa_name(isa) << " n=" << n << " rows=" << rows << " count=" << count << " r=" << r
                  << " i=" << i;
        }
      }
    }
  }
}

TEST(KernelDispatch, ReportsAndForcesIsas) {
  IsaGuard guard;
  EXPECT_TRUE(kernels::isa_supported(Isa::Scalar));
  for (Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    EXPECT_EQ(kernels::active_isa(), isa);
  }
  for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
    if (!kernels::isa_supported(isa)) {
      EXPECT_THROW(kernels::set_isa(isa), std::exception);
    }
  }
}

TEST(KernelDispatch, RejectsWhatNoKernelHandles) {
  std::vector<uint8_t> bytes(1024);
  kernels::WeightMatrix w;
  w.data = bytes.data();
  w.out = 1;
  w.in = 64;
  w.dtype = DType::Q8_1;  // a GGUF type for activations, never weights
  EXPECT_THROW(kernels::check_supported(w), std::exception);
  for (DType t : {DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    w.dtype = t;  // 64 is not a whole 256-value super-block
    EXPECT_THROW(kernels::check_supported(w), std::exception) << dtype_name(t);
  }
  w.dtype = DType::I8;  // int8 without scales
  EXPECT_THROW(kernels::check_supported(w), std::exception);
  for (DType t : {DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1}) {
    w.dtype = t;
    EXPECT_NO_THROW(kernels::check_supported(w)) << dtype_name(t);
  }
}

// ---- dequantization against independently built blocks ---------------------------

// Dequantizes one row with every ISA and checks each against `expect`.
void expect_row(const kernels::WeightMatrix& w, const std::vector<double>& expect) {
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    std::vector<float> row(static_cast<size_t>(w.in));
    kernels::dequantize_row(w, 0, row.data());
    for (size_t i = 0; i < row.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(row[i]), std::bit_cast<uint32_t>(static_cast<float>(expect[i])))
          << kernels::isa_name(isa) << " element " << i << ": " << row[i] << " vs " << expect[i];
  }
}

// OCP MX E2M1 code points.
const double kE2M1[16] = {0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6};

TEST(FormatValues, Q8_0) {
  // block_q8_0 {f16 d; int8 qs[32]}: value = qs · d.
  std::vector<uint8_t> b(2 * 34);
  std::vector<double> expect(64);
  const float d[2] = {0.5f, -0.0078125f};
  for (int blk = 0; blk < 2; ++blk) {
    put_u16(&b[34 * blk], to_f16(d[blk]));
    for (int j = 0; j < 32; ++j) {
      const int q = blk == 0 ? j * 8 - 128 : 127 - j * 5;
      b[34 * blk + 2 + j] = static_cast<uint8_t>(static_cast<int8_t>(q));
      expect[32 * blk + j] = q * static_cast<double>(d[blk]);
    }
  }
  kernels::WeightMatrix w;
  w.dtype = DType::Q8_0;
  w.out = 1;
  w.in = 64;
  w.data = b.data();
  expect_row(w, expect);
}

TEST(FormatValues, Mxfp4Gguf) {
  // block_mxfp4 {u8 e; u8 qs[16]}: element j < 16 is the low nibble of qs[j],
  // element j + 16 the high nibble; value = E2M1 × 2^(e - 127).
  const uint8_t exps[4] = {127, 0, 254, 130};
  std::vector<uint8_t> b(4 * 17);
  std::vector<double> expect(128);
  for (int blk = 0; blk < 4; ++blk) {
    b[17 * blk] = exps[blk];
    for (int j = 0; j < 16; ++j) {
      const int lo = (j + blk) & 15, hi = (15 - j + 3 * blk) & 15;
      b[17 * blk + 1 + j] = static_cast<uint8_t>(lo | (hi << 4));
      expect[32 * blk + j] = std::ldexp(kE2M1[lo], exps[blk] - 127);
      expect[32 * blk + j + 16] = std::ldexp(kE2M1[hi], exps[blk] - 127);
    }
  }
  for (double& v : expect)
    if (v == 0.0) v = 0.0;  // ggml's doubled integer table has no -0
  kernels::WeightMatrix w;
  w.dtype = DType::MXFP4;
  w.out = 1;
  w.in = 128;
  w.data = b.data();
  expect_row(w, expect);
}

TEST(FormatValues, Mxfp4HuggingFace) {
  // transformers convert_moe_packed_tensors: out[:, 0::2] = lut[blk & 0x0F],
  // out[:, 1::2] = lut[blk >> 4], then ldexp(·, scale - 127).
  const uint8_t exps[2] = {120, 1};
  std::vector<uint8_t> blocks(2 * 16), scales(exps, exps + 2);
  std::vector<double> expect(64);
  for (int g = 0; g < 2; ++g)
    for (int k = 0; k < 16; ++k) {
      const int lo = (3 * k + g) & 15, hi = (k + 7) & 15;
      blocks[16 * g + k] = static_cast<uint8_t>(lo | (hi << 4));
      expect[32 * g + 2 * k] = std::ldexp(kE2M1[lo], exps[g] - 127);
      expect[32 * g + 2 * k + 1] = std::ldexp(kE2M1[hi], exps[g] - 127);
    }
  for (double& v : expect)
    if (v == 0.0) v = 0.0;
  kernels::WeightMatrix w;
  w.dtype = DType::U8;
  w.packing = kernels::Packing::Mxfp4Split;
  w.out = 1;
  w.in = 64;
  w.data = blocks.data();
  w.scales = scales.data();
  w.scale_dtype = DType::F8_E8M0;
  w.scale_group = 32;
  expect_row(w, expect);
}

TEST(FormatValues, Int4CompressedTensors) {
  // pack_to_int32: value + 8 as unsigned nibbles, element 8k + j at bits
  // 4j..4j+3 of word k (little-endian words); W = value · scale.
  std::vector<int> values(64);
  for (int i = 0; i < 64; ++i) values[i] = (i * 5 + 3) % 16 - 8;
  std::vector<uint32_t> words(8, 0);
  for (int i = 0; i < 64; ++i) words[i / 8] |= static_cast<uint32_t>(values[i] + 8) << (4 * (i % 8));
  std::vector<uint8_t> data(32), scales(4);
  std::memcpy(data.data(), words.data(), 32);
  const float s[2] = {0.0234375f, -3.0f};
  put_u16(&scales[0], f32_to_bf16_round(s[0]));
  put_u16(&scales[2], f32_to_bf16_round(s[1]));
  std::vector<double> expect(64);
  for (int i = 0; i < 64; ++i) expect[i] = values[i] * static_cast<double>(s[i / 32]);
  kernels::WeightMatrix w;
  w.dtype = DType::I32;
  w.packing = kernels::Packing::Int4x8;
  w.out = 1;
  w.in = 64;
  w.data = data.data();
  w.scales = scales.data();
  w.scale_dtype = DType::BF16;
  w.scale_group = 32;
  expect_row(w, expect);
}

TEST(FormatValues, Int8PerRow) {
  std::vector<uint8_t> data(2 * 20);
  for (int i = 0; i < 40; ++i) data[i] = static_cast<uint8_t>(static_cast<int8_t>(i * 7 - 128));
  const float s[2] = {0.1f, 3.0f};  // 0.1 rounds each product: one f32 rounding
  std::vector<uint8_t> scales(8);
  std::memcpy(scales.data(), s, 8);
  kernels::WeightMatrix w;
  w.dtype = DType::I8;
  w.out = 2;
  w.in = 20;
  w.data = data.data();
  w.scales = scales.data();
  w.scale_dtype = DType::F32;
  w.scale_group = 20;
  std::vector<double> expect(20);
  for (int i = 0; i < 20; ++i) expect[i] = static_cast<float>(static_cast<int8_t>(data[20 + i]) * s[1]);
  expect_row(w.row_slice(1, 1), expect);
  for (int i = 0; i < 20; ++i) expect[i] = static_cast<float>(static_cast<float>(static_cast<int8_t>(data[i])) * s[0]);
  expect_row(w, expect);
}

// Q4_K: 8 sub-blocks of 32 with 6-bit scale ls[j] and min lm[j];
// value = d·ls[j]·q - dmin·lm[j]. Packed the way ggml's quantize_row_q4_K
// writes the block.
TEST(FormatValues, Q4K) {
  std::vector<uint8_t> b(144, 0);
  const float d = 0.0078125f * 1.5f, dmin = 0.001953125f;
  put_u16(&b[0], to_f16(d));
  put_u16(&b[2], to_f16(dmin));
  const uint8_t ls[8] = {1, 63, 17, 32, 40, 5, 62, 33}, lm[8] = {0, 12, 63, 1, 48, 31, 7, 60};
  uint8_t* scales = &b[4];
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      scales[j] = ls[j];
      scales[j + 4] = lm[j];
    } else {
      scales[j + 4] = static_cast<uint8_t>((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
      scales[j - 4] |= static_cast<uint8_t>((ls[j] >> 4) << 6);
      scales[j - 0] |= static_cast<uint8_t>((lm[j] >> 4) << 6);
    }
  }
  uint8_t L[256];
  for (int i = 0; i < 256; ++i) L[i] = static_cast<uint8_t>((i * 7 + i / 32) % 16);
  uint8_t* q = &b[16];
  for (int j = 0; j < 256; j += 64) {
    for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    q += 32;
  }
  std::vector<double> expect(256);
  for (int i = 0; i < 256; ++i)
    expect[i] = static_cast<double>(d) * ls[i / 32] * L[i] - static_cast<double>(dmin) * lm[i / 32];
  kernels::WeightMatrix w;
  w.dtype = DType::Q4_K;
  w.out = 1;
  w.in = 256;
  w.data = b.data();
  expect_row(w, expect);
}

// Q6_K: 6-bit q (stored +32), 16 signed 8-bit scales, one per 16 values;
// value = d·scale[i/16]·(q - 32). Packed the way quantize_row_q6_K writes it.
TEST(FormatValues, Q6K) {
  std::vector<uint8_t> b(210, 0);
  const float d = 0.00048828125f * 1.25f;
  uint8_t L[256];
  for (int i = 0; i < 256; ++i) L[i] = static_cast<uint8_t>((i * 13 + i / 64) % 64);
  int8_t sc[16];
  for (int j = 0; j < 16; ++j) sc[j] = static_cast<int8_t>(j * 17 - 128);
  uint8_t* ql = &b[0];
  uint8_t* qh = &b[128];
  for (int j = 0; j < 256; j += 128) {
    for (int l = 0; l < 32; ++l) {
      const uint8_t q1 = L[j + l + 0] & 0xF, q2 = L[j + l + 32] & 0xF, q3 = L[j + l + 64] & 0xF,
                    q4 = L[j + l + 96] & 0xF;
      ql[l + 0] = static_cast<uint8_t>(q1 | (q3 << 4));
      ql[l + 32] = static_cast<uint8_t>(q2 | (q4 << 4));
      qh[l] = static_cast<uint8_t>((L[j + l] >> 4) | ((L[j + l + 32] >> 4) << 2) | ((L[j + l + 64] >> 4) << 4) |
                                   ((L[j + l + 96] >> 4) << 6));
    }
    ql += 64;
    qh += 32;
  }
  std::memcpy(&b[192], sc, 16);
  put_u16(&b[208], to_f16(d));
  std::vector<double> expect(256);
  for (int i = 0; i < 256; ++i) expect[i] = static_cast<double>(d) * sc[i / 16] * (L[i] - 32);
  kernels::WeightMatrix w;
  w.dtype = DType::Q6_K;
  w.out = 1;
  w.in = 256;
  w.data = b.data();
  expect_row(w, expect);
}

TEST(FormatValues, Fp8E4M3EveryByteWithBlockScale) {
  // All 256 encodings (NaN included) in one row, scaled by 2^-3 and 3 in two
  // column blocks of 128.
  std::vector<uint8_t> data(256);
  for (int i = 0; i < 256; ++i) data[i] = static_cast<uint8_t>(i);
  const float s[2] = {0.125f, 3.0f};
  kernels::WeightMatrix w;
  w.dtype = DType::F8_E4M3;
  w.out = 1;
  w.in = 256;
  w.data = data.data();
  w.block_scale = s;
  w.block_out = 128;
  w.block_in = 128;
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    std::vector<float> row(256);
    kernels::dequantize_row(w, 0, row.data());
    for (int i = 0; i < 256; ++i) {
      // E4M3 (OCP): bias 7, subnormals man·2^-9, 0x7f/0xff NaN.
      const int e = (i >> 3) & 15, man = i & 7;
      double v = e == 0 ? man * std::ldexp(1.0, -9) : std::ldexp(1.0 + man / 8.0, e - 7);
      if (i & 0x80) v = -v;
      const float want = static_cast<float>(v * s[i / 128]);
      if ((i & 0x7f) == 0x7f)
        EXPECT_TRUE(std::isnan(row[i])) << kernels::isa_name(isa) << " " << i;
      else
        EXPECT_EQ(std::bit_cast<uint32_t>(row[i]), std::bit_cast<uint32_t>(want)) << kernels::isa_name(isa) << " " << i;
    }
  }
}

// ---- dequantization against gguf-py -----------------------------------------------
//
// tests/fixtures/quants/<TYPE>.blocks holds random blocks (random bytes,
// finite f16 scales of either sign, some d = ±0) and
// <TYPE>.f32 the values llama.cpp's gguf-py gives for them
// (gguf.quants.dequantize: an independent numpy implementation of ggml's
// dequantize_row_*), both made by tools/make_quant_fixtures.py. Every ISA
// must give exactly those bits.

std::vector<uint8_t> read_bytes(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) ADD_FAILURE() << "cannot open " << p;
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

struct QuantCase {
  DType dtype;
};
void PrintTo(const QuantCase& c, std::ostream* os) { *os << dtype_name(c.dtype); }

class QuantFixtures : public ::testing::TestWithParam<QuantCase> {};

TEST_P(QuantFixtures, DequantizeMatchesGgufPy) {
  const DType t = GetParam().dtype;
  const std::filesystem::path dir = std::filesystem::path(STRATA_FIXTURES_DIR) / "quants";
  const std::vector<uint8_t> blocks = read_bytes(dir / (std::string(dtype_name(t)) + ".blocks"));
  const std::vector<uint8_t> values = read_bytes(dir / (std::string(dtype_name(t)) + ".f32"));
  // 1024 values, dequantized as 4 rows of 256 (whole blocks of every type).
  kernels::WeightMatrix w;
  w.dtype = t;
  w.out = 4;
  w.in = 256;
  w.data = blocks.data();
  ASSERT_EQ(values.size(), 4u * 1024);
  ASSERT_EQ(blocks.size(), 4 * w.row_bytes());
  IsaGuard guard;
  for (Isa isa : supported_isas()) {
    kernels::set_isa(isa);
    std::vector<float> row(256);
    for (int64_t o = 0; o < w.out; ++o) {
      kernels::dequantize_row(w, o, row.data());
      for (size_t i = 0; i < row.size(); ++i) {
        uint32_t want;
        std::memcpy(&want, &values[4 * (static_cast<size_t>(o) * 256 + i)], 4);
        ASSERT_EQ(std::bit_cast<uint32_t>(row[i]), want)
            << kernels::isa_name(isa) << " row " << o << " element " << i << ": " << row[i] << " vs "
            << std::bit_cast<float>(want);
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(GgufPy, QuantFixtures,
                         ::testing::Values(QuantCase{DType::Q4_0}, QuantCase{DType::Q4_1}, QuantCase{DType::Q5_0},
                                           QuantCase{DType::Q5_1}, QuantCase{DType::Q8_0}, QuantCase{DType::Q2_K},
                                           QuantCase{DType::Q3_K}, QuantCase{DType::Q4_K}, QuantCase{DType::Q5_K},
                                           QuantCase{DType::Q6_K}),
                         [](const auto& info) { return std::string(dtype_name(info.param.dtype)); });

}  // namespace
}  // namespace strata
