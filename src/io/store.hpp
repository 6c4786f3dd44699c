#pragma once
// The HDF5 tensor store, format "mhcdiff/1" (SPEC §3, docs/format.md).
//
//   /inputs/x [.., D] bf16, /inputs/residual [.., H, D] bf16, /inputs/post [.., H] f32,
//   /inputs/comb [.., H, H] f32 (src,dst), [/inputs/grad_out [.., H, D] bf16]
//   /results/<policy>/out [S,H,D] bf16, [out_f64], [grad_x, grad_residual, grad_post, grad_comb, *_f64]
//
// Every read is by slabs of tokens (rows of the flattened leading axis) so memory stays bounded.
// Every write is atomic: a temp file beside the destination, renamed over it on commit().
#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/errors.hpp"
#include "io/files.hpp"
#include "kernels/tensors.hpp"
#include "policy/policy.hpp"

namespace mhc::io {

enum class DType { bf16, f32, f64 };
const char* dtype_name(DType t);

enum class CombLayout { src_dst, dst_src };
const char* comb_layout_name(CombLayout layout);  // "src,dst" / "dst,src"

// What decided the orientation comb was read in.
enum class CombLayoutOrigin {
  option,          // ReadOptions::comb_layout (--comb-layout)
  file_attribute,  // the file's root comb_layout attribute
  default_layout,  // neither: src,dst (SPEC §1)
};

struct ReadOptions {
  // Orientation of comb in the file (--comb-layout). Given, it wins over the file's comb_layout attribute in both
  // directions (a writer may have transposed comb yet declared src,dst, or declared dst,src for a comb it did not
  // transpose: the bug class of SPEC §1). Not given: the attribute, else src,dst.
  std::optional<CombLayout> comb_layout;
  bool round_inputs = false;                     // allow f32/f64 data that is not exactly bf16 (--round-inputs)
  bool allow_nonfinite = false;                  // let NaN and infinities through (--allow-nonfinite); refused otherwise
};

// What was found while reading inputs (reported, never silently dropped).
struct InputCensus {
  int64_t nan_count = 0;
  int64_t inf_count = 0;
  int64_t rounded_count = 0;  // values changed by --round-inputs
  // When set, only elements of these tokens (absolute indices, sorted) are counted: a read that covers tokens it
  // does not keep (extract reads scattered tokens through windows that span the gaps) counts the kept ones only.
  const std::vector<int64_t>* only_tokens = nullptr;

  bool counts(int64_t token) const {
    return only_tokens == nullptr || std::binary_search(only_tokens->begin(), only_tokens->end(), token);
  }
};

// Reads the /inputs group of a file in slabs of tokens, validating names, ranks, shapes and dtypes.
class InputReader {
 public:
  InputReader(const std::string& path, const ReadOptions& options = {});
  ~InputReader();
  InputReader(InputReader&&) noexcept;
  InputReader& operator=(InputReader&&) noexcept;

  const std::string& path() const;
  const Shape& shape() const;                      // S flattened over leading batch dims
  const std::vector<int64_t>& batch_dims() const;  // the leading dims as stored (product = S)
  bool has_grad() const;
  // Tokens [s0, s0 + count) of every input tensor (grad_out when present), comb in src,dst orientation.
  Inputs read_slab(int64_t s0, int64_t count, InputCensus* census = nullptr);
  // A checksum of the input datasets' contents (provenance): InputChecksum over every slab, in order; with
  // `comb_transposed`, of the inputs read with comb the other way round (the other --comb-layout).
  std::string checksum(bool comb_transposed = false);
  // The orientation comb was read in (the option when given, else the file's comb_layout attribute, else src,dst),
  // and which of the three decided it.
  CombLayout comb_layout() const;
  CombLayoutOrigin comb_layout_origin() const;
  // How comb was read, for provenance and `info`: "dst,src (--comb-layout)", "dst,src (the file's comb_layout
  // attribute)" or "src,dst (the default: the file declares no comb_layout)".
  std::string comb_layout_text() const;

 private:
  Inputs read_slab_unchecked(int64_t s0, int64_t count, InputCensus* census);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The checksum stored as provenance (input_checksum): CRC-64/XZ of each input tensor's logical content
// (bf16 bits / fp32 bits, little-endian, comb in src,dst order, tokens in order), then CRC-64/XZ over those
// per-tensor CRCs (x, residual, post, comb[, grad_out]). Independent of slab size, chunking and compression,
// so a results file's /inputs and the file it was made from have the same checksum.
class InputChecksum {
 public:
  InputChecksum();
  ~InputChecksum();
  void update(const Inputs& slab);  // slabs in token order
  std::string hex() const;          // "crc64-xz:<16 hex digits>"

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// The bytes of one token's inputs (x, residual, post, comb and, `with_grad`, grad_out as run holds them in memory),
// saturating at INT64_MAX: a file may declare dims whose H·D alone exceeds 2^62.
int64_t token_input_bytes(const Shape& shape, bool with_grad);

// How many tokens make a slab of about `budget_bytes` of inputs (at least 1, at most S).
int64_t slab_tokens_for(const Shape& shape, bool with_grad, int64_t budget_bytes);

// The whole file at once (tests, small inputs).
Inputs read_inputs(const std::string& path, const ReadOptions& options = {});

// The checksum of the inputs a results group of `path` ("/results/NAME", or "/" for a bare /out) was computed
// from: the group's input_checksum provenance or, where that is missing or empty (a PyTorch dump written by
// scripts/mhcdiff_dump.py), that of the file's own /inputs when it holds readable ones; "" when neither says.
// Commands that take results and inputs compare it with their inputs' checksum (docs/decisions.md).
std::string results_inputs_checksum(const std::string& path, const std::string& group);

// InputError unless results `side` (its label) whose inputs' checksum is `computed_from` ("" when unknown: not
// checked) were computed from the inputs `inputs` reads, whose checksum is `inputs_checksum`. When they were computed
// from the same inputs with comb read the other way round, the message says so, and names the --comb-layout that
// reads them alike where the command takes one (`comb_layout_option`; golden check reads its file as declared).
void require_computed_from(const std::string& side, const std::string& computed_from, InputReader& inputs,
                           const std::string& inputs_checksum, bool comb_layout_option = true);

// For two results files whose inputs' checksums differ (`checksum_a` of results `label_a` in `path_a`, likewise b):
// when one file's stored /inputs with comb transposed have the other's checksum, the two were computed from the same
// inputs with comb read the other way round, and the text returned ("; ...", to append to the refusal) says so and
// how each side read comb; otherwise "". Reads a file's /inputs, so it is meant for an error path.
std::string transposed_comb_hint(const std::string& path_a, const std::string& label_a, const std::string& checksum_a,
                                 const std::string& path_b, const std::string& label_b, const std::string& checksum_b);

// Provenance attached to every results group (SPEC §3).
struct Provenance {
  std::string policy;  // the policy's name
  std::string models;  // which real implementation it reproduces
  std::string tool_version;
  std::string policy_description;
  std::string device;  // "cpu" or the GPU's name
  std::string host;
  std::string utc_time;
  std::string input_checksum;
};
Provenance make_provenance(const Policy& policy, const std::string& device, const std::string& input_checksum);

// Bytes of the files mhcdiff writes (double: a file may claim dims whose byte count overflows int64), for
// check_output_fits before any work. inputs_bytes: x, residual and grad_out as bf16, post and comb as fp32.
// results_bytes: that copy of the inputs, then each policy's out and, with backward, its gradients, with binary64
// twins for fp64 and exact. Compressed, these random mantissas shrink about 1.5x, never 2x (docs/format.md), so
// a compressed file is estimated at half.
double inputs_bytes(const Shape& shape, bool grad, int deflate_level = 0);
double results_bytes(const Shape& shape, bool grad_inputs, const std::vector<Policy>& policies, bool backward,
                     int deflate_level = 0);

// Writes a complete mhcdiff/1 file atomically (an AtomicOutput). Nothing appears at `path` until commit(); a writer
// that is destroyed without commit() closes every HDF5 handle, removes its temp file and leaves any existing file
// untouched. A write the system refuses (disk full, file too large) is an IoError naming the output and the reason.
class ResultWriter {
 public:
  // Throws InputError for an output path AtomicOutput refuses, e.g. one that is the same file as one of `sources`
  // (the files the command reads) or, unless `golden` says replace, a golden baseline.
  explicit ResultWriter(const std::string& path, const std::vector<SourceFile>& sources = {},
                        GoldenTarget golden = GoldenTarget::refuse);
  ~ResultWriter();
  ResultWriter(const ResultWriter&) = delete;
  ResultWriter& operator=(const ResultWriter&) = delete;

  // Leading batch dims of the tensors to be written (product = S; default {S}): every dataset declared after
  // this call is stored as batch_dims + element dims, e.g. out [B,S,H,D].
  void set_batch_dims(const std::vector<int64_t>& batch_dims);
  // 0: no compression; 1..9: shuffle + deflate at that level on every dataset declared after this call.
  void set_compression(int deflate_level);

  // The /inputs group (whole tensors, or call append_inputs per slab after declare_inputs).
  void declare_inputs(const Shape& shape, bool with_grad);
  void append_inputs(int64_t s0, const Inputs& slab);

  // A /results/<policy> group with its datasets sized for `shape`.
  void declare_policy(const Policy& policy, const Shape& shape, bool backward, const Provenance& provenance);
  void append_result(const std::string& policy_name, int64_t s0, const PolicyResult& slab);

  // Extra string/float attributes on a group ("/" or "/results/<policy>"), e.g. golden tolerances.
  void set_attribute(const std::string& group, const std::string& name, const std::string& value);
  void set_attribute(const std::string& group, const std::string& name, double value);
  void set_integer_attribute(const std::string& group, const std::string& name, int64_t value);
  // The /inputs group's provenance (docs/format.md): where the inputs came from, their checksum, and what was
  // found reading them (NaN and infinities under --allow-nonfinite, values rounded under --round-inputs).
  void describe_inputs(const std::string& source_file, const std::string& checksum, const InputCensus& census);
  // The /inputs group's source_comb_layout: how comb was read from the source (InputReader::comb_layout_text). The
  // stored comb is src,dst either way, so this is the only record of whether it was transposed.
  void describe_comb_layout(const std::string& how_read);

  void commit();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Generic read access to any dataset of an mhcdiff/1 file (compare, info, golden, fingerprint).
struct TensorInfo {
  std::string dataset;         // full path, e.g. "/results/fp32-seeded/out"
  DType dtype = DType::bf16;
  std::vector<int64_t> dims;   // as stored
  int64_t rows() const;        // product of dims except the trailing "element" dims of its kind
};

class TensorFile {
 public:
  explicit TensorFile(const std::string& path);  // read-only; InputError when missing / not HDF5 / not mhcdiff/1
  ~TensorFile();
  TensorFile(TensorFile&&) noexcept;
  TensorFile& operator=(TensorFile&&) noexcept;

  const std::string& path() const;
  // Names under /results. A group link that leads nowhere or out of the file is left out (an unrelated stale
  // link must not make the file unusable); unusable_policies() says what each such one is.
  std::vector<std::string> policies() const;
  std::vector<std::pair<std::string, std::string>> unusable_policies() const;  // name, "is a link to …"
  std::vector<std::string> datasets(const std::string& group) const;   // dataset names in a group
  // The other names, among the datasets of `groups` ("/inputs" gives "/inputs/x", ...), of the object that `dataset`
  // leads to: a hard link, or a soft link to it or to a group on its path, gives one object several names. Links that
  // lead nowhere or out of the file are passed over (this asks what a name is, it does not list the groups).
  std::vector<std::string> other_names(const std::string& dataset, const std::vector<std::string>& groups) const;
  bool exists(const std::string& dataset) const;  // InputError when it is an external link (never followed)
  TensorInfo info(const std::string& dataset) const;
  std::vector<std::pair<std::string, std::string>> attributes(const std::string& object) const;  // as text
  // The orientation the root attribute comb_layout declares for the file's comb-shaped tensors, std::nullopt when it
  // has none; InputError when it is malformed (as InputReader refuses it). compare reads a results group's grad_comb
  // in it (docs/format.md, "comb orientation").
  std::optional<CombLayout> declared_comb_layout() const;
  // An attribute of `object` (a group or dataset of this file) that looks meant to declare comb's orientation, which
  // mhcdiff reads from the root only (detail::comb_orientation_lookalike, comb_layout itself included).
  std::optional<std::string> comb_orientation_lookalike(const std::string& object) const;

  // Elements [first, first + count) of the dataset in row-major order, converted to the requested
  // representation; bf16 reads return raw bits, f32/f64 reads require the stored dtype to match.
  // Exact conversions are accepted too (bf16 → f32/f64, f32 → f64, f32/f64 data whose values are all exactly bf16 →
  // bf16, and f64 data whose values are all exactly f32 → f32); anything that would round is an InputError.
  void read_bf16(const std::string& dataset, int64_t first, int64_t count, bf16_bits* dst) const;
  void read_f32(const std::string& dataset, int64_t first, int64_t count, float* dst) const;
  void read_f64(const std::string& dataset, int64_t first, int64_t count, double* dst) const;

 private:
  // Names of the objects of HDF5 type `type` (an H5O_type_t) in `group`. A link that leads nowhere or out of the
  // file is an InputError (a listing would otherwise drop a tensor silently), unless `unusable` is given: it then
  // receives (name, what it is) and the link is left out.
  std::vector<std::string> children(const std::string& group, int type,
                                    std::vector<std::pair<std::string, std::string>>* unusable = nullptr) const;

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Whether two stores of a tensor hold its tokens in the same order, from their leading (token) dims: axes of length
// 1 aside, one side's dims are the other's with adjacent axes merged (docs/format.md: leading batch dims flatten
// into S), i.e. the running products of one are among the other's, the totals equal. [8], [2,4], [1,2,4] and
// [2,2,2] agree; [4,2] and [2,4] do not (the same count of tokens split another way). compare, extract and
// fingerprint apply it alike (docs/metrics.md, "Shapes").
bool same_token_layout(const std::vector<int64_t>& a, const std::vector<int64_t>& b);

// Element `flat` (row-major) of a tensor of extent `dims`, as its index there ({1, 2} for 5 of [2, 3]): how errors and
// explain name an element of a file whatever its batch dims. A zero extent counts as 1.
std::vector<int64_t> unravel_index(int64_t flat, const std::vector<int64_t>& dims);

// The results group "/results/<group>" that NAME (as in file.h5:NAME) designates in `file`: the group NAME, or the
// group of the built-in policy NAME is an alias of (":hf" finds /results/hf-bf16). std::nullopt when neither is
// there; InputError when the group it names is a link that leads nowhere or out of the file. compare and the
// investigation commands (fingerprint, extract) resolve NAME with it alike.
std::optional<std::string> find_results_group(const TensorFile& file, const std::string& name);

}  // namespace mhc::io
