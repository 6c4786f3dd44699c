// Placeholder until the gen command lands: registers the name and refuses to run.
#include "commands.hpp"
#include "io/errors.hpp"

namespace mhc::cli {

void add_gen_command(CLI::App& app, CommandContext&) {
  app.add_subcommand("gen", "(not available in this build yet)")->callback([] {
    throw InputError("'gen' is not available in this build yet");
  });
}

}  // namespace mhc::cli
