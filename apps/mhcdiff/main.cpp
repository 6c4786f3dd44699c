// mhcdiff: CLI11 wiring only. Each subcommand lives in its own cmd_*.cpp; library errors (InputError,
// std::invalid_argument) become exit code 2 here and nowhere else.
#include <fmt/ranges.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <exception>
#include <memory>
#include <string>
#include <vector>

#include "commands.hpp"
#include "io/errors.hpp"
#include "io/files.hpp"
#include "one_line_sink.hpp"

namespace {

int run_command_line(int argc, char** argv) {
  // Logs and progress go to stderr; stdout is for the report (SPEC §4).
  auto sink = std::make_shared<mhc::cli::OneLineSink>(std::make_shared<spdlog::sinks::stderr_color_sink_mt>());
  spdlog::set_default_logger(std::make_shared<spdlog::logger>("mhcdiff", std::move(sink)));
  spdlog::set_pattern("%^[%l]%$ %v");

  CLI::App app{"mhcdiff: validate and diff the mHC post operator under real rounding policies"};
  app.require_subcommand(1);
  app.set_version_flag("--version", MHCDIFF_VERSION);
  bool quiet = false, verbose = false;
  // Contradictory together: refused rather than one silently winning.
  app.add_flag("-q,--quiet", quiet, "only errors on stderr")
      ->excludes(app.add_flag("-v,--verbose", verbose, "debug logging on stderr"));
  app.fallthrough();  // -q/-v are accepted after the subcommand too (mhcdiff run in.h5 -o r.h5 --quiet)
  app.parse_complete_callback([&] {
    spdlog::set_level(quiet ? spdlog::level::err : verbose ? spdlog::level::debug : spdlog::level::info);
  });

  mhc::cli::CommandContext ctx;
  mhc::cli::add_gen_command(app, ctx);
  mhc::cli::add_run_command(app, ctx);
  mhc::cli::add_info_command(app, ctx);
  mhc::cli::add_compare_command(app, ctx);
  mhc::cli::add_golden_command(app, ctx);
  mhc::cli::add_explain_command(app, ctx);
  mhc::cli::add_fingerprint_command(app, ctx);
  mhc::cli::add_extract_command(app, ctx);
  mhc::cli::add_bench_command(app, ctx);

  // `mhcdiff nope` (or `mhcdiff golden chekc`) would get CLI11's "A subcommand is required": name the word it did
  // not know instead. The options before a command are flags without values (-q, -v), so the command is the first
  // word without a '-', and a command with commands of its own (golden) takes the next such word as one.
  CLI::App* parent = &app;
  std::string scope;  // "" for mhcdiff's commands, "golden " for golden's
  for (char** word = argv + 1; parent->get_require_subcommand_min() > 0; ++word) {
    word = std::find_if(word, argv + argc, [](const char* a) { return a[0] != '-'; });
    if (word == argv + argc) break;  // none given: CLI11's "A subcommand is required"
    std::vector<std::string> names;
    CLI::App* found = nullptr;
    for (CLI::App* sub : parent->get_subcommands([](CLI::App*) { return true; })) {
      names.push_back(sub->get_name());
      if (sub->get_name() == *word) found = sub;
    }
    if (!found) {
      spdlog::error("unknown {0}command '{1}'; the {0}commands are {2} (mhcdiff {0}--help)", scope,
                    *word, fmt::join(names, ", "));
      return 2;
    }
    parent = found;
    scope += found->get_name() + " ";
  }

  try {
    app.parse(argc, argv);
    mhc::io::flush_stdout();  // a report lost to a full disk or a closed pipe is an error, not exit 0
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line like every other error (CLI11's own would add a second, "Run with --help ...").
    std::string command = "mhcdiff ";  // with the subcommands parsed so far, e.g. "mhcdiff golden check "
    for (const CLI::App* at = &app; !at->get_subcommands().empty(); at = at->get_subcommands().front())
      command += at->get_subcommands().front()->get_name() + " ";
    // CLI11 reports a missing required argument before an option it does not know, so `run --hlep` said "input is
    // required": the unknown option, the likelier mistake, is named first.
    std::string message = e.what();
    if (dynamic_cast<const CLI::RequiredError*>(&e))
      for (const std::string& arg : app.remaining(true))
        if (arg.size() > 1 && arg[0] == '-') {
          message = fmt::format("unknown option {}", arg);
          break;
        }
    // -q with -v is mhcdiff's own option pair, listed by mhcdiff --help, not by the command's.
    if (dynamic_cast<const CLI::ExcludesError*>(&e) && message.find("--quiet") != std::string::npos)
      command = "mhcdiff ";
    spdlog::error("{} ({}--help)", message, command);
    return 2;
  } catch (const mhc::InputError& e) {
    spdlog::error("{}", e.what());  // one line: names from files and arguments are escaped by OneLineSink
    return 2;
  } catch (const std::invalid_argument& e) {
    spdlog::error("{}", e.what());
    return 2;
  } catch (const std::bad_alloc&) {
    // What can make the request smaller depends on the command (only run has --slab-tokens).
    const CLI::App* sub = app.get_subcommands().empty() ? nullptr : app.get_subcommands().front();
    const std::string name = sub ? sub->get_name() : "";
    spdlog::error("not enough memory for this request{}",
                  name == "run"                      ? " (a smaller --slab-tokens or fewer policies at once)"
                  : name == "gen" || name == "bench" ? " (a smaller --shape)"
                                                     : "");
    return 2;
  } catch (const std::exception& e) {
    spdlog::error("internal error: {}", e.what());
    return 2;
  }
  return ctx.exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  mhc::io::report_crashes_as_input_errors();
  mhc::io::report_early_exits();
  const int code = run_command_line(argc, argv);
  mhc::io::main_returning();
  return code;
}
