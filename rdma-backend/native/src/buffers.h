// Page-aligned memory the addon allocates and lends to JS as an external ArrayBuffer. Only this memory may
// be registered: a Buffer.allocUnsafe pool slab is shared with unrelated buffers, may be moved or reused
// by V8, and pinning it would pin whatever else lives on those pages.
#pragma once

#include <napi.h>

#include <cstddef>

namespace rdma_native {

// The allocation that holds [data, data + length), or false when data is not addon memory.
bool FindAddonBuffer(const void* data, size_t length);
// Keeps the allocation holding `data` for the life of the process: when its ArrayBuffer is collected (or
// its environment exits) the pages are not given back to malloc, and they stay in bufferStats(). For memory
// that is still registered after a failed ibv_dereg_mr: the device may still DMA into it through a valid
// rkey, so freed pages would let a peer's RDMA Write land in whatever malloc put there next. Returns false
// when data is not addon memory.
bool KeepAddonBuffer(const void* data);
// Bytes currently allocated (for tests and the leak check).
size_t AddonBufferBytes();
size_t AddonBufferCount();

Napi::Value AllocBuffer(const Napi::CallbackInfo& info);
Napi::Value IsAddonBuffer(const Napi::CallbackInfo& info);
Napi::Value BufferStats(const Napi::CallbackInfo& info);
Napi::Value PageSize(const Napi::CallbackInfo& info);

}  // namespace rdma_native
