#include "kernels/interleave.h"

#include <cstring>
#include <vector>

#include "kernels/kernel_abi.h"
#include "util/error.h"

namespace strata::kernels {

namespace {

constexpr int64_t kRows = detail::kIlRows;

// GGUF MXFP4 / Q4_K nibble of element k of a 32-value run whose bytes hold
// elements j (low nibble) and j + 16 (high nibble).
inline uint8_t split_nibble(const uint8_t* qs, int k) { return k < 16 ? qs[k] & 0xF : qs[k - 16] >> 4; }

// One group of 16 rows (`src`, row r at src + r · row_bytes) to `dst`.
void interleave_group(DType t, const uint8_t* src, size_t row_bytes, int64_t in, uint8_t* dst) {
  const uint8_t* rows[kRows];
  for (int64_t r = 0; r < kRows; ++r) rows[r] = src + static_cast<size_t>(r) * row_bytes;
  switch (t) {
    case DType::Q8_0:  // block_q8_0 {f16 d; int8 qs[32]}
      for (int64_t b = 0; b < in / 32; ++b, dst += detail::kIlQ8_0Bytes) {
        const size_t off = static_cast<size_t>(b) * 34;
        for (int64_t r = 0; r < kRows; ++r) std::memcpy(dst + 2 * r, rows[r] + off, 2);
        for (int c = 0; c < 32; ++c)
          for (int64_t r = 0; r < kRows; ++r) dst[32 + 16 * c + r] = rows[r][off + 2 + c];
      }
      break;
    case DType::MXFP4:  // block_mxfp4 {u8 e; u8 qs[16]}
      for (int64_t b = 0; b < in / 32; ++b, dst += detail::kIlMxfp4Bytes) {
        const size_t off = static_cast<size_t>(b) * 17;
        for (int64_t r = 0; r < kRows; ++r) dst[r] = rows[r][off];
        for (int p = 0; p < 16; ++p)
          for (int64_t r = 0; r < kRows; ++r) {
            const uint8_t* qs = rows[r] + off + 1;
            dst[16 + 16 * p + r] = static_cast<uint8_t>(split_nibble(qs, 2 * p) | split_nibble(qs, 2 * p + 1) << 4);
          }
      }
      break;
    case DType::Q4_K:  // block_q4_K {f16 d, dmin; u8 scales[12]; u8 qs[128]}
      for (int64_t sb = 0; sb < in / 256; ++sb, dst += detail::kIlQ4_KBytes) {
        const size_t off = static_cast<size_t>(sb) * 144;
        for (int64_t r = 0; r < kRows; ++r) {
          std::memcpy(dst + 2 * r, rows[r] + off, 2);
          std::memcpy(dst + 32 + 2 * r, rows[r] + off + 2, 2);
          for (int k = 0; k < 12; ++k) dst[64 + 16 * k + r] = rows[r][off + 4 + k];
        }
        // Sub-block j's 32 values sit in qs[32·(j/2) ..] (low nibbles for
        // even j, high for odd), as in ggml's dequantize_row_q4_K.
        for (int j = 0; j < 8; ++j)
          for (int p = 0; p < 16; ++p)
            for (int64_t r = 0; r < kRows; ++r) {
              const uint8_t* qs = rows[r] + off + 16 + 32 * (j / 2);
              const int shift = 4 * (j % 2);
              const uint8_t lo = (qs[2 * p] >> shift) & 0xF, hi = (qs[2 * p + 1] >> shift) & 0xF;
              dst[256 + 256 * j + 16 * p + r] = static_cast<uint8_t>(lo | hi << 4);
            }
      }
      break;
    default: break;
  }
}

WeightMatrix interleaved_view(const WeightMatrix& w, const uint8_t* data) {
  WeightMatrix v = w;
  v.packing = Packing::Interleaved16;
  v.data = data;
  return v;
}

}  // namespace

bool interleavable(const WeightMatrix& w) {
  if (w.packing != Packing::Plain || !w.data || w.out <= 0 || w.out % kRows != 0 || w.block_scale) return false;
  switch (w.dtype) {
    case DType::Q8_0:
    case DType::MXFP4: return w.in % 32 == 0;
    case DType::Q4_K: return w.in % 256 == 0;
    default: return false;
  }
}

WeightMatrix interleave(const WeightMatrix& w, uint8_t* dst) {
  if (!interleavable(w)) throw Error("internal: interleave() of a matrix without an interleaved layout");
  const size_t group = static_cast<size_t>(kRows) * w.row_bytes();
  for (int64_t g = 0; g < w.out / kRows; ++g)
    interleave_group(w.dtype, w.data + static_cast<size_t>(g) * group, w.row_bytes(), w.in, dst + static_cast<size_t>(g) * group);
  return interleaved_view(w, dst);
}

WeightMatrix interleave_in_place(const WeightMatrix& w) {
  if (!interleavable(w)) throw Error("internal: interleave_in_place() of a matrix without an interleaved layout");
  const size_t group = static_cast<size_t>(kRows) * w.row_bytes();
  thread_local std::vector<uint8_t> scratch;
  scratch.resize(group);
  uint8_t* data = const_cast<uint8_t*>(w.data);
  for (int64_t g = 0; g < w.out / kRows; ++g) {
    uint8_t* p = data + static_cast<size_t>(g) * group;
    std::memcpy(scratch.data(), p, group);
    interleave_group(w.dtype, scratch.data(), w.row_bytes(), w.in, p);
  }
  return interleaved_view(w, data);
}

}  // namespace strata::kernels
