// A Hugging Face config.json, read for every architecture (model_type picks
// one; the seeds hold each) and validated; a config that passes is then used
// the way loading uses it before any weight is read: the tensors it
// declares, each layer's kind and window, the attention widths and scale.
// UBSan's overflow checks stand for "the sizes fit".
#include "fuzz_support.h"
#include "model/arch.h"
#include "util/json_file.h"

using namespace strata;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  fuzz::expect_clean([&] {
    const ModelConfig c = ModelConfig::from_json(parse_json(fuzz::as_text(data, size), "config.json"), "config.json");
    const ArchSpec& spec = arch_spec(c.arch);
    for (Naming naming : {Naming::Hf, Naming::Gguf}) (void)declared_tensors(c, naming);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      (void)c.layer_is_moe(l);
      (void)c.layer_window(l);
      (void)c.layer_is_kda(l);
    }
    (void)spec.cache_widths(c);
    (void)spec.attention_widths(c);
    (void)c.attention_scale();
  });
  return 0;
}
