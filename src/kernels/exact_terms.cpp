#include "kernels/exact_terms.hpp"

namespace mhc {
namespace {

double bf(bf16_bits b) { return static_cast<double>(bf16_to_float(b)); }

}  // namespace

void exact_element_terms(const InputsView& in, ExactTensor tensor, int64_t i, std::vector<double>& terms) {
  const int64_t H = in.shape.H;
  const int64_t D = in.shape.D;
  auto g = [&](int64_t s, int64_t ho, int64_t d) { return bf(in.grad_out[(s * H + ho) * D + d]); };
  terms.clear();
  switch (tensor) {
    case ExactTensor::out: {
      const int64_t s = i / (H * D), ho = (i / D) % H, d = i % D;
      terms.push_back(double(in.post[s * H + ho]) * bf(in.x[s * D + d]));
      for (int64_t k = 0; k < H; ++k)
        terms.push_back(double(in.comb[(s * H + k) * H + ho]) * bf(in.residual[(s * H + k) * D + d]));
      return;
    }
    case ExactTensor::grad_x: {
      const int64_t s = i / D, d = i % D;
      for (int64_t ho = 0; ho < H; ++ho) terms.push_back(double(in.post[s * H + ho]) * g(s, ho, d));
      return;
    }
    case ExactTensor::grad_residual: {
      const int64_t s = i / (H * D), hi = (i / D) % H, d = i % D;
      for (int64_t ho = 0; ho < H; ++ho) terms.push_back(double(in.comb[(s * H + hi) * H + ho]) * g(s, ho, d));
      return;
    }
    case ExactTensor::grad_post: {
      const int64_t s = i / H, ho = i % H;
      for (int64_t d = 0; d < D; ++d) terms.push_back(g(s, ho, d) * bf(in.x[s * D + d]));
      return;
    }
    case ExactTensor::grad_comb: {
      const int64_t s = i / (H * H), hi = (i / H) % H, ho = i % H;
      for (int64_t d = 0; d < D; ++d) terms.push_back(g(s, ho, d) * bf(in.residual[(s * H + hi) * D + d]));
      return;
    }
  }
}

void store_exact_element(ExactTensor tensor, int64_t i, const ExactRounded& r, const ForwardOutputs& fwd,
                         const BackwardOutputs& bwd) {
  auto twin = [&](double* f64) {
    if (f64) f64[i] = r.rn64;
  };
  switch (tensor) {
    case ExactTensor::out: fwd.out[i] = r.bf16(); twin(fwd.out_f64); return;
    case ExactTensor::grad_x: bwd.grad_x[i] = r.bf16(); twin(bwd.grad_x_f64); return;
    case ExactTensor::grad_residual: bwd.grad_residual[i] = r.bf16(); twin(bwd.grad_residual_f64); return;
    case ExactTensor::grad_post: bwd.grad_post[i] = r.fp32(); twin(bwd.grad_post_f64); return;
    case ExactTensor::grad_comb: bwd.grad_comb[i] = r.fp32(); twin(bwd.grad_comb_f64); return;
  }
}

void finish_exact_element(const InputsView& in, ExactTensor tensor, int64_t i, const ForwardOutputs& fwd,
                          const BackwardOutputs& bwd, ExactBackend backend, std::vector<double>& terms) {
  exact_element_terms(in, tensor, i, terms);
  store_exact_element(tensor, i, exact_sum_multiprecision(terms, backend), fwd, bwd);
}

}  // namespace mhc
