// JS classes over libibverbs objects: Context (a device), Pd, Mr, Mw, Cq (with its completion channel
// watched by uv_poll) and Qp. Each holds a strong reference to its parent so GC can never free a parent
// first, counts its children so destroy() refuses to leave them dangling (the verbs would say EBUSY),
// and releases its resource exactly once (destroy(), GC finalizer or environment teardown).
#pragma once

#include <infiniband/verbs.h>
#include <napi.h>
#include <rdma/rdma_cma.h>

#include "runtime.h"
#include "work_requests.h"

namespace rdma_native {


class Context : public Napi::ObjectWrap<Context>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Context(const Napi::CallbackInfo& info);
  ~Context() override { Release(); }
  void Release() override;
  ibv_context* get(Napi::Env env);  // throws ERR_NATIVE_STATE after close()

 private:
  Napi::Value Name(const Napi::CallbackInfo& info);
  Napi::Value Query(const Napi::CallbackInfo& info);
  Napi::Value QueryPort(const Napi::CallbackInfo& info);
  Napi::Value AllocPd(const Napi::CallbackInfo& info);
  Napi::Value CreateCq(const Napi::CallbackInfo& info);
  Napi::Value WatchAsyncEvents(const Napi::CallbackInfo& info);
  Napi::Value SetRef(const Napi::CallbackInfo& info);
  Napi::Value Close(const Napi::CallbackInfo& info);
  static void OnAsyncReadable(void* self);

  ibv_context* ctx_ = nullptr;
  bool owned_ = false;  // opened with ibv_open_device (rdma_cm unavailable), so closed here
  FdWatcher async_watcher_;
  Napi::FunctionReference on_async_;
};

class Pd : public Napi::ObjectWrap<Pd>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Pd(const Napi::CallbackInfo& info);
  ~Pd() override { Release(); }
  void Release() override;
  ibv_pd* get(Napi::Env env);

 private:
  Napi::Value RegMr(const Napi::CallbackInfo& info);
  Napi::Value AllocMw(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  ibv_pd* pd_ = nullptr;
  Context* parent_ = nullptr;
  Napi::ObjectReference parent_ref_;
};

class Mr : public Napi::ObjectWrap<Mr>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Mr(const Napi::CallbackInfo& info);
  ~Mr() override { Release(); }
  void Release() override;
  ibv_mr* get(Napi::Env env);

 private:
  Napi::Value Rereg(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  void SetKeys();
  ibv_mr* mr_ = nullptr;
  int access_ = 0;
  Pd* parent_ = nullptr;
  Napi::ObjectReference parent_ref_;
  Napi::Reference<Napi::ArrayBuffer> memory_ref_;  // the registered memory outlives the registration
  const void* memory_ = nullptr;  // its data: kept for ever if a deregistration fails (DeregisterOrKeep)
};

class Mw : public Napi::ObjectWrap<Mw>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Mw(const Napi::CallbackInfo& info);
  ~Mw() override { Release(); }
  void Release() override;
  ibv_mw* get(Napi::Env env);

 private:
  Napi::Value Rkey(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  ibv_mw* mw_ = nullptr;
  Pd* parent_ = nullptr;
  Napi::ObjectReference parent_ref_;
};

class Cq : public Napi::ObjectWrap<Cq>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Cq(const Napi::CallbackInfo& info);
  ~Cq() override { Release(); }
  void Release() override;
  ibv_cq* get(Napi::Env env);

 private:
  Napi::Value Poll(const Napi::CallbackInfo& info);
  Napi::Value Arm(const Napi::CallbackInfo& info);
  Napi::Value SetRef(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  static void OnReadable(void* self);
  int DrainInto(uint32_t max);  // one ibv_poll_cq of up to max into the shared array; -1: CQ in error
  void AckEvents();

  ibv_cq* cq_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  Context* parent_ = nullptr;
  Napi::ObjectReference parent_ref_;
  FdWatcher watcher_;
  Napi::FunctionReference on_completions_;
  Napi::Reference<Napi::Uint32Array> completions_ref_;
  uint32_t* completions_ = nullptr;
  uint32_t capacity_ = 0;
  std::vector<ibv_wc> wcs_;
  unsigned unacked_ = 0;
  bool drain_on_wake_ = true;
  bool errored_ = false;  // drain mode: -1 was delivered once; nothing is delivered after it
};

class CmId;

class Qp : public Napi::ObjectWrap<Qp>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit Qp(const Napi::CallbackInfo& info);
  ~Qp() override { Release(); }
  void Release() override;

 private:
  Napi::Value Num(const Napi::CallbackInfo& info);
  Napi::Value PostSend(const Napi::CallbackInfo& info);
  Napi::Value PostRecv(const Napi::CallbackInfo& info);
  Napi::Value BindMw(const Napi::CallbackInfo& info);
  Napi::Value Query(const Napi::CallbackInfo& info);
  Napi::Value ToError(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  ibv_qp* get(Napi::Env env);

  ibv_qp* qp_ = nullptr;
  rdma_cm_id* cm_id_ = nullptr;  // created by rdma_create_qp: destroyed by rdma_destroy_qp
  Resource* owner_ = nullptr;    // the CmId
  Pd* pd_ = nullptr;
  Cq* send_cq_ = nullptr;
  Cq* recv_cq_ = nullptr;
  Napi::ObjectReference owner_ref_, pd_ref_, send_cq_ref_, recv_cq_ref_;
  Napi::Reference<Napi::Uint32Array> send_desc_ref_, recv_desc_ref_;
  uint32_t max_send_sge_ = 0, max_recv_sge_ = 0;
  SendChain send_chain_;
  RecvChain recv_chain_;
};

// Deregisters `mr`, a registration of addon memory at `memory`, where nothing can throw (a release: the
// GC finalizer or the environment's cleanup hook; or undoing a registration). When the deregistration
// fails the registration is still live: its pages pinned, its rkey valid, the device free to write them.
// The memory is then kept for the life of the process (KeepAddonBuffer: its ArrayBuffer's finalizer does
// not free it) and the failure counted as every teardown failure is. Returns whether it is deregistered.
// `dereg` is ibv_dereg_mr except in the testing hook that injects a failure.
using DeregMrFn = int (*)(ibv_mr*);
bool DeregisterOrKeep(ibv_mr* mr, const void* memory, DeregMrFn dereg = ibv_dereg_mr);

// Module-level functions.
Napi::Value ListDevices(const Napi::CallbackInfo& info);
Napi::Value OpenDevice(const Napi::CallbackInfo& info);
Napi::Value MemlockLimit(const Napi::CallbackInfo& info);

// Lets CmId create a Qp: (cmId object, rdma_cm_id*, pd, sendCq, recvCq, caps, sendDesc, recvDesc).
Napi::Object NewQpForCmId(Napi::Env env, Napi::Object cm_id_obj, Resource* cm_id_res, rdma_cm_id* id,
                          Napi::Object pd, Napi::Object send_cq, Napi::Object recv_cq, Napi::Object caps,
                          Napi::Uint32Array send_desc, Napi::Uint32Array recv_desc);

}  // namespace rdma_native
