// Placeholder until the explain command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_explain_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("explain", "(not available in this build yet)")->callback([] {
    throw InputError("'explain' is not available in this build yet");
  });
}

}  // namespace mhc::cli
