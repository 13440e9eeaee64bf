// `ropelab export RUN --format hf --out DIR`: a run as a Hugging Face checkpoint directory
// (config.json, model.safetensors, the tokenizer's files), the inverse of import-hf.
//
// The class is the first whose computation is exactly the run's model's: BertForMaskedLM /
// BertForSequenceClassification (encoder, post-LN LayerNorm, learned positions, GELU or ReLU,
// biases, no embedding scale), RoFormerForMaskedLM / ...ForSequenceClassification (the same
// with RoPE: interleaved pairs, base 10000; RoFormer's classification head), LlamaForCausalLM /
// Qwen2ForCausalLM (decoder, pre-norm RMSNorm, SwiGLU, half-split RoPE with any rope_scaling
// transformers has, no biases or q/k/v ones). Anything else is refused, naming what differs:
// T5's bias in a decoder, FIRE, a LayerNorm decoder, ...
// The vocabulary goes back to the tokenizer's order (the rows of the embeddings and the output
// layer are un-permuted). Tokenizers: a wordpiece vocab.txt, an imported tokenizer.json or
// tokenizer.model, or ropelab's own SentencePiece model for the Llama class; other tokenizers
// are left out, and the summary says so. DIR must not exist; it appears complete or not at
// all.
#pragma once
#include <string>

namespace ropelab::hf {

// The layout of config.json's RoPE settings: transformers 5's rope_parameters (read by
// transformers 5 only; transformers 4 ignores the key and would run with base 10000), or
// transformers 4's rope_theta and rope_scaling (read by 4.x and by 5, which converts them).
enum class HfConfigForm { kV5, kV4 };

std::string export_hf(const std::string& run, const std::string& out,
                      HfConfigForm form = HfConfigForm::kV5);

}  // namespace ropelab::hf
