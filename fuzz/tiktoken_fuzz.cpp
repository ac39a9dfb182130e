// A tiktoken tokenizer directory as Kimi ships it: tiktoken.model
// ("<base64> <rank>" lines) and optionally (after kPartMarker)
// tokenizer_config.json naming the special tokens. Loaded, then a fixed text
// is encoded and decoded.
#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = fuzz::scratch_dir() / "tiktoken";
  fs::create_directories(dir);
  const auto parts = fuzz::split_parts(fuzz::as_text(data, size), 2);
  fuzz::write_file(dir / "tiktoken.model", parts[0]);
  if (parts.size() > 1)
    fuzz::write_file(dir / "tokenizer_config.json", parts[1]);
  else
    fs::remove(dir / "tokenizer_config.json");
  fuzz::expect_clean([&] {
    const auto tok = Tokenizer::from_dir(dir);
    fuzz::expect_clean([&] { (void)tok->decode(tok->encode_prompt("Hello, world! 123 <|im_end|> \xe4\xbd\xa0")); });
  });
  return 0;
}
