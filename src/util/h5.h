// Thin RAII helpers over the HDF5 C API (no HighFive in Debian bookworm): files, groups,
// string/number attributes, whole 1-D datasets and extendible (appendable) 1-D series.
// HDF5's own error stack printing is switched off; failures throw UserError naming the file.
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::h5 {

class Handle {
 public:
  Handle() = default;
  Handle(hid_t id, herr_t (*closer)(hid_t)) : id_(id), close_(closer) {}
  ~Handle() { reset(); }
  Handle(Handle&& o) noexcept : id_(o.id_), close_(o.close_) { o.id_ = -1; }
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      id_ = o.id_, close_ = o.close_, o.id_ = -1;
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  hid_t id() const { return id_; }
  bool valid() const { return id_ >= 0; }
  void reset() {
    if (id_ >= 0 && close_ != nullptr) close_(id_);
    id_ = -1;
  }

 private:
  hid_t id_ = -1;
  herr_t (*close_)(hid_t) = nullptr;
};

void quiet();  // turn off HDF5's automatic error printing (idempotent)
// Call first in main: skips HDF5's exit-time cleanup. Every file is closed by its Handle; the
// library's own cleanup at exit crashes (HDF5 1.10, SIGSEGV in H5F__close_cb) on a file whose
// close failed after a write error (full disk, file-size limit), which would turn a clean
// error into a segfault.
void no_cleanup_at_exit();

Handle create_file(const std::string& path);               // truncates
Handle open_file(const std::string& path, bool writable);  // UserError if not HDF5
bool looks_like_hdf5(const std::string& path);             // an HDF5 signature at the start
Handle create_group(hid_t parent, const std::string& name, const std::string& file);
bool exists(hid_t parent, const std::string& name);

void set_attr(hid_t obj, const std::string& name, const std::string& value);
void set_attr(hid_t obj, const std::string& name, int64_t value);
void set_attr(hid_t obj, const std::string& name, double value);
bool has_attr(hid_t obj, const std::string& name);
std::string get_attr_str(hid_t obj, const std::string& name, const std::string& file);
int64_t get_attr_int(hid_t obj, const std::string& name, const std::string& file);

// Whole 1-D datasets.
void write_i32(hid_t parent, const std::string& name, const std::vector<int32_t>& v);
void write_i64(hid_t parent, const std::string& name, const std::vector<int64_t>& v);
void write_f32(hid_t parent, const std::string& name, const std::vector<float>& v);
// An N-D float32 dataset at a slash-separated path; missing groups are created.
void write_f32_nd(hid_t parent, const std::string& path, const float* data,
                  const std::vector<hsize_t>& dims);
std::vector<int32_t> read_i32(hid_t parent, const std::string& name, const std::string& file);
std::vector<int64_t> read_i64(hid_t parent, const std::string& name, const std::string& file);
std::vector<float> read_f32(hid_t parent, const std::string& name, const std::string& file);
std::vector<double> read_f64(hid_t parent, const std::string& name, const std::string& file);
// Every element of a dataset of any rank, in row-major order (see dataset_shape).
std::vector<float> read_f32_flat(hid_t parent, const std::string& name, const std::string& file);
std::vector<int64_t> read_i64_flat(hid_t parent, const std::string& name, const std::string& file);
// Paths of every dataset below `file`'s root ("a/b/c"), and a dataset's shape.
std::vector<std::string> dataset_paths(hid_t file);
std::vector<int64_t> dataset_shape(hid_t parent, const std::string& name, const std::string& file);

// A contiguous (unchunked, uncompressed) 1-D dataset of n elements, written in pieces, so that
// a reader can memory-map its elements where they lie in the file (raw_layout).
class Contiguous {
 public:
  Contiguous(hid_t parent, const std::string& name, hid_t file_type, int64_t n);
  // Elements [at, at + count) from `data`, of memory type `mem_type` (converted as HDF5 does).
  void write(int64_t at, int64_t count, hid_t mem_type, const void* data);

 private:
  Handle ds_;
  std::string name_;
  int64_t n_;
};

// Where a 1-D integer dataset's elements lie in its file: offset -1 when they cannot be mapped
// (chunked, compressed, or never written), else the byte offset of element 0.
struct RawLayout {
  int64_t offset = -1;
  int64_t count = 0;
  int size = 0;  // bytes an element
  bool is_signed = false, little_endian = false, integer = false;
};
RawLayout raw_layout(hid_t parent, const std::string& name, const std::string& file);

// An extendible, chunked 1-D float64 dataset that grows by appends (metrics series).
class Series {
 public:
  Series(hid_t parent, const std::string& name);
  void append(double v);
  int64_t size() const { return size_; }

 private:
  Handle ds_;
  int64_t size_ = 0;
};

}  // namespace ropelab::h5
