// safetensors (hf/safetensors.h) against files from an independent Python writer
// (scripts/golden/safetensors_fixtures.py), and its strict refusal of malformed headers.
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "hf/safetensors.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {
namespace {

const std::string kSafetensorsDir = std::string(ROPELAB_SOURCE_DIR) + "/tests/data/safetensors";

// A tensor's values as doubles, decoded from its bytes.
std::vector<double> values(const TensorView& t) {
  std::vector<double> out;
  const int64_t n = t.numel();
  auto each = [&](auto type_tag) {
    using T = decltype(type_tag);
    for (int64_t i = 0; i < n; ++i) {
      T v;
      std::memcpy(&v, t.data + i * sizeof(T), sizeof(T));
      out.push_back(static_cast<double>(v));
    }
  };
  switch (t.dtype) {
    case DType::kF64:
      each(double{});
      break;
    case DType::kF32:
      each(float{});
      break;
    case DType::kI64:
      each(int64_t{});
      break;
    case DType::kI32:
      each(int32_t{});
      break;
    case DType::kI16:
      each(int16_t{});
      break;
    case DType::kI8:
      each(int8_t{});
      break;
    case DType::kU8:
      each(uint8_t{});
      break;
    case DType::kBool:
      each(uint8_t{});
      break;
    case DType::kF16:
    case DType::kBF16: {
      auto x = torch::from_blob(const_cast<uint8_t*>(t.data), {n},
                                t.dtype == DType::kF16 ? torch::kHalf : torch::kBFloat16)
                   .to(torch::kDouble);
      for (int64_t i = 0; i < n; ++i) out.push_back(x[i].item<double>());
      break;
    }
  }
  return out;
}

void expect_matches_python(const Checkpoint& c, const std::vector<std::string>& names) {
  auto expected = nlohmann::json::parse(fs::read_file(kSafetensorsDir + "/expected.json"));
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const auto& e = expected.at(name);
    const auto& t = c.get(name);
    EXPECT_EQ(to_string(t.dtype), e["dtype"].get<std::string>());
    EXPECT_EQ(t.shape, e["shape"].get<std::vector<int64_t>>());
    EXPECT_EQ(values(t), e["values"].get<std::vector<double>>());
  }
}

TEST(Safetensors, ReadsEveryDtypeAndTheMetadataOfAnIndependentWriter) {
  auto c = Checkpoint::open(kSafetensorsDir + "/single.safetensors");
  auto expected = nlohmann::json::parse(fs::read_file(kSafetensorsDir + "/expected.json"));
  std::vector<std::string> names;
  for (const auto& [name, e] : expected.items()) names.push_back(name);
  std::sort(names.begin(), names.end());
  EXPECT_EQ(c.names(), names);
  expect_matches_python(c, names);
  EXPECT_EQ(c.metadata().at("format"), "pt");
  EXPECT_EQ(c.metadata().at("note"), "ropelab fixture \xc3\xa9");
}

TEST(Safetensors, ReadsShardsThroughTheirIndexOrTheirDirectory) {
  for (const auto& path :
       {kSafetensorsDir + "/sharded", kSafetensorsDir + "/sharded/model.safetensors.index.json"}) {
    auto c = Checkpoint::open(path);
    EXPECT_EQ(c.names().size(), 6u);
    expect_matches_python(c, c.names());
    EXPECT_EQ(c.metadata().at("format"), "pt");
  }
}

TEST(Safetensors, WritesWhatAnIndependentReaderReads) {
  test::TempDir d;
  std::vector<float> w = {1.5f, -2.25f, 3.0f, 0.125f, 7.0f, -1.0f};
  std::vector<int64_t> ids = {3, -4, 1LL << 40};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc040};  // 1.0, -3.0
  std::vector<TensorOut> ts = {{"w", DType::kF32, {2, 3}, w.data()},
                               {"ids", DType::kI64, {3}, ids.data()},
                               {"h", DType::kBF16, {2}, bf16.data()},
                               {"none", DType::kF32, {0}, nullptr}};
  const std::string path = d.file("out.safetensors");
  write_file(path, ts, {{"format", "pt"}});
  std::string image = fs::read_file(path);
  uint64_t n = 0;
  std::memcpy(&n, image.data(), 8);
  EXPECT_EQ(n % 8, 0u) << "the header is padded so the data starts 8-byte aligned";
  auto r = test::run("/usr/bin/python3 " + std::string(ROPELAB_SOURCE_DIR) +
                     "/scripts/golden/safetensors_fixtures.py read " + path);
  ASSERT_EQ(r.code, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["w"], nlohmann::json::parse(R"(["F32", [2, 3], 8.375])"));
  EXPECT_EQ(j["ids"],
            nlohmann::json::parse("[\"I64\", [3], " + std::to_string(-1 + (1LL << 40)) + ".0]"));
  EXPECT_EQ(j["h"], nlohmann::json::parse(R"(["BF16", [2], -2.0])"));
  EXPECT_EQ(j["none"], nlohmann::json::parse(R"(["F32", [0], 0.0])"));
  // And back: the same tensors.
  auto c = Checkpoint::open(path);
  EXPECT_EQ(values(c.get("w")), std::vector<double>(w.begin(), w.end()));
  EXPECT_EQ(c.get("ids").shape, (std::vector<int64_t>{3}));
  EXPECT_EQ(c.metadata().at("format"), "pt");
}

// One valid image to damage: tensors a (F32 [2]) then b (I64 [1]).
std::string image_with_header(const std::string& header, size_t data_bytes = 16) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + std::string(data_bytes, '\x01');
}
const char* kGood = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                    R"("b":{"dtype":"I64","shape":[1],"data_offsets":[8,16]}})";

TEST(Safetensors, MalformedFilesAreRefusedWithOneClearLine) {
  auto good = image_with_header(kGood);
  EXPECT_EQ(parse(reinterpret_cast<const uint8_t*>(good.data()), good.size(), "x").tensors.size(),
            2u);
  std::string huge_len(8, '\0');
  huge_len[4] = 1;  // 2^32
  std::string past = good;
  past[0] = static_cast<char>(0xf0);
  struct Case {
    std::string image, expect;
  };
  const std::vector<Case> cases = {
      {"\x01\x02\x03", "3 bytes, shorter than the 8-byte header length"},
      {huge_len + "{}", "is over 100 MB"},
      {past, "runs past the end of the file"},
      {image_with_header("[1, 2]"), "the header is not a JSON object"},
      {image_with_header("{\"a\": tru"), "the header is not JSON"},
      {image_with_header(R"({"a":{"dtype":"F8","shape":[2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': dtype \"F8\" is not one of"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "tensor 'a': shape [3] of F32 needs 12 bytes, data_offsets [0, 8] hold 8"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "tensor 'a': shape [-2] has a non-natural size"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8),
       "tensor 'a': data_offsets [0, 16] run past the data (8 bytes)"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})"),
       "tensor 'b' (bytes 4..12) overlaps tensor 'a' (ending at 8)"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
       "a gap of 8 bytes before tensor 'a'"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 12),
       "4 bytes after the last tensor"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})"),
       "tensor 'a' appears twice in the header"},
      {image_with_header(R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],)"
                         R"("data_offsets":[0,8]}})",
                         8),
       "overflows"},
      {image_with_header("{\"a\":" + std::string(100000, '[')), "nests deeper"},
      {image_with_header(R"({"__metadata__":{"k":1}})", 0), "__metadata__ 'k' is not a string"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expect);
    try {
      parse(reinterpret_cast<const uint8_t*>(c.image.data()), c.image.size(), "bad.safetensors");
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      std::string msg = e.what();
      EXPECT_EQ(msg.rfind("bad.safetensors: not a valid safetensors file: ", 0), 0u) << msg;
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
  }
}

TEST(Safetensors, ABadIndexNamesTheShardAndTheTensor) {
  test::TempDir d;
  const std::string shard = kSafetensorsDir + "/sharded/model-00001-of-00002.safetensors";
  std::filesystem::copy_file(shard, d.file("a.safetensors"));
  auto refused = [&](const std::string& index, const std::string& expect) {
    test::write(d.file("model.safetensors.index.json"), index);
    try {
      Checkpoint::open(d.path());
      ADD_FAILURE() << "accepted " << index;
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    }
  };
  refused(R"({"weight_map": {"nope": "a.safetensors"}})",
          "lists tensor 'nope' in a.safetensors, which lacks it");
  refused(R"({"weight_map": {"embed.weight": "../a.safetensors"}})",
          "is not a file beside the index");
  refused(R"({"weight_map": {"embed.weight": "b.safetensors"}})", "b.safetensors: cannot open");
  refused(R"({"weights": {}})", "no \"weight_map\" object");
  refused("{", "model.safetensors.index.json: not JSON");
  EXPECT_THROW(Checkpoint::open(d.file("none")), UserError);
}

}  // namespace
}  // namespace ropelab::hf
