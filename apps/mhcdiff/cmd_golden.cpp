// mhcdiff golden regen|check: golden baselines with tolerances measured from the spread between accepted
// policies and repeated runs (docs/ci.md). `check` has compare's exit codes and reports.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <memory>

#include "commands.hpp"
#include "compare/golden.hpp"
#include "compare_cli.hpp"
#include "input_cli.hpp"
#include "report/numbers.hpp"

namespace mhc::cli {

void add_golden_command(CLI::App& app, CommandContext& ctx) {
  CLI::App* golden = app.add_subcommand("golden", "golden baselines: regenerate, or check a candidate against one");
  golden->require_subcommand(1);

  auto regen = std::make_shared<compare::GoldenRegenOptions>();
  auto regen_read = std::make_shared<InputReadCli>();
  CLI::App* r = golden->add_subcommand("regen", "write inputs + reference outputs + provenance + tolerances atomically");
  r->add_option("input", regen->input, "inputs file (mhcdiff/1 /inputs)")->required();
  r->add_option("-o,--output", regen->output, "golden file to write")->required();
  r->add_option("--policies", regen->policies, "accepted policies; the first is the reference")->capture_default_str();
  r->add_option("--repeat", regen->repeat, "runs per policy (run-to-run spread widens the tolerances)")
      ->transform(whole_number_in(1, 100))
      ->capture_default_str();
  r->add_flag("--force", regen->force, "overwrite an existing golden file");
  r->add_option("--device", regen->device, "auto, cpu or cuda")->check(CLI::IsMember({"auto", "cpu", "cuda"}))->capture_default_str();
  r->add_option("--threads", regen->threads, "CPU threads (0 = all)")->transform(thread_count_check())->capture_default_str();
  add_input_read_options(r, *regen_read);
  r->callback([regen, regen_read, &ctx] {
    regen->read = regen_read->options();
    const compare::GoldenRegenSummary s = compare::golden_regen(*regen);
    std::string out = fmt::format("wrote {}: reference {}, policies {}, S={} H={} D={}{}\n", regen->output,
                                  s.reference, fmt::join(s.policies, ","), s.shape.S, s.shape.H, s.shape.D,
                                  s.backward ? ", with gradients" : "");
    if (regen->repeat > 1)
      out += fmt::format("repeated runs: {} elements differed between runs\n", report::count(s.repeat_mismatches));
    out += fmt::format("recommended tolerances (the worst an accepted policy reached against {}):\n", s.reference);
    // A max ULP is an integer (or inf) and prints whole, as the limit golden check will apply.
    auto ulp_text = [](double u) {
      return std::isinf(u) ? report::ulp(metrics::kInfiniteUlp) : report::ulp(static_cast<uint64_t>(u));
    };
    out += fmt::format("  {:<14} {:>10} {:>14} {:>12} {:>12}  {}\n", "tensor", "max ULP", "mismatch frac", "rel_l2",
                       "norm_max", "set by");
    for (const auto& t : s.tolerances)
      out += fmt::format("  {:<14} {:>10} {:>14} {:>12} {:>12}  {}\n", t.tensor, ulp_text(t.max_ulp),
                         report::metric(t.max_mismatch_frac), report::metric(t.rel_l2), report::metric(t.norm_max),
                         t.worst_policy.empty() ? "bit-identical" : t.worst_policy);
    print_summary_of_written_file(out, regen->output);
    ctx.exit_code = 0;
  });

  auto candidate = std::make_shared<std::string>();
  auto golden_path = std::make_shared<std::string>();
  auto opt = std::make_shared<CompareCliOptions>();
  CLI::App* c = golden->add_subcommand("check", "compare a candidate with a golden file under its stored tolerances");
  c->add_option("CAND", *candidate, "file.h5[:/results/NAME] or policy:NAME (computed from the golden inputs)")->required();
  c->add_option("--golden", *golden_path, "golden file written by `golden regen`")->required();
  add_compare_options(c, *opt, /*with_inputs=*/false);
  c->footer("Exit codes: 0 every gate passed, 1 a gate failed, 2 usage or input error.");
  c->callback([candidate, golden_path, opt, &ctx] {
    const auto read = compared_files(*opt, {{"candidate", *candidate}, {"golden", *golden_path}}, "");
    ctx.exit_code = emit_report(compare::golden_check(*candidate, *golden_path, to_compare_options(*opt)), *opt, read);
  });
}

}  // namespace mhc::cli
