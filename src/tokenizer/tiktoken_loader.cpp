// Builds a TokenizerState from a tiktoken-format vocabulary as Kimi ships it:
// tiktoken.model ("<base64 bytes> <rank>" per line, rank = id) plus
// tokenizer_config.json, whose added_tokens_decoder names the special tokens.
// As in Kimi's tokenization_kimi.py, the 256 ids after the base vocabulary
// are special: named ones from the config, the rest "<|reserved_token_N|>".
// The pre-tokenizer is Kimi-K2's pat_str; tiktoken files carry no pattern.
//
// Not reproduced: Kimi's encode() first cuts inputs into 400k-character
// chunks and runs of 25k same-kind (space / non-space) characters; that only
// changes ids for inputs beyond those sizes.
#include <charconv>

#include "tokenizer/byte_level.h"
#include "tokenizer/tiktoken_bpe.h"
#include "tokenizer/tokenizer_state.h"
#include "util/error.h"
#include "util/json_file.h"

namespace strata::tok {

namespace {

// Kimi-K2 tokenization_kimi.py pat_str. Written in Rust-regex syntax, with
// class intersections; translate_pattern() rewrites those for PCRE2.
constexpr const char* kKimiPattern =
    R"([\p{Han}]+)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?)"
    R"(|\p{N}{1,3})"
    R"(| ?[^\s\p{L}\p{N}]+[\r\n]*)"
    R"(|\s*[\r\n]+)"
    R"(|\s+(?!\S))"
    R"(|\s+)";

constexpr int32_t kReservedSpecialTokens = 256;

// Standard base64 (with optional '=' padding); nullopt if malformed.
std::optional<std::string> base64_decode(std::string_view in) {
  auto value = [](char c) -> int {
    if (c >= 'A' && c <= 'Z') return c - 'A';
    if (c >= 'a' && c <= 'z') return c - 'a' + 26;
    if (c >= '0' && c <= '9') return c - '0' + 52;
    if (c == '+') return 62;
    if (c == '/') return 63;
    return -1;
  };
  while (!in.empty() && in.back() == '=') in.remove_suffix(1);
  std::string out;
  uint32_t acc = 0;
  int bits = 0;
  for (char c : in) {
    const int v = value(c);
    if (v < 0) return std::nullopt;
    acc = (acc << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  if (bits >= 6) return std::nullopt;  // a lone trailing character cannot encode a byte
  return out;
}

}  // namespace

const char* kimi_pattern() { return kKimiPattern; }

std::unique_ptr<TokenizerState> load_tiktoken(const std::filesystem::path& dir) {
  const auto path = dir / "tiktoken.model";
  const std::string file = path.string();
  const std::string text = read_text_file(path);
  auto st = std::make_unique<TokenizerState>();

  // Ranks are ids: unique, and below the number of tokens (so 0..n-1, as
  // tiktoken files are written), checked before they size anything.
  std::size_t max_tokens = 0;
  for (std::size_t pos = 0; pos < text.size(); ++pos)
    if (text[pos] == '\n' || pos + 1 == text.size()) ++max_tokens;  // an upper bound: lines
  std::vector<uint8_t> rank_seen(max_tokens, 0);
  StringMap<int32_t> ranks;
  std::size_t line_no = 0;
  for (std::size_t pos = 0; pos < text.size();) {
    std::size_t eol = text.find('\n', pos);
    if (eol == std::string::npos) eol = text.size();
    std::string_view line(text.data() + pos, eol - pos);
    pos = eol + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    const auto sp = line.find(' ');
    auto fail = [&](const std::string& why) {
      throw Error(file + ":" + std::to_string(line_no) + ": " + why + " (expected \"<base64> <rank>\")");
    };
    if (sp == std::string_view::npos) fail("no space");
    auto bytes = base64_decode(line.substr(0, sp));
    if (!bytes || bytes->empty()) fail("bad base64");
    int32_t rank = -1;
    const auto num = line.substr(sp + 1);
    auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), rank);
    if (ec != std::errc() || end != num.data() + num.size() || rank < 0) fail("bad rank");
    if (static_cast<std::size_t>(rank) >= max_tokens)
      fail("rank " + std::to_string(rank) + " is not below the file's " + std::to_string(max_tokens) + " lines");
    if (rank_seen[rank]) fail("rank " + std::to_string(rank) + " appears twice");
    rank_seen[rank] = 1;
    if (!ranks.emplace(*bytes, rank).second) fail("duplicate token");
    st->set_token(rank, *bytes, to_byte_level(*bytes));
    st->ids_by_text.emplace(to_byte_level(*bytes), rank);
  }
  if (ranks.empty()) throw Error(file + ": no tokens");
  const auto n_base = static_cast<int32_t>(ranks.size());
  for (int32_t r = 0; r < n_base; ++r)
    if (!rank_seen[r]) throw Error(file + ": rank " + std::to_string(r) + " is missing (ranks must be 0 to " + std::to_string(n_base - 1) + ")");

  // Special tokens: named in tokenizer_config.json, or reserved placeholders.
  std::vector<AddedToken> specials;
  const auto cfg_path = dir / "tokenizer_config.json";
  std::vector<std::pair<int32_t, AddedToken>> named;
  if (std::filesystem::exists(cfg_path)) {
    const auto cfg = read_json_file(cfg_path);
    const nlohmann::json decoder = cfg.value("added_tokens_decoder", nlohmann::json::object());
    // Named specials sit among the reserved ids in practice; bounded like
    // any file's ids (tokenizer_state.h).
    const int64_t limit = token_id_limit(static_cast<std::size_t>(n_base) + kReservedSpecialTokens + decoder.size());
    for (const auto& [key, entry] : decoder.items()) {
      int32_t id = -1;
      auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
      if (ec != std::errc() || end != key.data() + key.size() || id < 0 || !entry.is_object() ||
          !entry.contains("content") || !entry["content"].is_string())
        throw Error(cfg_path.string() + ": added_tokens_decoder[\"" + key + "\"] needs an integer id key and a content");
      if (id >= limit)
        throw Error(cfg_path.string() + ": added_tokens_decoder[\"" + key + "\"] has token id " + key +
                    ", out of range (ids must be below " + std::to_string(limit) + " with " + std::to_string(n_base) +
                    " base tokens)");
      AddedToken a;
      a.id = id;
      a.content = entry["content"].get<std::string>();
      a.special = entry.value("special", true);
      a.lstrip = entry.value("lstrip", false);
      a.rstrip = entry.value("rstrip", false);
      a.single_word = entry.value("single_word", false);
      named.emplace_back(id, a);
    }
  }
  for (int32_t id = n_base; id < n_base + kReservedSpecialTokens; ++id) {
    AddedToken a;
    a.id = id;
    a.special = true;
    a.content = "<|reserved_token_" + std::to_string(id) + "|>";
    for (const auto& [nid, tok] : named)
      if (nid == id) a = tok;
    specials.push_back(a);
  }
  for (const auto& [nid, tok] : named)
    if (nid < n_base || nid >= n_base + kReservedSpecialTokens) specials.push_back(tok);
  for (const auto& a : specials) {
    st->set_token(a.id, a.content, a.content);
    st->ids_by_text[a.content] = a.id;
    st->raw_added.add(a);  // tiktoken matches special tokens on the raw text
  }

  // tiktoken encodes only what the pattern matches (the pattern covers every
  // character, but keep the semantics): keep matches, drop the gaps.
  st->pre.add_split(std::make_shared<const Regex>(kKimiPattern, file + " (Kimi pre-tokenizer pattern)"),
                    SplitBehavior::Removed, /*invert=*/true);
  st->model = std::make_unique<TiktokenModel>(std::move(ranks));
  apply_special_token_config(dir, *st, {}, {});
  return st;
}

}  // namespace strata::tok
