#include "util/sync_hook.h"

#include <ATen/record_function.h>

#include <cstring>
#include <mutex>
#include <stdexcept>

namespace ropelab::util {

namespace {

std::mutex g_mutex;
std::vector<std::string> g_ops;
bool g_active = false;

// Operations that read values on the host, whose output shape depends on values, or that copy
// between devices (a blocking copy to or from a GPU waits for it).
bool syncs(const at::RecordFunction& fn) {
  static const char* const kValueDependent[] = {"aten::_local_scalar_dense",
                                                "aten::item",
                                                "aten::nonzero",
                                                "aten::masked_select",
                                                "aten::_unique",
                                                "aten::_unique2",
                                                "aten::unique_dim",
                                                "aten::unique_consecutive",
                                                "aten::is_nonzero",
                                                "aten::equal",
                                                "aten::allclose",
                                                "aten::tolist"};
  const char* name = fn.name();
  for (const char* n : kValueDependent)
    if (std::strcmp(name, n) == 0) return true;
  if (std::strcmp(name, "aten::copy_") == 0) {  // (self, src, non_blocking)
    auto in = fn.inputs();
    return in.size() >= 2 && in[0].isTensor() && in[1].isTensor() &&
           in[0].toTensor().device() != in[1].toTensor().device();
  }
  return false;
}

// One sync is counted once, at its outermost operation (item() runs _local_scalar_dense,
// masked_select reads its mask's sum): the depth of sync operations this thread is inside.
thread_local int t_depth = 0;
struct Marker : at::ObserverContext {};

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (!syncs(fn)) return nullptr;
  if (t_depth++ == 0) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_ops.emplace_back(fn.name());
  }
  return std::make_unique<Marker>();
}

void on_end(const at::RecordFunction& /*fn*/, at::ObserverContext* ctx) {
  if (ctx != nullptr) --t_depth;
}

}  // namespace

HostSyncCounter::HostSyncCounter() {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (g_active) throw std::logic_error("HostSyncCounter: one at a time");
    g_active = true;
    g_ops.clear();
  }
  handle_ = at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end)
                                      .needsInputs(true)
                                      .scopes({at::RecordScope::FUNCTION}));
}

HostSyncCounter::~HostSyncCounter() {
  at::removeCallback(handle_);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_active = false;
}

int64_t HostSyncCounter::count() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return static_cast<int64_t>(g_ops.size());
}

std::vector<std::string> HostSyncCounter::ops() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_ops;
}

std::string HostSyncCounter::report() const {
  auto names = ops();
  if (names.empty()) return "none";
  std::string s = std::to_string(names.size()) + ":";
  for (size_t i = 0; i < names.size(); ++i) s += (i == 0 ? " " : ", ") + names[i];
  return s;
}

void HostSyncCounter::reset() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_ops.clear();
}

}  // namespace ropelab::util
