#include "investigate/explain.hpp"

#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "investigate/json_text.hpp"
#include "io/store.hpp"
#include "kernels/operator_math.hpp"
#include "metrics/truth.hpp"
#include "numerics/exact_fallback.hpp"

namespace mhc::investigate {

TraceContext*& TraceContext::current() {
  thread_local TraceContext* ctx = nullptr;
  return ctx;
}

std::string TraceContext::name_of(double v) const {
  // A value that no input, or several inputs, have is shown as a number: a name could mislead.
  const std::string number = v < 0 ? fmt::format("({})", v) : fmt::format("{}", v);
  std::string found;
  for (const auto& [value, name] : names) {
    if (value != v || std::signbit(value) != std::signbit(v)) continue;
    if (!found.empty() && found != name) return number;
    found = name;
  }
  return found.empty() ? number : found;
}

double bf16_ulp(double v) {
  const double a = std::fabs(v);
  if (!(a >= 0x1p-126) || std::isinf(a)) return 0x1p-133;
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

ElementInputs element_inputs(const InputsView& in, int64_t s, int ho, int64_t d) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  ElementInputs e;
  e.H = H;
  e.p = in.post[s * H + ho];
  e.x = bf16_to_float(in.x[s * D + d]);
  for (int k = 0; k < H; ++k) {
    e.c[k] = in.comb[(s * H + k) * H + ho];
    e.r[k] = bf16_to_float(in.residual[(s * H + k) * D + d]);
  }
  return e;
}

namespace {

// Installs a context for the duration of one traced evaluation.
struct ScopedTrace {
  TraceContext ctx;
  ScopedTrace() { TraceContext::current() = &ctx; }
  ~ScopedTrace() { TraceContext::current() = nullptr; }
};

void name_inputs(TraceContext& ctx, const ElementInputs& in, bool coef_bf16) {
  ctx.names.emplace_back(in.p, "p");
  ctx.names.emplace_back(in.x, "x");
  for (int k = 0; k < in.H; ++k) {
    ctx.names.emplace_back(in.c[k], fmt::format("c{}", k));
    ctx.names.emplace_back(in.r[k], fmt::format("r{}", k));
  }
  if (!coef_bf16) return;
  if (rnb(in.p) != in.p) ctx.names.emplace_back(rnb(in.p), "pb");
  for (int k = 0; k < in.H; ++k)
    if (rnb(in.c[k]) != in.c[k]) ctx.names.emplace_back(rnb(in.c[k]), fmt::format("cb{}", k));
}

void coefficient_steps(std::vector<TraceStep>& steps, const ElementInputs& in) {
  auto step = [&](const std::string& name, const std::string& of, float v) {
    const float r = rnb(v);
    // Rounding an infinity or a NaN loses nothing (inf − inf would say NaN), as in detail::all_finite.
    steps.push_back({name, "RNb(" + of + ")", "bf16", r, std::isfinite(v) ? double(v) - double(r) : 0.0});
  };
  step("pb", "p", in.p);
  for (int k = 0; k < in.H; ++k) step(fmt::format("cb{}", k), fmt::format("c{}", k), in.c[k]);
}

template <class F>
PolicyTrace trace_rounded(const Policy& policy, const ElementInputs& in) {
  PolicyTrace t;
  t.policy = policy;
  const bool coef_bf16 = policy.desc.coef == CoefRounding::bf16;
  if (coef_bf16) coefficient_steps(t.steps, in);
  ScopedTrace scope;
  name_inputs(scope.ctx, in, coef_bf16);
  const Traced<F> v = forward_value<Traced<F>>(policy.desc, in.p, in.x, in.c, in.r, in.H);
  for (TraceStep& s : scope.ctx.steps) t.steps.push_back(std::move(s));
  t.out = round_to_bf16_rne(v.v);
  const double out = bf16_to_float(t.out);
  t.steps.push_back({"out", "RNb(" + v.label() + ")", "bf16", out, std::isfinite(double(v.v)) ? double(v.v) - out : 0.0});
  if constexpr (sizeof(F) == 8) {
    t.has_f64 = true;
    t.out_f64 = v.v;
  }
  return t;
}

}  // namespace

Explanation explain_element(const ElementInputs& in, const ElementAt& at, const std::vector<Policy>& policies) {
  Explanation e;
  e.at = at;
  e.in = in;
  ExactAccumulator acc;
  e.terms.push_back(double(in.p) * double(in.x));
  for (int k = 0; k < in.H; ++k) e.terms.push_back(double(in.c[k]) * double(in.r[k]));
  for (double t : e.terms) acc.add(t);
  ExactRounded exact = acc.result();
  double exact_lo = acc.lo;
  if (!exact.certified) {
    exact = exact_sum_multiprecision(e.terms);
    e.exact_fallback = true;
    // The fallback gives RN64 alone; what RN64 dropped is the exact sum of the terms and −RN64, rounded (shown
    // to 4 digits as the t step's loss, and added to RN64 for the errors).
    std::vector<double> remainder = e.terms;
    remainder.push_back(-exact.rn64);
    exact_lo = std::isfinite(exact.rn64) ? exact_sum_multiprecision(remainder).rn64 : 0.0;
  }
  e.exact_rn64 = exact.rn64;
  e.exact_bf16 = exact.bf16();
  double magnitude = 0.0;
  for (double t : e.terms) magnitude += std::fabs(t);
  // κ is undefined for non-finite terms (inf / inf): a plain NaN, so the text reads "nan", not x86's "-nan".
  e.kappa = !std::isfinite(e.exact_rn64) ? std::numeric_limits<double>::quiet_NaN()
            : e.exact_rn64 == 0.0       ? std::numeric_limits<double>::infinity()
                                        : metrics::cancellation_kappa(magnitude, e.exact_rn64);

  const double ulp = bf16_ulp(e.exact_rn64);
  for (const Policy& p : policies) {
    PolicyTrace t;
    switch (p.desc.accumulator) {
      case Accumulator::fp32: t = trace_rounded<float>(p, in); break;
      case Accumulator::fp64: t = trace_rounded<double>(p, in); break;
      case Accumulator::exact: {
        t.policy = p;
        // The exact sum is shown as its RN64 (binary64 bits), with what that rounding dropped as the step's loss:
        // "exact" beside a rounded value read as though nothing had been lost.
        t.steps.push_back({"t", "RN64(p·x + Σ c_k·r_k)  (of the exact sum)", "fp64", e.exact_rn64,
                           std::isfinite(e.exact_rn64) ? exact_lo : 0.0});
        t.out = e.exact_bf16;
        t.steps.push_back({"out", "RNb(p·x + Σ c_k·r_k)  (rounded once)", "bf16", double(bf16_to_float(t.out)),
                           std::isfinite(e.exact_rn64) ? (e.exact_rn64 - double(bf16_to_float(t.out))) + exact_lo : 0.0});
        t.has_f64 = true;
        t.out_f64 = e.exact_rn64;
        break;
      }
    }
    const double y = bf16_to_float(t.out);
    // Values, as compare's not_correctly_rounded counts them (docs/metrics.md): either zero is the correct rounding
    // of an exact 0 (compare reports ±0 pairs on their own); NaN is correct for a NaN truth.
    t.correctly_rounded = y == bf16_to_float(e.exact_bf16) || (bf16_is_nan(t.out) && bf16_is_nan(e.exact_bf16));
    // Against a non-finite value (or giving one) an error is 0 when the bits agree, else infinitely many ULP (as
    // compare counts NaN and Inf, SPEC §5); inf − inf would say NaN.
    if (!std::isfinite(y) || !std::isfinite(e.exact_rn64))
      t.error_ulps = t.correctly_rounded ? 0.0 : std::numeric_limits<double>::infinity();
    else
      t.error_ulps = std::fabs((y - e.exact_rn64) - exact_lo) / ulp;
    e.policies.push_back(std::move(t));
  }
  return e;
}

// ---- Reports -----------------------------------------------------------------------------------------

namespace {

std::string hex_bits(const char* format, double v) {
  const std::string f = format;
  if (f == "bf16") return fmt::format("0x{:04x}", round_to_bf16_rne(static_cast<float>(v)));
  if (f == "fp32") return fmt::format("0x{:08x}", float_bits(static_cast<float>(v)));
  return fmt::format("0x{:016x}", double_bits(v));
}

std::string value_text(const char* format, double v) {
  const std::string f = format;
  if (f == "fp32" || f == "bf16") return fmt::format("{}", static_cast<float>(v));
  return fmt::format("{}", v);
}

// What the census (docs/metrics.md) makes of this element at its default threshold: a case needs t ≠ 0, so an
// exact zero (κ = inf) is never one; a policy that gives it a non-zero value makes it a ghost.
std::string census_note(const Explanation& e) {
  if (e.exact_rn64 == 0.0) return "  (an exact zero: not a cancellation case; a non-zero value here is a ghost)";
  if (e.kappa >= metrics::kDefaultCensusThreshold)
    return fmt::format("  (a cancellation case: κ ≥ {})", metrics::kDefaultCensusThreshold);
  return "";
}

// Where each input of the element is stored in the file: the token unravelled over the stored batch dims (s itself
// without them), and comb's two stream indices in the stored order. The text and the JSON both name inputs by these.
struct StoredIndices {
  std::vector<int64_t> token, p, x;
  std::vector<std::vector<int64_t>> c, r;  // per stream k
};

StoredIndices stored_indices(const Explanation& e) {
  StoredIndices ix;
  ix.token = io::unravel_index(e.at.s, e.batch_dims);
  if (ix.token.empty()) ix.token = {e.at.s};
  auto at = [&](std::initializer_list<int64_t> rest) {
    std::vector<int64_t> v = ix.token;
    v.insert(v.end(), rest);
    return v;
  };
  ix.p = at({e.at.ho});
  ix.x = at({e.at.d});
  for (int k = 0; k < e.in.H; ++k) {
    ix.c.push_back(e.comb_dst_src ? at({e.at.ho, k}) : at({k, e.at.ho}));
    ix.r.push_back(at({k, e.at.d}));
  }
  return ix;
}

std::string joined(const std::vector<int64_t>& v) { return fmt::format("{}", fmt::join(v, ",")); }

}  // namespace

std::string format_explanation_text(const Explanation& e) {
  const ElementInputs& in = e.in;
  const StoredIndices ix = stored_indices(e);
  std::string out = fmt::format("element s={} ho={} d={}  (H={}{}{})\n\ninputs  (indices as stored in the file)\n",
                                e.at.s, e.at.ho, e.at.d, in.H,
                                e.batch_dims.empty()
                                    ? ""
                                    : fmt::format("; token [{}] of batch dims [{}]", joined(ix.token), joined(e.batch_dims)),
                                e.comb_dst_src ? "; comb stored dst,src" : "");
  auto input_line = [&](const std::string& name, const std::string& where, const char* format, double v) {
    out += fmt::format("  {:<4} = {:<22} = {:<16} {} {}\n", name, where, value_text(format, v), format, hex_bits(format, v));
  };
  input_line("p", fmt::format("post[{}]", joined(ix.p)), "fp32", in.p);
  input_line("x", fmt::format("x[{}]", joined(ix.x)), "bf16", in.x);
  for (int k = 0; k < in.H; ++k)
    input_line(fmt::format("c{}", k), fmt::format("comb[{}]", joined(ix.c[k])), "fp32", in.c[k]);
  for (int k = 0; k < in.H; ++k)
    input_line(fmt::format("r{}", k), fmt::format("residual[{}]", joined(ix.r[k])), "bf16", in.r[k]);

  out += "\nexact\n";
  out += fmt::format("  terms: p·x = {}", e.terms[0]);
  for (int k = 0; k < in.H; ++k) out += fmt::format(", c{}·r{} = {}", k, k, e.terms[size_t(k) + 1]);
  out += fmt::format("\n  value = {} (RN64){}\n  RNb   = {} bf16 0x{:04x}\n  kappa = {:.4g}{}\n", e.exact_rn64,
                     e.exact_fallback ? ", via the multiprecision fallback" : "", bf16_to_float(e.exact_bf16), e.exact_bf16,
                     e.kappa, census_note(e));

  for (const PolicyTrace& t : e.policies) {
    out += fmt::format("\npolicy {}  [{}]\n", t.policy.name, describe(t.policy.desc));
    for (const TraceStep& s : t.steps) {
      std::string lost = s.lost == 0.0 ? "exact" : fmt::format("lost {:+.3e}", s.lost);
      out += fmt::format("  {:<4} = {:<44} = {:<16} {:<5} {:<18} {}\n", s.result, s.expr, value_text(s.format, s.value),
                         s.format, hex_bits(s.format, s.value), lost);
    }
    out += fmt::format("  error: {:.3g} ULP of the truth{}\n", t.error_ulps,
                       t.correctly_rounded ? " (correctly rounded)" : " (NOT correctly rounded)");
  }

  out += "\nsummary\n";
  for (const PolicyTrace& t : e.policies)
    out += fmt::format("  {:<20} {:<14} 0x{:04x}  {:>8.3g} ULP{}\n", t.policy.name, fmt::format("{}", bf16_to_float(t.out)),
                       t.out, t.error_ulps, t.correctly_rounded ? "" : "  *");
  return out;
}

std::string format_explanation_json(const Explanation& e) {
  using namespace json;
  const ElementInputs& in = e.in;
  std::string out = "{\n  \"schema\": \"mhcdiff.explain/1\",\n";
  const StoredIndices ix = stored_indices(e);
  auto arrays = [](const std::vector<std::vector<int64_t>>& vs) {
    std::string a;
    for (const auto& v : vs) a += fmt::format("{}[{}]", a.empty() ? "" : ", ", joined(v));
    return a;
  };
  out += fmt::format("  \"at\": {{\"s\": {}, \"ho\": {}, \"d\": {}, \"token\": [{}]}},\n", e.at.s, e.at.ho, e.at.d,
                     joined(ix.token));
  out += fmt::format(
      "  \"stored\": {{\"comb_layout\": {}, \"post\": [{}], \"x\": [{}], \"comb\": [{}], \"residual\": [{}]}},\n",
      str(e.comb_dst_src ? "dst,src" : "src,dst"), joined(ix.p), joined(ix.x), arrays(ix.c), arrays(ix.r));
  std::string cs, rs;
  for (int k = 0; k < in.H; ++k) {
    cs += k ? ", " : "";
    cs += num(double(in.c[k]));
    rs += k ? ", " : "";
    rs += num(double(in.r[k]));
  }
  out += fmt::format("  \"inputs\": {{\"p\": {}, \"x\": {}, \"c\": [{}], \"r\": [{}]}},\n", num(double(in.p)), num(double(in.x)),
                     cs, rs);
  std::string terms;
  for (double t : e.terms) { terms += terms.empty() ? "" : ", "; terms += num(t); }
  out += fmt::format("  \"exact\": {{\"terms\": [{}], \"rn64\": {}, \"bf16\": {}, \"bf16_bits\": \"0x{:04x}\", \"fallback\": {}, "
                     "\"kappa\": {}}},\n",
                     terms, num(e.exact_rn64), num(double(bf16_to_float(e.exact_bf16))), e.exact_bf16,
                     boolean(e.exact_fallback), num(e.kappa));
  out += "  \"policies\": [";
  for (size_t i = 0; i < e.policies.size(); ++i) {
    const PolicyTrace& t = e.policies[i];
    std::string steps;
    for (const TraceStep& s : t.steps)
      steps += fmt::format("{}\n        {{\"result\": {}, \"expr\": {}, \"format\": {}, \"value\": {}, \"bits\": {}, \"lost\": {}}}",
                           steps.empty() ? "" : ",", str(s.result), str(s.expr), str(s.format), num(s.value),
                           str(hex_bits(s.format, s.value)), num(s.lost));
    out += fmt::format("{}\n    {{\"name\": {}, \"description\": {}, \"out\": {}, \"out_bits\": \"0x{:04x}\", {}\"error_ulps\": {}, "
                       "\"correctly_rounded\": {}, \"steps\": [{}]}}",
                       i ? "," : "", str(t.policy.name), str(describe(t.policy.desc)), num(double(bf16_to_float(t.out))), t.out,
                       t.has_f64 ? fmt::format("\"out_f64\": {}, ", num(t.out_f64)) : std::string(), num(t.error_ulps),
                       boolean(t.correctly_rounded), steps);
  }
  out += "]\n}\n";
  return out;
}

}  // namespace mhc::investigate
