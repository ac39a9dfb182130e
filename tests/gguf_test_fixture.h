#pragma once
// Shared by the GGUF tests (gguf_test.cpp: the file format; gguf_model_view_test.cpp:
// the HF-named view and the config a file implies): a temporary directory,
// error-message checks, and small file builders.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "formats/gguf.h"
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

  // The message of the strata::Error that opening `bytes` throws, checked to
  // be one line starting with the file path; "" (and a failure) if none.
  std::string error_for(const std::string& bytes) {
    auto path = write(bytes, "bad.gguf");
    try {
      GgufFile f(path);
    } catch (const Error& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind(path.string() + ": ", 0), 0u) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
      return msg;
    }
    ADD_FAILURE() << "no error for a corrupt file";
    return "";
  }

  void expect_rejected(const std::string& bytes, const std::string& phrase) {
    std::string msg = error_for(bytes);
    EXPECT_NE(msg.find(phrase), std::string::npos) << "message: " << msg << "\nexpected phrase: " << phrase;
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
