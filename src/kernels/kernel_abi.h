#pragma once
// The contract between the generic kernel front end (linear.cpp) and the
// per-ISA implementations (kernels_scalar.cpp, kernels_avx2.cpp,
// kernels_avx512.cpp).
//
// The ISA files are compiled with -mavx2 / -mavx512* (see src/CMakeLists.txt).
// Anything they instantiate that has vague linkage (inline functions, templates
// from the standard library) could be emitted with those instructions and then
// picked by the linker for the whole program, crashing CPUs without them. So
// this header holds only plain data and function-pointer declarations, and the
// ISA files include nothing but <immintrin.h>, <cstddef>, <cstdint>,
// <cstring> and this header, keeping all their code in anonymous namespaces.
#include <cstddef>
#include <cstdint>

namespace strata::kernels::detail {

// The weight encodings the kernels know, resolved from WeightMatrix.
enum class Fmt : uint8_t {
  F32,
  BF16,
  F16,
  F8_E4M3,      // optional f32 block scale grid (DeepSeek-V3 weight_scale_inv)
  I8_ROW,       // int8, one scale per row
  I4_GROUP,     // compressed-tensors pack-quantized int4, symmetric, groups of 32·k values
  MXFP4_SPLIT,  // gpt-oss HF: 16 bytes of E2M1 pairs per 32 (low nibble = even element) + E8M0 byte per 32
  Q8_0,         // GGUF blocks (ggml-common.h layouts)
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  MXFP4,
  // The interleaved layouts of Packing::Interleaved16 (linear.h): groups of
  // 16 rows stored column by column, one block scale vector per 32 columns.
  IL_Q8_0,
  IL_MXFP4,
  IL_Q4_K,
};

// Bytes of one 16-row group per block of each interleaved format (the same as
// the 16 rows' blocks in ggml's layout, so a matrix can be rewritten in place).
constexpr int64_t kIlRows = 16;
constexpr size_t kIlQ8_0Bytes = 16 * 34;   // per 32 columns: f16 d[16], int8 q[32][16]
constexpr size_t kIlMxfp4Bytes = 16 * 17;  // per 32 columns: u8 e[16], u8 nibble pairs[16][16]
constexpr size_t kIlQ4_KBytes = 16 * 144;  // per 256 columns: f16 d[16], dmin[16], u8 sc[12][16], pairs[8][16][16]

// Scale element types for I8_ROW / I4_GROUP.
enum class ScaleType : uint8_t { F32, BF16, F16 };

struct MatDesc {
  Fmt fmt = Fmt::F32;
  int64_t out = 0;
  int64_t in = 0;
  const uint8_t* data = nullptr;
  size_t row_bytes = 0;  // bytes between consecutive rows of `data` (interleaved: a 16-row group is 16·row_bytes)
  // Per-row scale vectors in their stored type: row o's scales start at
  // scales + o * scale_row_bytes (I8_ROW: 1 scale; I4_GROUP: in/group;
  // MXFP4_SPLIT: in/32).
  const uint8_t* scales = nullptr;
  size_t scale_row_bytes = 0;
  ScaleType scale_type = ScaleType::F32;
  int64_t group = 32;  // I4_GROUP: values per scale, a multiple of 32
  // F8_E4M3 block scales: row o uses block_scale[(row_offset + o) / block_out
  // * block_cols + i / block_in]; null = unscaled.
  const float* block_scale = nullptr;
  int64_t block_out = 0;
  int64_t block_in = 0;
  int64_t block_cols = 0;
  int64_t row_offset = 0;
  const float* bias = nullptr;
  // IL_Q4_K: Σ x over each 32-column block of each batch row ([n][in/32],
  // summed in order from 0), filled by linear() for the kernels.
  const float* block_sums = nullptr;
  // Room for one dequantized row (`in` values) for the calling thread alone,
  // where the table needs it (KernelTable::needs_row): the caller plans it.
  float* row = nullptr;
};

// One implementation of every kernel. All tables compute the same function
// bit for bit (see linear.h for the accumulation order).
struct KernelTable {
  const char* name;
  // For o in [o0, o1), r < n: y[r * ldy + o] = Σ_i W[o][i] · x[r * in + i] (+ bias[o]).
  void (*matmul)(const MatDesc& w, const float* x, size_t n, float* y, size_t ldy, int64_t o0, int64_t o1);
  // dst[i] = W[o][i] for i < in.
  void (*dequant_row)(const MatDesc& w, int64_t o, float* dst);
  float (*dot)(const float* a, const float* b, size_t n);
  // out[j] = dot(a, b[j], n) for j < count, each bit for bit as dot() gives it.
  void (*dots)(const float* a, const float* const* b, size_t count, size_t n, float* out);
  // y[i] = fma(a, x[i], y[i]).
  void (*axpy)(float a, const float* x, float* y, size_t n);
  // axpy(w[j], x[j], y, n) for j = 0, 1, ..., count - 1, bit for bit.
  void (*axpys)(const float* w, const float* const* x, size_t count, float* y, size_t n);
  // dots(a[r], b, count, n, out + r * ldo) for r < rows, bit for bit.
  void (*dots_rows)(const float* const* a, size_t rows, const float* const* b, size_t count, size_t n, float* out,
                    size_t ldo);
  // axpys(w[r], x, count, y[r], n) for r < rows, bit for bit.
  void (*axpys_rows)(const float* const* w, size_t rows, const float* const* x, size_t count, float* const* y,
                     size_t n);
  // x[i] = exp(x[i] - max) / Σ_j exp(x[j] - max), in place: each exp as
  // kExp* below gives it, their sum in dot()'s order (sixteen lanes, then
  // the fixed tree), times one reciprocal. Where the sum is NaN (a NaN
  // score, +inf, or every score -inf) every output is kSoftmaxNaN, the same
  // bits on every ISA.
  void (*softmax)(float* x, size_t n);
  // Whether matmul needs MatDesc::row (a row dequantized before its dots).
  bool needs_row;
};

// exp(d) for d <= 0, the same IEEE operations on every ISA (softmax's):
// n = round(d·log2 e) by adding and subtracting 1.5·2^23 (fused with the
// product), r = d − n·kExpLn2Hi − n·kExpLn2Lo (two fused steps),
// exp(r) ≈ 1 + r + r²·P(r) (Cephes' expf polynomial, Horner by fused
// multiply-adds, then fma(P, r·r, r) + 1), times 2^n from the exponent bits.
// Below kExpLow (where 2^n would not be a normal float) it is 0; NaN stays
// NaN. Within 1.011 ulp of exp for every float in [kExpLow, 0] (checked
// exhaustively against exp in double: 1.0104 at its worst; tests/kernels_test.cpp
// checks every 61st and the worst). kExpLow is a conservative bound (2^n is
// normal down to about -87.3). exp_shifted is the scalar one, which the SIMD
// ones match bit for bit.
constexpr float kExpLog2e = 1.44269504088896341f;
constexpr float kExpRound = 12582912.0f;  // 1.5 · 2^23
constexpr float kExpLn2Hi = 0.693359375f;
constexpr float kExpLn2Lo = -2.12194440e-4f;
constexpr float kExpLow = -87.0f;
constexpr float kSoftmaxNaN = __builtin_nanf("");
constexpr float kExpP[6] = {1.9875691500e-4f, 1.3981999507e-3f, 8.3334519073e-3f,
                            4.1665795894e-2f, 1.6666665459e-1f, 5.0000001201e-1f};

float exp_shifted(float d);

extern const KernelTable kScalarTable;
// Row o of an interleaved matrix as f32 (scalar; the SIMD tables use it too,
// nothing hot needs it).
void il_dequant_row(const MatDesc& w, int64_t o, float* dst);

// Null when the build has no such implementation.
const KernelTable* avx2_table();
const KernelTable* avx512_table();

}  // namespace strata::kernels::detail
