#pragma once
// Errors are values until the edge (STYLE): library code throws InputError with one human sentence
// (what was wrong, in which file and dataset, what was expected); apps/ maps it to exit code 2.
#include <stdexcept>
#include <string>

namespace mhc {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& sentence) : std::runtime_error(sentence) {}
};

// The system refused a write or read (disk full, file too large, an I/O error): not a bug in mhcdiff, so it is
// reported like bad input, one sentence naming the file and the system's reason, exit code 2.
class IoError : public InputError {
 public:
  using InputError::InputError;
};

}  // namespace mhc
