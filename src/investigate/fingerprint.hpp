#pragma once
// `mhcdiff fingerprint` (SPEC §6): which rounding policy, term order, contraction pattern and comb
// orientation produced a candidate's numbers. Every lattice variant (variant.hpp) is evaluated on a sample of
// tokens, the best few are verified on every element, and when none matches bit-exactly the mismatches of
// the best ones are broken down by index pattern and mixtures of two variants split by such a pattern are
// tried (vectorising compilers emit different code for different lanes, SPEC §9).
#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "investigate/variant.hpp"
#include "kernels/tensors.hpp"

namespace mhc::investigate {

// Calls `visit(s0, slab, candidate)` for consecutive slabs of tokens covering [0, S) in order: the inputs of
// tokens [s0, s0 + slab.shape.S) (comb in src,dst orientation as stored) and the candidate's bf16 `out` for
// those tokens ([count, H, D]). A source may be called more than once (one pass per stage).
using SlabVisitor = std::function<void(int64_t s0, const InputsView& slab, const bf16_bits* candidate)>;
using SlabSource = std::function<void(const SlabVisitor& visit)>;

struct FingerprintOptions {
  int threads = 0;                         // 0: all hardware threads
  int64_t sample_elements = int64_t{1} << 20;  // elements of the sampling stage (evenly strided tokens)
  int survivors = 12;                      // variants verified on every element
  std::vector<Variant> extra;              // user policies (--policy-file) added to the lattice
};

inline constexpr int kLanePeriod = 64;  // d mod 64 refines every power-of-two lane split up to 64 lanes

// What the report says of a variant's mismatches by token, in constant memory: a count per token for every
// verified variant took 12 bytes per token and variant (3.4 GB at 4 M tokens with 68 variants tied).
struct TokenSummary {
  static constexpr size_t kWorst = 5;
  int64_t tokens_with_mismatches = 0;
  std::vector<std::pair<int64_t, int64_t>> worst;  // (token, mismatches): most first, then the lower token
  // Σ over tokens with mismatches of a 64-bit mix of (token, mismatches), wrapping: equal per-token counts give equal
  // digests whatever the order they were added in, so it tells two breakdowns apart (nothing else depends on it).
  uint64_t digest = 0;

  void add(int64_t token, int64_t mismatches);
  void merge(const TokenSummary& o);
  bool operator==(const TokenSummary&) const = default;
};

struct MismatchStats {
  int64_t elements = 0;
  int64_t mismatched = 0;
  std::array<int64_t, kLanePeriod> by_lane{};    // by d mod 64
  std::array<int64_t, kMaxStreams> by_stream{};  // by ho
  TokenSummary by_token;                         // verified stage only
  int64_t first_mismatch = -1;                   // flat index s·H·D + ho·D + d, -1 when none

  void merge(const MismatchStats& o);
};

struct RankedVariant {
  Variant variant;
  MismatchStats stats;
  bool verified = false;  // stats over every element (else over the sample only)
};

// Two variants selected per element by an index pattern: class c of the pattern takes `pick[c]` (0: a, 1: b).
struct Mixture {
  Variant a, b;
  int period = 0;          // class = d mod period; 0: class = output stream ho
  std::string pattern;     // "d mod 2", "d mod 8", "stream ho"
  int classes = 0;
  std::vector<int> pick;   // per class
  int64_t mismatched = 0;  // over every element (exact: per-class counts are additive)
};

// Where the best variants' mismatches fall.
struct PatternBreakdown {
  Variant variant;
  int64_t mismatched = 0;
  std::vector<std::pair<int, std::vector<int64_t>>> by_d_mod;  // (period, counts per residue) for 2, 4, 8, 16
  std::vector<int64_t> by_stream;
  int64_t tokens_with_mismatches = 0;
  std::vector<std::pair<int64_t, int64_t>> worst_tokens;        // (token, mismatches), up to 5
};

struct FingerprintReport {
  Shape shape;
  int64_t sampled_tokens = 0;
  int64_t sampled_elements = 0;
  int lattice_size = 0;
  std::vector<RankedVariant> ranking;     // verified survivors (best first), then the rest by sample count
  std::vector<Variant> exact_matches;     // every verified variant with 0 mismatches (lattice order)
  std::vector<PatternBreakdown> patterns; // for the best verified variants when there is no exact match
  std::vector<Mixture> mixtures;          // the best two-variant mixtures (when no single variant matches)
  int64_t exact_fallbacks = 0;
  bool inputs_dst_src = false;  // the inputs' comb was read as dst,src: describe(v, inputs_dst_src) names the stored array

  bool matched() const { return !exact_matches.empty(); }
  // A two-variant mixture reproduces the candidate bit for bit (the best is listed first); the command exits 0
  // when either this or matched() holds.
  bool mixture_matched() const { return !mixtures.empty() && mixtures.front().mismatched == 0; }
};

FingerprintReport fingerprint(const Shape& shape, const SlabSource& source, const FingerprintOptions& options = {});

// In-memory convenience: the whole tensors as one slab.
FingerprintReport fingerprint(const InputsView& in, const bf16_bits* candidate, const FingerprintOptions& options = {});

// Computes a variant's bf16 output for every element of `in` (tests, `extract`, and lane mixtures).
std::vector<bf16_bits> evaluate_variant(const Variant& v, const InputsView& in, int threads = 0);

// A mixture's output: class c of the pattern takes variant pick[c].
std::vector<bf16_bits> evaluate_mixture(const Mixture& m, const InputsView& in, int threads = 0);

std::string format_fingerprint_text(const FingerprintReport& report, int top = 10);
std::string format_fingerprint_json(const FingerprintReport& report, int top = 10);

}  // namespace mhc::investigate
