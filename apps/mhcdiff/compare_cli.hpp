#pragma once
// Options shared by `compare` and `golden check`: gates, report format and destination, compute settings.
// Declared once so both commands spell and document them identically.
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "compare/engine.hpp"
#include "input_cli.hpp"
#include "io/files.hpp"
#include "io/errors.hpp"
#include "report/report.hpp"

namespace mhc::cli {

struct CompareCliOptions {
  std::string inputs;
  std::vector<std::string> tensors;
  // Whole numbers up to 2^64 − 1, read by parse_whole_number: as int64 options they were capped at 2^63 − 1
  // (out-of-range text included), although binary64 tensors reach distances near 2^64.
  std::optional<std::string> max_mismatch;
  std::optional<double> max_mismatch_frac;
  std::optional<std::string> max_ulp;
  std::optional<double> rtol, atol;
  std::optional<std::string> out_rel_l2, out_norm_max;    // out and out_f64 (not given: no such gate)
  std::optional<std::string> grad_rel_l2, grad_norm_max;  // not given: the defaults (kDefaultGrad*)
  std::optional<double> min_survivor_frac;
  double census_threshold = metrics::kDefaultCensusThreshold;
  std::string relative_to;
  double factor = 1.0;
  std::string relative_metric = "max_truth_ulp";
  std::string format = "text";
  std::string report_path;
  int top_k = 10;
  std::vector<std::string> policy_files;
  std::string device = "auto";
  int threads = 0;
  InputReadCli read;  // how --inputs is read (not offered by golden check: the golden file holds its inputs)
};

inline void add_compare_options(CLI::App* cmd, CompareCliOptions& o, bool with_inputs = true) {
  CLI::Option* inputs = nullptr;
  if (with_inputs)
    inputs = cmd->add_option("--inputs", o.inputs,
                    "inputs file: computes policy: sides, the exact truth (truth-ULP error, correct rounding) and the "
                    "cancellation census");
  cmd->add_option("--tensors", o.tensors, "tensors to compare (default: all the sides hold)")->delimiter(',');
  // golden check: the golden file's stored limits gate every tensor it holds, and a gate given here replaces one.
  auto* g = with_inputs ? "Gates (exit 1 when one fails; none applies to out unless given)"
                        : "Gates (exit 1 when one fails; the golden file's stored limits apply, and each gate given "
                          "here replaces the stored one)";
  // Read as text and parsed whole (parse_whole_number), so that CLI11 would call them TEXT: named for what they take.
  cmd->add_option("--max-mismatch", o.max_mismatch, "at most N elements whose bits differ")->type_name("N")->group(g);
  cmd->add_option("--max-mismatch-frac", o.max_mismatch_frac, "at most this fraction of elements differ")->group(g);
  cmd->add_option("--max-ulp", o.max_ulp, "at most U ULP (in the tensor's own dtype) between any pair")
      ->type_name("U")
      ->group(g);
  auto* rtol = cmd->add_option("--rtol", o.rtol, "torch-style |C-R| <= atol + rtol*|R| for every element")->group(g);
  auto* atol = cmd->add_option("--atol", o.atol, "absolute part of the torch-style tolerance")->group(g);
  rtol->needs(atol);
  atol->needs(rtol);
  cmd->add_option("--out-rel-l2", o.out_rel_l2,
                  with_inputs ? "out: ||C-R||/||R|| at most this (no default; 'off' to disable)"
                              : "out: ||C-R||/||R|| at most this ('off' removes the stored limit)")
      ->type_name("X|off")
      ->group(g);
  cmd->add_option("--out-norm-max", o.out_norm_max,
                  with_inputs ? "out: max|C-R|/max|R| at most this (no default; 'off' to disable)"
                              : "out: max|C-R|/max|R| at most this ('off' removes the stored limit)")
      ->type_name("X|off")
      ->group(g);
  // golden check applies no default: the golden file stores a limit for every tensor it holds (docs/metrics.md).
  cmd->add_option("--grad-rel-l2", o.grad_rel_l2,
                  with_inputs ? fmt::format("grad_* tensors: ||C-R||/||R|| at most this (default {}; 'off' to disable)",
                                            compare::kDefaultGradRelL2)
                              : "grad_* tensors: ||C-R||/||R|| at most this ('off' removes the stored limit)")
      ->type_name("X|off")
      ->group(g);
  cmd->add_option("--grad-norm-max", o.grad_norm_max,
                  with_inputs ? fmt::format("grad_* tensors: max|C-R|/max|R| at most this (default {}; 'off' to "
                                            "disable)",
                                            compare::kDefaultGradNormMax)
                              : "grad_* tensors: max|C-R|/max|R| at most this ('off' removes the stored limit)")
      ->type_name("X|off")
      ->group(g);
  cmd->add_option("--min-survivor-frac", o.min_survivor_frac,
                  with_inputs ? "out: at least this fraction of cancellation cases must survive (needs --inputs)"
                              : "out: at least this fraction of cancellation cases must survive (from the golden "
                                "file's inputs)")
      ->group(g);
  auto* rel = cmd->add_option("--relative-to", o.relative_to,
                              with_inputs ? "candidate's error vs exact at most --factor times this policy's (needs "
                                            "--inputs)"
                                          : "candidate's error vs exact at most --factor times this policy's (from the "
                                            "golden file's inputs)")
                  ->group(g);
  cmd->add_option("--factor", o.factor, "the k of --relative-to")->group(g)->needs(rel)->capture_default_str();
  cmd->add_option("--relative-metric", o.relative_metric, "error measure of --relative-to")
      ->group(g)
      ->needs(rel)  // like --factor: alone it would be accepted and do nothing
      ->check(CLI::IsMember({"max_abs", "rel_l2", "max_truth_ulp"}))
      ->capture_default_str();
  cmd->add_option("--census-threshold", o.census_threshold, "kappa at which an element is a cancellation case")
      ->capture_default_str();
  cmd->add_option("--format", o.format, "report format")
      ->check(CLI::IsMember({"text", "json", "markdown", "md", "junit"}))
      ->capture_default_str();
  cmd->add_option("--report", o.report_path, "write the --format report to FILE; the text summary still goes to stdout")
      ->check(CLI::Validator(  // "" used to mean no report file, silently
          [](std::string& v) { return v.empty() ? std::string("an empty file name") : std::string(); }, "FILE"));
  cmd->add_option("--top-k", o.top_k, "worst offenders listed per tensor")->transform(whole_number_in(0, 10000))->capture_default_str();
  cmd->add_option("--policy-file", o.policy_files,
                  "a user policy (docs/policy-file.md) usable as policy:NAME and --relative-to NAME; repeatable");
  cmd->add_option("--device", o.device, "where policy: sides and the exact truth are computed")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  cmd->add_option("--threads", o.threads, "CPU threads (0 = all)")->transform(thread_count_check())->capture_default_str();
  if (with_inputs) {
    add_input_read_options(cmd, o.read);
    // These act only on what --inputs reads: without it they were accepted and did nothing.
    for (const char* name : {"--comb-layout", "--round-inputs", "--allow-nonfinite", "--census-threshold"})
      cmd->get_option(name)->needs(inputs);
  }
}

// Every check below is written as "not in range", so that NaN (for which every comparison is false) is refused
// too: a NaN limit would otherwise reach a gate that it makes pass.

// A count limit: decimal digits only, 0 .. 2^64 − 1. A sign, a fraction, an exponent or a larger number is refused
// (a negative count used to wrap to 2^64 − 3 when read as unsigned, and to be capped when read as int64).
inline uint64_t parse_whole_number(const std::string& option, const std::string& text) {
  if (!text.empty() && text[0] == '-') throw InputError(fmt::format("{} {} must be at least 0", option, text));
  const Digits d = read_digits(text);
  if (!d.digits || d.too_large)
    throw InputError(fmt::format("{} {}: expected a whole number from 0 to {}", option, text,
                                 std::numeric_limits<uint64_t>::max()));
  return d.value;
}

// "off" / "none" disables a defaulted gate; anything else must be a finite non-negative number.
inline std::optional<double> parse_optional_limit(const std::string& option, const std::string& text) {
  if (text == "off" || text == "none") return std::nullopt;
  try {
    size_t used = 0;
    const double v = std::stod(text, &used);
    if (used == text.size() && std::isfinite(v) && v >= 0) return v;
  } catch (const std::exception&) {
  }
  throw InputError(fmt::format("{} {}: expected a finite non-negative number or 'off'", option, text));
}

// A normwise limit option (--grad-rel-l2, --out-norm-max, ...) into `limit`: a value, or 'off' to clear it. Returns
// whether it was given (golden check then lets it replace the stored limit; a default never does).
inline bool set_given_limit(const std::optional<std::string>& text, const char* option,
                            std::optional<compare::Threshold>& limit) {
  if (!text) return false;
  limit.reset();
  if (auto v = parse_optional_limit(option, *text)) limit = compare::Threshold{*v, option};
  return true;
}

inline compare::CompareOptions to_compare_options(const CompareCliOptions& o) {
  compare::CompareOptions c;
  c.inputs = o.inputs;
  c.tensors = o.tensors;
  c.top_k = o.top_k;
  c.census_threshold = o.census_threshold;  // the values below are checked by compare::validate_gates
  c.policy_files = o.policy_files;
  c.device = o.device;
  c.threads = o.threads;
  c.read = o.read.options();
  compare::GateConfig& g = c.gates;
  g = compare::GateConfig{};
  g.grad_tensors.rel_l2 = compare::Threshold{compare::kDefaultGradRelL2, "--grad-rel-l2 (default)"};
  g.grad_tensors.norm_max = compare::Threshold{compare::kDefaultGradNormMax, "--grad-norm-max (default)"};
  g.grad_rel_l2_given = set_given_limit(o.grad_rel_l2, "--grad-rel-l2", g.grad_tensors.rel_l2);
  g.grad_norm_max_given = set_given_limit(o.grad_norm_max, "--grad-norm-max", g.grad_tensors.norm_max);
  g.out_rel_l2_given = set_given_limit(o.out_rel_l2, "--out-rel-l2", g.out_tensors.rel_l2);
  g.out_norm_max_given = set_given_limit(o.out_norm_max, "--out-norm-max", g.out_tensors.norm_max);
  compare::Thresholds& all = g.every_tensor;
  if (o.max_mismatch)
    all.max_mismatch = compare::Threshold::whole_number(parse_whole_number("--max-mismatch", *o.max_mismatch),
                                                        "--max-mismatch");
  if (o.max_mismatch_frac) all.max_mismatch_frac = compare::Threshold{*o.max_mismatch_frac, "--max-mismatch-frac"};
  if (o.max_ulp) all.max_ulp = compare::Threshold::whole_number(parse_whole_number("--max-ulp", *o.max_ulp), "--max-ulp");
  if (o.rtol && o.atol) {
    all.tolerance = metrics::Tolerance{*o.rtol, *o.atol};
    all.tolerance_origin = "--rtol/--atol";
  }
  if (o.min_survivor_frac) all.min_survivor_frac = compare::Threshold{*o.min_survivor_frac, "--min-survivor-frac"};
  if (!o.relative_to.empty()) {
    g.relative_to = o.relative_to;
    g.relative_factor = o.factor;
    g.relative_metric = o.relative_metric == "rel_l2"    ? compare::RelativeMetric::rel_l2
                        : o.relative_metric == "max_abs" ? compare::RelativeMetric::max_abs
                                                         : compare::RelativeMetric::max_truth_ulp;
  }
  return c;
}

// The files a comparison reads (the sides that are files, --inputs, the golden file), which its --report must not
// replace; checked before the comparison runs, so a refused path fails fast.
inline std::vector<io::SourceFile> compared_files(const CompareCliOptions& o,
                                                  std::initializer_list<std::pair<const char*, std::string>> sides,
                                                  const std::string& inputs) {
  std::vector<io::SourceFile> files;
  for (const auto& [role, side] : sides) {
    const compare::SideSpec spec = compare::parse_side(side);
    if (!spec.is_policy) files.push_back({role, spec.path});
  }
  if (!inputs.empty()) files.push_back({"inputs", inputs});
  for (const std::string& f : o.policy_files) files.push_back({"policy", f});
  if (!o.report_path.empty()) io::check_output_path(o.report_path, "report", files);
  return files;
}

// Prints (or writes) the report; returns the exit code (0 / 1). With --report, the file gets the --format
// rendering and stdout still gets the text summary.
inline int emit_report(const compare::CompareReport& rep, const CompareCliOptions& o,
                       const std::vector<io::SourceFile>& read) {
  const report::ReportFormat f = report::parse_report_format(o.format);
  if (!o.report_path.empty()) {
    // The summary goes out once the report is on disk and before it is committed: when writing either fails, the
    // command fails (exit 2) with no report file (only the final rename could still fail after the summary).
    report::write_file_atomically(o.report_path, report::render(rep, f), read, [&] {
      io::write_stdout(report::render_text(rep));
      io::flush_stdout();
    });
  } else {
    io::write_stdout(report::render(rep, f));
    io::flush_stdout();
  }
  return rep.exit_code();
}

}  // namespace mhc::cli
