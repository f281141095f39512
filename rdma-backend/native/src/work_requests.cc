#include "work_requests.h"

#include <arpa/inet.h>

#include <string>

#include "runtime.h"

namespace rdma_native {

namespace {

uint64_t U64(const uint32_t* r, uint32_t lo) { return static_cast<uint64_t>(r[lo + 1]) << 32 | r[lo]; }

std::string Where(uint32_t index, const char* field) {
  return "work request " + std::to_string(index) + ": " + field;
}

constexpr uint32_t kKnownSendFlags =
    IBV_SEND_FENCE | IBV_SEND_SIGNALED | IBV_SEND_SOLICITED | IBV_SEND_INLINE;

bool IsAtomic(uint32_t op) { return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD; }

void CheckBounds(Napi::Env env, size_t word_count, uint32_t first, uint32_t count, uint32_t stride) {
  if (count == 0) ThrowArg(env, "count must be at least 1", true);
  uint64_t end = (static_cast<uint64_t>(first) + count) * stride;
  if (end > word_count)
    ThrowArg(env,
             "records [" + std::to_string(first) + ", " + std::to_string(first + count) +
                 ") exceed the descriptor array (" + std::to_string(word_count / stride) + " records)",
             true);
}

void ParseSges(Napi::Env env, const uint32_t* r, uint32_t sge_base, uint32_t num_sge, uint32_t index,
               std::vector<ibv_sge>& sges) {
  for (uint32_t s = 0; s < num_sge; ++s) {
    const uint32_t* g = r + sge_base + 4 * s;
    ibv_sge sge;
    sge.addr = U64(g, 0);
    sge.length = g[2];
    sge.lkey = g[3];
    if (sge.addr == 0) ThrowArg(env, Where(index, "sge address is 0"), true);
    sges.push_back(sge);
  }
}

}  // namespace

void ParseSendChain(Napi::Env env, const uint32_t* words, size_t word_count, uint32_t first, uint32_t count,
                    uint32_t max_sge, SendChain& out) {
  CheckBounds(env, word_count, first, count, send_wr::kStride);
  out.wrs.clear();
  out.sges.clear();
  out.wrs.reserve(count);
  out.sges.reserve(static_cast<size_t>(count) * kMaxSge);  // no reallocation: wr.sg_list stays valid
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t* r = words + static_cast<size_t>(first + i) * send_wr::kStride;
    uint32_t op = r[send_wr::kOpcode];
    uint32_t flags = r[send_wr::kFlags];
    uint32_t num_sge = r[send_wr::kNumSge];
    switch (op) {
      case IBV_WR_RDMA_WRITE:
      case IBV_WR_RDMA_WRITE_WITH_IMM:
      case IBV_WR_SEND:
      case IBV_WR_SEND_WITH_IMM:
      case IBV_WR_RDMA_READ:
      case IBV_WR_ATOMIC_CMP_AND_SWP:
      case IBV_WR_ATOMIC_FETCH_AND_ADD:
      case IBV_WR_LOCAL_INV:
      case IBV_WR_SEND_WITH_INV:
        break;
      default:
        // IBV_WR_BIND_MW goes through Qp.bindMw (it names objects, not words); TSO and driver opcodes
        // have no use on an RC QP carrying RPC-over-RDMA.
        ThrowArg(env, Where(i, "unsupported opcode ") + std::to_string(op), true);
    }
    if ((flags & ~kKnownSendFlags) != 0) ThrowArg(env, Where(i, "unknown send flags"), true);
    if (num_sge > kMaxSge || num_sge > max_sge)
      ThrowArg(env,
               Where(i, "numSge ") + std::to_string(num_sge) + " exceeds the limit " +
                   std::to_string(max_sge < kMaxSge ? max_sge : kMaxSge),
               true);
    if (op == IBV_WR_LOCAL_INV && num_sge != 0) ThrowArg(env, Where(i, "LOCAL_INV carries no SGE"), true);
    if (op == IBV_WR_RDMA_READ && (flags & IBV_SEND_INLINE))
      ThrowArg(env, Where(i, "RDMA_READ cannot be INLINE"), true);
    if (IsAtomic(op)) {
      if (num_sge != 1 || r[send_wr::kSge + 2] != 8)
        ThrowArg(env, Where(i, "an atomic needs exactly one 8-byte SGE"), true);
      if ((U64(r, send_wr::kRemoteAddrLo) & 7) != 0)
        ThrowArg(env, Where(i, "an atomic's remote address must be 8-byte aligned"), true);
    }
    size_t sge_start = out.sges.size();
    ParseSges(env, r, send_wr::kSge, num_sge, i, out.sges);

    ibv_send_wr wr{};
    wr.wr_id = U64(r, send_wr::kWrIdLo);
    wr.opcode = static_cast<ibv_wr_opcode>(op);
    wr.send_flags = flags;
    wr.num_sge = static_cast<int>(num_sge);
    wr.sg_list = num_sge > 0 ? &out.sges[sge_start] : nullptr;
    if (op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE_WITH_IMM)
      wr.imm_data = htonl(r[send_wr::kImmOrInvRkey]);  // imm_data is big-endian on the wire
    if (op == IBV_WR_SEND_WITH_INV || op == IBV_WR_LOCAL_INV) wr.invalidate_rkey = r[send_wr::kImmOrInvRkey];
    if (op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_RDMA_READ) {
      wr.wr.rdma.remote_addr = U64(r, send_wr::kRemoteAddrLo);
      wr.wr.rdma.rkey = r[send_wr::kRkey];
    } else if (IsAtomic(op)) {
      wr.wr.atomic.remote_addr = U64(r, send_wr::kRemoteAddrLo);
      wr.wr.atomic.rkey = r[send_wr::kRkey];
      wr.wr.atomic.compare_add = U64(r, send_wr::kCompareAddLo);
      wr.wr.atomic.swap = U64(r, send_wr::kSwapLo);
    }
    out.wrs.push_back(wr);
  }
  for (uint32_t i = 0; i + 1 < count; ++i) out.wrs[i].next = &out.wrs[i + 1];
}

void ParseRecvChain(Napi::Env env, const uint32_t* words, size_t word_count, uint32_t first, uint32_t count,
                    uint32_t max_sge, RecvChain& out) {
  CheckBounds(env, word_count, first, count, recv_wr::kStride);
  out.wrs.clear();
  out.sges.clear();
  out.wrs.reserve(count);
  out.sges.reserve(static_cast<size_t>(count) * kMaxSge);
  for (uint32_t i = 0; i < count; ++i) {
    const uint32_t* r = words + static_cast<size_t>(first + i) * recv_wr::kStride;
    uint32_t num_sge = r[recv_wr::kNumSge];
    if (num_sge > kMaxSge || num_sge > max_sge)
      ThrowArg(env, Where(i, "numSge ") + std::to_string(num_sge) + " exceeds the limit", true);
    size_t sge_start = out.sges.size();
    ParseSges(env, r, recv_wr::kSge, num_sge, i, out.sges);
    ibv_recv_wr wr{};
    wr.wr_id = U64(r, recv_wr::kWrIdLo);
    wr.num_sge = static_cast<int>(num_sge);
    wr.sg_list = num_sge > 0 ? &out.sges[sge_start] : nullptr;
    out.wrs.push_back(wr);
  }
  for (uint32_t i = 0; i + 1 < count; ++i) out.wrs[i].next = &out.wrs[i + 1];
}

void WriteCompletion(uint32_t* words, uint32_t index, const ibv_wc& c) {
  uint32_t* r = words + static_cast<size_t>(index) * wc::kStride;
  r[wc::kWrIdLo] = static_cast<uint32_t>(c.wr_id);
  r[wc::kWrIdHi] = static_cast<uint32_t>(c.wr_id >> 32);
  r[wc::kStatus] = c.status;
  r[wc::kOpcode] = c.opcode;
  r[wc::kByteLen] = c.byte_len;
  // imm_data and invalidated_rkey share a union: IBV_WC_WITH_IMM says which one is valid.
  r[wc::kImmOrInvRkey] = (c.wc_flags & IBV_WC_WITH_IMM) ? ntohl(c.imm_data) : c.invalidated_rkey;
  r[wc::kWcFlags] = c.wc_flags;
  r[wc::kVendorErr] = c.vendor_err;
  r[wc::kQpNum] = c.qp_num;
  r[wc::kSrcQp] = c.src_qp;
}

Napi::Object LayoutConstants(Napi::Env env) {
  Napi::Object o = Napi::Object::New(env);
  auto set = [&](const char* k, uint32_t v) { o.Set(k, Napi::Number::New(env, v)); };
  set("LAYOUT_VERSION", kLayoutVersion);
  set("MAX_SGE", kMaxSge);
  set("SEND_WR_STRIDE", send_wr::kStride);
  set("SEND_WR_SGE", send_wr::kSge);
  set("RECV_WR_STRIDE", recv_wr::kStride);
  set("RECV_WR_SGE", recv_wr::kSge);
  set("WC_STRIDE", wc::kStride);
  return o;
}

}  // namespace rdma_native
