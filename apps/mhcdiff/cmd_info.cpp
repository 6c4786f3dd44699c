// Placeholder until the info command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_info_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("info", "(not available in this build yet)")->callback([] {
    throw InputError("'info' is not available in this build yet");
  });
}

}  // namespace mhc::cli
