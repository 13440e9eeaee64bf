// TensorBoard event files: TFRecord framing and the Event/Summary protobufs (see tfevents.h).
#include "util/tfevents.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "util/error.h"
#include "util/fs.h"

namespace ropelab::tb {

namespace {

std::array<uint32_t, 256> make_crc_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1U) != 0 ? 0x82f63b78U ^ (c >> 1) : c >> 1;
    t[i] = c;
  }
  return t;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xffU));
}

// Field numbers of the protos written (event.proto, summary.proto, tensor.proto, types.proto,
// tensor_shape.proto, hparams plugin_data.proto and api.proto, struct.proto).
namespace f {
constexpr int kEventWallTime = 1, kEventStep = 2, kEventFileVersion = 3, kEventSummary = 5,
              kEventSessionLog = 7;
constexpr int kSummaryValue = 1;
constexpr int kValueTag = 1, kValueTensor = 8, kValueMetadata = 9;
constexpr int kMetaPluginData = 1, kMetaDataClass = 4;
constexpr int kPluginName = 1, kPluginContent = 2;
constexpr int kTensorDtype = 1, kTensorShape = 2, kTensorDoubleVal = 6, kTensorStringVal = 8;
constexpr int kShapeDim = 2;
constexpr int kHpVersion = 1, kHpSessionStart = 3, kHpSessionEnd = 4;
constexpr int kStartHparams = 1, kStartGroupName = 4, kStartTime = 5;
constexpr int kEndStatus = 1, kEndTime = 2;
constexpr int kMapKey = 1, kMapValue = 2;
constexpr int kNumberValue = 2, kStringValue = 3, kBoolValue = 4;
constexpr int kSessionLogStatus = 1;
}  // namespace f
constexpr int kDtFloat = 1, kDtDouble = 2, kDtString = 7;
constexpr int kDataClassScalar = 1, kDataClassTensor = 2;
constexpr int kSessionLogStart = 1;
constexpr int kStatusSuccess = 1, kStatusFailure = 2;

Proto plugin_metadata(const std::string& plugin, const std::string& content, int data_class) {
  Proto plugin_data;
  plugin_data.bytes(f::kPluginName, plugin);
  if (!content.empty()) plugin_data.bytes(f::kPluginContent, content);
  Proto m;
  m.message(f::kMetaPluginData, plugin_data);
  if (data_class != 0) m.varint(f::kMetaDataClass, static_cast<uint64_t>(data_class));
  return m;
}

Proto summary_of(const std::string& tag, const Proto& metadata, const Proto& tensor) {
  Proto value;
  value.bytes(f::kValueTag, tag)
      .message(f::kValueMetadata, metadata)
      .message(f::kValueTensor, tensor);
  Proto summary;
  summary.message(f::kSummaryValue, value);
  return summary;
}

// The hparams plugin's empty tensor: float32, shape [0].
Proto null_tensor() {
  Proto dim;  // size 0: the default, so no field
  Proto shape;
  shape.message(f::kShapeDim, dim);
  Proto t;
  t.varint(f::kTensorDtype, kDtFloat).message(f::kTensorShape, shape);
  return t;
}

// The hparams plugin's summary: HParamsPluginData (version 0) holding `part` in field `field`.
Proto hparams_summary(const std::string& tag, int field, const Proto& part) {
  Proto data;
  data.varint(f::kHpVersion, 0).message(field, part);
  return summary_of(tag, plugin_metadata("hparams", data.str(), kDataClassTensor), null_tensor());
}

Proto hparam_value(const HParam& v) {
  Proto p;
  if (const auto* d = std::get_if<double>(&v)) p.float64(f::kNumberValue, *d);
  if (const auto* s = std::get_if<std::string>(&v)) p.bytes(f::kStringValue, *s);
  if (const auto* b = std::get_if<bool>(&v)) p.varint(f::kBoolValue, *b ? 1 : 0);
  return p;
}

std::string le_double(double v) {
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  std::string out;
  put_le(out, bits, 8);
  return out;
}

const char* const kPrefix = "events.out.tfevents.";

// The seconds in an event file's name ("events.out.tfevents.<seconds>.<host>..."); -1 if none.
int64_t name_seconds(const std::string& name) {
  if (name.rfind(kPrefix, 0) != 0) return -1;
  const char* p = name.c_str() + std::strlen(kPrefix);
  char* end = nullptr;
  long long s = std::strtoll(p, &end, 10);
  return end != p ? static_cast<int64_t>(s) : -1;
}

}  // namespace

uint32_t crc32c(std::string_view data, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_crc_table();
  crc = ~crc;
  for (char ch : data) crc = table[(crc ^ static_cast<uint8_t>(ch)) & 0xffU] ^ (crc >> 8);
  return ~crc;
}

uint32_t masked_crc32c(std::string_view data) {
  uint32_t c = crc32c(data);
  return ((c >> 15) | (c << 17)) + 0xa282ead8U;
}

std::string tfrecord(std::string_view data) {
  std::string len;
  put_le(len, data.size(), 8);
  std::string out = len;
  put_le(out, masked_crc32c(len), 4);
  out.append(data);
  put_le(out, masked_crc32c(data), 4);
  return out;
}

void Proto::raw_varint(uint64_t v) {
  while (v >= 0x80) {
    buf_.push_back(static_cast<char>((v & 0x7fU) | 0x80U));
    v >>= 7;
  }
  buf_.push_back(static_cast<char>(v));
}

void Proto::key(int field, int wire_type) {
  raw_varint((static_cast<uint64_t>(field) << 3) | static_cast<uint64_t>(wire_type));
}

Proto& Proto::varint(int field, uint64_t v) {
  key(field, 0);
  raw_varint(v);
  return *this;
}

Proto& Proto::float64(int field, double v) {
  key(field, 1);
  buf_ += le_double(v);
  return *this;
}

Proto& Proto::bytes(int field, std::string_view v) {
  key(field, 2);
  raw_varint(v.size());
  buf_.append(v);
  return *this;
}

Proto& Proto::message(int field, const Proto& m) { return bytes(field, m.str()); }

std::vector<std::string> event_files(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string name = e.path().filename().string();
    if (name.rfind(kPrefix, 0) == 0 && e.is_regular_file()) out.push_back(e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

EventWriter::EventWriter(const std::string& dir) {
  fs::make_dirs(dir);
  auto secs = static_cast<int64_t>(now());
  for (const auto& p : event_files(dir))
    secs = std::max(secs, name_seconds(std::filesystem::path(p).filename().string()) + 1);
  std::array<char, 256> host{};
  if (gethostname(host.data(), host.size() - 1) != 0) std::strcpy(host.data(), "localhost");
  std::array<char, 32> num{};
  std::snprintf(num.data(), num.size(), "%010lld", static_cast<long long>(secs));
  path_ = dir + "/" + kPrefix + num.data() + "." + host.data() + "." + std::to_string(getpid()) +
          ".0.ropelab";
  f_ = std::fopen(path_.c_str(), "wbx");
  if (f_ == nullptr)
    throw UserError(path_ + ": cannot create the TensorBoard event file: " + std::strerror(errno));
  write_event(0, f::kEventFileVersion, std::string_view("brain.Event:2"));
}

EventWriter::~EventWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

double EventWriter::now() const {
  if (fixed_time_ >= 0) return fixed_time_;
  using namespace std::chrono;
  return duration<double>(system_clock::now().time_since_epoch()).count();
}

void EventWriter::write_event(int64_t step, int what_field, std::string_view what) {
  Proto e;
  e.float64(f::kEventWallTime, now()).varint(f::kEventStep, static_cast<uint64_t>(step));
  e.bytes(what_field, what);
  std::string rec = tfrecord(e.str());
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size() || std::fflush(f_) != 0)
    throw UserError(path_ + ": cannot write the TensorBoard event file: " + std::strerror(errno));
}

void EventWriter::write_event(int64_t step, int what_field, const Proto& what) {
  write_event(step, what_field, std::string_view(what.str()));
}

void EventWriter::scalar(const std::string& tag, int64_t step, double value) {
  Proto tensor;
  tensor.varint(f::kTensorDtype, kDtDouble).message(f::kTensorShape, Proto());
  tensor.bytes(f::kTensorDoubleVal, le_double(value));  // packed: one double
  write_event(step, f::kEventSummary,
              summary_of(tag, plugin_metadata("scalars", "", kDataClassScalar), tensor));
}

void EventWriter::text(const std::string& tag, int64_t step, const std::string& markdown) {
  Proto tensor;
  tensor.varint(f::kTensorDtype, kDtString).message(f::kTensorShape, Proto());
  tensor.bytes(f::kTensorStringVal, markdown);
  write_event(step, f::kEventSummary,
              summary_of(tag, plugin_metadata("text", "", kDataClassTensor), tensor));
}

void EventWriter::hparams(const std::map<std::string, HParam>& values, const std::string& group) {
  Proto start;
  for (const auto& [name, v] : values) {
    Proto entry;
    entry.bytes(f::kMapKey, name).message(f::kMapValue, hparam_value(v));
    start.message(f::kStartHparams, entry);
  }
  if (!group.empty()) start.bytes(f::kStartGroupName, group);
  start.float64(f::kStartTime, std::floor(now()));
  write_event(0, f::kEventSummary,
              hparams_summary("_hparams_/session_start_info", f::kHpSessionStart, start));
}

void EventWriter::session_end(bool success) {
  Proto end;
  end.varint(f::kEndStatus, success ? kStatusSuccess : kStatusFailure);
  end.float64(f::kEndTime, std::floor(now()));
  write_event(0, f::kEventSummary,
              hparams_summary("_hparams_/session_end_info", f::kHpSessionEnd, end));
}

void EventWriter::session_start(int64_t step) {
  Proto log;
  log.varint(f::kSessionLogStatus, kSessionLogStart);
  write_event(step, f::kEventSessionLog, log);
}

}  // namespace ropelab::tb
