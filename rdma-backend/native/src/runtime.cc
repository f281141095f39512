#include "runtime.h"

#include <fcntl.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>
#include <algorithm>
#include <cstdio>
#include <exception>

namespace rdma_native {

// ---- Resource / Registry ----------------------------------------------------------------------------

Resource::Resource(Napi::Env env, Level level) : registry_(Registry::Get(env)), level_(level) {
  if (registry_ != nullptr) registry_->Link(this);
}

Resource::~Resource() {
  if (registry_ != nullptr) registry_->Unlink(this);
}

Registry* Registry::Get(Napi::Env env) {
  AddonData* data = GetAddonData(env);
  return data != nullptr ? data->registry : nullptr;
}

Registry* Registry::Create(Napi::Env env) {
  auto* r = new Registry();
  r->env_ = env;
  if (napi_get_uv_event_loop(env, &r->loop_) != napi_ok ||
      napi_add_async_cleanup_hook(env, OnCleanup, r, &r->hook_) != napi_ok) {
    delete r;
    NAPI_THROW(Napi::Error::New(env, "rdma_native: cannot attach to the Node.js environment"), nullptr);
  }
  return r;
}

void Registry::Link(Resource* r) {
  r->next_ = head_;
  r->prev_ = nullptr;
  if (head_ != nullptr) head_->prev_ = r;
  head_ = r;
  ++live_;
}

void Registry::Unlink(Resource* r) {
  if (r->prev_ != nullptr) r->prev_->next_ = r->next_;
  if (r->next_ != nullptr) r->next_->prev_ = r->prev_;
  if (head_ == r) head_ = r->next_;
  r->prev_ = r->next_ = nullptr;
  r->registry_ = nullptr;
  --live_;
}

void Registry::OnCleanup(napi_async_cleanup_hook_handle handle, void* arg) {
  auto* self = static_cast<Registry*>(arg);
  self->tearing_down_ = true;
  // From now on nothing reaches the registry through the env (instance data may be freed before the
  // last poll handle has closed).
  if (AddonData* data = GetAddonData(Napi::Env(self->env_))) data->registry = nullptr;
  std::vector<Resource*> all;
  for (Resource* r = self->head_; r != nullptr; r = r->next_) all.push_back(r);
  std::stable_sort(all.begin(), all.end(),
                   [](Resource* a, Resource* b) { return static_cast<int>(a->level()) < static_cast<int>(b->level()); });
  for (Resource* r : all) {
    r->Release();
    self->Unlink(r);  // the JS wrapper may be finalized later; it must not touch the registry then
  }
  self->MaybeFinish();
}

void Registry::CloseDone() {
  --pending_closes_;
  if (tearing_down_) MaybeFinish();
}

void Registry::MaybeFinish() {
  if (pending_closes_ > 0 || hook_ == nullptr) return;
  napi_async_cleanup_hook_handle h = hook_;
  hook_ = nullptr;
  delete this;
  napi_remove_async_cleanup_hook(h);
}

// ---- FdWatcher -----------------------------------------------------------------------------------

FdWatcher::~FdWatcher() { Stop(); }

void FdWatcher::Start(Napi::Env env, Registry* registry, int fd, Callback cb, void* owner) {
  if (registry == nullptr) ThrowState(env, "the Node.js environment is shutting down");
  auto* h = new uv_poll_t();
  int rc = uv_poll_init(registry->loop(), h, fd);
  if (rc != 0) {
    delete h;
    ThrowErrno(env, -rc, "uv_poll_init");
  }
  h->data = this;
  rc = uv_poll_start(h, UV_READABLE, OnPoll);
  handle_ = h;
  registry_ = registry;
  cb_ = cb;
  owner_ = owner;
  if (rc != 0) {
    Stop();
    ThrowErrno(env, -rc, "uv_poll_start");
  }
}

void FdWatcher::OnPoll(uv_poll_t* handle, int status, int events) {
  auto* self = static_cast<FdWatcher*>(handle->data);
  if (self == nullptr || self->cb_ == nullptr) return;
  // Taken before the callback, which may destroy its owner (and this watcher's state with it).
  napi_env env = self->registry_ != nullptr ? self->registry_->env() : nullptr;
  // status < 0 (e.g. EBADF) still calls the owner: its non-blocking read reports the real error.
  try {
    self->cb_(self->owner_);
  } catch (...) {
    ReportLoopFailure(env, "an event callback");
  }
}

void FdWatcher::OnClose(uv_handle_t* handle) {
  auto* registry = static_cast<Registry*>(handle->data);
  delete reinterpret_cast<uv_poll_t*>(handle);
  if (registry != nullptr) registry->CloseDone();
}

void FdWatcher::Stop() {
  if (handle_ == nullptr) return;
  uv_poll_stop(handle_);
  // From here the handle belongs to libuv until OnClose; it carries the registry to report completion.
  handle_->data = registry_;
  if (registry_ != nullptr) registry_->ClosePending();
  uv_close(reinterpret_cast<uv_handle_t*>(handle_), OnClose);
  handle_ = nullptr;
  cb_ = nullptr;
  owner_ = nullptr;
}

void FdWatcher::SetRef(bool ref) {
  if (handle_ == nullptr) return;
  if (ref)
    uv_ref(reinterpret_cast<uv_handle_t*>(handle_));
  else
    uv_unref(reinterpret_cast<uv_handle_t*>(handle_));
}

int SetNonBlocking(int fd) {
  int flags = fcntl(fd, F_GETFL);
  if (flags < 0) return errno;
  if (fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0) return errno;
  return 0;
}

// ---- errors -------------------------------------------------------------------------------------

const char* ErrnoName(int err) {
  switch (err) {
#define E(x) \
  case x:    \
    return #x;
    E(EPERM) E(ENOENT) E(ESRCH) E(EINTR) E(EIO) E(ENXIO) E(E2BIG) E(EBADF) E(EAGAIN) E(ENOMEM) E(EACCES)
    E(EFAULT) E(EBUSY) E(EEXIST) E(ENODEV) E(EINVAL) E(ENFILE) E(EMFILE) E(ENOSPC) E(ERANGE) E(ENOSYS)
    E(ENODATA) E(ETIME) E(EPROTO) E(EOPNOTSUPP) E(EADDRINUSE) E(EADDRNOTAVAIL) E(ENETDOWN) E(ENETUNREACH)
    E(ECONNABORTED) E(ECONNRESET) E(ENOBUFS) E(EISCONN) E(ENOTCONN) E(ETIMEDOUT) E(ECONNREFUSED)
    E(EHOSTUNREACH) E(EALREADY) E(EINPROGRESS) E(ECANCELED) E(EAFNOSUPPORT)
#undef E
    default:
      return "EUNKNOWN";
  }
}

Napi::Error ErrnoError(Napi::Env env, int err, const char* call) {
  std::string msg = std::string(call) + ": " + std::strerror(err) + " (" + ErrnoName(err) + ")";
  Napi::Error e = Napi::Error::New(env, msg);
  e.Set("code", Napi::String::New(env, ErrnoName(err)));
  e.Set("errno", Napi::Number::New(env, err));
  e.Set("syscall", Napi::String::New(env, call));
  return e;
}

void ThrowErrno(Napi::Env env, int err, const char* call) { throw ErrnoError(env, err, call); }

namespace {
struct TeardownFailure {
  double count = 0;
  int last_errno = 0;
};
// Process-wide (worker threads share the addon's statics), so behind a mutex; touched only on failures.
std::mutex teardown_mutex;
std::map<std::string, TeardownFailure> teardown_failures;
}  // namespace

void RecordTeardownFailure(const char* call, int err) {
  std::lock_guard<std::mutex> lock(teardown_mutex);
  TeardownFailure& f = teardown_failures[call];
  f.count += 1;
  f.last_errno = err;
}

// teardownFailures(): { [call]: { count, lastErrno } } for every teardown call that ever failed.
Napi::Value TeardownFailures(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Object out = Napi::Object::New(env);
  std::lock_guard<std::mutex> lock(teardown_mutex);
  for (const auto& [call, f] : teardown_failures) {
    Napi::Object e = Napi::Object::New(env);
    e.Set("count", Napi::Number::New(env, f.count));
    e.Set("lastErrno", Napi::String::New(env, ErrnoName(f.last_errno)));
    out.Set(call, e);
  }
  return out;
}

void ThrowArg(Napi::Env env, const std::string& message, bool range) {
  Napi::Error e = range ? static_cast<Napi::Error>(Napi::RangeError::New(env, message))
                        : static_cast<Napi::Error>(Napi::TypeError::New(env, message));
  e.Set("code", Napi::String::New(env, "ERR_NATIVE_ARG"));
  throw e;
}

void ThrowState(Napi::Env env, const std::string& message) {
  Napi::Error e = Napi::Error::New(env, message);
  e.Set("code", Napi::String::New(env, "ERR_NATIVE_STATE"));
  throw e;
}

static Napi::Value Arg(const Napi::CallbackInfo& info, size_t i) {
  return i < info.Length() ? info[i] : info.Env().Undefined();
}

double ArgNumber(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsNumber()) ThrowArg(info.Env(), std::string(name) + " must be a number");
  return v.As<Napi::Number>().DoubleValue();
}

uint32_t ArgU32(const Napi::CallbackInfo& info, size_t i, const char* name) {
  double d = ArgNumber(info, i, name);
  if (!(d >= 0 && d <= 4294967295.0) || d != static_cast<double>(static_cast<uint64_t>(d)))
    ThrowArg(info.Env(), std::string(name) + " must be an integer in [0, 2^32)", true);
  return static_cast<uint32_t>(d);
}

int32_t ArgI32(const Napi::CallbackInfo& info, size_t i, const char* name) {
  double d = ArgNumber(info, i, name);
  if (!(d >= -2147483648.0 && d <= 2147483647.0) || d != static_cast<double>(static_cast<int64_t>(d)))
    ThrowArg(info.Env(), std::string(name) + " must be a 32-bit integer", true);
  return static_cast<int32_t>(d);
}

std::string ArgString(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsString()) ThrowArg(info.Env(), std::string(name) + " must be a string");
  return v.As<Napi::String>().Utf8Value();
}

Napi::Function ArgFunction(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsFunction()) ThrowArg(info.Env(), std::string(name) + " must be a function");
  return v.As<Napi::Function>();
}

Napi::Uint32Array ArgU32Array(const Napi::CallbackInfo& info, size_t i, const char* name) {
  Napi::Value v = Arg(info, i);
  if (!v.IsTypedArray() || v.As<Napi::TypedArray>().TypedArrayType() != napi_uint32_array)
    ThrowArg(info.Env(), std::string(name) + " must be a Uint32Array");
  return v.As<Napi::Uint32Array>();
}

namespace {

// The message of the exception being handled, and its JS value when it is a Napi::Error.
std::string CurrentExceptionMessage(napi_value* js) {
  *js = nullptr;
  try {
    throw;
  } catch (const Napi::Error& e) {
    try {
      *js = e.Value();
    } catch (...) {
    }
    return e.what();
  } catch (const std::exception& e) {
    return e.what();
  } catch (...) {
    return "unknown C++ exception";
  }
}

}  // namespace

void ReportLoopFailure(napi_env env, const char* where) noexcept {
  std::string text = "rdma_native: ";
  napi_value cause = nullptr;
  napi_handle_scope scope = nullptr;
  bool scoped = env != nullptr && napi_open_handle_scope(env, &scope) == napi_ok;
  try {
    text += where;
    text += " failed: ";
    text += CurrentExceptionMessage(&cause);
  } catch (...) {  // std::bad_alloc building the text
  }
  bool reported = false;
  napi_value msg, code, err;
  if (scoped && napi_create_string_utf8(env, text.c_str(), text.size(), &msg) == napi_ok &&
      napi_create_string_utf8(env, "ERR_NATIVE_CALLBACK", NAPI_AUTO_LENGTH, &code) == napi_ok &&
      napi_create_error(env, code, msg, &err) == napi_ok) {
    if (cause != nullptr) napi_set_named_property(env, err, "cause", cause);
    reported = napi_fatal_exception(env, err) == napi_ok;
  }
  if (!reported) std::fprintf(stderr, "%s\n", text.c_str());
  if (scoped) napi_close_handle_scope(env, scope);
}

void CallFromLoop(Napi::Env env, Napi::FunctionReference& fn, Napi::Object recv,
                  std::initializer_list<napi_value> args) {
  if (fn.IsEmpty()) return;
  Napi::HandleScope scope(env);
  try {
    fn.MakeCallback(recv, args);
  } catch (const Napi::Error& e) {
    napi_fatal_exception(env, e.Value());
  }
}

}  // namespace rdma_native
