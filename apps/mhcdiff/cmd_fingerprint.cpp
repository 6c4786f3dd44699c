// Placeholder until the fingerprint command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_fingerprint_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("fingerprint", "(not available in this build yet)")->callback([] {
    throw InputError("'fingerprint' is not available in this build yet");
  });
}

}  // namespace mhc::cli
