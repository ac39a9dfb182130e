#include "tokenizer/pretokenizer.h"

#include <algorithm>

#include "util/error.h"

namespace strata::tok {

const char* const kGpt2Pattern = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_split_behavior(std::string_view name, std::string_view origin) {
  if (name == "Removed") return SplitBehavior::Removed;
  if (name == "Isolated") return SplitBehavior::Isolated;
  if (name == "MergedWithPrevious") return SplitBehavior::MergedWithPrevious;
  if (name == "MergedWithNext") return SplitBehavior::MergedWithNext;
  if (name == "Contiguous") return SplitBehavior::Contiguous;
  throw Error(std::string(origin) + ": unknown split behavior \"" + std::string(name) + "\"");
}

std::vector<std::pair<std::size_t, std::size_t>> split_spans(
    std::size_t size, const std::vector<std::pair<std::size_t, std::size_t>>& matches, SplitBehavior behavior,
    bool invert) {
  struct Span {
    std::size_t begin, end;
    bool is_match;
  };
  // The whole text as alternating gap / match spans.
  std::vector<Span> spans;
  std::size_t prev = 0;
  for (auto [b, e] : matches) {
    if (b > prev) spans.push_back({prev, b, invert});
    spans.push_back({b, e, !invert});
    prev = e;
  }
  if (prev < size || spans.empty()) spans.push_back({prev, size, invert});

  std::vector<Span> kept;
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::Isolated:
      kept = spans;
      break;
    case SplitBehavior::Removed:
      for (const auto& s : spans)
        if (!s.is_match) kept.push_back(s);
      break;
    case SplitBehavior::MergedWithPrevious:
      // A delimiter joins the span before it (unless that was a delimiter too).
      for (const auto& s : spans) {
        if (s.is_match && !previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
    case SplitBehavior::MergedWithNext:
      // Mirror image: walk backwards, a delimiter joins the span after it.
      for (auto it = spans.rbegin(); it != spans.rend(); ++it) {
        if (it->is_match && !previous_match && !kept.empty())
          kept.back().begin = it->begin;
        else
          kept.push_back(*it);
        previous_match = it->is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
    case SplitBehavior::Contiguous:
      // Runs of spans of the same kind fuse.
      for (const auto& s : spans) {
        if (s.is_match == previous_match && !kept.empty())
          kept.back().end = s.end;
        else
          kept.push_back(s);
        previous_match = s.is_match;
      }
      break;
  }
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (const auto& s : kept)
    if (s.end > s.begin) out.emplace_back(s.begin, s.end);
  return out;
}

void PreTokenizer::add_split(std::shared_ptr<const Regex> regex, SplitBehavior behavior, bool invert) {
  steps_.push_back(Step{std::move(regex), behavior, invert, false});
}

void PreTokenizer::add_byte_level(bool add_prefix_space, bool use_regex) {
  static const auto gpt2 = std::make_shared<const Regex>(kGpt2Pattern, "ByteLevel pre-tokenizer (GPT-2 pattern)");
  steps_.push_back(Step{use_regex ? gpt2 : nullptr, SplitBehavior::Isolated, false, add_prefix_space});
}

void PreTokenizer::split(std::string_view text, std::vector<std::string>& pieces) const {
  if (text.empty()) return;
  std::vector<std::string> current{std::string(text)}, next;
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  for (const Step& step : steps_) {
    next.clear();
    for (std::string& piece : current) {
      if (step.add_prefix_space && piece.front() != ' ') piece.insert(piece.begin(), ' ');
      if (!step.regex) {
        next.push_back(std::move(piece));
        continue;
      }
      matches.clear();
      step.regex->find_all(piece, matches);
      for (auto [b, e] : split_spans(piece.size(), matches, step.behavior, step.invert))
        next.emplace_back(piece, b, e - b);
    }
    current.swap(next);
  }
  for (auto& p : current) pieces.push_back(std::move(p));
}

}  // namespace strata::tok
