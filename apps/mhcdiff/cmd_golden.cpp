// Placeholder until the golden command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_golden_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("golden", "(not available in this build yet)")->callback([] {
    throw InputError("'golden' is not available in this build yet");
  });
}

}  // namespace mhc::cli
