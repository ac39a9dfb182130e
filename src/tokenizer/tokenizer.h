#pragma once
// Text <-> token ids for the checkpoints strata runs: byte-level BPE from a
// HF tokenizer.json (DeepSeek-V3, Qwen3, ...), a tiktoken-format vocabulary
// (Kimi's tiktoken.model), or a GGUF file's tokenizer metadata as llama.cpp's
// converter writes it. Encoding follows HF tokenizers step by step:
// added/special tokens are cut out first, the rest is normalized
// (NFC if the file says so), pre-tokenized with the file's regexes (PCRE2),
// and each piece is BPE-encoded.
//
// All failures (unreadable or malformed files, invalid UTF-8 input, unknown
// ids) throw strata::Error with a one-line message naming the file or input.
// A Tokenizer is immutable after loading; encode/decode are thread-safe.
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace strata {

class GgufFile;

namespace tok {
struct TokenizerState;
}

class Tokenizer {
 public:
  // Loads dir/tokenizer.json, else dir/tiktoken.model (Kimi format, with
  // Kimi's pre-tokenizer pattern), each with dir/tokenizer_config.json and
  // dir/generation_config.json when present.
  static std::unique_ptr<Tokenizer> from_dir(const std::filesystem::path& dir);
  static bool dir_has_tokenizer(const std::filesystem::path& dir);

  // From GGUF metadata: tokenizer.ggml.model "gpt2" (byte-level BPE) with one
  // of the pre-tokenizers of tokenizer/gguf_vocab.h ("deepseek-v3", "qwen2",
  // "gpt-4o", "gpt-2", "default"). Each is run as the normalizer and
  // pre-tokenizer of the tokenizer.json it stands for, so a GGUF converted
  // from a tokenizer.json gives the same ids as from_dir() on it. The
  // Tokenizer keeps no reference to `file`. Throws strata::Error naming the
  // file and key for missing or malformed metadata.
  static std::unique_ptr<Tokenizer> from_gguf(const GgufFile& file);

  // The tokenizer of a model path, as load_model takes it: a directory ->
  // from_dir(), or nullptr if it has neither tokenizer.json nor
  // tiktoken.model; a file -> a GGUF, from_gguf(), or nullptr if it has no
  // tokenizer.ggml.model. Throws if the path does not exist.
  static std::unique_ptr<Tokenizer> for_model(const std::filesystem::path& path);

  ~Tokenizer();
  Tokenizer(const Tokenizer&) = delete;
  Tokenizer& operator=(const Tokenizer&) = delete;

  // Raw encoding: no BOS/EOS added; special and added tokens written in the
  // text are recognized. Throws on invalid UTF-8 (names the byte offset).
  std::vector<int32_t> encode(std::string_view text) const;

  // Everything as ordinary text: added and special tokens written in `text`
  // are BPE-encoded like any other characters, never matched (tiktoken's
  // encode(..., disallowed_special=())). For text a user wrote that must not
  // be able to forge control tokens (runtime/k3_chat.h).
  std::vector<int32_t> encode_ordinary(std::string_view text) const;

  // encode() plus what the checkpoint adds to a prompt: BOS when
  // tokenizer_config.json has add_bos_token: true or the tokenizer.json
  // post_processor template starts with it (EOS likewise, at the end).
  std::vector<int32_t> encode_prompt(std::string_view text) const;

  // The same three for a text whose ids must fit in `max_tokens` (a
  // context): nullopt as soon as it is clear that they do not, without
  // encoding the rest: more than max_tokens ids so far, or a piece longer
  // than the longest token's bytes times the ids still allowed. A hostile
  // prompt of megabytes costs what max_tokens ids cost, not what the text's.
  std::optional<std::vector<int32_t>> encode(std::string_view text, std::size_t max_tokens) const;
  std::optional<std::vector<int32_t>> encode_ordinary(std::string_view text, std::size_t max_tokens) const;
  std::optional<std::vector<int32_t>> encode_prompt(std::string_view text, std::size_t max_tokens) const;

  // Concatenated bytes of the tokens (special tokens as their text). Not
  // necessarily valid UTF-8: a multi-byte character split across the last
  // ids is returned as its partial bytes, so streaming callers can hold
  // them back until the rest arrives. Throws for ids outside the vocabulary.
  std::string decode(const std::vector<int32_t>& ids) const;

  // Whether `id` is a token of this vocabulary (decode() takes it). A model
  // may have more embedding rows than its tokenizer has tokens, and may
  // sample one of them.
  bool has_token(int32_t id) const;

  // The token as the vocabulary spells it (byte-level form, e.g. "Ġthe"; the
  // literal text for special tokens). Always valid UTF-8.
  std::string token_text(int32_t id) const;

  std::optional<int32_t> bos_id() const;
  // End-of-sequence ids: tokenizer_config.json's eos_token first, then any
  // other eos_token_id listed in generation_config.json.
  std::vector<int32_t> eos_ids() const;
  // One past the largest id (base vocabulary plus added/special tokens; for
  // a GGUF, the length of tokenizer.ggml.tokens, which includes the
  // converter's "[PAD<id>]" fillers: those decode to nothing).
  std::size_t vocab_size() const;

  // The Jinja chat template: tokenizer.chat_template from a GGUF, else
  // tokenizer_config.json's chat_template (or chat_template.jinja /
  // chat_template.json). nullopt if the checkpoint has none.
  const std::optional<std::string>& chat_template() const;

 private:
  explicit Tokenizer(std::unique_ptr<tok::TokenizerState> state);
  // Appends the ids of `text` to `ids` (added tokens recognized with
  // `special`); false once they pass max_tokens (see encode(text, max_tokens)).
  bool encode_into(std::string_view text, bool special, std::size_t max_tokens, std::vector<int32_t>& ids) const;

  std::unique_ptr<tok::TokenizerState> state_;
  std::size_t max_token_bytes_ = 1;  // the longest decode() of one token
};

}  // namespace strata
