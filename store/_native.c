/*
 * store._native: the store's per-record hot loops in C.
 *
 * Why native: Python spends about a microsecond per record on work that is a few bswaps and a
 * CRC pass in C. This module does that work, and only that work, for:
 * - appends (write_record, write_batch, put_cq_units): copy a pre-encoded record template into
 *   the commitlog mapping and fill in QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and the
 *   `__CRC32#` digits; write a batch's consume-queue units;
 * - one message (encode_message): prepare_message's record template, in one pass;
 * - one send (encode_properties, append_message): the properties string of a dict, and a
 *   message encoded straight into the commitlog mapping with its consume-queue unit, in one
 *   call (MessageStore.append_message_fields);
 * - SEND_BATCH_MESSAGE bodies (batch_body_is_plain, encode_batch): check and encode in one pass;
 * - reads and recovery (records_surely_valid): the common-record check, both CRCs included;
 * - a file's kernel calls in a row with the GIL released once, not once per system call:
 *   pre-faulting ahead of its writer (prefault: a chunk's zero writes and populate call) and
 *   a flush (sync_range: its writeback started chunk by chunk, then the msync).
 * Every function has a Python twin in store/ that stays the reference (tests hold both to the
 * same bytes and answers) and runs when this module is not built. Nothing here decides policy:
 * whatever is unusual, C answers "not mine" and Python handles it, refusals included.
 *
 * crc32 is zlib's CRC-32 (reflected polynomial 0xEDB88320, pre- and post-inverted), by carry-less
 * multiplication folding (Gopal et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction", Intel 2009): 256 bytes per step with AVX-512 VPCLMULQDQ, 64 with
 * PCLMULQDQ, and slicing-by-8 on other CPUs. The folding constants are x^k mod P for the fold
 * distances, bit-reflected and shifted left one (tests/unit/test_native.py recomputes them).
 */
#define PY_SSIZE_T_CLEAN
#define _GNU_SOURCE /* memmem */
#include <Python.h>

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define PYRMQ_HAVE_CLMUL 1
#include <immintrin.h>
#endif

/* Record layout (docs/store-format.md §3): QUEUEOFFSET at 20, PHYSICALOFFSET at 28. */
#define QUEUE_OFFSET_AT 20
#define PHY_OFFSET_AT 28
/* The `__CRC32#` property reservation at the end of PROPERTIES: name, 0x01, 10 digits, 0x02. */
#define CRC_RESERVED_BYTES 20
#define CRC_MASK 0x7FFFFFFFu
/* tags_codes: a value with a non-ASCII byte, hashed by the caller (Java hashes are int32). */
#define TAGS_NOT_ASCII (-((int64_t)1 << 62))
static const char CRC_KEY[] = "__CRC32#\x01"; /* the property's name and 0x01: 9 bytes */

/* ------------------------------------------------------------------ CRC-32, slicing-by-8 */

static uint32_t crc_table[8][256];

static void
crc_table_init(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = crc_table[0][n];
        for (int t = 1; t < 8; t++) {
            c = crc_table[0][c & 0xFF] ^ (c >> 8);
            crc_table[t][n] = c;
        }
    }
}

/* `state` is the inverted running CRC (what the register holds between bytes). */
static uint32_t
crc_update_sw(uint32_t state, const uint8_t *p, size_t n)
{
    while (n && ((uintptr_t)p & 7)) {
        state = crc_table[0][(state ^ *p++) & 0xFF] ^ (state >> 8);
        n--;
    }
    while (n >= 8) {
        uint64_t word;
        memcpy(&word, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
        word = __builtin_bswap64(word);
#endif
        word ^= state;
        state = crc_table[7][word & 0xFF] ^ crc_table[6][(word >> 8) & 0xFF] ^
                crc_table[5][(word >> 16) & 0xFF] ^ crc_table[4][(word >> 24) & 0xFF] ^
                crc_table[3][(word >> 32) & 0xFF] ^ crc_table[2][(word >> 40) & 0xFF] ^
                crc_table[1][(word >> 48) & 0xFF] ^ crc_table[0][word >> 56];
        p += 8;
        n -= 8;
    }
    while (n--)
        state = crc_table[0][(state ^ *p++) & 0xFF] ^ (state >> 8);
    return state;
}

/* ------------------------------------------------------------------ CRC-32, PCLMULQDQ */

#ifdef PYRMQ_HAVE_CLMUL
/* What the CPU can run, and what crc_update uses (the best, unless a test chose another). */
static int have_clmul, have_vpclmul, use_clmul, use_vpclmul;

/* Folding moves a 128-bit lane D bits ahead: lo * (x^(D+32) mod P) ^ hi * (x^(D-32) mod P), the
 * constants bit-reflected and shifted left one (tests/unit/test_native.py recomputes them all).
 * K64 = x^64 mod P takes 64 bits to 32; P_X and MU = floor(x^64 / P) are Barrett's. */
#define K512_LO 0x0154442bd4ULL
#define K512_HI 0x01c6e41596ULL
#define K128_LO 0x01751997d0ULL
#define K128_HI 0x00ccaa009eULL
#define K64 0x0163cd6124ULL
#define P_X 0x01db710641ULL
#define MU 0x01f7011641ULL

#define K256_LO 0x00f1da05aaULL
#define K256_HI 0x015a546366ULL
#define K384_LO 0x003db1ecdcULL
#define K384_HI 0x0174359406ULL

__attribute__((target("pclmul,sse4.1"))) static inline __m128i
fold128(__m128i lane, __m128i k)
{
    return _mm_xor_si128(_mm_clmulepi64_si128(lane, k, 0x00), _mm_clmulepi64_si128(lane, k, 0x11));
}

/* Four lanes covering the last 64 bytes folded, then 16-byte steps, down to 32 bits. The four
 * lanes fold in parallel, each by its own distance, so the chain stays short: a record's CRC
 * is latency-bound. */
__attribute__((target("pclmul,sse4.1"))) static inline uint32_t
crc_fold_tail(__m128i x1, __m128i x2, __m128i x3, __m128i x4, const uint8_t *p, size_t n)
{
    const __m128i k128 = _mm_set_epi64x((long long)K128_HI, (long long)K128_LO);
    x1 = _mm_xor_si128(
        _mm_xor_si128(fold128(x1, _mm_set_epi64x((long long)K384_HI, (long long)K384_LO)),
                      fold128(x2, _mm_set_epi64x((long long)K256_HI, (long long)K256_LO))),
        _mm_xor_si128(fold128(x3, k128), x4));
    while (n >= 16) {
        x1 = _mm_xor_si128(fold128(x1, k128), _mm_loadu_si128((const __m128i *)p));
        p += 16;
        n -= 16;
    }
    /* 128 bits to 64: the low half times x^(128-32), folded onto the high half. */
    const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
    __m128i t = _mm_clmulepi64_si128(x1, k128, 0x10);
    x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), t);
    /* 64 bits to 32 + 64: the low 32 bits times x^64. */
    __m128i k = _mm_set_epi64x(0, (long long)K64);
    t = _mm_srli_si128(x1, 4);
    x1 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), k, 0x00);
    x1 = _mm_xor_si128(x1, t);
    /* Barrett reduction to 32 bits. */
    k = _mm_set_epi64x((long long)MU, (long long)P_X);
    t = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), k, 0x10);
    t = _mm_clmulepi64_si128(_mm_and_si128(t, low32), k, 0x00);
    x1 = _mm_xor_si128(x1, t);
    return (uint32_t)_mm_extract_epi32(x1, 1);
}

/* 128-bit PCLMULQDQ: four lanes, 64 bytes per step. n >= 64 and n % 16 == 0. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t
crc_fold_clmul(uint32_t state, const uint8_t *p, size_t n)
{
    __m128i x1 = _mm_loadu_si128((const __m128i *)(p + 0));
    __m128i x2 = _mm_loadu_si128((const __m128i *)(p + 16));
    __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32));
    __m128i x4 = _mm_loadu_si128((const __m128i *)(p + 48));
    x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)state));
    const __m128i k = _mm_set_epi64x((long long)K512_HI, (long long)K512_LO);
    p += 64;
    n -= 64;
    while (n >= 64) {
        x1 = _mm_xor_si128(fold128(x1, k), _mm_loadu_si128((const __m128i *)(p + 0)));
        x2 = _mm_xor_si128(fold128(x2, k), _mm_loadu_si128((const __m128i *)(p + 16)));
        x3 = _mm_xor_si128(fold128(x3, k), _mm_loadu_si128((const __m128i *)(p + 32)));
        x4 = _mm_xor_si128(fold128(x4, k), _mm_loadu_si128((const __m128i *)(p + 48)));
        p += 64;
        n -= 64;
    }
    return crc_fold_tail(x1, x2, x3, x4, p, n);
}

/* The same for a 512-bit register (four lanes) moved 2048, 1536 or 1024 bits. */
#define K2048_LO 0x011542778aULL
#define K2048_HI 0x01322d1430ULL
#define K1536_LO 0x01821d8bc0ULL
#define K1536_HI 0x012e958ac4ULL
#define K1024_LO 0x01e88ef372ULL
#define K1024_HI 0x014a7fe880ULL

#define VPCLMUL_TARGET "avx512f,avx512vl,vpclmulqdq,pclmul,sse4.1"

__attribute__((target(VPCLMUL_TARGET))) static inline __m512i
fold512(__m512i reg, unsigned long long lo, unsigned long long hi)
{
    __m512i k = _mm512_broadcast_i32x4(_mm_set_epi64x((long long)hi, (long long)lo));
    return _mm512_xor_si512(_mm512_clmulepi64_epi128(reg, k, 0x00),
                            _mm512_clmulepi64_epi128(reg, k, 0x11));
}

/* AVX-512 VPCLMULQDQ: sixteen lanes in four registers, 256 bytes per step, then the same
 * tail. The input's first 256 bytes are read from `first`, the rest from `p + 256` (so a record
 * can be checked with its header patched in a scratch copy). n >= 256 and n % 16 == 0. */
__attribute__((target(VPCLMUL_TARGET))) static uint32_t
crc_fold_vpclmul(uint32_t state, const uint8_t *first, const uint8_t *p, size_t n)
{
    __m512i a = _mm512_loadu_si512((const void *)(first + 0));
    __m512i b = _mm512_loadu_si512((const void *)(first + 64));
    __m512i c = _mm512_loadu_si512((const void *)(first + 128));
    __m512i d = _mm512_loadu_si512((const void *)(first + 192));
    a = _mm512_xor_si512(a, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)state)));
    p += 256;
    n -= 256;
    while (n >= 256) {
        a = _mm512_xor_si512(fold512(a, K2048_LO, K2048_HI),
                             _mm512_loadu_si512((const void *)(p + 0)));
        b = _mm512_xor_si512(fold512(b, K2048_LO, K2048_HI),
                             _mm512_loadu_si512((const void *)(p + 64)));
        c = _mm512_xor_si512(fold512(c, K2048_LO, K2048_HI),
                             _mm512_loadu_si512((const void *)(p + 128)));
        d = _mm512_xor_si512(fold512(d, K2048_LO, K2048_HI),
                             _mm512_loadu_si512((const void *)(p + 192)));
        p += 256;
        n -= 256;
    }
    /* Four registers into one, in parallel: a, b, c each moved up to d. */
    a = _mm512_ternarylogic_epi64(fold512(a, K1536_LO, K1536_HI), fold512(b, K1024_LO, K1024_HI),
                                  _mm512_xor_si512(fold512(c, K512_LO, K512_HI), d), 0x96);
    while (n >= 64) {
        a = _mm512_xor_si512(fold512(a, K512_LO, K512_HI), _mm512_loadu_si512((const void *)p));
        p += 64;
        n -= 64;
    }
    return crc_fold_tail(_mm512_extracti32x4_epi32(a, 0), _mm512_extracti32x4_epi32(a, 1),
                         _mm512_extracti32x4_epi32(a, 2), _mm512_extracti32x4_epi32(a, 3), p, n);
}

/* Two CRCs of equal-length inputs side by side, each as crc_fold_vpclmul. One record's CRC is
 * a chain of dependent multiplies, so two independent chains interleaved take little longer
 * than one. n >= 256 and n % 16 == 0. */
__attribute__((target(VPCLMUL_TARGET))) static void
crc_fold_vpclmul_x2(uint32_t *state1, const uint8_t *first1, const uint8_t *p1,
                    uint32_t *state2, const uint8_t *first2, const uint8_t *p2, size_t n)
{
    __m512i a1 = _mm512_loadu_si512((const void *)(first1 + 0));
    __m512i b1 = _mm512_loadu_si512((const void *)(first1 + 64));
    __m512i c1 = _mm512_loadu_si512((const void *)(first1 + 128));
    __m512i d1 = _mm512_loadu_si512((const void *)(first1 + 192));
    __m512i a2 = _mm512_loadu_si512((const void *)(first2 + 0));
    __m512i b2 = _mm512_loadu_si512((const void *)(first2 + 64));
    __m512i c2 = _mm512_loadu_si512((const void *)(first2 + 128));
    __m512i d2 = _mm512_loadu_si512((const void *)(first2 + 192));
    a1 = _mm512_xor_si512(a1, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)*state1)));
    a2 = _mm512_xor_si512(a2, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)*state2)));
    size_t at = 256;
#define NEXT(reg, p, off)                                                                 \
    reg = _mm512_xor_si512(fold512(reg, K2048_LO, K2048_HI),                              \
                           _mm512_loadu_si512((const void *)((p) + at + (off))))
    for (; n - at >= 256; at += 256) {
        NEXT(a1, p1, 0);
        NEXT(a2, p2, 0);
        NEXT(b1, p1, 64);
        NEXT(b2, p2, 64);
        NEXT(c1, p1, 128);
        NEXT(c2, p2, 128);
        NEXT(d1, p1, 192);
        NEXT(d2, p2, 192);
    }
#undef NEXT
    a1 = _mm512_ternarylogic_epi64(fold512(a1, K1536_LO, K1536_HI),
                                   fold512(b1, K1024_LO, K1024_HI),
                                   _mm512_xor_si512(fold512(c1, K512_LO, K512_HI), d1), 0x96);
    a2 = _mm512_ternarylogic_epi64(fold512(a2, K1536_LO, K1536_HI),
                                   fold512(b2, K1024_LO, K1024_HI),
                                   _mm512_xor_si512(fold512(c2, K512_LO, K512_HI), d2), 0x96);
    for (; n - at >= 64; at += 64) {
        a1 = _mm512_xor_si512(fold512(a1, K512_LO, K512_HI),
                              _mm512_loadu_si512((const void *)(p1 + at)));
        a2 = _mm512_xor_si512(fold512(a2, K512_LO, K512_HI),
                              _mm512_loadu_si512((const void *)(p2 + at)));
    }
    *state1 = crc_fold_tail(_mm512_extracti32x4_epi32(a1, 0), _mm512_extracti32x4_epi32(a1, 1),
                            _mm512_extracti32x4_epi32(a1, 2), _mm512_extracti32x4_epi32(a1, 3),
                            p1 + at, n - at);
    *state2 = crc_fold_tail(_mm512_extracti32x4_epi32(a2, 0), _mm512_extracti32x4_epi32(a2, 1),
                            _mm512_extracti32x4_epi32(a2, 2), _mm512_extracti32x4_epi32(a2, 3),
                            p2 + at, n - at);
}
#endif

static uint32_t
crc_update(uint32_t state, const uint8_t *p, size_t n)
{
#ifdef PYRMQ_HAVE_CLMUL
    if (use_vpclmul && n >= 256) {
        size_t folded = n & ~(size_t)15;
        state = crc_fold_vpclmul(state, p, p, folded);
        p += folded;
        n -= folded;
    } else if (use_clmul && n >= 64) {
        size_t folded = n & ~(size_t)15;
        state = crc_fold_clmul(state, p, folded);
        p += folded;
        n -= folded;
    }
#endif
    return crc_update_sw(state, p, n);
}

static inline uint32_t
crc32_of(uint32_t crc, const uint8_t *p, size_t n)
{
    return ~crc_update(~crc, p, n);
}

/* ------------------------------------------------------------------ helpers */

static inline void
put_be64(uint8_t *at, int64_t value)
{
    uint64_t v = (uint64_t)value;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(at, &v, 8);
}

static inline uint32_t
get_be32(const uint8_t *at)
{
    uint32_t v;
    memcpy(&v, at, 4);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    return v;
}

/* RocketMQ writes the masked CRC as ten decimal digits, least significant first. */
static inline void
put_crc_digits(uint8_t *at, uint32_t crc)
{
    for (int i = 0; i < 10; i++) {
        at[i] = (uint8_t)('0' + crc % 10);
        crc /= 10;
    }
}

/* A C-contiguous buffer of native-endian signed integers of `itemsize` bytes (numpy int32/int64
 * arrays: format "i"/"<i", "l"/"<l" or "q"/"<q"). */
static int
is_native_int(const Py_buffer *view, Py_ssize_t itemsize, const char *what)
{
    const char *fmt = view->format ? view->format : "B";
    if (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@')
        fmt++;
    int ok = view->itemsize == itemsize && fmt[0] != '\0' && fmt[1] == '\0' &&
             ((itemsize == 4 && fmt[0] == 'i') ||
              (itemsize == 8 && (fmt[0] == 'q' || fmt[0] == 'l')));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    ok = ok && view->format[0] != '<';
#endif
    if (!ok)
        PyErr_Format(PyExc_TypeError, "%s must be a native int%zd array, got format %s", what,
                     itemsize * 8, view->format ? view->format : "B");
    return ok;
}

/* A record's first bytes as they will be written, for its CRC: up to SCRATCH_BYTES of the
 * template (of `len`), with QUEUEOFFSET, PHYSICALOFFSET and STORETIMESTAMP filled in. */
#define SCRATCH_BYTES 256

static inline void
patch_scratch(uint8_t *scratch, const uint8_t *record, size_t len, long long queue_offset,
              long long phy_offset, long long store_timestamp, Py_ssize_t ts_at)
{
    memcpy(scratch, record, len < SCRATCH_BYTES ? len : SCRATCH_BYTES);
    put_be64(scratch + QUEUE_OFFSET_AT, queue_offset);
    put_be64(scratch + PHY_OFFSET_AT, phy_offset);
    put_be64(scratch + ts_at, store_timestamp);
}

/* One record's CRC, read from its template (`len` bytes covered) and a patched scratch copy
 * of its start, never from the destination: reading lines just written to cold commitlog
 * pages would wait for their fetch from memory. */
static inline uint32_t
record_crc(const uint8_t *record, size_t len, long long queue_offset, long long phy_offset,
           long long store_timestamp, Py_ssize_t ts_at)
{
    uint8_t scratch[SCRATCH_BYTES];
    patch_scratch(scratch, record, len, queue_offset, phy_offset, store_timestamp, ts_at);
    uint32_t state;
#ifdef PYRMQ_HAVE_CLMUL
    if (use_vpclmul && len >= SCRATCH_BYTES) {
        size_t folded = len & ~(size_t)15;
        state = crc_fold_vpclmul(~0u, scratch, record, folded);
        state = crc_update_sw(state, record + folded, len - folded);
        return ~state & CRC_MASK;
    }
#endif
    if (len > SCRATCH_BYTES)
        state = crc_update(crc_update(~0u, scratch, SCRATCH_BYTES), record + SCRATCH_BYTES,
                           len - SCRATCH_BYTES);
    else
        state = crc_update(~0u, scratch, len);
    return ~state & CRC_MASK;
}

/* Fill in a copied record's QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP and CRC digits. */
static inline void
fill_record(uint8_t *out, size_t size, long long queue_offset, long long phy_offset,
            long long store_timestamp, Py_ssize_t ts_at, int append_prop_crc, uint32_t crc)
{
    put_be64(out + QUEUE_OFFSET_AT, queue_offset);
    put_be64(out + PHY_OFFSET_AT, phy_offset);
    put_be64(out + ts_at, store_timestamp);
    if (append_prop_crc)
        put_crc_digits(out + size - 11, crc);
}

/* Whether a record of `size` bytes has room for the fields write_* fill in; sets ValueError. */
static int
layout_fits(Py_ssize_t ts_at, size_t size, int append_prop_crc, Py_ssize_t index)
{
    if (ts_at < PHY_OFFSET_AT + 8 || ts_at + 8 > SCRATCH_BYTES) {
        PyErr_Format(PyExc_ValueError, "store_timestamp_at %zd outside [%d, %d]", ts_at,
                     PHY_OFFSET_AT + 8, SCRATCH_BYTES - 8);
        return 0;
    }
    size_t min_size = (size_t)ts_at + 8 + (append_prop_crc ? CRC_RESERVED_BYTES : 0);
    if (size < min_size) {
        PyErr_Format(PyExc_ValueError, "record %zd: size %zu below the fixed %zu bytes", index,
                     size, min_size);
        return 0;
    }
    return 1;
}

/* ------------------------------------------------------------------ buffer arguments */

/* The flags for an int array argument: C-contiguous, with the format is_native_int checks. */
#define INT_ARRAY (PyBUF_C_CONTIGUOUS | PyBUF_FORMAT)
#define BUFFER_ARGS_MAX 3

/* One buffer argument: the object, the caller's view to fill, the PyObject_GetBuffer flags. */
typedef struct {
    PyObject *obj;
    Py_buffer *view;
    int flags;
} buffer_arg;

/* The views a function holds: released together, last first, by buffers_release. */
typedef struct {
    Py_buffer *view[BUFFER_ARGS_MAX];
    int got;
} buffers;

static void
buffers_release(buffers *held)
{
    while (held->got > 0)
        PyBuffer_Release(held->view[--held->got]);
}

/* Get the views of want[0..n), in order: 1 when all are held (the caller releases them with
 * buffers_release); 0, with the exception set and none held, when one fails. */
static int
buffers_get(buffers *held, int n, const buffer_arg *want)
{
    assert(n <= BUFFER_ARGS_MAX);
    held->got = 0;
    for (int i = 0; i < n; i++) {
        if (PyObject_GetBuffer(want[i].obj, want[i].view, want[i].flags) < 0) {
            buffers_release(held);
            return 0;
        }
        held->view[held->got++] = want[i].view;
    }
    return 1;
}

/* ------------------------------------------------------------------ Python functions */

PyDoc_STRVAR(crc32_doc,
"crc32(data, value=0, /) -> int\n\n"
"zlib's CRC-32 of `data`, continuing from `value`.");

static PyObject *
native_crc32(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, "crc32 takes data and an optional starting value");
        return NULL;
    }
    uint32_t value = 0;
    if (nargs == 2) {
        unsigned long v = PyLong_AsUnsignedLongMask(args[1]);
        if (v == (unsigned long)-1 && PyErr_Occurred())
            return NULL;
        value = (uint32_t)v;
    }
    Py_buffer data;
    if (PyObject_GetBuffer(args[0], &data, PyBUF_SIMPLE) < 0)
        return NULL;
    uint32_t crc;
    if (data.len > 65536) {
        Py_BEGIN_ALLOW_THREADS
        crc = crc32_of(value, data.buf, (size_t)data.len);
        Py_END_ALLOW_THREADS
    } else {
        crc = crc32_of(value, data.buf, (size_t)data.len);
    }
    PyBuffer_Release(&data);
    return PyLong_FromUnsignedLong(crc);
}

PyDoc_STRVAR(write_batch_doc,
"write_batch(buf, pos, template, sizes, first_queue_offset, phy_offset, store_timestamp,\n"
"            store_timestamp_at, append_prop_crc, /) -> int\n\n"
"Copy a batch's record template to buf[pos:] and fill in each record's QUEUEOFFSET\n"
"(first_queue_offset + i), PHYSICALOFFSET (phy_offset + its start in the batch),\n"
"STORETIMESTAMP (at store_timestamp_at within the record) and, with append_prop_crc, the\n"
"`__CRC32#` digits. `sizes` holds the records' int32 sizes. Returns the bytes written.\n"
"Raises ValueError, before writing anything, when the sizes do not tile the template or the\n"
"batch does not fit.");

static PyObject *
native_write_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 9) {
        PyErr_Format(PyExc_TypeError, "write_batch takes 9 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long first_queue_offset = PyLong_AsLongLong(args[4]);
    long long phy_offset = PyLong_AsLongLong(args[5]);
    long long store_timestamp = PyLong_AsLongLong(args[6]);
    Py_ssize_t ts_at = PyLong_AsSsize_t(args[7]);
    int append_prop_crc = PyObject_IsTrue(args[8]);
    if (PyErr_Occurred() || append_prop_crc < 0)
        return NULL;

    Py_buffer buf, template, sizes;
    buffers held;
    if (!buffers_get(&held, 3, (const buffer_arg[]){{args[0], &buf, PyBUF_WRITABLE},
                                                   {args[2], &template, PyBUF_SIMPLE},
                                                   {args[3], &sizes, INT_ARRAY}}))
        return NULL;
    PyObject *result = NULL;
    if (!is_native_int(&sizes, 4, "sizes"))
        goto done;
    Py_ssize_t count = sizes.len / 4;
    const int32_t *size_of = (const int32_t *)sizes.buf;
    if (count == 0) {
        PyErr_SetString(PyExc_ValueError, "a batch needs at least one record");
        goto done;
    }
    Py_ssize_t total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (size_of[i] < 0 || !layout_fits(ts_at, (size_t)size_of[i], append_prop_crc, i))
            goto done;
        total += size_of[i];
    }
    if (total != template.len) {
        PyErr_Format(PyExc_ValueError, "sizes add up to %zd, the template has %zd bytes", total,
                     template.len);
        goto done;
    }
    if (pos < 0 || pos > buf.len || buf.len - pos < total) {
        PyErr_Format(PyExc_ValueError, "batch of %zd bytes at %zd does not fit a %zd-byte buffer",
                     total, pos, buf.len);
        goto done;
    }
    /* In chunks of records: first every CRC, reading only the template and a patched copy of
     * each record's start; then one memcpy of the chunk (glibc's `rep movsb` for large copies:
     * measured faster into cold commitlog pages than a copy per record); then the fields and
     * digits in place. */
    uint8_t *out = (uint8_t *)buf.buf + pos;
    const uint8_t *in = (const uint8_t *)template.buf;
    enum { CHUNK = 64 };
    uint32_t crcs[CHUNK] = {0};
    uint8_t scratch1[SCRATCH_BYTES], scratch2[SCRATCH_BYTES];
    long long phy = phy_offset;
    for (Py_ssize_t first = 0; first < count; first += CHUNK) {
        Py_ssize_t last = first + CHUNK < count ? first + CHUNK : count;
        const uint8_t *at = in;
        long long at_phy = phy;
        size_t chunk_bytes = 0;
        for (Py_ssize_t i = first; i < last; i++) {
            size_t size = (size_t)size_of[i];
            size_t len = size - CRC_RESERVED_BYTES; /* the CRC covers the record up to it */
#ifdef PYRMQ_HAVE_CLMUL
            if (append_prop_crc && use_vpclmul && len >= SCRATCH_BYTES && i + 1 < last &&
                size_of[i + 1] == size_of[i]) {
                /* Two records of one size (the common batch): their CRCs side by side. */
                const uint8_t *at2 = at + size;
                uint32_t s1 = ~0u, s2 = ~0u;
                size_t folded = len & ~(size_t)15;
                patch_scratch(scratch1, at, len, first_queue_offset + i, at_phy, store_timestamp,
                              ts_at);
                patch_scratch(scratch2, at2, len, first_queue_offset + i + 1,
                              at_phy + (long long)size, store_timestamp, ts_at);
                crc_fold_vpclmul_x2(&s1, scratch1, at, &s2, scratch2, at2, folded);
                crcs[i - first] = ~crc_update_sw(s1, at + folded, len - folded) & CRC_MASK;
                crcs[i + 1 - first] = ~crc_update_sw(s2, at2 + folded, len - folded) & CRC_MASK;
                at += size;
                at_phy += (long long)size;
                chunk_bytes += size;
                i++;
            } else
#endif
            if (append_prop_crc) {
                crcs[i - first] = record_crc(at, len, first_queue_offset + i, at_phy,
                                             store_timestamp, ts_at);
            }
            at += size;
            at_phy += (long long)size;
            chunk_bytes += size;
        }
        memcpy(out, in, chunk_bytes);
        for (Py_ssize_t i = first; i < last; i++) {
            size_t size = (size_t)size_of[i];
            fill_record(out, size, first_queue_offset + i, phy, store_timestamp, ts_at,
                        append_prop_crc, crcs[i - first]);
            out += size;
            phy += (long long)size;
        }
        in += chunk_bytes;
    }
    result = PyLong_FromSsize_t(total);
done:
    buffers_release(&held);
    return result;
}

PyDoc_STRVAR(set_crc32_implementation_doc,
"set_crc32_implementation(name, /) -> str\n\n"
"Use `name` (one of supported_crc32_implementations()) from now on; returns the previous one.\n"
"For tests, which hold every implementation this CPU can run to zlib's results.");

static const char *
current_impl(void)
{
#ifdef PYRMQ_HAVE_CLMUL
    if (use_vpclmul)
        return "vpclmulqdq";
    if (use_clmul)
        return "pclmulqdq";
#endif
    return "slicing-by-8";
}

static PyObject *
native_set_crc32_implementation(PyObject *module, PyObject *name)
{
    (void)module;
    const char *want = PyUnicode_AsUTF8(name);
    if (want == NULL)
        return NULL;
    PyObject *previous = PyUnicode_FromString(current_impl());
    if (previous == NULL)
        return NULL;
    if (strcmp(want, "slicing-by-8") == 0) {
#ifdef PYRMQ_HAVE_CLMUL
        use_clmul = use_vpclmul = 0;
#endif
        return previous;
    }
#ifdef PYRMQ_HAVE_CLMUL
    if (strcmp(want, "pclmulqdq") == 0 && have_clmul) {
        use_clmul = 1;
        use_vpclmul = 0;
        return previous;
    }
    if (strcmp(want, "vpclmulqdq") == 0 && have_vpclmul) {
        use_clmul = use_vpclmul = 1;
        return previous;
    }
#endif
    Py_DECREF(previous);
    PyErr_Format(PyExc_ValueError, "crc32 implementation %R is not available on this CPU", name);
    return NULL;
}

static PyObject *
native_supported_crc32_implementations(PyObject *module, PyObject *unused)
{
    (void)module;
    (void)unused;
#ifdef PYRMQ_HAVE_CLMUL
    if (have_vpclmul)
        return Py_BuildValue("(sss)", "slicing-by-8", "pclmulqdq", "vpclmulqdq");
    if (have_clmul)
        return Py_BuildValue("(ss)", "slicing-by-8", "pclmulqdq");
#endif
    return Py_BuildValue("(s)", "slicing-by-8");
}

PyDoc_STRVAR(write_record_doc,
"write_record(buf, pos, template, queue_offset, phy_offset, store_timestamp,\n"
"             store_timestamp_at, append_prop_crc, /) -> int\n\n"
"write_batch for one record: copy `template` to buf[pos:] and fill in its QUEUEOFFSET,\n"
"PHYSICALOFFSET, STORETIMESTAMP and CRC digits. Returns the bytes written.");

static PyObject *
native_write_record(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_Format(PyExc_TypeError, "write_record takes 8 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long queue_offset = PyLong_AsLongLong(args[3]);
    long long phy_offset = PyLong_AsLongLong(args[4]);
    long long store_timestamp = PyLong_AsLongLong(args[5]);
    Py_ssize_t ts_at = PyLong_AsSsize_t(args[6]);
    int append_prop_crc = PyObject_IsTrue(args[7]);
    if (PyErr_Occurred() || append_prop_crc < 0)
        return NULL;
    Py_buffer buf, template;
    buffers held;
    if (!buffers_get(&held, 2, (const buffer_arg[]){{args[0], &buf, PyBUF_WRITABLE},
                                                   {args[2], &template, PyBUF_SIMPLE}}))
        return NULL;
    PyObject *result = NULL;
    size_t size = (size_t)template.len;
    if (!layout_fits(ts_at, size, append_prop_crc, 0))
        goto done;
    if (pos < 0 || pos > buf.len || (size_t)(buf.len - pos) < size) {
        PyErr_Format(PyExc_ValueError, "record of %zu bytes at %zd does not fit a %zd-byte buffer",
                     size, pos, buf.len);
        goto done;
    }
    const uint8_t *in = (const uint8_t *)template.buf;
    uint32_t crc = append_prop_crc ? record_crc(in, size - CRC_RESERVED_BYTES, queue_offset,
                                                phy_offset, store_timestamp, ts_at)
                                   : 0;
    uint8_t *out = (uint8_t *)buf.buf + pos;
    memcpy(out, in, size);
    fill_record(out, size, queue_offset, phy_offset, store_timestamp, ts_at, append_prop_crc, crc);
    result = PyLong_FromSize_t(size);
done:
    buffers_release(&held);
    return result;
}

PyDoc_STRVAR(put_cq_units_doc,
"put_cq_units(buf, pos, phy_offset, sizes, tags_codes, /) -> int\n\n"
"Write one consume-queue unit (phyOffset i64, size i32, tagsCode i64, big-endian) per record\n"
"of a contiguous batch at buf[pos:]: record i starts at phy_offset plus the sizes before it.\n"
"Returns the commitlog offset after the last record; raises ValueError, before writing, when\n"
"the units do not fit.");

static PyObject *
native_put_cq_units(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "put_cq_units takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long phy = PyLong_AsLongLong(args[2]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer buf, sizes, tags;
    buffers held;
    if (!buffers_get(&held, 3, (const buffer_arg[]){{args[0], &buf, PyBUF_WRITABLE},
                                                   {args[3], &sizes, INT_ARRAY},
                                                   {args[4], &tags, INT_ARRAY}}))
        return NULL;
    PyObject *result = NULL;
    if (!is_native_int(&sizes, 4, "sizes") || !is_native_int(&tags, 8, "tags_codes"))
        goto done;
    Py_ssize_t count = sizes.len / 4;
    if (tags.len / 8 != count) {
        PyErr_Format(PyExc_ValueError, "%zd sizes but %zd tags codes", count, tags.len / 8);
        goto done;
    }
    Py_ssize_t nbytes = count * 20;
    if (pos < 0 || pos > buf.len || buf.len - pos < nbytes) {
        PyErr_Format(PyExc_ValueError, "%zd units at %zd do not fit a %zd-byte buffer", count, pos,
                     buf.len);
        goto done;
    }
    const int32_t *size_of = (const int32_t *)sizes.buf;
    const int64_t *tags_code = (const int64_t *)tags.buf;
    uint8_t *out = (uint8_t *)buf.buf + pos;
    for (Py_ssize_t i = 0; i < count; i++) {
        uint32_t size = (uint32_t)size_of[i];
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        size = __builtin_bswap32(size);
#endif
        put_be64(out, phy);
        memcpy(out + 8, &size, 4);
        put_be64(out + 12, tags_code[i]);
        phy += size_of[i];
        out += 20;
    }
    result = PyLong_FromLongLong(phy);
done:
    buffers_release(&held);
    return result;
}

/* ------------------------------------------------------------------ checking stored records */

#define MAGIC_CODE_V1 ((int32_t)0xDAA320A7)
#define V4_FIXED_BYTES 88 /* the header with IPv4 born and store hosts, BODYLENGTH included */

static inline int64_t
get_be64(const uint8_t *at)
{
    uint64_t v;
    memcpy(&v, at, 8);
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return (int64_t)v;
}

/* recovery._surely_valid for one record: 1 only if check_record would certainly say VALID with
 * this size (the common layout: V1, IPv4 hosts, an ASCII topic; every check passed). 0 means
 * "ask check_record", not "invalid". */
static int
record_surely_valid(const uint8_t *buf, Py_ssize_t buf_len, int64_t pos, int64_t size,
                    int64_t phy_offset, int verify_prop_crc)
{
    if (pos < 0 || size < V4_FIXED_BYTES + 3 || size > buf_len - pos)
        return 0;
    const uint8_t *r = buf + pos;
    if ((int32_t)get_be32(r) != size || (int32_t)get_be32(r + 4) != MAGIC_CODE_V1 ||
        (r[39] & 0x30) != 0 || get_be64(r + 28) != phy_offset)
        return 0;
    int32_t body_length = (int32_t)get_be32(r + 84);
    if (body_length < 0 || V4_FIXED_BYTES + (int64_t)body_length > size - 3)
        return 0;
    int64_t topic_length_at = V4_FIXED_BYTES + body_length;
    int8_t topic_length = (int8_t)r[topic_length_at];
    int64_t topic_end = topic_length_at + 1 + topic_length;
    if (topic_length < 0 || topic_end > size - 2)
        return 0;
    int16_t properties_length = (int16_t)((r[topic_end] << 8) | r[topic_end + 1]);
    if (properties_length < 0 || topic_end + 2 + properties_length != size)
        return 0;
    for (int64_t i = topic_length_at + 1; i < topic_end; i++)
        if (r[i] >= 0x80) /* UTF-8 beyond ASCII: check_record decodes it */
            return 0;
    uint32_t body_crc = crc32_of(0, r + V4_FIXED_BYTES, (size_t)body_length) & CRC_MASK;
    if (body_crc != get_be32(r + 8))
        return 0;
    if (verify_prop_crc) {
        if (properties_length < CRC_RESERVED_BYTES)
            return 0;
        const uint8_t *reserved = r + size - CRC_RESERVED_BYTES;
        if (memcmp(reserved, CRC_KEY, 9) != 0 || reserved[19] != 2)
            return 0;
        /* The property must start a segment: a 0x02 before it unless it is the only one. */
        if (properties_length > CRC_RESERVED_BYTES && reserved[-1] != 2)
            return 0;
        uint64_t stored = 0;
        for (int i = 9; i >= 0; i--) { /* least significant digit first */
            uint8_t digit = reserved[9 + i];
            if (digit < '0' || digit > '9')
                return 0;
            stored = stored * 10 + (uint64_t)(digit - '0');
        }
        uint32_t crc = crc32_of(0, r, (size_t)(size - CRC_RESERVED_BYTES)) & CRC_MASK;
        if (crc != stored)
            return 0;
    }
    return 1;
}

PyDoc_STRVAR(records_surely_valid_doc,
"records_surely_valid(buf, positions, sizes, file_from_offset, verify_prop_crc, /) -> bytes\n\n"
"One byte per record (int64 arrays of positions in buf and sizes): 1 only if check_record\n"
"would certainly find the record VALID with that size and PHYSICALOFFSET file_from_offset +\n"
"position (the common layout, every check passed, both CRCs included); 0 means ask\n"
"check_record. Recovery's scan and a pull's reads run it first.");

static PyObject *
native_records_surely_valid(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "records_surely_valid takes 5 arguments (%zd given)",
                     nargs);
        return NULL;
    }
    long long file_from_offset = PyLong_AsLongLong(args[3]);
    int verify_prop_crc = PyObject_IsTrue(args[4]);
    if (PyErr_Occurred() || verify_prop_crc < 0)
        return NULL;
    Py_buffer buf, positions, sizes;
    buffers held;
    if (!buffers_get(&held, 3, (const buffer_arg[]){{args[0], &buf, PyBUF_SIMPLE},
                                                   {args[1], &positions, INT_ARRAY},
                                                   {args[2], &sizes, INT_ARRAY}}))
        return NULL;
    PyObject *result = NULL;
    if (!is_native_int(&positions, 8, "positions") || !is_native_int(&sizes, 8, "sizes"))
        goto done;
    Py_ssize_t count = positions.len / 8;
    if (sizes.len / 8 != count) {
        PyErr_Format(PyExc_ValueError, "%zd positions but %zd sizes", count, sizes.len / 8);
        goto done;
    }
    result = PyBytes_FromStringAndSize(NULL, count);
    if (result == NULL)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(result);
    const int64_t *pos = positions.buf, *size = sizes.buf;
    /* Recovery checks a whole segment in one call: without the GIL. A pull's few records are
     * microseconds of work, and the event loop that lets the GIL go may wait for a worker
     * thread's turn to get it back. */
    PyThreadState *released = count > 1024 ? PyEval_SaveThread() : NULL;
    for (Py_ssize_t i = 0; i < count; i++)
        out[i] = (uint8_t)record_surely_valid(buf.buf, buf.len, pos[i], size[i],
                                              file_from_offset + pos[i], verify_prop_crc);
    if (released != NULL)
        PyEval_RestoreThread(released);
done:
    buffers_release(&held);
    return result;
}

/* ------------------------------------------------------------------ SEND_BATCH_MESSAGE bodies */

/* Wire batch entry (docs/remoting-protocol.md §6.3): TOTALSIZE, MAGICCODE, BODYCRC (all three
 * ignored, as Java does), FLAG i32, BODYLENGTH i32, BODY, PROPERTIESLENGTH i16, PROPERTIES. */
#define ENTRY_FIXED_BYTES 22
#define MAX_PROPERTIES_BYTES 32767
static const char TAGS_KEY[] = "TAGS\x01";    /* 5 bytes */

typedef struct {
    int32_t flag;
    const uint8_t *body;
    size_t body_len;
    const uint8_t *props;
    size_t props_len;
} batch_entry;

/* The entry at *pos, advancing it; 0 when malformed (a length negative or past the end). */
static int
next_entry(const uint8_t *buf, size_t size, size_t *pos, batch_entry *e)
{
    size_t at = *pos;
    if (size - at < ENTRY_FIXED_BYTES)
        return 0;
    e->flag = (int32_t)get_be32(buf + at + 12);
    int32_t body_len = (int32_t)get_be32(buf + at + 16);
    size_t body_pos = at + 20;
    if (body_len < 0 || (size_t)body_len > size - body_pos - 2)
        return 0;
    size_t props_pos = body_pos + (size_t)body_len + 2;
    int16_t props_len = (int16_t)((buf[props_pos - 2] << 8) | buf[props_pos - 1]);
    if (props_len < 0 || (size_t)props_len > size - props_pos)
        return 0;
    e->body = buf + body_pos;
    e->body_len = (size_t)body_len;
    e->props = buf + props_pos;
    e->props_len = (size_t)props_len;
    *pos = props_pos + (size_t)props_len;
    return 1;
}

/* Whether the store keeps these properties as sent and they fit: with the CRC property, the
 * string must end in 0x02 (or be empty) and hold no `__CRC32#` of the client's. */
static int
props_plain(const batch_entry *e, int append_prop_crc)
{
    if (!append_prop_crc)
        return e->props_len <= MAX_PROPERTIES_BYTES;
    if (e->props_len && e->props[e->props_len - 1] != 2)
        return 0;
    if (memmem(e->props, e->props_len, CRC_KEY, 9) != NULL)
        return 0;
    return e->props_len + CRC_RESERVED_BYTES <= MAX_PROPERTIES_BYTES;
}

/* The tagsCode of a properties string: Java's String.hashCode of the last non-empty TAGS value
 * found at a segment start, 0 without one. Returns 0 (no result) for a non-ASCII value: its
 * UTF-16 hash is left to Python. */
static int
tags_code_ascii(const uint8_t *props, size_t n, int64_t *code)
{
    const uint8_t *value = NULL;
    size_t value_len = 0;
    size_t s = 0;
    while (s < n) {
        const uint8_t *end = memchr(props + s, 2, n - s);
        size_t stop = end ? (size_t)(end - props) : n;
        if (stop - s > 5 && memcmp(props + s, TAGS_KEY, 5) == 0) {
            value = props + s + 5;
            value_len = stop - s - 5;
        }
        s = stop + 1;
    }
    uint32_t h = 0;
    for (size_t i = 0; i < value_len; i++) {
        if (value[i] >= 0x80)
            return 0;
        h = 31 * h + value[i];
    }
    *code = (int32_t)h;
    return 1;
}

PyDoc_STRVAR(batch_body_is_plain_doc,
"batch_body_is_plain(body, append_prop_crc, /) -> bool\n\n"
"Whether a SEND_BATCH_MESSAGE body is well formed, holds at least one message, and every\n"
"properties string is stored as sent and within its limit: the case encode_batch takes.\n"
"False sends the caller to the Python path, which names what is wrong.");

static PyObject *
native_batch_body_is_plain(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2) {
        PyErr_SetString(PyExc_TypeError, "batch_body_is_plain takes body and append_prop_crc");
        return NULL;
    }
    int append_prop_crc = PyObject_IsTrue(args[1]);
    if (append_prop_crc < 0)
        return NULL;
    Py_buffer body;
    if (PyObject_GetBuffer(args[0], &body, PyBUF_SIMPLE) < 0)
        return NULL;
    const uint8_t *buf = body.buf;
    size_t size = (size_t)body.len, pos = 0;
    int plain = size > 0;
    batch_entry e;
    while (plain && pos < size)
        plain = next_entry(buf, size, &pos, &e) && props_plain(&e, append_prop_crc);
    PyBuffer_Release(&body);
    return PyBool_FromLong(plain);
}

PyDoc_STRVAR(encode_batch_doc,
"encode_batch(body, magic_code, queue_id, middle, topic_part, append_prop_crc, /)\n"
"    -> (template, sizes, tags_codes, bounds) | None\n\n"
"prepare_batch's records for a plain SEND_BATCH_MESSAGE body (see batch_body_is_plain), in\n"
"one pass: `middle` is every record's QUEUEOFFSET .. PREPARED_TRANSACTION_OFFSET (offsets and\n"
"store timestamp zero), `topic_part` its TOPICLENGTH and TOPIC. Returns the records back to\n"
"back, their sizes (native int32 bytes), tags codes (native int64 bytes) and starts (a tuple,\n"
"ending with the total); None when the body is not plain or a TAGS value is not ASCII.");

static PyObject *
native_encode_batch(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "encode_batch takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    long magic_code = PyLong_AsLong(args[1]);
    long queue_id = PyLong_AsLong(args[2]);
    int append_prop_crc = PyObject_IsTrue(args[5]);
    if (PyErr_Occurred() || append_prop_crc < 0)
        return NULL;
    if (queue_id < INT32_MIN || queue_id > INT32_MAX || magic_code < INT32_MIN ||
        magic_code > INT32_MAX)
        Py_RETURN_NONE; /* Python's path names the bad field */
    Py_buffer body, middle, topic;
    buffers held;
    if (!buffers_get(&held, 3, (const buffer_arg[]){{args[0], &body, PyBUF_SIMPLE},
                                                   {args[3], &middle, PyBUF_SIMPLE},
                                                   {args[4], &topic, PyBUF_SIMPLE}}))
        return NULL;
    PyObject *result = NULL, *template = NULL, *sizes = NULL, *tags = NULL, *bounds = NULL;
    const uint8_t *buf = body.buf;
    const size_t size = (size_t)body.len;
    const size_t reserve = append_prop_crc ? CRC_RESERVED_BYTES : 0;
    /* TOTALSIZE..FLAG, middle, BODYLENGTH; then TOPIC part and PROPERTIESLENGTH. */
    const size_t fixed = 20 + (size_t)middle.len + 4 + (size_t)topic.len + 2;
    /* Pass 1: check every entry and size the output. */
    size_t pos = 0, total = 0;
    Py_ssize_t count = 0;
    batch_entry e;
    while (pos < size) {
        if (!next_entry(buf, size, &pos, &e) || !props_plain(&e, append_prop_crc)) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        total += fixed + e.body_len + e.props_len + reserve;
        count++;
    }
    if (count == 0 || total > INT32_MAX) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    template = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total);
    sizes = PyBytes_FromStringAndSize(NULL, count * 4);
    tags = PyBytes_FromStringAndSize(NULL, count * 8);
    bounds = PyTuple_New(count + 1);
    if (!template || !sizes || !tags || !bounds)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(template);
    int32_t *size_out = (int32_t *)PyBytes_AS_STRING(sizes);
    int64_t *tags_out = (int64_t *)PyBytes_AS_STRING(tags);
    /* Pass 2: write the records. */
    pos = 0;
    size_t start = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        next_entry(buf, size, &pos, &e);
        if (!tags_code_ascii(e.props, e.props_len, &tags_out[i])) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        size_t record = fixed + e.body_len + e.props_len + reserve;
        uint32_t word[5] = {(uint32_t)record, (uint32_t)magic_code,
                            crc32_of(0, e.body, e.body_len) & CRC_MASK, (uint32_t)queue_id,
                            (uint32_t)e.flag};
        for (int w = 0; w < 5; w++) {
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
            word[w] = __builtin_bswap32(word[w]);
#endif
            memcpy(out + 4 * w, &word[w], 4);
        }
        uint8_t *at = out + 20;
        memcpy(at, middle.buf, (size_t)middle.len);
        at += middle.len;
        uint32_t body_len = (uint32_t)e.body_len;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        body_len = __builtin_bswap32(body_len);
#endif
        memcpy(at, &body_len, 4);
        memcpy(at + 4, e.body, e.body_len);
        at += 4 + e.body_len;
        memcpy(at, topic.buf, (size_t)topic.len);
        at += topic.len;
        size_t props_len = e.props_len + reserve;
        at[0] = (uint8_t)(props_len >> 8);
        at[1] = (uint8_t)props_len;
        memcpy(at + 2, e.props, e.props_len);
        at += 2 + e.props_len;
        if (append_prop_crc) {
            memcpy(at, CRC_KEY, 9);
            memset(at + 9, '0', 10);
            at[19] = 2;
        }
        size_out[i] = (int32_t)record;
        PyObject *offset = PyLong_FromSize_t(start);
        if (offset == NULL)
            goto done;
        PyTuple_SET_ITEM(bounds, i, offset);
        start += record;
        out += record;
    }
    PyObject *end = PyLong_FromSize_t(start);
    if (end == NULL)
        goto done;
    PyTuple_SET_ITEM(bounds, count, end);
    result = PyTuple_Pack(4, template, sizes, tags, bounds);
done:
    Py_XDECREF(template);
    Py_XDECREF(sizes);
    Py_XDECREF(tags);
    Py_XDECREF(bounds);
    buffers_release(&held);
    return result;
}

/* ------------------------------------------------------------------ one message */

static inline uint8_t *
put_be32_at(uint8_t *at, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    v = __builtin_bswap32(v);
#endif
    memcpy(at, &v, 4);
    return at + 4;
}

/* An int argument within [lo, hi]; 0 (no error set) when it is not an int in range. */
static int
int_in(PyObject *arg, long long lo, long long hi, long long *out)
{
    int overflow = 0;
    long long v = PyLong_AsLongLongAndOverflow(arg, &overflow);
    if (v == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return 0;
    }
    if (overflow || v < lo || v > hi)
        return 0;
    *out = v;
    return 1;
}

/* One message's fields, as encode_message and append_message take them (args[0..12]). */
typedef struct {
    long long magic_code, queue_id, flag, sys_flag, born_timestamp, reconsume, prepared;
    int append_prop_crc;
    Py_buffer view[5]; /* body, properties, topic_part, born_host, store_host */
    int got;           /* views acquired: release with message_release */
    int64_t tags_code;
    size_t total;      /* TOTALSIZE */
} message_fields;

#define MESSAGE_ARGS 13
#define HEADER_BYTES_MAX (72 + 20 + 20) /* everything before BODY, IPv6 hosts */

static void
message_release(message_fields *m)
{
    while (m->got > 0)
        PyBuffer_Release(&m->view[--m->got]);
}

/* Read a message's 13 fields: 1 when C encodes it, 0 when it is Python's (properties not
 * stored as sent or over their limit, a field out of its width, a non-ASCII TAGS value, a
 * record over INT32_MAX bytes), -1 with an exception set. The caller releases the views. */
static int
message_fields_read(PyObject *const *args, message_fields *m)
{
    m->got = 0;
    if (!int_in(args[3], INT32_MIN, INT32_MAX, &m->magic_code) ||
        !int_in(args[4], INT32_MIN, INT32_MAX, &m->queue_id) ||
        !int_in(args[5], INT32_MIN, INT32_MAX, &m->flag) ||
        !int_in(args[6], INT32_MIN, INT32_MAX, &m->sys_flag) ||
        !int_in(args[7], INT64_MIN, INT64_MAX, &m->born_timestamp) ||
        !int_in(args[10], INT32_MIN, INT32_MAX, &m->reconsume) ||
        !int_in(args[11], INT64_MIN, INT64_MAX, &m->prepared))
        return 0; /* Python's path names the bad field */
    m->append_prop_crc = PyObject_IsTrue(args[12]);
    if (m->append_prop_crc < 0)
        return -1;
    static const int which[5] = {0, 1, 2, 8, 9};
    for (; m->got < 5; m->got++) {
        if (PyObject_GetBuffer(args[which[m->got]], &m->view[m->got], PyBUF_SIMPLE) < 0)
            return -1;
    }
    const size_t born_len = (size_t)m->view[3].len, store_len = (size_t)m->view[4].len;
    if ((born_len != 8 && born_len != 20) || (store_len != 8 && store_len != 20)) {
        PyErr_SetString(PyExc_ValueError, "born_host and store_host must be 8 or 20 bytes");
        return -1;
    }
    const uint8_t *props = m->view[1].buf;
    const size_t props_len = (size_t)m->view[1].len;
    batch_entry e = {0, m->view[0].buf, (size_t)m->view[0].len, props, props_len};
    if (!props_plain(&e, m->append_prop_crc))
        return 0;
    m->tags_code = 0;
    if (!tags_code_ascii(props, props_len, &m->tags_code))
        return 0;
    m->total = 72 + born_len + store_len + (size_t)m->view[0].len + (size_t)m->view[2].len + 2 +
               props_len + (m->append_prop_crc ? CRC_RESERVED_BYTES : 0);
    return m->total <= INT32_MAX;
}

/* The record's fixed part, TOTALSIZE to BODYLENGTH, into `head`; returns its length. */
static size_t
message_header(uint8_t *head, const message_fields *m, uint32_t body_crc,
               long long queue_offset, long long phy_offset, long long store_timestamp)
{
    const size_t born_len = (size_t)m->view[3].len, store_len = (size_t)m->view[4].len;
    uint8_t *at = head;
    at = put_be32_at(at, (uint32_t)m->total);
    at = put_be32_at(at, (uint32_t)m->magic_code);
    at = put_be32_at(at, body_crc);
    at = put_be32_at(at, (uint32_t)m->queue_id);
    at = put_be32_at(at, (uint32_t)m->flag);
    put_be64(at, queue_offset);
    put_be64(at + 8, phy_offset);
    at = put_be32_at(at + 16, (uint32_t)m->sys_flag);
    put_be64(at, m->born_timestamp);
    memcpy(at + 8, m->view[3].buf, born_len);
    at += 8 + born_len;
    put_be64(at, store_timestamp);
    memcpy(at + 8, m->view[4].buf, store_len);
    at = put_be32_at(at + 8 + store_len, (uint32_t)m->reconsume);
    put_be64(at, m->prepared);
    at = put_be32_at(at + 8, (uint32_t)m->view[0].len);
    return (size_t)(at - head);
}

/* BODY, TOPICLENGTH and TOPIC, PROPERTIESLENGTH and PROPERTIES after the header at `at`;
 * returns where the `__CRC32#` reservation goes (when there is one). */
static uint8_t *
message_rest(uint8_t *at, const message_fields *m, const uint8_t props_length[2])
{
    memcpy(at, m->view[0].buf, (size_t)m->view[0].len);
    at += m->view[0].len;
    memcpy(at, m->view[2].buf, (size_t)m->view[2].len);
    at += m->view[2].len;
    at[0] = props_length[0];
    at[1] = props_length[1];
    memcpy(at + 2, m->view[1].buf, (size_t)m->view[1].len);
    return at + 2 + m->view[1].len;
}

static void
message_props_length(const message_fields *m, uint8_t out[2])
{
    size_t length = (size_t)m->view[1].len + (m->append_prop_crc ? CRC_RESERVED_BYTES : 0);
    out[0] = (uint8_t)(length >> 8);
    out[1] = (uint8_t)length;
}

PyDoc_STRVAR(encode_message_doc,
"encode_message(body, properties, topic_part, magic_code, queue_id, flag, sys_flag,\n"
"               born_timestamp, born_host, store_host, reconsume_times,\n"
"               prepared_transaction_offset, append_prop_crc, /) -> (template, tags_code) | None\n\n"
"prepare_message's record template in one pass: QUEUEOFFSET, PHYSICALOFFSET, STORETIMESTAMP\n"
"and the `__CRC32#` digits zero, `sys_flag` as stored, `born_host`/`store_host` packed (ip,\n"
"port: 8 or 20 bytes), `topic_part` TOPICLENGTH and TOPIC. None when the properties are not\n"
"stored as sent or exceed their limit, a field is out of its width, or the TAGS value is not\n"
"ASCII: prepare_message's Python path then encodes or names what is wrong.");

static PyObject *
native_encode_message(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != MESSAGE_ARGS) {
        PyErr_Format(PyExc_TypeError, "encode_message takes 13 arguments (%zd given)", nargs);
        return NULL;
    }
    message_fields m;
    PyObject *result = NULL, *template = NULL;
    int mine = message_fields_read(args, &m);
    if (mine <= 0) {
        result = mine == 0 ? Py_NewRef(Py_None) : NULL;
        goto done;
    }
    template = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)m.total);
    if (template == NULL)
        goto done;
    uint8_t *out = (uint8_t *)PyBytes_AS_STRING(template);
    uint32_t body_crc = crc32_of(0, m.view[0].buf, (size_t)m.view[0].len) & CRC_MASK;
    uint8_t props_length[2];
    message_props_length(&m, props_length);
    uint8_t *at = message_rest(out + message_header(out, &m, body_crc, 0, 0, 0), &m,
                               props_length);
    if (m.append_prop_crc) {
        memcpy(at, CRC_KEY, 9);
        memset(at + 9, '0', 10);
        at[19] = 2;
    }
    PyObject *code = PyLong_FromLongLong(m.tags_code);
    if (code == NULL)
        goto done;
    result = PyTuple_Pack(2, template, code);
    Py_DECREF(code);
done:
    Py_XDECREF(template);
    message_release(&m);
    return result;
}

PyDoc_STRVAR(append_message_doc,
"append_message(buf, pos, body, properties, topic_part, magic_code, queue_id, flag,\n"
"               sys_flag, born_timestamp, born_host, store_host, reconsume_times,\n"
"               prepared_transaction_offset, append_prop_crc, queue_offset, phy_offset,\n"
"               clock, last_store_timestamp, cq_buf, cq_pos, /)\n"
"    -> (total_size, tags_code, store_timestamp) | None\n\n"
"encode_message and write_record in one pass, straight into buf[pos:] (the record's bytes\n"
"are written once, never read back), then the record's consume-queue unit (phy_offset,\n"
"total_size, tags_code) at cq_buf[cq_pos:] unless cq_buf is None. The message arguments are\n"
"encode_message's, except `sys_flag`: the client's, its V6 bits set here from the hosts.\n"
"STORETIMESTAMP is clock() (ms; a callable that must not touch the store), or\n"
"last_store_timestamp if that is later; the clock is called only once the message is C's.\n"
"None, with nothing written and the clock not read, where encode_message answers None or\n"
"the record and the 8-byte end-of-file minimum do not fit buf after pos: the caller's\n"
"general path (prepare_message, then a roll if needed) takes the message. ValueError, before\n"
"any write, for a position outside buf or a unit that does not fit cq_buf; the clock's\n"
"exception, before any write, if it raises.");

#define END_FILE_MIN_BLANK_BYTES 8
#define BORN_V6 0x10  /* SYSFLAG: BORNHOST is IPv6 */
#define STORE_V6 0x20 /* SYSFLAG: STOREHOSTADDRESS is IPv6 */
#define HOST_V6_FLAGS (BORN_V6 | STORE_V6)

static PyObject *
native_append_message(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != MESSAGE_ARGS + 8) {
        PyErr_Format(PyExc_TypeError, "append_message takes 21 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_ssize_t pos = PyLong_AsSsize_t(args[1]);
    long long queue_offset = PyLong_AsLongLong(args[15]);
    long long phy_offset = PyLong_AsLongLong(args[16]);
    PyObject *clock = args[17];
    long long last_store_timestamp = PyLong_AsLongLong(args[18]);
    int with_unit = args[19] != Py_None;
    Py_ssize_t cq_pos = with_unit ? PyLong_AsSsize_t(args[20]) : 0;
    if (PyErr_Occurred())
        return NULL;
    message_fields m;
    Py_buffer buf, cq;
    buffers held = {.got = 0};
    PyObject *result = NULL;
    int mine = message_fields_read(args + 2, &m);
    if (mine <= 0) {
        result = mine == 0 ? Py_NewRef(Py_None) : NULL;
        goto done;
    }
    /* SYSFLAG's V6 bits come from the hosts, never from the client (docs/store-format.md §3.2). */
    m.sys_flag = (m.sys_flag & ~(long long)HOST_V6_FLAGS) | (m.view[3].len == 20 ? BORN_V6 : 0) |
                 (m.view[4].len == 20 ? STORE_V6 : 0);
    const buffer_arg want[] = {{args[0], &buf, PyBUF_WRITABLE}, {args[19], &cq, PyBUF_WRITABLE}};
    if (!buffers_get(&held, with_unit ? 2 : 1, want))
        goto done;
    if (with_unit && (cq_pos < 0 || cq_pos > cq.len || cq.len - cq_pos < 20)) {
        PyErr_Format(PyExc_ValueError, "a unit at %zd does not fit a %zd-byte buffer", cq_pos,
                     cq.len);
        goto done;
    }
    if (pos < 0 || pos > buf.len) {
        PyErr_Format(PyExc_ValueError, "position %zd outside a %zd-byte buffer", pos, buf.len);
        goto done;
    }
    if ((size_t)(buf.len - pos) < m.total + END_FILE_MIN_BLANK_BYTES) {
        result = Py_NewRef(Py_None);
        goto done;
    }
    /* The message is C's: only now is the clock read (once per record written, as the general
     * path reads it), never going back from the last store timestamp. */
    PyObject *now = PyObject_CallNoArgs(clock);
    if (now == NULL)
        goto done;
    long long store_timestamp = PyLong_AsLongLong(now);
    Py_DECREF(now);
    if (store_timestamp == -1 && PyErr_Occurred())
        goto done;
    if (store_timestamp < last_store_timestamp)
        store_timestamp = last_store_timestamp;
    /* The header is built on the stack and the CRCs read the sources, never the mapping:
     * lines just written to cold commitlog pages would wait for their fetch from memory. */
    const uint8_t *body = m.view[0].buf;
    const size_t body_len = (size_t)m.view[0].len;
    uint8_t head[HEADER_BYTES_MAX];
    size_t head_len = message_header(head, &m, crc32_of(0, body, body_len) & CRC_MASK,
                                     queue_offset, phy_offset, store_timestamp);
    uint8_t props_length[2];
    message_props_length(&m, props_length);
    uint8_t *out = (uint8_t *)buf.buf + pos;
    memcpy(out, head, head_len);
    uint8_t *at = message_rest(out + head_len, &m, props_length);
    if (m.append_prop_crc) {
        uint32_t state = crc_update(~0u, head, head_len);
        state = crc_update(state, body, body_len);
        state = crc_update(state, m.view[2].buf, (size_t)m.view[2].len);
        state = crc_update(state, props_length, 2);
        state = crc_update(state, m.view[1].buf, (size_t)m.view[1].len);
        memcpy(at, CRC_KEY, 9);
        put_crc_digits(at + 9, ~state & CRC_MASK);
        at[19] = 2;
    }
    if (with_unit) {
        uint8_t *unit = (uint8_t *)cq.buf + cq_pos;
        put_be64(unit, phy_offset);
        put_be32_at(unit + 8, (uint32_t)m.total);
        put_be64(unit + 12, m.tags_code);
    }
    result = Py_BuildValue("(nLL)", (Py_ssize_t)m.total, (long long)m.tags_code,
                           store_timestamp);
done:
    buffers_release(&held);
    message_release(&m);
    return result;
}

PyDoc_STRVAR(encode_properties_doc,
"encode_properties(props, /) -> bytes | None\n\n"
"`name 0x01 value 0x02` per entry of a dict of str to str, in its order, UTF-8. None for\n"
"anything else (another mapping or type, a name holding 0x01 or 0x02, a value holding 0x02,\n"
"a string UTF-8 cannot encode): the Python twin then encodes it or names what is wrong.");

static PyObject *
native_encode_properties(PyObject *module, PyObject *props)
{
    (void)module;
    if (!PyDict_CheckExact(props))
        Py_RETURN_NONE;
    Py_ssize_t at = 0, size = 0;
    PyObject *name, *value;
    while (PyDict_Next(props, &at, &name, &value)) {
        if (!PyUnicode_CheckExact(name) || !PyUnicode_CheckExact(value))
            Py_RETURN_NONE;
        Py_ssize_t name_len, value_len;
        const char *n = PyUnicode_AsUTF8AndSize(name, &name_len);
        const char *v = n ? PyUnicode_AsUTF8AndSize(value, &value_len) : NULL;
        if (v == NULL) {
            PyErr_Clear(); /* a lone surrogate: Python's encode raises it */
            Py_RETURN_NONE;
        }
        if (memchr(n, 1, (size_t)name_len) || memchr(n, 2, (size_t)name_len) ||
            memchr(v, 2, (size_t)value_len))
            Py_RETURN_NONE;
        size += name_len + value_len + 2;
    }
    PyObject *result = PyBytes_FromStringAndSize(NULL, size);
    if (result == NULL)
        return NULL;
    char *out = PyBytes_AS_STRING(result), *end = out + size;
    at = 0;
    while (PyDict_Next(props, &at, &name, &value)) {
        /* The UTF-8 forms are cached on the strings by the first pass, and no Python code ran
         * since; the bounds are checked all the same. */
        Py_ssize_t name_len, value_len;
        const char *n = PyUnicode_AsUTF8AndSize(name, &name_len);
        const char *v = n ? PyUnicode_AsUTF8AndSize(value, &value_len) : NULL;
        if (v == NULL || end - out < name_len + value_len + 2) {
            PyErr_Clear();
            Py_DECREF(result);
            Py_RETURN_NONE;
        }
        memcpy(out, n, (size_t)name_len);
        out[name_len] = 1;
        out += name_len + 1;
        memcpy(out, v, (size_t)value_len);
        out[value_len] = 2;
        out += value_len + 1;
    }
    if (out != end) {
        Py_DECREF(result);
        Py_RETURN_NONE;
    }
    return result;
}

/* ---------------------------------------------------------------- walk and TAGS (recovery) */

PyDoc_STRVAR(walk_records_doc,
"walk_records(buf, pos, file_size, magic_v1, magic_v2, size_min, /) -> (bytes, int)\n\n"
"recovery._walk: follow TOTALSIZE from pos while the magic is V1 or V2 and the size fits in\n"
"[size_min, file_size - pos]; the record positions (native int64) and where it stopped.");

static PyObject *
native_walk_records(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "walk_records takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    long long pos = PyLong_AsLongLong(args[1]);
    long long file_size = PyLong_AsLongLong(args[2]);
    long magic_v1 = PyLong_AsLong(args[3]);
    long magic_v2 = PyLong_AsLong(args[4]);
    long long size_min = PyLong_AsLongLong(args[5]);
    if (PyErr_Occurred())
        return NULL;
    Py_buffer buf;
    if (PyObject_GetBuffer(args[0], &buf, PyBUF_SIMPLE) < 0)
        return NULL;
    if (file_size > buf.len || pos < 0) {
        PyBuffer_Release(&buf);
        PyErr_Format(PyExc_ValueError, "walk_records: file_size %lld or pos %lld outside the "
                     "buffer of %zd bytes", file_size, pos, buf.len);
        return NULL;
    }
    const uint8_t *b = buf.buf;
    size_t capacity = 1024, count = 0;
    int64_t *out = PyMem_RawMalloc(capacity * sizeof(int64_t));
    int oom = out == NULL;
    Py_BEGIN_ALLOW_THREADS /* a whole segment: up to millions of records */
    while (!oom && pos + 8 <= file_size) {
        int32_t size = (int32_t)get_be32(b + pos);
        int32_t magic = (int32_t)get_be32(b + pos + 4);
        if ((magic != (int32_t)magic_v1 && magic != (int32_t)magic_v2) || size < size_min ||
            size > file_size - pos)
            break;
        if (count == capacity) {
            int64_t *grown = PyMem_RawRealloc(out, 2 * capacity * sizeof(int64_t));
            if (grown == NULL) {
                oom = 1;
                break;
            }
            out = grown;
            capacity *= 2;
        }
        out[count++] = pos;
        pos += size;
    }
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&buf);
    if (oom) {
        PyMem_RawFree(out);
        return PyErr_NoMemory();
    }
    PyObject *positions = PyBytes_FromStringAndSize((const char *)out,
                                                    (Py_ssize_t)(count * sizeof(int64_t)));
    PyMem_RawFree(out);
    if (positions == NULL)
        return NULL;
    return Py_BuildValue("(NL)", positions, pos);
}

/* Java's String.hashCode of an ASCII value; -1 as a flag (hashes are int32) if a byte is not
 * ASCII: the caller decodes those (UTF-8 with replacement, then UTF-16 code units). */
static int64_t
ascii_java_hash(const uint8_t *value, size_t length)
{
    uint32_t h = 0;
    for (size_t i = 0; i < length; i++) {
        if (value[i] >= 0x80)
            return TAGS_NOT_ASCII;
        h = 31 * h + value[i];
    }
    return (int64_t)(int32_t)h;
}

PyDoc_STRVAR(tags_codes_doc,
"tags_codes(buf, starts, ends, /) -> bytes\n\n"
"recovery._tags_value and its Java hash for each properties range buf[starts[i]:ends[i]]\n"
"(native int64 arrays): the last TAGS\\x01 at a segment start with a non-empty value, up to\n"
"the next 0x02; 0 where there is none. A value with a non-ASCII byte gives TAGS_NOT_ASCII\n"
"(-2**62) for the caller to hash. Native int64 codes.");

static PyObject *
native_tags_codes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3) {
        PyErr_Format(PyExc_TypeError, "tags_codes takes 3 arguments (%zd given)", nargs);
        return NULL;
    }
    Py_buffer buf, starts, ends;
    buffers held;
    if (!buffers_get(&held, 3, (const buffer_arg[]){{args[0], &buf, PyBUF_SIMPLE},
                                                   {args[1], &starts, INT_ARRAY},
                                                   {args[2], &ends, INT_ARRAY}}))
        return NULL;
    PyObject *result = NULL;
    if (!is_native_int(&starts, 8, "starts") || !is_native_int(&ends, 8, "ends"))
        goto done;
    Py_ssize_t count = starts.len / 8;
    if (ends.len / 8 != count) {
        PyErr_Format(PyExc_ValueError, "%zd starts but %zd ends", count, ends.len / 8);
        goto done;
    }
    const int64_t *start = starts.buf, *end = ends.buf;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (start[i] < 0 || end[i] < start[i] || end[i] > buf.len) {
            PyErr_Format(PyExc_ValueError, "tags_codes: range %zd [%lld, %lld) outside the "
                         "buffer of %zd bytes", i, (long long)start[i], (long long)end[i],
                         buf.len);
            goto done;
        }
    }
    result = PyBytes_FromStringAndSize(NULL, count * 8);
    if (result == NULL)
        goto done;
    int64_t *out = (int64_t *)PyBytes_AS_STRING(result);
    const uint8_t *b = buf.buf;
    static const uint8_t key[] = {'T', 'A', 'G', 'S', 1};
    const Py_ssize_t key_length = sizeof key;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t code = 0;
        for (Py_ssize_t at = end[i] - key_length; at >= start[i]; at--) {
            if (memcmp(b + at, key, key_length) != 0 || (at != start[i] && b[at - 1] != 2))
                continue;
            const uint8_t *value = b + at + key_length;
            const uint8_t *stop = memchr(value, 2, (size_t)(end[i] - (at + key_length)));
            size_t length = (size_t)((stop ? stop : b + end[i]) - value);
            if (length) {
                code = ascii_java_hash(value, length);
                break;
            }
        }
        out[i] = code;
    }
    Py_END_ALLOW_THREADS
done:
    buffers_release(&held);
    return result;
}

/* prefault: the most one zero write hands the kernel, and the size of the page-cache folio it
 * makes (store/mapped_file.py ZERO_FILL_CALL_BYTES, store/hot_folio.py FOLIO_BYTES). */
#define FOLIO_BYTES ((int64_t)2 * 1024 * 1024)
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
/* Read only, never written: untouched .bss pages, so the zeros cost no memory of their own. */
static char folio_of_zeros[FOLIO_BYTES];

PyDoc_STRVAR(prefault_doc,
"prefault(fd, start, end, zero_from, map_address, heat_address, /) -> (int, int, bool)\n\n"
"MappedFile.populate's kernel work for [start, end) of a file, all with the GIL released\n"
"once: zeros pwritten over [zero_from, end) (nothing when zero_from >= end) in 2 MiB-aligned\n"
"calls of at most 2 MiB, each whole 2 MiB write preceded, when heat_address is not 0, by\n"
"hot_folio's heating of the 2 MiB-aligned huge-page slot at heat_address (one store, then\n"
"MADV_DONTNEED); then MADV_POPULATE_WRITE over the mapping's [start, end) at map_address,\n"
"unless map_address is 0. Best effort: the zero writes stop at the first error. Returns\n"
"(the end of the zeros written, the folios heated, whether the populate call succeeded).");

static PyObject *
native_prefault(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 6) {
        PyErr_Format(PyExc_TypeError, "prefault takes 6 arguments (%zd given)", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    long long start = PyLong_AsLongLong(args[1]);
    long long end = PyLong_AsLongLong(args[2]);
    long long zero_from = PyLong_AsLongLong(args[3]);
    uintptr_t map_address = (uintptr_t)PyLong_AsVoidPtr(args[4]);
    uintptr_t heat_address = (uintptr_t)PyLong_AsVoidPtr(args[5]);
    if (PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "prefault: bad file descriptor %ld", fd);
        return NULL;
    }
    if (start < 0 || end < start || zero_from < 0) {
        PyErr_Format(PyExc_ValueError, "prefault: bad range [%lld, %lld) zeroed from %lld",
                     start, end, zero_from);
        return NULL;
    }
    if (heat_address % (uintptr_t)FOLIO_BYTES != 0) {
        PyErr_SetString(PyExc_ValueError, "prefault: heat_address is not 2 MiB-aligned");
        return NULL;
    }
    long long pos = zero_from;
    long heated = 0;
    int populated = 0;
    Py_BEGIN_ALLOW_THREADS
    while (pos < end) {
        /* Folio-aligned calls: a 2 MiB folio is made only by a whole, aligned 2 MiB write. */
        int64_t size = FOLIO_BYTES - pos % FOLIO_BYTES;
        if (size > end - pos)
            size = end - pos;
        if (heat_address && size == FOLIO_BYTES) {
            /* One store allocates and zeroes the whole huge page; freeing it leaves the block
             * on this CPU's free list for the folio the write below allocates. */
            *(volatile char *)heat_address = 0;
            madvise((void *)heat_address, (size_t)FOLIO_BYTES, MADV_DONTNEED);
            heated++;
        }
        ssize_t wrote = pwrite((int)fd, folio_of_zeros, (size_t)size, (off_t)pos);
        if (wrote < 0 && errno == EINTR)
            continue;
        if (wrote <= 0)
            break;
        pos += wrote;
    }
    if (map_address && end > start)
        populated = madvise((void *)(map_address + (uintptr_t)start), (size_t)(end - start),
                            MADV_POPULATE_WRITE) == 0;
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(LlO)", pos, heated, populated ? Py_True : Py_False);
}

PyDoc_STRVAR(sync_range_doc,
"sync_range(fd, map_address, start, length, chunk_bytes, /) -> int\n\n"
"MappedFile._msync's kernel work, with the GIL released once: when length > chunk_bytes,\n"
"the writeback of [start, start + length) of the file started chunk_bytes per\n"
"sync_file_range(SYNC_FILE_RANGE_WRITE) call (best effort: an error there shows again in the\n"
"msync); then msync(MS_SYNC) of the mapping's same range at map_address. Returns 0, or the\n"
"msync's errno.");

static PyObject *
native_sync_range(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 5) {
        PyErr_Format(PyExc_TypeError, "sync_range takes 5 arguments (%zd given)", nargs);
        return NULL;
    }
    long fd = PyLong_AsLong(args[0]);
    uintptr_t map_address = (uintptr_t)PyLong_AsVoidPtr(args[1]);
    long long start = PyLong_AsLongLong(args[2]);
    long long length = PyLong_AsLongLong(args[3]);
    long long chunk = PyLong_AsLongLong(args[4]);
    if (PyErr_Occurred())
        return NULL;
    if (fd < 0 || fd > INT32_MAX || map_address == 0 || start < 0 || length < 0 || chunk <= 0) {
        PyErr_Format(PyExc_ValueError, "sync_range: bad arguments (fd %ld, [%lld, +%lld), "
                     "chunks of %lld)", fd, start, length, chunk);
        return NULL;
    }
    int error = 0;
    Py_BEGIN_ALLOW_THREADS
    if (length > chunk) {
        /* One call per chunk: each return to user space lets a woken loop have this CPU (this
         * VM's kernel does not preempt a thread inside a call). */
        for (long long pos = start; pos < start + length; pos += chunk) {
            long long size = start + length - pos < chunk ? start + length - pos : chunk;
            sync_file_range((int)fd, (off_t)pos, (off_t)size, SYNC_FILE_RANGE_WRITE);
        }
    }
    if (msync((void *)(map_address + (uintptr_t)start), (size_t)length, MS_SYNC) != 0)
        error = errno;
    Py_END_ALLOW_THREADS
    return PyLong_FromLong(error);
}

static PyMethodDef native_methods[] = {
    {"write_record", (PyCFunction)(void (*)(void))native_write_record, METH_FASTCALL,
     write_record_doc},
    {"records_surely_valid", (PyCFunction)(void (*)(void))native_records_surely_valid,
     METH_FASTCALL, records_surely_valid_doc},
    {"batch_body_is_plain", (PyCFunction)(void (*)(void))native_batch_body_is_plain,
     METH_FASTCALL, batch_body_is_plain_doc},
    {"encode_message", (PyCFunction)(void (*)(void))native_encode_message, METH_FASTCALL,
     encode_message_doc},
    {"append_message", (PyCFunction)(void (*)(void))native_append_message, METH_FASTCALL,
     append_message_doc},
    {"encode_properties", native_encode_properties, METH_O, encode_properties_doc},
    {"encode_batch", (PyCFunction)(void (*)(void))native_encode_batch, METH_FASTCALL,
     encode_batch_doc},
    {"put_cq_units", (PyCFunction)(void (*)(void))native_put_cq_units, METH_FASTCALL,
     put_cq_units_doc},
    {"set_crc32_implementation", native_set_crc32_implementation, METH_O,
     set_crc32_implementation_doc},
    {"supported_crc32_implementations", native_supported_crc32_implementations, METH_NOARGS,
     "The CRC-32 implementations this CPU can run, slowest first."},
    {"crc32", (PyCFunction)(void (*)(void))native_crc32, METH_FASTCALL, crc32_doc},
    {"write_batch", (PyCFunction)(void (*)(void))native_write_batch, METH_FASTCALL,
     write_batch_doc},
    {"walk_records", (PyCFunction)(void (*)(void))native_walk_records, METH_FASTCALL,
     walk_records_doc},
    {"tags_codes", (PyCFunction)(void (*)(void))native_tags_codes, METH_FASTCALL,
     tags_codes_doc},
    {"prefault", (PyCFunction)(void (*)(void))native_prefault, METH_FASTCALL, prefault_doc},
    {"sync_range", (PyCFunction)(void (*)(void))native_sync_range, METH_FASTCALL,
     sync_range_doc},
    {NULL, NULL, 0, NULL},
};

static int
native_exec(PyObject *module)
{
    (void)module;
    crc_table_init();
#ifdef PYRMQ_HAVE_CLMUL
    __builtin_cpu_init();
    have_clmul = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
    have_vpclmul = have_clmul && __builtin_cpu_supports("avx512f") &&
                   __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("vpclmulqdq");
    use_clmul = have_clmul;
    use_vpclmul = have_vpclmul;
#endif
    return 0;
}

static PyModuleDef_Slot native_slots[] = {
    {Py_mod_exec, native_exec},
    {0, NULL},
};

static struct PyModuleDef native_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "store._native",
    .m_doc = "The store's per-record hot loops in C (see _native.c).",
    .m_size = 0,
    .m_methods = native_methods,
    .m_slots = native_slots,
};

PyMODINIT_FUNC
PyInit__native(void)
{
    return PyModuleDef_Init(&native_module);
}
