// Builds a TokenizerState from GGUF metadata as llama.cpp's converter writes
// it for byte-level BPE models (tokenizer.ggml.model "gpt2"):
//
//   tokenizer.ggml.tokens      string[n]  token texts in the byte-level alphabet, id = index
//   tokenizer.ggml.token_type  int[n]     1 NORMAL, 2 UNKNOWN, 3 CONTROL, 4 USER_DEFINED, 5 UNUSED, 6 BYTE
//   tokenizer.ggml.merges      string[]   "left right", rank = index
//   tokenizer.ggml.pre         string     pre-tokenizer name (gguf_vocab.h)
//   tokenizer.ggml.{bos,eos,eot,eom,unknown}_token_id   u32
//   tokenizer.ggml.add_{bos,eos}_token                   bool
//   tokenizer.chat_template    string
//
// Token types: CONTROL, USER_DEFINED and UNKNOWN tokens are the converter's
// rendering of HF added tokens, and are cut out of the raw text before
// pre-tokenization as HF does (llama.cpp too, with parse_special). UNUSED
// tokens are the converter's "[PAD<id>]" fillers up to the embedding size:
// never produced, and they decode to nothing (as in llama.cpp). token_type
// is optional (all NORMAL), as in llama.cpp.
//
// Not read: scores (unused by BPE), token_type_count, the FIM/pad/sep ids,
// named chat templates (tokenizer.chat_template.<name>).
#include <algorithm>
#include <climits>

#include "formats/gguf.h"
#include "tokenizer/bpe.h"
#include "tokenizer/byte_level.h"
#include "tokenizer/gguf_vocab.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata::tok {

namespace {

std::string quoted(std::string_view s) {
  std::size_t len = std::min<std::size_t>(s.size(), 60);
  while (len < s.size() && len > 0 && (static_cast<unsigned char>(s[len]) & 0xC0) == 0x80) --len;  // whole characters
  return "\"" + std::string(s.substr(0, len)) + (len < s.size() ? "...\"" : "\"");
}

}  // namespace

std::unique_ptr<TokenizerState> load_gguf_tokenizer(const GgufFile& f) {
  using namespace gguf_key;

  // --- model and pre-tokenizer ---------------------------------------------
  const auto model = f.find_string(kModel);
  if (!model) f.fail(std::string("no tokenizer: ") + kModel + " is missing");
  if (*model != "gpt2")
    f.fail(std::string(kModel) + " " + quoted(*model) + " is not supported (only \"gpt2\", byte-level BPE)");
  const auto pre_name = f.find_string(kPre);
  if (!pre_name)
    f.fail(std::string(kPre) +
           " is missing (llama.cpp would fall back to its \"default\" regexes, which are unlikely to be the "
           "model's; supported: " +
           gguf_pre_names() + ")");
  const GgufPre* pre = find_gguf_pre(*pre_name);
  if (!pre)
    f.fail("pre-tokenizer " + std::string(kPre) + " " + quoted(*pre_name) +
           " is not supported (supported: " + gguf_pre_names() + ")");

  // --- vocabulary -------------------------------------------------------------
  const GgufValue* tokens_v = f.find_value(kTokens);
  if (!tokens_v) f.fail(std::string(kTokens) + " is missing");
  if (tokens_v->type != GgufType::ARRAY || tokens_v->elem_type != GgufType::STRING)
    (void)f.get_string_array(kTokens);  // throws the reader's "is a ..., expected ..." error
  const std::vector<std::string_view>& tokens = tokens_v->strings;
  const std::size_t n = tokens.size();
  if (n == 0) f.fail(std::string(kTokens) + " is empty");
  if (n > static_cast<std::size_t>(INT32_MAX)) f.fail(std::string(kTokens) + " has too many tokens");

  std::vector<int64_t> types(n, static_cast<int64_t>(GgufTokenType::Normal));
  if (f.has(kTokenType)) {
    types = f.get_int_array(kTokenType);
    if (types.size() != n)
      f.fail(std::string(kTokenType) + " has " + std::to_string(types.size()) + " entries for " + std::to_string(n) +
             " tokens");
  }

  auto st = std::make_unique<TokenizerState>();
  st->decode_bytes.reserve(n);
  st->token_texts.reserve(n);
  st->known.reserve(n);
  st->ids_by_text.reserve(n);
  StringMap<int32_t> vocab;  // what BPE merges may produce or use
  vocab.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto id = static_cast<int32_t>(i);
    const std::string where = std::string(kTokens) + "[" + std::to_string(i) + "]";
    const std::string_view text = tokens[i];
    if (text.empty()) f.fail(where + " is empty");
    try {
      validate_utf8(text, where);
    } catch (const Error& e) {
      f.fail(e.what());
    }
    if (auto [it, fresh] = st->ids_by_text.emplace(text, id); !fresh)
      f.fail(where + " " + quoted(text) + " repeats token " + std::to_string(it->second));

    const int64_t type = types[i];
    switch (static_cast<GgufTokenType>(type)) {
      case GgufTokenType::Normal:
      case GgufTokenType::Byte: {
        // Byte-level text decodes to its bytes; anything else to itself.
        auto bytes = from_byte_level(text);
        st->set_token(id, bytes ? std::move(*bytes) : std::string(text), std::string(text));
        vocab.emplace(text, id);
        break;
      }
      case GgufTokenType::Control:
      case GgufTokenType::UserDefined:
      case GgufTokenType::Unknown: {
        st->set_token(id, std::string(text), std::string(text));
        vocab.emplace(text, id);
        AddedToken a;
        a.id = id;
        a.content = std::string(text);
        a.special = static_cast<GgufTokenType>(type) != GgufTokenType::UserDefined;
        st->raw_added.add(a);
        break;
      }
      case GgufTokenType::Unused:
        st->set_token(id, std::string(), std::string(text));
        break;
      default:
        f.fail(std::string(kTokenType) + "[" + std::to_string(i) + "] is " + std::to_string(type) +
               " (expected 1..6: normal, unknown, control, user-defined, unused, byte)");
    }
  }

  // --- special ids ------------------------------------------------------------
  auto token_id = [&](const char* key) -> std::optional<int32_t> {
    const auto v = f.find_int(key);
    if (!v) return std::nullopt;
    if (*v < 0 || static_cast<uint64_t>(*v) >= n)
      f.fail(std::string(key) + " is " + std::to_string(*v) + ", outside the vocabulary of " + std::to_string(n) +
             " tokens");
    return static_cast<int32_t>(*v);
  };

  // --- merges -----------------------------------------------------------------
  if (!f.has(kMerges)) f.fail(std::string(kMerges) + " is missing");
  const std::vector<std::string_view> merge_list = f.get_string_array(kMerges);
  std::vector<std::pair<std::string, std::string>> merges;
  merges.reserve(merge_list.size());
  for (std::size_t i = 0; i < merge_list.size(); ++i) {
    const std::string_view m = merge_list[i];
    // As llama.cpp: the first space after the first character separates the parts.
    const std::size_t sp = m.find(' ', 1);
    if (sp == std::string_view::npos || sp + 1 == m.size())
      f.fail(std::string(kMerges) + "[" + std::to_string(i) + "] " + quoted(m) + " is not \"left right\"");
    merges.emplace_back(std::string(m.substr(0, sp)), std::string(m.substr(sp + 1)));
  }
  st->model = std::make_unique<BpeModel>(std::move(vocab), merges, token_id(kUnk), /*ignore_merges=*/false,
                                         f.path() + ": " + kMerges);

  st->bos = token_id(kBos);
  for (const char* key : {kEos, kEot, kEom})
    if (auto id = token_id(key); id && std::find(st->eos.begin(), st->eos.end(), *id) == st->eos.end())
      st->eos.push_back(*id);
  if (f.find_bool(kAddBos).value_or(false)) {
    if (!st->bos) f.fail(std::string(kAddBos) + " is true but " + kBos + " is missing");
    st->prompt_prefix.push_back(*st->bos);
  }
  if (f.find_bool(kAddEos).value_or(false)) {
    const auto eos = token_id(kEos);
    if (!eos) f.fail(std::string(kAddEos) + " is true but " + kEos + " is missing");
    st->prompt_suffix.push_back(*eos);
  }
  if (auto t = f.find_string(kChatTemplate)) st->chat_template = std::string(*t);

  apply_gguf_pre(*pre, *st, f.path());
  return st;
}

}  // namespace strata::tok
