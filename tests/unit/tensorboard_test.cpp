// TensorBoard event files (util/tfevents.h): CRC-32C against its published check value, the
// protobuf wire format against the protobuf documentation's examples, the TFRecord framing, and
// the writer's file naming. The files' content is read back by an independent reader in
// tests/e2e/tensorboard.sh.
#include <gtest/gtest.h>

#include <unistd.h>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "run/tensorboard.h"
#include "util/tfevents.h"

namespace ropelab {
namespace {

std::string hex(const std::string& s) {
  std::string out;
  char buf[4];
  for (unsigned char c : s) {
    std::snprintf(buf, sizeof buf, "%02x", c);
    out += buf;
  }
  return out;
}

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

TEST(TfEvents, Crc32cCheckValues) {
  // The CRC catalogue's check value of CRC-32C, and RFC 3720's 32 bytes of zeros and of 0xff.
  EXPECT_EQ(tb::crc32c("123456789"), 0xe3069283U);
  EXPECT_EQ(tb::crc32c(std::string(32, '\0')), 0x8a9136aaU);
  EXPECT_EQ(tb::crc32c(std::string(32, '\xff')), 0x62a8ab43U);
  EXPECT_EQ(tb::crc32c(""), 0U);
  // In pieces: the same value.
  EXPECT_EQ(tb::crc32c("6789", tb::crc32c("12345")), 0xe3069283U);
  EXPECT_EQ(tb::masked_crc32c(""), 0xa282ead8U);
}

TEST(TfEvents, ProtoWireFormat) {
  // The protobuf encoding guide's examples: field 1 = 150, field 2 = "testing".
  EXPECT_EQ(hex(tb::Proto().varint(1, 150).str()), "089601");
  EXPECT_EQ(hex(tb::Proto().bytes(2, "testing").str()), "120774657374696e67");
  tb::Proto inner;
  inner.varint(1, 150);
  EXPECT_EQ(hex(tb::Proto().message(3, inner).str()), "1a03089601");
  // A double: wire type 1, 8 little-endian bytes (1.0 = 0x3ff0000000000000).
  EXPECT_EQ(hex(tb::Proto().float64(1, 1.0).str()), "09000000000000f03f");
  // A negative int64 takes ten bytes.
  EXPECT_EQ(tb::Proto().varint(2, static_cast<uint64_t>(int64_t{-1})).str().size(), 11U);
}

TEST(TfEvents, RecordFraming) {
  std::string r = tb::tfrecord("abc");
  ASSERT_EQ(r.size(), 8U + 4U + 3U + 4U);
  EXPECT_EQ(hex(r.substr(0, 8)), "0300000000000000");
  uint32_t len_crc = 0, data_crc = 0;
  std::memcpy(&len_crc, r.data() + 8, 4);
  std::memcpy(&data_crc, r.data() + 15, 4);
  EXPECT_EQ(len_crc, tb::masked_crc32c(r.substr(0, 8)));
  EXPECT_EQ(data_crc, tb::masked_crc32c("abc"));
  EXPECT_EQ(r.substr(12, 3), "abc");
}

TEST(TfEvents, FilesSortAfterEarlierOnes) {
  namespace stdfs = std::filesystem;
  const auto dir = stdfs::temp_directory_path() / ("ropelab-tb-" + std::to_string(::getpid()));
  stdfs::remove_all(dir);
  stdfs::create_directories(dir);
  // An earlier file from the future (a clock set back, or a resume within the same second).
  std::ofstream(dir / "events.out.tfevents.9999999990.host.1.0.ropelab").put('x');
  std::string second;
  {
    tb::EventWriter w(dir.string());
    w.set_wall_time(1.5);
    w.scalar("train/loss", 3, 0.25);
    second = w.path();
  }
  auto files = tb::event_files(dir.string());
  ASSERT_EQ(files.size(), 2U);
  EXPECT_EQ(files[1], second);
  EXPECT_NE(second.find("events.out.tfevents.9999999991."), std::string::npos);
  // The first record is the file version; each record's CRCs hold.
  std::string bytes = slurp(second);
  size_t pos = 0;
  int records = 0;
  while (pos < bytes.size()) {
    uint64_t n = 0;
    std::memcpy(&n, bytes.data() + pos, 8);
    ASSERT_LE(pos + 16 + n, bytes.size());
    uint32_t crc = 0;
    std::memcpy(&crc, bytes.data() + pos + 12 + n, 4);
    EXPECT_EQ(crc, tb::masked_crc32c(bytes.substr(pos + 12, n)));
    if (records == 0) {
      EXPECT_NE(bytes.substr(pos + 12, n).find("brain.Event:2"), std::string::npos);
    }
    pos += 16 + n;
    ++records;
  }
  EXPECT_EQ(records, 2);
  stdfs::remove_all(dir);
}

TEST(TfEvents, HparamsOfAConfig) {
  auto hp = run::hparams_of(
      "run: {name: a, seed: 3}\nmodel: {position: {type: rope}, tied: true}\n"
      "layers: [1, 2]\n");
  EXPECT_EQ(std::get<std::string>(hp.at("run.name")), "a");
  EXPECT_EQ(std::get<double>(hp.at("run.seed")), 3.0);
  EXPECT_EQ(std::get<std::string>(hp.at("model.position.type")), "rope");
  EXPECT_TRUE(std::get<bool>(hp.at("model.tied")));
  EXPECT_EQ(std::get<std::string>(hp.at("layers")), "[1, 2]");
}

}  // namespace
}  // namespace ropelab
