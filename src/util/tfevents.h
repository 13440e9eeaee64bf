// TensorBoard event files (events.out.tfevents.*), written without TensorFlow or protoc.
//
// A file is a sequence of TFRecords: uint64 length, uint32 masked CRC-32C of the length, the
// data, uint32 masked CRC-32C of the data (little-endian; mask: rotate right 15, add
// 0xa282ead8). Each record's data is a serialized `tensorboard.Event` protobuf
// (tensorboard/compat/proto/event.proto, summary.proto, tensor.proto, types.proto; the hparams
// plugin's plugin_data.proto and api.proto). The first event of a file names its version,
// "brain.Event:2". Only the fields ropelab writes are encoded, by the small wire-format encoder
// `Proto` below (varint, 64-bit, length-delimited fields).
//
// What ropelab writes (docs/tensorboard.md):
//   scalars   a float64 TensorProto of shape [], plugin "scalars", data class SCALAR: TensorBoard
//             reads the value exactly as metrics.h5 holds it (a float32 simple_value would not);
//   text      a string TensorProto of shape [], plugin "text" (markdown);
//   hparams   the hparams plugin's session_start_info (the run's settings) and session_end_info;
//   restarts  a SessionLog START event at the step a resumed run continues from: TensorBoard then
//             drops what an earlier file logged at that step and after (the rows metrics.h5
//             dropped on resume).
#pragma once
#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace ropelab::tb {

// CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), continuing from `crc`.
uint32_t crc32c(std::string_view data, uint32_t crc = 0);
// The TFRecord mask of a CRC-32C.
uint32_t masked_crc32c(std::string_view data);
// One TFRecord: the framing around `data`.
std::string tfrecord(std::string_view data);

// A protobuf message being encoded, field by field, in the order called.
class Proto {
 public:
  Proto& varint(int field, uint64_t v);         // int32, int64, bool, enum
  Proto& float64(int field, double v);          // double (wire type 1)
  Proto& bytes(int field, std::string_view v);  // string, bytes (wire type 2)
  Proto& message(int field, const Proto& m);    // an embedded message
  const std::string& str() const { return buf_; }

 private:
  void key(int field, int wire_type);
  void raw_varint(uint64_t v);
  std::string buf_;
};

// An hparam's value: a number, a string or a bool (google.protobuf.Value's kinds).
using HParam = std::variant<double, std::string, bool>;

// Appends events to a new file in a directory. Each call writes whole records and flushes, so a
// reader (TensorBoard polls the directory) never sees half an event; a killed run leaves a file
// whose last record may be cut short, which TensorBoard skips.
class EventWriter {
 public:
  // Creates `dir` and a new event file in it, named after the current time; a file name later
  // than every event file already there, so TensorBoard reads a resumed run's files in order.
  // UserError naming the file when it cannot be written.
  explicit EventWriter(const std::string& dir);
  ~EventWriter();
  EventWriter(const EventWriter&) = delete;
  EventWriter& operator=(const EventWriter&) = delete;

  void scalar(const std::string& tag, int64_t step, double value);
  void text(const std::string& tag, int64_t step, const std::string& markdown);
  // The hparams plugin's session: the run's settings (TensorBoard's HPARAMS tab compares runs by
  // them), then, when the run has finished, its end.
  void hparams(const std::map<std::string, HParam>& values, const std::string& group);
  void session_end(bool success);
  // A resumed run continues at `step`: TensorBoard drops earlier files' events at `step` and
  // after. The first start of a run is written too (TensorBoard purges on the second one only).
  void session_start(int64_t step);
  const std::string& path() const { return path_; }
  // The wall time stamped on the next events; by default the clock's (tests fix it).
  void set_wall_time(double seconds) { fixed_time_ = seconds; }

 private:
  void write_event(int64_t step, int what_field, const Proto& what);
  void write_event(int64_t step, int what_field, std::string_view what);
  double now() const;
  std::string path_;
  FILE* f_ = nullptr;
  double fixed_time_ = -1;
};

// The event files of a directory in the order TensorBoard reads them (by name).
std::vector<std::string> event_files(const std::string& dir);

}  // namespace ropelab::tb
