// Placeholder until the run command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_run_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("run", "(not available in this build yet)")->callback([] {
    throw InputError("'run' is not available in this build yet");
  });
}

}  // namespace mhc::cli
