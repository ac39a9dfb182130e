#include "formats/safetensors.h"

#include "formats/error_text.h"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <unordered_set>

#include "util/error.h"
#include "util/json_file.h"

// Tensor bytes are handed out raw; safetensors stores them little-endian.
static_assert(std::endian::native == std::endian::little, "safetensors reader assumes a little-endian host");

namespace strata {

namespace {

using json = nlohmann::json;
constexpr uint64_t kInt64Max = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());

[[noreturn]] void fail(const std::string& path, const std::string& what) { throw Error(path + ": " + what); }

[[noreturn]] void fail_tensor(const std::string& path, const std::string& name, const std::string& what) {
  fail(path, "tensor " + quote_name(name) + " " + what);
}

// Keeps echoed input short: a corrupt header can hold megabyte-sized values.
std::string clip(std::string s, size_t max = 120) {
  if (s.size() > max) s = s.substr(0, max) + "...";
  return s;
}

// Echoes a JSON value in an error message. dump() recurses, and a hostile
// header can nest arrays millions deep, so only flat values are echoed.
std::string brief(const json& v) {
  auto primitive = [](const json& e) { return e.is_primitive(); };
  if (v.is_primitive() || (v.size() <= 16 && std::all_of(v.begin(), v.end(), primitive))) return clip(v.dump());
  return std::string("a nested JSON ") + v.type_name();
}

// The 8-byte little-endian prefix; checked against the file before use.
uint64_t read_header_length(const MappedFile& f) {
  if (f.size() < 8)
    fail(f.path(), "file is " + std::to_string(f.size()) +
                       " bytes, too short for a safetensors header length (need 8)");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f.data()[i];
  // Check the absurd case first: a random or non-safetensors file usually
  // has a huge "length", and saying so is more helpful than "past end".
  if (n > SafetensorsFile::kMaxHeaderBytes)
    fail(f.path(), "header length " + std::to_string(n) + " is absurd (limit " +
                       std::to_string(SafetensorsFile::kMaxHeaderBytes) + " bytes); not a safetensors file?");
  if (n > f.size() - 8)
    fail(f.path(), "header length " + std::to_string(n) + " is larger than the file (" +
                       std::to_string(f.size() - 8) + " bytes after the length prefix)");
  return n;
}

// Parses the header JSON. nlohmann keeps the last of duplicate keys silently,
// so a callback watches top-level keys: a tensor listed twice is corruption.
json parse_header(const std::string& path, std::string_view text) {
  std::unordered_set<std::string> seen;
  std::string duplicate;
  auto watch_keys = [&](int depth, json::parse_event_t event, json& parsed) {
    if (event == json::parse_event_t::key && depth == 1 && duplicate.empty()) {
      const auto& key = parsed.get_ref<const std::string&>();
      if (!seen.insert(key).second) duplicate = key;
    }
    return true;
  };
  check_json_depth(text, path);
  json header;
  try {
    header = json::parse(text.begin(), text.end(), watch_keys);
  } catch (const json::exception& e) {
    fail(path, "header is not valid JSON: " + clip(e.what(), 300));
  }
  if (!header.is_object()) fail(path, std::string("header is not a JSON object (it is ") + header.type_name() + ")");
  if (!duplicate.empty()) fail(path, "header lists tensor " + quote_name(duplicate) + " twice");
  return header;
}

std::map<std::string, std::string> parse_metadata(const std::string& path, const json& meta) {
  if (!meta.is_object()) fail(path, "__metadata__ is not a JSON object");
  std::map<std::string, std::string> out;
  for (const auto& [key, value] : meta.items()) {
    if (!value.is_string()) fail(path, "__metadata__ value for " + quote_name(key) + " is not a string");
    out.emplace(key, value.get<std::string>());
  }
  return out;
}

// Reads a JSON integer that must be >= 0; `what` names it in errors.
uint64_t non_negative(const std::string& path, const std::string& name, const json& v, const std::string& what) {
  if (!v.is_number_integer()) fail_tensor(path, name, what + " must be integers, got " + brief(v));
  if (!v.is_number_unsigned()) fail_tensor(path, name, "has negative " + what + " " + brief(v));
  return v.get<uint64_t>();
}

// Shape, with the element count checked to fit int64 at every step, in the
// same order TensorView::numel() multiplies so that numel() cannot overflow.
std::vector<int64_t> parse_shape(const std::string& path, const std::string& name, const json& shape,
                                 uint64_t& numel) {
  if (!shape.is_array()) fail_tensor(path, name, "shape is not a JSON array");
  std::vector<int64_t> dims;
  numel = 1;
  for (const json& d : shape) {
    uint64_t v = non_negative(path, name, d, "shape dimensions");
    if (v > kInt64Max || __builtin_mul_overflow(numel, v, &numel) || numel > kInt64Max)
      fail_tensor(path, name, "shape " + brief(shape) + " element count overflows");
    dims.push_back(static_cast<int64_t>(v));
  }
  return dims;
}

struct ByteRange {
  uint64_t begin = 0, end = 0;
  size_t tensor = 0;  // index into the tensor list
};

// Validates one header entry and returns its view; `range` gets its offsets
// within the data section for the overlap check.
TensorView parse_tensor(const std::string& path, const std::string& name, const json& entry,
                        const uint8_t* data, uint64_t data_start, uint64_t data_size, ByteRange& range) {
  if (!entry.is_object()) fail_tensor(path, name, "entry is not a JSON object");
  for (const char* key : {"dtype", "shape", "data_offsets"})
    if (!entry.contains(key)) fail_tensor(path, name, std::string("is missing '") + key + "'");

  const json& dtype_json = entry["dtype"];
  if (!dtype_json.is_string()) fail_tensor(path, name, "dtype is not a string");
  const auto& dtype_str = dtype_json.get_ref<const std::string&>();
  auto dtype = dtype_from_safetensors(dtype_str);
  if (!dtype) fail_tensor(path, name, "has unknown dtype " + quote_name(dtype_str));

  TensorView t;
  t.name = name;
  t.dtype = *dtype;
  t.file = path;
  uint64_t numel = 0;
  t.shape = parse_shape(path, name, entry["shape"], numel);

  const json& offsets = entry["data_offsets"];
  if (!offsets.is_array() || offsets.size() != 2)
    fail_tensor(path, name, "data_offsets must be [begin,end], got " + brief(offsets));
  range.begin = non_negative(path, name, offsets[0], "data_offsets");
  range.end = non_negative(path, name, offsets[1], "data_offsets");
  if (range.begin > range.end)
    fail_tensor(path, name, "data_offsets " + brief(offsets) + " have begin > end");
  if (range.end > data_size)
    fail_tensor(path, name, "data " + range_str(range.begin, range.end) +
                                " past end of file (data section is " + std::to_string(data_size) + " bytes)");

  uint64_t expected = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(*dtype)), &expected))
    fail_tensor(path, name, "byte size of shape " + shape_str(t.shape) + " overflows");
  uint64_t actual = range.end - range.begin;
  if (actual != expected)
    fail_tensor(path, name, "has " + std::to_string(actual) + " bytes but " + dtype_str + " " +
                                shape_str(t.shape) + " needs " + std::to_string(expected));
  t.data = data + range.begin;  // in bounds: begin <= end <= data_size
  t.offset = data_start + range.begin;
  t.nbytes = static_cast<size_t>(actual);
  return t;
}

// Two tensors sharing bytes would alias silently; empty ranges hold no bytes.
void check_no_overlap(const std::string& path, std::vector<ByteRange> ranges, const std::vector<TensorView>& tensors) {
  std::erase_if(ranges, [](const ByteRange& r) { return r.begin == r.end; });
  std::sort(ranges.begin(), ranges.end(), [](const ByteRange& a, const ByteRange& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  const ByteRange* furthest = nullptr;  // the range reaching furthest so far
  for (const ByteRange& r : ranges) {
    if (furthest && r.begin < furthest->end)
      fail(path, "tensors " + quote_name(tensors[furthest->tensor].name) + " " +
                     range_str(furthest->begin, furthest->end) + " and " + quote_name(tensors[r.tensor].name) +
                     " " + range_str(r.begin, r.end) + " overlap");
    if (!furthest || r.end > furthest->end) furthest = &r;
  }
}

}  // namespace

std::string quote_name(std::string_view name) {
  constexpr size_t kMaxShown = 200;  // a megabyte-long name must not flood the terminal
  std::string out = "'";
  for (size_t i = 0; i < name.size() && i < kMaxShown; ++i) {
    auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  if (name.size() > kMaxShown) out += "...";
  return out + "'";
}

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path)
    : file_(std::make_unique<MappedFile>(path)) {
  const std::string& p = file_->path();
  uint64_t header_len = read_header_length(*file_);
  const auto* header_text = reinterpret_cast<const char*>(file_->data() + 8);
  json header = parse_header(p, std::string_view(header_text, header_len));

  const uint8_t* data = file_->data() + 8 + header_len;
  uint64_t data_size = file_->size() - 8 - header_len;  // read_header_length checked this
  std::vector<ByteRange> ranges;
  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      metadata_ = parse_metadata(p, entry);
      continue;
    }
    ranges.emplace_back().tensor = tensors_.size();
    tensors_.push_back(parse_tensor(p, name, entry, data, 8 + header_len, data_size, ranges.back()));
  }
  check_no_overlap(p, ranges, tensors_);

  // Sort only after the overlap check, whose ranges index the unsorted list.
  std::sort(tensors_.begin(), tensors_.end(), [](const TensorView& a, const TensorView& b) { return a.name < b.name; });
  for (size_t i = 0; i < tensors_.size(); ++i) index_.emplace(tensors_[i].name, i);
  // Parsed: the header's pages leave the resident set (formats/gguf.cpp says why).
  release_mapped_pages(file_->data(), 8 + header_len);
}

const TensorView* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

uint64_t safetensors_header_length(const uint8_t* first8, uint64_t file_size, const std::string& where) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = n << 8 | first8[i];
  if (file_size < 8 || n == 0 || n > SafetensorsFile::kMaxHeaderBytes || n > file_size - 8)
    throw Error(where + ": not a safetensors file (a header of " + std::to_string(n) + " bytes in a file of " +
                std::to_string(file_size) + ")");
  return n;
}

}  // namespace strata
