// The config switches that are enumerations (config/schema.h), with their config spellings.
#pragma once
#include <stdexcept>
#include <string>
#include <vector>

namespace ropelab::config {

// ---------------------------------------------------------------------------------------------
// Enumerations. A config switch is an enum decided once, when the config is loaded; code
// downstream switches on the enum, never on a string. EnumNames<E>::kNames lists the config
// spellings in the order of the enumerators (the reader, the dumper and the schema use it).

template <class E>
struct EnumNames;

#define ROPELAB_ENUM_NAMES(E, ...)                         \
  template <>                                              \
  struct EnumNames<E> {                                    \
    static constexpr const char* kNames[] = {__VA_ARGS__}; \
  }

template <class E>
constexpr const char* to_string(E e) {
  return EnumNames<E>::kNames[static_cast<size_t>(e)];
}
template <class E>
std::vector<std::string> enum_names() {
  return {std::begin(EnumNames<E>::kNames), std::end(EnumNames<E>::kNames)};
}
// The enumerator spelled `name` in configs (std::invalid_argument if none is).
template <class E>
E enum_from(const std::string& name) {
  auto names = enum_names<E>();
  for (size_t i = 0; i < names.size(); ++i)
    if (names[i] == name) return static_cast<E>(i);
  throw std::invalid_argument("'" + name + "' is not a valid choice");
}

enum class Arch { kEncoder, kDecoder, kEncDec };
ROPELAB_ENUM_NAMES(Arch, "encoder", "decoder", "encdec");
enum class Norm { kAuto, kPost, kPre, kReordered, kSandwich };
ROPELAB_ENUM_NAMES(Norm, "auto", "post", "pre", "reordered", "sandwich");
enum class Activation { kGelu, kRelu, kSwiglu, kGeglu, kGegluTanh, kGeluTanh };
ROPELAB_ENUM_NAMES(Activation, "gelu", "relu", "swiglu", "geglu", "geglu_tanh", "gelu_tanh");
// The gated feed-forwards: fc2(act(gate(x)) * fc1(x)).
constexpr bool is_gated(Activation a) {
  return a == Activation::kSwiglu || a == Activation::kGeglu || a == Activation::kGegluTanh;
}
enum class NormType { kLayerNorm, kRmsNorm, kRmsNormOffset };
ROPELAB_ENUM_NAMES(NormType, "layernorm", "rmsnorm", "rmsnorm_offset");
enum class LinearBias { kAll, kNone, kQkv };
ROPELAB_ENUM_NAMES(LinearBias, "all", "none", "qkv");
enum class PoolerActivation { kTanh, kGelu, kRelu };
ROPELAB_ENUM_NAMES(PoolerActivation, "tanh", "gelu", "relu");
enum class AttentionKernel { kSoftmax, kLinear };
ROPELAB_ENUM_NAMES(AttentionKernel, "softmax", "linear");
enum class FeatureMap { kElu, kFavor };
ROPELAB_ENUM_NAMES(FeatureMap, "elu", "favor");
enum class RopeMode { kEq19, kBeforePhi };
ROPELAB_ENUM_NAMES(RopeMode, "eq19", "before_phi");
enum class QkNormOver { kHead, kProjection };
ROPELAB_ENUM_NAMES(QkNormOver, "head", "projection");
enum class RopePairing { kInterleaved, kHalf };
ROPELAB_ENUM_NAMES(RopePairing, "interleaved", "half");
enum class MropeSections { kInterleaved, kContiguous };
ROPELAB_ENUM_NAMES(MropeSections, "interleaved", "contiguous");
enum class KerpleKernel { kLog, kPower };
ROPELAB_ENUM_NAMES(KerpleKernel, "log", "power");
enum class TokenizerType { kSpm, kByte, kSynthetic, kWordPiece, kBpe };
ROPELAB_ENUM_NAMES(TokenizerType, "spm", "byte", "synthetic", "wordpiece", "bpe");
enum class StripAccents { kAuto, kYes, kNo };
ROPELAB_ENUM_NAMES(StripAccents, "auto", "yes", "no");
enum class SpmModelType { kBpe, kUnigram };
ROPELAB_ENUM_NAMES(SpmModelType, "bpe", "unigram");
enum class DataSource {
  kBibleEn,
  kBibleEnEs,
  kBibleMrpc,
  kBibleSst2,
  kBibleCola,
  kBibleRank,
  kText,
  kBytes,
  kParallel,
  kGlue,
  kSyntheticPasskey,
  kSyntheticMqar,
  kSyntheticCopy,
  kSyntheticReverse,
  kSyntheticAddition,
  kSyntheticSelectiveCopy,
  kSyntheticCounting,
  kSyntheticFlipflop,
  kSyntheticNiah,
  kSyntheticNiahMultikey,
  kSyntheticVt,
  kSyntheticGrid,
  kBibleEnBooks
};
ROPELAB_ENUM_NAMES(DataSource, "bible-en", "bible-en-es", "bible-mrpc", "bible-sst2", "bible-cola",
                   "bible-rank", "text", "bytes", "parallel", "glue", "synthetic-passkey",
                   "synthetic-mqar", "synthetic-copy", "synthetic-reverse", "synthetic-addition",
                   "synthetic-selective-copy", "synthetic-counting", "synthetic-flipflop",
                   "synthetic-niah", "synthetic-niah-multikey", "synthetic-vt", "synthetic-grid",
                   "bible-en-books");
// What a data source gives: monolingual token streams, sentence pairs, labelled examples, or
// synthetic token sequences with their answer positions marked (data/synthetic.h).
enum class DataKind { kLm, kParallel, kGlue, kSynthetic };
ROPELAB_ENUM_NAMES(DataKind, "lm", "parallel", "glue", "synthetic");
enum class ScheduleType { kConstant, kLinear, kCosine, kInverseSqrt, kNoam };
ROPELAB_ENUM_NAMES(ScheduleType, "constant", "linear", "cosine", "inverse_sqrt", "noam");
enum class OptimizerType { kAdamW, kAdam };
ROPELAB_ENUM_NAMES(OptimizerType, "adamw", "adam");
enum class Precision { kFp32, kBf16 };
enum class Packing { kJoined, kDocuments };
ROPELAB_ENUM_NAMES(Precision, "fp32", "bf16");
ROPELAB_ENUM_NAMES(Packing, "joined", "documents");
// How text/bytes files hold their documents: auto (JSON lines when a file, less .gz/.zst, ends
// .jsonl, .ndjson or .json; else plain text), text, jsonl.
enum class TextFormat { kAuto, kText, kJsonl };
ROPELAB_ENUM_NAMES(TextFormat, "auto", "text", "jsonl");

constexpr DataKind kind_of(DataSource s) {
  switch (s) {
    case DataSource::kBibleEn:
    case DataSource::kBibleEnBooks:
    case DataSource::kText:
    case DataSource::kBytes:
      return DataKind::kLm;
    case DataSource::kBibleEnEs:
    case DataSource::kParallel:
      return DataKind::kParallel;
    case DataSource::kBibleMrpc:
    case DataSource::kBibleSst2:
    case DataSource::kBibleCola:
    case DataSource::kBibleRank:
    case DataSource::kGlue:
      return DataKind::kGlue;
    case DataSource::kSyntheticPasskey:
    case DataSource::kSyntheticMqar:
    case DataSource::kSyntheticCopy:
    case DataSource::kSyntheticReverse:
    case DataSource::kSyntheticAddition:
    case DataSource::kSyntheticSelectiveCopy:
    case DataSource::kSyntheticCounting:
    case DataSource::kSyntheticFlipflop:
    case DataSource::kSyntheticNiah:
    case DataSource::kSyntheticNiahMultikey:
    case DataSource::kSyntheticVt:
    case DataSource::kSyntheticGrid:
      return DataKind::kSynthetic;
  }
  return DataKind::kLm;
}
constexpr bool is_builtin(DataSource s) {
  return s == DataSource::kBibleEn || s == DataSource::kBibleEnEs || s == DataSource::kBibleMrpc ||
         s == DataSource::kBibleSst2 || s == DataSource::kBibleCola ||
         s == DataSource::kBibleRank || s == DataSource::kBibleEnBooks;
}

}  // namespace ropelab::config
