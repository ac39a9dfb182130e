#include "server/reasoning_splitter.h"

#include <algorithm>
#include <vector>

#include "runtime/text_stream.h"

namespace strata {

ReasoningSplitter::Mode ReasoningSplitter::mode_for(const std::string& tmpl) {
  if (tmpl.find("<|channel|>") != std::string::npos) return Mode::Harmony;
  if (tmpl.find("<think>") != std::string::npos || tmpl.find("</think>") != std::string::npos) return Mode::Think;
  return Mode::None;
}

bool ReasoningSplitter::starts_in_reasoning(Mode mode, const std::string& rendered) {
  auto open_after_close = [&](const std::string& open, const std::string& close) {
    const size_t o = rendered.rfind(open), c = rendered.rfind(close);
    return o != std::string::npos && (c == std::string::npos || c < o);
  };
  if (mode == Mode::Xtml) return open_after_close("<|open|>think<|sep|>", "<|close|>think<|sep|>");
  return open_after_close("<think>", "</think>");
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
    if (mode_ == Mode::Xtml) {
      if (!drain_xtml(out, final)) break;
      continue;
    }
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

bool ReasoningSplitter::drain_xtml(SplitText& out, bool final) {
  auto emit = [&](const std::string& s) { (reasoning_ ? out.reasoning : out.content) += s; };
  static const std::vector<std::string> markers = {"<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"};
  const size_t ctl = buf_.find("<|");
  if (ctl != 0) {
    // Text up to the next possible marker; a tail that may start one waits.
    const size_t upto = ctl == std::string::npos ? buf_.size() : ctl;
    const size_t hold = !final && ctl == std::string::npos ? partial_match_tail(buf_, 0, markers) : 0;
    emit(buf_.substr(0, upto - hold));
    buf_.erase(0, upto - hold);
    return hold == 0;
  }
  const auto known = std::find_if(markers.begin(), markers.end(),
                                   [&](const std::string& m) { return buf_.compare(0, m.size(), m) == 0; });
  if (known == markers.end()) {
    const bool prefix = std::any_of(markers.begin(), markers.end(), [&](const std::string& m) {
      return buf_.size() < m.size() && m.compare(0, buf_.size(), buf_) == 0;
    });
    if (prefix && !final) return false;  // the rest of a marker is still to come
    emit(buf_.substr(0, 2));             // "<|" that starts no marker is text
    buf_.erase(0, 2);
    return true;
  }
  if (*known == "<|open|>" || *known == "<|close|>") {
    // "<|open|>NAME attrs<|sep|>": the block's name decides where text goes.
    const size_t sep = buf_.find("<|sep|>", known->size());
    if (sep == std::string::npos) {
      if (final) buf_.clear();
      return false;
    }
    const std::string tag = buf_.substr(known->size(), sep - known->size());
    const std::string name = tag.substr(0, tag.find(' '));
    if (*known == "<|open|>") reasoning_ = name == "think";
    if (*known == "<|close|>" && name == "think") reasoning_ = false;
    buf_.erase(0, sep + 7);
    return true;
  }
  buf_.erase(0, known->size());  // <|sep|>, <|end_of_msg|>
  return true;
}

}  // namespace strata
