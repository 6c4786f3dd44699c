// mhcdiff info: what is in a file (tensors, shapes, dtypes, policies, provenance).
#include <cstdio>

#include "commands.hpp"
#include "io/info.hpp"

namespace mhc::cli {

void add_info_command(CLI::App& app, CommandContext&) {
  auto path = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand("info", "list the tensors, dtypes, shapes, policies and provenance of a file");
  cmd->add_option("file", *path, "an HDF5 file (mhcdiff/1 inputs and results in full; any other file's tree)")->required();
  cmd->callback([path] { io::write_stdout(io::describe_file(*path)); });
}

}  // namespace mhc::cli
