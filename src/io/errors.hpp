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

}  // namespace mhc
