#pragma once
// `mhcdiff explain` (SPEC §6): one output element, traced through every policy. Each policy's steps come
// from running mhc::forward_value — the kernels' own definition — on a tracing number type (traced.hpp),
// so what is shown is what the kernels compute.
#include <cstdint>
#include <string>
#include <vector>

#include "investigate/traced.hpp"
#include "kernels/tensors.hpp"
#include "policy/policy.hpp"

namespace mhc::investigate {

struct ElementAt {
  int64_t s = 0;
  int64_t ho = 0;  // as typed (--at): a wider value is refused against H, never narrowed into range
  int64_t d = 0;
};

// The inputs of one output element: p = post[s,ho], x = x[s,d], c[k] = comb[s,k,ho], r[k] = residual[s,k,d].
struct ElementInputs {
  int H = 0;
  float p = 0, x = 0;
  float c[kMaxStreams] = {}, r[kMaxStreams] = {};
};

// Gathers the element's inputs from a view whose token `s_in_view` is the element's token (comb src,dst).
ElementInputs element_inputs(const InputsView& in, int64_t s_in_view, int ho, int64_t d);

struct PolicyTrace {
  Policy policy;
  std::vector<TraceStep> steps;  // coefficient roundings, the forward arithmetic, the final RNb
  bf16_bits out = 0;
  bool has_f64 = false;          // fp64 / exact policies also store a binary64 value
  double out_f64 = 0.0;
  double error_ulps = 0.0;       // |out − exact| in units of the exact value's bf16 ULP (0.5: correctly rounded)
  bool correctly_rounded = false;
};

struct Explanation {
  ElementAt at;
  ElementInputs in;
  std::vector<double> terms;     // p·x, c_0·r_0, …: exact in binary64
  double exact_rn64 = 0.0;       // RN64 of the exact value
  bf16_bits exact_bf16 = 0;      // RNb of the exact value, rounded once
  bool exact_fallback = false;   // the certified fast path could not prove it; multiprecision was used
  double kappa = 0.0;            // (|p·x| + Σ|c_k·r_k|) / |exact|; inf when the exact value is 0
  std::vector<PolicyTrace> policies;
  // Where the inputs were read from, so that the text names each value by its index in the file: the leading dims
  // as stored (s is the flat token index over them; empty: [S, ...]) and whether comb is stored [.., dst, src].
  std::vector<int64_t> batch_dims;
  bool comb_dst_src = false;
};

Explanation explain_element(const ElementInputs& in, const ElementAt& at, const std::vector<Policy>& policies);

std::string format_explanation_text(const Explanation& e);
std::string format_explanation_json(const Explanation& e);

// The bf16 ULP of a value: 2^(exponent − 7) for normal values, 2^−133 below the normal range and at zero.
double bf16_ulp(double v);

}  // namespace mhc::investigate
