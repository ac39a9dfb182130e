// A safetensors file: the 8-byte header length, the JSON header (dtypes,
// shapes, data offsets, __metadata__) and the data section. Every tensor the
// reader accepts must lie inside the mapping: its first and last bytes are
// read.
#include "formats/safetensors.h"
#include "fuzz_support.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch_dir() / "model.safetensors";
  fuzz::write_file(path, fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const SafetensorsFile f(path);
    unsigned sum = 0;
    for (const TensorView& t : f.tensors()) {
      if (t.numel() < 0) __builtin_trap();
      if (t.nbytes) sum += t.data[0] + t.data[t.nbytes - 1];
      if (f.find(t.name) != &t) __builtin_trap();
    }
    (void)sum;
  });
  return 0;
}
