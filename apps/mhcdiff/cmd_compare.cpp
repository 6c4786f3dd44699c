// mhcdiff compare CAND REF: metrics, gates and reports (SPEC §4, §5). Exit 0 every gate passed, 1 a gate failed,
// 2 a usage or input error (main.cpp maps InputError); the report's verdict line always matches the exit code.
#include <array>
#include <memory>

#include "commands.hpp"
#include "compare/engine.hpp"
#include "compare_cli.hpp"

namespace mhc::cli {

void add_compare_command(CLI::App& app, CommandContext& ctx) {
  auto sides = std::make_shared<std::array<std::string, 2>>();
  auto opt = std::make_shared<CompareCliOptions>();
  CLI::App* cmd = app.add_subcommand("compare", "compare a candidate with a reference tensor by tensor; gate CI on it");
  cmd->add_option("CAND", (*sides)[0], "file.h5[:/results/NAME] or policy:NAME (computed from --inputs)")->required();
  cmd->add_option("REF", (*sides)[1], "file.h5[:/results/NAME] or policy:NAME (policy:exact is the truth)")->required();
  add_compare_options(cmd, *opt);
  cmd->footer(
      "Exit codes: 0 every gate passed (or none applied), 1 a gate failed, 2 usage or input error.\n"
      "Default gates: none on out; --grad-rel-l2 5e-3 and --grad-norm-max 1e-2 on grad_* tensors.");
  cmd->callback([sides, opt, &ctx] {
    compare::CompareOptions c = to_compare_options(*opt);
    c.candidate = (*sides)[0];
    c.reference = (*sides)[1];
    const auto read = compared_files(*opt, {{"candidate", c.candidate}, {"reference", c.reference}}, c.inputs);
    ctx.exit_code = emit_report(compare::run_compare(c), *opt, read);
  });
}

}  // namespace mhc::cli
