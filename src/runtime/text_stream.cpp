#include "runtime/text_stream.h"

#include <algorithm>

#include "tokenizer/tokenizer.h"

namespace strata {

namespace {

// Bytes at the end of `s` that are an incomplete UTF-8 character.
size_t incomplete_utf8_tail(const std::string& s) {
  const size_t n = s.size();
  for (size_t back = 1; back <= 4 && back <= n; ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // continuation byte: keep looking for the lead
    const size_t need = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
    return need > back ? back : 0;
  }
  return 0;
}

}  // namespace

size_t partial_match_tail(const std::string& s, size_t from, const std::vector<std::string>& needles) {
  size_t best = 0;
  for (const auto& nd : needles)
    for (size_t k = std::min(nd.size() - 1, s.size() - from); k > best; --k)
      if (s.compare(s.size() - k, k, nd, 0, k) == 0) {
        best = k;
        break;
      }
  return best;
}

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stops) : tok_(tok) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string TextStream::add(int32_t token) {
  if (stopped_) return {};
  // Decoding is per-token bytes, concatenated: each token is decoded once, so
  // a token costs the same at the end of a long output as at its start. An id
  // the tokenizer lacks (a model row past its vocabulary) has no text, as
  // Hugging Face tokenizers' decode skips ids it does not know and `strata
  // generate` prints: the token still counts, its text is empty.
  if (tok_.has_token(token)) text_ += tok_.decode({token});
  return take(false);
}

std::string TextStream::flush() { return stopped_ ? std::string() : take(true); }

std::string TextStream::take(bool final) {
  const std::string& text = text_;
  // A stop string anywhere in the unsent part (it may start in held-back text).
  size_t cut = std::string::npos;
  for (const auto& s : stops_) {
    const size_t from = sent_ > s.size() ? sent_ - s.size() : 0;
    const size_t at = text.find(s, from);
    if (at != std::string::npos && at + s.size() > sent_) cut = std::min(cut, at);
  }
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = cut > sent_ ? text.substr(sent_, cut - sent_) : std::string();
    sent_ = text.size();
    return out;
  }
  size_t end = text.size();
  if (!final) {
    end -= incomplete_utf8_tail(text);
    if (end > sent_) end -= partial_match_tail(text.substr(sent_, end - sent_), 0, stops_);
  }
  if (end <= sent_) return {};
  std::string out = text.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

}  // namespace strata
