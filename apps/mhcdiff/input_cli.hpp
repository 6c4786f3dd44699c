#pragma once
// Options of every command that reads an /inputs group (run, explain, fingerprint, extract, golden regen and
// compare's --inputs): comb orientation, rounding of inexact float inputs, non-finite inputs. Declared once so
// every command spells, documents and applies them identically (docs/format.md, "Validation").
#include <CLI/CLI.hpp>

#include <string>

#include "io/store.hpp"

namespace mhc::cli {

struct InputReadCli {
  std::string comb_layout;  // empty: not given, the file's comb_layout attribute decides (else src,dst)
  bool round_inputs = false;
  bool allow_nonfinite = false;

  io::ReadOptions options() const {
    io::ReadOptions o;
    if (!comb_layout.empty())
      o.comb_layout = comb_layout == "dst,src" ? io::CombLayout::dst_src : io::CombLayout::src_dst;
    o.round_inputs = round_inputs;
    o.allow_nonfinite = allow_nonfinite;
    return o;
  }
};

inline void add_input_read_options(CLI::App* cmd, InputReadCli& o) {
  // No default value: an explicit src,dst must be told apart from no option, since either one given wins over the
  // file's comb_layout attribute (docs/format.md, "comb orientation").
  cmd->add_option("--comb-layout", o.comb_layout,
                  "orientation of comb in the input: src,dst or dst,src; wins over the file's comb_layout attribute "
                  "(default: that attribute, else src,dst)")
      // Not CLI::IsMember: its set of two comma-holding names printed as one of four, "{src,dst,dst,src}".
      ->type_name("src,dst|dst,src")
      ->check(CLI::Validator(
          [](const std::string& v) {
            return v == "src,dst" || v == "dst,src" ? std::string()
                                                    : "\"" + v + "\" is neither src,dst nor dst,src";
          },
          ""));
  cmd->add_flag("--round-inputs", o.round_inputs,
                "round float32/float64 inputs that are not exactly bf16 (or fp32) instead of refusing them");
  cmd->add_flag("--allow-nonfinite", o.allow_nonfinite,
                "accept NaN and infinities in the inputs (counted; they propagate to the outputs) instead of "
                "refusing them");
}

}  // namespace mhc::cli
