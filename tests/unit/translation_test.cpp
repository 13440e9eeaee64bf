// Translation: decoding properties (beam 1 = an independent greedy search; the key/value cache
// changes nothing), fairseq's label-smoothed loss, and a tiny model that learns to reverse
// sequences and decodes them exactly (the task's overfit test).
#include <torch/torch.h>

#include "helpers.h"
#include "model/decode.h"
#include "model_helpers.h"
#include "tasks/translation.h"
#include "tensor_helpers.h"
#include "tokenizers/tokenizer.h"

namespace ropelab::tasks {
namespace {

using tokenizers::Special;

config::Config mt_config(const std::string& pos = "rope") {
  config::Config c;
  config::select_variant(c.task.opts, "translation");
  c.model = test::tiny_model("encdec", pos);
  c.model.d_model = 32;
  c.model.d_ff = 64;
  c.model.scale_embeddings = true;
  c.task.seq_len = 16;
  c.train.batch_size = 8;
  return c;
}

// Greedy search written plainly: recompute the whole prefix, take the argmax, stop at EOS or at
// the length limit a * source length + b.
std::vector<int64_t> plain_greedy(model::ModelImpl& m, const torch::Tensor& src_1S,
                                  const torch::Tensor& pad_1S, const model::DecodeOptions& d) {
  torch::NoGradGuard ng;
  auto mem = m.backbone->encode(src_1S, pad_1S);
  int64_t limit =
      static_cast<int64_t>(d.max_len_a * static_cast<double>(pad_1S.sum().item<int64_t>())) +
      d.max_len_b;
  std::vector<int64_t> out;
  std::vector<int64_t> prefix = {Special::kBos};
  for (int64_t t = 0; t < limit; ++t) {
    auto in = torch::tensor(prefix, torch::kInt64).view({1, -1});
    auto logits = m.logits(m.backbone->decode(in, mem, pad_1S)).select(1, t).squeeze(0);
    logits.index_put_({Special::kPad}, -INFINITY);
    logits.index_put_({Special::kBos}, -INFINITY);
    int64_t tok = logits.argmax().item<int64_t>();
    if (tok == Special::kEos) break;
    out.push_back(tok);
    prefix.push_back(tok);
  }
  return out;
}

TEST(Decode, BeamOneIsGreedyAndTheCacheChangesNothing) {
  for (const auto& pos : {"rope", "sinusoidal", "t5"}) {
    torch::manual_seed(11);
    auto c = mt_config(pos);
    TranslationTask task(task_setup(c, 30), std::get<config::TranslationTaskConfig>(c.task.opts));
    auto m = task.build_model();
    m->eval();
    auto src = torch::randint(7, 30, {3, 6});
    auto pad = torch::ones({3, 6}, torch::kBool);
    pad.index_put_({1, torch::indexing::Slice(4, 6)}, false);
    src.masked_fill_(pad.logical_not(), Special::kPad);
    auto d = task.decode_options(1);
    d.max_len_a = 1.0;
    d.max_len_b = 3;
    auto greedy = model::generate(*m, src, pad, d);
    for (int64_t b = 0; b < 3; ++b) {
      auto row = src.narrow(0, b, 1), row_pad = pad.narrow(0, b, 1);
      EXPECT_EQ(greedy[b], plain_greedy(*m, row, row_pad, d)) << pos << " sentence " << b;
    }
    for (int64_t beam : {1, 4}) {
      d.beam = beam;
      d.use_cache = true;
      auto cached = model::generate(*m, src, pad, d);
      d.use_cache = false;
      EXPECT_EQ(cached, model::generate(*m, src, pad, d)) << pos << " beam " << beam;
    }
  }
}

data::TokenDataset pairs(
    const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>>& p, int64_t vocab) {
  auto ds = data::empty_dataset(data::DataKind::kParallel);
  ds.vocab_size = vocab;
  for (const auto& [s, t] : p) ds.parallel().src.push(s), ds.parallel().tgt.push(t);
  return ds;
}

TEST(TranslationTask, LabelSmoothedLossIsFairseqsFormOverRealTargets) {
  torch::manual_seed(2);
  auto c = mt_config();
  c.task.label_smoothing = 0.1;
  const int64_t V = 25;
  TranslationTask task(task_setup(c, V), std::get<config::TranslationTaskConfig>(c.task.opts));
  auto m = task.build_model();
  auto ds = pairs({{{7, 8, 9}, {10, 11}}, {{12, 13}, {14, 15, 16, 17}}}, V);
  auto b = task.stream(ds, false, 16, 8)->batch(0, 0);
  auto f = task.forward(*m, b);
  // By hand: for every real target, (1 - eps - eps/(V-1)) * nll + eps/(V-1) * sum_j -log p_j.
  auto mem = m->backbone->encode(b.src_BS, b.src_pad_BS);
  auto lp = torch::log_softmax(m->logits(m->backbone->decode(b.input_BT, mem, b.src_pad_BS)), -1)
                .to(torch::kFloat64);
  double eps = 0.1, eps_i = eps / (V - 1), want = 0, nll = 0;
  int64_t n = 0;
  auto tg = b.target_BT.accessor<int64_t, 2>();
  for (int64_t i = 0; i < b.target_BT.size(0); ++i)
    for (int64_t t = 0; t < b.target_BT.size(1); ++t) {
      if (tg[i][t] == -100) continue;
      double x = -lp[i][t][tg[i][t]].item<double>();
      want += (1 - eps - eps_i) * x + eps_i * (-lp[i][t].sum().item<double>());
      nll += x;
      ++n;
    }
  EXPECT_EQ(n, 2 + 1 + 4 + 1);  // every target plus its EOS; padding excluded
  EXPECT_NEAR(f.loss_sum.item<double>(), want, 1e-3);
  EXPECT_NEAR(f.sums.read().nll, nll, 1e-3);
  EXPECT_EQ(f.sums.read().targets, static_cast<double>(n));
}

// The overfit test of the task: a small model learns to reverse 24 sequences and then decodes
// every one of them exactly, greedy and with beam search.
TEST(TranslationTask, TinyModelLearnsToReverseAndDecodesExactly) {
  torch::manual_seed(0);
  auto c = mt_config("rope");
  c.model.d_model = 64;
  c.model.d_ff = 128;
  c.model.n_heads = 4;
  const int64_t V = 20;
  std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> data;
  for (int i = 0; i < 24; ++i) {
    std::vector<int32_t> s;
    for (int t = 0; t < 3 + i % 4; ++t) s.push_back(7 + (i * 5 + t * 3 + t * t) % (V - 7));
    data.emplace_back(s, std::vector<int32_t>(s.rbegin(), s.rend()));
  }
  auto ds = pairs(data, V);
  TranslationTask task(task_setup(c, V), std::get<config::TranslationTaskConfig>(c.task.opts));
  auto m = task.build_model();
  auto stream = task.stream(ds, true, 16, 24);
  torch::optim::Adam opt(m->parameters(), torch::optim::AdamOptions(3e-3));
  double loss = 0;
  for (int step = 0; step < 400; ++step) {
    auto b = stream->batch(step / stream->batches_per_epoch(), step % stream->batches_per_epoch());
    opt.zero_grad();
    torch::Tensor l;
    auto forward_backward = [&] {
      l = task.forward(*m, b).loss_sum / static_cast<double>(b.num_targets);
      l.backward();
    };
    if (step == 1)  // a steady step (the first puts RoPE's frequencies on the device)
      test::expect_no_host_sync("translation", forward_backward);
    else
      forward_backward();
    opt.step();
    loss = l.item<double>();
  }
  EXPECT_LT(loss, 0.05);
  m->eval();
  for (int64_t beam : {1, 4}) {
    std::vector<std::vector<int32_t>> src;
    for (const auto& p : data) src.push_back(p.first);
    auto out =
        translate_ids(*m, src, task.decode_options(beam), 64, 16, torch::kCPU, false, nullptr);
    for (size_t i = 0; i < data.size(); ++i)
      EXPECT_EQ(out[i], std::vector<int64_t>(data[i].second.begin(), data[i].second.end()))
          << "sentence " << i << " beam " << beam;
  }
}

// Separate vocabularies: the encoder embeds source ids with its own matrix (ids beyond the
// target vocabulary are fine there), the decoder and output use the target one.
TEST(TranslationTask, SeparateVocabulariesGiveTheEncoderItsOwnEmbeddings) {
  torch::manual_seed(3);
  auto c = mt_config("rope");
  const int64_t V = 20, VS = 40;
  TranslationTask task(task_setup(c, V, nullptr, VS),
                       std::get<config::TranslationTaskConfig>(c.task.opts));
  auto m = task.build_model();
  auto params = m->named_parameters();
  ASSERT_TRUE(params.contains("backbone.src_emb.weight"));
  EXPECT_EQ(params["backbone.src_emb.weight"].sizes(), (std::vector<int64_t>{VS, c.model.d_model}));
  EXPECT_EQ(params["backbone.tok_emb.weight"].size(0), V);
  auto ds = pairs({{{30, 31, 39}, {8, 9}}, {{25, 7}, {10, 11, 12}}}, VS);
  auto stream = task.stream(ds, true, 16, 8);
  auto f = task.forward(*m, stream->batch(0, 0));
  (f.loss_sum / f.sums.read().targets).backward();
  auto g_src = params["backbone.src_emb.weight"].grad(),
       g_tgt = params["backbone.tok_emb.weight"].grad();
  EXPECT_GT(g_src[39].abs().sum().item<double>(), 0.0);  // a source-only id learns
  EXPECT_EQ(g_src[8].abs().sum().item<double>(), 0.0);   // target ids never reach it
  EXPECT_GT(g_tgt[8].abs().sum().item<double>(), 0.0);
  m->eval();
  auto out = translate_ids(*m, {{30, 31, 39}}, task.decode_options(2), 64, 16, torch::kCPU, false,
                           nullptr);
  for (auto id : out[0]) EXPECT_LT(id, V);
}

}  // namespace
}  // namespace ropelab::tasks
