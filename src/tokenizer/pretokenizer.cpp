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
  split_each(text, [&](std::string_view piece) {
    pieces.emplace_back(piece);
    return true;
  });
}

bool PreTokenizer::split_each(std::string_view text, const PieceFn& on_piece, std::size_t batch) const {
  if (text.empty()) return true;
  // Steps up to the first regex see the text as one piece: all they can do is
  // prefix it with a space.
  std::size_t first = 0;
  bool prefix_space = false;
  for (; first < steps_.size(); ++first) {
    prefix_space |= steps_[first].add_prefix_space;
    if (steps_[first].regex) break;
  }
  std::string prefixed;
  if (prefix_space && text.front() != ' ') {
    prefixed = " " + std::string(text);
    text = prefixed;
  }
  if (first == steps_.size()) return on_piece(text);
  const Step& step = steps_[first];

  std::vector<std::pair<std::size_t, std::size_t>> matches, relative;  // matches from `from` on
  std::size_t from = 0;  // the text before it has been handed on
  std::size_t flush_at = std::max<std::size_t>(batch, 1);
  // Splits [from, end of the last match) (or of the text, at its end) and
  // hands on every piece but the last, which a later match may still change.
  auto flush = [&](bool at_end) {
    const std::size_t end = at_end ? text.size() : matches.back().second;
    relative.clear();
    for (auto [b, e] : matches) relative.emplace_back(b - from, e - from);
    const auto kept = split_spans(end - from, relative, step.behavior, step.invert);
    const std::size_t done = at_end || kept.empty() ? kept.size() : kept.size() - 1;
    for (std::size_t i = 0; i < done; ++i)
      if (!split_rest(text.substr(from + kept[i].first, kept[i].second - kept[i].first), first + 1, on_piece))
        return false;
    const std::size_t next = done < kept.size() ? from + kept[done].first : end;
    std::erase_if(matches, [&](const auto& m) { return m.first < next; });
    from = next;
    // Matches a piece keeps waiting (a run that keeps growing) do not make every match a flush.
    flush_at = std::max(flush_at, 2 * matches.size());
    return true;
  };
  const bool whole = step.regex->find_each(text, [&](std::size_t b, std::size_t e) {
    matches.emplace_back(b, e);
    return matches.size() < flush_at || flush(false);
  });
  return whole && flush(true);
}

bool PreTokenizer::split_rest(std::string_view piece, std::size_t first, const PieceFn& on_piece) const {
  if (first == steps_.size()) return on_piece(piece);
  std::vector<std::string> current{std::string(piece)}, next;
  std::vector<std::pair<std::size_t, std::size_t>> matches;
  for (std::size_t i = first; i < steps_.size(); ++i) {
    const Step& step = steps_[i];
    next.clear();
    for (std::string& p : current) {
      if (step.add_prefix_space && p.front() != ' ') p.insert(p.begin(), ' ');
      if (!step.regex) {
        next.push_back(std::move(p));
        continue;
      }
      matches.clear();
      step.regex->find_all(p, matches);
      for (auto [b, e] : split_spans(p.size(), matches, step.behavior, step.invert)) next.emplace_back(p, b, e - b);
    }
    current.swap(next);
  }
  for (const auto& p : current)
    if (!on_piece(p)) return false;
  return true;
}

}  // namespace strata::tok
