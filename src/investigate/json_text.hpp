#pragma once
// Minimal JSON text helpers for the investigation reports. Hand-written because the project has no JSON
// library among its dependencies and these reports only write flat objects of strings and numbers.
#include <cmath>
#include <cstdint>
#include <string>

#include <fmt/format.h>

namespace mhc::investigate::json {

inline std::string str(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\u{:04x}", c);
        else out += c;
    }
  }
  return out + "\"";
}

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
