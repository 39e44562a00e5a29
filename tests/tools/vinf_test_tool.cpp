// Helpers for the command-line tests, so that the shell scripts need nothing beyond coreutils:
//   compare A B TOL [KEY...]        max |a - b| of F32 (or I64) tensors present in both (or the keys given);
//                                   exit 1 when a key is missing, shapes differ or the error > TOL
//   compare-frames A B F0 F1 TOL    as compare, for frames [F0, F1) of A's 5-D tensors against all of B
//   compare-relative A B RTOL [PREFIX...]
//                                   every F32 tensor of B whose name starts with a PREFIX (every
//                                   one in both without; a PREFIX !TEXT leaves out the names that
//                                   contain TEXT) agrees with A's to RTOL times B's largest
//                                   |element|; one summary line, and a line per failing tensor
//   compare-adamw A B LR            the parameters after one AdamW step of two train-step files
//                                   (adamw.X), element by element: within 1e-4 LR + 4e-7 |p|, except
//                                   where B's gradient (grad.X) is within 100 times 1e-5 of its
//                                   tensor's largest of zero, where the step's sign g / (|g| + eps)
//                                   is rounding's to decide: there within 2 LR
//   train-batch IN OUT B [--no-adamw]
//                                   a vinf train-step input of B samples from IN's two: sample i is
//                                   IN's sample i % 2, x0 scaled by 1 + 0.1 (i / 2), eps by
//                                   1 - 0.05 (i / 2), at timestep 700, 150, 400, 900, 50, 999, ...;
//                                   IN's metadata (the `adamw` settings) unless --no-adamw
//   slice-frames IN OUT F0 F1       IN's inputs with `sample` cut to frames [F0, F1)
//   broken-models MODEL DIR         variants of a good model directory, each with one defect
//   h5-compare A B RTOL             max |a - b| of the /latents of two latents.h5 files, against
//                                   RTOL times the largest |b| (at least 1)
//   h5-vs-latents A.h5 B.safetensors KEY TOL
//                                   the /latents [F, C, H, W] of a latents.h5 against B's KEY in
//                                   diffusers' [1, C, F, H, W], max |a - b| <= TOL (absolute)
//   text-embeddings OUT SEED L D NEGATIVE PROMPT...
//                                   an embeddings file (prompt_embeds, negative_prompt_embeds) of
//                                   seeded normal values, one row per PROMPT (NEGATIVE is not used)
//   vae-old-names DIR OUT_DIR       DIR's VAE with the mid-block attention under its older names
//                                   (query/key/value/proj_attn) and 1x1-conv [C, C, 1, 1] weights
//   pick IN OUT NAME[=SOURCE]...    a safetensors file of IN's F32/I64 tensors SOURCE (NAME when not
//                                   given) under the names NAME
//   h5-diff A B TOL                 every dataset of two HDF5 files (the same names and shapes in
//                                   both) agrees to TOL, absolute, element by element, as h5diff -d
//   h5-check FILE F C H W           /latents is [F, C, H, W], finite, and the file says its format
//   h5-flip FILE DATASET FRAME      flips 8 bytes in the middle of the stored data of DATASET's
//                                   frame FRAME (its chunk, or its bytes in contiguous storage),
//                                   in place, the way a damaged disk or a bad copy changes a file
//   latents-h5 OUT F CLIP_SIZE LIST a latents.h5 (one process) of F frames [4, 8, 8]: frame f is
//                                   0.1 f everywhere, 5 more from frame F/2 on (a seam there);
//                                   root clip_size CLIP_SIZE; /run/boundaries LIST ("-": none)
//                                   (a 5th word `nan`: element 10 is a NaN)
//   video-frames OUT KIND F W H     raw rgb24 frames for ffmpeg: KIND still (one texture), flicker
//                                   (brightness alternating 60 / 180), shift (a texture moving 2
//                                   pixels right per frame) or seam (shift, jumping 20 pixels at F/2)
//   train-data OUT CLIPS F WIDTH    a training data file (train/data.hpp) of CLIPS clips of [4, F, 8, 8]
//                                   latents and [77, WIDTH] text, seeded noise, without videos
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include <hdf5.h>

#include "io/checkpoint.hpp"
#include "io/h5file.hpp"
#include "io/safetensors.hpp"
#include "core/philox.hpp"

using namespace vinf;
namespace fs = std::filesystem;

namespace {

// Frames [f0, f0 + n) of a (B, C, F, H, W) tensor as a contiguous copy.
std::vector<float> frames_of(const Tensor& t, std::int64_t f0, std::int64_t n) {
  const std::int64_t bc = t.size(0) * t.size(1), f = t.size(2), hw = t.size(3) * t.size(4);
  std::vector<float> out(static_cast<std::size_t>(bc * n * hw));
  for (std::int64_t i = 0; i < bc; ++i)
    std::memcpy(out.data() + i * n * hw, t.ptr<float>() + (i * f + f0) * hw, sizeof(float) * n * hw);
  return out;
}

int compare(int argc, char** argv, bool frames) {
  const int first_key = frames ? 7 : 5;
  if (argc < first_key) return 2;
  const io::SafetensorsFile a(argv[2]), b(argv[3]);
  const std::int64_t f0 = frames ? std::atoll(argv[4]) : 0, f1 = frames ? std::atoll(argv[5]) : 0;
  const double tol = std::atof(argv[first_key - 1]);
  std::vector<std::string> keys(argv + first_key, argv + argc);
  if (keys.empty())
    for (const auto& e : a.entries())
      if (b.contains(e.name)) keys.push_back(e.name);
  if (keys.empty()) {
    std::cerr << "compare: no tensor in common\n";
    return 1;
  }
  int bad = 0;
  for (const std::string& k : keys) {
    if (!a.contains(k) || !b.contains(k)) {
      std::cerr << "compare: '" << k << "' is missing from " << (a.contains(k) ? argv[3] : argv[2]) << "\n";
      ++bad;
      continue;
    }
    Tensor x = a.tensor(k);
    const Tensor y = b.tensor(k);
    std::vector<float> cut;
    if (frames && x.rank() == 5 && f1 > f0 && f1 <= x.size(2) && x.dtype == DType::f32) {
      cut = frames_of(x, f0, f1 - f0);
      x = Tensor::wrap(cut.data(), DType::f32, Device::cpu(), {x.size(0), x.size(1), f1 - f0, x.size(3), x.size(4)});
    }
    const bool ints = x.dtype == DType::i64 && y.dtype == DType::i64;  // token ids and masks
    if (!(x.shape == y.shape) || ((x.dtype != DType::f32 || y.dtype != DType::f32) && !ints)) {
      std::cerr << "compare: '" << k << "' differs in shape or dtype: " << x.describe() << " vs " << y.describe()
                << "\n";
      ++bad;
      continue;
    }
    // A safetensors file need not align an I64 tensor to 8 bytes: its values are read by bytes.
    const auto i64 = [](const Tensor& t, std::int64_t i) {
      std::int64_t v = 0;
      std::memcpy(&v, static_cast<const char*>(t.data) + i * static_cast<std::int64_t>(sizeof v), sizeof v);
      return v;
    };
    double worst = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i)
      worst = std::max(worst, ints ? std::fabs(static_cast<double>(i64(x, i) - i64(y, i)))
                                   : std::fabs(static_cast<double>(x.ptr<float>()[i]) - y.ptr<float>()[i]));
    const bool ok = worst <= tol;
    std::printf("%s %s max |diff| %.3g (tolerance %.3g)\n", ok ? "ok" : "FAIL", k.c_str(), worst, tol);
    bad += ok ? 0 : 1;
  }
  return bad ? 1 : 0;
}

int compare_relative(int argc, char** argv) {
  if (argc < 5) return 2;
  const io::SafetensorsFile a(argv[2]), b(argv[3]);
  const double rtol = std::atof(argv[4]);
  std::vector<std::string> prefixes, excluded;
  for (int i = 5; i < argc; ++i)
    (argv[i][0] == '!' ? excluded.emplace_back(argv[i] + 1) : prefixes.emplace_back(argv[i]));
  int bad = 0, compared = 0;
  double worst = 0;
  std::string worst_name;
  for (const auto& e : b.entries()) {
    bool wanted = prefixes.empty() ? a.contains(e.name) : false;
    for (const std::string& p : prefixes) wanted = wanted || e.name.rfind(p, 0) == 0;
    for (const std::string& x : excluded) wanted = wanted && e.name.find(x) == std::string::npos;
    if (!wanted || e.dtype != DType::f32) continue;
    if (!a.contains(e.name)) {
      std::cerr << "compare-relative: '" << e.name << "' is missing from " << argv[2] << "\n";
      ++bad;
      continue;
    }
    const Tensor x = a.tensor(e.name), y = b.tensor(e.name);
    if (!(x.shape == y.shape) || x.dtype != DType::f32) {
      std::cerr << "compare-relative: '" << e.name << "' differs in shape or dtype: " << x.describe() << " vs "
                << y.describe() << "\n";
      ++bad;
      continue;
    }
    double diff = 0, largest = 0;
    for (std::int64_t i = 0; i < x.numel(); ++i) {
      diff = std::max(diff, std::fabs(static_cast<double>(x.ptr<float>()[i]) - y.ptr<float>()[i]));
      largest = std::max(largest, std::fabs(static_cast<double>(y.ptr<float>()[i])));
    }
    const double rel = largest > 0 ? diff / largest : diff;
    ++compared;
    if (rel > worst) worst = rel, worst_name = e.name;
    if (!(rel <= rtol)) {
      std::printf("FAIL %s max |diff| %.3g of its largest |element| %.3g (tolerance %.3g)\n", e.name.c_str(), rel,
                  largest, rtol);
      ++bad;
    }
  }
  if (compared == 0) {
    std::cerr << "compare-relative: no tensor to compare\n";
    return 1;
  }
  std::printf("%s %d tensors, worst %s %.3g of its largest |element| (tolerance %.3g)\n", bad ? "FAIL" : "ok", compared,
              worst_name.c_str(), worst, rtol);
  return bad ? 1 : 0;
}

int compare_adamw(int argc, char** argv) {
  if (argc != 5) return 2;
  const io::SafetensorsFile a(argv[2]), b(argv[3]);
  const double lr = std::atof(argv[4]);
  std::int64_t compared = 0, undecided = 0, bad = 0, tensors = 0;
  for (const auto& e : b.entries()) {
    if (e.name.rfind("adamw.", 0) != 0) continue;
    const std::string grad = "grad." + e.name.substr(6);
    if (!a.contains(e.name) || !b.contains(grad)) {
      std::cerr << "compare-adamw: '" << e.name << "' or '" << grad << "' is missing\n";
      ++bad;
      continue;
    }
    const Tensor x = a.tensor(e.name), y = b.tensor(e.name), g = b.tensor(grad);
    if (!(x.shape == y.shape) || !(g.shape == y.shape)) {
      std::cerr << "compare-adamw: '" << e.name << "' differs in shape\n";
      ++bad;
      continue;
    }
    ++tensors;
    double largest = 0;
    for (std::int64_t i = 0; i < g.numel(); ++i)
      largest = std::max(largest, std::fabs(static_cast<double>(g.ptr<float>()[i])));
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      const double p = y.ptr<float>()[i], diff = std::fabs(static_cast<double>(x.ptr<float>()[i]) - p);
      const bool near_zero = std::fabs(g.ptr<float>()[i]) < 100 * 1e-5 * largest;
      undecided += near_zero;
      ++compared;
      if (diff > (near_zero ? 2 * lr : 1e-4 * lr + 4e-7 * std::fabs(p))) {
        if (bad < 5)
          std::printf("FAIL %s[%lld]: %.9g against %.9g (gradient %.3g)\n", e.name.c_str(), static_cast<long long>(i),
                      x.ptr<float>()[i], p, g.ptr<float>()[i]);
        ++bad;
      }
    }
  }
  if (tensors == 0) {
    std::cerr << "compare-adamw: no adamw.* tensor in " << argv[3] << "\n";
    return 1;
  }
  std::printf("%s %lld parameters of %lld tensors after the AdamW step, %lld with a gradient near zero%s\n",
              bad ? "FAIL" : "ok", static_cast<long long>(compared), static_cast<long long>(tensors),
              static_cast<long long>(undecided), bad ? "" : ", all within their bounds");
  return bad ? 1 : 0;
}

int train_batch(int argc, char** argv) {
  if (argc != 5 && !(argc == 6 && std::string(argv[5]) == "--no-adamw")) return 2;
  const io::SafetensorsFile in(argv[2]);
  const std::int64_t nb = std::atoll(argv[4]);
  const Tensor x0 = in.tensor("x0"), eps = in.tensor("eps"), text = in.tensor("encoder_hidden_states");
  if (x0.size(0) != 2 || nb < 1) return 2;
  const std::int64_t per = x0.numel() / 2, per_text = text.numel() / 2;
  std::vector<float> nx0(static_cast<std::size_t>(per * nb)), neps(nx0.size()),
      ntext(static_cast<std::size_t>(per_text * nb));
  std::vector<std::int64_t> ts(static_cast<std::size_t>(nb));
  const std::int64_t steps[] = {700, 150, 400, 900, 50, 999, 300, 600};
  for (std::int64_t i = 0; i < nb; ++i) {
    const std::int64_t src = i % 2;
    const float sx = 1.f + 0.1f * static_cast<float>(i / 2), se = 1.f - 0.05f * static_cast<float>(i / 2);
    for (std::int64_t k = 0; k < per; ++k) {
      nx0[static_cast<std::size_t>(i * per + k)] = x0.ptr<float>()[src * per + k] * sx;
      neps[static_cast<std::size_t>(i * per + k)] = eps.ptr<float>()[src * per + k] * se;
    }
    for (std::int64_t k = 0; k < per_text; ++k)
      ntext[static_cast<std::size_t>(i * per_text + k)] = text.ptr<float>()[src * per_text + k];
    ts[static_cast<std::size_t>(i)] = steps[i % 8];
  }
  Shape xs = x0.shape, tshape = text.shape;
  xs[0] = nb;
  tshape[0] = nb;
  std::vector<io::TensorToWrite> out{{"x0", DType::f32, xs, nx0.data(), {}},
                                     {"eps", DType::f32, xs, neps.data(), {}},
                                     {"encoder_hidden_states", DType::f32, tshape, ntext.data(), {}},
                                     {"timesteps", DType::i64, {nb}, ts.data(), {}},
                                     {"fps", DType::i64, {1}, in.tensor("fps").data, {}}};
  io::write_safetensors(argv[3], out, argc == 6 ? std::map<std::string, std::string>{} : in.metadata());
  return 0;
}

// /latents of an HDF5 file (serial access), with its shape.
std::vector<float> read_latents(const char* path, std::vector<hsize_t>& dims, std::string& format) {
  const hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error(std::string("cannot open ") + path);
  const hid_t d = H5Dopen2(f, "/latents", H5P_DEFAULT);
  if (d < 0) throw std::runtime_error(std::string(path) + " has no /latents");
  const hid_t space = H5Dget_space(d);
  dims.assign(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)), 0);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  hsize_t n = 1;
  for (hsize_t x : dims) n *= x;
  std::vector<float> v(n);
  if (H5Dread(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()) < 0)
    throw std::runtime_error(std::string("cannot read /latents of ") + path);
  format.clear();
  if (H5Aexists(f, "format") > 0) {
    const hid_t a = H5Aopen(f, "format", H5P_DEFAULT);
    const hid_t type = H5Aget_type(a);
    format.resize(H5Tget_size(type));
    H5Aread(a, type, format.data());
    H5Tclose(type);
    H5Aclose(a);
  }
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  return v;
}

int h5_compare(int argc, char** argv) {
  if (argc != 5) return 2;
  std::vector<hsize_t> da, db;
  std::string fa, fb;
  const std::vector<float> a = read_latents(argv[2], da, fa), b = read_latents(argv[3], db, fb);
  if (da != db) {
    std::cerr << "h5-compare: the shapes differ\n";
    return 1;
  }
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::fabs(static_cast<double>(b[i])));
  }
  const double tol = std::atof(argv[4]) * std::max(1.0, scale);
  std::printf("%s /latents max |diff| %.3g (tolerance %.3g: relative to max |value| %.3g)\n",
              worst <= tol ? "ok" : "FAIL", worst, tol, scale);
  return worst <= tol ? 0 : 1;
}

// Frames [first, first + F) of FILE.h5's /latents (frame-major) against KEY of a safetensors file,
// (1, C, F, H, W) F32: the largest |difference| and |reference|; false (said on stderr) when the
// shapes do not match.
bool latents_diff(const char* h5, const char* st, const char* key, hsize_t first, double& worst, double& scale) {
  std::vector<hsize_t> d;
  std::string format;
  const std::vector<float> a = read_latents(h5, d, format);
  const vinf::io::SafetensorsFile f(st);
  const vinf::Tensor b = f.tensor(key);
  if (d.size() != 4 || b.rank() != 5 || b.size(0) != 1 || b.dtype != vinf::DType::f32 ||
      static_cast<hsize_t>(b.size(1)) != d[1] || first + static_cast<hsize_t>(b.size(2)) > d[0] ||
      static_cast<hsize_t>(b.size(3)) != d[2] || static_cast<hsize_t>(b.size(4)) != d[3]) {
    std::cerr << h5 << ": /latents from frame " << first << " and '" << key << "' " << b.describe()
              << " do not match\n";
    return false;
  }
  const std::int64_t F = b.size(2), C = b.size(1), S = b.size(3) * b.size(4);
  worst = 0;
  scale = 0;
  for (std::int64_t fr = 0; fr < F; ++fr)
    for (std::int64_t c = 0; c < C; ++c)
      for (std::int64_t s = 0; s < S; ++s) {
        const double want = b.ptr<float>()[(c * F + fr) * S + s];
        const double got = a[static_cast<std::size_t>(((static_cast<std::int64_t>(first) + fr) * C + c) * S + s)];
        worst = std::max(worst, std::fabs(got - want));
        scale = std::max(scale, std::fabs(want));
      }
  return true;
}

// h5-vs-latents FILE.h5 REF.safetensors KEY TOL: every frame, within TOL absolute.
int h5_vs_latents(int argc, char** argv) {
  if (argc != 6) return 2;
  double worst = 0, scale = 0;
  if (!latents_diff(argv[2], argv[3], argv[4], 0, worst, scale)) return 1;
  const double tol = std::atof(argv[5]);
  std::printf("%s /latents against %s max |diff| %.3g (tolerance %.3g)\n", worst <= tol ? "ok" : "FAIL", argv[4], worst,
              tol);
  return worst <= tol ? 0 : 1;
}

// h5-vs-ref FILE.h5 REF.safetensors KEY REL FIRST: frames [FIRST, FIRST + F) of /latents (frame-major)
// against KEY (1, C, F, H, W), within REL times KEY's largest magnitude (a golden run's tolerance).
int h5_vs_ref(int argc, char** argv) {
  if (argc != 7) return 2;
  const auto first = static_cast<hsize_t>(std::atoll(argv[6]));
  double worst = 0, scale = 0;
  if (!latents_diff(argv[2], argv[3], argv[4], first, worst, scale)) return 1;
  const double rel = worst / scale, tol = std::atof(argv[5]);
  std::printf("%s %s frames %llu.. against %s: max |diff| / max |ref| %.3g (tolerance %.3g)\n",
              rel <= tol ? "ok" : "FAIL", argv[2], static_cast<unsigned long long>(first), argv[4], rel, tol);
  return rel <= tol ? 0 : 1;
}

// pick IN OUT NAME[=SOURCE]...: IN's tensors under new names (inputs for a command from a
// reference file that names them otherwise).
int pick(int argc, char** argv) {
  if (argc < 5) return 2;
  const io::SafetensorsFile in(argv[2]);
  std::vector<io::TensorToWrite> out;
  for (int i = 4; i < argc; ++i) {
    const std::string arg = argv[i];
    const std::size_t eq = arg.find('=');
    const std::string name = arg.substr(0, eq), source = eq == std::string::npos ? name : arg.substr(eq + 1);
    const Tensor t = in.tensor(source);
    out.push_back({name, t.dtype, t.shape, t.data, {}});
  }
  io::write_safetensors(argv[3], out);
  return 0;
}

// fifo-embeddings REF.safetensors OUT.safetensors: a --prompt.embeddings file of a FIFO fixture's
// prompt (cond) and empty prompt (uncond).
int fifo_embeddings(int argc, char** argv) {
  if (argc != 4) return 2;
  const io::SafetensorsFile f(argv[2]);
  const Tensor cond = f.tensor("cond"), uncond = f.tensor("uncond");
  io::write_safetensors(argv[3], {{"prompt_embeds", DType::f32, cond.shape, cond.data, {}},
                                  {"negative_prompt_embeds", DType::f32, uncond.shape, uncond.data, {}}});
  return 0;
}

// The paths of every dataset in an HDF5 file, sorted.
std::vector<std::string> dataset_paths(hid_t file) {
  std::vector<std::string> out;
  const auto visit = [](hid_t, const char* name, const H5O_info_t* info, void* data) -> herr_t {
    if (info->type == H5O_TYPE_DATASET)
      static_cast<std::vector<std::string>*>(data)->push_back(std::string("/") + name);
    return 0;
  };
  if (H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, visit, &out, H5O_INFO_BASIC) < 0)
    throw std::runtime_error("cannot list the datasets");
  return out;
}

// A dataset's values as doubles, with its shape.
std::vector<double> read_doubles(hid_t file, const std::string& path, std::vector<hsize_t>& dims) {
  const hid_t d = H5Dopen2(file, path.c_str(), H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("cannot open " + path);
  const hid_t space = H5Dget_space(d);
  dims.assign(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)), 0);
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  hsize_t n = 1;
  for (hsize_t x : dims) n *= x;
  std::vector<double> v(n);
  const herr_t rc = n == 0 ? 0 : H5Dread(d, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data());
  H5Sclose(space);
  H5Dclose(d);
  if (rc < 0) throw std::runtime_error("cannot read " + path + " as numbers");
  return v;
}

int h5_diff(int argc, char** argv) {
  if (argc != 5) return 2;
  const double tol = std::atof(argv[4]);
  const hid_t fa = H5Fopen(argv[2], H5F_ACC_RDONLY, H5P_DEFAULT), fb = H5Fopen(argv[3], H5F_ACC_RDONLY, H5P_DEFAULT);
  if (fa < 0 || fb < 0) throw std::runtime_error(std::string("cannot open ") + (fa < 0 ? argv[2] : argv[3]));
  const std::vector<std::string> names = dataset_paths(fa);
  int fails = 0;
  if (names != dataset_paths(fb)) {
    std::printf("FAIL: %s and %s hold different datasets\n", argv[2], argv[3]);
    ++fails;
  } else if (names.empty()) {
    std::printf("FAIL: %s holds no dataset\n", argv[2]);
    ++fails;
  }
  for (std::size_t k = 0; fails == 0 && k < names.size(); ++k) {
    std::vector<hsize_t> da, db;
    const std::vector<double> a = read_doubles(fa, names[k], da), b = read_doubles(fb, names[k], db);
    double worst = 0;
    std::size_t bad = 0;
    for (std::size_t i = 0; da == db && i < a.size(); ++i) {
      const double d = std::fabs(a[i] - b[i]);
      if (!(d <= tol)) ++bad;  // NaN counts as a difference
      if (d > worst) worst = d;
    }
    if (da != db || bad > 0) {
      std::printf("FAIL: %s: %s, max |diff| %.3g over %zu of %zu values (tolerance %.3g)\n", names[k].c_str(),
                  da != db ? "the shapes differ" : "differs", worst, bad, a.size(), tol);
      ++fails;
    }
  }
  if (fails == 0) std::printf("ok: %zu datasets agree within %.3g\n", names.size(), tol);
  H5Fclose(fa);
  H5Fclose(fb);
  return fails == 0 ? 0 : 1;
}

int h5_check(int argc, char** argv) {
  if (argc != 7) return 2;
  std::vector<hsize_t> dims;
  std::string format;
  const std::vector<float> v = read_latents(argv[2], dims, format);
  const std::vector<hsize_t> want{std::strtoull(argv[3], nullptr, 10), std::strtoull(argv[4], nullptr, 10),
                                  std::strtoull(argv[5], nullptr, 10), std::strtoull(argv[6], nullptr, 10)};
  std::size_t bad = 0;
  double rms = 0;
  for (float x : v) {
    bad += std::isfinite(x) ? 0 : 1;
    rms += static_cast<double>(x) * x;
  }
  rms = v.empty() ? 0 : std::sqrt(rms / static_cast<double>(v.size()));
  const bool ok = dims == want && bad == 0 && format.rfind("vinf-latents", 0) == 0 && rms > 0;
  std::printf("%s %s: %zu dims, %zu values, %zu not finite, rms %.3g, format '%s'\n", ok ? "ok" : "FAIL", argv[2],
              dims.size(), v.size(), bad, rms, format.c_str());
  return ok ? 0 : 1;
}

int h5_flip(int argc, char** argv) {
  if (argc != 5) return 2;
  const std::string path = argv[2], name = argv[3];
  const hsize_t frame = std::strtoull(argv[4], nullptr, 10);
  const hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) throw std::runtime_error("cannot open " + path);
  const hid_t d = H5Dopen2(f, name.c_str(), H5P_DEFAULT);
  if (d < 0) throw std::runtime_error("no dataset " + name + " in " + path);
  const hid_t space = H5Dget_space(d), dcpl = H5Dget_create_plist(d);
  std::vector<hsize_t> dims(static_cast<std::size_t>(H5Sget_simple_extent_ndims(space)));
  H5Sget_simple_extent_dims(space, dims.data(), nullptr);
  if (dims.empty() || frame >= dims[0]) throw std::runtime_error(name + " has no frame " + argv[4]);
  hsize_t frame_bytes = H5Dget_storage_size(d) / dims[0];  // contiguous storage: exact
  haddr_t start = HADDR_UNDEF;
  if (H5Pget_layout(dcpl) == H5D_CHUNKED) {
    std::vector<hsize_t> at(dims.size(), 0);
    at[0] = frame;
    unsigned mask = 0;
    if (H5Dget_chunk_info_by_coord(d, at.data(), &mask, &start, &frame_bytes) < 0)
      throw std::runtime_error("no chunk for frame " + std::string(argv[4]) + " of " + name);
  } else {
    start = H5Dget_offset(d) + frame * frame_bytes;
  }
  H5Pclose(dcpl);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
  if (start == HADDR_UNDEF || frame_bytes < 16) throw std::runtime_error("no stored data for frame of " + name);
  // The middle of the frame's bytes, on a 4-byte boundary: inside the data, away from a trailing checksum.
  const std::uint64_t at = start + (frame_bytes / 2) / 4 * 4;
  std::fstream io(path, std::ios::in | std::ios::out | std::ios::binary);
  char bytes[8];
  io.seekg(static_cast<std::streamoff>(at));
  io.read(bytes, sizeof bytes);
  for (char& b : bytes) b = static_cast<char>(b ^ 0x5a);
  io.seekp(static_cast<std::streamoff>(at));
  io.write(bytes, sizeof bytes);
  io.close();
  if (!io) throw std::runtime_error("cannot rewrite " + path);
  std::printf("flipped 8 bytes at offset %llu of %s (frame %llu of %s: %llu bytes stored at %llu)\n",
              static_cast<unsigned long long>(at), path.c_str(), static_cast<unsigned long long>(frame), name.c_str(),
              static_cast<unsigned long long>(frame_bytes), static_cast<unsigned long long>(start));
  return 0;
}

int text_embeddings(int argc, char** argv) {
  if (argc < 8) return 2;
  const std::int64_t tokens = std::atoll(argv[4]), width = std::atoll(argv[5]);
  const std::vector<std::string> prompts(argv + 7, argv + argc);
  // Standard normal values keyed by (seed, row): the same arguments give the same file.
  const std::uint64_t seed = std::strtoull(argv[3], nullptr, 10);
  auto rows = [&](std::size_t n, std::uint64_t stream) {
    std::vector<float> v(n * static_cast<std::size_t>(tokens * width));
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = philox::normal_at(seed, stream, i);
    return v;
  };
  const std::vector<float> all = rows(prompts.size(), 1), negative = rows(1, 2);
  io::write_safetensors(
      argv[2],
      {{"prompt_embeds", DType::f32, {static_cast<std::int64_t>(prompts.size()), tokens, width}, all.data(), {}},
       {"negative_prompt_embeds", DType::f32, {1, tokens, width}, negative.data(), {}}});
  return 0;
}

int vae_old_names(int argc, char** argv) {
  if (argc != 4) return 2;
  const fs::path in(argv[2]), out(argv[3]);
  fs::create_directories(out);
  fs::copy_file(in / "config.json", out / "config.json", fs::copy_options::overwrite_existing);
  const io::SafetensorsFile f((in / "diffusion_pytorch_model.safetensors").string());
  const std::pair<std::string, std::string> renames[] = {
      {".to_q.", ".query."}, {".to_k.", ".key."}, {".to_v.", ".value."}, {".to_out.0.", ".proj_attn."}};
  std::vector<io::TensorToWrite> tensors;
  for (const auto& e : f.entries()) {
    std::string name = e.name;
    Shape shape = e.shape;
    if (name.find("mid_block.attentions.0.") != std::string::npos)
      for (const auto& [now, old] : renames)
        if (const auto pos = name.find(now); pos != std::string::npos) {
          name.replace(pos, now.size(), old);
          if (shape.rank() == 2) shape = {shape[0], shape[1], 1, 1};
        }
    const Tensor t = f.tensor(e.name);
    tensors.push_back({name, e.dtype, shape, t.data, {}});
  }
  io::write_safetensors((out / "diffusion_pytorch_model.safetensors").string(), tensors);
  return 0;
}

int slice_frames(int argc, char** argv) {
  if (argc != 6) return 2;
  const io::SafetensorsFile in(argv[2]);
  const std::int64_t f0 = std::atoll(argv[4]), f1 = std::atoll(argv[5]);
  const Tensor s = in.tensor("sample");
  const std::int64_t b = s.size(0), c = s.size(1);
  const std::vector<float> cut = frames_of(s, f0, f1 - f0);
  std::vector<io::TensorToWrite> out;
  for (const auto& e : in.entries()) {
    if (e.name == "sample")
      out.push_back({"sample", DType::f32, {b, c, f1 - f0, s.size(3), s.size(4)}, cut.data(), {}});
    else
      out.push_back({e.name, e.dtype, e.shape, in.tensor(e.name).data, {}});
  }
  io::write_safetensors(argv[3], out);
  return 0;
}

// Copies every tensor of `in` except `drop`, adding `extra` and replacing `reshape`'s shape or
// `retype`'s dtype (the data are then garbage of the right size, which is fine: loading must stop
// before it reads them).
void rewrite(const io::SafetensorsFile& in, const std::string& path, const std::string& drop, const std::string& extra,
             const std::string& reshape, const std::string& retype) {
  std::vector<io::TensorToWrite> out;
  std::vector<std::vector<char>> keep;
  for (const auto& e : in.entries()) {
    if (e.name == drop) continue;
    io::TensorToWrite t{e.name, e.dtype, e.shape, in.tensor(e.name).data, {}};
    if (e.name == reshape || e.name == retype) {
      if (e.name == reshape) t.shape = Shape{e.shape.numel() + 1};
      if (e.name == retype) t.dtype = DType::i64;
      keep.emplace_back(static_cast<std::size_t>(t.shape.numel()) * dtype_size(t.dtype), '\0');
      t.data = keep.back().data();
    }
    out.push_back(t);
  }
  static const float one = 1.f;
  if (!extra.empty()) out.push_back({extra, DType::f32, {1}, &one, {}});
  io::write_safetensors(path, out);
}

int broken_models(int argc, char** argv) {
  if (argc != 4) return 2;
  const fs::path good(argv[2]), root(argv[3]);
  const io::SafetensorsFile in((good / "diffusion_pytorch_model.safetensors").string());
  const std::string weights = "diffusion_pytorch_model.safetensors";
  auto variant = [&](const char* name) {
    const fs::path d = root / name;
    fs::create_directories(d);
    fs::copy_file(good / "config.json", d / "config.json", fs::copy_options::overwrite_existing);
    return d;
  };
  rewrite(in, (variant("missing-key") / weights).string(), "mid_block.temp_convs.1.conv3.3.weight", "", "", "");
  rewrite(in, (variant("unexpected-key") / weights).string(), "", "mid_block.extra_layer.weight", "", "");
  rewrite(in, (variant("bad-shape") / weights).string(), "", "", "up_blocks.1.attentions.0.proj_in.weight", "");
  rewrite(in, (variant("bad-dtype") / weights).string(), "", "", "", "conv_in.bias");
  {
    // A NaN in the middle of one tensor (a damaged download or a broken conversion).
    std::vector<io::TensorToWrite> out;
    std::vector<float> poisoned;
    for (const auto& e : in.entries()) {
      io::TensorToWrite t{e.name, e.dtype, e.shape, in.tensor(e.name).data, {}};
      if (e.name == "down_blocks.1.resnets.0.conv1.weight" && e.dtype == DType::f32) {
        const auto* src = static_cast<const float*>(t.data);
        poisoned.assign(src, src + e.shape.numel());
        poisoned[7] = std::numeric_limits<float>::quiet_NaN();
        t.data = poisoned.data();
      }
      out.push_back(t);
    }
    io::write_safetensors((variant("nan-weight") / weights).string(), out);
  }
  {
    // Finite but huge weights in one convolution: its output overflows to infinity at run time.
    std::vector<io::TensorToWrite> out;
    std::vector<float> huge;
    for (const auto& e : in.entries()) {
      io::TensorToWrite t{e.name, e.dtype, e.shape, in.tensor(e.name).data, {}};
      if (e.name == "mid_block.resnets.0.conv1.weight" && e.dtype == DType::f32) {
        huge.assign(static_cast<std::size_t>(e.shape.numel()), 3e38f);
        t.data = huge.data();
      }
      out.push_back(t);
    }
    io::write_safetensors((variant("huge-weight") / weights).string(), out);
  }
  {
    const fs::path d = variant("truncated");
    fs::copy_file(good / weights, d / weights, fs::copy_options::overwrite_existing);
    fs::resize_file(d / weights, fs::file_size(d / weights) - 1000);
  }
  {
    const fs::path d = variant("bad-header");
    std::ofstream(d / weights) << std::string("\x10\x00\x00\x00\x00\x00\x00\x00", 8) << "{not json at all";
  }
  {
    const fs::path d = variant("unknown-block");
    fs::copy_file(good / weights, d / weights, fs::copy_options::overwrite_existing);
    std::ifstream cfg(good / "config.json");
    std::string text((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
    const auto pos = text.find("\"DownBlock3D\"");
    if (pos == std::string::npos) return 1;
    text.replace(pos, 13, "\"SpiralBlock3D\"");
    std::ofstream(d / "config.json") << text;
  }
  {
    const fs::path d = variant("unsupported-config");
    fs::copy_file(good / weights, d / weights, fs::copy_options::overwrite_existing);
    std::ifstream cfg(good / "config.json");
    std::string text((std::istreambuf_iterator<char>(cfg)), std::istreambuf_iterator<char>());
    const auto pos = text.find("\"silu\"");
    if (pos == std::string::npos) return 1;
    text.replace(pos, 6, "\"gelu\"");
    std::ofstream(d / "config.json") << text;
  }
  {
    const fs::path d = variant("no-weights");
    (void)d;
  }
  return 0;
}

int latents_h5(int argc, char** argv) {
  if (argc != 6 && !(argc == 7 && std::string(argv[6]) == "nan")) return 2;
  const std::int64_t frames = std::atoll(argv[3]), c = 4, h = 8, w = 8;
  std::vector<std::int64_t> boundaries;
  for (const char* p = argv[5]; *p && std::string(argv[5]) != "-";) {
    char* end = nullptr;
    boundaries.push_back(std::strtoll(p, &end, 10));
    p = *end == ',' ? end + 1 : end;
  }
  std::vector<float> latents(static_cast<std::size_t>(frames * c * h * w));
  for (std::size_t i = 0; i < latents.size(); ++i) {
    const auto f = static_cast<std::int64_t>(i) / (c * h * w);
    latents[i] = 0.1f * static_cast<float>(f) + (f >= frames / 2 ? 5.f : 0.f);
  }
  if (argc == 7)
    latents[10] = std::numeric_limits<float>::quiet_NaN();  // a damaged file as another tool might write it
  MPI_Init(&argc, &argv);
  io::RunStamp stamp;
  stamp.config_json = stamp.numerics_json = "{}";
  stamp.clip_size = std::atoll(argv[4]);
  // "-": none recorded (a file written before runs recorded them); "" would record that there are none.
  const bool none = std::string(argv[5]) == "-";
  io::write_latents(MPI_COMM_WORLD, argv[2], stamp, {{frames, c, h, w}, 0, frames}, latents.data(),
                    none ? std::nullopt : std::optional<std::vector<std::int64_t>>(boundaries));
  MPI_Finalize();
  return 0;
}

// A training data file as vinf prepare-data writes it (train/data.hpp), without videos: CLIPS
// clips of 4 x FRAMES x 8 x 8 latents and 77 x WIDTH text rows, values from Philox's normals.
int train_data(int argc, char** argv) {
  if (argc != 6) return 2;
  const std::int64_t clips = std::atoll(argv[3]), frames = std::atoll(argv[4]), width = std::atoll(argv[5]);
  const std::int64_t c = 4, h = 8, w = 8, tokens = 77;
  auto fill = [](std::vector<float>& v, std::uint64_t stream) {
    for (std::size_t i = 0; i < v.size(); i += 4) {
      const philox::U32x4 r = philox::block(1234, stream, i / 4);
      for (std::size_t k = 0; k < 4 && i + k < v.size(); ++k)
        v[i + k] = (static_cast<float>(r.v[k] % 2001) - 1000.f) / 577.f;  // uniform, unit variance
    }
  };
  std::vector<float> latents(static_cast<std::size_t>(clips * c * frames * h * w)),
      text(static_cast<std::size_t>(clips * tokens * width));
  fill(latents, 1);
  fill(text, 2);
  std::vector<std::int64_t> video(static_cast<std::size_t>(clips), 0), first(static_cast<std::size_t>(clips));
  for (std::int64_t i = 0; i < clips; ++i) first[static_cast<std::size_t>(i)] = i * frames;
  MPI_Init(nullptr, nullptr);
  {
    io::H5File f = io::H5File::create(MPI_COMM_SELF, argv[2]);
    f.write_frames("/latents", {clips, c, frames, h, w}, 0, 0, clips, latents.data());
    f.write_frames("/text", {clips, tokens, width}, 0, 0, clips, text.data());
    f.write_small("/clip_video", DType::i64, {clips}, video.data());
    f.write_small("/clip_first_frame", DType::i64, {clips}, first.data());
    f.write_text("/videos", "[\"synthetic.mp4\"]");
    f.write_text("/captions", "[\"synthetic\"]");
    f.set_text("/", "format", "vinf-train-data 1");
    f.set_int("/", "frames", frames);
    f.set_int("/", "frame_step", 1);
    f.set_int("/", "clip_step", frames);
    f.set_int("/", "width", 8 * w);
    f.set_int("/", "height", 8 * h);
    f.set_text("/", "scaling_factor", "0.18215");
    f.set_text("/", "vae", "none");
    f.set_text("/", "text_encoder", "none");
    f.close();
  }
  MPI_Finalize();
  return 0;
}

// A gray texture value at (x, y): hashed, constant over 2 x 2 squares (so that chroma subsampling
// keeps it).
std::uint8_t texture(std::int64_t x, std::int64_t y) {
  auto h = static_cast<std::uint32_t>(((x >> 1) + 1000) * 374761393u + ((y >> 1) + 1000) * 668265263u);
  h = (h ^ (h >> 13)) * 1274126177u;
  return static_cast<std::uint8_t>(40 + (h >> 24) % 176);
}

int video_frames(int argc, char** argv) {
  if (argc != 7) return 2;
  const std::string kind = argv[3];
  const std::int64_t frames = std::atoll(argv[4]), w = std::atoll(argv[5]), h = std::atoll(argv[6]);
  std::ofstream out(argv[2], std::ios::binary);
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w * h * 3));
  for (std::int64_t f = 0; f < frames; ++f) {
    const std::int64_t shift = kind == "shift" ? 2 * f : kind == "seam" ? 2 * f + (f >= frames / 2 ? 20 : 0) : 0;
    for (std::int64_t y = 0; y < h; ++y)
      for (std::int64_t x = 0; x < w; ++x) {
        const std::uint8_t v = kind == "flicker" ? (f % 2 ? 180 : 60) : texture(x - shift, y);
        for (int k = 0; k < 3; ++k) rgb[static_cast<std::size_t>((y * w + x) * 3 + k)] = v;
      }
    out.write(reinterpret_cast<const char*>(rgb.data()), static_cast<std::streamsize>(rgb.size()));
  }
  return out.good() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "compare") return compare(argc, argv, false);
    if (cmd == "compare-frames") return compare(argc, argv, true);
    if (cmd == "compare-relative") return compare_relative(argc, argv);
    if (cmd == "train-batch") return train_batch(argc, argv);
    if (cmd == "compare-adamw") return compare_adamw(argc, argv);
    if (cmd == "slice-frames") return slice_frames(argc, argv);
    if (cmd == "broken-models") return broken_models(argc, argv);
    if (cmd == "h5-compare") return h5_compare(argc, argv);
    if (cmd == "h5-check") return h5_check(argc, argv);
    if (cmd == "h5-diff") return h5_diff(argc, argv);
    if (cmd == "h5-vs-latents") return h5_vs_latents(argc, argv);
    if (cmd == "h5-vs-ref") return h5_vs_ref(argc, argv);
    if (cmd == "pick") return pick(argc, argv);
    if (cmd == "fifo-embeddings") return fifo_embeddings(argc, argv);
    if (cmd == "h5-flip") return h5_flip(argc, argv);
    if (cmd == "text-embeddings") return text_embeddings(argc, argv);
    if (cmd == "vae-old-names") return vae_old_names(argc, argv);
    if (cmd == "latents-h5") return latents_h5(argc, argv);
    if (cmd == "video-frames") return video_frames(argc, argv);
    if (cmd == "train-data") return train_data(argc, argv);
    std::cerr << "usage: vinf_test_tool "
                 "compare|compare-frames|compare-relative|compare-adamw|train-batch|slice-frames|broken-models|h5-"
                 "compare|h5-diff|h5-vs-latents|h5-vs-ref|fifo-embeddings|h5-check|h5-flip|text-embeddings|vae-old-"
                 "names|latents-h5|video-frames|train-data ...\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "vinf_test_tool: " << e.what() << "\n";
    return 1;
  }
}
