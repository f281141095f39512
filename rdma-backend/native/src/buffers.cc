#include "buffers.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>

#include "runtime.h"

namespace rdma_native {

namespace {

// Largest single allocation: well above any sane registered pool, well below what would be a typo.
constexpr double kMaxBuffer = 1ull << 40;

struct Allocation {
  size_t rounded = 0;   // whole pages
  bool kept = false;    // KeepAddonBuffer: never freed, even once its ArrayBuffer is collected
};

struct Allocations {
  std::mutex mu;
  std::map<const char*, Allocation> by_start;
  size_t bytes = 0;
  size_t kept_count = 0, kept_bytes = 0;
};

// The allocation holding [p, p + length), or end(). Caller holds a.mu.
std::map<const char*, Allocation>::iterator FindLocked(Allocations& a, const char* p, size_t length) {
  auto it = a.by_start.upper_bound(p);
  if (it == a.by_start.begin()) return a.by_start.end();
  --it;
  return p >= it->first && p + length <= it->first + it->second.rounded ? it : a.by_start.end();
}

// Process-wide (worker threads share it) and never destroyed: external ArrayBuffer finalizers may run
// during isolate disposal, after static destructors would have run.
Allocations& allocations() {
  static Allocations* a = new Allocations();
  return *a;
}

size_t page_size() {
  static size_t p = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  return p;
}

// Gives whole pages marked MADV_DONTFORK back to malloc. madvise(2): MADV_DONTFORK lasts until
// MADV_DOFORK, so without undoing it the pages would stay do-not-copy inside the malloc heap; a later
// malloc there (libuv's uv_spawn builds argv/env in malloc'd memory and the child reads them between
// fork and exec) would be missing from every forked child, which then faults. If the flag cannot be
// cleared the memory is leaked rather than handed to malloc.
void ReleasePages(void* data, size_t rounded) {
  if (madvise(data, rounded, MADV_DOFORK) != 0) return;
  std::free(data);
}

void FreeBuffer(Napi::Env, void* data) {
  auto& a = allocations();
  size_t rounded = 0;
  {
    std::lock_guard<std::mutex> lock(a.mu);
    auto it = a.by_start.find(static_cast<const char*>(data));
    // A kept allocation stays allocated and accounted for the life of the process (see KeepAddonBuffer).
    if (it != a.by_start.end() && !it->second.kept) {
      rounded = it->second.rounded;
      a.bytes -= rounded;
      a.by_start.erase(it);
    }
  }
  // Every pointer reaching here was recorded by AllocBuffer; an unknown one is not ours to free.
  if (rounded > 0) ReleasePages(data, rounded);
}

}  // namespace

bool FindAddonBuffer(const void* data, size_t length) {
  auto& a = allocations();
  std::lock_guard<std::mutex> lock(a.mu);
  return FindLocked(a, static_cast<const char*>(data), length) != a.by_start.end();
}

bool KeepAddonBuffer(const void* data) {
  auto& a = allocations();
  std::lock_guard<std::mutex> lock(a.mu);
  auto it = FindLocked(a, static_cast<const char*>(data), 0);
  if (it == a.by_start.end()) return false;
  if (!it->second.kept) {
    it->second.kept = true;
    ++a.kept_count;
    a.kept_bytes += it->second.rounded;
  }
  return true;
}

size_t AddonBufferBytes() {
  auto& a = allocations();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.bytes;
}

size_t AddonBufferCount() {
  auto& a = allocations();
  std::lock_guard<std::mutex> lock(a.mu);
  return a.by_start.size();
}

// allocBuffer(size): an ArrayBuffer of `size` bytes at a page boundary, zero-filled, backed by whole
// pages marked MADV_DONTFORK (a forked child never shares pinned pages, so a child_process spawn cannot
// trigger copy-on-write on registered memory — the old ibv_fork_init hazard). The flag is cleared again
// (MADV_DOFORK) before the pages go back to malloc: see ReleasePages.
Napi::Value AllocBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  double size = ArgNumber(info, 0, "size");
  if (!(size >= 1 && size <= kMaxBuffer) || size != static_cast<double>(static_cast<uint64_t>(size)))
    ThrowArg(env, "size must be an integer in [1, 2^40]", true);
  size_t length = static_cast<size_t>(size);
  size_t ps = page_size();
  size_t rounded = (length + ps - 1) / ps * ps;
  void* data = nullptr;
  int rc = posix_memalign(&data, ps, rounded);
  if (rc != 0) ThrowErrno(env, rc, "posix_memalign");
  std::memset(data, 0, rounded);
  if (madvise(data, rounded, MADV_DONTFORK) != 0) {
    int err = errno;
    ReleasePages(data, rounded);  // part of the range may have been marked before the failure
    ThrowErrno(env, err, "madvise(MADV_DONTFORK)");
  }
  {
    auto& a = allocations();
    std::lock_guard<std::mutex> lock(a.mu);
    a.by_start[static_cast<const char*>(data)] = Allocation{rounded, false};
    a.bytes += rounded;
  }
  napi_value ab;
  napi_status st = napi_create_external_arraybuffer(
      env, data, length, [](napi_env e, void* d, void*) { FreeBuffer(Napi::Env(e), d); }, nullptr, &ab);
  if (st != napi_ok) {
    FreeBuffer(env, data);
    // napi_no_external_buffers_allowed: a runtime built with the V8 sandbox (not Node.js 20-24 builds).
    Napi::Error e = Napi::Error::New(
        env, "napi_create_external_arraybuffer failed: this runtime does not allow external buffers");
    e.Set("code", Napi::String::New(env, "ERR_NATIVE_EXTERNAL_BUFFER"));
    throw e;
  }
  return Napi::Value(env, ab);
}

Napi::Value IsAddonBuffer(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) return Napi::Boolean::New(env, false);
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  return Napi::Boolean::New(env, ab.ByteLength() > 0 && FindAddonBuffer(ab.Data(), ab.ByteLength()));
}

Napi::Value BufferStats(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object o = Napi::Object::New(env);
  o.Set("count", Napi::Number::New(env, static_cast<double>(AddonBufferCount())));
  o.Set("bytes", Napi::Number::New(env, static_cast<double>(AddonBufferBytes())));
  auto& a = allocations();
  std::lock_guard<std::mutex> lock(a.mu);
  o.Set("kept", Napi::Number::New(env, static_cast<double>(a.kept_count)));
  o.Set("keptBytes", Napi::Number::New(env, static_cast<double>(a.kept_bytes)));
  return o;
}

Napi::Value PageSize(const Napi::CallbackInfo& info) {
  return Napi::Number::New(info.Env(), static_cast<double>(page_size()));
}

}  // namespace rdma_native
