#include "data/tokens.h"

#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"

namespace ropelab::data {

void write_tokens(const std::string& path, const TokenDataset& ds) {
  fs::commit_atomic(path, [&](const std::string& tmp) {
    auto f = h5::create_file(tmp);
    hid_t root = f.id();
    h5::set_attr(root, "format", std::string("ropelab.tokens"));
    h5::set_attr(root, "format_version", kTokensFormatVersion);
    h5::set_attr(root, "kind", std::string(config::to_string(ds.kind())));
    h5::set_attr(root, "split", ds.split);
    h5::set_attr(root, "tokenizer", ds.tokenizer);
    h5::set_attr(root, "tokenizer_kind", ds.tokenizer_kind);
    h5::set_attr(root, "vocab_size", ds.vocab_size);
    h5::set_attr(root, "source_hash", ds.source_hash);
    h5::set_attr(root, "ropelab_version", std::string(ROPELAB_VERSION));
    if (ds.kind() == DataKind::kGlue) {
      h5::set_attr(root, "task", ds.task);
      h5::set_attr(root, "num_labels", ds.num_labels);
      h5::write_f32(root, "labels", ds.labels());
    }
    for (const auto& [name, r] : ds.groups()) {
      auto g = h5::create_group(root, name, path);
      h5::write_i32(g.id(), "tokens", r->tokens);
      h5::write_i64(g.id(), "offsets", r->offsets);
    }
    if (H5Fflush(root, H5F_SCOPE_GLOBAL) < 0) throw UserError(path + ": cannot flush");
  });
}

std::map<std::string, std::string> read_token_attrs(const std::string& path) {
  std::map<std::string, std::string> out;
  try {
    auto f = h5::open_file(path, false);
    for (const char* k : {"format", "kind", "split", "tokenizer", "tokenizer_kind", "source_hash"})
      if (h5::has_attr(f.id(), k)) out[k] = h5::get_attr_str(f.id(), k, path);
    if (h5::has_attr(f.id(), "format_version"))
      out["format_version"] = std::to_string(h5::get_attr_int(f.id(), "format_version", path));
  } catch (const UserError&) {
    out.clear();
  }
  return out;
}

TokenDataset read_tokens(const std::string& path, std::optional<DataKind> expect) {
  auto f = h5::open_file(path, false);
  hid_t root = f.id();
  if (!h5::has_attr(root, "format") || h5::get_attr_str(root, "format", path) != "ropelab.tokens")
    throw UserError(path + ": not a ropelab token dataset (no format=ropelab.tokens attribute)");
  int64_t version = h5::get_attr_int(root, "format_version", path);
  if (version != kTokensFormatVersion)
    throw UserError(path + ": token format version " + std::to_string(version) +
                    ", this ropelab reads version " + std::to_string(kTokensFormatVersion) +
                    "; HINT: run `ropelab prepare` again");
  const std::string kind_name = h5::get_attr_str(root, "kind", path);
  DataKind kind;
  try {
    kind = config::enum_from<DataKind>(kind_name);
  } catch (const std::invalid_argument&) {
    throw UserError(path + ": unknown dataset kind '" + kind_name + "'");
  }
  if (expect && kind != *expect)
    throw UserError(path + ": holds a '" + kind_name + "' dataset, expected '" +
                    config::to_string(*expect) + "'");
  TokenDataset ds = empty_dataset(kind);
  ds.split = h5::get_attr_str(root, "split", path);
  ds.tokenizer = h5::get_attr_str(root, "tokenizer", path);
  ds.tokenizer_kind = h5::get_attr_str(root, "tokenizer_kind", path);
  ds.vocab_size = h5::get_attr_int(root, "vocab_size", path);
  ds.source_hash = h5::get_attr_str(root, "source_hash", path);
  int64_t count = -1;
  auto read_group = [&](const char* gname, Ragged& r) {
    if (!h5::exists(root, gname))
      throw UserError(path + ": missing group '/" + std::string(gname) + "'");
    h5::Handle g(H5Gopen2(root, gname, H5P_DEFAULT), H5Gclose);
    const std::string G = gname;
    r.tokens = h5::read_i32(g.id(), "tokens", path);
    r.offsets = h5::read_i64(g.id(), "offsets", path);
    if (r.offsets.empty() || r.offsets.front() != 0 ||
        r.offsets.back() != static_cast<int64_t>(r.tokens.size()))
      throw UserError(path + ": /" + G + "/offsets do not match /" + G + "/tokens");
    for (size_t i = 1; i < r.offsets.size(); ++i)
      if (r.offsets[i] < r.offsets[i - 1])
        throw UserError(path + ": /" + G + "/offsets decrease at index " + std::to_string(i));
    for (size_t i = 0; i < r.tokens.size(); ++i)
      if (r.tokens[i] < 0 || r.tokens[i] >= ds.vocab_size)
        throw UserError(path + ": token id " + std::to_string(r.tokens[i]) + " at /" + G +
                        "/tokens[" + std::to_string(i) + "] is outside the vocabulary (size " +
                        std::to_string(ds.vocab_size) + ")");
    if (count >= 0 && r.size() != count)
      throw UserError(path + ": groups hold different numbers of sequences");
    count = r.size();
  };
  switch (kind) {
    case DataKind::kLm:
      read_group("text", ds.lm().text);
      break;
    case DataKind::kParallel:
      read_group("src", ds.parallel().src);
      read_group("tgt", ds.parallel().tgt);
      break;
    case DataKind::kGlue: {
      auto& g = ds.glue();
      read_group("a", g.a);
      read_group("b", g.b);
      if (h5::exists(root, "c")) read_group("c", g.c);  // ranking triplets
      ds.task = h5::get_attr_str(root, "task", path);
      ds.num_labels = h5::get_attr_int(root, "num_labels", path);
      g.labels = h5::read_f32(root, "labels", path);
      if (static_cast<int64_t>(g.labels.size()) != count)
        throw UserError(path + ": /labels has " + std::to_string(g.labels.size()) +
                        " entries for " + std::to_string(count) + " examples");
      break;
    }
    case DataKind::kSynthetic:
      read_group("tokens", ds.synthetic().tokens);
      read_group("scored", ds.synthetic().scored);
      if (ds.synthetic().tokens.offsets != ds.synthetic().scored.offsets)
        throw UserError(path + ": /scored does not mark the tokens of /tokens one for one");
      break;
  }
  return ds;
}

}  // namespace ropelab::data
