#pragma once
// Everything a loaded tokenizer consists of; filled by one of the loaders
// (tokenizer_json_loader.cpp, tiktoken_loader.cpp, gguf_tokenizer_loader.cpp),
// used by tokenizer.cpp.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "tokenizer/added_tokens.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/word_cache.h"
#include "tokenizer/word_model.h"

namespace strata {
class GgufFile;
}

namespace strata::tok {

struct TokenizerState {
  AddedTokenMatcher raw_added;         // matched on the raw input
  AddedTokenMatcher normalized_added;  // matched after normalization
  bool nfc = false;                    // normalizer: NFC (else identity)
  PreTokenizer pre;
  std::unique_ptr<WordModel> model;

  // Per id (index); ids never assigned have known[id] == 0.
  std::vector<std::string> decode_bytes;  // what decode() emits
  std::vector<std::string> token_texts;   // what token_text() returns
  std::vector<uint8_t> known;

  // Looks up a token's id by its vocabulary text or added-token content.
  StringMap<int32_t> ids_by_text;

  std::optional<int32_t> bos;
  std::vector<int32_t> eos;
  std::vector<int32_t> prompt_prefix;  // added by encode_prompt
  std::vector<int32_t> prompt_suffix;

  std::optional<std::string> chat_template;  // Jinja source, if the checkpoint has one

  // Grows the per-id tables to hold `id` and records its texts.
  void set_token(int32_t id, std::string bytes, std::string text);
};

// Ids read from a file index the per-id tables above, so each is bounded
// before it sizes them: a file defining N tokens may number them up to
// N + kMaxTokenIdGap (real files number them densely), and never past
// kMaxTokenIds (64 times the largest vocabulary shipped today). An id of
// 2^28 would otherwise allocate gigabytes, and one past 2^32 would wrap.
inline constexpr int64_t kMaxTokenIdGap = 1 << 16;
inline constexpr int64_t kMaxTokenIds = 1 << 24;
int64_t token_id_limit(std::size_t tokens_defined);
// `v` as a token id in [0, limit); otherwise throws "<where> has token id
// <v>, out of range (<bound>)": `where` names the file and field, `bound`
// says where the limit comes from.
int32_t token_id(const nlohmann::json& v, int64_t limit, const std::string& where, const std::string& bound);

// Reads tokenizer_config.json / generation_config.json in `dir` (if present)
// and sets bos, eos, the prompt prefix/suffix and the chat template
// (tokenizer_config.json's chat_template, else chat_template.jinja, else
// chat_template.json: the order llama.cpp's converter uses).
// `template_prefix` and `template_suffix` are the special tokens a
// post_processor template puts around the text.
void apply_special_token_config(const std::filesystem::path& dir, TokenizerState& state,
                                const std::vector<int32_t>& template_prefix,
                                const std::vector<int32_t>& template_suffix);

std::unique_ptr<TokenizerState> load_tokenizer_json(const std::filesystem::path& dir);
std::unique_ptr<TokenizerState> load_tiktoken(const std::filesystem::path& dir);
// From GGUF metadata (tokenizer.ggml.*); the state copies what it needs, so
// it does not refer to the file afterwards.
std::unique_ptr<TokenizerState> load_gguf_tokenizer(const GgufFile& file);

// Kimi-K2's pre-tokenizer pattern (Rust-regex syntax), used for tiktoken.model.
const char* kimi_pattern();

}  // namespace strata::tok
