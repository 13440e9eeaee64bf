// The list of Hugging Face families (hf/family.h): import, export, `import-hf --help` and the
// "supported: ..." line all read it. A new family: its file with its record, and one line here.
#include <algorithm>

#include "hf/family.h"
#include "hf/import.h"

namespace ropelab::hf {

// Each family's record, defined in its file.
const Family& bert_family();      // hf/bert.cpp
const Family& roformer_family();  // hf/roformer.cpp
const Family& llama_family();     // hf/llama.cpp
const Family& gemma3_family();    // hf/gemma3.cpp
const Family& gpt2_family();      // hf/gpt2.cpp
const Family& neox_family();      // hf/gpt_neox.cpp

const std::vector<const Family*>& families() {
  static const std::vector<const Family*> list = {
      &bert_family(),   &roformer_family(), &llama_family(),
      &gemma3_family(), &gpt2_family(),     &neox_family(),
  };
  return list;
}

bool Family::reads(const std::string& architecture) const {
  return std::find(classes.begin(), classes.end(), architecture) != classes.end();
}

const Family* family_of(const std::string& architecture) {
  for (const Family* f : families())
    if (f->reads(architecture)) return f;
  return nullptr;
}

std::string supported_classes() {
  std::string out;
  for (const Family* f : families())
    for (const auto& c : f->classes) out += (out.empty() ? "" : ", ") + c;
  return out;
}

}  // namespace ropelab::hf
