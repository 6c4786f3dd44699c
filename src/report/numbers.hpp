#pragma once
// How numbers read in every human report (text, Markdown, gate summaries): counts with thousands separators,
// metrics to 4 significant digits, element values in their shortest round-trip form, infinities spelled out.
#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "metrics/comparison.hpp"

namespace mhc::report {

// 16777216 → "16,777,216"; every digit up to 2^64 − 1 (a count limit such as --max-mismatch, a ULP distance).
inline std::string unsigned_count(uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

inline std::string count(int64_t n) {
  // The magnitude in unsigned arithmetic: -n overflows for INT64_MIN.
  const uint64_t magnitude = n < 0 ? uint64_t{0} - static_cast<uint64_t>(n) : static_cast<uint64_t>(n);
  std::string out = n < 0 ? "-" : "";
  out += unsigned_count(magnitude);
  return out;
}

// A metric: 4 significant digits, "inf" / "nan" spelled out.
inline std::string metric(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return fmt::format("{:.4g}", v);
}

// A percentage of a fraction, never rounding a non-zero fraction to "0%" nor a fraction below 1 to "100%"
// (16,777,215 of 16,777,216 elements is not all of them).
inline std::string percent(double fraction) {
  if (fraction == 0.0) return "0%";
  const double p = 100.0 * fraction;
  if (p < 0.0001) return "<0.0001%";
  const std::string text = fmt::format("{:.4g}%", p);
  return fraction < 1.0 && text == "100%" ? ">99.99%" : text;
}

// An element's value in its own format's shortest round-trip spelling (bf16 and f32 values print as floats).
inline std::string value(double v, metrics::Format f) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (f == metrics::Format::f64) return fmt::format("{}", v);
  return fmt::format("{}", static_cast<float>(v));
}

inline std::string ulp(uint64_t u) { return u == metrics::kInfiniteUlp ? "inf" : fmt::format("{}", u); }

}  // namespace mhc::report
