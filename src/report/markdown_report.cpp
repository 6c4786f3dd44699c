// Markdown for a PR review: the verdict, one summary table (a row per tensor), the failed gates, and the
// details (histograms, truth, census) folded away in <details>.
#include <fmt/format.h>

#include <algorithm>

#include "report/numbers.hpp"
#include "report/report.hpp"
#include "report/text_safety.hpp"

namespace mhc::report {

using compare::CompareReport;
using compare::TensorReport;

namespace {

// Text outside code spans: on one line (one_line), the pipe escaped so that a table cell stays one cell, and '<', '>',
// '&' as entities so that a name cannot open or close HTML (the <details> block below). CommonMark decodes both
// escapes, so the reader sees the original characters.
std::string cell(const std::string& s) {
  std::string out;
  for (char c : one_line(s)) {
    switch (c) {
      case '|': out += "\\|"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      default: out += c;
    }
  }
  return out;
}

// A code span of `s` on one line, fenced by one backtick more than its longest run of backticks (CommonMark), padded
// with a space where s starts or ends with a backtick. In a table cell a pipe must still be escaped (GFM reads \| as
// a pipe there, inside code spans too); elsewhere a backslash in a code span is literal, so nothing else is escaped.
std::string code(const std::string& s, bool in_table = false) {
  std::string body;
  size_t run = 0, longest = 0;
  for (char c : one_line(s)) {
    run = c == '`' ? run + 1 : 0;
    longest = std::max(longest, run);
    if (c == '|' && in_table) body += '\\';
    body += c;
  }
  const std::string fence(longest + 1, '`');
  const bool pad = !body.empty() && (body.front() == '`' || body.back() == '`');
  return fence + (pad ? " " : "") + body + (pad ? " " : "") + fence;
}

std::string with_index(const std::string& v, const TensorReport& t, int64_t flat) {
  return flat < 0 ? v : v + " at " + t.index(flat);
}

}  // namespace

std::string render_markdown(const CompareReport& r) {
  std::string o = fmt::format("### mhcdiff {}: {} {}\n\n", r.mode, r.passed() ? "✅" : "❌", cell(verdict_line(r)));
  o += fmt::format("- candidate: {}\n- reference: {}\n", code(r.candidate), code(r.reference));
  if (!r.inputs.empty()) o += fmt::format("- inputs: {}\n", code(r.inputs));
  if (!r.truth.empty()) o += fmt::format("- truth: {}\n", cell(r.truth));
  for (const auto& n : r.notes) o += fmt::format("- note: {}\n", cell(n));
  o += "\n| tensor | dtype | mismatched | max ULP | max abs diff | rel_l2 | not correctly rounded | verdict |\n";
  o += "|---|---|---:|---:|---:|---:|---:|---|\n";
  for (const auto& t : r.tensors) {
    const auto& s = t.stats;
    const std::string ncr = t.candidate_truth ? count(t.candidate_truth->not_correctly_rounded) : "–";
    o += fmt::format("| {} | {} | {} / {} ({}) | {} | {} | {} | {} | {} |\n", code(t.name, true),
                     metrics::format_name(t.format), count(s.mismatched), count(s.elements),
                     percent(s.mismatch_fraction()), cell(with_index(ulp(s.max_ulp), t, s.max_ulp_index)),
                     cell(with_index(metric(s.max_abs.index >= 0 ? s.max_abs.value : 0.0), t, s.max_abs.index)),
                     metric(s.rel_l2), ncr, t.passed() ? "pass" : "**FAIL**");
  }
  if (!r.passed()) {
    o += "\n**Failed gates**\n\n";
    for (const auto& t : r.tensors)
      for (const auto& g : t.gates)
        if (!g.passed)
          o += fmt::format("- {} {}: {} ({})\n", code(t.name), code(g.gate), cell(g.summary), cell(g.origin));
  }
  o += "\n<details><summary>Details: gates, ULP histograms, truth, census</summary>\n\n";
  for (const auto& t : r.tensors) {
    const auto& s = t.stats;
    o += fmt::format("#### {}\n\n", code(t.name));
    std::string labels = "| ULP |", rule = "|---|", counts = "| count |";
    for (int b = 0; b < metrics::kUlpBins; ++b) {
      labels += fmt::format(" {} |", metrics::ulp_bin_label(b));
      rule += "---:|";
      counts += fmt::format(" {} |", count(s.ulp_histogram[b]));
    }
    o += labels + "\n" + rule + "\n" + counts + "\n\n";
    if (t.candidate_truth)
      o += fmt::format("- vs exact (candidate): {} not correctly rounded, max error {} truth-ULP\n",
                       count(t.candidate_truth->not_correctly_rounded), metric(t.candidate_truth->max_error_ulp.value));
    if (t.candidate_census) {
      const auto& c = *t.candidate_census;
      o += fmt::format("- cancellation census (κ ≥ {}): {} cases; survived {}, flushed {}, sign-flipped {}, "
                       "distorted {}; ghosts {}\n",
                       metric(r.census_threshold), count(c.cases), count(c.survived), count(c.flushed),
                       count(c.sign_flipped), count(c.distorted), count(c.ghosts));
    }
    for (const auto& g : t.gates)
      o += fmt::format("- gate {} {}: {}\n", code(g.gate), g.passed ? "pass" : "**FAIL**", cell(g.summary));
    if (t.gates.empty()) o += "- no gate applies (reported only)\n";
    o += "\n";
  }
  o += "</details>\n";
  return o;
}

}  // namespace mhc::report
