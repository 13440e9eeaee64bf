// Language-modelling tasks: causal LM (next-token cross-entropy) and BERT's masked LM
// (cross-entropy on the selected positions only).
#include <torch/nn/functional.h>

#include "tasks/task.h"
#include "util/error.h"

namespace ropelab::tasks {

namespace {

namespace F = torch::nn::functional;

// Cross-entropy over positions whose target is not -100, always in fp32.
torch::Tensor scored_ce(const torch::Tensor& logits_BTV, const torch::Tensor& target_BT,
                        double smoothing, Stats* s) {
  auto logits = logits_BTV.reshape({-1, logits_BTV.size(-1)}).to(torch::kFloat32);
  auto target = target_BT.reshape({-1});
  auto loss = F::cross_entropy(
      logits, target, F::CrossEntropyFuncOptions().ignore_index(-100).label_smoothing(smoothing));
  if (s != nullptr) {
    torch::NoGradGuard ng;
    auto valid = target != -100;
    auto nll = F::cross_entropy(
        logits, target, F::CrossEntropyFuncOptions().ignore_index(-100).reduction(torch::kSum));
    s->loss_sum += nll.item<double>();
    s->targets += static_cast<double>(valid.sum().item<int64_t>());
    s->correct +=
        static_cast<double>(((logits.argmax(-1) == target) & valid).sum().item<int64_t>());
  }
  return loss;
}

class LmTaskBase : public Task {
 public:
  LmTaskBase(const config::Config& c, int64_t vocab, std::string tokenizer_kind)
      : c_(c), vocab_(vocab), tokenizer_kind_(std::move(tokenizer_kind)) {}
  std::map<std::string, double> metrics(const Stats& s) const override {
    std::map<std::string, double> m;
    double loss = s.targets > 0 ? s.loss_sum / s.targets : 0.0;
    m["loss"] = loss;
    m["ppl"] = std::exp(std::min(loss, 50.0));
    m["acc"] = s.targets > 0 ? s.correct / s.targets : 0.0;
    if (tokenizer_kind_ == "byte") m["bpb"] = loss / std::log(2.0);  // one token per byte
    return m;
  }
  model::Transformer build_model() const override { return model::Transformer(c_.model, vocab_); }

 protected:
  data::StreamOptions opts(bool train, int64_t seq_len) const {
    data::StreamOptions o;
    o.seed = static_cast<uint64_t>(c_.run.seed);
    o.batch_size = c_.train.batch_size;
    o.seq_len = seq_len;
    o.shuffle = train;
    o.mask_prob = c_.task.mask_prob;
    o.mask_token_frac = c_.task.mask_token_frac;
    o.random_token_frac = c_.task.random_token_frac;
    return o;
  }
  config::Config c_;
  int64_t vocab_;
  std::string tokenizer_kind_;
};

class CausalLmTask : public LmTaskBase {
 public:
  using LmTaskBase::LmTaskBase;
  std::string name() const override { return "clm"; }
  torch::Tensor loss(model::TransformerImpl& m, const data::Batch& b, Stats* s) const override {
    auto logits = m.lm_logits(m.decode(b.input_BT));
    if (s != nullptr) s->tokens += static_cast<double>(b.num_tokens);
    return scored_ce(logits, b.target_BT, c_.task.label_smoothing, s);
  }
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len) const override {
    return data::make_lm_stream(ds, opts(train, seq_len));
  }
};

class MaskedLmTask : public LmTaskBase {
 public:
  using LmTaskBase::LmTaskBase;
  std::string name() const override { return "mlm"; }
  torch::Tensor loss(model::TransformerImpl& m, const data::Batch& b, Stats* s) const override {
    auto h = m.encode(b.input_BT, b.pad_BT);
    // Only the selected positions go through the vocabulary projection.
    auto sel = (b.target_BT != -100).reshape({-1});
    auto idx = sel.nonzero().squeeze(1);
    auto h_sel = h.reshape({-1, h.size(-1)}).index_select(0, idx);
    auto logits = m.mlm_logits(h_sel.unsqueeze(0));
    auto target = b.target_BT.reshape({-1}).index_select(0, idx).unsqueeze(0);
    if (s != nullptr) s->tokens += static_cast<double>(b.num_tokens);
    return scored_ce(logits, target, c_.task.label_smoothing, s);
  }
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len) const override {
    return data::make_mlm_stream(ds, opts(train, seq_len));
  }
};

}  // namespace

std::unique_ptr<Task> make_task(const config::Config& c, int64_t vocab,
                                const std::string& tokenizer_kind) {
  if (c.task.type == "clm") return std::make_unique<CausalLmTask>(c, vocab, tokenizer_kind);
  if (c.task.type == "mlm") return std::make_unique<MaskedLmTask>(c, vocab, tokenizer_kind);
  throw UserError("task." + c.task.type +
                  ": training this task is not implemented yet in this version (clm and mlm are); "
                  "its data can already be prepared with `ropelab prepare`");
}

}  // namespace ropelab::tasks
