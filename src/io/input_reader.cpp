// InputReader: validates the /inputs group of an mhcdiff/1 file (or a PyTorch user's dump) once, then reads
// it by slabs of tokens, converting every accepted storage form to the operator's canonical types.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <bit>
#include <boost/crc.hpp>
#include <cmath>
#include <limits>
#include <new>
#include <optional>
#include <stdexcept>

#include "io/files.hpp"
#include "io/hdf5_util.hpp"
#include "io/store.hpp"
#include "report/text_safety.hpp"

namespace mhc::io {

using detail::Handle;
using detail::StoredKind;

const char* dtype_name(DType t) {
  switch (t) {
    case DType::bf16: return "bfloat16";
    case DType::f32: return "float32";
    case DType::f64: return "float64";
  }
  return "?";
}

const char* comb_layout_name(CombLayout layout) { return layout == CombLayout::dst_src ? "dst,src" : "src,dst"; }

int64_t token_input_bytes(const Shape& shape, bool with_grad) {
  // x, residual and grad_out are rows of D bf16 values, post and comb H and H·H fp32 values. H ≤ 16 in any file
  // the reader accepts, but D is only bounded by the element count (H·D ≤ 2^63 - 1), so 2·H·D can wrap.
  const int64_t H = shape.H, bf16_rows = 1 + H * (with_grad ? 2 : 1);
  int64_t bytes = 0;
  if (__builtin_mul_overflow(2 * bf16_rows, shape.D, &bytes) || __builtin_add_overflow(bytes, 4 * (H + H * H), &bytes))
    return std::numeric_limits<int64_t>::max();
  return bytes;
}

int64_t slab_tokens_for(const Shape& shape, bool with_grad, int64_t budget_bytes) {
  const int64_t row_bytes = token_input_bytes(shape, with_grad);
  const int64_t rows = std::max<int64_t>(1, budget_bytes / std::max<int64_t>(1, row_bytes));
  return std::min<int64_t>(std::max<int64_t>(shape.S, 1), rows);
}

// ---- checksum ---------------------------------------------------------------------------------------------
// Boost.CRC's table-driven CRC-64 with the XZ parameters (the check value of "123456789" is 0x995DC9BBDF1939FA).
using Crc64Xz = boost::crc_optimal<64, 0x42F0E1EBA9EA3693ull, ~0ull, ~0ull, true, true>;
static_assert(std::endian::native == std::endian::little, "the checksum hashes the in-memory little-endian bytes");

struct InputChecksum::State {
  Crc64Xz x, residual, post, comb, grad_out;
  bool grad = false;
};

InputChecksum::InputChecksum() : state_(std::make_unique<State>()) {}
InputChecksum::~InputChecksum() = default;

void InputChecksum::update(const Inputs& slab) {
  auto feed = [](Crc64Xz& crc, const auto& v) { crc.process_bytes(v.data(), v.size() * sizeof(v[0])); };
  feed(state_->x, slab.x);
  feed(state_->residual, slab.residual);
  feed(state_->post, slab.post);
  feed(state_->comb, slab.comb);
  if (slab.has_grad()) {
    feed(state_->grad_out, slab.grad_out);
    state_->grad = true;
  }
}

std::string InputChecksum::hex() const {
  Crc64Xz all;
  auto add = [&](const Crc64Xz& c) {
    const uint64_t v = c.checksum();
    all.process_bytes(&v, sizeof v);
  };
  add(state_->x);
  add(state_->residual);
  add(state_->post);
  add(state_->comb);
  if (state_->grad) add(state_->grad_out);
  return fmt::format("crc64-xz:{:016x}", all.checksum());
}

// ---- reader -------------------------------------------------------------------------------------------------

namespace {

enum class Slot { bf16, f32 };

struct InputTensor {
  std::string name;  // "x", "residual", ...
  Slot slot = Slot::bf16;
  Handle dataset;
  StoredKind kind = StoredKind::other;
  int64_t row_elems = 0;  // elements per token
  mutable bool storage_checked = false;  // detail::unwritten_storage asked, at the first read
};

// Element `flat` of a tensor as its index in the file (batch dims and all), for errors that name one.
std::string stored_index(const InputTensor& t, int64_t flat) {
  return detail::index_text(flat, detail::dataset_dims(t.dataset.get()));
}

}  // namespace

struct InputReader::Impl {
  std::string path;
  ReadOptions options;
  Handle file;
  Shape shape;
  std::vector<int64_t> batch_dims;
  CombLayout layout = CombLayout::src_dst;
  CombLayoutOrigin layout_origin = CombLayoutOrigin::default_layout;
  InputTensor x, residual, post, comb, grad_out;
  bool has_grad = false;
  Handle bf16_type = detail::make_bf16_type();

  [[noreturn]] void fail(const std::string& what) const { throw InputError(fmt::format("{}: {}", path, what)); }

  void open_tensor(InputTensor& t, const char* name, Slot slot, bool required) {
    t.name = name;
    t.slot = slot;
    const std::string ds = std::string("/inputs/") + name;
    if (H5Lexists(file.get(), ds.c_str(), detail::local_links()) <= 0) {
      if (!required) return;
      if (auto why = detail::unusable_component(file.get(), ds)) fail(*why);  // "/inputs is a dataset, not a group"
      fail(fmt::format("missing dataset {} (an mhcdiff/1 input file has /inputs/x, /inputs/residual, /inputs/post, "
                       "/inputs/comb and optionally /inputs/grad_out)",
                       ds));
    }
    if (auto why = detail::open_stored_dataset(file.get(), ds, t.dataset)) fail(*why);
    t.kind = detail::classify(t.dataset.get());
    const bool ok = t.kind == StoredKind::bf16_float || t.kind == StoredKind::bf16_uint16 ||
                    t.kind == StoredKind::f32 || t.kind == StoredKind::f64;
    if (!ok) {
      const char* expected = slot == Slot::bf16
                                 ? "bfloat16 (the HDF5 bf16 float type, or uint16 with attribute dtype=\"bfloat16\"), "
                                   "or float32/float64 holding bf16 values"
                                 : "float32 (float64 or bfloat16 holding float32 values are accepted too)";
      fail(fmt::format("dataset {} is {}; expected {}", ds, detail::stored_type_name(t.dataset.get()), expected));
    }
  }

  void check_dims(const InputTensor& t, const std::vector<int64_t>& expected_tail, const char* pattern) {
    const auto dims = detail::dataset_dims(t.dataset.get());
    std::vector<int64_t> expected = batch_dims;
    expected.insert(expected.end(), expected_tail.begin(), expected_tail.end());
    std::vector<int64_t> got(dims.begin(), dims.end());
    if (got.size() != expected.size())
      fail(fmt::format("dataset /inputs/{} has rank {} (shape {}); expected rank {} ({} with the batch dims of "
                       "/inputs/x {})",
                       t.name, got.size(), detail::dims_text(got), expected.size(), pattern,
                       detail::dims_text(x_dims())));
    if (got != expected) {
      // Named against the datasets the expected shape comes from, never against itself (residual used to
      // "disagree with /inputs/residual").
      const std::string x_text = "/inputs/x " + detail::dims_text(x_dims());
      const std::string residual_text = "/inputs/residual " + detail::dims_text(residual_dims());
      const std::string sources = t.name == "residual" ? x_text
                                  : t.name == "x"       ? residual_text
                                                        : x_text + " and " + residual_text;
      fail(fmt::format("dataset /inputs/{} has shape {}, which disagrees with {}; expected {} ({})", t.name,
                       detail::dims_text(got), sources, detail::dims_text(expected), pattern));
    }
  }

  // A root attribute that must be one string when present: one of another type (an integer, an array of
  // strings) is refused rather than ignored, since ignoring comb_layout would read comb in the other orientation.
  std::optional<std::string> root_string_attribute(const char* name, const char* expected) const {
    auto value = detail::read_string_attribute(file.get(), name);
    if (!value && detail::attribute_exists(file.get(), name))
      fail(fmt::format("root attribute {} is not a string; expected {}", name, expected));
    return value;
  }

  std::vector<int64_t> x_dims() const {
    auto d = detail::dataset_dims(x.dataset.get());
    return {d.begin(), d.end()};
  }
  std::vector<int64_t> residual_dims() const {
    auto d = detail::dataset_dims(residual.dataset.get());
    return {d.begin(), d.end()};
  }

  void open() {
    require_regular_file(path, "input file", "an HDF5 file");  // before opening: a FIFO would block forever
    file = detail::open_file_read_only(path);
    const auto fmt_attr = root_string_attribute("format", "\"mhcdiff/1\"");
    if (fmt_attr && *fmt_attr != "mhcdiff/1")
      fail(fmt::format("root attribute format is \"{}\"; expected \"mhcdiff/1\"", *fmt_attr));
    if (H5Lexists(file.get(), "/inputs", detail::local_links()) <= 0)
      fail(fmt::format("no /inputs group (expected /inputs/x, /inputs/residual, /inputs/post, /inputs/comb); its top "
                       "level holds {}",
                       detail::top_level_names(file.get())));
    if (auto link = detail::external_link_target(file.get(), "/inputs")) fail(fmt::format("/inputs is {}", *link));

    open_tensor(x, "x", Slot::bf16, true);
    open_tensor(residual, "residual", Slot::bf16, true);
    open_tensor(post, "post", Slot::f32, true);
    open_tensor(comb, "comb", Slot::f32, true);
    open_tensor(grad_out, "grad_out", Slot::bf16, false);
    has_grad = grad_out.dataset.valid();

    const auto xd = x_dims();
    if (xd.size() < 2)
      fail(fmt::format("dataset /inputs/x has rank {} (shape {}); expected [S,D] or [batch...,S,D]", xd.size(),
                       detail::dims_text(xd)));
    batch_dims.assign(xd.begin(), xd.end() - 1);
    const auto rd = residual_dims();
    if (rd.size() != xd.size() + 1)
      fail(fmt::format("dataset /inputs/residual has rank {} (shape {}); expected rank {} ([...,S,H,D] with the batch "
                       "dims of /inputs/x {})",
                       rd.size(), detail::dims_text(rd), xd.size() + 1, detail::dims_text(xd)));
    const int64_t H = rd[rd.size() - 2];
    const int64_t D = xd.back();
    if (H < 1 || H > kMaxStreams)
      fail(fmt::format("dataset /inputs/residual has H={} streams (shape {}); expected 1..{}", H,
                       detail::dims_text(rd), kMaxStreams));
    if (D < 1) fail(fmt::format("dataset /inputs/x has D={} (shape {}); expected D >= 1", D, detail::dims_text(xd)));
    check_dims(residual, {H, D}, "[...,S,H,D]");
    check_dims(post, {H}, "[...,S,H]");
    check_dims(comb, {H, H}, "[...,S,H,H]");
    if (has_grad) check_dims(grad_out, {H, D}, "[...,S,H,D] like /inputs/residual");

    int64_t S = 1;
    for (int64_t b : batch_dims) S *= b;
    if (S < 1) fail(fmt::format("dataset /inputs/x has no tokens (shape {})", detail::dims_text(xd)));
    shape = Shape{S, static_cast<int>(H), D};
    x.row_elems = D;
    residual.row_elems = grad_out.row_elems = H * D;
    post.row_elems = H;
    comb.row_elems = H * H;

    // comb_layout is read from the file root only. One written on /inputs or on /inputs/comb (where a writer may
    // reasonably put it) would otherwise be ignored, and comb read in the other orientation without a word.
    {
      const Handle inputs(H5Gopen2(file.get(), "/inputs", detail::local_group_access()));
      for (const auto& [object, where] : {std::pair{inputs.get(), "the group /inputs"},
                                          std::pair{comb.dataset.get(), "the dataset /inputs/comb"}})
        if (const auto name =
                object >= 0 ? detail::comb_orientation_lookalike(object, /*include_comb_layout=*/true) : std::nullopt)
          fail(fmt::format("{} has an attribute '{}', but mhcdiff reads comb's orientation only from the file root's "
                           "attribute comb_layout; move it there{}",
                           where, report::one_line(*name), *name == "comb_layout" ? "" : " as comb_layout"));
    }
    // The attribute is validated even when the option overrides it: a malformed file is refused either way.
    const std::optional<CombLayout> declared = detail::declared_comb_layout(file.get(), path);
    // An explicit option wins in both directions: a writer that transposed comb yet declared src,dst, or declared
    // dst,src for a comb it never transposed, is the bug class of SPEC §1 (docs/decisions.md).
    if (options.comb_layout) {
      layout = *options.comb_layout;
      layout_origin = CombLayoutOrigin::option;
      // Scripts that spelled out the old default (src,dst) would now read a correctly labelled file transposed.
      if (declared && *declared != layout)
        spdlog::warn("{}: --comb-layout {} overrides the file's comb_layout attribute \"{}\": comb is read as {}", path,
                     comb_layout_name(layout), comb_layout_name(*declared), comb_layout_name(layout));
    } else if (declared) {
      layout = *declared;
      layout_origin = CombLayoutOrigin::file_attribute;
    } else {
      layout = CombLayout::src_dst;
      layout_origin = CombLayoutOrigin::default_layout;
    }
  }

  template <class Raw>
  void read_raw(const InputTensor& t, hid_t mem_type, int64_t s0, int64_t count, std::vector<Raw>& buf) {
    buf.resize(static_cast<size_t>(count * t.row_elems));
    // Storage never written would read as fill values. Asked at the first read rather than when the file is
    // opened: a file declaring more tokens than fit the disk or memory is still refused for that first, and
    // `info` and the shape checks do not pay for counting chunks.
    if (!t.storage_checked) {
      if (auto why = detail::unwritten_storage(t.dataset.get()))
        fail(fmt::format("dataset /inputs/{} is {}", t.name, *why));
      t.storage_checked = true;
    }
    try {
      detail::read_flat(t.dataset.get(), mem_type, uint64_t(s0 * t.row_elems), uint64_t(count * t.row_elems),
                        buf.data());
    } catch (const std::runtime_error& e) {
      fail(fmt::format("reading dataset /inputs/{} failed: {}", t.name, e.what()));
    }
  }

  // Converts wide values into the slot's type, refusing (or counting, under --round-inputs) inexact ones.
  template <class Wide, class Narrow, class Round, class Widen>
  void narrow_values(const InputTensor& t, const std::vector<Wide>& wide, std::vector<Narrow>& out, int64_t s0,
                     InputCensus* census, Round round, Widen widen, const char* target) {
    out.resize(wide.size());
    for (size_t i = 0; i < wide.size(); ++i) {
      const Wide v = wide[i];
      out[i] = round(v);
      if (std::isnan(v) || Wide(widen(out[i])) == v) continue;
      if (!options.round_inputs)
        fail(fmt::format("dataset /inputs/{} holds {} values that are not exactly {} (first at element {}: {}); pass "
                         "--round-inputs to round them to nearest-even",
                         t.name, sizeof(Wide) == 8 ? "float64" : "float32", target,
                         stored_index(t, s0 * t.row_elems + int64_t(i)), double(v)));
      if (census && census->counts(s0 + int64_t(i) / t.row_elems)) ++census->rounded_count;
      // A finite value beyond the target's range rounds to an infinity, which check_finite would report as if the
      // file held one.
      if (std::isinf(double(widen(out[i]))) && !std::isinf(double(v)) && !options.allow_nonfinite)
        fail(fmt::format("dataset /inputs/{} holds a {} value beyond {}'s range (first at element {}: {}), which "
                         "--round-inputs rounds to an infinity; pass --allow-nonfinite to run on it",
                         t.name, sizeof(Wide) == 8 ? "float64" : "float32", target,
                         stored_index(t, s0 * t.row_elems + int64_t(i)), double(v)));
    }
  }

  // NaN and infinities: refused with the first one's place (SPEC's bad input), or under --allow-nonfinite
  // counted for the census and let through (they propagate to the outputs; docs/format.md).
  template <class Value, class IsNan, class IsInf>
  void check_finite(const InputTensor& t, const std::vector<Value>& values, int64_t s0, InputCensus* census,
                    IsNan is_nan, IsInf is_inf) const {
    for (size_t i = 0; i < values.size(); ++i) {
      const bool nan = is_nan(values[i]), inf = !nan && is_inf(values[i]);
      if (!nan && !inf) continue;
      if (!options.allow_nonfinite)
        fail(fmt::format("dataset /inputs/{} holds {} (first at element {}); pass --allow-nonfinite to run on "
                         "non-finite inputs",
                         t.name, nan ? "a NaN" : "an infinity", stored_index(t, s0 * t.row_elems + int64_t(i))));
      if (census && census->counts(s0 + int64_t(i) / t.row_elems)) ++(nan ? census->nan_count : census->inf_count);
    }
  }

  void read_bf16_slot(const InputTensor& t, int64_t s0, int64_t count, std::vector<bf16_bits>& out,
                      InputCensus* census) {
    switch (t.kind) {
      case StoredKind::bf16_float: read_raw(t, bf16_type.get(), s0, count, out); break;
      case StoredKind::bf16_uint16: {
        Handle ftype(H5Dget_type(t.dataset.get()));
        const hid_t mem = H5Tget_sign(ftype.get()) == H5T_SGN_NONE ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT16;
        read_raw(t, mem, s0, count, out);  // int16 and uint16 have the same bits: no conversion either way
        break;
      }
      case StoredKind::f32: {
        std::vector<float> wide;
        read_raw(t, H5T_NATIVE_FLOAT, s0, count, wide);
        narrow_values(t, wide, out, s0, census, [](float v) { return round_to_bf16_rne(v); }, bf16_to_float,
                      "bfloat16");
        break;
      }
      case StoredKind::f64: {
        std::vector<double> wide;
        read_raw(t, H5T_NATIVE_DOUBLE, s0, count, wide);
        narrow_values(t, wide, out, s0, census, [](double v) { return round_to_bf16_rne(v); }, bf16_to_float,
                      "bfloat16");
        break;
      }
      default: fail("internal: unexpected dtype");
    }
    check_finite(t, out, s0, census, bf16_is_nan, [](bf16_bits b) { return (b & 0x7fffu) == 0x7f80u; });
  }

  void read_f32_slot(const InputTensor& t, int64_t s0, int64_t count, std::vector<float>& out, InputCensus* census) {
    switch (t.kind) {
      case StoredKind::f32: read_raw(t, H5T_NATIVE_FLOAT, s0, count, out); break;
      case StoredKind::f64: {
        std::vector<double> wide;
        read_raw(t, H5T_NATIVE_DOUBLE, s0, count, wide);
        narrow_values(t, wide, out, s0, census, [](double v) { return static_cast<float>(v); },
                      [](float f) { return f; }, "float32");
        break;
      }
      case StoredKind::bf16_float:
      case StoredKind::bf16_uint16: {
        std::vector<bf16_bits> bits;
        read_bf16_slot(t, s0, count, bits, nullptr);
        out.resize(bits.size());
        for (size_t i = 0; i < bits.size(); ++i) out[i] = bf16_to_float(bits[i]);
        break;
      }
      default: fail("internal: unexpected dtype");
    }
    check_finite(t, out, s0, census, [](float v) { return std::isnan(v); }, [](float v) { return std::isinf(v); });
  }
};

InputReader::InputReader(const std::string& path, const ReadOptions& options) : impl_(std::make_unique<Impl>()) {
  impl_->path = path;
  impl_->options = options;
  impl_->open();
}
InputReader::~InputReader() = default;
InputReader::InputReader(InputReader&&) noexcept = default;
InputReader& InputReader::operator=(InputReader&&) noexcept = default;

const std::string& InputReader::path() const { return impl_->path; }
const Shape& InputReader::shape() const { return impl_->shape; }
const std::vector<int64_t>& InputReader::batch_dims() const { return impl_->batch_dims; }
bool InputReader::has_grad() const { return impl_->has_grad; }
CombLayout InputReader::comb_layout() const { return impl_->layout; }
CombLayoutOrigin InputReader::comb_layout_origin() const { return impl_->layout_origin; }

std::string InputReader::comb_layout_text() const {
  const char* name = comb_layout_name(impl_->layout);
  switch (impl_->layout_origin) {
    case CombLayoutOrigin::option: return fmt::format("{} (--comb-layout)", name);
    case CombLayoutOrigin::file_attribute: return fmt::format("{} (the file's comb_layout attribute)", name);
    case CombLayoutOrigin::default_layout: break;
  }
  return fmt::format("{} (the default: the file declares no comb_layout)", name);
}

Inputs InputReader::read_slab(int64_t s0, int64_t count, InputCensus* census) {
  Impl& m = *impl_;
  if (s0 < 0 || count < 0 || s0 > m.shape.S - count)
    throw std::out_of_range(fmt::format("read_slab [{}, {}) outside [0, {})", s0, s0 + count, m.shape.S));
  // A file may declare tokens far larger than memory (chunked datasets take no space until written): say which
  // file and shape, rather than main's generic "not enough memory".
  try {
    return read_slab_unchecked(s0, count, census);
  } catch (const std::bad_alloc&) {
  } catch (const std::length_error&) {
  }
  const int64_t per_token = token_input_bytes(m.shape, m.has_grad);
  throw InputError(fmt::format("{}: not enough memory to read {} token(s) of its inputs (S={}, H={}, D={}: {:.3g} "
                               "bytes per token)",
                               m.path, count, m.shape.S, m.shape.H, m.shape.D, double(per_token)));
}

namespace {

// Each token's comb [H,H] transposed in place: src,dst <-> dst,src.
void transpose_comb(Inputs& in) {
  const int H = in.shape.H;
  for (int64_t s = 0; s < in.shape.S; ++s) {
    float* c = in.comb.data() + s * H * H;
    for (int i = 0; i < H; ++i)
      for (int j = i + 1; j < H; ++j) std::swap(c[i * H + j], c[j * H + i]);
  }
}

}  // namespace

Inputs InputReader::read_slab_unchecked(int64_t s0, int64_t count, InputCensus* census) {
  Impl& m = *impl_;
  Inputs in;
  in.shape = Shape{count, m.shape.H, m.shape.D};
  m.read_bf16_slot(m.x, s0, count, in.x, census);
  m.read_bf16_slot(m.residual, s0, count, in.residual, census);
  m.read_f32_slot(m.post, s0, count, in.post, census);
  m.read_f32_slot(m.comb, s0, count, in.comb, census);
  if (m.has_grad) m.read_bf16_slot(m.grad_out, s0, count, in.grad_out, census);
  if (m.layout == CombLayout::dst_src) transpose_comb(in);
  return in;
}

std::string InputReader::checksum(bool comb_transposed) {
  InputChecksum sum;
  const int64_t step = slab_tokens_for(impl_->shape, impl_->has_grad, int64_t(64) << 20);
  for (int64_t s0 = 0; s0 < impl_->shape.S; s0 += step) {
    Inputs slab = read_slab(s0, std::min(step, impl_->shape.S - s0));
    if (comb_transposed) transpose_comb(slab);
    sum.update(slab);
  }
  return sum.hex();
}

Inputs read_inputs(const std::string& path, const ReadOptions& options) {
  InputReader reader(path, options);
  return reader.read_slab(0, reader.shape().S);
}

void require_computed_from(const std::string& side, const std::string& computed_from, InputReader& inputs,
                           const std::string& inputs_checksum, bool comb_layout_option) {
  if (computed_from.empty() || computed_from == inputs_checksum) return;
  // The checksum covers comb as read, so results made from the same file read the other way round (a run with
  // --comb-layout dst,src, checked without it) differ too: told apart by a second pass, on this error path only.
  const CombLayout other = inputs.comb_layout() == CombLayout::src_dst ? CombLayout::dst_src : CombLayout::src_dst;
  std::string hint;
  if (inputs.checksum(true) == computed_from) {
    hint = fmt::format("; they are these inputs with comb read as {} (comb was read as {} here)",
                       comb_layout_name(other), inputs.comb_layout_text());
    hint += comb_layout_option ? fmt::format(": pass --comb-layout {}", comb_layout_name(other))
                               : fmt::format(": {} was computed with comb read the other way round from how {} {}",
                                             side, inputs.path(),
                                             inputs.comb_layout_origin() == CombLayoutOrigin::file_attribute
                                                 ? "declares it"
                                                 : "is read (it declares no comb_layout)");
  }
  throw InputError(fmt::format("{} was computed from other inputs than {} (input_checksum {}, the inputs' {}){}", side,
                               inputs.path(), computed_from, inputs_checksum, hint));
}

std::string results_inputs_checksum(const std::string& path, const std::string& group) {
  if (group != "/") {
    for (const auto& [key, value] : TensorFile(path).attributes(group))
      if (key == "input_checksum" && !value.empty()) return value;
  }
  try {
    ReadOptions stored;  // as the file holds them: comb as it declares, any NaN the dump carries
    stored.allow_nonfinite = true;
    return InputReader(path, stored).checksum();
  } catch (const InputError&) {
    return "";  // no /inputs, or none `run` could read: nothing to check against
  }
}

namespace {

// The stored /inputs of `path` as results_inputs_checksum reads them, or nothing when it has no readable ones.
std::optional<InputReader> stored_inputs(const std::string& path) {
  try {
    ReadOptions stored;
    stored.allow_nonfinite = true;
    return InputReader(path, stored);
  } catch (const InputError&) {
    return std::nullopt;
  }
}

// `reader`'s inputs with comb transposed have checksum `checksum` (false when they cannot be read).
bool transposed_match(std::optional<InputReader>& reader, const std::string& checksum) {
  try {
    return reader && reader->checksum(true) == checksum;
  } catch (const InputError&) {
    return false;
  }
}

// How the results in `path` read comb from their source, as `run` recorded it ("in.h5's comb as dst,src
// (--comb-layout)"), or "" when the file does not say.
std::string source_comb_reading(const std::string& path) {
  std::string layout, source;
  try {
    const TensorFile file(path);  // attributes() throws InputError when there is no /inputs
    for (const auto& [key, value] : file.attributes("/inputs")) {
      if (key == "source_comb_layout") layout = value;
      if (key == "source_file") source = value;
    }
  } catch (const InputError&) {
    return "";
  }
  if (layout.empty()) return "";
  return fmt::format("{} as {}", source.empty() ? "comb" : source + "'s comb", layout);
}

}  // namespace

std::string transposed_comb_hint(const std::string& path_a, const std::string& label_a, const std::string& checksum_a,
                                 const std::string& path_b, const std::string& label_b, const std::string& checksum_b) {
  // Each file opened once; inputs of two shapes are not read through (an error path, but whole files).
  std::optional<InputReader> a = stored_inputs(path_a), b = stored_inputs(path_b);
  if (a && b && !(a->shape() == b->shape())) return "";
  if (!transposed_match(a, checksum_b) && !transposed_match(b, checksum_a)) return "";
  std::string hint = "; they are the same inputs with comb read the other way round";
  const std::string read_a = source_comb_reading(path_a), read_b = source_comb_reading(path_b);
  if (!read_a.empty() && !read_b.empty()) hint += fmt::format(": {} read {}, {} read {}", label_a, read_a, label_b, read_b);
  return hint + "; recompute one side with the other's --comb-layout";
}

}  // namespace mhc::io
