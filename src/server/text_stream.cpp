#include "server/text_stream.h"

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

// Length of the longest suffix of `s` (from `from`) that is a proper prefix of one of `needles`.
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

}  // namespace

TextStream::TextStream(const Tokenizer& tok, std::vector<std::string> stops) : tok_(tok) {
  for (auto& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

std::string TextStream::add(int32_t token) {
  if (stopped_) return {};
  ids_.push_back(token);
  return take(false);
}

std::string TextStream::flush() { return stopped_ ? std::string() : take(true); }

std::string TextStream::take(bool final) {
  const std::string text = tok_.decode(ids_);
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
    end = std::max(sent_, end - std::min(end, partial_match_tail(text.substr(0, end), sent_, stops_)));
  }
  if (end <= sent_) return {};
  std::string out = text.substr(sent_, end - sent_);
  sent_ = end;
  return out;
}

ReasoningSplitter::Mode ReasoningSplitter::mode_for(const std::string& tmpl) {
  if (tmpl.find("<|channel|>") != std::string::npos) return Mode::Harmony;
  if (tmpl.find("<think>") != std::string::npos || tmpl.find("</think>") != std::string::npos) return Mode::Think;
  return Mode::None;
}

ReasoningSplitter::ReasoningSplitter(Mode mode, bool starts_in_reasoning)
    : mode_(mode), reasoning_(mode == Mode::Harmony ? true : starts_in_reasoning) {}

SplitText ReasoningSplitter::add(const std::string& text) {
  if (mode_ == Mode::None) return {{}, text};
  buf_ += text;
  return drain(false);
}

SplitText ReasoningSplitter::flush() { return mode_ == Mode::None ? SplitText{} : drain(true); }

SplitText ReasoningSplitter::drain(bool final) {
  SplitText out;
  auto emit = [&](const std::string& s) { (reasoning_ ? out.reasoning : out.content) += s; };
  static const std::vector<std::string> think_tags = {"<think>", "</think>"};
  while (!buf_.empty()) {
    if (mode_ == Mode::Think) {
      const size_t open = buf_.find("<think>"), close = buf_.find("</think>");
      const size_t at = std::min(open, close);
      if (at == std::string::npos) {
        const size_t hold = final ? 0 : partial_match_tail(buf_, 0, think_tags);
        emit(buf_.substr(0, buf_.size() - hold));
        buf_.erase(0, buf_.size() - hold);
        break;
      }
      emit(buf_.substr(0, at));
      reasoning_ = at == open;
      buf_.erase(0, at + (at == open ? 7 : 8));
      continue;
    }
    // Harmony: text up to the next control token belongs to the current channel.
    const size_t ctl = buf_.find("<|");
    if (ctl == std::string::npos || ctl > 0) {
      const size_t upto = ctl == std::string::npos ? buf_.size() : ctl;
      const size_t hold = (!final && ctl == std::string::npos && buf_.back() == '<') ? 1 : 0;
      emit(buf_.substr(0, upto - hold));
      buf_.erase(0, upto - hold);
      if (hold) break;
      continue;
    }
    const size_t end = buf_.find("|>");
    if (end == std::string::npos) {
      if (final) buf_.clear();
      break;
    }
    const std::string tag = buf_.substr(0, end + 2);
    buf_.erase(0, end + 2);
    if (tag == "<|channel|>") {
      // The channel name runs to <|message|> (or a space: "commentary to=...").
      const size_t msg = buf_.find("<|message|>");
      if (msg == std::string::npos) {
        buf_.insert(0, tag);  // wait for the rest
        if (final) buf_.clear();
        break;
      }
      const std::string name = buf_.substr(0, msg);
      reasoning_ = name.rfind("final", 0) != 0;
      buf_.erase(0, msg + 11);
    }
    // <|start|>, <|end|>, <|return|>, <|message|>, role names: dropped
    if (tag == "<|start|>") {
      const size_t next = buf_.find("<|");
      if (next == std::string::npos) {
        if (!final) {
          buf_.insert(0, tag);
          break;
        }
        buf_.clear();
      } else {
        buf_.erase(0, next);  // the role name ("assistant")
      }
    }
  }
  return out;
}

}  // namespace strata
