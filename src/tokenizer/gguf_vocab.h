#pragma once
// What GGUF tokenizer metadata (llama.cpp's tokenizer.ggml.* keys) means to
// strata; shared by the GGUF loader (gguf_tokenizer_loader.cpp) and the
// writer (gguf_tokenizer_writer.cpp).
//
// tokenizer.ggml.pre names a pre-tokenizer. llama.cpp maps each name to its
// own hand-adapted regexes; strata maps it to the normalizer and pre-tokenizer
// of the tokenizer.json the name was detected from, so that a GGUF tokenizer
// encodes exactly as the Hugging Face tokenizer it was converted from (and as
// strata's tokenizer.json path does).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace strata::tok {

struct TokenizerState;

namespace gguf_key {
inline constexpr const char* kModel = "tokenizer.ggml.model";
inline constexpr const char* kPre = "tokenizer.ggml.pre";
inline constexpr const char* kTokens = "tokenizer.ggml.tokens";
inline constexpr const char* kTokenType = "tokenizer.ggml.token_type";
inline constexpr const char* kMerges = "tokenizer.ggml.merges";
inline constexpr const char* kBos = "tokenizer.ggml.bos_token_id";
inline constexpr const char* kEos = "tokenizer.ggml.eos_token_id";
inline constexpr const char* kEot = "tokenizer.ggml.eot_token_id";
inline constexpr const char* kEom = "tokenizer.ggml.eom_token_id";
inline constexpr const char* kUnk = "tokenizer.ggml.unknown_token_id";
inline constexpr const char* kSep = "tokenizer.ggml.seperator_token_id";  // sic, as llama.cpp spells it
inline constexpr const char* kPad = "tokenizer.ggml.padding_token_id";
inline constexpr const char* kMask = "tokenizer.ggml.mask_token_id";
inline constexpr const char* kAddBos = "tokenizer.ggml.add_bos_token";
inline constexpr const char* kAddEos = "tokenizer.ggml.add_eos_token";
inline constexpr const char* kAddSep = "tokenizer.ggml.add_sep_token";
inline constexpr const char* kChatTemplate = "tokenizer.chat_template";
}  // namespace gguf_key

// tokenizer.ggml.token_type values (llama.cpp's llama_token_type).
enum class GgufTokenType : int32_t {
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
};

// A supported tokenizer.ggml.pre: Split steps (regex, behavior Isolated, not
// inverted), in order, then ByteLevel (no prefix space), optionally after NFC.
struct GgufPre {
  const char* name;    // as convert_hf_to_gguf.py writes it
  const char* origin;  // the tokenizer.json it stands for
  bool nfc;            // normalizer NFC (else none)
  std::vector<std::string> splits;
  bool byte_level_regex;  // the ByteLevel step also splits with GPT-2's pattern
};

// The supported pre-tokenizers. Besides these names, "deepseek-r1-qwen" is
// read as "qwen2" and "gpt2" as "gpt-2" (same tokenizer.json pre-tokenizer).
const std::vector<GgufPre>& gguf_pres();
// nullptr if `name` is not supported.
const GgufPre* find_gguf_pre(std::string_view name);
// "deepseek-v3, qwen2, ..." for error messages.
std::string gguf_pre_names();

// Sets the normalizer and pre-tokenizer of `st`; `origin` names the file.
void apply_gguf_pre(const GgufPre& pre, TokenizerState& st, const std::string& origin);

// What convert_hf_to_gguf.py's does_token_look_special() says: added tokens
// spelled like this are CONTROL even when not marked special.
bool gguf_token_looks_special(std::string_view text);

}  // namespace strata::tok
