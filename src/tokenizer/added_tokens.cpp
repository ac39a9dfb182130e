#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/regex.h"
#include "tokenizer/utf8.h"

namespace strata::tok {

namespace {

// Decodes the code point that ends just before byte `end` (valid UTF-8).
char32_t code_point_before(std::string_view s, std::size_t end, std::size_t& start) {
  start = end - 1;
  while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  std::size_t i = start;
  return next_code_point(s, i);
}

// Word characters for single_word tokens: Rust's char::is_alphanumeric,
// which HF tokenizers uses (Alphabetic or Numeric). Only called next to a
// single_word match, so a one-character regex match is cheap enough.
bool is_word_char(char32_t c) {
  if (c < 0x80) return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  static const Regex word(R"([\p{Alphabetic}\p{N}])", "single_word boundary check");
  std::string s;
  append_utf8(s, c);
  std::vector<std::pair<std::size_t, std::size_t>> m;
  word.find_all(s, m);
  return !m.empty();
}

}  // namespace

int32_t AddedTokenMatcher::child(int32_t node, unsigned char b) const {
  const auto& ch = nodes_[node].children;
  auto it = std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char v) { return p.first < v; });
  return it != ch.end() && it->first == b ? it->second : -1;
}

void AddedTokenMatcher::add(const AddedToken& token) {
  if (token.content.empty()) return;
  int32_t node = 0;
  for (char c : token.content) {
    const auto b = static_cast<unsigned char>(c);
    int32_t next = child(node, b);
    if (next < 0) {
      next = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(Node{});
      auto& ch = nodes_[node].children;
      ch.insert(std::lower_bound(ch.begin(), ch.end(), b, [](const auto& p, unsigned char v) { return p.first < v; }),
                {b, next});
    }
    node = next;
  }
  if (nodes_[node].token >= 0) return;  // duplicate content: the first one wins
  nodes_[node].token = static_cast<int32_t>(tokens_.size());
  tokens_.push_back(token);
  first_byte_[static_cast<unsigned char>(token.content[0])] = true;
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, std::size_t pos, std::size_t& len) const {
  int32_t node = 0, found = -1;
  for (std::size_t i = pos; i < text.size(); ++i) {
    node = child(node, static_cast<unsigned char>(text[i]));
    if (node < 0) break;
    if (nodes_[node].token >= 0) {
      found = nodes_[node].token;
      len = i + 1 - pos;
    }
  }
  return found;
}

std::vector<AddedTokenMatcher::Segment> AddedTokenMatcher::split(std::string_view text) const {
  std::vector<Segment> out;
  std::size_t plain_start = 0;  // start of the pending ordinary segment
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t len = 0;
    const int32_t t = first_byte_[static_cast<unsigned char>(text[pos])] ? longest_at(text, pos, len) : -1;
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = tokens_[t];
    std::size_t begin = pos, end = pos + len;
    if (tok.single_word) {
      std::size_t prev_start = 0, next = end;
      const bool word_before = begin > 0 && is_word_char(code_point_before(text, begin, prev_start));
      const bool word_after = end < text.size() && is_word_char(next_code_point(text, next));
      if (word_before || word_after) {
        ++pos;
        continue;
      }
    }
    if (tok.lstrip) {
      std::size_t s = 0;
      while (begin > plain_start && is_unicode_whitespace(code_point_before(text, begin, s))) begin = s;
    }
    if (tok.rstrip) {
      for (std::size_t i = end; i < text.size();) {
        if (!is_unicode_whitespace(next_code_point(text, i))) break;
        end = i;
      }
    }
    if (begin > plain_start) out.push_back({plain_start, begin, -1});
    out.push_back({begin, end, tok.id});
    plain_start = pos = end;
  }
  if (plain_start < text.size()) out.push_back({plain_start, text.size(), -1});
  return out;
}

}  // namespace strata::tok
