#pragma once
// A number that records every operation done to it, so that `explain` can show each rounding step of a
// policy by running the ONE definition of the arithmetic (mhc::forward_value<T>) with T = Traced<F>:
// op_mul/op_add/op_fma/op_round_bf16 below are found by argument-dependent lookup and do exactly what the
// float/double overloads in kernels/operator_math.hpp do, plus a log entry. Host only.
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "kernels/operator_math.hpp"
#include "numerics/exact_sum.hpp"

namespace mhc::investigate {

// One operation as it happened: its result, the format it was rounded to, and what the rounding lost
// (exact result − rounded result; 0 when the operation was exact).
struct TraceStep {
  std::string result;            // "t3"
  std::string expr;              // "RN32(t2 + c1·r1)"
  const char* format = "fp32";   // fp32, fp64, bf16: the format of the result
  double value = 0.0;            // the rounded result
  double lost = 0.0;             // exact − rounded (approximate to binary64 where the error is not a double)
};

// Where traced operations are logged, and how input values are named (set by the explainer around one
// forward_value call; thread-local so concurrent explains do not mix).
struct TraceContext {
  std::vector<TraceStep> steps;
  std::vector<std::pair<double, std::string>> names;  // input value -> name; a value with several names has none
  int next_id = 1;

  std::string name_of(double v) const;
  static TraceContext*& current();
};

template <class F>
struct Traced {
  F v{};
  int id = 0;  // 0: an input value, named by TraceContext::names; else the step "t<id>" that produced it
  // A value the arithmetic made up (the zero a sum starts from), shown as a number: named by its value, the +0 of an
  // accumulator read as an input that happens to be +0 ("RN32(r0 + t1)").
  bool constant = false;

  Traced() = default;
  explicit Traced(float f) : v(static_cast<F>(f)) {}
  explicit Traced(double d) : v(static_cast<F>(d)) {}

  std::string label() const {
    if (id > 0) return fmt::format("t{}", id);
    if (constant) return std::signbit(static_cast<double>(v)) ? fmt::format("({})", static_cast<double>(v))
                                                              : fmt::format("{}", static_cast<double>(v));
    TraceContext* ctx = TraceContext::current();
    return ctx ? ctx->name_of(static_cast<double>(v)) : std::to_string(v);
  }
};

namespace detail {

template <class F>
constexpr const char* rn_name() { return sizeof(F) == 4 ? "RN32" : "RN64"; }
template <class F>
constexpr const char* format_name() { return sizeof(F) == 4 ? "fp32" : "fp64"; }

// exact − rounded for a sum of terms that are exact doubles (products of floats, floats, the result). Finite terms
// whose rounded sum overflowed lost everything beyond the range: exact − (±inf) = ∓inf (the accumulator cannot
// take an infinity; a fused step used to report its exact value here).
inline double exact_minus(std::initializer_list<double> terms, double rounded) {
  if (std::isinf(rounded)) return -rounded;
  ExactAccumulator acc;
  for (double t : terms) acc.add(t);
  acc.add(-rounded);
  return acc.hi;
}

template <class F>
Traced<F> record(F value, const std::string& expr, const char* format, double lost) {
  Traced<F> t;
  t.v = value;
  TraceContext* ctx = TraceContext::current();
  if (!ctx) return t;
  t.id = ctx->next_id++;
  ctx->steps.push_back({fmt::format("t{}", t.id), expr, format, static_cast<double>(value), lost});
  return t;
}

// IEEE arithmetic on an infinity or a NaN is exact (the result is the limit, or NaN): nothing is lost, and the
// formulas below would give NaN or a meaningless finite difference. An overflow of finite operands does lose
// (exact − ±inf = ∓inf), and those formulas say so.
inline bool all_finite(std::initializer_list<double> operands) {
  for (double v : operands)
    if (!std::isfinite(v)) return false;
  return true;
}

// The error of a binary64 product, exactly: a·b − RN64(a·b) = fma(a, b, −RN64(a·b)).
inline double product_error(double a, double b, double p) { return std::fma(a, b, -p); }

inline std::string fmt_expr(const char* rounding, const std::string& e) { return fmt::format("{}({})", rounding, e); }

}  // namespace detail

template <class F>
Traced<F> op_mul(Traced<F> a, Traced<F> b) {
  const F r = mhc::op_mul(a.v, b.v);
  double lost = 0.0;  // on an infinite or NaN operand the result is exact
  if (detail::all_finite({double(a.v), double(b.v)})) {
    if constexpr (sizeof(F) == 4) lost = double(a.v) * double(b.v) - double(r);  // both exact in binary64
    else lost = detail::product_error(a.v, b.v, r);
  }
  return detail::record<F>(r, detail::fmt_expr(detail::rn_name<F>(), a.label() + "·" + b.label()), detail::format_name<F>(), lost);
}

template <class F>
Traced<F> op_add(Traced<F> a, Traced<F> b) {
  const F r = mhc::op_add(a.v, b.v);
  const double lost =
      detail::all_finite({double(a.v), double(b.v)}) ? detail::exact_minus({double(a.v), double(b.v)}, double(r)) : 0.0;
  return detail::record<F>(r, detail::fmt_expr(detail::rn_name<F>(), a.label() + " + " + b.label()), detail::format_name<F>(), lost);
}

template <class F>
Traced<F> op_fma(Traced<F> a, Traced<F> b, Traced<F> c) {
  const F r = mhc::op_fma(a.v, b.v, c.v);
  double lost = 0.0;  // on an infinite or NaN operand the result is exact
  if (detail::all_finite({double(a.v), double(b.v), double(c.v)})) {
    if constexpr (sizeof(F) == 4) {
      lost = detail::exact_minus({double(a.v) * double(b.v), double(c.v)}, double(r));
    } else {
      const double ph = a.v * b.v, pl = detail::product_error(a.v, b.v, ph);
      lost = detail::exact_minus({ph, pl, c.v}, r);
    }
  }
  return detail::record<F>(r, detail::fmt_expr(detail::rn_name<F>(), a.label() + "·" + b.label() + " + " + c.label() + "  (fused)"),
                           detail::format_name<F>(), lost);
}

template <class F>
Traced<F> op_round_bf16(Traced<F> a) {
  const F r = mhc::op_round_bf16(a.v);
  const double lost = detail::all_finite({double(a.v)}) ? double(a.v) - double(r) : 0.0;
  return detail::record<F>(r, "RNb(" + a.label() + ")", "bf16", lost);
}

}  // namespace mhc::investigate

namespace mhc {

// The zero a traced sum starts from is a constant of the arithmetic, not an input.
template <>
inline investigate::Traced<float> zero_accumulator<investigate::Traced<float>>() {
  investigate::Traced<float> zero(0.0f);
  zero.constant = true;
  return zero;
}
template <>
inline investigate::Traced<double> zero_accumulator<investigate::Traced<double>>() {
  investigate::Traced<double> zero(0.0);
  zero.constant = true;
  return zero;
}

}  // namespace mhc
