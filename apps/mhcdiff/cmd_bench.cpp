// Placeholder until the bench command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_bench_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("bench", "(not available in this build yet)")->callback([] {
    throw InputError("'bench' is not available in this build yet");
  });
}

}  // namespace mhc::cli
