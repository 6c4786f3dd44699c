// mhcdiff extract: the K tokens where two sides disagree most, as a standalone repro file (SPEC §6).
#include <spdlog/spdlog.h>

#include <cstdio>
#include <memory>

#include <fmt/format.h>

#include "commands.hpp"
#include "report/text_safety.hpp"
#include "input_cli.hpp"
#include "report/numbers.hpp"
#include "investigate/extract.hpp"
#include "policy/policy_file.hpp"

namespace mhc::cli {

void add_extract_command(CLI::App& app, CommandContext&) {
  struct Args {
    std::string candidate, reference, inputs, output;
    std::vector<std::string> policy_files;
    investigate::ExtractOptions o;
    InputReadCli read;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("extract", "write the K worst tokens of a comparison into a small standalone file");
  cmd->add_option("candidate", args->candidate, "file.h5, file.h5:NAME, file.h5:/dataset, or policy:NAME")->required();
  cmd->add_option("reference", args->reference, "file.h5, file.h5:NAME, file.h5:/dataset, or policy:NAME")->required();
  cmd->add_option("--inputs", args->inputs, "the inputs both sides were computed from")->required();
  cmd->add_option("--worst", args->o.worst, "how many tokens to extract")->transform(whole_number_in(1, int64_t{1} << 40))->capture_default_str();
  cmd->add_option("-o,--output", args->output, "the repro file (written atomically)")->required();
  cmd->add_option("--policy-file", args->policy_files, "a user policy usable as policy:NAME; repeatable");
  cmd->add_option("--threads", args->o.threads, "CPU threads for policy: sides (0: all)")
      ->transform(thread_count_check())
      ->capture_default_str();
  add_input_read_options(cmd, args->read);
  cmd->callback([args] {
    investigate::ExtractOptions o = args->o;
    o.read = args->read.options();
    o.policy_files = args->policy_files;
    const auto user = resolve_policies("", args->policy_files);
    const auto cand = investigate::resolve_out_source(args->candidate, user);
    const auto ref = investigate::resolve_out_source(args->reference, user);
    const auto s = investigate::extract_worst_tokens(cand, ref, args->inputs, args->output, o);
    if (s.written.empty()) {
      io::write_stdout("the two sides agree on every element: nothing to extract, no file written\n");
      return;
    }
    std::string out = fmt::format("wrote {} token(s) of {} to {} (/results/{} vs /results/{}):\n", s.written.size(),
                                  s.source_shape.S, report::one_line(args->output), report::one_line(s.candidate_group),
                                  report::one_line(s.reference_group));
    for (const auto& t : s.written)
      out += fmt::format("  token {:>8}: max {} ULP, {} of {} elements differ\n", t.token, report::ulp(t.max_ulp),
                         t.mismatched, s.source_shape.H * s.source_shape.D);
    for (const auto& note : s.notes) out += fmt::format("  note: {}\n", report::one_line(note));
    print_summary_of_written_file(out, args->output);
  });
}

}  // namespace mhc::cli
