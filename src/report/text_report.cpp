// The default report: a compact block per tensor, modelled on torch.testing.assert_close's message
// ("Mismatched elements: N / M (x%)", "Greatest absolute difference: … at index (…)"), then the ULP histogram,
// the truth metrics and census, the worst offenders and the gates. The first and last lines carry the verdict.
#include <fcntl.h>
#include <fmt/format.h>
#include <unistd.h>

#include <stdexcept>

#include "io/errors.hpp"
#include "io/files.hpp"
#include "report/numbers.hpp"
#include "report/report.hpp"
#include "report/text_safety.hpp"

namespace mhc::report {

using compare::CompareReport;
using compare::TensorReport;

ReportFormat parse_report_format(const std::string& name) {
  if (name == "text") return ReportFormat::text;
  if (name == "json") return ReportFormat::json;
  if (name == "markdown" || name == "md") return ReportFormat::markdown;
  if (name == "junit") return ReportFormat::junit;
  throw std::invalid_argument("unknown report format '" + name + "' (expected text, json, markdown or junit)");
}

std::string render(const CompareReport& r, ReportFormat f) {
  switch (f) {
    case ReportFormat::text: return render_text(r);
    case ReportFormat::json: return render_json(r);
    case ReportFormat::markdown: return render_markdown(r);
    case ReportFormat::junit: return render_junit(r);
  }
  return {};
}

std::string verdict_line(const CompareReport& r) {
  const int total = r.gates_total(), failed = r.gates_failed();
  if (failed)
    return fmt::format("FAIL: {} of {} gate{} failed (exit 1)", failed, total, total == 1 ? "" : "s");
  if (total == 0) return "PASS: no gate applied, nothing can fail (exit 0); set gates such as --max-ulp to enforce";
  return fmt::format("PASS: all {} gate{} passed (exit 0)", total, total == 1 ? "" : "s");
}

namespace {

std::string at(const TensorReport& t, int64_t flat) { return flat < 0 ? "" : " at index " + t.index(flat); }

std::string truth_line(const TensorReport& t, const metrics::TruthStats& s) {
  std::string line = fmt::format("{} not correctly rounded ({})", count(s.not_correctly_rounded),
                                 percent(s.elements ? double(s.not_correctly_rounded) / s.elements : 0.0));
  if (s.max_error_ulp.index >= 0)
    line += fmt::format(", max error {} truth-ULP{}, mean {}", metric(s.max_error_ulp.value), at(t, s.max_error_ulp.index),
                        metric(s.mean_error_ulp));
  return line;
}

std::string census_line(const TensorReport& t, const metrics::CensusStats& c) {
  std::string line = fmt::format("survived {}, flushed {}, sign-flipped {}, distorted {}; ghosts {} of {} exact zeros",
                                 count(c.survived), count(c.flushed), count(c.sign_flipped), count(c.distorted),
                                 count(c.ghosts), count(c.exact_zeros));
  const int64_t first_bad = c.first_lost();
  if (first_bad >= 0) line += "; first lost case" + at(t, first_bad);
  else if (c.first_ghost >= 0) line += "; first ghost" + at(t, c.first_ghost);
  return line;
}

void tensor_block(std::string& o, const TensorReport& t, const CompareReport& r) {
  const metrics::ComparisonStats& s = t.stats;
  const std::string shape = fmt::format("[{}]", fmt::join(t.dims, ","));
  o += fmt::format("\n{}  {} {}  ({})  {}\n", one_line(t.name), metrics::format_name(t.format), shape,
                   fmt::join(t.layout.axis_names, ","), t.passed() ? "pass" : "FAIL");
  if (s.mismatched == 0) {
    o += fmt::format("  Bitwise identical: 0 / {} elements differ\n", count(s.elements));
  } else {
    o += fmt::format("  Mismatched elements: {} / {} ({})", count(s.mismatched), count(s.elements),
                     percent(s.mismatch_fraction()));
    if (s.signed_zero_mismatches) o += fmt::format(", of which +0/-0: {}", count(s.signed_zero_mismatches));
    if (s.nonfinite_mismatches) o += fmt::format(", NaN/Inf vs other: {}", count(s.nonfinite_mismatches));
    o += "\n";
    if (s.max_abs.index >= 0)
      o += fmt::format("  Greatest absolute difference: {}{}", metric(s.max_abs.value), at(t, s.max_abs.index)) +
           (s.tolerance ? fmt::format(" (up to {} + {}·|R| allowed)", metric(s.tolerance->atol),
                                      metric(s.tolerance->rtol))
                        : "") +
           "\n";
    if (s.max_rel && s.max_rel->index >= 0)
      o += fmt::format("  Greatest relative difference: {}{} (where the reference is non-zero)\n",
                       metric(s.max_rel->value), at(t, s.max_rel->index));
    o += fmt::format("  Greatest ULP distance: {} {} ULP{}{}\n", ulp(s.max_ulp), metrics::format_name(t.format),
                     at(t, s.max_ulp_index), s.max_ulp == metrics::kInfiniteUlp ? " (a NaN/Inf mismatch)" : "");
    o += "  ULP histogram:";
    for (int b = 0; b < metrics::kUlpBins; ++b)
      o += fmt::format("  {}: {}", metrics::ulp_bin_label(b), count(s.ulp_histogram[b]));
    o += "\n";
    o += fmt::format("  Normwise: rel_l2 {}  normalized_max {}\n", metric(s.rel_l2), metric(s.normalized_max));
  }
  const auto& cn = s.candidate_nonfinite;
  const auto& rn = s.reference_nonfinite;
  if (cn.nan || cn.inf || rn.nan || rn.inf)
    o += fmt::format("  NaN / Inf: candidate {} / {}, reference {} / {}\n", count(cn.nan), count(cn.inf),
                     count(rn.nan), count(rn.inf));
  if (t.candidate_truth) o += "  vs exact, candidate: " + truth_line(t, *t.candidate_truth) + "\n";
  if (t.reference_truth) o += "  vs exact, reference: " + truth_line(t, *t.reference_truth) + "\n";
  if (t.relative_policy_truth)
    o += fmt::format("  vs exact, {}: {}\n", t.relative_policy, truth_line(t, *t.relative_policy_truth));
  if (t.candidate_census) {
    o += fmt::format("  Cancellation census (κ ≥ {}): {} cases among {} elements\n", metric(r.census_threshold),
                     count(t.candidate_census->cases), count(t.candidate_census->elements));
    o += "    candidate: " + census_line(t, *t.candidate_census) + "\n";
    if (t.reference_census) o += "    reference: " + census_line(t, *t.reference_census) + "\n";
  }
  if (!s.worst.empty()) {
    const size_t shown = std::min<size_t>(s.worst.size(), 5);
    o += fmt::format("  Worst {} of {} (by ULP, then |Δ|):\n", shown, count(s.mismatched));
    const int vw = t.format == metrics::Format::f64 ? 24 : 16;  // shortest round-trip binary64 needs up to 24
    o += fmt::format("    {:<20} {:>{}} {:>{}} {:>12} {:>6}\n", "index", "candidate", vw, "reference", vw, "|Δ|", "ULP");
    for (size_t i = 0; i < shown; ++i) {
      const metrics::Offender& w = s.worst[i];
      o += fmt::format("    {:<20} {:>{}} {:>{}} {:>12} {:>6}\n", t.index(w.index), value(w.candidate, t.format), vw,
                       value(w.reference, t.format), vw, metric(w.abs_diff), ulp(w.ulp));
    }
  }
  if (t.gates.empty()) {
    o += "  Gates: none apply to this tensor (reported only)\n";
  } else {
    o += "  Gates:\n";
    for (const auto& g : t.gates)
      o += fmt::format("    {} {:<18} {}  [{}]\n", g.passed ? "pass" : "FAIL", g.gate, one_line(g.summary),
                       one_line(g.origin));
  }
}

}  // namespace

std::string render_text(const CompareReport& r) {
  std::string o = fmt::format("mhcdiff {}: {}\n", r.mode, verdict_line(r));
  o += fmt::format("  candidate  {}\n  reference  {}\n", one_line(r.candidate), one_line(r.reference));
  if (!r.inputs.empty()) o += fmt::format("  inputs     {}\n", one_line(r.inputs));
  if (!r.truth.empty()) o += fmt::format("  truth      {}\n", one_line(r.truth));
  for (const auto& n : r.notes) o += fmt::format("  note: {}\n", one_line(n));
  for (const auto& t : r.tensors) tensor_block(o, t, r);
  o += "\n";
  if (r.passed()) {
    o += verdict_line(r) + "\n";
  } else {
    // The closing lines repeat every failed gate, so the end of a CI log says why on its own.
    for (const auto& t : r.tensors)
      for (const auto& g : t.gates)
        if (!g.passed) o += fmt::format("FAIL {} {}: {}\n", one_line(t.name), g.gate, one_line(g.summary));
    o += verdict_line(r) + "\n";
  }
  return o;
}

void write_file_atomically(const std::string& path, const std::string& content,
                           const std::vector<io::SourceFile>& sources, const std::function<void()>& before_commit) {
  // The same path rules and temp-file-and-rename as every HDF5 output (io::AtomicOutput): a directory, a device
  // node or a FIFO is refused, a symlink is written through to its target.
  io::AtomicOutput out(path, "report", sources);
  const int fd = open(out.temp_path().c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) throw IoError(out.failure(io::system_reason(errno)));
  for (size_t done = 0; done < content.size();) {
    const ssize_t n = write(fd, content.data() + done, content.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : EIO;
      close(fd);
      throw IoError(out.failure(io::system_reason(err)));
    }
    done += size_t(n);
  }
  if (close(fd) != 0) throw IoError(out.failure(io::system_reason(errno)));
  if (before_commit) before_commit();
  out.commit();
}

}  // namespace mhc::report
