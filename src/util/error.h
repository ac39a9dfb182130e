#pragma once
// One exception type for every user-facing failure: bad files, bad configs,
// bad arguments. The CLI prints what() as a single line and exits non-zero,
// so messages must name the file (or input) and the problem.
#include <stdexcept>
#include <string>

namespace strata {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// A message with every `path` it names replaced by `shown`: an error about a
// temporary copy (a remote model's headers) names what the copy stands for.
inline std::string renamed_in_message(std::string message, const std::string& path, const std::string& shown) {
  for (size_t at = message.find(path); !path.empty() && at != std::string::npos;
       at = message.find(path, at + shown.size()))
    message.replace(at, path.size(), shown);
  return message;
}

}  // namespace strata
