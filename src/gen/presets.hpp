#pragma once
// Input presets for `mhcdiff gen` (SPEC §7), deterministic from the seed on any machine and thread count
// (docs/presets.md says how each is built).
#include <cstdint>
#include <string>

#include "kernels/tensors.hpp"

namespace mhc::gen {

// `--shape S,H,D` (gen, bench): digits and commas only, S, D >= 1 and H in 1..16, checked before H is narrowed to
// int (4294967300 would wrap to 4). InputError otherwise.
Shape parse_shape(const std::string& text);

enum class Preset { seed_example, randn, realistic, cancellation };

// "seed-example", "randn", "realistic", "cancellation"; InputError naming the known presets otherwise.
Preset parse_preset(const std::string& name);
const char* preset_name(Preset p);
// gen's shape when --shape is not given: 16 tokens, H = 4, D = 64; H = 2 for seed-example (defined for H = 2 only).
Shape default_shape(Preset p);

// The most Sinkhorn iterations `realistic` takes: SPEC §7's 20 converge long before, and 10^8 ran for minutes on 16
// tokens with no sign of progress.
inline constexpr int kMaxSinkhornIterations = 100000;

struct GenOptions {
  Preset preset = Preset::randn;
  Shape shape{16, 4, 64};
  uint64_t seed = 0;
  bool grad = false;  // also make /inputs/grad_out
  // realistic: comb = Sinkhorn(N(0, sigma²) logits), residual rms = rho · rms(x) per token
  double sigma = 1.0;
  double rho = 8.0;
  int sinkhorn_iterations = 20;
  double sinkhorn_eps = 1e-6;
  // cancellation: target κ drawn log-uniformly in [kappa_min, kappa_max]
  double kappa_min = 1e2;
  double kappa_max = 1e6;
};

// Throws InputError when the options cannot make a valid file (H outside 1..16, seed-example without H=2, ...).
void validate(const GenOptions& o);

// Tokens [s0, s0 + count) of the generated inputs (the same values whatever the slab split).
Inputs generate_slab(const GenOptions& o, int64_t s0, int64_t count);
inline Inputs generate(const GenOptions& o) { return generate_slab(o, 0, o.shape.S); }

// The output stream ho* that the cancellation preset makes cancel at (s, d).
inline int cancellation_target_stream(int64_t s, int64_t d, int H) { return int((s + d) % H); }

// Generates in slabs and writes an mhcdiff/1 input file atomically (generator settings as root attributes).
void write_generated(const GenOptions& o, const std::string& path, int deflate_level);

}  // namespace mhc::gen
