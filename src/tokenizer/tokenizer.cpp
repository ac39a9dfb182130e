#include "tokenizer/tokenizer.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "storage/pack_dir.h"
#include "tokenizer/nfc.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata {

namespace fs = std::filesystem;

Tokenizer::Tokenizer(std::unique_ptr<tok::TokenizerState> state) : state_(std::move(state)) {
  for (const auto& bytes : state_->decode_bytes) max_token_bytes_ = std::max(max_token_bytes_, bytes.size());
}
Tokenizer::~Tokenizer() = default;

bool Tokenizer::dir_has_tokenizer(const fs::path& dir) {
  std::error_code ec;
  return fs::is_regular_file(dir / "tokenizer.json", ec) || fs::is_regular_file(dir / "tiktoken.model", ec);
}

std::unique_ptr<Tokenizer> Tokenizer::from_dir(const fs::path& dir) {
  std::error_code ec;
  const bool json_format = fs::is_regular_file(dir / "tokenizer.json", ec);
  if (!json_format && !fs::is_regular_file(dir / "tiktoken.model", ec))
    throw Error("no tokenizer in " + dir.string() + ": expected tokenizer.json or tiktoken.model");
  try {
    return std::unique_ptr<Tokenizer>(new Tokenizer(json_format ? tok::load_tokenizer_json(dir) : tok::load_tiktoken(dir)));
  } catch (const nlohmann::json::exception& e) {
    // A field of the wrong JSON type somewhere the loaders read with get<>().
    throw Error((dir / (json_format ? "tokenizer.json" : "tokenizer_config.json")).string() +
                ": unexpected JSON structure: " + e.what());
  }
}

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const GgufFile& file) {
  return std::unique_ptr<Tokenizer>(new Tokenizer(tok::load_gguf_tokenizer(file)));
}

std::unique_ptr<Tokenizer> Tokenizer::for_model(const fs::path& path) {
  std::error_code ec;
  if (fs::is_directory(path, ec) && pack_state(path) != PackState::NotAPack) {
    // A pack (strata pack): the tokenizer travels with its trunk, read once
    // the trunk is verified (an interrupted pack is an error here).
    return for_model(open_pack_trunk(path).path);
  }
  if (fs::is_directory(path, ec)) return dir_has_tokenizer(path) ? from_dir(path) : nullptr;
  if (fs::is_regular_file(path, ec)) {
    const GgufFile file(path);
    return file.has("tokenizer.ggml.model") ? from_gguf(file) : nullptr;
  }
  throw Error(path.string() + ": no such model directory or GGUF file");
}

bool Tokenizer::encode_into(std::string_view text, bool special, std::size_t max_tokens,
                            std::vector<int32_t>& ids) const {
  tok::validate_utf8(text);
  const tok::TokenizerState& st = *state_;
  auto add_id = [&](int32_t id) {
    ids.push_back(id);
    return ids.size() <= max_tokens;
  };
  auto add_pieces = [&](std::string_view plain) {
    return st.pre.split_each(plain, [&](std::string_view piece) {
      // Every token spells at most max_token_bytes_ of the piece: one too
      // long for the ids still allowed is refused before its merge loop,
      // which would cost memory in proportion to the piece.
      const std::size_t at_least = (piece.size() + max_token_bytes_ - 1) / max_token_bytes_;
      if (ids.size() > max_tokens || at_least > max_tokens - ids.size()) return false;
      st.model->encode_word(piece, ids);
      return ids.size() <= max_tokens;
    });
  };
  // Text between added tokens: normalize, then look for added tokens that
  // are matched on normalized text, then pre-tokenize and run the model.
  auto add_plain = [&](std::string_view plain) {
    std::string nfc;
    if (st.nfc) plain = nfc = tok::nfc_normalize(plain);
    if (!special) return add_pieces(plain);
    for (const auto& seg : st.normalized_added.split(plain))
      if (seg.id >= 0 ? !add_id(seg.id) : !add_pieces(plain.substr(seg.begin, seg.end - seg.begin))) return false;
    return true;
  };
  if (!special) return add_plain(text);
  for (const auto& seg : st.raw_added.split(text))
    if (seg.id >= 0 ? !add_id(seg.id) : !add_plain(text.substr(seg.begin, seg.end - seg.begin))) return false;
  return true;
}

namespace {
constexpr std::size_t kUnlimited = std::numeric_limits<std::size_t>::max();
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const { return *encode(text, kUnlimited); }

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) const {
  return *encode_ordinary(text, kUnlimited);
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text) const { return *encode_prompt(text, kUnlimited); }

std::optional<std::vector<int32_t>> Tokenizer::encode(std::string_view text, std::size_t max_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(std::min(text.size(), max_tokens) / 3 + 4);
  if (!encode_into(text, true, max_tokens, ids)) return std::nullopt;
  return ids;
}

std::optional<std::vector<int32_t>> Tokenizer::encode_ordinary(std::string_view text, std::size_t max_tokens) const {
  std::vector<int32_t> ids;
  ids.reserve(std::min(text.size(), max_tokens) / 3 + 4);
  if (!encode_into(text, false, max_tokens, ids)) return std::nullopt;
  return ids;
}

std::optional<std::vector<int32_t>> Tokenizer::encode_prompt(std::string_view text, std::size_t max_tokens) const {
  const auto& prefix = state_->prompt_prefix;
  const auto& suffix = state_->prompt_suffix;
  if (prefix.size() + suffix.size() > max_tokens) return std::nullopt;
  std::vector<int32_t> ids = prefix;
  if (!encode_into(text, true, max_tokens - suffix.size(), ids)) return std::nullopt;
  ids.insert(ids.end(), suffix.begin(), suffix.end());
  return ids;
}

namespace {

void check_id(const tok::TokenizerState& st, int32_t id) {
  if (id < 0 || static_cast<std::size_t>(id) >= st.known.size() || !st.known[id])
    throw Error("token id " + std::to_string(id) + " is not in the vocabulary (vocab size " +
                std::to_string(st.known.size()) + ")");
}

}  // namespace

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  for (int32_t id : ids) {
    check_id(*state_, id);
    out += state_->decode_bytes[id];
  }
  return out;
}

bool Tokenizer::has_token(int32_t id) const {
  return id >= 0 && static_cast<std::size_t>(id) < state_->known.size() && state_->known[id];
}

std::string Tokenizer::token_text(int32_t id) const {
  check_id(*state_, id);
  return state_->token_texts[id];
}

std::optional<int32_t> Tokenizer::bos_id() const { return state_->bos; }
std::vector<int32_t> Tokenizer::eos_ids() const { return state_->eos; }
std::size_t Tokenizer::vocab_size() const { return state_->known.size(); }
const std::optional<std::string>& Tokenizer::chat_template() const { return state_->chat_template; }

}  // namespace strata
