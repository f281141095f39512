/*
 * CRC32c (Castagnoli) for the soft iWARP provider's MPA CRC (RFC 5044 §4.4), on x86-64.
 *
 * Why: MPA checksums every byte twice (sender and receiver), and a CRC over one lane is bound by the CRC32
 * instruction's 3-cycle latency (about 8 GB/s here, what @node-rs/crc32 reaches): at RDMA Write speeds that
 * costs a third of the link. Two faster paths, chosen at load time by what the CPU has:
 *
 * - AVX-512 + VPCLMULQDQ (about 65 GB/s here): folding. The message is read 256 bytes at a time into sixteen
 *   128-bit accumulators (four zmm registers). Appending a block B at distance D to an accumulator A is, mod P,
 *   A·x^D + B; with A = hi·x^64 + lo (hi = the first 8 bytes: reflected bit order puts the first bit at the
 *   highest degree), A·x^D ≡ hi·(x^(D+64) mod P) + lo·(x^D mod P), two carry-less multiplies that fit in 96
 *   bits. PCLMULQDQ on reflected operands yields the product one degree low, hence the constants
 *   x^(D+63) and x^(D-1) (D = 2048), computed at load time. At the end the accumulators, taken as a 256-byte
 *   message, have the prefix's CRC (the CRC is linear and depends only on the polynomial mod P): the CRC32
 *   instruction finishes them, and the tail.
 * - SSE4.2 (about 30 GB/s here): the CRC32 instruction over three interleaved lanes. A block of 3·L bytes is
 *   split into three runs of L bytes, each CRC'd from its own register; the lanes are joined by linearity:
 *   the raw register after A‖B is shift_|B|(raw(A)) ^ raw_0(B), where shift_n is the register after n zero
 *   bytes, a linear map read from a 4×256 table made at load time (one table per lane length).
 *
 * `method` says which path serves; RPCRDMA_CRC32C_METHOD=sse42 skips the fold (for tests and comparisons).
 *
 * No dependency beyond Node-API and a C compiler, so it builds where the verbs addon cannot (no rdma-core
 * headers). On a CPU without SSE4.2 (or not x86-64) `supported` is false and JavaScript uses its fallback.
 */
#include <node_api.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define HAVE_X86_CRC 1
#include <immintrin.h>
#define TARGET_CRC __attribute__((target("sse4.2")))
#define TARGET_FOLD __attribute__((target("sse4.2,avx512f,vpclmulqdq")))
#else
#define HAVE_X86_CRC 0
#endif

#define LONG_LANE 8192
#define SHORT_LANE 256

static int hw_ok;
static int fold_ok;

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

#define FOLD_DISTANCE_BITS 2048 /* four zmm registers: 256 bytes per step */
static uint64_t fold_constants[8] __attribute__((aligned(64)));

/* x^n mod P (P = x^32 + 0x1EDC6F41) as a reflected 64-bit PCLMULQDQ operand: degree d at bit 63 - d. */
static uint64_t xpow_mod_operand(unsigned n) {
  uint64_t r = 1;
  for (unsigned i = 0; i < n; i++) {
    r <<= 1;
    if (r & 0x100000000ull) r ^= 0x11EDC6F41ull;
  }
  uint64_t operand = 0;
  for (int d = 0; d < 32; d++)
    if ((r >> d) & 1) operand |= 1ull << (63 - d);
  return operand;
}

static void make_fold_constants(void) {
  const uint64_t for_hi = xpow_mod_operand(FOLD_DISTANCE_BITS + 63);
  const uint64_t for_lo = xpow_mod_operand(FOLD_DISTANCE_BITS - 1);
  for (int i = 0; i < 8; i += 2) {
    fold_constants[i] = for_hi;
    fold_constants[i + 1] = for_lo;
  }
}

#define FOLD_STEP(acc, at)                                                       \
  do {                                                                           \
    const __m512i next = _mm512_loadu_si512((const void *)(at));                 \
    const __m512i hi = _mm512_clmulepi64_epi128(acc, k, 0x00);                  \
    const __m512i lo = _mm512_clmulepi64_epi128(acc, k, 0x11);                   \
    acc = _mm512_ternarylogic_epi64(hi, lo, next, 0x96); /* hi ^ lo ^ next */   \
  } while (0)

/* Folds all whole 256-byte steps (n >= 512 on entry); returns the raw register after them. */
TARGET_FOLD static uint64_t fold_avx512(uint64_t reg, const uint8_t **pp, size_t *np) {
  const uint8_t *p = *pp;
  size_t n = *np;
  const __m512i k = _mm512_load_si512((const void *)fold_constants);
  __m512i a0 = _mm512_loadu_si512((const void *)p);
  __m512i a1 = _mm512_loadu_si512((const void *)(p + 64));
  __m512i a2 = _mm512_loadu_si512((const void *)(p + 128));
  __m512i a3 = _mm512_loadu_si512((const void *)(p + 192));
  /* The initial register enters as the first four message bytes XORed with it. Zero-extended: the cast
     (_mm512_castsi128_si512) leaves bits 128..511 undefined, and XORing garbage into lanes 1-3 would corrupt
     the fold (the compiler may keep whatever a register held there). */
  a0 = _mm512_xor_si512(a0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)(uint32_t)reg)));
  p += 256;
  n -= 256;
  while (n >= 256) {
    FOLD_STEP(a0, p);
    FOLD_STEP(a1, p + 64);
    FOLD_STEP(a2, p + 128);
    FOLD_STEP(a3, p + 192);
    p += 256;
    n -= 256;
  }
  uint64_t acc[32];
  _mm512_storeu_si512((void *)acc, a0);
  _mm512_storeu_si512((void *)(acc + 8), a1);
  _mm512_storeu_si512((void *)(acc + 16), a2);
  _mm512_storeu_si512((void *)(acc + 24), a3);
  reg = 0;
  for (int i = 0; i < 32; i++) reg = _mm_crc32_u64(reg, acc[i]);
  *pp = p;
  *np = n;
  return reg;
}

TARGET_CRC static uint32_t crc32c_hw(const uint8_t *p, size_t n, uint32_t prev) {
  uint64_t reg = (uint32_t)~prev;
  if (fold_ok && n >= 512) reg = fold_avx512(reg, &p, &n);
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
    /* RPCRDMA_CRC32C_METHOD=sse42 keeps the three-lane path (tests cover it on AVX-512 machines too). */
    const char *method = getenv("RPCRDMA_CRC32C_METHOD");
    fold_ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq") &&
              !(method != NULL && strcmp(method, "sse42") == 0);
    if (fold_ok) make_fold_constants();
  }
#endif
  napi_value fn, supported, method;
  napi_create_function(env, "crc32c", NAPI_AUTO_LENGTH, Crc32c, NULL, &fn);
  napi_set_named_property(env, exports, "crc32c", fn);
  napi_get_boolean(env, hw_ok != 0, &supported);
  napi_set_named_property(env, exports, "supported", supported);
  napi_create_string_utf8(env, fold_ok ? "avx512-fold" : hw_ok ? "sse42-3way" : "none", NAPI_AUTO_LENGTH,
                          &method);
  napi_set_named_property(env, exports, "method", method);
  return exports;
}
