#include "investigate/fingerprint.hpp"

#include <omp.h>

#include <algorithm>
#include <numeric>

#include <fmt/format.h>

#include "investigate/json_text.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "numerics/bf16.hpp"
#include "run/thread_count.hpp"

namespace mhc::investigate {
namespace {

constexpr size_t kMaxTiedSurvivors = 32;
// At most this many variants join the verified survivors as a mixture pattern's class winners (see fingerprint()).
constexpr size_t kMaxClassWinners = 16;

// The split patterns of the mixture search: d mod 2 .. 64, and by output stream (period 0) when H > 1.
std::vector<int> mixture_patterns(int H) {
  std::vector<int> patterns = {2, 4, 8, 16, 32, 64};
  if (H > 1) patterns.push_back(0);
  return patterns;
}

// The sampling stage's token stride: the largest prime not above `stride`, so that the sample does not alias with
// a candidate that alternates between code paths every 2, 4, 8 ... tokens (a stride of 4 over a candidate with one
// recipe on every fourth token sampled only those tokens, and ranked the recipe of the other three quarters as if
// it matched nothing). Never larger than `stride`, so the sample keeps at least the asked-for size.
int64_t sample_stride(int64_t stride) {
  auto is_prime = [](int64_t n) {
    for (int64_t f = 2; f * f <= n; ++f)
      if (n % f == 0) return false;
    return true;
  };
  while (stride > 2 && !is_prime(stride)) --stride;
  return std::max<int64_t>(1, stride);
}

int thread_count(int threads) { return cpu_thread_count(threads); }

// SPEC §5: bits must agree, except that NaN equals NaN whatever its payload.
bool same_output(bf16_bits a, bf16_bits b) { return a == b || (bf16_is_nan(a) && bf16_is_nan(b)); }

struct StageSpec {
  int64_t token_stride = 1;  // evaluate tokens s with s % stride == 0
  bool per_token = false;    // fill MismatchStats::by_token
};

// Counts every variant's mismatches against the candidate over the tokens the stage selects.
void run_stage(const Shape& shape, const SlabSource& source, const std::vector<Variant>& variants, const StageSpec& spec,
               int threads, std::vector<MismatchStats>& stats, int64_t& fallbacks, int64_t& tokens_seen) {
  stats.assign(variants.size(), MismatchStats{});
  fallbacks = 0;
  tokens_seen = 0;
  const int H = shape.H;
  const int64_t D = shape.D;
  source([&](int64_t s0, const InputsView& slab, const bf16_bits* cand) {
    if (slab.shape.H != H || slab.shape.D != D)
      throw std::invalid_argument("fingerprint: a slab's shape differs from the declared shape");
    const int64_t first = (s0 + spec.token_stride - 1) / spec.token_stride * spec.token_stride - s0;
    std::vector<int64_t> tokens;
    for (int64_t s = first; s < slab.shape.S; s += spec.token_stride) tokens.push_back(s);
    tokens_seen += int64_t(tokens.size());
#pragma omp parallel num_threads(thread_count(threads))
    {
      std::vector<MismatchStats> local(variants.size());
      TokenEvaluator ev;
#pragma omp for schedule(dynamic, 1)
      for (size_t t = 0; t < tokens.size(); ++t) {
        const int64_t s = tokens[t];
        ev.load(slab, s);
        const bf16_bits* c = cand + s * H * D;
        for (size_t v = 0; v < variants.size(); ++v) {
          MismatchStats& st = local[v];
          int64_t token_mismatches = 0;
          for (int ho = 0; ho < H; ++ho)
            for (int64_t d = 0; d < D; ++d) {
              if (same_output(ev.value(variants[v], ho, d), c[ho * D + d])) continue;
              ++token_mismatches;
              ++st.by_lane[size_t(d % kLanePeriod)];
              ++st.by_stream[size_t(ho)];
              const int64_t flat = ((s0 + s) * H + ho) * D + d;
              if (st.first_mismatch < 0 || flat < st.first_mismatch) st.first_mismatch = flat;
            }
          st.elements += H * D;
          st.mismatched += token_mismatches;
          if (spec.per_token) st.by_token.add(s0 + s, token_mismatches);
        }
      }
#pragma omp critical(fingerprint_merge)
      {
        for (size_t v = 0; v < variants.size(); ++v) stats[v].merge(local[v]);
        fallbacks += ev.fallbacks();
      }
    }
  });
}

std::vector<int64_t> fold_lanes(const MismatchStats& st, int period) {
  std::vector<int64_t> out(size_t(period), 0);
  for (int r = 0; r < kLanePeriod; ++r) out[size_t(r % period)] += st.by_lane[size_t(r)];
  return out;
}

// Per-class mismatch counts of a variant under a pattern (period 0: by stream).
std::vector<int64_t> class_counts(const MismatchStats& st, int period, int H) {
  if (period > 0) return fold_lanes(st, period);
  return std::vector<int64_t>(st.by_stream.begin(), st.by_stream.begin() + H);
}

PatternBreakdown breakdown(const RankedVariant& rv, int H) {
  PatternBreakdown b;
  b.variant = rv.variant;
  b.mismatched = rv.stats.mismatched;
  for (int period : {2, 4, 8, 16}) b.by_d_mod.emplace_back(period, fold_lanes(rv.stats, period));
  b.by_stream.assign(rv.stats.by_stream.begin(), rv.stats.by_stream.begin() + H);
  b.tokens_with_mismatches = rv.stats.by_token.tokens_with_mismatches;
  b.worst_tokens = rv.stats.by_token.worst;
  return b;
}

// Every two-variant split of the verified survivors by d mod 2..64 and by stream. A class's mismatches
// under a variant are exact counts over every element, so the mixture's total is exact too.
std::vector<Mixture> best_mixtures(const std::vector<RankedVariant>& verified, int H, int64_t best_single, size_t keep) {
  std::vector<Mixture> found;
  const std::vector<int> patterns = mixture_patterns(H);
  for (size_t i = 0; i < verified.size(); ++i)
    for (size_t j = i + 1; j < verified.size(); ++j)
      for (int period : patterns) {
        const auto a = class_counts(verified[i].stats, period, H), b = class_counts(verified[j].stats, period, H);
        Mixture m;
        m.a = verified[i].variant;
        m.b = verified[j].variant;
        m.period = period;
        m.pattern = period > 0 ? fmt::format("d mod {}", period) : "output stream ho";
        m.classes = int(a.size());
        bool uses_a = false, uses_b = false;
        for (size_t c = 0; c < a.size(); ++c) {
          const int pick = b[c] < a[c] ? 1 : 0;
          m.pick.push_back(pick);
          m.mismatched += pick ? b[c] : a[c];
          (pick ? uses_b : uses_a) = true;
        }
        if (uses_a && uses_b && m.mismatched < best_single) found.push_back(std::move(m));
      }
  // Fewest mismatches first; then the simplest pattern (fewest classes), then the better-ranked pair.
  std::stable_sort(found.begin(), found.end(), [](const Mixture& x, const Mixture& y) {
    if (x.mismatched != y.mismatched) return x.mismatched < y.mismatched;
    return x.classes < y.classes;
  });
  if (found.size() > keep) found.resize(keep);
  return found;
}

}  // namespace

namespace {

// The worst tokens' order: most mismatches first, then the lower token.
bool worse_token(const std::pair<int64_t, int64_t>& a, const std::pair<int64_t, int64_t>& b) {
  return a.second != b.second ? a.second > b.second : a.first < b.first;
}

}  // namespace

void TokenSummary::add(int64_t token, int64_t mismatches) {
  if (mismatches <= 0) return;
  ++tokens_with_mismatches;
  // splitmix64's finaliser over the pair: a sum of such mixes is order-free and collides only by chance.
  uint64_t z = uint64_t(token) * 0x9e3779b97f4a7c15ull ^ uint64_t(mismatches) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  digest += z ^ (z >> 31);
  const std::pair<int64_t, int64_t> entry{token, mismatches};
  if (worst.size() == kWorst && !worse_token(entry, worst.back())) return;
  worst.insert(std::upper_bound(worst.begin(), worst.end(), entry, worse_token), entry);
  if (worst.size() > kWorst) worst.pop_back();
}

void TokenSummary::merge(const TokenSummary& o) {
  tokens_with_mismatches += o.tokens_with_mismatches;
  digest += o.digest;
  std::vector<std::pair<int64_t, int64_t>> all = worst;
  all.insert(all.end(), o.worst.begin(), o.worst.end());
  std::sort(all.begin(), all.end(), worse_token);
  if (all.size() > kWorst) all.resize(kWorst);
  worst = std::move(all);
}

void MismatchStats::merge(const MismatchStats& o) {
  by_token.merge(o.by_token);
  elements += o.elements;
  mismatched += o.mismatched;
  for (size_t i = 0; i < by_lane.size(); ++i) by_lane[i] += o.by_lane[i];
  for (size_t i = 0; i < by_stream.size(); ++i) by_stream[i] += o.by_stream[i];
  if (o.first_mismatch >= 0 && (first_mismatch < 0 || o.first_mismatch < first_mismatch))
    first_mismatch = o.first_mismatch;
}

FingerprintReport fingerprint(const Shape& shape, const SlabSource& source, const FingerprintOptions& options) {
  run::require_thread_count(options.threads);
  if (shape.H < 1 || shape.H > kMaxStreams || shape.D < 1 || shape.S < 1)
    throw std::invalid_argument(fmt::format("fingerprint needs S >= 1, H in 1..16 and D >= 1 (got S={}, H={}, D={})",
                                            shape.S, shape.H, shape.D));
  std::vector<Variant> lattice = variant_lattice(shape.H);
  for (const Variant& v : options.extra)
    if (std::find(lattice.begin(), lattice.end(), v) == lattice.end()) lattice.push_back(v);

  FingerprintReport rep;
  rep.shape = shape;
  rep.lattice_size = int(lattice.size());

  // Stage 1: every variant on evenly strided tokens.
  const int64_t per_token = int64_t(shape.H) * shape.D;
  StageSpec sample;
  sample.token_stride = sample_stride(shape.S * per_token / std::max<int64_t>(1, options.sample_elements));
  std::vector<MismatchStats> sample_stats;
  int64_t fallbacks = 0, tokens = 0;
  run_stage(shape, source, lattice, sample, options.threads, sample_stats, fallbacks, tokens);
  rep.sampled_tokens = tokens;
  rep.sampled_elements = tokens * per_token;
  rep.exact_fallbacks += fallbacks;

  std::vector<size_t> order(lattice.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return sample_stats[a].mismatched < sample_stats[b].mismatched; });
  // The best few, and every variant tied with the best on the sample: ties are common where the inputs cannot
  // tell variants apart, and the full pass then says whether they really are equivalent. Ties at a non-zero
  // count are capped (none of them can match bit for bit); ties at zero are all verified, however many, since
  // any of them may be the exact match SPEC §6 asks for (tokens of zeros or padding in the sample once hid a
  // transposed-comb match behind 32 earlier variants).
  size_t n_survivors = std::min(order.size(), size_t(std::max(1, options.survivors)));
  const int64_t best_sample = sample_stats[order.front()].mismatched;
  const size_t tie_cap = best_sample == 0 ? order.size() : std::min(order.size(), kMaxTiedSurvivors);
  while (n_survivors < tie_cap && sample_stats[order[n_survivors]].mismatched == best_sample) ++n_survivors;

  std::vector<bool> chosen(lattice.size(), false);
  for (size_t i = 0; i < n_survivors; ++i) chosen[order[i]] = true;
  // Class winners: a lane mixture's minority recipe can be far off on the other lanes (hf-bf16 on every fourth d
  // of an fp32 kernel mismatches on the other three quarters) and so rank far below the survivors, while it is
  // the half the mixture needs. For every split pattern and class, the best variant on that class (by sample rank
  // among equals) is verified too when it matched the class exactly on the sample. Only without a match on the
  // sample, and at most kMaxClassWinners of them.
  std::vector<size_t> class_winners;
  if (best_sample > 0) {
    for (int period : mixture_patterns(shape.H)) {
      std::vector<std::vector<int64_t>> counts;  // in sample rank order
      for (size_t v : order) counts.push_back(class_counts(sample_stats[v], period, shape.H));
      for (size_t c = 0; c < counts.front().size() && class_winners.size() < kMaxClassWinners; ++c) {
        size_t rank = 0;
        for (size_t k = 1; k < counts.size(); ++k)
          if (counts[k][c] < counts[rank][c]) rank = k;
        const size_t best = order[rank];
        if (counts[rank][c] == 0 && !chosen[best]) {
          chosen[best] = true;
          class_winners.push_back(best);
        }
      }
    }
  }

  // Stage 2: the survivors on every element, with per-token counts.
  std::vector<Variant> survivors;
  for (size_t i = 0; i < n_survivors; ++i) survivors.push_back(lattice[order[i]]);
  for (size_t v : class_winners) survivors.push_back(lattice[v]);
  std::vector<MismatchStats> full_stats;
  run_stage(shape, source, survivors, StageSpec{1, true}, options.threads, full_stats, fallbacks, tokens);
  rep.exact_fallbacks += fallbacks;

  std::vector<RankedVariant> verified;
  for (size_t i = 0; i < survivors.size(); ++i) verified.push_back({survivors[i], full_stats[i], true});
  std::stable_sort(verified.begin(), verified.end(), [](const RankedVariant& a, const RankedVariant& b) {
    return a.stats.mismatched < b.stats.mismatched;
  });
  for (const RankedVariant& rv : verified)
    if (rv.stats.mismatched == 0) rep.exact_matches.push_back(rv.variant);
  rep.ranking = verified;
  for (size_t v : order)
    if (!chosen[v]) rep.ranking.push_back({lattice[v], sample_stats[v], false});

  if (!rep.matched()) {
    // The three best variants whose mismatches differ in where they fall (identical breakdowns say nothing new).
    for (size_t i = 0; i < verified.size() && rep.patterns.size() < 3; ++i) {
      const MismatchStats& st = verified[i].stats;
      const bool repeat = std::any_of(verified.begin(), verified.begin() + long(i), [&](const RankedVariant& o) {
        return o.stats.by_lane == st.by_lane && o.stats.by_stream == st.by_stream && o.stats.by_token == st.by_token;
      });
      if (!repeat) rep.patterns.push_back(breakdown(verified[i], shape.H));
    }
    rep.mixtures = best_mixtures(verified, shape.H, verified.front().stats.mismatched, 5);
  }
  return rep;
}

FingerprintReport fingerprint(const InputsView& in, const bf16_bits* candidate, const FingerprintOptions& options) {
  return fingerprint(in.shape, [&](const SlabVisitor& visit) { visit(0, in, candidate); }, options);
}

std::vector<bf16_bits> evaluate_variant(const Variant& v, const InputsView& in, int threads) {
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  std::vector<bf16_bits> out(size_t(in.shape.S) * H * D);
#pragma omp parallel num_threads(thread_count(threads))
  {
    TokenEvaluator ev;
#pragma omp for schedule(dynamic, 4)
    for (int64_t s = 0; s < in.shape.S; ++s) {
      ev.load(in, s);
      for (int ho = 0; ho < H; ++ho)
        for (int64_t d = 0; d < D; ++d) out[size_t((s * H + ho) * D + d)] = ev.value(v, ho, d);
    }
  }
  return out;
}

std::vector<bf16_bits> evaluate_mixture(const Mixture& m, const InputsView& in, int threads) {
  std::vector<bf16_bits> a = evaluate_variant(m.a, in, threads);
  const std::vector<bf16_bits> b = evaluate_variant(m.b, in, threads);
  const int H = in.shape.H;
  const int64_t D = in.shape.D;
  for (size_t i = 0; i < a.size(); ++i) {
    const int64_t d = int64_t(i) % D;
    const int ho = int((int64_t(i) / D) % H);
    const int cls = m.period > 0 ? int(d % m.period) : ho;
    if (m.pick[size_t(cls)]) a[i] = b[i];
  }
  return a;
}

// ---- Reports -----------------------------------------------------------------------------------------

namespace {

std::string flat_index(const Shape& sh, int64_t flat) {
  if (flat < 0) return "-";
  const int64_t d = flat % sh.D, ho = (flat / sh.D) % sh.H, s = flat / (sh.D * sh.H);
  return fmt::format("{},{},{}", s, ho, d);
}

std::string counts_list(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t n : v) { s += s.empty() ? "" : " "; s += std::to_string(n); }
  return s;
}

std::string picks_text(const Mixture& m) {
  std::vector<int64_t> a, b;
  for (size_t c = 0; c < m.pick.size(); ++c) (m.pick[c] ? b : a).push_back(int64_t(c));
  auto set = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t c : v) { s += s.empty() ? "" : ","; s += std::to_string(c); }
    return "{" + s + "}";
  };
  const std::string key = m.period > 0 ? fmt::format("d mod {}", m.period) : "ho";
  return fmt::format("{} in {} -> A, in {} -> B", key, set(a), set(b));
}

}  // namespace

std::string format_fingerprint_text(const FingerprintReport& r, int top) {
  std::string out;
  const int64_t elements = r.shape.S * r.shape.H * r.shape.D;
  out += fmt::format("fingerprint: S={} H={} D={} ({} elements), {} lattice variants; sampled {} tokens ({} elements), "
                     "verified {} on every element\n",
                     r.shape.S, r.shape.H, r.shape.D, elements, r.lattice_size, r.sampled_tokens, r.sampled_elements,
                     std::count_if(r.ranking.begin(), r.ranking.end(), [](const RankedVariant& v) { return v.verified; }));
  if (r.matched()) {
    const Variant& best = r.exact_matches.front();
    out += fmt::format("\nBIT-EXACT MATCH: {}\n", describe(best, r.inputs_dst_src));
    if (!preset_name(best).empty()) out += fmt::format("  {}\n", describe_fields(best, r.inputs_dst_src));
    if (r.exact_matches.size() > 1) {
      out += fmt::format("  {} other variant(s) give the same bits on these inputs (indistinguishable here):\n",
                         r.exact_matches.size() - 1);
      for (size_t i = 1; i < r.exact_matches.size(); ++i)
        out += fmt::format("    {}\n", describe(r.exact_matches[i], r.inputs_dst_src));
    }
  } else {
    out += r.mixture_matched() ? "\nNo single lattice variant matches bit-exactly; a two-variant mixture does (below).\n"
                               : "\nNo lattice variant matches bit-exactly, nor a two-variant mixture of them.\n";
  }
  out += "\nrank  mismatched        fraction   first at      variant\n";
  int shown = 0;
  for (const RankedVariant& rv : r.ranking) {
    if (shown++ >= top) break;
    const double frac = rv.stats.elements ? double(rv.stats.mismatched) / double(rv.stats.elements) : 0.0;
    out += fmt::format("{:>4}  {:>10}{}  {:>12.3e}  {:<12}  {}\n", shown, rv.stats.mismatched, rv.verified ? "      " : " (smp)",
                       frac, flat_index(r.shape, rv.stats.first_mismatch), describe(rv.variant, r.inputs_dst_src));
  }
  if (!r.patterns.empty()) {
    out += "\nWhere the best variants' mismatches fall:\n";
    for (const PatternBreakdown& p : r.patterns) {
      out += fmt::format("  {} ({} mismatched)\n", describe(p.variant, r.inputs_dst_src), p.mismatched);
      for (const auto& [period, counts] : p.by_d_mod) out += fmt::format("    by d mod {:<2}: {}\n", period, counts_list(counts));
      out += fmt::format("    by stream ho: {}\n", counts_list(p.by_stream));
      out += fmt::format("    tokens with mismatches: {} of {}", p.tokens_with_mismatches, r.shape.S);
      if (!p.worst_tokens.empty()) {
        out += "; worst:";
        for (const auto& [s, n] : p.worst_tokens) out += fmt::format(" s={} ({})", s, n);
      }
      out += "\n";
    }
  }
  if (!r.mixtures.empty()) {
    out += "\nTwo-variant mixtures split by an index pattern (compilers emit different code per lane):\n";
    for (const Mixture& m : r.mixtures) {
      out += fmt::format("  {} mismatched{} with {} ({} classes): {}\n", m.mismatched, m.mismatched == 0 ? " (BIT-EXACT)" : "",
                         m.pattern, m.classes, picks_text(m));
      out += fmt::format("    A = {}\n    B = {}\n", describe(m.a, r.inputs_dst_src), describe(m.b, r.inputs_dst_src));
    }
  }
  if (r.exact_fallbacks) out += fmt::format("\n({} exact elements needed the multiprecision fallback)\n", r.exact_fallbacks);
  return out;
}

std::string format_fingerprint_json(const FingerprintReport& r, int top) {
  using namespace json;
  auto variant_obj = [&r](const Variant& v) {
    return fmt::format("{{\"name\": {}, \"fields\": {}, \"preset\": {}}}", str(describe(v, r.inputs_dst_src)),
                       str(describe_fields(v, r.inputs_dst_src)), str(preset_name(v)));
  };
  auto list = [](const std::vector<int64_t>& v) {
    std::string s;
    for (int64_t n : v) { s += s.empty() ? "" : ", "; s += std::to_string(n); }
    return "[" + s + "]";
  };
  std::string out = "{\n  \"schema\": \"mhcdiff.fingerprint/1\",\n";
  out += fmt::format("  \"shape\": {{\"S\": {}, \"H\": {}, \"D\": {}}},\n", r.shape.S, r.shape.H, r.shape.D);
  // What a variant's "comb=" is relative to: the stored array, which the inputs were read as (--comb-layout or the
  // file's attribute).
  out += fmt::format("  \"inputs_comb_layout\": {},\n", str(r.inputs_dst_src ? "dst,src" : "src,dst"));
  out += fmt::format("  \"lattice_size\": {}, \"sampled_tokens\": {}, \"sampled_elements\": {},\n", r.lattice_size,
                     r.sampled_tokens, r.sampled_elements);
  out += fmt::format("  \"matched\": {}, \"mixture_matched\": {},\n  \"exact_matches\": [", boolean(r.matched()),
                     boolean(r.mixture_matched()));
  for (size_t i = 0; i < r.exact_matches.size(); ++i) { out += i ? ", " : ""; out += variant_obj(r.exact_matches[i]); }
  out += "],\n  \"ranking\": [";
  int shown = 0;
  for (const RankedVariant& rv : r.ranking) {
    if (shown >= top) break;
    out += fmt::format("{}\n    {{\"variant\": {}, \"mismatched\": {}, \"elements\": {}, \"verified\": {}, \"first_mismatch\": {}}}",
                       shown ? "," : "", variant_obj(rv.variant), rv.stats.mismatched, rv.stats.elements,
                       boolean(rv.verified), str(flat_index(r.shape, rv.stats.first_mismatch)));
    ++shown;
  }
  out += "],\n  \"patterns\": [";
  for (size_t i = 0; i < r.patterns.size(); ++i) {
    const PatternBreakdown& p = r.patterns[i];
    std::string mods;
    for (const auto& [period, counts] : p.by_d_mod) mods += fmt::format("{}\"{}\": {}", mods.empty() ? "" : ", ", period, list(counts));
    std::string worst;
    for (const auto& [s, n] : p.worst_tokens) worst += fmt::format("{}[{}, {}]", worst.empty() ? "" : ", ", s, n);
    out += fmt::format("{}\n    {{\"variant\": {}, \"mismatched\": {}, \"by_d_mod\": {{{}}}, \"by_stream\": {}, "
                       "\"tokens_with_mismatches\": {}, \"worst_tokens\": [{}]}}",
                       i ? "," : "", variant_obj(p.variant), p.mismatched, mods, list(p.by_stream), p.tokens_with_mismatches,
                       worst);
  }
  out += "],\n  \"mixtures\": [";
  for (size_t i = 0; i < r.mixtures.size(); ++i) {
    const Mixture& m = r.mixtures[i];
    std::string picks;
    for (int p : m.pick) { picks += picks.empty() ? "" : ", "; picks += std::to_string(p); }
    out += fmt::format("{}\n    {{\"a\": {}, \"b\": {}, \"pattern\": {}, \"classes\": {}, \"pick\": [{}], \"mismatched\": {}}}",
                       i ? "," : "", variant_obj(m.a), variant_obj(m.b), str(m.pattern), m.classes, picks, m.mismatched);
  }
  out += fmt::format("],\n  \"exact_fallbacks\": {}\n}}\n", r.exact_fallbacks);
  return out;
}

}  // namespace mhc::investigate
