#pragma once
// Test helper (header-only): GGUF bytes built field by field, for files the
// real writer (formats/gguf_writer.h) refuses to produce: bad magic, absurd
// counts, unknown types, misaligned or overlapping tensors, ... Reuses
// TempDir and raw_bytes from safetensors_writer.h.
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "safetensors_writer.h"

namespace strata::testfiles {

class GgufBytes {
 public:
  std::string bytes;

  template <class T>
  GgufBytes& put(T v) {
    bytes.append(reinterpret_cast<const char*>(&v), sizeof v);
    return *this;
  }
  GgufBytes& u32(uint32_t v) { return put(v); }
  GgufBytes& u64(uint64_t v) { return put(v); }
  GgufBytes& i64(int64_t v) { return put(v); }
  GgufBytes& raw(std::string_view s) {
    bytes += s;
    return *this;
  }
  // u64 length + bytes.
  GgufBytes& str(std::string_view s) { return u64(s.size()).raw(s); }

  GgufBytes& header(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    return raw("GGUF").u32(version).u64(tensors).u64(kvs);
  }
  // A key and its type tag; the caller appends the value.
  GgufBytes& key(std::string_view k, uint32_t type) { return str(k).u32(type); }
  GgufBytes& kv_u32(std::string_view k, uint32_t v) { return key(k, 4).u32(v); }
  GgufBytes& kv_string(std::string_view k, std::string_view v) { return key(k, 8).str(v); }

  GgufBytes& tensor(std::string_view name, const std::vector<int64_t>& ne, uint32_t ggml_type, uint64_t offset) {
    str(name).u32(static_cast<uint32_t>(ne.size()));
    for (int64_t n : ne) i64(n);
    return u32(ggml_type).u64(offset);
  }
  GgufBytes& pad(size_t align = 32) {
    bytes.append((align - bytes.size() % align) % align, '\0');
    return *this;
  }
  GgufBytes& zeros(size_t n) {
    bytes.append(n, '\0');
    return *this;
  }
};

// Offset of the first occurrence of `needle` in `hay` (for patching a field
// that follows a known name); npos if absent.
inline size_t find_bytes(std::string_view hay, std::string_view needle) { return hay.find(needle); }

template <class T>
void patch(std::string& bytes, size_t at, T v) {
  std::memcpy(bytes.data() + at, &v, sizeof v);
}

}  // namespace strata::testfiles
