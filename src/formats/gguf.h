#pragma once
// Reader for GGUF files (llama.cpp's single-file format), versions 2 and 3:
//
//   "GGUF" u32 version  u64 tensor_count  u64 kv_count
//   kv_count × { string key, u32 value_type, value }
//   tensor_count × { string name, u32 n_dims, i64 ne[n_dims], u32 ggml_type, u64 offset }
//   padding to general.alignment (default 32), then the data section.
//
// Strings are a u64 byte length and UTF-8 bytes (no terminator); arrays are a
// u32 element type, a u64 count and the elements. Everything is little-endian.
//
// The file is memory-mapped and tensors are views into the mapping, so the
// GgufFile must outlive every TensorView and metadata string it hands out.
// Everything is validated up front (lengths against the file size, types,
// shapes, alignment, bounds, overlaps, duplicates); a bad file is a
// strata::Error "<path>: <problem>", never a crash or an allocation sized by
// an unchecked count in the file.
//
// Shapes: GGUF lists dimensions innermost first (ne[0] is the contiguous row
// length). TensorView::shape is in row-major PyTorch/Hugging Face order, i.e.
// ne reversed: a [out, in] matrix stored with ne = [in, out] has shape
// {out, in}. nbytes = rows × dtype_row_bytes(type, ne[0]).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "formats/dtype.h"
#include "formats/tensor.h"
#include "util/mapped_file.h"

namespace strata {

// Metadata value types, numbered as the GGUF spec numbers them.
enum class GgufType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};

// "u8", "i32", "f32", "bool", "string", "array", ...
const char* gguf_type_name(GgufType t);
// Bytes of one value of a fixed-size type; 0 for STRING and ARRAY.
size_t gguf_type_size(GgufType t);

// ggml tensor type ids (ggml.h enum ggml_type) that strata reads, and back.
// nullopt for ids strata does not support (IQ*, TQ*, NVFP4, ...) or unknown.
std::optional<DType> dtype_from_ggml(uint32_t ggml_type);
// nullopt for types GGUF cannot store (F8_*, U8, BOOL).
std::optional<uint32_t> ggml_type_of(DType t);
// The ggml name of a type id ("Q4_K", "IQ2_XXS", ...); nullptr if unknown.
const char* ggml_type_name(uint32_t ggml_type);

// One metadata value. Strings point into the mapped file.
struct GgufValue {
  GgufType type = GgufType::U8;
  // Scalars: integers in both `u` and `i` (the value converted to each; a
  // bool is 0 or 1), floats in `f` (f32 widened exactly), strings in `str`.
  uint64_t u = 0;
  int64_t i = 0;
  double f = 0.0;
  std::string_view str;
  // Arrays: element type and count. Arrays of fixed-size scalars stay packed
  // in the file (`raw`: count × gguf_type_size(elem_type) little-endian
  // bytes, read through element_*()); arrays of strings are in `strings`,
  // nested arrays in `items`.
  GgufType elem_type = GgufType::U8;
  uint64_t count = 0;
  const uint8_t* raw = nullptr;
  std::vector<std::string_view> strings;
  std::vector<GgufValue> items;

  bool is_integer() const;  // u8..i64 (not bool)
  bool is_float() const { return type == GgufType::F32 || type == GgufType::F64; }
  // Element k of a packed scalar array (k < count; not checked).
  int64_t element_int(uint64_t k) const;      // integer or bool elements; u64 above INT64_MAX wraps
  uint64_t element_uint(uint64_t k) const;    // integer or bool elements
  double element_float(uint64_t k) const;     // any numeric element
};

struct GgufTensorInfo {
  std::string name;
  uint32_t ggml_type = 0;
  DType dtype = DType::F32;
  std::vector<int64_t> ne;  // GGUF order: ne[0] is the innermost dimension
  uint64_t offset = 0;      // from the start of the data section
  uint64_t nbytes = 0;
};

class GgufFile : public TensorSource {
 public:
  // Arrays nested deeper than this, or holding more nested arrays than this
  // in total, are rejected (the spec allows nesting; real files never nest).
  static constexpr int kMaxArrayDepth = 8;
  static constexpr uint64_t kMaxNestedArrays = 1u << 20;

  explicit GgufFile(const std::filesystem::path& path);
  GgufFile(GgufFile&&) noexcept = default;
  GgufFile& operator=(GgufFile&&) noexcept = default;

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  // File offset of the data section (aligned). Equal to the end of the
  // header when the file holds no tensors.
  uint64_t data_offset() const { return data_offset_; }

  // --- metadata -----------------------------------------------------------
  // In file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  // nullptr if absent.
  const GgufValue* find_value(std::string_view key) const;
  bool has(std::string_view key) const { return find_value(key) != nullptr; }
  // "general.architecture" ("" if absent).
  std::string architecture() const;

  // Typed lookups. The get_* forms throw if the key is missing; the find_*
  // forms return nullopt if it is missing. Both throw a strata::Error on a
  // wrong type, e.g. "<file>: metadata 'qwen3moe.block_count' is a string,
  // expected an integer". Integers accept any integer type (range-checked for
  // the result); floats accept f32, f64 and integers.
  std::string_view get_string(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  uint32_t get_u32(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  std::vector<std::string_view> get_string_array(std::string_view key) const;
  std::vector<int64_t> get_int_array(std::string_view key) const;
  std::vector<double> get_float_array(std::string_view key) const;
  uint64_t get_array_length(std::string_view key) const;  // any array

  std::optional<std::string_view> find_string(std::string_view key) const;
  std::optional<int64_t> find_int(std::string_view key) const;
  std::optional<uint32_t> find_u32(std::string_view key) const;
  std::optional<double> find_float(std::string_view key) const;
  std::optional<bool> find_bool(std::string_view key) const;
  std::optional<uint64_t> find_array_length(std::string_view key) const;

  // --- tensors ------------------------------------------------------------
  // In file order.
  const std::vector<GgufTensorInfo>& tensor_infos() const { return infos_; }
  const std::vector<TensorView>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_info(const std::string& name) const;

  // TensorSource: GGUF names ("blk.0.attn_q.weight"), shapes in HF order.
  const TensorView* find(const std::string& name) const override;
  std::vector<std::string> names() const override;  // sorted
  std::string describe() const override { return path(); }

  // A one-line error prefixed with the file path.
  [[noreturn]] void fail(const std::string& what) const;

 private:
  std::unique_ptr<MappedFile> file_;  // owns every byte the views point into
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> infos_;
  std::vector<TensorView> tensors_;
  std::unordered_map<std::string, size_t> tensor_index_;
};

}  // namespace strata
