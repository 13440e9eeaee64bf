// A Hugging Face family: the classes one mapping file reads and writes (hf/bert.cpp,
// hf/roformer.cpp, hf/llama.cpp, hf/gemma3.cpp, hf/gpt2.cpp, hf/gpt_neox.cpp), as one record.
// Import picks the family that lists config.json's architectures[0]; export takes the first family
// whose classes compute exactly what the run's model computes. The list is hf/families.cpp: a new
// family is its own file (with its record) and one line there. Not for use outside src/hf.
#pragma once
#include <string>
#include <vector>

#include "hf/mapping.h"

namespace ropelab::hf {

struct Family {
  std::string name;                  // "BERT", for messages
  config::Arch arch;                 // the ropelab architecture its classes map onto
  std::vector<std::string> classes;  // the architectures it imports (config.json's)
  // The class export's refusal names with this family's reason ("BertModel: ...").
  std::string export_class;
  // config.json and the tensors onto a run (UserError for what it cannot represent).
  Mapped (*map)(Source& s) = nullptr;
  // "" when a class of the family computes exactly the run's model; else what differs.
  std::string (*mismatch)(const config::Config& c) = nullptr;
  // The run as config.json and tensors (called only where mismatch() is "").
  Exported (*write)(const ExportSource& s) = nullptr;
  // A class no family lists that this one refuses with its own reason (Gemma 3's multimodal
  // model); returns where it has nothing to say. May be null.
  void (*refuse)(const Source& s) = nullptr;

  bool reads(const std::string& architecture) const;
};

// Every family, in the order export tries them (hf/families.cpp).
const std::vector<const Family*>& families();
// The family that imports `architecture`, or nullptr.
const Family* family_of(const std::string& architecture);

}  // namespace ropelab::hf
