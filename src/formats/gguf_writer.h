#pragma once
// Writes GGUF version 3 files: metadata of every value type, then tensor
// infos, then tensor data, each tensor starting at a multiple of the
// alignment (the padding is zeros, and every tensor, the last included, is
// padded to a whole multiple of the alignment, as llama.cpp's writer does).
//
// The header is fixed once every tensor is declared, so the data can be
// streamed piece by piece afterwards; nothing but the header is held in
// memory:
//
//   GgufWriter w;
//   w.set_string("general.architecture", "qwen3moe");
//   w.add_tensor("token_embd.weight", DType::BF16, {vocab, hidden});
//   std::ofstream out(path, std::ios::binary);
//   w.write_header(out);
//   w.write_data(out, chunk, chunk_bytes);  // as often as needed, in tensor order
//   w.finish(out);                          // pads and checks every byte arrived
//
// Misuse (a duplicate key or tensor, a shape the type cannot store, more or
// fewer data bytes than declared) throws strata::Error.
#include <cstdint>
#include <filesystem>
#include <ostream>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "formats/dtype.h"
#include "formats/gguf.h"

namespace strata {

// An owning metadata value, for writing.
struct GgufMeta {
  GgufType type = GgufType::U8;
  GgufType elem_type = GgufType::U8;  // arrays
  uint64_t count = 0;                 // arrays
  // A scalar's little-endian bytes, a string's contents, or the packed
  // elements of an array of fixed-size scalars.
  std::string bytes;
  std::vector<std::string> strings;  // array of strings
  std::vector<GgufMeta> items;       // array of arrays

  static GgufMeta u8(uint8_t v) { return scalar(GgufType::U8, v); }
  static GgufMeta i8(int8_t v) { return scalar(GgufType::I8, v); }
  static GgufMeta u16(uint16_t v) { return scalar(GgufType::U16, v); }
  static GgufMeta i16(int16_t v) { return scalar(GgufType::I16, v); }
  static GgufMeta u32(uint32_t v) { return scalar(GgufType::U32, v); }
  static GgufMeta i32(int32_t v) { return scalar(GgufType::I32, v); }
  static GgufMeta u64(uint64_t v) { return scalar(GgufType::U64, v); }
  static GgufMeta i64(int64_t v) { return scalar(GgufType::I64, v); }
  static GgufMeta f32(float v) { return scalar(GgufType::F32, v); }
  static GgufMeta f64(double v) { return scalar(GgufType::F64, v); }
  static GgufMeta boolean(bool v) { return scalar(GgufType::BOOL, static_cast<uint8_t>(v ? 1 : 0)); }
  static GgufMeta string(std::string_view v);

  // Arrays of fixed-size scalars; the element type follows T (uint8_t: u8,
  // int32_t: i32, float: f32, bool: bool, ...).
  template <class T>
  static GgufMeta array(std::span<const T> values);
  template <class T>
  static GgufMeta array(const std::vector<T>& values) {
    return array(std::span<const T>(values.data(), values.size()));
  }
  static GgufMeta array(const std::vector<bool>& values);
  static GgufMeta string_array(std::vector<std::string> values);
  // An array whose elements are arrays (each item must be an ARRAY value).
  static GgufMeta array_of_arrays(std::vector<GgufMeta> items);
  // A value read from a GgufFile, copied so it can be written again.
  static GgufMeta copy_of(const GgufValue& v);

 private:
  template <class T>
  static GgufMeta scalar(GgufType t, T v) {
    GgufMeta m;
    m.type = t;
    m.bytes.assign(reinterpret_cast<const char*>(&v), sizeof v);
    return m;
  }
  template <class T>
  static constexpr GgufType type_of();
};

class GgufWriter {
 public:
  // A non-default alignment is recorded as "general.alignment" (u32).
  explicit GgufWriter(uint32_t alignment = 32);

  // Metadata, written in the order it is set. A key set twice throws.
  void set(const std::string& key, GgufMeta value);
  void set_string(const std::string& key, std::string_view v) { set(key, GgufMeta::string(v)); }
  void set_u32(const std::string& key, uint32_t v) { set(key, GgufMeta::u32(v)); }
  void set_i32(const std::string& key, int32_t v) { set(key, GgufMeta::i32(v)); }
  void set_u64(const std::string& key, uint64_t v) { set(key, GgufMeta::u64(v)); }
  void set_f32(const std::string& key, float v) { set(key, GgufMeta::f32(v)); }
  void set_f64(const std::string& key, double v) { set(key, GgufMeta::f64(v)); }
  void set_bool(const std::string& key, bool v) { set(key, GgufMeta::boolean(v)); }
  void set_strings(const std::string& key, std::vector<std::string> v) { set(key, GgufMeta::string_array(std::move(v))); }

  // Declares the next tensor. `shape` is row-major, outermost first, as
  // TensorView reports it (a [out, in] matrix is {out, in}); the file stores
  // it reversed (ne = [in, out]). Returns the tensor's size in bytes.
  uint64_t add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape);

  size_t tensor_count() const { return tensors_.size(); }
  // Offset of tensor i within the data section, and its size in bytes.
  uint64_t tensor_offset(size_t i) const { return tensors_.at(i).offset; }
  uint64_t tensor_bytes(size_t i) const { return tensors_.at(i).nbytes; }
  // Bytes before the data section (the padded header), and of the whole file.
  uint64_t header_size() const;
  uint64_t file_size() const { return header_size() + data_size_; }

  // Streaming: the header once, then every tensor's bytes in declaration
  // order (split into pieces any way), then finish().
  void write_header(std::ostream& out);
  void write_data(std::ostream& out, const void* data, size_t n);
  void finish(std::ostream& out);

  // The whole file at once; tensor_data[i] holds tensor i's bytes.
  void write_file(const std::filesystem::path& path, const std::vector<std::string_view>& tensor_data);
  std::string to_bytes(const std::vector<std::string_view>& tensor_data);

 private:
  struct Tensor {
    std::string name;
    uint32_t ggml_type = 0;
    std::vector<int64_t> ne;  // GGUF order
    uint64_t offset = 0;
    uint64_t nbytes = 0;
  };
  enum class State { Declaring, Data, Done };

  void pad(std::ostream& out, uint64_t n);
  void check(std::ostream& out) const;

  uint32_t alignment_;
  std::vector<std::pair<std::string, GgufMeta>> kv_;
  std::vector<Tensor> tensors_;
  uint64_t data_size_ = 0;  // padded
  State state_ = State::Declaring;
  size_t current_ = 0;       // tensor receiving data
  uint64_t written_ = 0;     // bytes of it written so far
};

// --- template definitions ------------------------------------------------

template <class T>
constexpr GgufType GgufMeta::type_of() {
  if constexpr (std::is_same_v<T, bool>) return GgufType::BOOL;
  else if constexpr (std::is_same_v<T, uint8_t>) return GgufType::U8;
  else if constexpr (std::is_same_v<T, int8_t>) return GgufType::I8;
  else if constexpr (std::is_same_v<T, uint16_t>) return GgufType::U16;
  else if constexpr (std::is_same_v<T, int16_t>) return GgufType::I16;
  else if constexpr (std::is_same_v<T, uint32_t>) return GgufType::U32;
  else if constexpr (std::is_same_v<T, int32_t>) return GgufType::I32;
  else if constexpr (std::is_same_v<T, uint64_t>) return GgufType::U64;
  else if constexpr (std::is_same_v<T, int64_t>) return GgufType::I64;
  else if constexpr (std::is_same_v<T, float>) return GgufType::F32;
  else if constexpr (std::is_same_v<T, double>) return GgufType::F64;
  else static_assert(sizeof(T) == 0, "no GGUF type for this element type");
}

template <class T>
GgufMeta GgufMeta::array(std::span<const T> values) {
  GgufMeta m;
  m.type = GgufType::ARRAY;
  m.elem_type = type_of<T>();
  m.count = values.size();
  if constexpr (std::is_same_v<T, bool>) {
    for (bool b : values) m.bytes += static_cast<char>(b ? 1 : 0);
  } else {
    m.bytes.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
  }
  return m;
}

}  // namespace strata
