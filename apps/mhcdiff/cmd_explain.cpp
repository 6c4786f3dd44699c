// mhcdiff explain: one output element through every policy, each rounding step shown (SPEC §6).
#include <cstdio>
#include <memory>

#include "commands.hpp"
#include "input_cli.hpp"
#include "investigate/sources.hpp"
#include "policy/policy_file.hpp"

namespace mhc::cli {

void add_explain_command(CLI::App& app, CommandContext&) {
  struct Args {
    std::string input, at, policies = "all", format = "text";
    std::vector<std::string> policy_files;
    InputReadCli read;
  };
  auto args = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand("explain", "trace one output element through every policy, rounding step by step");
  cmd->add_option("input", args->input, "input file (mhcdiff/1, /inputs group)")->required();
  cmd->add_option("--at", args->at, "the element: s,ho,d (token, output stream, hidden index)")->required();
  cmd->add_option("--policies", args->policies,
                  "comma-separated policies/aliases; all = every built-in (a --policy-file policy always runs "
                  "too; name it to set its place)")->capture_default_str();
  cmd->add_option("--policy-file", args->policy_files, "a user policy (docs/policy-file.md); repeatable");
  cmd->add_option("--format", args->format, "text or json")->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  add_input_read_options(cmd, args->read);
  cmd->callback([args] {
    const io::ReadOptions read = args->read.options();
    const auto policies = resolve_policies(args->policies, args->policy_files);
    const auto e = investigate::explain_file(args->input, investigate::parse_element_at(args->at), policies, read);
    const std::string out =
        args->format == "json" ? investigate::format_explanation_json(e) : investigate::format_explanation_text(e);
    io::write_stdout(out);
  });
}

}  // namespace mhc::cli
