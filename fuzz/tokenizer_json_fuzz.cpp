// A tokenizer directory: tokenizer.json, and optionally (after kPartMarker)
// tokenizer_config.json and generation_config.json. Loaded as
// Tokenizer::from_dir does, then a fixed text and a piece of the input are
// encoded and decoded, and the special ids looked up.
#include "fuzz_support.h"
#include "tokenizer/tokenizer.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  namespace fs = std::filesystem;
  const fs::path dir = fuzz::scratch_dir() / "tokenizer_json";
  fs::create_directories(dir);
  const auto parts = fuzz::split_parts(fuzz::as_text(data, size), 3);
  const char* names[] = {"tokenizer.json", "tokenizer_config.json", "generation_config.json"};
  for (std::size_t i = 0; i < 3; ++i) {
    if (i < parts.size())
      fuzz::write_file(dir / names[i], parts[i]);
    else
      fs::remove(dir / names[i]);
  }
  fuzz::expect_clean([&] {
    const auto tok = Tokenizer::from_dir(dir);
    for (std::string_view text : {std::string_view("Hello, world! 123 <|im_start|>user\n\xe4\xbd\xa0\xe5\xa5\xbd  \t x"),
                                  parts[0].substr(0, 64)}) {
      fuzz::expect_clean([&] { (void)tok->decode(tok->encode_prompt(text)); });
      fuzz::expect_clean([&] { (void)tok->decode(tok->encode_ordinary(text)); });
    }
    for (std::size_t id = 0; id < tok->vocab_size() && id < 300; ++id)
      if (tok->has_token(static_cast<int32_t>(id))) (void)tok->token_text(static_cast<int32_t>(id));
    if (auto bos = tok->bos_id()) (void)tok->has_token(*bos);
  });
  return 0;
}
