// The Hugging Face families' list (hf/families.cpp): every family names its classes, no class
// belongs to two, the "supported: ..." line and import-hf --help are that list, each class of
// the list is read by its own family, and an architecture no family reads is refused naming
// exactly that list.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "helpers.h"
#include "hf/family.h"
#include "hf/import.h"
#include "hf_helpers.h"
#include "util/error.h"

namespace ropelab::hf {
namespace {

TEST(HfFamilies, EachClassHasOneFamily) {
  std::set<std::string> seen;
  std::string joined;
  ASSERT_FALSE(families().empty());
  for (const Family* f : families()) {
    EXPECT_FALSE(f->classes.empty()) << f->name;
    EXPECT_NE(f->map, nullptr) << f->name;
    EXPECT_NE(f->mismatch, nullptr) << f->name;
    EXPECT_NE(f->write, nullptr) << f->name;
    EXPECT_TRUE(f->reads(f->export_class)) << f->name << ": exports a class it does not read";
    for (const auto& c : f->classes) {
      EXPECT_TRUE(seen.insert(c).second) << c << " is in two families";
      EXPECT_EQ(family_of(c), f) << c;
      joined += (joined.empty() ? "" : ", ") + c;
    }
  }
  EXPECT_EQ(supported_classes(), joined);
  EXPECT_EQ(family_of("T5ForConditionalGeneration"), nullptr);
}

TEST(HfFamilies, AnUnknownClassIsRefusedNamingTheList) {
  test::TempDir d;
  auto dir = test::damaged_copy(d, "bert-mlm", [](nlohmann::json& j) {
    j["architectures"] = {"T5ForConditionalGeneration"};
  });
  try {
    import_hf(dir, d.file("run"));
    FAIL() << "accepted";
  } catch (const UserError& e) {
    EXPECT_EQ(std::string(e.what()),
              dir +
                  "/config.json: architectures: T5ForConditionalGeneration is not "
                  "supported (supported: " +
                  supported_classes() + ")");
  }
}

TEST(HfFamilies, ImportHfHelpListsEveryClass) {
  const auto r = test::run(std::string(ROPELAB_BINARY_DIR) + "/bin/ropelab import-hf --help");
  ASSERT_EQ(r.code, 0) << r.out;
  std::string flat;
  for (char ch : r.out) flat += ch == '\n' ? ' ' : ch;
  for (const Family* f : families())
    for (const auto& c : f->classes) EXPECT_NE(flat.find(c), std::string::npos) << c;
}

}  // namespace
}  // namespace ropelab::hf
