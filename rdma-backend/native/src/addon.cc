// Entry point of the rdma_native addon (Node-API 8: one binary for Node.js 20 to 24).
#include <napi.h>

#include "buffers.h"
#include "cm_objects.h"
#include "runtime.h"
#include "testing.h"
#include "verbs_objects.h"
#include "work_requests.h"

namespace rdma_native {

// Bumped whenever the JS-visible surface changes; the TypeScript wrapper refuses a different value so a
// stale build is reported as such instead of failing in odd ways.
constexpr uint32_t kAddonAbi = 4;  // 2: teardownFailures(); 3: bufferStats().kept, testing.deregisterOrKeep;
                                   // 4: EventSource.failNextWake

Napi::Object Init(Napi::Env env, Napi::Object exports) {
  auto* data = new AddonData();
  env.SetInstanceData<AddonData>(data);  // deleted (with its constructor references) by Node-API at exit
  data->registry = Registry::Create(env);

  Napi::Function context = Context::Define(env), pd = Pd::Define(env), mr = Mr::Define(env),
                 mw = Mw::Define(env), cq = Cq::Define(env), qp = Qp::Define(env),
                 cm_channel = CmChannel::Define(env), cm_id = CmId::Define(env);
  data->context = Napi::Persistent(context);
  data->pd = Napi::Persistent(pd);
  data->mr = Napi::Persistent(mr);
  data->mw = Napi::Persistent(mw);
  data->cq = Napi::Persistent(cq);
  data->qp = Napi::Persistent(qp);
  data->cm_channel = Napi::Persistent(cm_channel);
  data->cm_id = Napi::Persistent(cm_id);

  exports.Set("ADDON_ABI", Napi::Number::New(env, kAddonAbi));
  exports.Set("layout", LayoutConstants(env));
  exports.Set("listDevices", Napi::Function::New<ListDevices>(env, "listDevices"));
  exports.Set("openDevice", Napi::Function::New<OpenDevice>(env, "openDevice"));
  exports.Set("memlockLimit", Napi::Function::New<MemlockLimit>(env, "memlockLimit"));
  exports.Set("allocBuffer", Napi::Function::New<AllocBuffer>(env, "allocBuffer"));
  exports.Set("isAddonBuffer", Napi::Function::New<IsAddonBuffer>(env, "isAddonBuffer"));
  exports.Set("bufferStats", Napi::Function::New<BufferStats>(env, "bufferStats"));
  exports.Set("teardownFailures", Napi::Function::New<TeardownFailures>(env, "teardownFailures"));
  exports.Set("pageSize", Napi::Function::New<PageSize>(env, "pageSize"));
  exports.Set("createCmChannel", Napi::Function::New<CreateCmChannel>(env, "createCmChannel"));
  exports.Set("classes", [&] {
    Napi::Object c = Napi::Object::New(env);
    c.Set("Context", context);
    c.Set("Pd", pd);
    c.Set("Mr", mr);
    c.Set("Mw", mw);
    c.Set("Cq", cq);
    c.Set("Qp", qp);
    c.Set("CmChannel", cm_channel);
    c.Set("CmId", cm_id);
    return c;
  }());
  exports.Set("testing", TestingExports(env));
  return exports;
}

}  // namespace rdma_native

static Napi::Object InitRdmaNative(Napi::Env env, Napi::Object exports) {
  return rdma_native::Init(env, exports);
}

NODE_API_MODULE(rdma_native, InitRdmaNative)
