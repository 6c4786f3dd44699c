// Placeholder until the extract command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_extract_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("extract", "(not available in this build yet)")->callback([] {
    throw InputError("'extract' is not available in this build yet");
  });
}

}  // namespace mhc::cli
