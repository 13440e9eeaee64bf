#include "util/h5.h"

#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "util/error.h"

namespace ropelab::h5 {

void quiet() {
  static bool done = [] {
    H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
    return true;
  }();
  (void)done;
}

void no_cleanup_at_exit() { H5dont_atexit(); }

namespace {
void check(herr_t r, const std::string& what) {
  if (r < 0) throw UserError(what);
}
hid_t checked(hid_t id, const std::string& what) {
  if (id < 0) throw UserError(what);
  return id;
}

template <class T>
void write_vec(hid_t parent, const std::string& name, const std::vector<T>& v, hid_t mem_type,
               hid_t file_type) {
  quiet();
  hsize_t n = v.size();
  Handle space(checked(H5Screate_simple(1, &n, nullptr), "HDF5: dataspace"), H5Sclose);
  Handle plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  if (n > 0) {
    hsize_t chunk = std::min<hsize_t>(n, 1 << 16);
    H5Pset_chunk(plist.id(), 1, &chunk);
  }
  Handle ds(checked(H5Dcreate2(parent, name.c_str(), file_type, space.id(), H5P_DEFAULT, plist.id(),
                               H5P_DEFAULT),
                    "HDF5: cannot create dataset " + name),
            H5Dclose);
  if (n > 0)
    check(H5Dwrite(ds.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
          "HDF5: cannot write dataset " + name);
}

template <class T>
std::vector<T> read_vec(hid_t parent, const std::string& name, hid_t mem_type,
                        const std::string& file, bool any_rank = false) {
  quiet();
  if (!exists(parent, name)) throw UserError(file + ": missing dataset '" + name + "'");
  Handle ds(checked(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), file + ": cannot open " + name),
            H5Dclose);
  Handle space(H5Dget_space(ds.id()), H5Sclose);
  hsize_t n = 0;
  if (any_rank) {
    hssize_t points = H5Sget_simple_extent_npoints(space.id());
    n = points > 0 ? static_cast<hsize_t>(points) : 0;
  } else {
    if (H5Sget_simple_extent_ndims(space.id()) != 1)
      throw UserError(file + ": dataset '" + name + "' is not 1-D");
    H5Sget_simple_extent_dims(space.id(), &n, nullptr);
  }
  std::vector<T> v(n);
  if (n > 0)
    check(H5Dread(ds.id(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, v.data()),
          file + ": cannot read dataset '" + name + "' (truncated or damaged file?)");
  return v;
}
}  // namespace

Handle create_file(const std::string& path) {
  quiet();
  return Handle(checked(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                        path + ": cannot create HDF5 file"),
                H5Fclose);
}

Handle open_file(const std::string& path, bool writable) {
  quiet();
  if (!std::filesystem::exists(path)) throw UserError(path + ": no such file");
  if (H5Fis_hdf5(path.c_str()) <= 0)
    throw UserError(path + ": not an HDF5 file (truncated, or some other format)");
  hid_t id = H5Fopen(path.c_str(), writable ? H5F_ACC_RDWR : H5F_ACC_RDONLY, H5P_DEFAULT);
  return Handle(checked(id, path + ": cannot open HDF5 file (truncated or damaged?)"), H5Fclose);
}

Handle create_group(hid_t parent, const std::string& name, const std::string& file) {
  return Handle(checked(H5Gcreate2(parent, name.c_str(), H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT),
                        file + ": cannot create group " + name),
                H5Gclose);
}

bool exists(hid_t parent, const std::string& name) {
  quiet();
  return H5Lexists(parent, name.c_str(), H5P_DEFAULT) > 0;
}

void set_attr(hid_t obj, const std::string& name, const std::string& value) {
  Handle type(H5Tcopy(H5T_C_S1), H5Tclose);
  H5Tset_size(type.id(), std::max<size_t>(1, value.size()));
  H5Tset_cset(type.id(), H5T_CSET_UTF8);
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle a(checked(H5Acreate2(obj, name.c_str(), type.id(), space.id(), H5P_DEFAULT, H5P_DEFAULT),
                   "HDF5: cannot create attribute " + name),
           H5Aclose);
  std::string padded = value.empty() ? std::string(1, '\0') : value;
  check(H5Awrite(a.id(), type.id(), padded.data()), "HDF5: cannot write attribute " + name);
}

void set_attr(hid_t obj, const std::string& name, int64_t value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle a(H5Acreate2(obj, name.c_str(), H5T_STD_I64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  check(H5Awrite(a.id(), H5T_NATIVE_INT64, &value), "HDF5: cannot write attribute " + name);
}

void set_attr(hid_t obj, const std::string& name, double value) {
  Handle space(H5Screate(H5S_SCALAR), H5Sclose);
  if (H5Aexists(obj, name.c_str()) > 0) H5Adelete(obj, name.c_str());
  Handle a(H5Acreate2(obj, name.c_str(), H5T_IEEE_F64LE, space.id(), H5P_DEFAULT, H5P_DEFAULT),
           H5Aclose);
  check(H5Awrite(a.id(), H5T_NATIVE_DOUBLE, &value), "HDF5: cannot write attribute " + name);
}

bool has_attr(hid_t obj, const std::string& name) {
  quiet();
  return H5Aexists(obj, name.c_str()) > 0;
}

std::string get_attr_str(hid_t obj, const std::string& name, const std::string& file) {
  quiet();
  if (!has_attr(obj, name)) throw UserError(file + ": missing attribute '" + name + "'");
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  Handle type(H5Aget_type(a.id()), H5Tclose);
  if (H5Tget_class(type.id()) != H5T_STRING)
    throw UserError(file + ": attribute '" + name + "' is not a string");
  if (H5Tis_variable_str(type.id()) > 0) {
    char* s = nullptr;
    Handle mem(H5Tcopy(H5T_C_S1), H5Tclose);
    H5Tset_size(mem.id(), H5T_VARIABLE);
    H5Tset_cset(mem.id(), H5Tget_cset(type.id()));  // h5py writes UTF-8
    check(H5Aread(a.id(), mem.id(), &s), file + ": cannot read attribute " + name);
    std::string out = s != nullptr ? s : "";
    H5free_memory(s);
    return out;
  }
  size_t n = H5Tget_size(type.id());
  std::string out(n, '\0');
  check(H5Aread(a.id(), type.id(), out.data()), file + ": cannot read attribute " + name);
  out.resize(std::strlen(out.c_str()));
  return out;
}

int64_t get_attr_int(hid_t obj, const std::string& name, const std::string& file) {
  quiet();
  if (!has_attr(obj, name)) throw UserError(file + ": missing attribute '" + name + "'");
  Handle a(H5Aopen(obj, name.c_str(), H5P_DEFAULT), H5Aclose);
  int64_t v = 0;
  check(H5Aread(a.id(), H5T_NATIVE_INT64, &v),
        file + ": attribute '" + name + "' is not an integer");
  return v;
}

void write_i32(hid_t p, const std::string& n, const std::vector<int32_t>& v) {
  write_vec(p, n, v, H5T_NATIVE_INT32, H5T_STD_I32LE);
}
void write_i64(hid_t p, const std::string& n, const std::vector<int64_t>& v) {
  write_vec(p, n, v, H5T_NATIVE_INT64, H5T_STD_I64LE);
}
void write_f32(hid_t p, const std::string& n, const std::vector<float>& v) {
  write_vec(p, n, v, H5T_NATIVE_FLOAT, H5T_IEEE_F32LE);
}
void write_f32_nd(hid_t parent, const std::string& path, const float* data,
                  const std::vector<hsize_t>& dims) {
  quiet();
  Handle space(
      checked(dims.empty() ? H5Screate(H5S_SCALAR)
                           : H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr),
              "HDF5: dataspace"),
      H5Sclose);
  Handle lcpl(H5Pcreate(H5P_LINK_CREATE), H5Pclose);
  H5Pset_create_intermediate_group(lcpl.id(), 1);
  Handle ds(checked(H5Dcreate2(parent, path.c_str(), H5T_IEEE_F32LE, space.id(), lcpl.id(),
                               H5P_DEFAULT, H5P_DEFAULT),
                    "HDF5: cannot create dataset " + path),
            H5Dclose);
  check(H5Dwrite(ds.id(), H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, data),
        "HDF5: cannot write dataset " + path);
}

Contiguous::Contiguous(hid_t parent, const std::string& name, hid_t file_type, int64_t n)
    : name_(name), n_(n) {
  quiet();
  hsize_t dim = static_cast<hsize_t>(n);
  Handle space(checked(H5Screate_simple(1, &dim, nullptr), "HDF5: dataspace"), H5Sclose);
  Handle plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_layout(plist.id(), H5D_CONTIGUOUS);
  H5Pset_alloc_time(plist.id(), H5D_ALLOC_TIME_EARLY);  // the offset exists even when empty
  ds_ = Handle(checked(H5Dcreate2(parent, name.c_str(), file_type, space.id(), H5P_DEFAULT,
                                  plist.id(), H5P_DEFAULT),
                       "HDF5: cannot create dataset " + name),
               H5Dclose);
}

void Contiguous::write(int64_t at, int64_t count, hid_t mem_type, const void* data) {
  if (count <= 0) return;
  if (at < 0 || at + count > n_) throw std::logic_error("h5::Contiguous::write past the end");
  hsize_t start = static_cast<hsize_t>(at), cnt = static_cast<hsize_t>(count);
  Handle fspace(H5Dget_space(ds_.id()), H5Sclose);
  H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, &start, nullptr, &cnt, nullptr);
  Handle mspace(checked(H5Screate_simple(1, &cnt, nullptr), "HDF5: dataspace"), H5Sclose);
  check(H5Dwrite(ds_.id(), mem_type, mspace.id(), fspace.id(), H5P_DEFAULT, data),
        "HDF5: cannot write dataset " + name_);
}

RawLayout raw_layout(hid_t parent, const std::string& name, const std::string& file) {
  quiet();
  RawLayout r;
  if (!exists(parent, name)) throw UserError(file + ": missing dataset '" + name + "'");
  Handle ds(checked(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), file + ": cannot open " + name),
            H5Dclose);
  Handle space(H5Dget_space(ds.id()), H5Sclose);
  if (H5Sget_simple_extent_ndims(space.id()) != 1) return r;
  hsize_t n = 0;
  H5Sget_simple_extent_dims(space.id(), &n, nullptr);
  r.count = static_cast<int64_t>(n);
  Handle type(H5Dget_type(ds.id()), H5Tclose);
  r.integer = H5Tget_class(type.id()) == H5T_INTEGER;
  r.size = static_cast<int>(H5Tget_size(type.id()));
  r.is_signed = H5Tget_sign(type.id()) == H5T_SGN_2;
  r.little_endian = H5Tget_order(type.id()) == H5T_ORDER_LE;
  Handle plist(H5Dget_create_plist(ds.id()), H5Pclose);
  if (H5Pget_layout(plist.id()) != H5D_CONTIGUOUS || H5Pget_nfilters(plist.id()) > 0) return r;
  haddr_t at = H5Dget_offset(ds.id());
  if (at != HADDR_UNDEF) r.offset = static_cast<int64_t>(at);
  return r;
}

std::vector<int32_t> read_i32(hid_t p, const std::string& n, const std::string& f) {
  return read_vec<int32_t>(p, n, H5T_NATIVE_INT32, f);
}
std::vector<int64_t> read_i64(hid_t p, const std::string& n, const std::string& f) {
  return read_vec<int64_t>(p, n, H5T_NATIVE_INT64, f);
}
std::vector<float> read_f32(hid_t p, const std::string& n, const std::string& f) {
  return read_vec<float>(p, n, H5T_NATIVE_FLOAT, f);
}
std::vector<float> read_f32_flat(hid_t p, const std::string& n, const std::string& f) {
  return read_vec<float>(p, n, H5T_NATIVE_FLOAT, f, /*any_rank=*/true);
}
std::vector<int64_t> read_i64_flat(hid_t p, const std::string& n, const std::string& f) {
  return read_vec<int64_t>(p, n, H5T_NATIVE_INT64, f, /*any_rank=*/true);
}
std::vector<double> read_f64(hid_t p, const std::string& n, const std::string& f) {
  return read_vec<double>(p, n, H5T_NATIVE_DOUBLE, f);
}

namespace {
// The one HDF5 call whose signature differs between the releases ropelab supports: visiting
// objects is H5Ovisit2 in 1.10 (Debian 12) and H5Ovisit3 from 1.12 on (Debian 13 has 1.14).
// H5O_info_t names the matching info struct in each.
herr_t collect_dataset(hid_t, const char* name, const H5O_info_t* info, void* out) {
  if (info->type == H5O_TYPE_DATASET)
    static_cast<std::vector<std::string>*>(out)->emplace_back(name);
  return 0;
}
}  // namespace

std::vector<std::string> dataset_paths(hid_t file) {
  quiet();
  std::vector<std::string> out;
#if H5_VERSION_GE(1, 12, 0)
  herr_t rc = H5Ovisit3(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &out, H5O_INFO_BASIC);
#else
  herr_t rc = H5Ovisit2(file, H5_INDEX_NAME, H5_ITER_INC, collect_dataset, &out, H5O_INFO_BASIC);
#endif
  check(rc, "HDF5: cannot list the datasets");
  return out;
}

std::vector<int64_t> dataset_shape(hid_t parent, const std::string& name, const std::string& file) {
  quiet();
  Handle ds(checked(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), file + ": no dataset " + name),
            H5Dclose);
  Handle space(H5Dget_space(ds.id()), H5Sclose);
  int rank = H5Sget_simple_extent_ndims(space.id());
  std::vector<hsize_t> dims(static_cast<size_t>(std::max(rank, 0)));
  if (rank > 0) H5Sget_simple_extent_dims(space.id(), dims.data(), nullptr);
  return {dims.begin(), dims.end()};
}

bool looks_like_hdf5(const std::string& path) {
  quiet();
  return H5Fis_hdf5(path.c_str()) > 0;
}

Series::Series(hid_t parent, const std::string& name) {
  quiet();
  if (exists(parent, name)) {
    ds_ = Handle(H5Dopen2(parent, name.c_str(), H5P_DEFAULT), H5Dclose);
    Handle space(H5Dget_space(ds_.id()), H5Sclose);
    hsize_t n = 0;
    H5Sget_simple_extent_dims(space.id(), &n, nullptr);
    size_ = static_cast<int64_t>(n);
    return;
  }
  hsize_t zero = 0, unlimited = H5S_UNLIMITED, chunk = 256;
  Handle space(H5Screate_simple(1, &zero, &unlimited), H5Sclose);
  Handle plist(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
  H5Pset_chunk(plist.id(), 1, &chunk);
  ds_ = Handle(checked(H5Dcreate2(parent, name.c_str(), H5T_IEEE_F64LE, space.id(), H5P_DEFAULT,
                                  plist.id(), H5P_DEFAULT),
                       "HDF5: cannot create series " + name),
               H5Dclose);
}

void Series::append(double v) {
  hsize_t n = static_cast<hsize_t>(size_) + 1, start = static_cast<hsize_t>(size_), one = 1;
  check(H5Dset_extent(ds_.id(), &n), "HDF5: cannot extend series");
  Handle fspace(H5Dget_space(ds_.id()), H5Sclose);
  H5Sselect_hyperslab(fspace.id(), H5S_SELECT_SET, &start, nullptr, &one, nullptr);
  Handle mspace(H5Screate_simple(1, &one, nullptr), H5Sclose);
  check(H5Dwrite(ds_.id(), H5T_NATIVE_DOUBLE, mspace.id(), fspace.id(), H5P_DEFAULT, &v),
        "HDF5: cannot append to series");
  ++size_;
}

}  // namespace ropelab::h5
