#pragma once
// Minimal JSON text helpers for the investigation reports. Hand-written because the project has no JSON
// library among its dependencies and these reports only write flat objects of strings and numbers.
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "report/json_writer.hpp"

namespace mhc::investigate::json {

// A JSON string: the same escaping as the compare reports (valid UTF-8, RFC 8259 escapes).
inline std::string str(const std::string& s) { return report::JsonWriter::escape(s); }

// Shortest round-trip decimal; JSON has no NaN/Infinity, so those become strings.
inline std::string num(double v) {
  if (std::isnan(v)) return "\"nan\"";
  if (std::isinf(v)) return v > 0 ? "\"inf\"" : "\"-inf\"";
  return fmt::format("{}", v);
}

inline std::string num(int64_t v) { return fmt::format("{}", v); }
inline std::string num(int v) { return fmt::format("{}", v); }
inline std::string boolean(bool v) { return v ? "true" : "false"; }

}  // namespace mhc::investigate::json
