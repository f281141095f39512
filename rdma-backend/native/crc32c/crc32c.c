/*
 * CRC32c (Castagnoli) for the soft iWARP provider's MPA CRC (RFC 5044 §4.4), with the x86 SSE4.2 CRC32
 * instruction over three interleaved lanes.
 *
 * Why: MPA checksums every byte twice (sender and receiver), and a CRC over one lane is bound by the
 * instruction's 3-cycle latency (about 8 GB/s here, what @node-rs/crc32 reaches). Three independent lanes
 * keep the CRC unit busy every cycle (about 30 GB/s). A block of 3·L bytes is split into three runs of L
 * bytes, each CRC'd from its own register; the lanes are then joined by linearity: the raw register after
 * A‖B is shift_|B|(raw(A)) ^ raw_0(B), where shift_n is the register after n zero bytes, a linear map read
 * from a 4×256 table made at load time (one table per lane length).
 *
 * No dependency beyond Node-API and a C compiler, so it builds where the verbs addon cannot (no rdma-core
 * headers). On a CPU without SSE4.2 (or not x86-64) `supported` is false and JavaScript uses its fallback.
 */
#include <node_api.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_CRC 1
#include <nmmintrin.h>
#define TARGET_CRC __attribute__((target("sse4.2")))
#else
#define HAVE_X86_CRC 0
#endif

#define LONG_LANE 8192
#define SHORT_LANE 256

static int hw_ok;

#if HAVE_X86_CRC
static uint32_t shift_long[4][256];
static uint32_t shift_short[4][256];

/* shift[k][v]: the raw register after `lane` zero bytes, starting from v placed in byte k. */
TARGET_CRC static void make_shift_table(uint32_t table[4][256], size_t lane) {
  for (int k = 0; k < 4; k++) {
    for (int v = 0; v < 256; v++) {
      uint64_t reg = (uint64_t)v << (8 * k);
      for (size_t i = 0; i < lane / 8; i++) reg = _mm_crc32_u64(reg, 0);
      table[k][v] = (uint32_t)reg;
    }
  }
}

static inline uint32_t shift(const uint32_t table[4][256], uint32_t reg) {
  return table[0][reg & 0xff] ^ table[1][(reg >> 8) & 0xff] ^ table[2][(reg >> 16) & 0xff] ^
         table[3][reg >> 24];
}

static inline uint64_t load64(const uint8_t *p) {
  uint64_t v;
  memcpy(&v, p, 8);
  return v;
}

/* Three lanes of `lane` bytes each while at least 3·lane bytes remain. */
TARGET_CRC static inline uint64_t three_lanes(uint64_t reg, const uint8_t **pp, size_t *np, size_t lane,
                                              const uint32_t table[4][256]) {
  const uint8_t *p = *pp;
  size_t n = *np;
  while (n >= 3 * lane) {
    uint64_t r1 = 0, r2 = 0;
    const uint8_t *end = p + lane;
    do {
      reg = _mm_crc32_u64(reg, load64(p));
      r1 = _mm_crc32_u64(r1, load64(p + lane));
      r2 = _mm_crc32_u64(r2, load64(p + 2 * lane));
      p += 8;
    } while (p < end);
    reg = shift(table, (uint32_t)reg) ^ (uint32_t)r1;
    reg = shift(table, (uint32_t)reg) ^ (uint32_t)r2;
    p += 2 * lane;
    n -= 3 * lane;
  }
  *pp = p;
  *np = n;
  return reg;
}

TARGET_CRC static uint32_t crc32c_hw(const uint8_t *p, size_t n, uint32_t prev) {
  uint64_t reg = (uint32_t)~prev;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    reg = _mm_crc32_u8((uint32_t)reg, *p++);
    n--;
  }
  reg = three_lanes(reg, &p, &n, LONG_LANE, (const uint32_t(*)[256])shift_long);
  reg = three_lanes(reg, &p, &n, SHORT_LANE, (const uint32_t(*)[256])shift_short);
  while (n >= 8) {
    reg = _mm_crc32_u64(reg, load64(p));
    p += 8;
    n -= 8;
  }
  while (n-- > 0) reg = _mm_crc32_u8((uint32_t)reg, *p++);
  return ~(uint32_t)reg;
}
#endif

/* crc32c(bytes: Uint8Array, start: number, end: number, prev: number): number */
static napi_value Crc32c(napi_env env, napi_callback_info info) {
  size_t argc = 4;
  napi_value argv[4];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < 4) {
    napi_throw_type_error(env, "ERR_CRC32C_ARGS", "crc32c(bytes, start, end, prev)");
    return NULL;
  }
  napi_typedarray_type type;
  size_t length;
  void *data;
  if (napi_get_typedarray_info(env, argv[0], &type, &length, &data, NULL, NULL) != napi_ok ||
      type != napi_uint8_array) {
    napi_throw_type_error(env, "ERR_CRC32C_ARGS", "crc32c: bytes must be a Uint8Array");
    return NULL;
  }
  uint32_t start, end, prev;
  if (napi_get_value_uint32(env, argv[1], &start) != napi_ok ||
      napi_get_value_uint32(env, argv[2], &end) != napi_ok ||
      napi_get_value_uint32(env, argv[3], &prev) != napi_ok || start > end || end > length) {
    napi_throw_range_error(env, "ERR_CRC32C_RANGE", "crc32c: need 0 <= start <= end <= bytes.length");
    return NULL;
  }
  uint32_t crc = prev;
#if HAVE_X86_CRC
  if (hw_ok) crc = crc32c_hw((const uint8_t *)data + start, end - start, prev);
#endif
  napi_value result;
  napi_create_uint32(env, crc, &result);
  return result;
}

NAPI_MODULE_INIT() {
#if HAVE_X86_CRC
  __builtin_cpu_init();
  hw_ok = __builtin_cpu_supports("sse4.2");
  if (hw_ok) {
    make_shift_table(shift_long, LONG_LANE);
    make_shift_table(shift_short, SHORT_LANE);
  }
#endif
  napi_value fn, supported;
  napi_create_function(env, "crc32c", NAPI_AUTO_LENGTH, Crc32c, NULL, &fn);
  napi_set_named_property(env, exports, "crc32c", fn);
  napi_get_boolean(env, hw_ok != 0, &supported);
  napi_set_named_property(env, exports, "supported", supported);
  return exports;
}
