#pragma once
// One function per subcommand (STYLE: declarative CLI). Each declares its options with help text and
// defaults and, in its callback, calls one library entry point and stores the exit code in ctx.
#include <CLI/CLI.hpp>

namespace mhc::cli {

struct CommandContext {
  int exit_code = 0;  // 0 pass, 1 a gate failed, 2 usage or input error (SPEC §4)
};

// The check of every --threads option: 0 (all cores) or a count; a negative count is a usage error (exit 2),
// never silently "all".
inline CLI::Range thread_count_check() { return CLI::Range(0, 65536); }

void add_gen_command(CLI::App& app, CommandContext& ctx);
void add_run_command(CLI::App& app, CommandContext& ctx);
void add_info_command(CLI::App& app, CommandContext& ctx);
void add_compare_command(CLI::App& app, CommandContext& ctx);
void add_golden_command(CLI::App& app, CommandContext& ctx);
void add_explain_command(CLI::App& app, CommandContext& ctx);
void add_fingerprint_command(CLI::App& app, CommandContext& ctx);
void add_extract_command(CLI::App& app, CommandContext& ctx);
void add_bench_command(CLI::App& app, CommandContext& ctx);

}  // namespace mhc::cli
