#include "formats/gguf.h"

#include "formats/error_text.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>

#include "formats/safetensors.h"  // quote_name
#include "util/error.h"

// Values and tensor bytes are handed out raw; GGUF stores them little-endian.
static_assert(std::endian::native == std::endian::little, "GGUF reader assumes a little-endian host");

namespace strata {

namespace {

constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

// ggml.h enum ggml_type (checked against llama.cpp's ggml/include/ggml.h).
// Ids 4, 5, 31-33 and 36-38 were removed from ggml; they stay unnamed here.
struct GgmlType {
  uint32_t id;
  const char* name;
  std::optional<DType> dtype;  // nullopt: a ggml type strata does not read
};
constexpr std::array<GgmlType, 35> kGgmlTypes{{
    {0, "F32", DType::F32},      {1, "F16", DType::F16},        {2, "Q4_0", DType::Q4_0},
    {3, "Q4_1", DType::Q4_1},    {6, "Q5_0", DType::Q5_0},      {7, "Q5_1", DType::Q5_1},
    {8, "Q8_0", DType::Q8_0},    {9, "Q8_1", DType::Q8_1},      {10, "Q2_K", DType::Q2_K},
    {11, "Q3_K", DType::Q3_K},   {12, "Q4_K", DType::Q4_K},     {13, "Q5_K", DType::Q5_K},
    {14, "Q6_K", DType::Q6_K},   {15, "Q8_K", DType::Q8_K},     {16, "IQ2_XXS", std::nullopt},
    {17, "IQ2_XS", std::nullopt}, {18, "IQ3_XXS", std::nullopt}, {19, "IQ1_S", std::nullopt},
    {20, "IQ4_NL", std::nullopt}, {21, "IQ3_S", std::nullopt},  {22, "IQ2_S", std::nullopt},
    {23, "IQ4_XS", std::nullopt}, {24, "I8", DType::I8},        {25, "I16", DType::I16},
    {26, "I32", DType::I32},     {27, "I64", DType::I64},       {28, "F64", DType::F64},
    {29, "IQ1_M", std::nullopt}, {30, "BF16", DType::BF16},     {34, "TQ1_0", std::nullopt},
    {35, "TQ2_0", std::nullopt}, {39, "MXFP4", DType::MXFP4},   {40, "NVFP4", std::nullopt},
    {41, "Q1_0", std::nullopt},  {42, "Q2_0", std::nullopt},
}};

const GgmlType* ggml_info(uint32_t id) {
  for (const auto& t : kGgmlTypes)
    if (t.id == id) return &t;
  return nullptr;
}

uint64_t sat_add(uint64_t a, uint64_t b) {
  uint64_t r;
  return __builtin_add_overflow(a, b, &r) ? std::numeric_limits<uint64_t>::max() : r;
}

bool integer_type(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::U16: case GgufType::I16:
    case GgufType::U32: case GgufType::I32: case GgufType::U64: case GgufType::I64: return true;
    default: return false;
  }
}

bool valid_type(uint32_t t) { return t <= static_cast<uint32_t>(GgufType::F64); }

// "a string", "an f32", "an array of u32" — for "is X, expected Y" messages.
std::string describe_value(const GgufValue& v) {
  auto with_article = [](const char* name) {
    return std::string(std::strchr("aeiof", name[0]) ? "an " : "a ") + name;
  };
  if (v.type == GgufType::ARRAY) return std::string("an array of ") + gguf_type_name(v.elem_type);
  return with_article(gguf_type_name(v.type));
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// Sequential reads over the mapped bytes, every one bounds-checked. `context`
// names what is being read ("metadata 'general.name'", "tensor info #3") in
// the truncation message.
class Cursor {
 public:
  Cursor(const GgufFile& f, const uint8_t* data, uint64_t size) : f_(f), data_(data), size_(size) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }
  std::string context = "the header";

  const uint8_t* take(uint64_t n) {
    if (n > remaining())
      f_.fail("truncated: " + context + " needs " + std::to_string(n) + " bytes at offset " + std::to_string(pos_) +
              " but the file is " + std::to_string(size_) + " bytes");
    const uint8_t* p = data_ + pos_;
    pos_ += n;
    return p;
  }

  template <class T>
  T read() {
    return load<T>(take(sizeof(T)));
  }

  std::string_view string() {
    uint64_t start = pos_;
    uint64_t n = read<uint64_t>();
    if (n > remaining())
      f_.fail(context + ": string length " + std::to_string(n) + " at offset " + std::to_string(start) +
              " runs past the end of the file (" + std::to_string(remaining()) + " bytes left)");
    return {reinterpret_cast<const char*>(take(n)), static_cast<size_t>(n)};
  }

 private:
  const GgufFile& f_;
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
};

// Reads the rest of a value whose type tag has been read. `nested` counts
// nested arrays across the whole file.
GgufValue read_value(const GgufFile& f, Cursor& c, GgufType type, int depth, uint64_t& nested) {
  GgufValue v;
  v.type = type;
  switch (type) {
    case GgufType::U8: v.u = c.read<uint8_t>(); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::U16: v.u = c.read<uint16_t>(); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::U32: v.u = c.read<uint32_t>(); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::U64: v.u = c.read<uint64_t>(); v.i = static_cast<int64_t>(v.u); break;
    case GgufType::I8: v.i = c.read<int8_t>(); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::I16: v.i = c.read<int16_t>(); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::I32: v.i = c.read<int32_t>(); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::I64: v.i = c.read<int64_t>(); v.u = static_cast<uint64_t>(v.i); break;
    case GgufType::F32: v.f = c.read<float>(); break;
    case GgufType::F64: v.f = c.read<double>(); break;
    case GgufType::BOOL: {
      uint8_t b = c.read<uint8_t>();
      if (b > 1) f.fail(c.context + " has bool value " + std::to_string(b) + " (must be 0 or 1)");
      v.u = b;
      v.i = b;
      break;
    }
    case GgufType::STRING: v.str = c.string(); break;
    case GgufType::ARRAY: {
      if (depth >= GgufFile::kMaxArrayDepth)
        f.fail(c.context + " has arrays nested deeper than " + std::to_string(GgufFile::kMaxArrayDepth));
      uint32_t et = c.read<uint32_t>();
      if (!valid_type(et)) f.fail(c.context + " is an array of unknown value type " + std::to_string(et));
      v.elem_type = static_cast<GgufType>(et);
      uint64_t start = c.pos();
      v.count = c.read<uint64_t>();
      // The least each element can take; checked before anything is sized by count.
      uint64_t min_bytes = v.elem_type == GgufType::STRING  ? 8
                           : v.elem_type == GgufType::ARRAY ? 12
                                                            : gguf_type_size(v.elem_type);
      if (v.count > c.remaining() / min_bytes)
        f.fail(c.context + ": array of " + std::to_string(v.count) + " " + gguf_type_name(v.elem_type) +
               " values at offset " + std::to_string(start) + " runs past the end of the file (" +
               std::to_string(c.remaining()) + " bytes left)");
      if (v.elem_type == GgufType::STRING) {
        v.strings.reserve(v.count);
        for (uint64_t k = 0; k < v.count; ++k) v.strings.push_back(c.string());
      } else if (v.elem_type == GgufType::ARRAY) {
        nested += v.count;
        if (nested > GgufFile::kMaxNestedArrays)
          f.fail(c.context + " holds more than " + std::to_string(GgufFile::kMaxNestedArrays) + " nested arrays");
        v.items.reserve(v.count);
        for (uint64_t k = 0; k < v.count; ++k) v.items.push_back(read_value(f, c, GgufType::ARRAY, depth + 1, nested));
      } else {
        v.raw = c.take(v.count * min_bytes);
        if (v.elem_type == GgufType::BOOL)
          for (uint64_t k = 0; k < v.count; ++k)
            if (v.raw[k] > 1)
              f.fail(c.context + " element " + std::to_string(k) + " has bool value " + std::to_string(v.raw[k]) +
                     " (must be 0 or 1)");
      }
      break;
    }
  }
  return v;
}

struct ByteRange {
  uint64_t begin = 0, end = 0;
  size_t tensor = 0;
};

}  // namespace

const char* gguf_type_name(GgufType t) {
  switch (t) {
    case GgufType::U8: return "u8";
    case GgufType::I8: return "i8";
    case GgufType::U16: return "u16";
    case GgufType::I16: return "i16";
    case GgufType::U32: return "u32";
    case GgufType::I32: return "i32";
    case GgufType::F32: return "f32";
    case GgufType::BOOL: return "bool";
    case GgufType::STRING: return "string";
    case GgufType::ARRAY: return "array";
    case GgufType::U64: return "u64";
    case GgufType::I64: return "i64";
    case GgufType::F64: return "f64";
  }
  return "?";
}

size_t gguf_type_size(GgufType t) {
  switch (t) {
    case GgufType::U8: case GgufType::I8: case GgufType::BOOL: return 1;
    case GgufType::U16: case GgufType::I16: return 2;
    case GgufType::U32: case GgufType::I32: case GgufType::F32: return 4;
    case GgufType::U64: case GgufType::I64: case GgufType::F64: return 8;
    case GgufType::STRING: case GgufType::ARRAY: return 0;
  }
  return 0;
}

std::optional<DType> dtype_from_ggml(uint32_t ggml_type) {
  const GgmlType* t = ggml_info(ggml_type);
  return t ? t->dtype : std::nullopt;
}

std::optional<uint32_t> ggml_type_of(DType d) {
  for (const auto& t : kGgmlTypes)
    if (t.dtype == d) return t.id;
  return std::nullopt;
}

const char* ggml_type_name(uint32_t ggml_type) {
  const GgmlType* t = ggml_info(ggml_type);
  return t ? t->name : nullptr;
}

bool GgufValue::is_integer() const { return integer_type(type); }

uint64_t GgufValue::element_uint(uint64_t k) const { return static_cast<uint64_t>(element_int(k)); }

int64_t GgufValue::element_int(uint64_t k) const {
  const uint8_t* p = raw + k * gguf_type_size(elem_type);
  switch (elem_type) {
    case GgufType::U8: case GgufType::BOOL: return *p;
    case GgufType::I8: return static_cast<int8_t>(*p);
    case GgufType::U16: return load<uint16_t>(p);
    case GgufType::I16: return load<int16_t>(p);
    case GgufType::U32: return load<uint32_t>(p);
    case GgufType::I32: return load<int32_t>(p);
    case GgufType::U64: return static_cast<int64_t>(load<uint64_t>(p));
    case GgufType::I64: return load<int64_t>(p);
    case GgufType::F32: return static_cast<int64_t>(load<float>(p));
    case GgufType::F64: return static_cast<int64_t>(load<double>(p));
    default: return 0;
  }
}

double GgufValue::element_float(uint64_t k) const {
  const uint8_t* p = raw + k * gguf_type_size(elem_type);
  switch (elem_type) {
    case GgufType::F32: return load<float>(p);
    case GgufType::F64: return load<double>(p);
    case GgufType::U64: return static_cast<double>(load<uint64_t>(p));
    default: return static_cast<double>(element_int(k));
  }
}

void GgufFile::fail(const std::string& what) const { throw Error(path() + ": " + what); }

GgufFile::GgufFile(const std::filesystem::path& path) : file_(std::make_unique<MappedFile>(path)) {
  const uint64_t size = file_->size();
  Cursor c(*this, file_->data(), size);

  // Magic first: a file that is not GGUF at all deserves that message.
  if (size < 4) fail("file is " + std::to_string(size) + " bytes, too short for a GGUF header");
  if (std::memcmp(file_->data(), "GGUF", 4) != 0) {
    std::string shown = quote_name(std::string_view(reinterpret_cast<const char*>(file_->data()), 4));
    fail("not a GGUF file (starts with " + shown + ", expected 'GGUF')");
  }
  c.take(4);
  c.context = "the header";
  version_ = c.read<uint32_t>();
  if (version_ != 2 && version_ != 3) {
    std::string what = "unsupported GGUF version " + std::to_string(version_) + " (supported: 2, 3)";
    if (version_ != 0 && (version_ & 0xffffu) == 0) what += "; a big-endian file?";
    fail(what);
  }
  const uint64_t tensor_count = c.read<uint64_t>();
  const uint64_t kv_count = c.read<uint64_t>();
  // Each metadata entry takes at least 13 bytes (key length, type, a 1-byte
  // value) and each tensor info at least 24 (name length, n_dims, type,
  // offset), so counts beyond that are corrupt; checked before any reserve().
  constexpr uint64_t kMinKv = 13, kMinTensor = 24;
  if (tensor_count > c.remaining() / kMinTensor)
    fail("tensor count " + std::to_string(tensor_count) + " is absurd for a file of " + std::to_string(size) +
         " bytes");
  if (kv_count > (c.remaining() - tensor_count * kMinTensor) / kMinKv)
    fail("metadata count " + std::to_string(kv_count) + " is absurd for a file of " + std::to_string(size) + " bytes");

  kv_.reserve(kv_count);
  uint64_t nested = 0;
  for (uint64_t k = 0; k < kv_count; ++k) {
    c.context = "metadata key #" + std::to_string(k);
    std::string_view key = c.string();
    if (key.empty()) fail("metadata key #" + std::to_string(k) + " is empty");
    c.context = "metadata " + quote_name(key);
    if (kv_index_.count(key)) fail("metadata key " + quote_name(key) + " appears twice");
    uint32_t type = c.read<uint32_t>();
    if (!valid_type(type)) fail("metadata " + quote_name(key) + " has unknown value type " + std::to_string(type));
    GgufValue v = read_value(*this, c, static_cast<GgufType>(type), 0, nested);
    kv_index_.emplace(std::string(key), kv_.size());
    kv_.emplace_back(std::string(key), std::move(v));
  }

  if (const GgufValue* a = find_value("general.alignment")) {
    if (a->type != GgufType::U32) fail("metadata 'general.alignment' is " + describe_value(*a) + ", expected a u32");
    if (a->u == 0 || (a->u & (a->u - 1)) != 0)
      fail("metadata 'general.alignment' is " + std::to_string(a->u) + ", not a power of two");
    alignment_ = a->u;
  }

  infos_.reserve(tensor_count);
  for (uint64_t k = 0; k < tensor_count; ++k) {
    c.context = "tensor info #" + std::to_string(k);
    std::string_view name_view = c.string();
    if (name_view.empty()) fail("tensor info #" + std::to_string(k) + " has an empty name");
    GgufTensorInfo t;
    t.name = std::string(name_view);
    const std::string q = quote_name(t.name);
    c.context = "tensor " + q;
    if (tensor_index_.count(t.name)) fail("tensor " + q + " is listed twice");

    uint32_t n_dims = c.read<uint32_t>();
    if (n_dims == 0 || n_dims > 4) fail("tensor " + q + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    uint64_t numel = 1;
    for (uint32_t d = 0; d < n_dims; ++d) {
      int64_t n = c.read<int64_t>();
      t.ne.push_back(n);
      if (n <= 0) fail("tensor " + q + " dimension " + std::to_string(d) + " is " + std::to_string(n) + " (must be positive)");
    }
    for (int64_t n : t.ne)
      if (__builtin_mul_overflow(numel, static_cast<uint64_t>(n), &numel) || numel > kInt64Max)
        fail("tensor " + q + " shape " + shape_str(t.ne) + " element count overflows");

    t.ggml_type = c.read<uint32_t>();
    const char* tname = ggml_type_name(t.ggml_type);
    auto dtype = dtype_from_ggml(t.ggml_type);
    if (!tname) fail("tensor " + q + " has unknown ggml type " + std::to_string(t.ggml_type));
    if (!dtype)
      fail("tensor " + q + " has ggml type " + std::to_string(t.ggml_type) + " (" + tname +
           "), which strata does not support");
    t.dtype = *dtype;
    auto row = dtype_row_bytes(t.dtype, static_cast<uint64_t>(t.ne[0]));
    if (!row)
      fail("tensor " + q + " of type " + tname + " has rows of " + std::to_string(t.ne[0]) +
           " elements, not a multiple of the block size " + std::to_string(dtype_block_elems(t.dtype)));
    uint64_t rows = numel / static_cast<uint64_t>(t.ne[0]);
    if (__builtin_mul_overflow(rows, static_cast<uint64_t>(*row), &t.nbytes))
      fail("tensor " + q + " byte size of shape " + shape_str(t.ne) + " overflows");
    t.offset = c.read<uint64_t>();

    tensor_index_.emplace(t.name, infos_.size());
    infos_.push_back(std::move(t));
  }

  // The data section starts at the next multiple of the alignment.
  const uint64_t header_end = c.pos();
  data_offset_ = header_end + (alignment_ - header_end % alignment_) % alignment_;
  const uint64_t data_size = data_offset_ <= size ? size - data_offset_ : 0;
  if (!infos_.empty() && data_offset_ > size)
    fail("truncated: the data section starts at offset " + std::to_string(data_offset_) + " but the file is " +
         std::to_string(size) + " bytes");

  std::vector<ByteRange> ranges;
  ranges.reserve(infos_.size());
  tensors_.reserve(infos_.size());
  for (size_t k = 0; k < infos_.size(); ++k) {
    const GgufTensorInfo& t = infos_[k];
    const std::string q = quote_name(t.name);
    if (t.offset % alignment_ != 0)
      fail("tensor " + q + " offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
           std::to_string(alignment_));
    if (t.offset > data_size || t.nbytes > data_size - t.offset)
      fail("tensor " + q + " data " + range_str(t.offset, sat_add(t.offset, t.nbytes)) +
           " runs past the end of the file (data section is " + std::to_string(data_size) + " bytes)");
    ranges.push_back({t.offset, t.offset + t.nbytes, k});

    TensorView v;
    v.name = t.name;
    v.dtype = t.dtype;
    v.shape.assign(t.ne.rbegin(), t.ne.rend());
    v.data = file_->data() + data_offset_ + t.offset;
    v.nbytes = static_cast<size_t>(t.nbytes);
    v.file = file_->path();
    v.offset = data_offset_ + t.offset;
    tensors_.push_back(std::move(v));
  }

  // Two tensors sharing bytes would alias silently. Every range is non-empty
  // (dimensions are positive), so once sorted by start, any overlap shows up
  // between neighbours.
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t k = 1; k < ranges.size(); ++k) {
    const ByteRange& a = ranges[k - 1];
    const ByteRange& b = ranges[k];
    if (b.begin < a.end)
      fail("tensors " + quote_name(infos_[a.tensor].name) + " " + range_str(a.begin, a.end) + " and " +
           quote_name(infos_[b.tensor].name) + " " + range_str(b.begin, b.end) + " overlap");
  }
  // The header is read: its pages (a tokenizer's vocabulary, megabytes) need
  // not stay in the resident set, which the budget does not count them in.
  // A later look at a metadata value faults its page back in.
  release_mapped_pages(file_->data(), std::min<uint64_t>(data_offset_, size));
}

const GgufValue* GgufFile::find_value(std::string_view key) const {
  auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kv_[it->second].second;
}

std::string GgufFile::architecture() const {
  auto a = find_string("general.architecture");
  return a ? std::string(*a) : std::string();
}

namespace {

[[noreturn]] void wrong_type(const GgufFile& f, std::string_view key, const GgufValue& v, const char* expected) {
  f.fail("metadata " + quote_name(key) + " is " + describe_value(v) + ", expected " + expected);
}

const GgufValue& require(const GgufFile& f, std::string_view key) {
  const GgufValue* v = f.find_value(key);
  if (!v) f.fail("metadata " + quote_name(key) + " is missing");
  return *v;
}

int64_t as_int(const GgufFile& f, std::string_view key, const GgufValue& v) {
  if (!v.is_integer()) wrong_type(f, key, v, "an integer");
  if (v.type == GgufType::U64 && v.u > kInt64Max)
    f.fail("metadata " + quote_name(key) + " is " + std::to_string(v.u) + ", too large");
  return v.i;
}

uint32_t as_u32(const GgufFile& f, std::string_view key, const GgufValue& v) {
  if (!v.is_integer()) wrong_type(f, key, v, "an integer");
  bool negative = v.i < 0 && v.type != GgufType::U64;
  if (negative || v.u > std::numeric_limits<uint32_t>::max())
    f.fail("metadata " + quote_name(key) + " is " + (negative ? std::to_string(v.i) : std::to_string(v.u)) +
           ", expected an integer in [0, 4294967295]");
  return static_cast<uint32_t>(v.u);
}

double as_float(const GgufFile& f, std::string_view key, const GgufValue& v) {
  if (v.is_float()) return v.f;
  if (v.type == GgufType::U64) return static_cast<double>(v.u);
  if (v.is_integer()) return static_cast<double>(v.i);
  wrong_type(f, key, v, "a number");
}

bool as_bool(const GgufFile& f, std::string_view key, const GgufValue& v) {
  if (v.type != GgufType::BOOL) wrong_type(f, key, v, "a bool");
  return v.u != 0;
}

std::string_view as_string(const GgufFile& f, std::string_view key, const GgufValue& v) {
  if (v.type != GgufType::STRING) wrong_type(f, key, v, "a string");
  return v.str;
}

}  // namespace

std::string_view GgufFile::get_string(std::string_view key) const { return as_string(*this, key, require(*this, key)); }
int64_t GgufFile::get_int(std::string_view key) const { return as_int(*this, key, require(*this, key)); }
uint32_t GgufFile::get_u32(std::string_view key) const { return as_u32(*this, key, require(*this, key)); }
double GgufFile::get_float(std::string_view key) const { return as_float(*this, key, require(*this, key)); }
bool GgufFile::get_bool(std::string_view key) const { return as_bool(*this, key, require(*this, key)); }

std::optional<std::string_view> GgufFile::find_string(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (!v) return std::nullopt;
  return as_string(*this, key, *v);
}
std::optional<int64_t> GgufFile::find_int(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (!v) return std::nullopt;
  return as_int(*this, key, *v);
}
std::optional<uint32_t> GgufFile::find_u32(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (!v) return std::nullopt;
  return as_u32(*this, key, *v);
}
std::optional<double> GgufFile::find_float(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (!v) return std::nullopt;
  return as_float(*this, key, *v);
}
std::optional<bool> GgufFile::find_bool(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (!v) return std::nullopt;
  return as_bool(*this, key, *v);
}
std::optional<uint64_t> GgufFile::find_array_length(std::string_view key) const {
  const GgufValue* v = find_value(key);
  if (!v) return std::nullopt;
  if (v->type != GgufType::ARRAY) wrong_type(*this, key, *v, "an array");
  return v->count;
}

uint64_t GgufFile::get_array_length(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufType::ARRAY) wrong_type(*this, key, v, "an array");
  return v.count;
}

std::vector<std::string_view> GgufFile::get_string_array(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufType::ARRAY || v.elem_type != GgufType::STRING) wrong_type(*this, key, v, "an array of string");
  return v.strings;
}

std::vector<int64_t> GgufFile::get_int_array(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  if (v.type != GgufType::ARRAY || !integer_type(v.elem_type)) wrong_type(*this, key, v, "an array of integers");
  std::vector<int64_t> out;
  out.reserve(v.count);
  for (uint64_t k = 0; k < v.count; ++k) {
    if (v.elem_type == GgufType::U64 && v.element_uint(k) > kInt64Max)
      fail("metadata " + quote_name(key) + " element " + std::to_string(k) + " is too large");
    out.push_back(v.element_int(k));
  }
  return out;
}

std::vector<double> GgufFile::get_float_array(std::string_view key) const {
  const GgufValue& v = require(*this, key);
  const bool numeric = integer_type(v.elem_type) || v.elem_type == GgufType::F32 || v.elem_type == GgufType::F64;
  if (v.type != GgufType::ARRAY || !numeric)
    wrong_type(*this, key, v, "an array of numbers");
  std::vector<double> out;
  out.reserve(v.count);
  for (uint64_t k = 0; k < v.count; ++k) out.push_back(v.element_float(k));
  return out;
}

const GgufTensorInfo* GgufFile::find_info(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &infos_[it->second];
}

const TensorView* GgufFile::find(const std::string& name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

std::vector<std::string> GgufFile::names() const {
  std::vector<std::string> out;
  out.reserve(infos_.size());
  for (const auto& t : infos_) out.push_back(t.name);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace strata
