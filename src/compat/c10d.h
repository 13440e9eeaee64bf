// c10d across libtorch versions (part of the compatibility unit, see compat/torch_compat.h).
// Included only by dist/world.cpp and its tests: c10d's headers are heavy.
//
// libtorch 1.13: ProcessGroupGloo and ProcessGroupNCCL derive from c10d::ProcessGroup.
// libtorch 2.x:  they derive from c10d::Backend (a ProcessGroup now dispatches to Backends).
// Both expose the same collectives (barrier, broadcast, allreduce, allgather) with the same
// signatures, so World holds a Group pointer of the right base and calls them directly.
//
// TCPStore: from 2.4 on a store uses the libuv backend by default, and a libtorch built without
// libuv (Debian 13's) refuses to make one; make_tcp_store falls back to the classic backend
// there. Both backends speak the same protocol.
//
// NCCL: the c10d headers declare ProcessGroupNCCL only under USE_C10D_NCCL, which CMake defines
// for a CUDA libtorch whose NCCL headers it found (ROPELAB_WITH_NCCL).
#pragma once
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifndef ROPELAB_WITHOUT_GLOO
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#endif

#include <torch/version.h>
#ifdef ROPELAB_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <chrono>
#include <string>
#include <vector>

namespace ropelab::compat {

#if TORCH_VERSION_MAJOR >= 2
using Group = c10d::Backend;
#else
using Group = c10d::ProcessGroup;
#endif

#ifdef ROPELAB_WITH_NCCL
inline constexpr bool kHaveNccl = true;
#else
inline constexpr bool kHaveNccl = false;
#endif

namespace detail {
// Sets TCPStoreOptions::useLibUV where the field exists (libtorch 2.2 on); false otherwise.
template <class O>
auto set_libuv(O& o, bool on, int) -> decltype(o.useLibUV = on, true) {
  o.useLibUV = on;
  return true;
}
template <class O>
bool set_libuv(O&, bool, long) {
  return false;
}
}  // namespace detail

// A TCPStore client of `host:port`, or its server when `server` (which does not wait for
// workers).
inline c10::intrusive_ptr<c10d::Store> make_tcp_store(const std::string& host, uint16_t port,
                                                      bool server,
                                                      std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions o;
  o.port = port;
  o.isServer = server;
  o.waitWorkers = false;
  o.timeout = timeout;
  try {
    return c10::make_intrusive<c10d::TCPStore>(host, o);
  } catch (const c10::Error& e) {
    // Built without libuv: the classic backend (only when the option exists and was on).
    if (std::string(e.what()).find("libuv") == std::string::npos) throw;
    c10d::TCPStoreOptions classic = o;
    if (!detail::set_libuv(classic, false, 0)) throw;
    return c10::make_intrusive<c10d::TCPStore>(host, classic);
  }
}

// Gloo: ProcessGroupGloo's header includes Gloo's own headers, which Debian ships (libgloo-dev)
// and PyTorch wheels do not. A build without them (ROPELAB_WITHOUT_GLOO) has NCCL ranks only.
#ifdef ROPELAB_WITHOUT_GLOO
constexpr bool kHaveGloo = false;
#else
constexpr bool kHaveGloo = true;

// A Gloo group on `devices` (the network interfaces), with `threads` worker threads.
inline c10::intrusive_ptr<Group> make_gloo_group(
    const c10::intrusive_ptr<c10d::Store>& store, int rank, int size,
    std::chrono::milliseconds timeout,
    std::vector<std::shared_ptr< ::gloo::transport::Device> > devices, int threads) {
  auto o = c10d::ProcessGroupGloo::Options::create(timeout);
  o->devices = std::move(devices);
  o->threads = threads;
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
}
#endif

// An NCCL group (nullptr where this libtorch has none: check kHaveNccl first).
inline c10::intrusive_ptr<Group> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                 int rank, int size,
                                                 std::chrono::milliseconds timeout) {
#ifdef ROPELAB_WITH_NCCL
  auto o = c10d::ProcessGroupNCCL::Options::create();
  o->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
#else
  (void)store, (void)rank, (void)size, (void)timeout;
  return {};
#endif
}

// Store values are bytes in every version; 2.x adds a string overload that makes a braced
// initializer ambiguous, so callers pass text through this.
inline void store_set(c10d::Store& store, const std::string& key, const std::string& value) {
  store.set(key, std::vector<uint8_t>(value.begin(), value.end()));
}

}  // namespace ropelab::compat
