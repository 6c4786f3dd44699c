#include "gen/presets.hpp"

#include <fmt/format.h>
#include <omp.h>

#include <charconv>
#include <cmath>
#include <filesystem>
#include <vector>

#include "gen/det_math.hpp"
#include "io/errors.hpp"
#include "io/files.hpp"
#include "io/store.hpp"
#include "kernels/cpu/operator_cpu.hpp"

namespace mhc::gen {
namespace {

// One counter stream per tensor (and per auxiliary draw), so changing --grad never changes x.
enum Stream : uint64_t { kX = 1, kResidual = 2, kPost = 3, kComb = 4, kGradOut = 5, kKappa = 6, kSign = 7 };

bf16_bits bf16_of(double v) { return round_to_bf16_rne(v); }

// Per-token builders: each writes token s (global index) into slab position t.
struct Builder {
  const GenOptions& o;
  Inputs& in;
  int64_t s0;
  int H;
  int64_t D;

  CounterRng rng(uint64_t stream) const { return CounterRng(o.seed, stream); }
  bf16_bits* x(int64_t t) { return in.x.data() + t * D; }
  bf16_bits* residual(int64_t t) { return in.residual.data() + t * H * D; }
  float* post(int64_t t) { return in.post.data() + t * H; }
  float* comb(int64_t t) { return in.comb.data() + t * H * H; }

  void normal_bf16(bf16_bits* dst, uint64_t stream, int64_t first_index, int64_t n, double scale) const {
    const CounterRng r = rng(stream);
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_of(scale * det_normal(r, uint64_t(first_index + i)));
  }

  void grad_out(int64_t t) {
    if (!o.grad) return;
    const int64_t s = s0 + t;
    if (o.preset == Preset::seed_example) {
      std::fill_n(in.grad_out.data() + t * H * D, H * D, bf16_of(1.0));
      return;
    }
    normal_bf16(in.grad_out.data() + t * H * D, kGradOut, s * H * D, H * D, 1.0);
  }

  // SPEC §7: H=2, post=[1.003, 1], comb=0.5, x=1, residual=−1 (HF-bf16 gives 0, fp32 gives ≈0.003).
  void seed_example(int64_t t) {
    std::fill_n(x(t), D, bf16_of(1.0));
    std::fill_n(residual(t), H * D, bf16_of(-1.0));
    post(t)[0] = 1.003f;
    post(t)[1] = 1.0f;
    std::fill_n(comb(t), H * H, 0.5f);
  }

  // Peer-test style: x, r ~ N(0,1); post ~ U[0,2), comb ~ U[0,1) on a 2^-23 / 2^-24 grid (exact in fp32).
  void randn(int64_t t) {
    const int64_t s = s0 + t;
    normal_bf16(x(t), kX, s * D, D, 1.0);
    normal_bf16(residual(t), kResidual, s * H * D, H * D, 1.0);
    const CounterRng rp = rng(kPost), rc = rng(kComb);
    for (int h = 0; h < H; ++h) post(t)[h] = float(double(rp.bits(uint64_t(s * H + h)) >> 40) * 0x1p-23);
    for (int i = 0; i < H * H; ++i) comb(t)[i] = float(double(rc.bits(uint64_t(s * H * H + i)) >> 40) * 0x1p-24);
  }

  // comb = Sinkhorn of N(0, σ²) logits (DeepSeek's mHC recipe): softmax over each row + eps, then alternate
  // column and row normalisation (each divided by its sum + eps), `iterations` column steps, ending on
  // columns, so every output stream (column dst) is a convex mix of the input streams. Rows are src.
  void realistic(int64_t t) {
    const int64_t s = s0 + t;
    normal_bf16(x(t), kX, s * D, D, 1.0);
    double sum_sq = 0.0;
    for (int64_t d = 0; d < D; ++d) {
      const double v = bf16_to_float(x(t)[d]);
      sum_sq += v * v;
    }
    const double rms_x = std::sqrt(sum_sq / double(D));
    normal_bf16(residual(t), kResidual, s * H * D, H * D, o.rho * (rms_x > 0 ? rms_x : 1.0));
    const CounterRng rp = rng(kPost), rc = rng(kComb);
    for (int h = 0; h < H; ++h) post(t)[h] = float(2.0 * det_sigmoid(det_normal(rp, uint64_t(s * H + h))));
    double m[kMaxStreams][kMaxStreams];
    for (int i = 0; i < H; ++i) {
      double mx = -INFINITY;
      for (int j = 0; j < H; ++j) {
        m[i][j] = o.sigma * det_normal(rc, uint64_t(s * H * H + i * H + j));
        mx = std::max(mx, m[i][j]);
      }
      double sum = 0.0;
      for (int j = 0; j < H; ++j) sum += (m[i][j] = det_exp(m[i][j] - mx));
      for (int j = 0; j < H; ++j) m[i][j] = m[i][j] / sum + o.sinkhorn_eps;
    }
    auto normalise_columns = [&] {
      for (int j = 0; j < H; ++j) {
        double sum = 0.0;
        for (int i = 0; i < H; ++i) sum += m[i][j];
        for (int i = 0; i < H; ++i) m[i][j] /= sum + o.sinkhorn_eps;
      }
    };
    auto normalise_rows = [&] {
      for (int i = 0; i < H; ++i) {
        double sum = 0.0;
        for (int j = 0; j < H; ++j) sum += m[i][j];
        for (int j = 0; j < H; ++j) m[i][j] /= sum + o.sinkhorn_eps;
      }
    };
    normalise_columns();
    for (int it = 1; it < o.sinkhorn_iterations; ++it) {
      normalise_rows();
      normalise_columns();
    }
    for (int i = 0; i < H; ++i)
      for (int j = 0; j < H; ++j) comb(t)[i * H + j] = float(m[i][j]);
  }

  // Cancellation: at each (s, d) the output stream ho* = (s + d) mod H is made to nearly cancel. With
  // A = p·x (exact) and a target t with |t| = 2|A|/κ (κ log-uniform in [κmin, κmax], random sign), the
  // residual values are chosen greedily, k ascending: r_k = RNb(−P / c_k) with P = A − t + Σ_{j<k} c_j·r_j,
  // so each stream removes the ~2^-9 relative error the previous bf16 rounding left. The exact sum ends at
  // t + P_final with |P_final| ≈ |A|·2^(−9H); κ = (|A| + Σ|c_k r_k|)/|sum| ≈ 2|A|/|t|. Reaching κ = 10^6
  // cleanly needs H ≥ 3 (H = 2 reaches ~10^5, H = 1 ~ 10^2). The other H−1 outputs at (s, d) are ordinary.
  void cancellation(int64_t t) {
    const int64_t s = s0 + t;
    normal_bf16(x(t), kX, s * D, D, 1.0);
    const CounterRng rp = rng(kPost), rc = rng(kComb), rk = rng(kKappa), rs = rng(kSign);
    for (int h = 0; h < H; ++h) post(t)[h] = float(0.5 + rp.uniform(uint64_t(s * H + h)));
    for (int i = 0; i < H * H; ++i) comb(t)[i] = float(0.25 + 0.75 * rc.uniform(uint64_t(s * H * H + i)));
    const double log10_lo = det_log(o.kappa_min) / det_log(10.0), log10_hi = det_log(o.kappa_max) / det_log(10.0);
    for (int64_t d = 0; d < D; ++d) {
      const int ho = cancellation_target_stream(s, d, H);
      const uint64_t idx = uint64_t(s * D + d);
      const double a = double(post(t)[ho]) * double(bf16_to_float(x(t)[d]));
      const double kappa = det_exp((log10_lo + (log10_hi - log10_lo) * rk.uniform(idx)) * det_log(10.0));
      const double target = (rs.bits(idx) & 1 ? -2.0 : 2.0) * std::fabs(a) / kappa;
      double p = a - target;
      for (int k = 0; k < H; ++k) {
        const double c = comb(t)[k * H + ho];
        const bf16_bits r = bf16_of(-p / c);
        residual(t)[k * D + d] = r;
        p += c * double(bf16_to_float(r));
      }
    }
  }
};

// Finite knobs can still overflow (realistic: residual = N(0,1)·ρ·rms(x) beyond bf16's 3.4e38 for ρ ≈ 1e37,
// logits σ·N(0,1) beyond binary64 for σ ≈ 1e307). Such a file would be refused by every command that reads
// inputs, so it is refused here instead of written.
void require_finite(const GenOptions& o, const Inputs& in, int64_t s0) {
  auto check = [&](const char* dataset, int64_t row_elems, auto&& values, auto&& is_finite) {
    for (size_t i = 0; i < values.size(); ++i)
      if (!is_finite(values[i]))
        throw InputError(fmt::format("--preset {} with these knobs makes non-finite inputs (/inputs/{} at token {}); "
                                     "use a smaller --sigma or --rho",
                                     preset_name(o.preset), dataset, s0 + int64_t(i) / row_elems));
  };
  const auto finite_bf16 = [](bf16_bits b) { return (b & 0x7f80u) != 0x7f80u; };
  const auto finite_f32 = [](float v) { return std::isfinite(v); };
  const int64_t H = in.shape.H, D = in.shape.D;
  check("x", D, in.x, finite_bf16);
  check("residual", H * D, in.residual, finite_bf16);
  check("grad_out", H * D, in.grad_out, finite_bf16);
  check("post", H, in.post, finite_f32);
  check("comb", H * H, in.comb, finite_f32);
}

}  // namespace

Shape default_shape(Preset p) { return Shape{16, p == Preset::seed_example ? 2 : 4, 64}; }

Preset parse_preset(const std::string& name) {
  if (name == "seed-example") return Preset::seed_example;
  if (name == "randn") return Preset::randn;
  if (name == "realistic") return Preset::realistic;
  if (name == "cancellation") return Preset::cancellation;
  throw InputError(fmt::format("unknown preset '{}' (known: seed-example, randn, realistic, cancellation)", name));
}

const char* preset_name(Preset p) {
  switch (p) {
    case Preset::seed_example: return "seed-example";
    case Preset::randn: return "randn";
    case Preset::realistic: return "realistic";
    case Preset::cancellation: return "cancellation";
  }
  return "?";
}

Shape parse_shape(const std::string& text) {
  int64_t v[3] = {0, 0, 0};
  const char* p = text.data();
  const char* end = text.data() + text.size();
  bool valid = true;
  for (int i = 0; i < 3 && valid; ++i) {
    const auto [next, ec] = std::from_chars(p, end, v[i]);
    valid = ec == std::errc() && (i < 2 ? next != end && *next == ',' : next == end);
    p = next + 1;
  }
  if (!valid || v[0] < 1 || v[1] < 1 || v[1] > kMaxStreams || v[2] < 1)
    throw InputError(fmt::format("--shape must be S,H,D with S >= 1, H in 1..{} and D >= 1 (got '{}')", kMaxStreams,
                                 text));
  return Shape{v[0], static_cast<int>(v[1]), v[2]};
}

void validate(const GenOptions& o) {
  const Shape& sh = o.shape;
  if (sh.S < 1 || sh.D < 1 || sh.H < 1 || sh.H > kMaxStreams)
    throw InputError(fmt::format("--shape {},{},{}: need S >= 1, 1 <= H <= {}, D >= 1", sh.S, sh.H, sh.D, kMaxStreams));
  if (o.preset == Preset::seed_example && sh.H != 2)
    throw InputError(fmt::format("--preset seed-example is defined for H=2 (got --shape {},{},{})", sh.S, sh.H, sh.D));
  if (!(o.sigma > 0) || !(o.rho > 0) || o.sinkhorn_iterations < 1 || o.sinkhorn_iterations > kMaxSinkhornIterations ||
      !(o.sinkhorn_eps >= 0) || !std::isfinite(o.sigma) || !std::isfinite(o.rho) || !std::isfinite(o.sinkhorn_eps))
    throw InputError(fmt::format("realistic preset: need finite --sigma > 0, --rho > 0, --sinkhorn-eps >= 0 and "
                                 "--sinkhorn-iterations from 1 to {}",
                                 kMaxSinkhornIterations));
  if (!(o.kappa_min > 1) || !(o.kappa_max >= o.kappa_min) || !(o.kappa_max <= 1e12))
    throw InputError("cancellation preset: need 1 < --kappa-min <= --kappa-max <= 1e12");
}

Inputs generate_slab(const GenOptions& o, int64_t s0, int64_t count) {
  validate(o);
  const int H = o.shape.H;
  const int64_t D = o.shape.D;
  Inputs in;
  in.shape = Shape{count, H, D};
  in.x.resize(size_t(count * D));
  in.residual.resize(size_t(count * H * D));
  in.post.resize(size_t(count * H));
  in.comb.resize(size_t(count * H * H));
  if (o.grad) in.grad_out.resize(size_t(count * H * D));
  Builder b{o, in, s0, H, D};
  // Every token is a pure function of (seed, token index): any thread count gives the same bits.
#pragma omp parallel for schedule(static) num_threads(cpu_thread_count(0))
  for (int64_t t = 0; t < count; ++t) {
    switch (o.preset) {
      case Preset::seed_example: b.seed_example(t); break;
      case Preset::randn: b.randn(t); break;
      case Preset::realistic: b.realistic(t); break;
      case Preset::cancellation: b.cancellation(t); break;
    }
    b.grad_out(t);
  }
  require_finite(o, in, s0);
  return in;
}

void write_generated(const GenOptions& o, const std::string& path, int deflate_level) {
  validate(o);
  // A shape too large for the disk would write for hours before failing: refuse it first.
  io::check_output_fits(path, "output", io::inputs_bytes(o.shape, o.grad, deflate_level));
  io::ResultWriter writer(path);
  writer.set_compression(deflate_level);
  writer.declare_inputs(o.shape, o.grad);
  const int64_t step = io::slab_tokens_for(o.shape, o.grad, int64_t(64) << 20);
  for (int64_t s0 = 0; s0 < o.shape.S; s0 += step)
    writer.append_inputs(s0, generate_slab(o, s0, std::min(step, o.shape.S - s0)));
  writer.set_attribute("/", "generator", fmt::format("mhcdiff gen {}", MHCDIFF_VERSION));
  writer.set_attribute("/", "preset", preset_name(o.preset));
  writer.set_attribute("/", "seed", std::to_string(o.seed));  // text: a uint64 seed may exceed int64
  writer.set_attribute("/", "shape", fmt::format("{},{},{}", o.shape.S, o.shape.H, o.shape.D));
  if (o.preset == Preset::realistic) {
    writer.set_attribute("/", "sigma", o.sigma);
    writer.set_attribute("/", "rho", o.rho);
    writer.set_integer_attribute("/", "sinkhorn_iterations", o.sinkhorn_iterations);
    writer.set_attribute("/", "sinkhorn_eps", o.sinkhorn_eps);
  }
  if (o.preset == Preset::cancellation) {
    writer.set_attribute("/", "kappa_min", o.kappa_min);
    writer.set_attribute("/", "kappa_max", o.kappa_max);
  }
  writer.commit();
}

}  // namespace mhc::gen
