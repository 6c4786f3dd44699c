#include "kernels/cpu/operator_cpu.hpp"

#include <omp.h>

#include <stdexcept>
#include <vector>

#include "kernels/exact_terms.hpp"
#include "kernels/operator_math.hpp"

namespace mhc {
namespace {

int thread_count(const CpuOptions& opt) { return cpu_thread_count(opt.threads); }

void check_shape(const InputsView& in) {
  if (in.shape.H < 1 || in.shape.H > kMaxStreams)
    throw std::invalid_argument("H must be in 1..16 (got " + std::to_string(in.shape.H) + ")");
  if (in.shape.D < 1) throw std::invalid_argument("D must be at least 1");
}

// Stores an exact element: the certified fast path's answer, or the multiprecision fallback's.
void settle_exact(const ExactAccumulator& acc, const InputsView& in, ExactTensor tensor, int64_t i,
                  const ForwardOutputs& fwd, const BackwardOutputs& bwd, const CpuOptions& opt,
                  std::vector<double>& scratch, int64_t& fallbacks) {
  const ExactRounded r = acc.result();
  if (r.certified) {
    store_exact_element(tensor, i, r, fwd, bwd);
    return;
  }
  ++fallbacks;
  finish_exact_element(in, tensor, i, fwd, bwd, opt.exact_backend, scratch);
}

// Walks token s's outputs in (d, ho) order and hands each element's operands to `element`:
// p = post[s,ho], x = x[s,d], c[k] = comb[s,k,ho] (a column, gathered once per token), r[k] = residual[s,k,d].
template <class ElementFn>
void for_each_forward_element(const InputsView& in, int64_t s, ElementFn&& element) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  float comb_col[kMaxStreams][kMaxStreams];
  float r[kMaxStreams];
  const float* post = in.post + s * H;
  const float* comb = in.comb + s * H * H;
  for (int ho = 0; ho < H; ++ho)
    for (int k = 0; k < H; ++k) comb_col[ho][k] = comb[k * H + ho];
  const bf16_bits* x = in.x + s * D;
  const bf16_bits* res = in.residual + s * H * D;
  for (int64_t d = 0; d < D; ++d) {
    const float xv = bf16_to_float(x[d]);
    for (int k = 0; k < H; ++k) r[k] = bf16_to_float(res[k * D + d]);
    for (int ho = 0; ho < H; ++ho) element(post[ho], xv, comb_col[ho], r, (s * H + ho) * D + d);
  }
}

template <class T>
void forward_token_rounded(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out, int64_t s) {
  const int H = in.shape.H;
  for_each_forward_element(in, s, [&](float p, float x, const float* c, const float* r, int64_t i) {
    const T v = forward_value<T>(pd, p, x, c, r, H);
    out.out[i] = round_to_bf16_rne(v);
    if constexpr (sizeof(T) == sizeof(double))
      if (out.out_f64) out.out_f64[i] = v;
  });
}

int64_t forward_token_exact(const InputsView& in, const ForwardOutputs& out, int64_t s, const CpuOptions& opt) {
  const int H = in.shape.H;
  int64_t fallbacks = 0;
  std::vector<double> scratch;
  for_each_forward_element(in, s, [&](float p, float x, const float* c, const float* r, int64_t i) {
    settle_exact(forward_exact(p, x, c, r, H), in, ExactTensor::out, i, out, {}, opt, scratch, fallbacks);
  });
  return fallbacks;
}

// Sums over the streams: ∂x (weights = post) and ∂residual (weights = comb rows).
template <class T>
void backward_streams_rounded(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out, int64_t s) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const float* post = in.post + s * H;
  const float* comb = in.comb + s * H * H;
  float g[kMaxStreams];
  for (int64_t d = 0; d < D; ++d) {
    for (int ho = 0; ho < H; ++ho) g[ho] = bf16_to_float(in.grad_out[(s * H + ho) * D + d]);
    const T gx = stream_grad_value<T>(pd, post, g, H, true);
    out.grad_x[s * D + d] = round_to_bf16_rne(gx);
    if constexpr (sizeof(T) == sizeof(double))
      if (out.grad_x_f64) out.grad_x_f64[s * D + d] = gx;
    for (int hi = 0; hi < H; ++hi) {
      const T gr = stream_grad_value<T>(pd, comb + hi * H, g, H, false);
      const int64_t i = (s * H + hi) * D + d;
      out.grad_residual[i] = round_to_bf16_rne(gr);
      if constexpr (sizeof(T) == sizeof(double))
        if (out.grad_residual_f64) out.grad_residual_f64[i] = gr;
    }
  }
}

// One dot product over D in the canonical lane order.
template <class T>
T canonical_dot(const PolicyDesc& pd, const bf16_bits* a, const bf16_bits* b, int64_t D, bool post_path) {
  T partial[kReduceLanes];
  for (T& p : partial) p = zero_accumulator<T>();
  for (int64_t d = 0; d < D; ++d) {
    T& acc = partial[reduce_lane_of(d)];
    acc = dot_step<T>(pd, acc, bf16_to_float(a[d]), bf16_to_float(b[d]), post_path);
  }
  return finish_param_grad<T>(pd, combine_lane_partials<T>(partial));
}

template <class T>
void backward_params_rounded(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out, int64_t s) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const bf16_bits* x = in.x + s * D;
  for (int ho = 0; ho < H; ++ho) {
    const bf16_bits* g = in.grad_out + (s * H + ho) * D;
    const T gp = canonical_dot<T>(pd, g, x, D, true);
    out.grad_post[s * H + ho] = static_cast<float>(gp);  // RN32 of the fp64 value, identity for fp32
    if constexpr (sizeof(T) == sizeof(double))
      if (out.grad_post_f64) out.grad_post_f64[s * H + ho] = gp;
    for (int hi = 0; hi < H; ++hi) {
      const bf16_bits* r = in.residual + (s * H + hi) * D;
      const T gc = canonical_dot<T>(pd, g, r, D, false);
      const int64_t i = (s * H + hi) * H + ho;
      out.grad_comb[i] = static_cast<float>(gc);
      if constexpr (sizeof(T) == sizeof(double))
        if (out.grad_comb_f64) out.grad_comb_f64[i] = gc;
    }
  }
}

int64_t backward_token_exact(const InputsView& in, const BackwardOutputs& out, int64_t s, const CpuOptions& opt) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  const float* post = in.post + s * H;
  const float* comb = in.comb + s * H * H;
  int64_t fallbacks = 0;
  std::vector<double> scratch;
  float g[kMaxStreams];
  for (int64_t d = 0; d < D; ++d) {
    for (int ho = 0; ho < H; ++ho) g[ho] = bf16_to_float(in.grad_out[(s * H + ho) * D + d]);
    settle_exact(stream_grad_exact(post, g, H), in, ExactTensor::grad_x, s * D + d, {}, out, opt, scratch, fallbacks);
    for (int hi = 0; hi < H; ++hi)
      settle_exact(stream_grad_exact(comb + hi * H, g, H), in, ExactTensor::grad_residual, (s * H + hi) * D + d, {},
                   out, opt, scratch, fallbacks);
  }
  auto dot_exact = [&](const bf16_bits* a, const bf16_bits* b) {
    ExactAccumulator acc;
    for (int64_t d = 0; d < D; ++d) acc.add(double(bf16_to_float(a[d])) * bf16_to_float(b[d]));
    return acc;
  };
  const bf16_bits* x = in.x + s * D;
  for (int ho = 0; ho < H; ++ho) {
    const bf16_bits* gr = in.grad_out + (s * H + ho) * D;
    settle_exact(dot_exact(gr, x), in, ExactTensor::grad_post, s * H + ho, {}, out, opt, scratch, fallbacks);
    for (int hi = 0; hi < H; ++hi)
      settle_exact(dot_exact(gr, in.residual + (s * H + hi) * D), in, ExactTensor::grad_comb, (s * H + hi) * H + ho, {},
                   out, opt, scratch, fallbacks);
  }
  return fallbacks;
}

template <class TokenFn>
int64_t for_each_token(int64_t S, const CpuOptions& opt, TokenFn&& fn) {
  int64_t fallbacks = 0;
#pragma omp parallel for schedule(dynamic, 16) num_threads(thread_count(opt)) reduction(+ : fallbacks)
  for (int64_t s = 0; s < S; ++s) fallbacks += fn(s);
  return fallbacks;
}

}  // namespace

RunStats forward_cpu(const PolicyDesc& pd, const InputsView& in, const ForwardOutputs& out, const CpuOptions& opt) {
  check_shape(in);
  RunStats stats;
  const int64_t S = in.shape.S;
  switch (pd.accumulator) {
    case Accumulator::fp32:
      for_each_token(S, opt, [&](int64_t s) { forward_token_rounded<float>(pd, in, out, s); return int64_t{0}; });
      break;
    case Accumulator::fp64:
      for_each_token(S, opt, [&](int64_t s) { forward_token_rounded<double>(pd, in, out, s); return int64_t{0}; });
      break;
    case Accumulator::exact:
      stats.exact_elements = S * in.shape.H * in.shape.D;
      stats.fallback_elements = for_each_token(S, opt, [&](int64_t s) { return forward_token_exact(in, out, s, opt); });
      break;
  }
  return stats;
}

RunStats backward_cpu(const PolicyDesc& pd, const InputsView& in, const BackwardOutputs& out, const CpuOptions& opt) {
  check_shape(in);
  if (!in.grad_out) throw std::invalid_argument("the backward needs grad_out in the inputs");
  RunStats stats;
  const int64_t S = in.shape.S;
  switch (pd.accumulator) {
    case Accumulator::fp32:
      for_each_token(S, opt, [&](int64_t s) {
        backward_streams_rounded<float>(pd, in, out, s);
        backward_params_rounded<float>(pd, in, out, s);
        return int64_t{0};
      });
      break;
    case Accumulator::fp64:
      for_each_token(S, opt, [&](int64_t s) {
        backward_streams_rounded<double>(pd, in, out, s);
        backward_params_rounded<double>(pd, in, out, s);
        return int64_t{0};
      });
      break;
    case Accumulator::exact: {
      const int64_t H = in.shape.H;
      stats.exact_elements = S * (in.shape.D + H * in.shape.D + H + H * H);
      stats.fallback_elements = for_each_token(S, opt, [&](int64_t s) { return backward_token_exact(in, out, s, opt); });
      break;
    }
  }
  return stats;
}

void allocate_result(PolicyResult& r, const Shape& sh, bool with_f64, bool backward) {
  const size_t shd = size_t(sh.S) * sh.H * sh.D;
  r.out.assign(shd, 0);
  if (with_f64) r.out_f64.assign(shd, 0.0);
  if (!backward) return;
  r.grad_x.assign(size_t(sh.S) * sh.D, 0);
  r.grad_residual.assign(shd, 0);
  r.grad_post.assign(size_t(sh.S) * sh.H, 0.0f);
  r.grad_comb.assign(size_t(sh.S) * sh.H * sh.H, 0.0f);
  if (with_f64) {
    r.grad_x_f64.assign(r.grad_x.size(), 0.0);
    r.grad_residual_f64.assign(shd, 0.0);
    r.grad_post_f64.assign(r.grad_post.size(), 0.0);
    r.grad_comb_f64.assign(r.grad_comb.size(), 0.0);
  }
}

ForwardOutputs forward_outputs(PolicyResult& r) {
  return {r.out.data(), r.out_f64.empty() ? nullptr : r.out_f64.data()};
}

BackwardOutputs backward_outputs(PolicyResult& r) {
  auto opt = [](std::vector<double>& v) { return v.empty() ? nullptr : v.data(); };
  return {r.grad_x.data(),    r.grad_residual.data(), r.grad_post.data(),     r.grad_comb.data(),
          opt(r.grad_x_f64), opt(r.grad_residual_f64), opt(r.grad_post_f64), opt(r.grad_comb_f64)};
}

PolicyResult run_policy_cpu(const PolicyDesc& pd, const InputsView& in, bool backward, const CpuOptions& opt,
                            RunStats* stats) {
  PolicyResult r;
  allocate_result(r, in.shape, stores_f64(pd), backward);
  RunStats st = forward_cpu(pd, in, forward_outputs(r), opt);
  if (backward) st += backward_cpu(pd, in, backward_outputs(r), opt);
  if (stats) *stats = st;
  return r;
}

}  // namespace mhc
