// JS classes over librdmacm: CmChannel (an rdma_event_channel watched by uv_poll) and CmId (an
// rdma_cm_id: resolve, bind, listen, connect, accept, reject, disconnect, and its RC queue pair).
#pragma once

#include <napi.h>
#include <rdma/rdma_cma.h>

#include "runtime.h"

namespace rdma_native {

class CmChannel : public Napi::ObjectWrap<CmChannel>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit CmChannel(const Napi::CallbackInfo& info);
  ~CmChannel() override { Release(); }
  void Release() override;
  rdma_event_channel* get(Napi::Env env);

 private:
  Napi::Value CreateId(const Napi::CallbackInfo& info);
  Napi::Value SetRef(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  static void OnReadable(void* self);

  rdma_event_channel* channel_ = nullptr;
  FdWatcher watcher_;
  Napi::FunctionReference on_events_;
};

class CmId : public Napi::ObjectWrap<CmId>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit CmId(const Napi::CallbackInfo& info);
  ~CmId() override { Release(); }
  void Release() override;
  rdma_cm_id* get(Napi::Env env);
  // The connection rdma_cm created for a CONNECT_REQUEST is adopted here (it is born without a JS object).
  void Adopt(rdma_cm_id* id);

 private:
  Napi::Value BindAddr(const Napi::CallbackInfo& info);
  Napi::Value ResolveAddr(const Napi::CallbackInfo& info);
  Napi::Value ResolveRoute(const Napi::CallbackInfo& info);
  Napi::Value Listen(const Napi::CallbackInfo& info);
  Napi::Value Connect(const Napi::CallbackInfo& info);
  Napi::Value Accept(const Napi::CallbackInfo& info);
  Napi::Value Reject(const Napi::CallbackInfo& info);
  Napi::Value Disconnect(const Napi::CallbackInfo& info);
  Napi::Value CreateQp(const Napi::CallbackInfo& info);
  Napi::Value DeviceName(const Napi::CallbackInfo& info);
  Napi::Value Addresses(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);

  rdma_cm_id* id_ = nullptr;
  CmChannel* channel_ = nullptr;
  Napi::ObjectReference channel_ref_;
};

Napi::Value CreateCmChannel(const Napi::CallbackInfo& info);

// Parses an IPv4 or IPv6 literal and a port into `out`; returns false when `host` is not a literal.
bool ParseSockaddr(const std::string& host, uint32_t port, sockaddr_storage& out);

}  // namespace rdma_native
