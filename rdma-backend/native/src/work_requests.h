// Work requests and completions cross the JS/C++ boundary as fixed-stride records in preallocated
// Uint32Arrays (no object per request or per completion). 64-bit values travel as (lo, hi) word pairs.
// The TypeScript side reads these constants from the addon at load time and refuses a mismatch (a stale
// build), so the layout has one definition.
#pragma once

#include <infiniband/verbs.h>
#include <napi.h>

#include <cstdint>
#include <vector>

namespace rdma_native {

constexpr uint32_t kLayoutVersion = 1;
constexpr uint32_t kMaxSge = 4;

// Send work request record.
namespace send_wr {
constexpr uint32_t kWrIdLo = 0, kWrIdHi = 1, kOpcode = 2, kFlags = 3, kNumSge = 4, kImmOrInvRkey = 5,
                   kRemoteAddrLo = 6, kRemoteAddrHi = 7, kRkey = 8, kCompareAddLo = 9, kCompareAddHi = 10,
                   kSwapLo = 11, kSwapHi = 12, kSge = 16;  // then kMaxSge x {addrLo, addrHi, length, lkey}
constexpr uint32_t kStride = kSge + 4 * kMaxSge;         // 32 words
}  // namespace send_wr

// Receive work request record.
namespace recv_wr {
constexpr uint32_t kWrIdLo = 0, kWrIdHi = 1, kNumSge = 2, kSge = 4;
constexpr uint32_t kStride = kSge + 4 * kMaxSge;  // 20 words
}  // namespace recv_wr

// Work completion record.
namespace wc {
constexpr uint32_t kWrIdLo = 0, kWrIdHi = 1, kStatus = 2, kOpcode = 3, kByteLen = 4, kImmOrInvRkey = 5,
                   kWcFlags = 6, kVendorErr = 7, kQpNum = 8, kSrcQp = 9;
constexpr uint32_t kStride = 10;
}  // namespace wc

// Storage for a parsed chain, reused across calls by its owner (the QP) so posting allocates nothing
// once the chain has reached its largest size.
struct SendChain {
  std::vector<ibv_send_wr> wrs;
  std::vector<ibv_sge> sges;
};
struct RecvChain {
  std::vector<ibv_recv_wr> wrs;
  std::vector<ibv_sge> sges;
};

// Parse `count` records starting at record `first` into a linked chain. Throws ERR_NATIVE_ARG (naming the
// record index and field) on an unknown opcode or flag, too many SGEs, or an atomic with a bad operand.
void ParseSendChain(Napi::Env env, const uint32_t* words, size_t word_count, uint32_t first, uint32_t count,
                    uint32_t max_sge, SendChain& out);
void ParseRecvChain(Napi::Env env, const uint32_t* words, size_t word_count, uint32_t first, uint32_t count,
                    uint32_t max_sge, RecvChain& out);

// Copy one ibv_wc into record `index` of the completion array.
void WriteCompletion(uint32_t* words, uint32_t index, const ibv_wc& c);

// {SEND_WR_STRIDE, RECV_WR_STRIDE, WC_STRIDE, MAX_SGE, LAYOUT_VERSION, ...} for the TypeScript side.
Napi::Object LayoutConstants(Napi::Env env);

}  // namespace rdma_native
