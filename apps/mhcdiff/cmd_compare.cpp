// Placeholder until the compare command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_compare_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("compare", "(not available in this build yet)")->callback([] {
    throw InputError("'compare' is not available in this build yet");
  });
}

}  // namespace mhc::cli
