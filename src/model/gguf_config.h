#pragma once
// Reading a GGUF file's metadata the way config.json spells it: shared by
// config_from_gguf (the common keys) and each architecture's own part
// (ArchSpec::gguf.read), which fills in a config.json object that
// ModelConfig::from_json then reads and validates (gguf_model.h has the key
// map).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "formats/gguf.h"
#include "formats/tensor.h"

namespace strata {

// The shortest decimal that rounds to f, as a double: the converter stored
// f32(x) for a decimal x from config.json, and this gives x back.
double decimal_of_f32(float f);

// Metadata access with the architecture prefix and the f32 decimal recovery.
class GgufKeys {
 public:
  GgufKeys(const GgufFile& f, std::string arch) : f_(f), arch_(std::move(arch)) {}

  const GgufFile& file() const { return f_; }
  std::string key(std::string_view suffix) const { return arch_ + "." + std::string(suffix); }

  std::optional<double> number(const std::string& k) const;
  double number(const std::string& k, double fallback) const { return number(k).value_or(fallback); }

  // An integer, or a per-layer array of integers that must all be equal
  // (llama.cpp's get_key_or_arr); nullopt if absent.
  std::optional<int64_t> integer(const std::string& k) const;
  int64_t integer(const std::string& k, int64_t fallback) const { return integer(k).value_or(fallback); }
  int64_t required(const std::string& k) const;

 private:
  const GgufFile& f_;
  std::string arch_;
};

// What an architecture's GGUF reader is handed: the keys, the tensors (to
// tell variants apart by what is stored) and the common values read already.
struct GgufConfigInput {
  const GgufKeys& m;
  const TensorSource& tensors;
  int64_t heads = 0, layers = 0, expert_ff = 0, experts = 0;
  std::optional<int64_t> gating;  // A.expert_gating_func

  const GgufFile& file() const { return m.file(); }
  bool has_tensor(const std::string& name) const { return tensors.find(name) != nullptr; }
  // "softmax", "sigmoid", "sqrtsoftplus"; fails on other values.
  std::string gating_name(int64_t g) const;
};

}  // namespace strata
