// The checkpoint manifest parser: what a save writes parses back, and each kind of damage is
// named (the fuzz target tests/fuzz/fuzz_manifest.cpp runs it on arbitrary bytes).
#include <gtest/gtest.h>

#include "util/error.h"
#include "weights/manifest.h"

namespace ropelab::train {
namespace {

std::string why(const std::string& text) {
  try {
    weights::parse_manifest(text);
  } catch (const UserError& e) {
    return e.what();
  }
  return "";
}

TEST(Manifest, RoundTripsAndNamesEachProblem) {
  weights::Manifest m{42, {{"model.pt", "0123456789abcdef"}, {"state.json", "fedcba9876543210"}}};
  auto back = weights::parse_manifest(manifest_json(m));
  EXPECT_EQ(back.step, 42);
  EXPECT_EQ(back.files, m.files);
  const std::string ok_files =
      R"("model.pt": "0000000000000000", "state.json": "1111111111111111")";
  EXPECT_EQ(why("{\"step\": 3, \"files\": {" + ok_files + "}}"), "");
  EXPECT_EQ(why("{\"step\": 3, \"files\": {"), "MANIFEST.json is not valid JSON");
  EXPECT_EQ(why("[1, 2]"), "MANIFEST.json is not a JSON object");
  EXPECT_EQ(why("{\"step\": -1, \"files\": {" + ok_files + "}}"),
            "MANIFEST.json has no step (an integer >= 0)");
  EXPECT_EQ(why("{\"step\": 1.5, \"files\": {" + ok_files + "}}"),
            "MANIFEST.json has no step (an integer >= 0)");
  EXPECT_EQ(why("{\"step\": 1, \"files\": []}"), "MANIFEST.json has no files object");
  // A manifest must not make verification read files outside its checkpoint directory.
  EXPECT_EQ(why("{\"step\": 1, \"files\": {" + ok_files + ", \"../../x\": \"0000000000000000\"}}"),
            "MANIFEST.json names '../../x', which is not a plain file name");
  EXPECT_EQ(why("{\"step\": 1, \"files\": {" + ok_files + ", \"..\": \"0000000000000000\"}}"),
            "MANIFEST.json names '..', which is not a plain file name");
  EXPECT_EQ(why(R"({"step": 1, "files": {"model.pt": "00", "state.json": "1111111111111111"}})"),
            "MANIFEST.json: the checksum of model.pt is not 16 hex digits");
  EXPECT_EQ(why(R"({"step": 1, "files": {"model.pt": "0000000000000000"}})"),
            "MANIFEST.json does not list state.json");
}

}  // namespace
}  // namespace ropelab::train
