// The final latents of a run as HDF5 (`latents.h5`): dataset /latents F32 [F_total, C, H, W],
// chunked one frame per chunk, written collectively with parallel HDF5 (every rank its hyperslab
// of frames), plus string and integer attributes on the root group (format, version, config).
// Written under PATH.partial and renamed by rank 0 after every rank closed the file, so a file
// named PATH is always complete.
#pragma once

#include <mpi.h>

#include <cstdint>
#include <map>
#include <string>

#include "core/tensor.hpp"

namespace vinf::io {

inline constexpr const char* kLatentsFormat = "vinf-latents";
inline constexpr int kLatentsFormatVersion = 1;

struct H5Attributes {
  std::map<std::string, std::string> text;
  std::map<std::string, std::int64_t> integers;
};

// Collective over comm. full: [F_total, C, H, W]; this rank holds frames [first, first + count)
// in `frames` (host, f32, frame-major, count * C * H * W values; count may be 0).
void write_latents_h5(MPI_Comm comm, const std::string& path, const Shape& full, std::int64_t first,
                      std::int64_t count, const float* frames, const H5Attributes& attributes);

}  // namespace vinf::io
