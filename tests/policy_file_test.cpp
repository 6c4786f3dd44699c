// The policy text format (--policy-file): presets round-trip to bit-identical results, and bad files are
// refused with the file and line named.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <random>
#include <string>

#include "io/errors.hpp"
#include "kernels/cpu/operator_cpu.hpp"
#include "policy/policy_file.hpp"

namespace mhc {
namespace {

Inputs small_random_inputs(uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  Inputs in;
  in.shape = {6, 4, 37};
  const size_t S = 6, H = 4, D = 37;
  for (size_t i = 0; i < S * D; ++i) in.x.push_back(round_to_bf16_rne(normal(rng)));
  for (size_t i = 0; i < S * H * D; ++i) in.residual.push_back(round_to_bf16_rne(4.0f * normal(rng)));
  for (size_t i = 0; i < S * H * D; ++i) in.grad_out.push_back(round_to_bf16_rne(normal(rng)));
  for (size_t i = 0; i < S * H; ++i) in.post.push_back(2.0f * unit(rng));
  for (size_t i = 0; i < S * H * H; ++i) in.comb.push_back(unit(rng));
  return in;
}

template <class V>
void expect_same_bits(const V& a, const V& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof a[i]) != 0) FAIL() << what << " differs first at index " << i;
}

TEST(PolicyFile, EveryPresetWrittenAndReadBackGivesBitIdenticalResults) {
  const Inputs in = small_random_inputs(7);
  const auto dir = std::filesystem::temp_directory_path() / ("mhcdiff_policy_file_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  for (const Policy& preset : builtin_policies()) {
    SCOPED_TRACE(preset.name);
    const std::string path = (dir / (preset.name + ".toml")).string();
    write_policy_file(preset, path);
    const Policy back = read_policy_file(path);
    EXPECT_EQ(back.name, preset.name);
    EXPECT_EQ(back.models, preset.models);
    EXPECT_TRUE(back.desc == preset.desc) << describe(back.desc) << " vs " << describe(preset.desc);
    const PolicyResult a = run_policy_cpu(preset.desc, in.view(), true, {.threads = 1});
    const PolicyResult b = run_policy_cpu(back.desc, in.view(), true, {.threads = 1});
    expect_same_bits(a.out, b.out, "out");
    expect_same_bits(a.grad_x, b.grad_x, "grad_x");
    expect_same_bits(a.grad_residual, b.grad_residual, "grad_residual");
    expect_same_bits(a.grad_post, b.grad_post, "grad_post");
    expect_same_bits(a.grad_comb, b.grad_comb, "grad_comb");
  }
  std::filesystem::remove_all(dir);
}

TEST(PolicyFile, ParsesHandWrittenFileWithCommentsAndDefaults) {
  // Fields left out keep PolicyDesc's defaults; comments, blank lines, bare words and '_' spellings are fine.
  const Policy p = parse_policy_text(
      "# Triton kernel that fuses p*x across the bf16 cast\n"
      "\n"
      "name = \"triton-cast-fold\"   # trailing comment\n"
      "order = mix_first\n"
      "mix_rounding = \"bf16\"\n"
      "post_term = fused\n",
      "inline");
  EXPECT_EQ(p.name, "triton-cast-fold");
  PolicyDesc expected;
  expected.order = TermOrder::mix_first;
  expected.mix_rounding = MixRounding::bf16;
  expected.post_term = PostTerm::fused;
  EXPECT_TRUE(p.desc == expected) << describe(p.desc);
}

// The message must name the source and the line of the problem.
void expect_error(const std::string& text, const std::string& must_contain) {
  try {
    parse_policy_text(text, "my.policy");
    FAIL() << "accepted: " << text;
  } catch (const InputError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("my.policy"), std::string::npos) << msg;
    EXPECT_NE(msg.find(must_contain), std::string::npos) << msg;
  }
}

TEST(PolicyFile, RejectsBadFilesWithLineNumbers) {
  expect_error("name = \"a\"\n\ncoef = bf8\n", "line 3");
  expect_error("name = \"a\"\ncoef = bf8\n", "allowed: fp32, bf16");
  expect_error("name = \"a\"\nrounding = bf16\n", "unknown key 'rounding'");
  expect_error("name = \"a\"\ncoef = bf16\ncoef = fp32\n", "line 3");
  expect_error("name = \"a\"\ncoef bf16\n", "line 2");
  expect_error("coef = bf16\n", "no 'name");
  expect_error("name = \"all\"\n", "line 1");
  // "." would name /results itself as an HDF5 path part (an internal error naming the temp file), ".." its parent.
  expect_error("name = \".\"\n", "policy name '.' must");
  expect_error("name = \"..\"\n", "policy name '..' must");
  EXPECT_NO_THROW(parse_policy_text("name = \"v1.2\"\n", "my.policy"));
  expect_error("name = \"a\nb\"\n", "line 1");
  expect_error("name = \"a\"\ncoef = \"bf16\" trailing\n", "text after the closing quote of 'coef'");
  expect_error("name = \"a\"\ncoef = \"bf16\n", "unterminated string for 'coef'");
  // A setting the order never reaches is an error, not a silent no-op.
  expect_error("name = \"a\"\norder = seeded\nmix_rounding = bf16\n", "no effect with order = seeded");
  EXPECT_NO_THROW(parse_policy_text("name = \"a\"\norder = mix-first\nmix_rounding = bf16\n", "my.policy"));
  // exact rounds the real result once: every step setting beside it was silently ignored.
  expect_error("name = \"a\"\naccumulator = exact\ncoef = bf16\norder = mix-first\n",
               "coef, order have no effect with accumulator = exact");
  expect_error("name = \"a\"\ncoef = fp32\naccumulator = exact\n", "coef has no effect with accumulator = exact");
  EXPECT_NO_THROW(parse_policy_text("name = \"a\"\naccumulator = exact\nmodels = \"truth\"\n", "my.policy"));
  // A control byte (a binary file) is named by value, not echoed into the message.
  expect_error("name = \"a\"\n\x01\x02coef = bf16\n", "line 2: byte 0x01 is not text");
  expect_error(std::string("name = \"a\"\0\n", 12), "line 1: byte 0x00 is not text");
}

// Strings are TOML's one-line basic strings with the escapes \" and \\ only: '"""multi"""' became '""multi""' and
// "\n" became 'n' (TOML reads a newline). The optional [policy] header opens the file once; a second one, or one
// after the keys (a second table, in TOML), was skipped.
TEST(PolicyFile, RefusesWhatTomlReadsOtherwise) {
  expect_error("name = \"a\"\nmodels = \"\"\"multi\"\"\"\n", "line 2: a '\"' inside the string of 'models'");
  expect_error("name = \"a\"\nmodels = \"one\\ntwo\"\n", "line 2: the string of 'models' has an escape other than");
  const Policy quoted = parse_policy_text("name = \"a\"\nmodels = \"say \\\"hi\\\" \\\\ 1\"\n", "my.policy");
  EXPECT_EQ(quoted.models, "say \"hi\" \\ 1");
  EXPECT_EQ(parse_policy_text(format_policy_text(quoted), "my.policy").models, quoted.models);
  expect_error("[policy]\nname = \"a\"\n[policy]\n", "line 3: '[policy]' may only open the file");
  expect_error("name = \"a\"\n[policy]\n", "line 2: '[policy]' may only open the file");
  EXPECT_EQ(parse_policy_text("# header\n[policy]\nname = \"a\"\n", "my.policy").name, "a");
}

// TOML strings as TOML reads them: a '#' after an escaped quote is inside the string (it was taken for a comment,
// so format_policy_text's output of such a description did not read back), a literal '...' string is its text
// (the quotes were kept), and the header may have blanks inside its brackets.
TEST(PolicyFile, ReadsTomlStringsAsTomlDoes) {
  const Policy p = parse_policy_text("[ policy ]\nname = 'lit'  # comment\nmodels = \"a 5\\\" screen #1\"\n", "my.policy");
  EXPECT_EQ(p.name, "lit");
  EXPECT_EQ(p.models, "a 5\" screen #1");
  Policy q = p;
  q.models = "a \" #b \\ 'c'";
  EXPECT_EQ(parse_policy_text(format_policy_text(q), "my.policy").models, q.models);
  expect_error("name = 'a'b'\n", "line 1: the literal string of 'name'");
}

// Windows editors start UTF-8 files with a byte-order mark; it is not part of the first key. CRLF lines read too.
TEST(PolicyFile, AcceptsAByteOrderMarkAndCrlfLines) {
  const Policy p = parse_policy_text("\xEF\xBB\xBFname = \"bom\"\r\ncoef = bf16\r\n", "my.policy");
  EXPECT_EQ(p.name, "bom");
  EXPECT_EQ(p.desc.coef, CoefRounding::bf16);
}

TEST(PolicyFile, ResolvesListsWithFilePoliciesAndRefusesNameClashes) {
  const auto dir = std::filesystem::temp_directory_path() / ("mhcdiff_policy_resolve_test_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string mine = (dir / "mine.toml").string();
  write_policy_file({"mine", PolicyDesc{.coef = CoefRounding::bf16}, ""}, mine);
  auto names = [](const std::vector<Policy>& ps) {
    std::string s;
    for (const Policy& p : ps) s += p.name + ";";
    return s;
  };
  EXPECT_EQ(names(resolve_policies("hf,deepseek", {mine})), "hf-bf16;fp32-mixfirst;mine;");
  EXPECT_EQ(names(resolve_policies("mine,exact", {mine})), "mine;exact;");
  EXPECT_EQ(names(resolve_policies("", {mine})), "mine;");
  // "all" is a name like the others within a list: every built-in, in order, once.
  EXPECT_EQ(names(resolve_policies("mine,all", {mine})),
            "mine;hf-bf16;fp32-seeded;fp32-seeded-fma;fp32-mixfirst;fp64;exact;");
  EXPECT_EQ(names(resolve_policies("exact,all", {mine})),
            "exact;hf-bf16;fp32-seeded;fp32-seeded-fma;fp32-mixfirst;fp64;mine;");
  EXPECT_EQ(parse_policy_list("hf,all").size(), builtin_policies().size());
  const std::string clash = (dir / "clash.toml").string();
  write_policy_file({"hf", PolicyDesc{}, ""}, clash);
  EXPECT_THROW(resolve_policies("", {clash}), InputError);
  EXPECT_THROW(resolve_policies("", {(dir / "missing.toml").string()}), InputError);
  // The same file twice, by any name, is a repeated option (it said "reuses the name 'mine' of another policy file").
  const std::string same = (dir / "." / "mine.toml").string();
  for (const auto& twice : {std::vector<std::string>{mine, mine}, std::vector<std::string>{mine, same}}) {
    try {
      resolve_policies("", twice);
      ADD_FAILURE() << "accepted " << twice[1] << " twice";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("is given twice"), std::string::npos) << e.what();
    }
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace mhc
