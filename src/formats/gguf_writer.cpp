#include "formats/gguf_writer.h"

#include <bit>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <unordered_set>

#include "formats/safetensors.h"  // quote_name
#include "util/error.h"

static_assert(std::endian::native == std::endian::little, "GGUF writer assumes a little-endian host");

namespace strata {

namespace {

[[noreturn]] void misuse(const std::string& what) { throw Error("GGUF writer: " + what); }

void put_bytes(std::string& out, const void* p, size_t n) { out.append(static_cast<const char*>(p), n); }

template <class T>
void put(std::string& out, T v) {
  put_bytes(out, &v, sizeof v);
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out += s;
}

// The value after its type tag.
void put_value(std::string& out, const GgufMeta& m) {
  if (m.type != GgufType::ARRAY) {
    if (m.type == GgufType::STRING)
      put_string(out, m.bytes);
    else
      out += m.bytes;
    return;
  }
  put<uint32_t>(out, static_cast<uint32_t>(m.elem_type));
  put<uint64_t>(out, m.count);
  if (m.elem_type == GgufType::STRING) {
    for (const std::string& s : m.strings) put_string(out, s);
  } else if (m.elem_type == GgufType::ARRAY) {
    for (const GgufMeta& item : m.items) put_value(out, item);
  } else {
    out += m.bytes;
  }
}

// Catches hand-built values whose parts disagree, before they reach a file.
void check_meta(const std::string& key, const GgufMeta& m) {
  auto bad = [&](const std::string& what) { misuse("metadata " + quote_name(key) + ": " + what); };
  if (m.type != GgufType::ARRAY) {
    size_t size = gguf_type_size(m.type);
    if (m.type != GgufType::STRING && m.bytes.size() != size) bad("scalar has the wrong number of bytes");
    return;
  }
  switch (m.elem_type) {
    case GgufType::STRING:
      if (m.strings.size() != m.count) bad("string array count disagrees with its elements");
      break;
    case GgufType::ARRAY:
      if (m.items.size() != m.count) bad("nested array count disagrees with its elements");
      for (const GgufMeta& item : m.items) {
        if (item.type != GgufType::ARRAY) bad("an element of an array of arrays is not an array");
        check_meta(key, item);
      }
      break;
    default:
      if (m.bytes.size() != m.count * gguf_type_size(m.elem_type)) bad("packed array size disagrees with its count");
  }
}

}  // namespace

GgufMeta GgufMeta::string(std::string_view v) {
  GgufMeta m;
  m.type = GgufType::STRING;
  m.bytes = std::string(v);
  return m;
}

GgufMeta GgufMeta::array(const std::vector<bool>& values) {
  GgufMeta m;
  m.type = GgufType::ARRAY;
  m.elem_type = GgufType::BOOL;
  m.count = values.size();
  for (bool b : values) m.bytes += static_cast<char>(b ? 1 : 0);
  return m;
}

GgufMeta GgufMeta::string_array(std::vector<std::string> values) {
  GgufMeta m;
  m.type = GgufType::ARRAY;
  m.elem_type = GgufType::STRING;
  m.count = values.size();
  m.strings = std::move(values);
  return m;
}

GgufMeta GgufMeta::array_of_arrays(std::vector<GgufMeta> items) {
  GgufMeta m;
  m.type = GgufType::ARRAY;
  m.elem_type = GgufType::ARRAY;
  m.count = items.size();
  m.items = std::move(items);
  return m;
}

GgufMeta GgufMeta::copy_of(const GgufValue& v) {
  GgufMeta m;
  m.type = v.type;
  switch (v.type) {
    case GgufType::STRING: m.bytes.assign(v.str); return m;
    case GgufType::F32: {
      const float f = static_cast<float>(v.f);  // stored f32, widened exactly: narrowing is exact
      m.bytes.assign(reinterpret_cast<const char*>(&f), sizeof f);
      return m;
    }
    case GgufType::F64: m.bytes.assign(reinterpret_cast<const char*>(&v.f), sizeof v.f); return m;
    case GgufType::ARRAY:
      m.elem_type = v.elem_type;
      m.count = v.count;
      if (v.elem_type == GgufType::STRING) {
        for (auto sv : v.strings) m.strings.emplace_back(sv);
      } else if (v.elem_type == GgufType::ARRAY) {
        for (const auto& item : v.items) m.items.push_back(copy_of(item));
      } else {
        m.bytes.assign(reinterpret_cast<const char*>(v.raw), v.count * gguf_type_size(v.elem_type));
      }
      return m;
    default:  // integers and bool: the low bytes of the value, little-endian
      m.bytes.assign(reinterpret_cast<const char*>(&v.u), gguf_type_size(v.type));
      return m;
  }
}

GgufWriter::GgufWriter(uint32_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    misuse("alignment " + std::to_string(alignment) + " is not a power of two");
  if (alignment != 32) kv_.emplace_back("general.alignment", GgufMeta::u32(alignment));
}

void GgufWriter::set(const std::string& key, GgufMeta value) {
  if (state_ != State::Declaring) misuse("metadata " + quote_name(key) + " set after the header was written");
  if (key.empty()) misuse("empty metadata key");
  for (const auto& [k, v] : kv_)
    if (k == key) misuse("metadata " + quote_name(key) + " set twice");
  check_meta(key, value);
  kv_.emplace_back(key, std::move(value));
}

uint64_t GgufWriter::add_tensor(const std::string& name, DType type, const std::vector<int64_t>& shape) {
  const std::string q = quote_name(name);
  if (state_ != State::Declaring) misuse("tensor " + q + " declared after the header was written");
  if (name.empty()) misuse("empty tensor name");
  for (const Tensor& t : tensors_)
    if (t.name == name) misuse("tensor " + q + " declared twice");
  auto ggml = ggml_type_of(type);
  if (!ggml) misuse("tensor " + q + ": GGUF cannot store type " + dtype_name(type));
  if (shape.empty() || shape.size() > 4) misuse("tensor " + q + " must have 1 to 4 dimensions");
  Tensor t;
  t.name = name;
  t.ggml_type = *ggml;
  t.ne.assign(shape.rbegin(), shape.rend());
  uint64_t rows = 1;
  for (size_t d = 0; d < t.ne.size(); ++d) {
    if (t.ne[d] <= 0) misuse("tensor " + q + " has a dimension that is not positive");
    if (d > 0 && __builtin_mul_overflow(rows, static_cast<uint64_t>(t.ne[d]), &rows))
      misuse("tensor " + q + " is too large");
  }
  auto row = dtype_row_bytes(type, static_cast<uint64_t>(t.ne[0]));
  if (!row)
    misuse("tensor " + q + ": rows of " + std::to_string(t.ne[0]) + " are not whole " + dtype_name(type) + " blocks");
  uint64_t padded = 0, end = 0;
  if (__builtin_mul_overflow(rows, static_cast<uint64_t>(*row), &t.nbytes) ||
      __builtin_add_overflow(t.nbytes, (alignment_ - t.nbytes % alignment_) % alignment_, &padded) ||
      __builtin_add_overflow(data_size_, padded, &end))
    misuse("tensor " + q + " is too large");
  t.offset = data_size_;
  data_size_ = end;
  tensors_.push_back(std::move(t));
  return tensors_.back().nbytes;
}

uint64_t GgufWriter::header_size() const {
  uint64_t n = 4 + 4 + 8 + 8;
  std::string buf;
  for (const auto& [key, value] : kv_) {
    buf.clear();
    put_value(buf, value);
    n += 8 + key.size() + 4 + buf.size();
  }
  for (const Tensor& t : tensors_) n += 8 + t.name.size() + 4 + 8 * t.ne.size() + 4 + 8;
  return n + (alignment_ - n % alignment_) % alignment_;
}

void GgufWriter::check(std::ostream& out) const {
  if (!out) throw Error("GGUF writer: write failed");
}

void GgufWriter::pad(std::ostream& out, uint64_t n) {
  static const char zeros[64] = {};
  while (n > 0) {
    uint64_t k = std::min<uint64_t>(n, sizeof zeros);
    out.write(zeros, static_cast<std::streamsize>(k));
    n -= k;
  }
}

void GgufWriter::write_header(std::ostream& out) {
  if (state_ != State::Declaring) misuse("header written twice");
  std::string h;
  h += "GGUF";
  put<uint32_t>(h, 3);
  put<uint64_t>(h, tensors_.size());
  put<uint64_t>(h, kv_.size());
  for (const auto& [key, value] : kv_) {
    put_string(h, key);
    put<uint32_t>(h, static_cast<uint32_t>(value.type));
    put_value(h, value);
  }
  for (const Tensor& t : tensors_) {
    put_string(h, t.name);
    put<uint32_t>(h, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put<int64_t>(h, n);
    put<uint32_t>(h, t.ggml_type);
    put<uint64_t>(h, t.offset);
  }
  out.write(h.data(), static_cast<std::streamsize>(h.size()));
  pad(out, (alignment_ - h.size() % alignment_) % alignment_);
  check(out);
  state_ = State::Data;
  current_ = 0;
  written_ = 0;
}

void GgufWriter::write_data(std::ostream& out, const void* data, size_t n) {
  if (state_ != State::Data) misuse(state_ == State::Declaring ? "tensor data written before the header" : "tensor data written after finish()");
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    if (current_ >= tensors_.size()) misuse("more tensor data than the declared tensors hold");
    const Tensor& t = tensors_[current_];
    uint64_t k = std::min<uint64_t>(n, t.nbytes - written_);
    out.write(p, static_cast<std::streamsize>(k));
    p += k;
    n -= static_cast<size_t>(k);
    written_ += k;
    if (written_ == t.nbytes) {
      pad(out, (alignment_ - t.nbytes % alignment_) % alignment_);
      ++current_;
      written_ = 0;
    }
  }
  check(out);
}

void GgufWriter::finish(std::ostream& out) {
  if (state_ != State::Data) misuse(state_ == State::Declaring ? "finish() before the header" : "finish() called twice");
  if (current_ < tensors_.size())
    misuse("tensor " + quote_name(tensors_[current_].name) + " got " + std::to_string(written_) + " of its " +
           std::to_string(tensors_[current_].nbytes) + " bytes");
  out.flush();
  check(out);
  state_ = State::Done;
}

std::string GgufWriter::to_bytes(const std::vector<std::string_view>& tensor_data) {
  if (tensor_data.size() != tensors_.size())
    misuse(std::to_string(tensor_data.size()) + " data buffers for " + std::to_string(tensors_.size()) + " tensors");
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensor_data[i].size() != tensors_[i].nbytes)
      misuse("tensor " + quote_name(tensors_[i].name) + " needs " + std::to_string(tensors_[i].nbytes) +
             " bytes, got " + std::to_string(tensor_data[i].size()));
  std::ostringstream out;
  write_header(out);
  for (std::string_view d : tensor_data) write_data(out, d.data(), d.size());
  finish(out);
  return std::move(out).str();
}

void GgufWriter::write_file(const std::filesystem::path& path, const std::vector<std::string_view>& tensor_data) {
  if (tensor_data.size() != tensors_.size())
    misuse(std::to_string(tensor_data.size()) + " data buffers for " + std::to_string(tensors_.size()) + " tensors");
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (tensor_data[i].size() != tensors_[i].nbytes)
      misuse("tensor " + quote_name(tensors_[i].name) + " needs " + std::to_string(tensors_[i].nbytes) +
             " bytes, got " + std::to_string(tensor_data[i].size()));
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error(path.string() + ": cannot open for writing");
  try {
    write_header(out);
    for (std::string_view d : tensor_data) write_data(out, d.data(), d.size());
    finish(out);
  } catch (const Error& e) {
    throw Error(path.string() + ": " + e.what());
  }
}

}  // namespace strata
