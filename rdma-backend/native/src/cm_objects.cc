#include "cm_objects.h"

#include <arpa/inet.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "verbs_objects.h"

namespace rdma_native {

namespace {

int kCmTag;

Napi::External<int> Tag(Napi::Env env) { return Napi::External<int>::New(env, &kCmTag); }

void RequireNativeCall(const Napi::CallbackInfo& info, const char* cls) {
  if (info.Length() < 1 || !info[0].IsExternal() || info[0].As<Napi::External<int>>().Data() != &kCmTag)
    ThrowArg(info.Env(), std::string(cls) + " objects are created by the addon, not with new");
}

// Private data rides in the CM REQ/REP/REJ (RFC 8797 puts the RPC-over-RDMA connection parameters
// there). Its length field is a u8; the transport's own limit (56 bytes on IB, 512 on iWARP MPA) is
// enforced by the kernel, which answers EINVAL.
void ReadPrivateData(Napi::Env env, Napi::Value v, const void** data, uint8_t* len) {
  *data = nullptr;
  *len = 0;
  if (v.IsUndefined() || v.IsNull()) return;
  if (!v.IsBuffer()) ThrowArg(env, "privateData must be a Buffer");
  Napi::Buffer<uint8_t> b = v.As<Napi::Buffer<uint8_t>>();
  if (b.Length() > 255) ThrowArg(env, "privateData is limited to 255 bytes", true);
  *data = b.Data();
  *len = static_cast<uint8_t>(b.Length());
}

uint8_t OptU8(Napi::Env env, Napi::Object o, const char* key, uint8_t dflt) {
  Napi::Value v = o.Get(key);
  if (v.IsUndefined()) return dflt;
  if (!v.IsNumber()) ThrowArg(env, std::string(key) + " must be a number");
  int32_t n = v.As<Napi::Number>().Int32Value();
  if (n < 0 || n > 255) ThrowArg(env, std::string(key) + " must be in [0, 255]", true);
  return static_cast<uint8_t>(n);
}

// conn param object: {privateData?, responderResources?, initiatorDepth?, retryCount?, rnrRetryCount?}
void ReadConnParam(Napi::Env env, Napi::Value v, rdma_conn_param& p) {
  std::memset(&p, 0, sizeof p);
  p.responder_resources = 1;
  p.initiator_depth = 1;
  p.flow_control = 1;
  p.retry_count = 7;
  p.rnr_retry_count = 7;  // 7 = retry forever: a Receive not yet posted is a flow-control bug, not fatal
  if (v.IsUndefined()) return;
  if (!v.IsObject()) ThrowArg(env, "param must be an object");
  Napi::Object o = v.As<Napi::Object>();
  ReadPrivateData(env, o.Get("privateData"), &p.private_data, &p.private_data_len);
  p.responder_resources = OptU8(env, o, "responderResources", 1);
  p.initiator_depth = OptU8(env, o, "initiatorDepth", 1);
  p.retry_count = OptU8(env, o, "retryCount", 7);
  p.rnr_retry_count = OptU8(env, o, "rnrRetryCount", 7);
  if (p.retry_count > 7 || p.rnr_retry_count > 7) ThrowArg(env, "retryCount and rnrRetryCount are 3-bit", true);
}

uint32_t TimeoutArg(const Napi::CallbackInfo& info, size_t i) {
  uint32_t t = ArgU32(info, i, "timeoutMs");
  if (t < 1 || t > 600000) ThrowArg(info.Env(), "timeoutMs must be in [1, 600000]", true);
  return t;
}

Napi::Value AddressObject(Napi::Env env, const sockaddr* sa) {
  char buf[INET6_ADDRSTRLEN] = "";
  uint16_t port = 0;
  if (sa->sa_family == AF_INET) {
    auto* in = reinterpret_cast<const sockaddr_in*>(sa);
    inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf);
    port = ntohs(in->sin_port);
  } else if (sa->sa_family == AF_INET6) {
    auto* in6 = reinterpret_cast<const sockaddr_in6*>(sa);
    inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf);
    port = ntohs(in6->sin6_port);
  } else {
    return env.Undefined();
  }
  Napi::Object o = Napi::Object::New(env);
  o.Set("address", buf);
  o.Set("port", static_cast<double>(port));
  o.Set("family", sa->sa_family == AF_INET ? "IPv4" : "IPv6");
  return o;
}

}  // namespace

bool ParseSockaddr(const std::string& host, uint32_t port, sockaddr_storage& out) {
  std::memset(&out, 0, sizeof out);
  auto* in = reinterpret_cast<sockaddr_in*>(&out);
  if (inet_pton(AF_INET, host.c_str(), &in->sin_addr) == 1) {
    in->sin_family = AF_INET;
    in->sin_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  auto* in6 = reinterpret_cast<sockaddr_in6*>(&out);
  if (inet_pton(AF_INET6, host.c_str(), &in6->sin6_addr) == 1) {
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(static_cast<uint16_t>(port));
    return true;
  }
  return false;
}

static sockaddr_storage AddrArg(const Napi::CallbackInfo& info, size_t host_i, size_t port_i) {
  std::string host = ArgString(info, host_i, "host");
  uint32_t port = ArgU32(info, port_i, "port");
  if (port > 65535) ThrowArg(info.Env(), "port must be in [0, 65535]", true);
  sockaddr_storage ss;
  if (!ParseSockaddr(host, port, ss))
    ThrowArg(info.Env(), "host must be an IPv4 or IPv6 literal (resolve names before calling): " + host);
  return ss;
}

// createCmChannel(onEvents(events[])): an rdma_cm event channel, non-blocking, watched by uv_poll.
Napi::Value CreateCmChannel(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  ArgFunction(info, 0, "onEvents");
  errno = 0;
  rdma_event_channel* ch = rdma_create_event_channel();
  if (ch == nullptr) ThrowErrno(env, errno != 0 ? errno : ENODEV, "rdma_create_event_channel");
  return GetAddonData(env)->cm_channel.New({Tag(env), Napi::External<rdma_event_channel>::New(env, ch), info[0]});
}

// ---- CmChannel -----------------------------------------------------------------------------------

Napi::Function CmChannel::Define(Napi::Env env) {
  return DefineClass(env, "CmChannel",
                     {InstanceMethod<&CmChannel::CreateId>("createId"),
                      InstanceMethod<&CmChannel::SetRef>("setRef"),
                      InstanceMethod<&CmChannel::Destroy>("destroy")});
}

CmChannel::CmChannel(const Napi::CallbackInfo& info)
    : Napi::ObjectWrap<CmChannel>(info), Resource(info.Env(), Level::kCmChannel) {
  RequireNativeCall(info, "CmChannel");
  Napi::Env env = info.Env();
  channel_ = info[1].As<Napi::External<rdma_event_channel>>().Data();
  on_events_ = Napi::Persistent(info[2].As<Napi::Function>());
  int rc = SetNonBlocking(channel_->fd);
  if (rc != 0) {
    rdma_destroy_event_channel(channel_);
    channel_ = nullptr;
    ThrowErrno(env, rc, "fcntl(rdma_cm fd, O_NONBLOCK)");
  }
  // A constructor that throws runs neither its destructor nor the finalizer: the channel goes here.
  try {
    watcher_.Start(env, registry(), channel_->fd, OnReadable, this);
  } catch (...) {
    Release();
    throw;
  }
}

void CmChannel::Release() {
  watcher_.Stop();  // before rdma_destroy_event_channel closes the fd
  if (channel_ != nullptr) {
    rdma_destroy_event_channel(channel_);
    channel_ = nullptr;
  }
  on_events_.Reset();
}

rdma_event_channel* CmChannel::get(Napi::Env env) {
  if (channel_ == nullptr) ThrowState(env, "the rdma_cm event channel is destroyed");
  return channel_;
}

// createId(): an RDMA_PS_TCP (reliable connected) CM id on this channel.
Napi::Value CmChannel::CreateId(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  rdma_cm_id* id = nullptr;
  if (rdma_create_id(get(env), &id, nullptr, RDMA_PS_TCP) != 0)
    ThrowErrno(env, errno != 0 ? errno : ENOMEM, "rdma_create_id");
  return GetAddonData(env)->cm_id.New({Tag(env), Napi::External<rdma_cm_id>::New(env, id), Value()});
}

namespace {

// One event taken from the channel, acknowledged when this goes out of scope, whatever happens while it
// is turned into JS values (an exception must not leave it unacknowledged: rdma_destroy_id waits for
// every event of its id). `refuse` is a connection request's new id that no JS object owns (the listener
// or the channel is being collected, or creating its CmId failed): rdma_ack_cm_event frees the event, so
// the id is rejected while the event is held and destroyed only after the ack.
struct HeldCmEvent {
  rdma_cm_event* ev;
  rdma_cm_id* refuse = nullptr;
  explicit HeldCmEvent(rdma_cm_event* e) : ev(e) {}
  HeldCmEvent(const HeldCmEvent&) = delete;
  HeldCmEvent& operator=(const HeldCmEvent&) = delete;
  ~HeldCmEvent() {
    if (refuse != nullptr) rdma_reject(refuse, nullptr, 0);
    rdma_ack_cm_event(ev);
    if (refuse != nullptr) rdma_destroy_id(refuse);
  }
};

}  // namespace

// One wake-up: every pending event (until EAGAIN) is copied — private data included — and acknowledged
// before any JS runs (rdma_ack_cm_event frees the private data, and rdma_destroy_id waits for acks), then
// the batch is delivered in one callback. An event whose JS object is gone is acknowledged and dropped:
// ObjectWrap::Value() is empty once GC has collected an object whose finalizer has not run yet.
void CmChannel::OnReadable(void* p) {
  auto* self = static_cast<CmChannel*>(p);
  if (self->channel_ == nullptr) return;
  Napi::Env env = self->Env();
  Napi::HandleScope scope(env);
  AddonData* data = GetAddonData(env);
  Napi::Object channel_obj = self->Value();  // empty: the channel is being collected; no one to deliver to
  Napi::Array batch = Napi::Array::New(env);
  uint32_t n = 0;
  // Bounded per wake-up; level-triggered polling brings us back for the rest.
  for (int i = 0; i < 256; ++i) {
    rdma_cm_event* raw = nullptr;
    if (rdma_get_cm_event(self->channel_, &raw) != 0) break;  // EAGAIN: drained
    HeldCmEvent held(raw);
    rdma_cm_event* ev = raw;
    bool request = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST;
    // Until a CmId adopts it, a request's new id is nobody's: any early exit (or throw) refuses it.
    if (request) held.refuse = ev->id;
    if (channel_obj.IsEmpty()) continue;
    Napi::Object o = Napi::Object::New(env);
    o.Set("type", static_cast<double>(ev->event));
    o.Set("status", static_cast<double>(ev->status));
    Napi::Object id_obj;
    if (request) {
      // A new rdma_cm_id for the incoming connection; its context is still the listener's.
      CmId* listener = static_cast<CmId*>(ev->listen_id != nullptr ? ev->listen_id->context : nullptr);
      if (listener != nullptr) {
        Napi::Object listen_obj = listener->Value();
        if (listen_obj.IsEmpty()) continue;  // the listener is being collected: no one takes the request
        o.Set("listenId", listen_obj);
      }
      try {
        id_obj = data->cm_id.New({Tag(env), Napi::External<rdma_cm_id>::New(env, ev->id), channel_obj});
      } catch (const Napi::Error&) {
        continue;  // refused (held.refuse)
      }
      held.refuse = nullptr;  // the CmId owns it now (its destroy() or finalizer destroys it)
    } else if (ev->id != nullptr && ev->id->context != nullptr) {
      id_obj = static_cast<CmId*>(ev->id->context)->Value();
      if (id_obj.IsEmpty()) continue;  // the id is being collected: its events go with it
    }
    if (!id_obj.IsEmpty()) o.Set("id", id_obj);
    bool conn = ev->event == RDMA_CM_EVENT_CONNECT_REQUEST || ev->event == RDMA_CM_EVENT_ESTABLISHED ||
                ev->event == RDMA_CM_EVENT_REJECTED || ev->event == RDMA_CM_EVENT_CONNECT_RESPONSE;
    if (conn) {
      const rdma_conn_param& c = ev->param.conn;
      if (c.private_data != nullptr && c.private_data_len > 0)
        o.Set("privateData", Napi::Buffer<uint8_t>::Copy(env, static_cast<const uint8_t*>(c.private_data),
                                                         c.private_data_len));
      o.Set("responderResources", static_cast<double>(c.responder_resources));
      o.Set("initiatorDepth", static_cast<double>(c.initiator_depth));
      o.Set("qpNum", static_cast<double>(c.qp_num));
    }
    batch.Set(n++, o);
  }  // each event is acknowledged here, at the end of its iteration
  if (n == 0) return;
  CallFromLoop(env, self->on_events_, channel_obj, {batch});
}

Napi::Value CmChannel::SetRef(const Napi::CallbackInfo& info) {
  watcher_.SetRef(info.Length() > 0 && info[0].ToBoolean().Value());
  return info.Env().Undefined();
}

Napi::Value CmChannel::Destroy(const Napi::CallbackInfo& info) {
  if (children() > 0)
    ThrowState(info.Env(), "cannot destroy the event channel: " + std::to_string(children()) +
                               " CM id(s) on it are still alive; destroy them first");
  Release();
  return info.Env().Undefined();
}

// ---- CmId ---------------------------------------------------------------------------------------

Napi::Function CmId::Define(Napi::Env env) {
  return DefineClass(
      env, "CmId",
      {InstanceMethod<&CmId::BindAddr>("bindAddr"), InstanceMethod<&CmId::ResolveAddr>("resolveAddr"),
       InstanceMethod<&CmId::ResolveRoute>("resolveRoute"), InstanceMethod<&CmId::Listen>("listen"),
       InstanceMethod<&CmId::Connect>("connect"), InstanceMethod<&CmId::Accept>("accept"),
       InstanceMethod<&CmId::Reject>("reject"), InstanceMethod<&CmId::Disconnect>("disconnect"),
       InstanceMethod<&CmId::CreateQp>("createQp"), InstanceMethod<&CmId::DeviceName>("deviceName"),
       InstanceMethod<&CmId::Addresses>("addresses"), InstanceMethod<&CmId::Destroy>("destroy")});
}

CmId::CmId(const Napi::CallbackInfo& info) : Napi::ObjectWrap<CmId>(info), Resource(info.Env(), Level::kCmId) {
  RequireNativeCall(info, "CmId");
  channel_ = CmChannel::Unwrap(info[2].As<Napi::Object>());
  channel_ref_ = Napi::Persistent(info[2].As<Napi::Object>());
  channel_->AddChild();
  Adopt(info[1].As<Napi::External<rdma_cm_id>>().Data());
}

void CmId::Adopt(rdma_cm_id* id) {
  id_ = id;
  id_->context = this;
}

void CmId::Release() {
  if (id_ != nullptr) {
    if (id_->qp != nullptr) rdma_destroy_qp(id_);  // only at teardown: destroy() refuses while a Qp lives
    id_->context = nullptr;
    CheckTeardown("rdma_destroy_id", rdma_destroy_id(id_));
    id_ = nullptr;
    channel_->RemoveChild();
  }
  channel_ref_.Reset();
}

rdma_cm_id* CmId::get(Napi::Env env) {
  if (id_ == nullptr) ThrowState(env, "the CM id is destroyed");
  return id_;
}

Napi::Value CmId::BindAddr(const Napi::CallbackInfo& info) {
  sockaddr_storage ss = AddrArg(info, 0, 1);
  if (rdma_bind_addr(get(info.Env()), reinterpret_cast<sockaddr*>(&ss)) != 0)
    ThrowErrno(info.Env(), errno, "rdma_bind_addr");
  return info.Env().Undefined();
}

// resolveAddr(srcHost | '', dstHost, port, timeoutMs) -> ADDR_RESOLVED / ADDR_ERROR event.
Napi::Value CmId::ResolveAddr(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  std::string src = ArgString(info, 0, "srcHost");
  sockaddr_storage dst = AddrArg(info, 1, 2);
  uint32_t timeout = TimeoutArg(info, 3);
  sockaddr_storage src_ss;
  sockaddr* src_sa = nullptr;
  if (!src.empty()) {
    if (!ParseSockaddr(src, 0, src_ss)) ThrowArg(env, "srcHost must be an IP literal or ''");
    src_sa = reinterpret_cast<sockaddr*>(&src_ss);
  }
  if (rdma_resolve_addr(get(env), src_sa, reinterpret_cast<sockaddr*>(&dst), static_cast<int>(timeout)) != 0)
    ThrowErrno(env, errno, "rdma_resolve_addr");
  return env.Undefined();
}

Napi::Value CmId::ResolveRoute(const Napi::CallbackInfo& info) {
  uint32_t timeout = TimeoutArg(info, 0);
  if (rdma_resolve_route(get(info.Env()), static_cast<int>(timeout)) != 0)
    ThrowErrno(info.Env(), errno, "rdma_resolve_route");
  return info.Env().Undefined();
}

Napi::Value CmId::Listen(const Napi::CallbackInfo& info) {
  uint32_t backlog = ArgU32(info, 0, "backlog");
  if (backlog < 1 || backlog > 65535) ThrowArg(info.Env(), "backlog must be in [1, 65535]", true);
  if (rdma_listen(get(info.Env()), static_cast<int>(backlog)) != 0) ThrowErrno(info.Env(), errno, "rdma_listen");
  return info.Env().Undefined();
}

Napi::Value CmId::Connect(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  rdma_conn_param p;
  ReadConnParam(env, info.Length() > 0 ? info[0] : env.Undefined(), p);
  if (rdma_connect(get(env), &p) != 0) ThrowErrno(env, errno, "rdma_connect");
  return env.Undefined();
}

Napi::Value CmId::Accept(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  rdma_conn_param p;
  ReadConnParam(env, info.Length() > 0 ? info[0] : env.Undefined(), p);
  if (rdma_accept(get(env), &p) != 0) ThrowErrno(env, errno, "rdma_accept");
  return env.Undefined();
}

Napi::Value CmId::Reject(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  const void* data = nullptr;
  uint8_t len = 0;
  ReadPrivateData(env, info.Length() > 0 ? info[0] : env.Undefined(), &data, &len);
  if (rdma_reject(get(env), data, len) != 0) ThrowErrno(env, errno, "rdma_reject");
  return env.Undefined();
}

Napi::Value CmId::Disconnect(const Napi::CallbackInfo& info) {
  if (rdma_disconnect(get(info.Env())) != 0) ThrowErrno(info.Env(), errno, "rdma_disconnect");
  return info.Env().Undefined();
}

// createQp(pd, sendCq, recvCq, caps, sendDesc, recvDesc): the RC QP of this connection.
Napi::Value CmId::CreateQp(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  rdma_cm_id* id = get(env);
  for (size_t i = 0; i < 4; ++i)
    if (i >= info.Length() || !info[i].IsObject()) ThrowArg(env, "createQp(pd, sendCq, recvCq, caps, sendDesc, recvDesc)");
  Napi::Uint32Array send_desc = ArgU32Array(info, 4, "sendDesc");
  Napi::Uint32Array recv_desc = ArgU32Array(info, 5, "recvDesc");
  return NewQpForCmId(env, Value(), this, id, info[0].As<Napi::Object>(), info[1].As<Napi::Object>(),
                      info[2].As<Napi::Object>(), info[3].As<Napi::Object>(), send_desc, recv_desc);
}

Napi::Value CmId::DeviceName(const Napi::CallbackInfo& info) {
  rdma_cm_id* id = get(info.Env());
  if (id->verbs == nullptr) return info.Env().Undefined();
  return Napi::String::New(info.Env(), ibv_get_device_name(id->verbs->device));
}

Napi::Value CmId::Addresses(const Napi::CallbackInfo& info) {
  Napi::Env env = info.Env();
  rdma_cm_id* id = get(env);
  Napi::Object o = Napi::Object::New(env);
  o.Set("local", AddressObject(env, rdma_get_local_addr(id)));
  o.Set("peer", AddressObject(env, rdma_get_peer_addr(id)));
  return o;
}

Napi::Value CmId::Destroy(const Napi::CallbackInfo& info) {
  if (children() > 0) ThrowState(info.Env(), "cannot destroy the CM id: destroy its queue pair first");
  Release();
  return info.Env().Undefined();
}

}  // namespace rdma_native
