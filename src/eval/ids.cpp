// `ropelab eval RUN --ids FILE`: next-token NLL and logits on given token ids (eval/ids.h).
#include "eval/ids.h"

#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "config/loader.h"
#include "eval/evaluate.h"
#include "model/transformer.h"
#include "run/run.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"
#include "util/signals.h"
#include "weights/weights.h"

namespace ropelab::eval {

namespace {

namespace stdfs = std::filesystem;

void check_ids(const std::vector<int64_t>& ids, int64_t vocab, const std::string& where) {
  if (ids.empty()) throw UserError(where + ": an empty sequence");
  for (int64_t id : ids)
    if (id < 0 || id >= vocab)
      throw UserError(
          fmt::format("{}: id {} is outside the model's vocabulary [0, {})", where, id, vocab));
}

std::vector<std::vector<int64_t>> read_json_lines(const std::string& file, int64_t vocab) {
  std::vector<std::vector<int64_t>> out;
  std::istringstream lines(fs::read_file(file));
  int line_no = 0;
  for (std::string line; std::getline(lines, line);) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file + ":" + std::to_string(line_no);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(line);
    } catch (const nlohmann::json::exception&) {
      throw UserError(where +
                      ": not JSON (expected a list of token ids, or an object with "
                      "input_ids)");
    }
    if (j.is_object() && j.contains("input_ids")) j = j["input_ids"];
    std::vector<int64_t> ids;
    if (!j.is_array())
      throw UserError(where + ": expected a list of token ids, or an object with input_ids");
    for (const auto& v : j) {
      if (!v.is_number_integer())
        throw UserError(where + ": " + v.dump() + " is not a token id (a whole number)");
      ids.push_back(v.get<int64_t>());
    }
    check_ids(ids, vocab, where);
    out.push_back(std::move(ids));
  }
  return out;
}

std::vector<std::vector<int64_t>> read_h5(const std::string& file, int64_t vocab) {
  auto f = h5::open_file(file, /*writable=*/false);
  const auto shape = h5::dataset_shape(f.id(), "input_ids", file);
  if (shape.empty() || shape.size() > 2)
    throw UserError(file + ": input_ids: expected 1-D (one sequence) or 2-D (one per row)");
  const auto flat = h5::read_i64_flat(f.id(), "input_ids", file);
  const int64_t rows = shape.size() == 2 ? shape[0] : 1, cols = shape.back();
  std::vector<std::vector<int64_t>> out;
  for (int64_t r = 0; r < rows; ++r) {
    std::vector<int64_t> ids(flat.begin() + r * cols, flat.begin() + (r + 1) * cols);
    check_ids(ids, vocab, fmt::format("{}: input_ids row {}", file, r));
    out.push_back(std::move(ids));
  }
  return out;
}

// The logits file, written under a temporary name and renamed.
void write_logits(const IdsReport& r, const std::vector<std::vector<int64_t>>& seqs,
                  const std::vector<torch::Tensor>& logits_TV) {
  const std::string tmp = r.logits_file + ".tmp";
  std::error_code ec;
  stdfs::remove(tmp, ec);
  try {
    {
      auto f = h5::create_file(tmp);
      h5::set_attr(f.id(), "run", r.run_dir);
      h5::set_attr(f.id(), "checkpoint", r.checkpoint);
      h5::set_attr(f.id(), "ids", r.ids_file);
      h5::set_attr(f.id(), "mean_nll", r.mean_nll);
      auto group = h5::create_group(f.id(), "input_ids", tmp);
      std::vector<float> nll;
      for (size_t i = 0; i < seqs.size(); ++i) {
        const auto& l = logits_TV[i];
        h5::write_f32_nd(f.id(), "logits/" + std::to_string(i), l.data_ptr<float>(),
                         {static_cast<hsize_t>(l.size(0)), static_cast<hsize_t>(l.size(1))});
        h5::write_i64(group.id(), std::to_string(i), seqs[i]);
        nll.push_back(static_cast<float>(r.nll[i]));
      }
      h5::write_f32(f.id(), "nll", nll);
    }
    stdfs::rename(tmp, r.logits_file);
  } catch (...) {
    stdfs::remove(tmp, ec);
    throw;
  }
}

}  // namespace

std::vector<std::vector<int64_t>> read_ids(const std::string& file, int64_t vocab) {
  if (!stdfs::is_regular_file(file)) throw UserError(file + ": no such file");
  auto seqs = h5::looks_like_hdf5(file) ? read_h5(file, vocab) : read_json_lines(file, vocab);
  if (seqs.empty()) throw UserError(file + ": no sequences (one JSON list of ids per line)");
  return seqs;
}

IdsReport eval_ids(const std::string& run_dir, const std::string& ids_file,
                   const std::string& logits_out, bool use_best, const std::string& rope_scaling) {
  if (!logits_out.empty() && stdfs::exists(logits_out))
    throw UserError(logits_out + ": already exists; choose another --logits");
  // Through the run layer: the run's threads and device (run.threads, run.device).
  auto rm = run::open_trained(run_dir, run::DataUse::kNone, use_best,
                              run_rope_scaling_overrides(run_dir, rope_scaling),
                              [&](const config::Config& c) {
                                if (c.model.arch != config::Arch::kDecoder)
                                  throw UserError(run_dir +
                                                  ": --ids gives next-token losses, which need a "
                                                  "decoder; this run's model.arch is " +
                                                  config::to_string(c.model.arch));
                              });
  const auto order = tokenizers::run_vocab_order(rm.config.data.tokenizer, rm.vocab, rm.run_dir);
  const auto inverse = tokenizers::invert_order(order);
  const auto seqs = read_ids(ids_file, rm.vocab);
  const int64_t max_len = rm.model->backbone->position().max_len();
  IdsReport r;
  r.run_dir = run_dir;
  r.checkpoint = rm.checkpoint;
  r.ids_file = ids_file;
  r.logits_file = logits_out;
  rm.model->eval();
  torch::NoGradGuard ng;
  // Column c of the checkpoint's logits is ropelab's column inverse[c].
  auto columns = torch::tensor(std::vector<int64_t>(inverse.begin(), inverse.end()), torch::kLong);
  std::vector<torch::Tensor> kept;
  double total = 0;
  for (size_t i = 0; i < seqs.size(); ++i) {
    const auto& ids = seqs[i];
    const auto T = static_cast<int64_t>(ids.size());
    if (max_len > 0 && T > max_len)
      throw UserError(
          fmt::format("{}: sequence {} has {} tokens, more than the model's learned "
                      "position table ({})",
                      ids_file, i, T, max_len));
    std::vector<int64_t> mine;
    for (int64_t id : ids) mine.push_back(inverse[static_cast<size_t>(id)]);
    auto tokens_1T = torch::tensor(mine, torch::kLong).unsqueeze(0).to(rm.device);
    auto logits_TV =
        rm.model->logits(rm.model->backbone->decode(tokens_1T))[0].to(torch::kCPU, torch::kFloat32);
    tokens_1T = tokens_1T.cpu();
    double nll = std::numeric_limits<double>::quiet_NaN();
    if (T > 1) {
      auto logp_TV = torch::log_softmax(logits_TV.to(torch::kFloat64), -1);
      auto next_T = tokens_1T[0].slice(0, 1).unsqueeze(1);
      auto sum = -logp_TV.slice(0, 0, T - 1).gather(1, next_T).sum().item<double>();
      nll = sum / static_cast<double>(T - 1);
      total += sum;
      r.predicted += T - 1;
    }
    r.tokens.push_back(T);
    r.nll.push_back(nll);
    if (!logits_out.empty()) kept.push_back(logits_TV.index_select(1, columns).contiguous());
    signals::throw_if_stopped("evaluation of " + ids_file, "nothing written");
  }
  r.mean_nll = r.predicted > 0 ? total / static_cast<double>(r.predicted)
                               : std::numeric_limits<double>::quiet_NaN();
  if (!logits_out.empty()) write_logits(r, seqs, kept);
  return r;
}

std::string format_ids(const IdsReport& r) {
  std::string s = fmt::format("{} ({}) on {}\n{:>8}  {:>8}  {:>12}\n", r.run_dir, r.checkpoint,
                              r.ids_file, "sequence", "tokens", "mean NLL");
  for (size_t i = 0; i < r.tokens.size(); ++i)
    s += std::isnan(r.nll[i]) ? fmt::format("{:>8}  {:>8}  {:>12}\n", i, r.tokens[i], "-")
                              : fmt::format("{:>8}  {:>8}  {:>12.6f}\n", i, r.tokens[i], r.nll[i]);
  s += fmt::format("mean NLL {:.6f} nats over {} predicted tokens ({} sequences)\n", r.mean_nll,
                   r.predicted, r.tokens.size());
  if (!r.logits_file.empty()) s += "wrote " + r.logits_file + "\n";
  return s;
}

}  // namespace ropelab::eval
