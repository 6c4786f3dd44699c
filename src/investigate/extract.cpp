#include "investigate/extract.hpp"

#include <algorithm>
#include <optional>

#include <fmt/format.h>

#include "io/errors.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "metrics/comparison.hpp"
#include "metrics/ulp.hpp"
#include "run/thread_count.hpp"

namespace mhc::investigate {

uint64_t bf16_ulp_distance(bf16_bits a, bf16_bits b) {
  if (bf16_is_nan(a) && bf16_is_nan(b)) return 0;
  if (a == b) return 0;
  // NaN or an infinity against anything else is infinitely many ULP apart (docs/decisions.md, as compare
  // ranks it): an overflow to Inf must outrank any finite error.
  auto finite = [](bf16_bits v) { return (v & 0x7f80u) != 0x7f80u; };
  if (!finite(a) || !finite(b)) return metrics::kInfiniteUlp;
  return metrics::ulp_distance(a, b, 16);  // −0 and +0 share a point (SPEC §5: 0 ULP apart)
}

namespace {

std::string group_name(const OutSource& src, const char* fallback) {
  std::string n = src.label;
  std::replace(n.begin(), n.end(), '/', '_');
  while (!n.empty() && n.front() == '_') n.erase(n.begin());
  return n.empty() || n == "out" ? fallback : n;
}

// What a file side's results group says about itself: its provenance attributes and whether it holds the binary64
// twin of `out` (fp64 and exact results do). A repro keeps both, so that its groups are what the original's were:
// `compare` takes a group whose policy_description says accumulator=exact as the truth, and measures against
// its out_f64 (docs/investigate.md).
struct FileSideRecord {
  std::vector<std::pair<std::string, std::string>> provenance;  // the attributes `run` writes, as found
  std::string out_f64;                                          // the twin dataset, "" when there is none
  std::string note;                                             // an out_f64 that is no twin, left out
};

FileSideRecord file_side_record(const OutSource& src) {
  FileSideRecord rec;
  if (src.is_policy) return rec;
  const size_t slash = src.dataset.rfind('/');
  if (slash == 0 || slash == std::string::npos) return rec;  // a bare /out: the root holds no results provenance
  const std::string group = src.dataset.substr(0, slash);
  const io::TensorFile file(src.path);
  for (const auto& [key, value] : file.attributes(group))
    for (const char* kept : {"models", "tool_version", "policy_description", "device", "host", "utc_time"})
      if (key == kept) rec.provenance.emplace_back(key, value);
  const std::string twin = src.dataset + "_f64";
  // The binary64 twin only where it is one (float64, out's dims): a dump's "out_f64" of another dtype is left out
  // rather than failing the extract, with a word, since the repro's comparison then lacks it.
  if (src.dataset.substr(slash + 1) == "out" && file.exists(twin)) {
    const io::TensorInfo info = file.info(twin);
    if (info.dtype == io::DType::f64 && info.dims == file.info(src.dataset).dims) rec.out_f64 = twin;
    else
      rec.note = fmt::format("{}:{} is not the binary64 twin of {} (float64 of its shape); the repro leaves it out",
                             src.path, twin, src.dataset);
  }
  return rec;
}

// Appends the tokens at `offsets` (into a window that holds `per_token` values a token) to dst; a window that is
// all chosen tokens and the first of dst is moved, not copied.
template <class T>
void append_rows(std::vector<T>& dst, std::vector<T>&& window, int64_t per_token,
                 const std::vector<int64_t>& offsets) {
  if (dst.empty() && int64_t(offsets.size()) * per_token == int64_t(window.size())) {
    dst = std::move(window);
    return;
  }
  for (int64_t o : offsets)
    dst.insert(dst.end(), window.begin() + o * per_token, window.begin() + (o + 1) * per_token);
}

void append_tokens(Inputs& dst, Inputs&& window, const std::vector<int64_t>& offsets) {
  auto append = [&](auto& to, auto& from) {
    const int64_t per_token = int64_t(from.size()) / std::max<int64_t>(1, window.shape.S);
    append_rows(to, std::move(from), per_token, offsets);
  };
  append(dst.x, window.x);
  append(dst.residual, window.residual);
  append(dst.post, window.post);
  append(dst.comb, window.comb);
  append(dst.grad_out, window.grad_out);
}

// A span of the sources read at once: the chosen tokens tokens[k, k + n) lie in [start, start + length), with the
// unchosen tokens between them read and dropped.
struct Window {
  size_t k = 0, n = 0;
  int64_t start = 0, length = 0;
  std::vector<int64_t> offsets;  // the chosen tokens' positions in the window
};

}  // namespace

ExtractSummary extract_worst_tokens(const OutSource& candidate, const OutSource& reference, const std::string& inputs_path,
                                    const std::string& output, const ExtractOptions& options) {
  if (options.worst < 1) throw InputError(fmt::format("--worst must be at least 1 (got {})", options.worst));
  run::require_thread_count(options.threads);
  // The output must replace none of the files read: the inputs, nor a file side (-o res.h5 with res.h5:hf-bf16).
  std::vector<io::SourceFile> sources = {{"inputs", inputs_path}};
  if (!candidate.is_policy) sources.push_back({"candidate", candidate.path});
  if (!reference.is_policy) sources.push_back({"reference", reference.path});
  for (const std::string& f : options.policy_files) sources.push_back({"policy", f});
  io::check_output_path(output, "output", sources);
  io::InputReader reader(inputs_path, options.read);
  const Shape shape = reader.shape();
  check_out_shape(candidate, reader);
  check_out_shape(reference, reader);
  check_computed_from({&candidate, &reference}, reader);
  ExtractSummary summary;
  summary.source_shape = shape;

  // Score every token, a slab at a time, keeping the `worst` worst: a buffer trimmed to them whenever it holds
  // 2·worst + 4096 (a score per mismatched token grew with S). Worst first: largest ULP distance, then most
  // mismatches, then the earlier token.
  auto worse = [](const TokenScore& a, const TokenScore& b) {
    if (a.max_ulp != b.max_ulp) return a.max_ulp > b.max_ulp;
    if (a.mismatched != b.mismatched) return a.mismatched > b.mismatched;
    return a.token < b.token;
  };
  const size_t keep = size_t(std::min<int64_t>(options.worst, shape.S));
  std::vector<TokenScore> scores;
  auto trim = [&] {
    if (scores.size() <= keep) return;
    std::nth_element(scores.begin(), scores.begin() + ptrdiff_t(keep), scores.end(), worse);
    scores.resize(keep);
  };
  const int64_t per_token = int64_t(shape.H) * shape.D;
  const int64_t step = slab_tokens(shape);
  for (int64_t s0 = 0; s0 < shape.S; s0 += step) {
    const Inputs slab = reader.read_slab(s0, std::min(step, shape.S - s0));
    const std::vector<bf16_bits> c = read_out_slab(candidate, slab, s0, options.threads);
    const std::vector<bf16_bits> r = read_out_slab(reference, slab, s0, options.threads);
    for (int64_t s = 0; s < slab.shape.S; ++s) {
      TokenScore t{s0 + s, 0, 0};
      for (int64_t i = s * per_token; i < (s + 1) * per_token; ++i) {
        const bf16_bits a = c[size_t(i)], b = r[size_t(i)];
        if (a == b || (bf16_is_nan(a) && bf16_is_nan(b))) continue;
        ++t.mismatched;
        t.max_ulp = std::max(t.max_ulp, bf16_ulp_distance(a, b));
      }
      if (t.mismatched > 0) scores.push_back(t);
      if (scores.size() >= 2 * keep + 4096) trim();
    }
  }
  trim();
  std::sort(scores.begin(), scores.end(), worse);
  summary.written = scores;
  if (scores.empty()) return summary;

  // The repro: the chosen tokens in their original order, written a slab of tokens at a time (built whole in memory
  // it took ~270 KB per token at D = 4096: 23 GB at 85 000 tokens). First its inputs' checksum (every result group's
  // provenance carries it, so it is needed before the first one is declared) and census.
  std::vector<int64_t> tokens;
  for (const TokenScore& t : scores) tokens.push_back(t.token);
  std::sort(tokens.begin(), tokens.end());
  const Shape repro_shape{int64_t(tokens.size()), shape.H, shape.D};
  io::InputChecksum checksum;  // of the repro's own inputs, which its result groups were computed from
  io::InputCensus census;
  // The chosen tokens are read through windows: one read covers chosen tokens up to `max_gap` unchosen tokens apart
  // (about 256 KiB of inputs: reading them costs less than another read of every dataset), at most a slab long. One
  // read per run of consecutive tokens took 94 s for 410 593 scattered tokens of 1 000 000 at H = D = 1.
  const int64_t max_gap = (int64_t{256} << 10) / io::token_input_bytes(shape, reader.has_grad());
  auto for_each_window = [&](size_t first, size_t last, const auto& visit) {  // visit(const Window&)
    for (size_t k = first; k < last;) {
      Window w{k, 1, tokens[k], 1, {0}};
      while (k + w.n < last && tokens[k + w.n] - tokens[k + w.n - 1] - 1 <= max_gap &&
             tokens[k + w.n] - w.start < step) {
        w.offsets.push_back(tokens[k + w.n] - w.start);
        ++w.n;
      }
      w.length = tokens[k + w.n - 1] - w.start + 1;
      visit(w);
      k += w.n;
    }
  };
  // The inputs of the chosen tokens tokens[first, last), in order; census counts theirs only.
  auto gather_inputs = [&](size_t first, size_t last, io::InputCensus* census) {
    Inputs gathered;
    gathered.shape = {int64_t(last - first), shape.H, shape.D};
    for_each_window(first, last, [&](const Window& w) {
      append_tokens(gathered, reader.read_slab(w.start, w.length, census), w.offsets);
    });
    return gathered;
  };
  census.only_tokens = &tokens;
  for (size_t first = 0; first < tokens.size(); first += size_t(step))
    checksum.update(gather_inputs(first, std::min(tokens.size(), first + size_t(step)), &census));
  census.only_tokens = nullptr;

  summary.candidate_group = group_name(candidate, "candidate");
  summary.reference_group = group_name(reference, "reference");
  if (summary.candidate_group == summary.reference_group) {
    summary.candidate_group += "-candidate";
    summary.reference_group += "-reference";
  }
  const FileSideRecord cand_record = file_side_record(candidate), ref_record = file_side_record(reference);
  for (const FileSideRecord* record : {&cand_record, &ref_record})
    if (!record->note.empty()) summary.notes.push_back(record->note);
  io::ResultWriter writer(output, sources);
  writer.declare_inputs(repro_shape, reader.has_grad());
  writer.describe_inputs(inputs_path, checksum.hex(), census);
  writer.describe_comb_layout(reader.comb_layout_text());
  auto declare_side = [&](const OutSource& src, const std::string& group, const FileSideRecord& record) {
    Policy p = src.is_policy ? src.policy : Policy{};
    p.name = group;
    if (src.is_policy) {
      writer.declare_policy(p, repro_shape, false, io::make_provenance(p, "cpu", checksum.hex()));
      return;
    }
    // Values read from a file keep the provenance they were stored with (the device that computed them, the
    // policy they claim); a dump without any says "unknown" rather than this machine's CPU. The checksum is the
    // repro's own inputs', which the values were computed from.
    const std::string source = fmt::format("{}:{}", src.path, src.dataset);
    p.models = "read from " + source;
    if (!record.out_f64.empty()) p.desc.accumulator = Accumulator::fp64;  // declare_policy makes out_f64 for these
    io::Provenance prov = io::make_provenance(p, "unknown", checksum.hex());
    prov.policy_description = "unknown: values read from " + source;
    prov.tool_version = prov.host = prov.utc_time = "unknown";
    for (const auto& [key, value] : record.provenance) {
      if (key == "models") prov.models = value;
      if (key == "tool_version") prov.tool_version = value;
      if (key == "policy_description") prov.policy_description = value;
      if (key == "device") prov.device = value;
      if (key == "host") prov.host = value;
      if (key == "utc_time") prov.utc_time = value;
    }
    writer.declare_policy(p, repro_shape, false, prov);
    writer.set_attribute("/results/" + group, "source", source);
  };
  declare_side(candidate, summary.candidate_group, cand_record);
  declare_side(reference, summary.reference_group, ref_record);

  // Each side: a policy computed on the gathered tokens, or a file read through the same windows (opened once).
  struct Side {
    std::optional<io::TensorFile> file;
    const OutSource* src;
    const FileSideRecord* record;
  };
  auto open_side = [](const OutSource& src, const FileSideRecord& record) {
    std::optional<io::TensorFile> file;
    if (!src.is_policy) file.emplace(src.path);
    return Side{std::move(file), &src, &record};
  };
  const Side sides[] = {open_side(candidate, cand_record), open_side(reference, ref_record)};
  for (size_t first = 0; first < tokens.size(); first += size_t(step)) {
    const size_t last = std::min(tokens.size(), first + size_t(step));
    const Inputs slab = gather_inputs(first, last, nullptr);
    PolicyResult results[2];
    for (int i = 0; i < 2; ++i) {
      const OutSource& src = *sides[i].src;
      PolicyResult& result = results[i];
      if (src.is_policy) {
        // fp64/exact result groups carry their binary64 copy too, as `run` writes them.
        if (stores_f64(src.policy.desc))
          result = run_policy_cpu(src.policy.desc, slab.view(), false, {.threads = options.threads});
        else
          result.out = read_out_slab(src, slab, 0, options.threads);  // computed: no position in a file
        continue;
      }
      const bool twin = !sides[i].record->out_f64.empty();
      for_each_window(first, last, [&](const Window& w) {
        std::vector<bf16_bits> out(size_t(w.length * per_token));
        sides[i].file->read_bf16(src.dataset, w.start * per_token, w.length * per_token, out.data());
        append_rows(result.out, std::move(out), per_token, w.offsets);
        if (!twin) return;
        std::vector<double> out_f64(size_t(w.length * per_token));
        sides[i].file->read_f64(sides[i].record->out_f64, w.start * per_token, w.length * per_token, out_f64.data());
        append_rows(result.out_f64, std::move(out_f64), per_token, w.offsets);
      });
    }
    writer.append_inputs(int64_t(first), slab);
    writer.append_result(summary.candidate_group, int64_t(first), results[0]);
    writer.append_result(summary.reference_group, int64_t(first), results[1]);
  }
  std::string list;
  for (int64_t s : tokens) { list += list.empty() ? "" : ","; list += std::to_string(s); }
  writer.set_attribute("/", "source_inputs", inputs_path);
  writer.set_attribute("/", "source_tokens", list);
  writer.set_attribute("/", "candidate", candidate.text);
  writer.set_attribute("/", "reference", reference.text);
  writer.commit();
  return summary;
}

}  // namespace mhc::investigate
