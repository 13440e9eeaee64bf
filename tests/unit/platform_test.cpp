// The two platform pitfalls (docs/platform-notes.md), checked inside processes that run libtorch.
#include <torch/torch.h>

#include <cstdint>
#include <filesystem>
#include <system_error>

#include "helpers.h"
#include "tensor_helpers.h"
#include "tokenizers/tokenizer.h"
#include "util/platform.h"

namespace ropelab {
namespace {

// This test binary starts through ensure_fast_blas(), like `ropelab`. On a CPU with AVX2 or
// AVX-512, OpenBLAS must then run a specific kernel, never its generic fallback.
TEST(Platform, OpenBlasUsesAFastKernelInThisProcess) {
  std::string core = platform::blas_core();
  ASSERT_NE(core, "unknown") << "libtorch is not using OpenBLAS here";
  if (platform::preferred_blas_core().empty()) GTEST_SKIP() << "CPU has neither AVX2 nor AVX-512";
  EXPECT_FALSE(platform::blas_core_is_generic(core)) << "OpenBLAS core: " << core;
  // On a CPU with AVX-512 the kernel is an AVX-512 one (OpenBLAS 0.3.21 runs AMD Zen 4 on its
  // AVX2 kernels at two thirds of the speed), unless ROPELAB_KEEP_BLAS_CORE keeps another.
  if (platform::preferred_blas_core() == "SkylakeX" &&
      std::getenv("ROPELAB_KEEP_BLAS_CORE") == nullptr) {
    EXPECT_TRUE(platform::blas_core_has_avx512(core)) << "OpenBLAS core: " << core;
  }
  // And a 1024x1024 fp32 matmul computes the right thing through it.
  auto a = torch::randn({1024, 1024}), b = torch::randn({1024, 1024});
  auto c = torch::matmul(a, b);
  auto ref = torch::matmul(a.to(torch::kFloat64), b.to(torch::kFloat64));
  EXPECT_TRUE(test::close(c, ref, 1e-3, 1e-3));
}

// Inside the real `ropelab` binary, a generic core is replaced by the fast one, whatever this
// CPU's OpenBLAS would pick by itself: force the generic "Prescott" core and check the fix.
TEST(Platform, RopelabBinaryReplacesGenericKernel) {
  if (platform::preferred_blas_core().empty()) GTEST_SKIP() << "CPU has neither AVX2 nor AVX-512";
  auto r = test::run("OPENBLAS_CORETYPE=Prescott " + test::ropelab_bin() + " info");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("blas_core: " + platform::preferred_blas_core() + "\n"), std::string::npos)
      << r.out;
  // Opting out keeps the slow core, proving the re-exec is what fixed it.
  auto slow = test::run("OPENBLAS_CORETYPE=Prescott ROPELAB_KEEP_BLAS_CORE=1 " +
                        test::ropelab_bin() + " info");
  ASSERT_EQ(slow.code, 0) << slow.out;
  EXPECT_NE(slow.out.find("blas_core: Prescott (generic, slow"), std::string::npos) << slow.out;
  // On an AVX-512 CPU an AVX2 core is upgraded too, even when the environment pinned it;
  // ROPELAB_KEEP_BLAS_CORE=1 keeps it.
  if (platform::preferred_blas_core() == "SkylakeX") {
    auto pinned = test::run("OPENBLAS_CORETYPE=Haswell " + test::ropelab_bin() + " info");
    EXPECT_NE(pinned.out.find("blas_core: SkylakeX\n"), std::string::npos) << pinned.out;
    auto kept = test::run("OPENBLAS_CORETYPE=Haswell ROPELAB_KEEP_BLAS_CORE=1 " +
                          test::ropelab_bin() + " info");
    EXPECT_NE(kept.out.find("blas_core: Haswell\n"), std::string::npos) << kept.out;
  }
}

// -fPIC everywhere: no copy relocations that the RTLD_DEEPBIND module would see uninitialised.
TEST(Platform, RopelabHasNoCopyRelocations) {
  auto r = test::run("readelf -rW " + test::ropelab_bin());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_EQ(r.out.find("R_X86_64_COPY"), std::string::npos);
}

// std::filesystem comes from libstdc++ (or the program's own copy), never from a libtorch that
// exports its own copies (a PyTorch wheel's does, and its remove_all calls a null pointer):
// CMake links libstdc++ first, and start-up preloads it where that did not take.
TEST(Platform, StdFilesystemComesFromLibstdcxx) {
  std::string by = platform::stdfs_provider();
  EXPECT_TRUE(by.empty() || by.find("libstdc++") != std::string::npos)
      << "std::filesystem::remove_all is bound to " << by;
  // And it works: a tree of files and directories goes.
  test::TempDir d;
  std::filesystem::create_directories(d.file("a/b/c"));
  test::write(d.file("a/b/c/f.txt"), "x");
  std::error_code ec;
  EXPECT_EQ(std::filesystem::remove_all(d.file("a"), ec), 4u) << ec.message();
  EXPECT_FALSE(std::filesystem::exists(d.file("a")));
}

// A preloaded library that exports its own remove_all (tests/support/fake_stdfs.cpp, standing in
// for the wheel's libtorch) is put behind libstdc++ by start-up's re-execution; with that turned
// off (ROPELAB_KEEP_STDCXX=1) the fake one is called. No other setting re-executes the child.
TEST(Platform, AForeignStdFilesystemIsOverriddenAtStartup) {
  std::string fake = std::string(ROPELAB_BINARY_DIR) + "/bin/libropelab_fake_stdfs.so";
  ASSERT_TRUE(std::filesystem::exists(fake)) << fake;
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  std::string cmd =
      "ROPELAB_KEEP_BLAS_CORE=1 ROPELAB_KEEP_OMP_WAIT=1 ROPELAB_KEEP_MALLOC=1 "
      "LD_PRELOAD=" +
      fake + " " + self + " --gtest_filter=Platform.StdFilesystemComesFromLibstdcxx 2>&1";
  auto fixed = test::run(cmd);
  EXPECT_EQ(fixed.code, 0) << fixed.out;
  auto unfixed = test::run("ROPELAB_KEEP_STDCXX=1 " + cmd);
  EXPECT_NE(unfixed.code, 0) << unfixed.out;
  EXPECT_NE(unfixed.out.find("bound to " + fake), std::string::npos) << unfixed.out;
  EXPECT_NE(unfixed.out.find("fake_stdfs: remove_all called"), std::string::npos) << unfixed.out;
}

// SentencePiece (train, load, encode, decode) in the same process as libtorch.
TEST(Platform, SentencePieceWorksBesideLibtorch) {
  test::TempDir d;
  std::string corpus;
  for (int i = 0; i < 300; ++i)
    corpus += "In the beginning God created the heaven and the earth " + std::to_string(i % 17) +
              ".\nAnd the earth was without form, and void.\n";
  auto input = test::write(d.file("corpus.txt"), corpus);
  tokenizers::SpmTrainOptions opt;
  opt.vocab_size = 60;
  tokenizers::train_spm(input, d.file("tok"), opt);
  tokenizers::SpmTokenizer tok(d.file("tok.model"));
  auto t = torch::ones({2, 2});  // libtorch alive in the same process
  auto ids = tok.encode("And the earth was void.");
  ASSERT_FALSE(ids.empty());
  for (auto id : ids) EXPECT_GE(id, tokenizers::Special::kCount);
  EXPECT_EQ(tok.decode(ids), "And the earth was void.");
  EXPECT_EQ(tok.piece(tokenizers::Special::kMask), "[MASK]");
  EXPECT_EQ((t * 2).sum().item<float>(), 8.0f);
}

}  // namespace
}  // namespace ropelab
