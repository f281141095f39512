#include "verbs_objects.h"

#include <sys/resource.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "buffers.h"

namespace rdma_native {

namespace {

// Objects are created by native code only: the first constructor argument is this tag in an External,
// so `new Pd()` from JS fails instead of producing an object with no resource.
int kNativeTag;

template <typename T>
T* Unwrapped(const Napi::CallbackInfo& info, size_t i) {
  if (i >= info.Length() || !info[i].IsExternal()) return nullptr;
  return info[i].As<Napi::External<T>>().Data();
}

void RequireNativeCall(const Napi::CallbackInfo& info, const char* cls) {
  if (info.Length() < 1 || !info[0].IsExternal() ||
      info[0].As<Napi::External<int>>().Data() != &kNativeTag)
    ThrowArg(info.Env(), std::string(cls) + " objects are created by the addon, not with new");
}

Napi::External<int> Tag(Napi::Env env) { return Napi::External<int>::New(env, &kNativeTag); }

template <typename T>
T* UnwrapArg(const Napi::CallbackInfo& info, size_t i, const char* name, Napi::FunctionReference& ctor) {
  if (i >= info.Length() || !info[i].IsObject() || !info[i].As<Napi::Object>().InstanceOf(ctor.Value()))
    ThrowArg(info.Env(), std::string(name) + " has the wrong type");
  return T::Unwrap(info[i].As<Napi::Object>());
}

template <typename T>
T* UnwrapObj(Napi::Env env, Napi::Object o, const char* name, Napi::FunctionReference& ctor) {
  if (!o.InstanceOf(ctor.Value())) ThrowArg(env, std::string(name) + " has the wrong type");
  return T::Unwrap(o);
}

uint32_t OptU32(Napi::Env env, Napi::Object o, const char* key, uint32_t dflt) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return dflt;
  if (!v.IsNumber()) ThrowArg(env, std::string(key) + " must be a number");
  double d = v.As<Napi::Number>().DoubleValue();
  if (!(d >= 0 && d <= 4294967295.0) || d != std::floor(d))
    ThrowArg(env, std::string(key) + " must be an integer in [0, 2^32)", true);
  return static_cast<uint32_t>(d);
}

std::string Guid(__be64 guid) {
  uint64_t g = be64toh(guid);
  char buf[20];
  std::snprintf(buf, sizeof buf, "%04x:%04x:%04x:%04x", static_cast<unsigned>(g >> 48 & 0xffff),
                static_cast<unsigned>(g >> 32 & 0xffff), static_cast<unsigned>(g >> 16 & 0xffff),
                static_cast<unsigned>(g & 0xffff));
  return buf;
}

void ThrowIfChildren(Napi::Env env, Resource& r, const char* what) {
  if (r.children() > 0)
    ThrowState(env, std::string("cannot destroy the ") + what + ": " + std::to_string(r.children()) +
                        " object(s) created from it are still alive; destroy them first");
}

}  // namespace

// ---- module functions --------------------------------------------------------------------------

// listDevices(): [{name, nodeType, transportType, guid}] or throws the errno of ibv_get_device_list
// (ENOSYS when the kernel has no RDMA support at all).
Napi::Value ListDevices(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) ThrowErrno(env, errno != 0 ? errno : ENODEV, "ibv_get_device_list");
  Napi::Array out = Napi::Array::New(env, n);
  for (int i = 0; i < n; ++i) {
    Napi::Object d = Napi::Object::New(env);
    d.Set("name", ibv_get_device_name(list[i]));
    d.Set("nodeType", static_cast<double>(list[i]->node_type));
    d.Set("transportType", static_cast<double>(list[i]->transport_type));
    d.Set("guid", Guid(ibv_get_device_guid(list[i])));
    out.Set(static_cast<uint32_t>(i), d);
  }
  ibv_free_device_list(list);
  return out;
}

// openDevice(name): a Context. Prefers the context rdma_cm opened for that device (a PD must live on the
// same ibv_context as the cm_id's QP); falls back to ibv_open_device when rdma_cm is unavailable.
Napi::Value OpenDevice(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string name = ArgString(info, 0, "name");
  ibv_context* found = nullptr;
  bool owned = false;
  int n = 0;
  ibv_context** cm_list = rdma_get_devices(&n);
  if (cm_list != nullptr) {
    for (int i = 0; i < n && found == nullptr; ++i)
      if (name == ibv_get_device_name(cm_list[i]->device)) found = cm_list[i];
    rdma_free_devices(cm_list);  // frees the array only; the contexts belong to librdmacm for life
  }
  if (found == nullptr) {
    errno = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (list == nullptr) ThrowErrno(env, errno != 0 ? errno : ENODEV, "ibv_get_device_list");
    for (int i = 0; i < n && found == nullptr; ++i) {
      if (name != ibv_get_device_name(list[i])) continue;
      found = ibv_open_device(list[i]);
      if (found == nullptr) {
        int err = errno != 0 ? errno : ENODEV;
        ibv_free_device_list(list);
        ThrowErrno(env, err, "ibv_open_device");
      }
      owned = true;
    }
    ibv_free_device_list(list);
  }
  if (found == nullptr) ThrowErrno(env, ENODEV, ("no RDMA device named " + name).c_str());
  return GetAddonData(env)->context.New(
      {Tag(env), Napi::External<ibv_context>::New(env, found), Napi::Boolean::New(env, owned)});
}

// memlockLimit(): {soft, hard} in bytes (Infinity when unlimited). Registration pins pages and counts
// against RLIMIT_MEMLOCK unless the process has CAP_IPC_LOCK.
Napi::Value MemlockLimit(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  rlimit rl{};
  if (getrlimit(RLIMIT_MEMLOCK, &rl) != 0) ThrowErrno(env, errno, "getrlimit(RLIMIT_MEMLOCK)");
  auto num = [&](rlim_t v) {
    return Napi::Number::New(env, v == RLIM_INFINITY ? INFINITY : static_cast<double>(v));
  };
  Napi::Object o = Napi::Object::New(env);
  o.Set("soft", num(rl.rlim_cur));
  o.Set("hard", num(rl.rlim_max));
  return o;
}

// ---- Context ------------------------------------------------------------------------------------

Napi::Function Context::Define(Napi::Env env) {
  return DefineClass(env, "Context",
                     {InstanceMethod<&Context::Name>("name"), InstanceMethod<&Context::Query>("query"),
                      InstanceMethod<&Context::QueryPort>("queryPort"),
                      InstanceMethod<&Context::AllocPd>("allocPd"),
                      InstanceMethod<&Context::CreateCq>("createCq"),
                      InstanceMethod<&Context::WatchAsyncEvents>("watchAsyncEvents"),
                      InstanceMethod<&Context::SetRef>("setRef"), InstanceMethod<&Context::Close>("close")});
}

Context::Context(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<Context>(info), Resource(info.Env(), Level::kContext) {
  RequireNativeCall(info, "Context");
  ctx_ = Unwrapped<ibv_context>(info, 1);
  owned_ = info[2].As<Napi::Boolean>().Value();
}

void Context::Release() {
  async_watcher_.Stop();
  on_async_.Reset();
  if (ctx_ != nullptr && owned_) CheckTeardown("ibv_close_device", ibv_close_device(ctx_));
  ctx_ = nullptr;
}

ibv_context* Context::get(Napi::Env env) {
  if (ctx_ == nullptr) ThrowState(env, "the device context is closed");
  return ctx_;
}

Napi::Value Context::Name(const Napi::CallbackInfo& info) {
  return Napi::String::New(info.Env(), ibv_get_device_name(get(info.Env())->device));
}

Napi::Value Context::Query(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ibv_device_attr a{};
  int rc = ibv_query_device(get(env), &a);
  if (rc != 0) ThrowErrno(env, rc, "ibv_query_device");
  Napi::Object o = Napi::Object::New(env);
  o.Set("name", ibv_get_device_name(ctx_->device));
  o.Set("nodeType", static_cast<double>(ctx_->device->node_type));
  o.Set("transportType", static_cast<double>(ctx_->device->transport_type));
  o.Set("fwVer", a.fw_ver);
  o.Set("nodeGuid", Guid(a.node_guid));
  o.Set("vendorId", static_cast<double>(a.vendor_id));
  o.Set("vendorPartId", static_cast<double>(a.vendor_part_id));
  o.Set("maxMrSize", static_cast<double>(a.max_mr_size));
  o.Set("pageSizeCap", static_cast<double>(a.page_size_cap));
  o.Set("maxQp", a.max_qp);
  o.Set("maxQpWr", a.max_qp_wr);
  o.Set("deviceCapFlags", static_cast<double>(a.device_cap_flags));
  o.Set("maxSge", a.max_sge);
  o.Set("maxSgeRd", a.max_sge_rd);
  o.Set("maxCq", a.max_cq);
  o.Set("maxCqe", a.max_cqe);
  o.Set("maxMr", a.max_mr);
  o.Set("maxPd", a.max_pd);
  o.Set("maxQpRdAtom", a.max_qp_rd_atom);
  o.Set("maxQpInitRdAtom", a.max_qp_init_rd_atom);
  o.Set("maxMw", a.max_mw);
  o.Set("atomicCap", static_cast<double>(a.atomic_cap));
  o.Set("physPortCnt", static_cast<double>(a.phys_port_cnt));
  // Remote invalidation of per-RPC registrations needs type 2 memory windows in userspace (there is no
  // FRWR in libibverbs); without them the transport invalidates locally.
  bool mw2 = a.max_mw > 0 && (a.device_cap_flags & (IBV_DEVICE_MEM_WINDOW_TYPE_2A | IBV_DEVICE_MEM_WINDOW_TYPE_2B));
  o.Set("memoryWindowType2", Napi::Boolean::New(env, mw2));
  return o;
}

Napi::Value Context::QueryPort(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t port = ArgU32(info, 0, "port");
  if (port < 1 || port > 255) ThrowArg(env, "port must be in [1, 255]", true);
  ibv_port_attr p{};
  int rc = ibv_query_port(get(env), static_cast<uint8_t>(port), &p);
  if (rc != 0) ThrowErrno(env, rc, "ibv_query_port");
  Napi::Object o = Napi::Object::New(env);
  o.Set("state", static_cast<double>(p.state));
  o.Set("maxMtu", static_cast<double>(p.max_mtu));
  o.Set("activeMtu", static_cast<double>(p.active_mtu));
  o.Set("gidTblLen", p.gid_tbl_len);
  o.Set("maxMsgSz", static_cast<double>(p.max_msg_sz));
  o.Set("linkLayer", static_cast<double>(p.link_layer));
  o.Set("lid", static_cast<double>(p.lid));
  return o;
}

Napi::Value Context::AllocPd(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ibv_pd* pd = ibv_alloc_pd(get(env));
  if (pd == nullptr) ThrowErrno(env, errno != 0 ? errno : ENOMEM, "ibv_alloc_pd");
  return GetAddonData(env)->pd.New({Tag(env), Napi::External<ibv_pd>::New(env, pd), Value()});
}

// createCq(cqe, completions: Uint32Array, onWake(count), drainOnWake = true): a CQ with its own
// completion channel, watched. drainOnWake: the CQ is re-armed and drained on every wake-up, and
// onWake(count) receives each batch in `completions` (up to completions.length / WC_STRIDE records),
// or -1 once when the CQ is in error (a failed poll or re-arm).
// Otherwise (the ibv_req_notify_cq pattern of the verbs interface) the CQ starts unarmed, and onWake(0)
// is called once per wake-up after the channel events are taken: the handler re-arms with arm(), then
// polls with poll(max).
Napi::Value Context::CreateCq(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t cqe = ArgU32(info, 0, "cqe");
  Napi::Uint32Array completions = ArgU32Array(info, 1, "completions");
  ArgFunction(info, 2, "onCompletions");
  if (cqe < 1) ThrowArg(env, "cqe must be at least 1", true);
  if (completions.ElementLength() < wc::kStride)
    ThrowArg(env, "completions must hold at least one record (" + std::to_string(wc::kStride) + " words)", true);
  get(env);
  bool drain = info.Length() < 4 || info[3].IsUndefined() || info[3].ToBoolean().Value();
  return GetAddonData(env)->cq.New({Tag(env), Value(), info[0], info[1], info[2], Napi::Boolean::New(env, drain)});
}

// watchAsyncEvents(onEvent(type, element)): element is the QP number for QP events, the port number for
// port events, 0 otherwise. The watcher does not keep the process alive (setRef(true) to change that).
Napi::Value Context::WatchAsyncEvents(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  Napi::Function fn = ArgFunction(info, 0, "onEvent");
  ibv_context* ctx = get(env);
  if (async_watcher_.active()) ThrowState(env, "async events are already watched");
  int rc = SetNonBlocking(ctx->async_fd);
  if (rc != 0) ThrowErrno(env, rc, "fcntl(async_fd, O_NONBLOCK)");
  on_async_ = Napi::Persistent(fn);
  async_watcher_.Start(env, registry(), ctx->async_fd, OnAsyncReadable, this);
  async_watcher_.SetRef(false);
  return env.Undefined();
}

void Context::OnAsyncReadable(void* p) {
  auto* self = static_cast<Context*>(p);
  Napi::Env env = self->Env();
  Napi::HandleScope outer(env);
  // Empty once GC has collected the context's JS object (its finalizer is still to run): the events are
  // still taken and acknowledged, and delivered to no one.
  Napi::Object recv = self->Value();
  // Bounded: a storm of async events is drained over several wake-ups, never a loop without end.
  for (int i = 0; i < 64 && self->ctx_ != nullptr; ++i) {
    ibv_async_event ev{};
    if (ibv_get_async_event(self->ctx_, &ev) != 0) break;  // EAGAIN: drained
    uint32_t element = 0;
    switch (ev.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        element = ev.element.qp != nullptr ? ev.element.qp->qp_num : 0;
        break;
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
      case IBV_EVENT_GID_CHANGE:
        element = static_cast<uint32_t>(ev.element.port_num);
        break;
      case IBV_EVENT_CQ_ERR:
        element = static_cast<uint32_t>(reinterpret_cast<uintptr_t>(ev.element.cq->cq_context));
        break;
      default:
        break;
    }
    int type = ev.event_type;
    ibv_ack_async_event(&ev);  // before JS runs: a destroy() from the callback must not wait on it
    if (recv.IsEmpty()) continue;
    Napi::HandleScope scope(env);
    CallFromLoop(env, self->on_async_, recv, {Napi::Number::New(env, type), Napi::Number::New(env, element)});
  }
}

Napi::Value Context::SetRef(const Napi::CallbackInfo& info) {
  async_watcher_.SetRef(info.Length() > 0 && info[0].ToBoolean().Value());
  return info.Env().Undefined();
}

Napi::Value Context::Close(const Napi::CallbackInfo& info) {
  ThrowIfChildren(info.Env(), *this, "device context");
  Release();
  return info.Env().Undefined();
}

// ---- Pd -----------------------------------------------------------------------------------------

Napi::Function Pd::Define(Napi::Env env) {
  return DefineClass(env, "Pd",
                     {InstanceMethod<&Pd::RegMr>("regMr"), InstanceMethod<&Pd::AllocMw>("allocMw"),
                      InstanceMethod<&Pd::Destroy>("destroy")});
}

Pd::Pd(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Pd>(info), Resource(info.Env(), Level::kPd) {
  RequireNativeCall(info, "Pd");
  pd_ = Unwrapped<ibv_pd>(info, 1);
  parent_ = Context::Unwrap(info[2].As<Napi::Object>());
  parent_ref_ = Napi::Persistent(info[2].As<Napi::Object>());
  parent_->AddChild();
}

void Pd::Release() {
  if (pd_ != nullptr) {
    CheckTeardown("ibv_dealloc_pd", ibv_dealloc_pd(pd_));
    pd_ = nullptr;
    parent_->RemoveChild();
  }
  parent_ref_.Reset();
}

ibv_pd* Pd::get(Napi::Env env) {
  if (pd_ == nullptr) ThrowState(env, "the protection domain is destroyed");
  return pd_;
}

// regMr(memory: ArrayBuffer from allocBuffer, offset, length, access): an Mr with lkey, rkey, addr.
Napi::Value Pd::RegMr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  if (info.Length() < 1 || !info[0].IsArrayBuffer()) ThrowArg(env, "memory must be an ArrayBuffer");
  Napi::ArrayBuffer ab = info[0].As<Napi::ArrayBuffer>();
  double offset = ArgU32(info, 1, "offset");
  double length = ArgNumber(info, 2, "length");
  uint32_t access = ArgU32(info, 3, "access");
  if (!(length >= 1) || length != std::floor(length) || offset + length > ab.ByteLength())
    ThrowArg(env, "offset + length must lie within the ArrayBuffer and length must be >= 1", true);
  char* start = static_cast<char*>(ab.Data()) + static_cast<size_t>(offset);
  if (!FindAddonBuffer(start, static_cast<size_t>(length)))
    ThrowArg(env, "only memory from allocBuffer() can be registered (never a Buffer pool slab)");
  constexpr uint32_t kKnownAccess = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                    IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED |
                                    IBV_ACCESS_ON_DEMAND | IBV_ACCESS_RELAXED_ORDERING;
  if ((access & ~kKnownAccess) != 0) ThrowArg(env, "access has unknown flags", true);
  ibv_pd* pd = get(env);
  errno = 0;
  ibv_mr* mr = ibv_reg_mr(pd, start, static_cast<size_t>(length), static_cast<int>(access));
  if (mr == nullptr) ThrowErrno(env, errno != 0 ? errno : ENOMEM, "ibv_reg_mr");
  return GetAddonData(env)->mr.New(
      {Tag(env), Napi::External<ibv_mr>::New(env, mr), Value(), ab, Napi::Number::New(env, access)});
}

// allocMw(type): a memory window (type 1 or 2) for remote access that can be invalidated remotely.
Napi::Value Pd::AllocMw(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  uint32_t type = ArgU32(info, 0, "type");
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) ThrowArg(env, "type must be 1 or 2", true);
  errno = 0;
  ibv_mw* mw = ibv_alloc_mw(get(env), static_cast<ibv_mw_type>(type));
  if (mw == nullptr) ThrowErrno(env, errno != 0 ? errno : EOPNOTSUPP, "ibv_alloc_mw");
  return GetAddonData(env)->mw.New({Tag(env), Napi::External<ibv_mw>::New(env, mw), Value()});
}

Napi::Value Pd::Destroy(const Napi::CallbackInfo& info) {
  ThrowIfChildren(info.Env(), *this, "protection domain");
  Release();
  return info.Env().Undefined();
}

// ---- Mr -----------------------------------------------------------------------------------------

Napi::Function Mr::Define(Napi::Env env) {
  return DefineClass(env, "Mr", {InstanceMethod<&Mr::Rereg>("rereg"), InstanceMethod<&Mr::Destroy>("destroy")});
}

Mr::Mr(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Mr>(info), Resource(info.Env(), Level::kMr) {
  RequireNativeCall(info, "Mr");
  Napi::Env env = info.Env();
  mr_ = Unwrapped<ibv_mr>(info, 1);
  parent_ = Pd::Unwrap(info[2].As<Napi::Object>());
  parent_ref_ = Napi::Persistent(info[2].As<Napi::Object>());
  memory_ref_ = Napi::Persistent(info[3].As<Napi::ArrayBuffer>());
  memory_ = info[3].As<Napi::ArrayBuffer>().Data();
  access_ = info[4].As<Napi::Number>().Int32Value();
  parent_->AddChild();
  SetKeys();
  Napi::Object self = info.This().As<Napi::Object>();
  // User-space virtual addresses fit in 47 bits, so a JS number holds them exactly.
  self.Set("addr", Napi::Number::New(env, static_cast<double>(reinterpret_cast<uintptr_t>(mr_->addr))));
  self.Set("length", Napi::Number::New(env, static_cast<double>(mr_->length)));
}

void Mr::SetKeys() {
  Napi::Env env = Env();
  Napi::Object self = Value();
  self.Set("lkey", Napi::Number::New(env, mr_->lkey));
  self.Set("rkey", Napi::Number::New(env, mr_->rkey));
}

// rereg(): a new registration of the same bytes (new lkey/rkey; the old keys die with the old one). The
// FRWR-style "rekey before reuse" where the device offers no type 2 memory windows.
Napi::Value Mr::Rereg(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ibv_mr* old = get(env);
  void* addr = old->addr;
  size_t length = old->length;
  ibv_pd* pd = old->pd;
  errno = 0;
  ibv_mr* fresh = ibv_reg_mr(pd, addr, length, access_);  // registered before the old one goes: no gap
  if (fresh == nullptr) ThrowErrno(env, errno != 0 ? errno : ENOMEM, "ibv_reg_mr");
  int rc = ibv_dereg_mr(old);
  if (rc != 0) {
    // ibv_dereg_mr(3) failed: the old registration is still there and still pinned. It stays this
    // object's (destroy() or the finalizer retries it) and the fresh one goes, so no registration is left
    // without an owner; the caller sees the rekey fail with the old keys still in force. Should the fresh
    // one refuse to go as well, it lives on over these bytes with no owner: they are kept for ever.
    DeregisterOrKeep(fresh, memory_);
    ThrowErrno(env, rc, "ibv_dereg_mr");
  }
  mr_ = fresh;
  SetKeys();
  return env.Undefined();
}

bool DeregisterOrKeep(ibv_mr* mr, const void* memory, DeregMrFn dereg) {
  int rc = dereg(mr);
  if (rc == 0) return true;
  // Still registered: memory_ref_ going (the ArrayBuffer collectable) must not mean the pages go back to
  // malloc, where the next allocation would receive a peer's RDMA Write through the still-valid rkey.
  CheckTeardown("ibv_dereg_mr", rc);
  KeepAddonBuffer(memory);
  return false;
}

void Mr::Release() {
  if (mr_ != nullptr) {
    // A release cannot throw or retry: a registration that will not go keeps its memory for ever.
    DeregisterOrKeep(mr_, memory_);
    mr_ = nullptr;
    parent_->RemoveChild();
  }
  parent_ref_.Reset();
  memory_ref_.Reset();
}

ibv_mr* Mr::get(Napi::Env env) {
  if (mr_ == nullptr) ThrowState(env, "the memory region is deregistered");
  return mr_;
}

Napi::Value Mr::Destroy(const Napi::CallbackInfo& info) {
  if (mr_ != nullptr) {
    int rc = ibv_dereg_mr(mr_);
    if (rc != 0) ThrowErrno(info.Env(), rc, "ibv_dereg_mr");
    mr_ = nullptr;
    parent_->RemoveChild();
  }
  Release();
  return info.Env().Undefined();
}

// ---- Mw -----------------------------------------------------------------------------------------

Napi::Function Mw::Define(Napi::Env env) {
  return DefineClass(env, "Mw", {InstanceMethod<&Mw::Rkey>("rkey"), InstanceMethod<&Mw::Destroy>("destroy")});
}

Mw::Mw(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Mw>(info), Resource(info.Env(), Level::kMw) {
  RequireNativeCall(info, "Mw");
  mw_ = Unwrapped<ibv_mw>(info, 1);
  parent_ = Pd::Unwrap(info[2].As<Napi::Object>());
  parent_ref_ = Napi::Persistent(info[2].As<Napi::Object>());
  parent_->AddChild();
}

void Mw::Release() {
  if (mw_ != nullptr) {
    CheckTeardown("ibv_dealloc_mw", ibv_dealloc_mw(mw_));
    mw_ = nullptr;
    parent_->RemoveChild();
  }
  parent_ref_.Reset();
}

ibv_mw* Mw::get(Napi::Env env) {
  if (mw_ == nullptr) ThrowState(env, "the memory window is deallocated");
  return mw_;
}

Napi::Value Mw::Rkey(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), get(info.Env())->rkey); }

Napi::Value Mw::Destroy(const Napi::CallbackInfo& info) {
  Release();
  return info.Env().Undefined();
}

// ---- Cq -----------------------------------------------------------------------------------------

Napi::Function Cq::Define(Napi::Env env) {
  return DefineClass(env, "Cq",
                     {InstanceMethod<&Cq::Poll>("poll"), InstanceMethod<&Cq::Arm>("arm"), InstanceMethod<&Cq::SetRef>("setRef"),
                      InstanceMethod<&Cq::Destroy>("destroy")});
}

Cq::Cq(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Cq>(info), Resource(info.Env(), Level::kCq) {
  RequireNativeCall(info, "Cq");
  Napi::Env env = info.Env();
  parent_ = Context::Unwrap(info[1].As<Napi::Object>());
  uint32_t cqe = info[2].As<Napi::Number>().Uint32Value();
  Napi::Uint32Array completions = info[3].As<Napi::Uint32Array>();
  ibv_context* ctx = parent_->get(env);
  drain_on_wake_ = info[5].As<Napi::Boolean>().Value();
  static uint32_t next_id = 1;
  uint32_t id = next_id++;

  errno = 0;
  channel_ = ibv_create_comp_channel(ctx);
  if (channel_ == nullptr) ThrowErrno(env, errno != 0 ? errno : ENOMEM, "ibv_create_comp_channel");
  const char* failed = "fcntl(completion channel fd, O_NONBLOCK)";
  int rc = SetNonBlocking(channel_->fd);
  if (rc == 0) {
    // cq_context carries an id so IBV_EVENT_CQ_ERR can name the CQ to JS
    failed = "ibv_create_cq";
    errno = 0;
    cq_ = ibv_create_cq(ctx, static_cast<int>(cqe), reinterpret_cast<void*>(static_cast<uintptr_t>(id)), channel_, 0);
    if (cq_ == nullptr) rc = errno != 0 ? errno : ENOMEM;
  }
  if (rc == 0 && drain_on_wake_) {
    failed = "ibv_req_notify_cq";
    rc = ibv_req_notify_cq(cq_, 0);
  }
  if (rc != 0) {
    if (cq_ != nullptr) CheckTeardown("ibv_destroy_cq", ibv_destroy_cq(cq_));
    CheckTeardown("ibv_destroy_comp_channel", ibv_destroy_comp_channel(channel_));
    cq_ = nullptr;
    channel_ = nullptr;
    ThrowErrno(env, rc, failed);
  }
  parent_ref_ = Napi::Persistent(info[1].As<Napi::Object>());
  parent_->AddChild();
  // From here a throw (uv_poll_init, or an environment shutting down) must undo the CQ, the channel and
  // the parent's child count: a C++ constructor that throws never runs its destructor nor the finalizer,
  // so nothing else would, and Context.close() would refuse for ever.
  try {
    completions_ref_ = Napi::Persistent(completions);
    completions_ = completions.Data();
    capacity_ = static_cast<uint32_t>(completions.ElementLength() / wc::kStride);
    wcs_.resize(capacity_);
    on_completions_ = Napi::Persistent(info[4].As<Napi::Function>());
    info.This().As<Napi::Object>().Set("cqe", Napi::Number::New(env, cq_->cqe));
    info.This().As<Napi::Object>().Set("id", Napi::Number::New(env, id));
    watcher_.Start(env, registry(), channel_->fd, OnReadable, this);
  } catch (...) {
    Release();
    throw;
  }
}

void Cq::AckEvents() {
  if (unacked_ > 0 && cq_ != nullptr) ibv_ack_cq_events(cq_, unacked_);
  unacked_ = 0;
}

void Cq::Release() {
  watcher_.Stop();  // before the channel's fd is closed
  if (cq_ != nullptr) {
    AckEvents();  // ibv_destroy_cq waits for every event to be acknowledged
    CheckTeardown("ibv_destroy_cq", ibv_destroy_cq(cq_));
    cq_ = nullptr;
  }
  if (channel_ != nullptr) {
    CheckTeardown("ibv_destroy_comp_channel", ibv_destroy_comp_channel(channel_));
    channel_ = nullptr;
    parent_->RemoveChild();
  }
  on_completions_.Reset();
  completions_ref_.Reset();
  completions_ = nullptr;
  parent_ref_.Reset();
}

ibv_cq* Cq::get(Napi::Env env) {
  if (cq_ == nullptr) ThrowState(env, "the completion queue is destroyed");
  return cq_;
}

int Cq::DrainInto(uint32_t max) {
  int n = ibv_poll_cq(cq_, static_cast<int>(max < capacity_ ? max : capacity_), wcs_.data());
  if (n <= 0) return n < 0 ? -1 : 0;  // < 0: the CQ is in error (providers return -1 or -errno)
  for (int i = 0; i < n; ++i) WriteCompletion(completions_, static_cast<uint32_t>(i), wcs_[i]);
  return n;
}

// One wake-up: take every pending channel event (non-blocking, until EAGAIN), re-arm, then drain. Arming
// before draining means a completion that lands after the last poll raises a new event: none is lost.
// Events are acknowledged in batches (ibv_ack_cq_events takes a mutex).
void Cq::OnReadable(void* p) {
  auto* self = static_cast<Cq*>(p);
  if (self->cq_ == nullptr) return;
  ibv_cq* ev_cq = nullptr;
  void* ev_ctx = nullptr;
  while (ibv_get_cq_event(self->channel_, &ev_cq, &ev_ctx) == 0) ++self->unacked_;
  if (self->unacked_ >= 64) self->AckEvents();
  Napi::Env env = self->Env();
  Napi::HandleScope outer(env);
  // Empty once GC has collected the CQ's JS object, before its finalizer (which destroys the CQ) has run:
  // the channel events are taken (acknowledged at the latest by that destroy) and nothing is delivered.
  Napi::Object recv = self->Value();
  if (recv.IsEmpty()) return;
  if (!self->drain_on_wake_) {
    Napi::HandleScope scope(env);
    CallFromLoop(env, self->on_completions_, recv, {Napi::Number::New(env, 0)});
    return;
  }
  if (self->errored_) return;
  if (ibv_req_notify_cq(self->cq_, 0) != 0) {
    // Not armed, no event would ever come again: the handler is told the CQ is in error (as for a poll).
    self->errored_ = true;
    Napi::HandleScope scope(env);
    CallFromLoop(env, self->on_completions_, recv, {Napi::Number::New(env, -1)});
    return;
  }
  // Each full batch is handed to JS before the next poll overwrites the array. Draining continues until
  // a poll returns less than a full batch: after re-arming, completions already in the CQ raise no new
  // event, so stopping early would strand them.
  while (self->cq_ != nullptr) {
    int n = self->DrainInto(self->capacity_);
    if (n == 0) return;
    if (n < 0) self->errored_ = true;
    Napi::HandleScope scope(env);
    // -1 tells the handler the CQ is in error (as poll() does); no drain follows it.
    CallFromLoop(env, self->on_completions_, recv, {Napi::Number::New(env, n)});
    if (n < 0 || static_cast<uint32_t>(n) < self->capacity_) return;
  }
}

// poll(max = capacity): ibv_poll_cq into the shared array; returns the number of records written, or -1
// when the CQ is in error (its completions can no longer be trusted: the caller treats it as overrun).
Napi::Value Cq::Poll(const Napi::CallbackInfo& info) {
  get(info.Env());
  uint32_t max = info.Length() > 0 && !info[0].IsUndefined() ? ArgU32(info, 0, "max") : capacity_;
  return Napi::Number::New(info.Env(), max == 0 ? 0 : DrainInto(max));
}

// arm(solicitedOnly): ibv_req_notify_cq.
Napi::Value Cq::Arm(const Napi::CallbackInfo& info) {
  bool solicited = info.Length() > 0 && info[0].ToBoolean().Value();
  int rc = ibv_req_notify_cq(get(info.Env()), solicited ? 1 : 0);
  if (rc != 0) ThrowErrno(info.Env(), rc, "ibv_req_notify_cq");
  return info.Env().Undefined();
}

Napi::Value Cq::SetRef(const Napi::CallbackInfo& info) {
  watcher_.SetRef(info.Length() > 0 && info[0].ToBoolean().Value());
  return info.Env().Undefined();
}

Napi::Value Cq::Destroy(const Napi::CallbackInfo& info) {
  ThrowIfChildren(info.Env(), *this, "completion queue");
  Release();
  return info.Env().Undefined();
}

// ---- Qp -----------------------------------------------------------------------------------------

Napi::Function Qp::Define(Napi::Env env) {
  return DefineClass(env, "Qp",
                     {InstanceMethod<&Qp::Num>("num"), InstanceMethod<&Qp::PostSend>("postSend"),
                      InstanceMethod<&Qp::PostRecv>("postRecv"), InstanceMethod<&Qp::BindMw>("bindMw"),
                      InstanceMethod<&Qp::Query>("query"), InstanceMethod<&Qp::ToError>("toError"),
                      InstanceMethod<&Qp::Destroy>("destroy")});
}

// (tag, rdma_cm_id*, cmIdObj, pd, sendCq, recvCq, sendDesc, recvDesc, maxSendSge, maxRecvSge)
Qp::Qp(const Napi::CallbackInfo& info) : Napi::ObjectWrap<Qp>(info), Resource(info.Env(), Level::kQp) {
  RequireNativeCall(info, "Qp");
  cm_id_ = Unwrapped<rdma_cm_id>(info, 1);
  qp_ = cm_id_->qp;
  owner_ref_ = Napi::Persistent(info[2].As<Napi::Object>());
  pd_ref_ = Napi::Persistent(info[3].As<Napi::Object>());
  send_cq_ref_ = Napi::Persistent(info[4].As<Napi::Object>());
  recv_cq_ref_ = Napi::Persistent(info[5].As<Napi::Object>());
  send_desc_ref_ = Napi::Persistent(info[6].As<Napi::Uint32Array>());
  recv_desc_ref_ = Napi::Persistent(info[7].As<Napi::Uint32Array>());
  max_send_sge_ = info[8].As<Napi::Number>().Uint32Value();
  max_recv_sge_ = info[9].As<Napi::Number>().Uint32Value();
  owner_ = static_cast<Resource*>(info[10].As<Napi::External<Resource>>().Data());
  pd_ = Pd::Unwrap(pd_ref_.Value());
  send_cq_ = Cq::Unwrap(send_cq_ref_.Value());
  recv_cq_ = Cq::Unwrap(recv_cq_ref_.Value());
  owner_->AddChild();
  pd_->AddChild();
  send_cq_->AddChild();
  recv_cq_->AddChild();
}

void Qp::Release() {
  if (qp_ != nullptr) {
    rdma_destroy_qp(cm_id_);
    qp_ = nullptr;
    owner_->RemoveChild();
    pd_->RemoveChild();
    send_cq_->RemoveChild();
    recv_cq_->RemoveChild();
  }
  owner_ref_.Reset();
  pd_ref_.Reset();
  send_cq_ref_.Reset();
  recv_cq_ref_.Reset();
  send_desc_ref_.Reset();
  recv_desc_ref_.Reset();
}

ibv_qp* Qp::get(Napi::Env env) {
  if (qp_ == nullptr) ThrowState(env, "the queue pair is destroyed");
  return qp_;
}

Napi::Value Qp::Num(const Napi::CallbackInfo& info) { return Napi::Number::New(info.Env(), get(info.Env())->qp_num); }

// postSend(first, count): post records [first, first+count) of the send descriptor array as one chain.
Napi::Value Qp::PostSend(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ibv_qp* qp = get(env);
  uint32_t first = ArgU32(info, 0, "first");
  uint32_t count = ArgU32(info, 1, "count");
  Napi::Uint32Array desc = send_desc_ref_.Value();
  ParseSendChain(env, desc.Data(), desc.ElementLength(), first, count, max_send_sge_, send_chain_);
  ibv_send_wr* bad = nullptr;
  int rc = ibv_post_send(qp, send_chain_.wrs.data(), &bad);
  if (rc != 0) {
    Napi::Error e = ErrnoError(env, rc, "ibv_post_send");
    e.Set("badWrIndex", Napi::Number::New(env, bad != nullptr ? static_cast<double>(bad - send_chain_.wrs.data()) : 0));
    throw e;
  }
  return env.Undefined();
}

Napi::Value Qp::PostRecv(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ibv_qp* qp = get(env);
  uint32_t first = ArgU32(info, 0, "first");
  uint32_t count = ArgU32(info, 1, "count");
  Napi::Uint32Array desc = recv_desc_ref_.Value();
  ParseRecvChain(env, desc.Data(), desc.ElementLength(), first, count, max_recv_sge_, recv_chain_);
  ibv_recv_wr* bad = nullptr;
  int rc = ibv_post_recv(qp, recv_chain_.wrs.data(), &bad);
  if (rc != 0) {
    Napi::Error e = ErrnoError(env, rc, "ibv_post_recv");
    e.Set("badWrIndex", Napi::Number::New(env, bad != nullptr ? static_cast<double>(bad - recv_chain_.wrs.data()) : 0));
    throw e;
  }
  return env.Undefined();
}

// bindMw(mw, mr, addr, length, access, wrIdLo, wrIdHi, sendFlags): binds [addr, addr+length) of mr to the
// window; returns the window's new rkey. Type 2 windows bind through the send queue with a fresh key
// (ibv_inc_rkey), so a stale rkey held by a peer can never reach memory now used by another RPC.
Napi::Value Qp::BindMw(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ibv_qp* qp = get(env);
  AddonData* data = GetAddonData(env);
  Mw* mw = UnwrapArg<Mw>(info, 0, "mw", data->mw);
  Mr* mr = UnwrapArg<Mr>(info, 1, "mr", data->mr);
  double addr = ArgNumber(info, 2, "addr");
  double length = ArgNumber(info, 3, "length");
  uint32_t access = ArgU32(info, 4, "access");
  uint32_t lo = ArgU32(info, 5, "wrIdLo");
  uint32_t hi = ArgU32(info, 6, "wrIdHi");
  uint32_t flags = ArgU32(info, 7, "sendFlags");
  ibv_mw* w = mw->get(env);
  ibv_mr* m = mr->get(env);
  auto base = static_cast<double>(reinterpret_cast<uintptr_t>(m->addr));
  if (!(addr >= base && length >= 0 && addr + length <= base + static_cast<double>(m->length)))
    ThrowArg(env, "the window must lie within the memory region", true);
  ibv_mw_bind_info bi{};
  bi.mr = m;
  bi.addr = static_cast<uint64_t>(addr);
  bi.length = static_cast<uint64_t>(length);
  bi.mw_access_flags = access;
  uint64_t wr_id = static_cast<uint64_t>(hi) << 32 | lo;
  if (w->type == IBV_MW_TYPE_1) {
    ibv_mw_bind b{};
    b.wr_id = wr_id;
    b.send_flags = flags;
    b.bind_info = bi;
    int rc = ibv_bind_mw(qp, w, &b);
    if (rc != 0) ThrowErrno(env, rc, "ibv_bind_mw");
    return Napi::Number::New(env, w->rkey);
  }
  ibv_send_wr wr{};
  ibv_send_wr* bad = nullptr;
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = flags;
  wr.bind_mw.mw = w;
  wr.bind_mw.rkey = ibv_inc_rkey(w->rkey);
  wr.bind_mw.bind_info = bi;
  int rc = ibv_post_send(qp, &wr, &bad);
  if (rc != 0) ThrowErrno(env, rc, "ibv_post_send(BIND_MW)");
  w->rkey = wr.bind_mw.rkey;
  return Napi::Number::New(env, w->rkey);
}

Napi::Value Qp::Query(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ibv_qp_attr attr{};
  ibv_qp_init_attr init{};
  int rc = ibv_query_qp(get(env), &attr, IBV_QP_STATE | IBV_QP_CAP, &init);
  if (rc != 0) ThrowErrno(env, rc, "ibv_query_qp");
  Napi::Object o = Napi::Object::New(env);
  o.Set("state", static_cast<double>(attr.qp_state));
  o.Set("maxSendWr", attr.cap.max_send_wr);
  o.Set("maxRecvWr", attr.cap.max_recv_wr);
  o.Set("maxSendSge", attr.cap.max_send_sge);
  o.Set("maxRecvSge", attr.cap.max_recv_sge);
  o.Set("maxInlineData", attr.cap.max_inline_data);
  return o;
}

// toError(): move the QP to the Error state so every posted work request completes with
// IBV_WC_WR_FLUSH_ERR (how a connection's outstanding work is flushed before teardown).
Napi::Value Qp::ToError(const Napi::CallbackInfo& info) {
  ibv_qp_attr attr{};
  attr.qp_state = IBV_QPS_ERR;
  int rc = ibv_modify_qp(get(info.Env()), &attr, IBV_QP_STATE);
  if (rc != 0) ThrowErrno(info.Env(), rc, "ibv_modify_qp(ERR)");
  return info.Env().Undefined();
}

Napi::Value Qp::Destroy(const Napi::CallbackInfo& info) {
  Release();
  return info.Env().Undefined();
}

Napi::Object NewQpForCmId(Napi::Env env, Napi::Object cm_id_obj, Resource* cm_id_res, rdma_cm_id* id,
                          Napi::Object pd_obj, Napi::Object send_cq_obj, Napi::Object recv_cq_obj,
                          Napi::Object caps, Napi::Uint32Array send_desc, Napi::Uint32Array recv_desc) {
  AddonData* data = GetAddonData(env);
  Pd* pd = UnwrapObj<Pd>(env, pd_obj, "pd", data->pd);
  Cq* send_cq = UnwrapObj<Cq>(env, send_cq_obj, "sendCq", data->cq);
  Cq* recv_cq = UnwrapObj<Cq>(env, recv_cq_obj, "recvCq", data->cq);
  ibv_qp_init_attr attr{};
  attr.send_cq = send_cq->get(env);
  attr.recv_cq = recv_cq->get(env);
  attr.qp_type = IBV_QPT_RC;
  attr.sq_sig_all = 0;
  attr.cap.max_send_wr = OptU32(env, caps, "maxSendWr", 64);
  attr.cap.max_recv_wr = OptU32(env, caps, "maxRecvWr", 64);
  attr.cap.max_send_sge = OptU32(env, caps, "maxSendSge", 1);
  attr.cap.max_recv_sge = OptU32(env, caps, "maxRecvSge", 1);
  attr.cap.max_inline_data = OptU32(env, caps, "maxInlineData", 0);
  if (attr.cap.max_send_sge > kMaxSge || attr.cap.max_recv_sge > kMaxSge)
    ThrowArg(env, "maxSendSge and maxRecvSge are limited to " + std::to_string(kMaxSge), true);
  if (send_desc.ElementLength() < send_wr::kStride || recv_desc.ElementLength() < recv_wr::kStride)
    ThrowArg(env, "the descriptor arrays must hold at least one record each", true);
  ibv_pd* pd_raw = pd->get(env);
  if (id->qp != nullptr) ThrowState(env, "this connection already has a queue pair");
  if (rdma_create_qp(id, pd_raw, &attr) != 0) ThrowErrno(env, errno != 0 ? errno : EINVAL, "rdma_create_qp");
  return data->qp.New({Tag(env), Napi::External<rdma_cm_id>::New(env, id), cm_id_obj, pd_obj, send_cq_obj,
                       recv_cq_obj, send_desc, recv_desc, Napi::Number::New(env, attr.cap.max_send_sge),
                       Napi::Number::New(env, attr.cap.max_recv_sge), Napi::External<Resource>::New(env, cm_id_res)});
}

}  // namespace rdma_native
