#pragma once
// `mhcdiff info`: a readable listing of what an mhcdiff/1 file holds (like h5ls, in our terms).
#include <string>

namespace mhc::io {

// Groups, datasets (dtype, shape, storage), attributes and provenance of `path`, as text for stdout.
// Throws InputError when the file is missing, not HDF5, truncated, or not mhcdiff/1.
std::string describe_file(const std::string& path);

}  // namespace mhc::io
