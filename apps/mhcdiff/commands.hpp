#pragma once
// One function per subcommand (STYLE: declarative CLI). Each declares its options with help text and
// defaults and, in its callback, calls one library entry point and stores the exit code in ctx.
#include <CLI/CLI.hpp>

#include <spdlog/spdlog.h>
#include <stdio_ext.h>

#include <algorithm>
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

// The one reading of a count the user types (seeds, count options, count limits): decimal digits only, no sign,
// blank, base prefix, fraction or exponent (CLI11 and std::stoull take "0x10", " 3" or "-1" and wrap or saturate).
struct Digits {
  bool digits = false;     // the text is one or more decimal digits and nothing else
  bool too_large = false;  // ... spelling a number past 2^64 - 1
  uint64_t value = 0;
};
inline Digits read_digits(const std::string& text) {
  Digits d;
  d.digits = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!d.digits) return d;
  const auto [next, ec] = std::from_chars(text.data(), text.data() + text.size(), d.value);
  d.too_large = ec == std::errc::result_out_of_range;
  return d;
}

// The check of an option that counts something, within lo..hi (lo >= 0); give it with ->transform, not ->check
// (which hands a validator a copy): it rewrites the text as the number in decimal, since CLI11 reads a leading 0 as
// octal ("010" was 8). CLI::Range would call "abc" or "1.5" out of range and take "0x10" as 16; a negative number
// is out of the range.
inline CLI::Validator whole_number_in(uint64_t lo, uint64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        const bool negative = text.size() > 1 && text.front() == '-' && read_digits(text.substr(1)).digits;
        const Digits d = read_digits(text);
        if (!d.digits && !negative) return "'" + text + "' is not a whole number";
        if (negative || d.too_large || d.value < lo || d.value > hi)
          return text + " is not in the range " + std::to_string(lo) + " to " + std::to_string(hi);
        text = std::to_string(d.value);
        return "";
      },
      "INT in [" + std::to_string(lo) + " - " + std::to_string(hi) + "]");
}

// The check of every --threads option: run::require_thread_count's rule (0 = all cores, 1..run::kMaxThreads), as
// CLI11's usage error (exit 2).
inline CLI::Validator thread_count_check() { return whole_number_in(0, run::kMaxThreads); }

// The check of every --seed: 0..2^64 - 1 (read_digits), so that different seeds a user typed never give the same
// data (SPEC §7); with ->transform, like whole_number_in (seed 010 was seed 8).
inline CLI::Validator seed_check() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const Digits d = read_digits(text);
        if (!d.digits || d.too_large) return "a seed is an integer from 0 to 18446744073709551615, got '" + text + "'";
        text = std::to_string(d.value);
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
