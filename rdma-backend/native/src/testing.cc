// Test hooks that need no RDMA device: an eventfd-backed event source that runs through the same
// FdWatcher / drain-until-EAGAIN / one-batch-per-wake-up / teardown path as a completion channel, the
// work-request parser, and errno -> JS error mapping.
#include "testing.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <string>

#include "buffers.h"
#include "verbs_objects.h"
#include "work_requests.h"

namespace rdma_native {

namespace {
int kTestTag;
}

Napi::Function EventSource::Define(Napi::Env env) {
  return DefineClass(env, "EventSource",
                     {InstanceMethod<&EventSource::Signal>("signal"), InstanceMethod<&EventSource::SetRef>("setRef"),
                      InstanceMethod<&EventSource::Destroy>("destroy"),
                      InstanceMethod<&EventSource::FailNextWake>("failNextWake")});
}

// new EventSource(batch: Uint32Array, onBatch(count)): batch[i] receives the eventfd counter values read
// in one wake-up.
EventSource::EventSource(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<EventSource>(info), Resource(info.Env(), Level::kTestSource) {
  Napi::Env env = info.Env();
  Napi::Uint32Array batch = ArgU32Array(info, 0, "batch");
  Napi::Function fn = ArgFunction(info, 1, "onBatch");
  if (batch.ElementLength() < 1) ThrowArg(env, "batch must hold at least one element", true);
  fd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd_ < 0) ThrowErrno(env, errno, "eventfd");
  batch_ref_ = Napi::Persistent(batch);
  on_batch_ = Napi::Persistent(fn);
  // A constructor that throws runs neither its destructor nor the finalizer: the eventfd goes here.
  try {
    watcher_.Start(env, registry(), fd_, OnReadable, this);
  } catch (...) {
    Release();
    throw;
  }
}

void EventSource::Release() {
  watcher_.Stop();  // before close(): libuv must not poll a closed (or reused) fd
  if (fd_ >= 0) {
    close(fd_);
    fd_ = -1;
  }
  on_batch_.Reset();
  batch_ref_.Reset();
}

void EventSource::OnReadable(void* p) {
  auto* self = static_cast<EventSource*>(p);
  if (self->fd_ < 0) return;
  Napi::Env env = self->Env();
  Napi::HandleScope scope(env);
  // As for a CQ or a CM channel: empty once GC has collected this object, before its finalizer has run.
  // The events are still taken (the fd must not stay readable) and delivered to no one.
  Napi::Object recv = self->Value();
  Napi::Uint32Array batch = self->batch_ref_.Value();
  uint32_t n = 0;
  // Read until EAGAIN (an eventfd yields its whole counter per read, so this is one read unless a signal
  // lands between reads), bounded by the batch capacity.
  while (n < batch.ElementLength()) {
    uint64_t v = 0;
    if (read(self->fd_, &v, sizeof v) != static_cast<ssize_t>(sizeof v)) break;
    batch[n++] = static_cast<uint32_t>(v);
  }
  if (n == 0) return;
  if (int fail = self->fail_next_wake_) {
    // As a failed Node-API call (or an allocation) while an event is turned into JS values: thrown out of
    // the uv callback's body, which must not reach libuv.
    self->fail_next_wake_ = 0;
    if (fail == 1) throw Napi::Error::New(env, "injected failure of a Node-API call");
    throw std::runtime_error("injected C++ failure");
  }
  if (recv.IsEmpty()) return;
  CallFromLoop(env, self->on_batch_, recv, {Napi::Number::New(env, n)});
}

// failNextWake('napi' | 'std'): the next wake-up throws that kind of C++ exception after taking its events.
Napi::Value EventSource::FailNextWake(const Napi::CallbackInfo& info) {
  std::string kind = ArgString(info, 0, "kind");
  if (kind != "napi" && kind != "std") ThrowArg(info.Env(), "kind must be 'napi' or 'std'");
  fail_next_wake_ = kind == "napi" ? 1 : 2;
  return info.Env().Undefined();
}

Napi::Value EventSource::Signal(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t v = ArgU32(info, 0, "value");
  if (v == 0) ThrowArg(env, "value must be at least 1", true);
  if (fd_ < 0) ThrowState(env, "the event source is destroyed");
  uint64_t w = v;
  if (write(fd_, &w, sizeof w) != static_cast<ssize_t>(sizeof w)) ThrowErrno(env, errno, "write(eventfd)");
  return env.Undefined();
}

Napi::Value EventSource::SetRef(const Napi::CallbackInfo& info) {
  watcher_.SetRef(info.Length() > 0 && info[0].ToBoolean().Value());
  return info.Env().Undefined();
}

Napi::Value EventSource::Destroy(const Napi::CallbackInfo& info) {
  Release();
  return info.Env().Undefined();
}

// (desc, first, count, maxSge), the arguments of both parse hooks.
struct ParseArgs {
  explicit ParseArgs(const Napi::CallbackInfo& info)
      : desc(ArgU32Array(info, 0, "desc")),
        first(ArgU32(info, 1, "first")),
        count(ArgU32(info, 2, "count")),
        max_sge(ArgU32(info, 3, "maxSge")) {}
  Napi::Uint32Array desc;
  uint32_t first, count, max_sge;
};

// parseSendWrs(desc, first, count, maxSge): validates like postSend and returns, per request,
// [opcode, flags, numSge, totalLength, remoteAddr, rkey, immOrInvRkey(host order)] so a test can compare.
Napi::Value ParseSendWrs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ParseArgs a(info);
  SendChain chain;
  ParseSendChain(env, a.desc.Data(), a.desc.ElementLength(), a.first, a.count, a.max_sge, chain);
  Napi::Array out = Napi::Array::New(env, chain.wrs.size());
  uint32_t i = 0;
  for (const ibv_send_wr* wr = chain.wrs.data(); wr != nullptr; wr = wr->next, ++i) {
    double total = 0;
    for (int s = 0; s < wr->num_sge; ++s) total += wr->sg_list[s].length;
    uint32_t imm_or_inv = 0;
    uint64_t raddr = 0;
    uint32_t rkey = 0;
    if (wr->opcode == IBV_WR_SEND_WITH_IMM || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) imm_or_inv = ntohl(wr->imm_data);
    if (wr->opcode == IBV_WR_SEND_WITH_INV || wr->opcode == IBV_WR_LOCAL_INV) imm_or_inv = wr->invalidate_rkey;
    if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM || wr->opcode == IBV_WR_RDMA_READ) {
      raddr = wr->wr.rdma.remote_addr;
      rkey = wr->wr.rdma.rkey;
    } else if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      raddr = wr->wr.atomic.remote_addr;
      rkey = wr->wr.atomic.rkey;
    }
    Napi::Object o = Napi::Object::New(env);
    o.Set("wrId", Napi::BigInt::New(env, static_cast<uint64_t>(wr->wr_id)));
    o.Set("opcode", static_cast<double>(wr->opcode));
    o.Set("flags", static_cast<double>(wr->send_flags));
    o.Set("numSge", static_cast<double>(wr->num_sge));
    o.Set("totalLength", total);
    o.Set("remoteAddr", static_cast<double>(raddr));
    o.Set("rkey", static_cast<double>(rkey));
    o.Set("immOrInvRkey", static_cast<double>(imm_or_inv));
    out.Set(i, o);
  }
  return out;
}

Napi::Value ParseRecvWrs(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ParseArgs a(info);
  RecvChain chain;
  ParseRecvChain(env, a.desc.Data(), a.desc.ElementLength(), a.first, a.count, a.max_sge, chain);
  Napi::Array out = Napi::Array::New(env, chain.wrs.size());
  uint32_t i = 0;
  for (const ibv_recv_wr* wr = chain.wrs.data(); wr != nullptr; wr = wr->next, ++i) {
    double total = 0;
    for (int s = 0; s < wr->num_sge; ++s) total += wr->sg_list[s].length;
    Napi::Object o = Napi::Object::New(env);
    o.Set("wrId", Napi::BigInt::New(env, static_cast<uint64_t>(wr->wr_id)));
    o.Set("numSge", static_cast<double>(wr->num_sge));
    o.Set("totalLength", total);
    out.Set(i, o);
  }
  return out;
}

// errnoError(errno, call): the error the addon throws for that failure, returned (not thrown).
Napi::Value MakeErrnoError(const Napi::CallbackInfo& info) {
  int32_t err = ArgI32(info, 0, "errno");
  std::string call = ArgString(info, 1, "call");
  return ErrnoError(info.Env(), err, call.c_str()).Value();
}

// liveResources(): objects of this environment not yet released (leak and lifetime tests).
Napi::Value LiveResources(const Napi::CallbackInfo& info) {
  Registry* r = GetAddonData(info.Env())->registry;
  return Napi::Number::New(info.Env(), r != nullptr ? static_cast<double>(r->live_count()) : 0);
}

// addressOf(arrayBuffer): the address of its data, as a number (page addresses of x86-64 and arm64 user
// space fit in 2^53), so a test can find the buffer's mapping in /proc/self/smaps.
Napi::Value AddressOf(const Napi::CallbackInfo& info) {
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) ThrowArg(info.Env(), "arrayBuffer must be an ArrayBuffer");
  auto addr = reinterpret_cast<uintptr_t>(info[0].As<Napi::ArrayBuffer>().Data());
  return Napi::Number::New(info.Env(), static_cast<double>(addr));
}

// deregisterOrKeep(arrayBuffer, errno): what an Mr's release does with its memory when ibv_dereg_mr
// answers `errno` (0: success), without a device: DeregisterOrKeep with that answer injected in place of
// the call. Returns whether the registration counts as gone.
static thread_local int injected_dereg_result = 0;
static int InjectedDereg(ibv_mr*) { return injected_dereg_result; }

Napi::Value DeregisterOrKeepHook(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) ThrowArg(env, "memory must be an ArrayBuffer");
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  if (ab.ByteLength() == 0 || !FindAddonBuffer(ab.Data(), ab.ByteLength()))
    ThrowArg(env, "memory must come from allocBuffer()");
  injected_dereg_result = ArgI32(info, 1, "errno");
  return Napi::Boolean::New(env, DeregisterOrKeep(nullptr, ab.Data(), InjectedDereg));
}

Napi::Object TestingExports(Napi::Env env) {
  Napi::Object t = Napi::Object::New(env);
  Napi::Function es = EventSource::Define(env);
  GetAddonData(env)->event_source = Napi::Persistent(es);
  t.Set("EventSource", es);
  t.Set("parseSendWrs", Napi::Function::New<ParseSendWrs>(env, "parseSendWrs"));
  t.Set("parseRecvWrs", Napi::Function::New<ParseRecvWrs>(env, "parseRecvWrs"));
  t.Set("errnoError", Napi::Function::New<MakeErrnoError>(env, "errnoError"));
  t.Set("liveResources", Napi::Function::New<LiveResources>(env, "liveResources"));
  t.Set("addressOf", Napi::Function::New<AddressOf>(env, "addressOf"));
  t.Set("deregisterOrKeep", Napi::Function::New<DeregisterOrKeepHook>(env, "deregisterOrKeep"));
  // recordTeardownFailure(call, errno): what a failed teardown call inside a Release() records.
  t.Set("recordTeardownFailure", Napi::Function::New(env, [](const Napi::CallbackInfo& info) -> Napi::Value {
          RecordTeardownFailure(info[0].As<Napi::String>().Utf8Value().c_str(), ArgI32(info, 1, "errno"));
          return info.Env().Undefined();
        }, "recordTeardownFailure"));
  (void)kTestTag;
  return t;
}

}  // namespace rdma_native
