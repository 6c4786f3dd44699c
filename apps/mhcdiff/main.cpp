// mhcdiff: CLI11 wiring only. Each subcommand is declared in one function and calls one library entry
// point; library errors become exit code 2 here and nowhere else.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <cstdio>

int main(int argc, char** argv) {
  CLI::App app{"mhcdiff: validate and diff the mHC post operator under real rounding policies"};
  app.require_subcommand(1);
  app.set_version_flag("--version", MHCDIFF_VERSION);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return 0;
}
