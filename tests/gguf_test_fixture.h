#pragma once
// Shared by the GGUF tests (gguf_test.cpp: the file format; gguf_model_view_test.cpp:
// the HF-named view and the config a file implies): a temporary directory,
// error-message checks, and small file builders.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "formats/gguf.h"
#include "error_message.h"
#include "gguf_writer.h"
#include "util/error.h"

namespace strata::gguftest {


using testfiles::GgufBytes;
using testfiles::raw_bytes;

// ggml type ids used below (ggml.h).
constexpr uint32_t kF32 = 0, kQ4K = 12, kIQ2XXS = 16;

inline std::string f32s(size_t n, float first = 0.0f) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<float>(i);
  return raw_bytes(v);
}

class GgufTest : public ::testing::Test {
 protected:
  testfiles::TempDir dir_{"strata-gguf"};

  std::filesystem::path write(const std::string& bytes, const char* name = "x.gguf") { return dir_.write(name, bytes); }

  // The one-line message opening `bytes` gets, which names the file.
  std::string error_for(const std::string& bytes) {
    auto path = write(bytes, "bad.gguf");
    return testfiles::error_message([&] { GgufFile f(path); }, path.string() + ": ");
  }

  void expect_rejected(const std::string& bytes, const std::string& phrase) {
    testfiles::expect_phrase(error_for(bytes), phrase);
  }

  // One F32 tensor "t" of `ne`, at `offset`, after one string key.
  static std::string one_tensor(const std::vector<int64_t>& ne, uint32_t type = kF32, uint64_t offset = 0,
                                size_t data = 64) {
    GgufBytes b;
    b.header(1, 1).kv_string("general.architecture", "test").tensor("t", ne, type, offset).pad().zeros(data);
    return b.bytes;
  }
};

// --- round trip -------------------------------------------------------------


}  // namespace strata::gguftest
