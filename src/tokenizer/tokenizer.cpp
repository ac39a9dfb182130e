#include "tokenizer/tokenizer.h"

#include <nlohmann/json.hpp>

#include "formats/gguf.h"
#include "storage/pack_dir.h"
#include "tokenizer/nfc.h"
#include "tokenizer/tokenizer_state.h"
#include "tokenizer/utf8.h"
#include "util/error.h"

namespace strata {

namespace fs = std::filesystem;

Tokenizer::Tokenizer(std::unique_ptr<tok::TokenizerState> state) : state_(std::move(state)) {}
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

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  tok::validate_utf8(text);
  const tok::TokenizerState& st = *state_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<std::string> pieces;

  // Text between added tokens: normalize, then look for added tokens that
  // are matched on normalized text, then pre-tokenize and run the model.
  auto encode_plain = [&](std::string_view plain) {
    const std::string normalized = st.nfc ? tok::nfc_normalize(plain) : std::string(plain);
    for (const auto& seg : st.normalized_added.split(normalized)) {
      if (seg.id >= 0) {
        ids.push_back(seg.id);
        continue;
      }
      pieces.clear();
      st.pre.split(std::string_view(normalized).substr(seg.begin, seg.end - seg.begin), pieces);
      for (const auto& p : pieces) st.model->encode_word(p, ids);
    }
  };
  for (const auto& seg : st.raw_added.split(text)) {
    if (seg.id >= 0)
      ids.push_back(seg.id);
    else
      encode_plain(text.substr(seg.begin, seg.end - seg.begin));
  }
  return ids;
}

std::vector<int32_t> Tokenizer::encode_ordinary(std::string_view text) const {
  tok::validate_utf8(text);
  const tok::TokenizerState& st = *state_;
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  std::vector<std::string> pieces;
  const std::string normalized = st.nfc ? tok::nfc_normalize(text) : std::string(text);
  st.pre.split(normalized, pieces);
  for (const auto& p : pieces) st.model->encode_word(p, ids);
  return ids;
}

std::vector<int32_t> Tokenizer::encode_prompt(std::string_view text) const {
  std::vector<int32_t> ids = state_->prompt_prefix;
  const auto body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), state_->prompt_suffix.begin(), state_->prompt_suffix.end());
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
