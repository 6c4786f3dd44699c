#pragma once
// One function per subcommand (STYLE: declarative CLI). Each declares its options with help text and
// defaults and, in its callback, calls one library entry point and stores the exit code in ctx.
#include <CLI/CLI.hpp>

#include <spdlog/spdlog.h>
#include <stdio_ext.h>

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <string>

#include "io/errors.hpp"
#include "io/files.hpp"
#include "run/thread_count.hpp"

namespace mhc::cli {

struct CommandContext {
  int exit_code = 0;  // 0 pass, 1 a gate failed, 2 usage or input error (SPEC §4)
};

// The summary of a command whose product is a file it has already committed (golden regen, extract): standard
// output failing then loses the summary, not the work, so it is a warning and the exit code stays 0 (exit 2 would
// say that nothing was written). The unwritten text is discarded, so that main's final check of stdout passes.
inline void print_summary_of_written_file(const std::string& text, const std::string& written) {
  io::write_stdout(text);
  try {
    io::flush_stdout();
  } catch (const IoError& e) {
    __fpurge(stdout);  // glibc: drop what could not be written
    std::clearerr(stdout);
    spdlog::warn("{} was written; its summary was not ({})", written, e.what());
  }
}

// The check of an option that counts something: decimal digits (a leading '-' is read to say it is below the
// range) within lo..hi. CLI::Range would call "abc" or "1.5" out of range and take "0x10" as 16.
inline CLI::Validator whole_number_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int64_t value = 0;
        const char* end = text.data() + text.size();
        const char* digits = text.data() + (!text.empty() && text.front() == '-');
        const auto [next, ec] = std::from_chars(text.data(), end, value);
        if (digits == end || *digits < '0' || *digits > '9' || next != end || (ec != std::errc() &&
                                                                                 ec != std::errc::result_out_of_range))
          return "'" + text + "' is not a whole number";
        if (ec == std::errc::result_out_of_range || value < lo || value > hi)
          return text + " is not in the range " + std::to_string(lo) + " to " + std::to_string(hi);
        return "";
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

// The check of every --threads option: run::require_thread_count's rule (0 = all cores, 1..run::kMaxThreads), as
// CLI11's usage error (exit 2).
inline CLI::Validator thread_count_check() { return whole_number_in(0, run::kMaxThreads); }

// The check of every --seed: decimal digits only, within 0..2^64 - 1. CLI11 would read "-1" or "2^64 + 1" into a
// uint64_t by wrapping or saturating, so different seeds a user typed would give the same data (SPEC §7).
inline CLI::Validator seed_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        uint64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [next, ec] = std::from_chars(text.data(), end, value);
        if (text.empty() || text.front() < '0' || text.front() > '9' || ec != std::errc() || next != end)
          return "a seed is an integer from 0 to 18446744073709551615, got '" + text + "'";
        return "";
      },
      "0..2^64-1");
}

void add_gen_command(CLI::App& app, CommandContext& ctx);
void add_run_command(CLI::App& app, CommandContext& ctx);
void add_info_command(CLI::App& app, CommandContext& ctx);
void add_compare_command(CLI::App& app, CommandContext& ctx);
void add_golden_command(CLI::App& app, CommandContext& ctx);
void add_explain_command(CLI::App& app, CommandContext& ctx);
void add_fingerprint_command(CLI::App& app, CommandContext& ctx);
void add_extract_command(CLI::App& app, CommandContext& ctx);
void add_bench_command(CLI::App& app, CommandContext& ctx);

}  // namespace mhc::cli
