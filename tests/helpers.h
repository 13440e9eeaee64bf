// Shared test helpers: temp dirs, files, running the real CLI. Torch-free, so the sanitizer
// tier can use it; tensor comparison is in tensor_helpers.h.
#pragma once
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "config/loader.h"

namespace ropelab::test {

inline std::string source_dir() { return ROPELAB_SOURCE_DIR; }
inline std::string ropelab_bin() { return std::string(ROPELAB_BINARY_DIR) + "/bin/ropelab"; }

// A fresh directory under /tmp, removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("ropelab-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string path() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

inline std::string write(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

// Writes a small synthetic corpus (train.txt, valid.txt) into `d` and returns the `run:` and
// `data:` sections of a config that trains on it with the byte tokenizer, 1 thread, runs in
// d/runs. Tests append their own task, model and train sections.
inline std::string tiny_text_run_yaml(const TempDir& d, int seed) {
  std::string text;
  for (int i = 0; i < 400; ++i)
    text += "In the beginning was the word " + std::to_string(i % 23) + ", and the word was with " +
            std::to_string((i * 7) % 19) + ".\n";
  write(d.file("train.txt"), text);
  write(d.file("valid.txt"), text.substr(0, 3000));
  return "run: {seed: " + std::to_string(seed) + ", threads: 1, out_dir: " + d.file("runs") +
         "}\ndata: {source: text, train: " + d.file("train.txt") +
         ", valid: " + d.file("valid.txt") + ", prepared_dir: " + d.file("prep") +
         ", tokenizer: {type: byte}}\n";
}

// A tiny causal LM on that corpus, written to d/c.yaml and loaded with run.name=`name` and
// `overrides`; `train` is the train section's body.
inline config::Config tiny_clm_run(const TempDir& d, int seed, const std::string& name,
                                   const std::string& train, const std::string& model_extra = "",
                                   std::vector<std::string> overrides = {}) {
  write(d.file("c.yaml"), tiny_text_run_yaml(d, seed) +
                              "task: {type: clm, seq_len: 16}\n"
                              "model: {d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32" +
                              model_extra + "}\ntrain: {" + train + "}\n");
  overrides.insert(overrides.begin(), "run.name=" + name);
  return config::load_config(d.file("c.yaml"), config::overrides_from_args(overrides));
}

// Sets an environment variable for its lifetime, then unsets it (the ROPELAB_* switches that
// code reads on each call).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
};

struct RunResult {
  int code = -1;
  std::string out;  // stdout and stderr together
};
// Runs a shell command, capturing its output and exit code.
inline RunResult run(const std::string& cmd) {
  RunResult r;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

}  // namespace ropelab::test
