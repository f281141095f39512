// Test hooks exported as `testing` (see testing.cc): exercised by test/native without an RDMA device.
#pragma once

#include <napi.h>

#include "runtime.h"

namespace rdma_native {

class EventSource : public Napi::ObjectWrap<EventSource>, public Resource {
 public:
  static Napi::Function Define(Napi::Env env);
  explicit EventSource(const Napi::CallbackInfo& info);
  ~EventSource() override { Release(); }
  void Release() override;

 private:
  Napi::Value Signal(const Napi::CallbackInfo& info);
  Napi::Value SetRef(const Napi::CallbackInfo& info);
  Napi::Value Destroy(const Napi::CallbackInfo& info);
  Napi::Value FailNextWake(const Napi::CallbackInfo& info);
  static void OnReadable(void* self);

  int fd_ = -1;
  int fail_next_wake_ = 0;  // 1: a Napi::Error, 2: a std::exception, thrown by the next wake-up
  FdWatcher watcher_;
  Napi::FunctionReference on_batch_;
  Napi::Reference<Napi::Uint32Array> batch_ref_;
};

Napi::Object TestingExports(Napi::Env env);

}  // namespace rdma_native
