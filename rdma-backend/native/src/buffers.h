// Page-aligned memory the addon allocates and lends to JS as an external ArrayBuffer. Only this memory may
// be registered: a Buffer.allocUnsafe pool slab is shared with unrelated buffers, may be moved or reused
// by V8, and pinning it would pin whatever else lives on those pages.
#pragma once

#include <napi.h>

#include <cstddef>

namespace rdma_native {

// The allocation that holds [data, data + length), or false when data is not addon memory.
bool FindAddonBuffer(const void* data, size_t length);
// Bytes currently allocated (for tests and the leak check).
size_t AddonBufferBytes();
size_t AddonBufferCount();

Napi::Value AllocBuffer(const Napi::CallbackInfo& info);
Napi::Value IsAddonBuffer(const Napi::CallbackInfo& info);
Napi::Value BufferStats(const Napi::CallbackInfo& info);
Napi::Value PageSize(const Napi::CallbackInfo& info);

}  // namespace rdma_native
