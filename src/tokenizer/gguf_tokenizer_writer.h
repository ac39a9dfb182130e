#pragma once
// Hugging Face tokenizer -> GGUF tokenizer metadata, as llama.cpp's
// convert_hf_to_gguf.py writes it for byte-level BPE models
// (ModelBase._set_vocab_gpt2 + gguf.SpecialVocab), so that a synthetic or
// converted GGUF carries the tokenizer llama.cpp and Tokenizer::from_gguf
// expect. Keys, in the converter's order and with its value types:
//
//   tokenizer.ggml.model       "gpt2"
//   tokenizer.ggml.pre         "deepseek-v3" / "qwen2" / "gpt-4o" / "gpt-2" (see below)
//   tokenizer.ggml.tokens      string[vocab_size]: ids missing from the tokenizer
//                              become "[PAD<id>]"
//   tokenizer.ggml.token_type  i32[vocab_size]: NORMAL for the BPE vocab; added tokens
//                              CONTROL when special or spelled like a special token
//                              ("<|...|>", "<｜...｜>", ...), else USER_DEFINED; UNUSED fillers
//   tokenizer.ggml.merges      string[]: "left right" (list-form merges joined, a
//                              space inside a part written as U+0120 as the converter does)
//   tokenizer.ggml.{bos,eos,unknown,seperator,padding,mask}_token_id  u32: from
//                              tokenizer_config.json's *_token (looked up among
//                              tokenizer.json's added_tokens), else config.json's *_token_id
//   tokenizer.ggml.add_{bos,eos}_token  bool: from the post_processor template and
//                              tokenizer_config.json's add_*_token
//   tokenizer.chat_template    string: tokenizer_config.json's chat_template, else
//                              chat_template.jinja / chat_template.json
//
// Not reproduced: the converter re-encodes added tokens with normalized=false
// through transformers (decode(encode(t))), which is the identity for the
// supported tokenizers; a post_processor "pair" template's add_sep_token.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace strata {

class GgufWriter;

struct GgufTokenizerOptions {
  // Length of tokenizer.ggml.tokens. Default: config.json's vocab_size next
  // to tokenizer.json (the embedding rows; the converter's choice), else the
  // tokenizer's own size (base vocabulary plus added tokens).
  std::optional<int64_t> vocab_size = std::nullopt;
  // tokenizer.ggml.pre. Default: recognized from tokenizer.json's normalizer
  // and pre_tokenizer, which must be exactly one of those strata reads back
  // (tokenizer/gguf_vocab.h); anything else is an error unless named here.
  std::optional<std::string> pre = std::nullopt;
};

// `source` is a checkpoint directory holding tokenizer.json (and optionally
// tokenizer_config.json, config.json, chat_template.jinja), or a
// tokenizer.json file whose directory is searched for the others. Throws
// strata::Error naming the file for a tokenizer GGUF cannot express (not a
// byte-level BPE, ignore_merges, an unrecognized pre-tokenizer, a
// tiktoken.model checkpoint) or a key `out` already has.
void write_tokenizer_to_gguf(const std::filesystem::path& source, GgufWriter& out,
                             const GgufTokenizerOptions& options = {});

}  // namespace strata
