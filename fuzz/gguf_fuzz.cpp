// A GGUF file, opened as a model would be: the reader (header, metadata,
// tensor infos, offsets), the config it gives (open_checkpoint: metadata →
// config.json fields → ModelConfig, and the GGUF → HF tensor view), and its
// tokenizer (tokenizer.ggml.*), which then encodes and decodes a little.
#include "formats/gguf.h"
#include "fuzz_support.h"
#include "model/checkpoint.h"
#include "tokenizer/tokenizer.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const auto path = fuzz::scratch_dir() / "model.gguf";
  fuzz::write_file(path, fuzz::as_text(data, size));
  fuzz::expect_clean([&] {
    const GgufFile f(path);
    unsigned sum = 0;
    for (const std::string& name : f.names()) {
      const TensorView& t = f.get(name);
      sum += t.data[0] + t.data[t.nbytes - 1];  // GGUF tensors are never empty
    }
    (void)sum;
    fuzz::expect_clean([&] {
      if (!f.has("tokenizer.ggml.model")) return;
      const auto tok = Tokenizer::from_gguf(f);
      const auto ids = tok->encode("Hello, world! 123 <|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd");
      (void)tok->decode(ids);
    });
  });
  fuzz::expect_clean([&] {
    const Checkpoint ck = open_checkpoint(path);
    for (const std::string& name : ck.source->names()) (void)ck.source->get(name);
  });
  return 0;
}
