// JUnit XML for CI dashboards (Jenkins, GitLab, GitHub test reporters): one <testcase> per tensor × gate,
// classname "mhcdiff.<mode>.<tensor>", a <failure> carrying the gate's one-line summary. A tensor without gates
// still appears, as one passing "report" case, so the dashboard shows it was compared.
#include <fmt/format.h>

#include "report/report.hpp"
#include "report/text_safety.hpp"

namespace mhc::report {

using compare::CompareReport;

namespace {

// XML 1.0 text and attribute escaping of UTF-8 text (valid_utf8: names may hold other bytes). Tab, newline and
// carriage return are written as character references, which attribute values keep (written raw, a parser turns them
// into spaces); other control characters, and U+FFFE and U+FFFF, are not allowed in XML 1.0 at all and become U+FFFD.
std::string xml(const std::string& s) {
  std::string text = valid_utf8(s);
  for (const char* noncharacter : {"\xEF\xBF\xBE", "\xEF\xBF\xBF"})
    for (size_t at = text.find(noncharacter); at != std::string::npos; at = text.find(noncharacter, at + 3))
      text.replace(at, 3, "\xEF\xBF\xBD");
  std::string out;
  for (char c : text) {
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      case '\t': out += "&#9;"; break;
      case '\n': out += "&#10;"; break;
      case '\r': out += "&#13;"; break;
      default: out += u < 0x20 ? "\xEF\xBF\xBD" : std::string(1, c);
    }
  }
  return out;
}

}  // namespace

std::string render_junit(const CompareReport& r) {
  int tests = 0;
  for (const auto& t : r.tensors) tests += t.gates.empty() ? 1 : static_cast<int>(t.gates.size());
  const std::string suite = r.mode == "compare" ? "mhcdiff.compare" : "mhcdiff.golden";
  std::string o = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  o += fmt::format("<testsuites name=\"mhcdiff\" tests=\"{}\" failures=\"{}\" errors=\"0\">\n", tests, r.gates_failed());
  o += fmt::format("  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"0\" skipped=\"0\">\n", suite, tests,
                   r.gates_failed());
  o += "    <properties>\n";
  o += fmt::format("      <property name=\"candidate\" value=\"{}\"/>\n", xml(r.candidate));
  o += fmt::format("      <property name=\"reference\" value=\"{}\"/>\n", xml(r.reference));
  if (!r.inputs.empty()) o += fmt::format("      <property name=\"inputs\" value=\"{}\"/>\n", xml(r.inputs));
  o += fmt::format("      <property name=\"verdict\" value=\"{}\"/>\n", xml(verdict_line(r)));
  o += "    </properties>\n";
  for (const auto& t : r.tensors) {
    const std::string cls = xml(suite + "." + t.name);
    const std::string overview = fmt::format("{}: {} of {} elements mismatched, max ULP {}", t.name, t.stats.mismatched,
                                             t.stats.elements,
                                             t.stats.max_ulp == metrics::kInfiniteUlp ? std::string("inf")
                                                                                       : std::to_string(t.stats.max_ulp));
    if (t.gates.empty()) {
      o += fmt::format("    <testcase classname=\"{}\" name=\"report\"><system-out>{}</system-out></testcase>\n", cls,
                       xml(overview + " (no gate applies)"));
      continue;
    }
    for (const auto& g : t.gates) {
      o += fmt::format("    <testcase classname=\"{}\" name=\"{}\">", cls, xml(g.gate));
      if (!g.passed)
        o += fmt::format("\n      <failure type=\"gate\" message=\"{}\">{}\n{}</failure>\n    ", xml(g.summary),
                         xml(t.name + " " + g.gate + ": " + g.summary + " [" + g.origin + "]"), xml(overview));
      o += "</testcase>\n";
    }
  }
  o += "  </testsuite>\n</testsuites>\n";
  return o;
}

}  // namespace mhc::report
