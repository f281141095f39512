// Shared machinery of the addon: the per-environment registry of live verbs objects (for ordered teardown
// when the environment exits), the uv_poll watcher used for every event fd, and errno -> JS error mapping.
#pragma once

#include <napi.h>
#include <uv.h>

#include <cerrno>
#include <cstdint>
#include <string>

namespace rdma_native {

// Destroy order at environment teardown: lower levels go first, so a QP is destroyed before the CQs and
// the PD it uses, an MR before its PD, a CM id before its event channel. Mirrors the order the verbs
// API requires (ibv_dealloc_pd / ibv_destroy_cq fail with EBUSY while children exist).
enum class Level : int {
  kQp = 0,
  kCmId = 1,
  kMw = 2,
  kMr = 3,
  kCq = 4,
  kPd = 5,
  kContext = 6,
  kCmChannel = 7,
  kTestSource = 8,
};

class Registry;

// Per-env instance data: the registry and the constructor of every class, so native code can create
// JS objects (a CM id for an incoming connection, a Pd from a Context...).
struct AddonData {
  Registry* registry = nullptr;
  Napi::FunctionReference context, pd, mr, mw, cq, qp, cm_channel, cm_id, event_source;
};
inline AddonData* GetAddonData(Napi::Env env) { return env.GetInstanceData<AddonData>(); }

// A native resource owned by a JS object. Release() frees it and is idempotent; it runs from the explicit
// destroy() method, from the GC finalizer, or from the environment cleanup hook, whichever comes first.
class Resource {
 public:
  Resource(Napi::Env env, Level level);
  virtual ~Resource();
  Resource(const Resource&) = delete;
  Resource& operator=(const Resource&) = delete;

  virtual void Release() = 0;
  Level level() const { return level_; }

  // Children (MRs of a PD, QPs on a CQ...) that must be destroyed before this resource.
  void AddChild() { ++children_; }
  void RemoveChild() {
    if (children_ > 0) --children_;
  }
  int children() const { return children_; }

  Registry* registry() const { return registry_; }

 private:
  friend class Registry;
  Registry* registry_;
  Level level_;
  int children_ = 0;
  Resource* prev_ = nullptr;
  Resource* next_ = nullptr;
};

// Per-napi_env state: the live resources and the uv loop. Torn down by an async cleanup hook (Node-API 8)
// that releases every resource in Level order and waits for the uv_poll handles to finish closing.
class Registry {
 public:
  // The registry of env, or nullptr once teardown has begun (objects created then are not tracked).
  static Registry* Get(Napi::Env env);
  static Registry* Create(Napi::Env env);

  void Link(Resource* r);
  void Unlink(Resource* r);
  uv_loop_t* loop() const { return loop_; }
  napi_env env() const { return env_; }
  bool tearing_down() const { return tearing_down_; }
  size_t live_count() const { return live_; }

  void ClosePending() { ++pending_closes_; }
  void CloseDone();

 private:
  static void OnCleanup(napi_async_cleanup_hook_handle handle, void* arg);
  void MaybeFinish();

  napi_env env_ = nullptr;
  uv_loop_t* loop_ = nullptr;
  Resource* head_ = nullptr;
  size_t live_ = 0;
  int pending_closes_ = 0;
  bool tearing_down_ = false;
  napi_async_cleanup_hook_handle hook_ = nullptr;
};

// Watches one non-blocking fd for readability with uv_poll on the JS thread. Stop() stops the poll
// handle before the owner closes the fd (libuv requires it) and frees the handle in its close callback.
// The owner's callback runs inside a catch-all: a C++ exception unwinding into libuv would be
// std::terminate (see ReportLoopFailure).
//
// A callback that uses the owner's JS object (ObjectWrap::Value()) must check IsEmpty() first: once GC
// has collected the object its weak reference is cleared, but the finalizer that releases the owner runs
// later (Node-API defers it to the check phase), so a wake-up can come in between.
class FdWatcher {
 public:
  using Callback = void (*)(void* owner);
  FdWatcher() = default;
  ~FdWatcher();
  FdWatcher(const FdWatcher&) = delete;
  FdWatcher& operator=(const FdWatcher&) = delete;

  // Throws a JS error when uv_poll_init fails (for example, an fd epoll cannot watch).
  void Start(Napi::Env env, Registry* registry, int fd, Callback cb, void* owner);
  void Stop();
  void SetRef(bool ref);
  bool active() const { return handle_ != nullptr; }

 private:
  static void OnPoll(uv_poll_t* handle, int status, int events);
  static void OnClose(uv_handle_t* handle);
  uv_poll_t* handle_ = nullptr;
  Registry* registry_ = nullptr;
  Callback cb_ = nullptr;
  void* owner_ = nullptr;
};

// Makes an fd non-blocking; returns 0 or an errno.
int SetNonBlocking(int fd);

// The JS error for a failed verbs / rdma_cm / libc call: message "<call>: <strerror> (<ERRNO>)",
// properties code (errno name, e.g. 'ENOMEM'), errno (number), syscall (the call).
Napi::Error ErrnoError(Napi::Env env, int err, const char* call);
[[noreturn]] void ThrowErrno(Napi::Env env, int err, const char* call);
// A caller broke the argument contract: TypeError/RangeError with code 'ERR_NATIVE_ARG'.
[[noreturn]] void ThrowArg(Napi::Env env, const std::string& message, bool range = false);
// An object used after destroy(), or destroyed while it still has children: code 'ERR_NATIVE_STATE'.
[[noreturn]] void ThrowState(Napi::Env env, const std::string& message);

const char* ErrnoName(int err);

// Teardown calls that failed inside a Release() (ibv_dereg_mr, ibv_dealloc_pd, ibv_destroy_cq...): a
// finalizer or the environment's cleanup hook cannot throw, so each failure is counted, per call, with
// its last errno, for the addon's teardownFailures(); a resource left behind is then visible, not silent.
void RecordTeardownFailure(const char* call, int err);
Napi::Value TeardownFailures(const Napi::CallbackInfo& info);
// The result `rc` of teardown call `call`, counted when it failed: the ibv_* calls return the errno, the
// rdma_* ones -1 with errno set.
inline void CheckTeardown(const char* call, int rc) {
  if (rc != 0) RecordTeardownFailure(call, rc > 0 ? rc : errno);
}

// Argument readers that validate and throw ERR_NATIVE_ARG.
uint32_t ArgU32(const Napi::CallbackInfo& info, size_t i, const char* name);
int32_t ArgI32(const Napi::CallbackInfo& info, size_t i, const char* name);
double ArgNumber(const Napi::CallbackInfo& info, size_t i, const char* name);
std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* name);
Napi::Function ArgFunction(const Napi::CallbackInfo& info, size_t i, const char* name);
Napi::Uint32Array ArgU32Array(const Napi::CallbackInfo& info, size_t i, const char* name);

// A C++ exception that escaped a uv callback's body (a Node-API call that failed while an event was being
// turned into JS values, std::bad_alloc...), caught before it reaches libuv. Reported as a callback's own
// throw is (CallFromLoop): a fatal exception, 'uncaughtException', here an Error with code
// 'ERR_NATIVE_CALLBACK' naming `where`, the original as its cause; on stderr if even that fails.
void ReportLoopFailure(napi_env env, const char* where) noexcept;  // call from inside a catch block

// Invokes a JS callback from a uv callback (no JS on the stack): opens a handle scope, uses
// MakeCallback so async_hooks and microtasks behave, and routes a thrown exception to 'uncaughtException'.
void CallFromLoop(Napi::Env env, Napi::FunctionReference& fn, Napi::Object recv,
                  std::initializer_list<napi_value> args);

}  // namespace rdma_native
