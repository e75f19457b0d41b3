"""Builds `laminar._native`: the per-record loops of the read path and of an
append's index entries, in C (cffi API mode; `setup.py` runs it at install).

Why C: serving a fetch of 500 records took ~460 us of a shard's CPU in
Python-level loops (index columns 120 us, checksums 88 us, the answer's
table 57 us), and parsing the answer ~0.4 us a record in the client; the C
loops cost a few microseconds each. Placing an append's records took
~0.4 us a record in Python (two checksums and a pack each), 0.14 in C.
Only loops over records live here, each with one job and no policy; the
callers (`laminar.log.segment`, `laminar.wire.records`,
`laminar.client.batch`, `laminar.client.arrow`, `laminar.kafka.batches`)
keep the rules and the errors. The Kafka door's loops (RecordBatch v2 to
and from record blobs, CRC-32C) are here for the same reason: a Python loop
over a batch's varints costs microseconds per record.
The checksum links the system's libxxhash (Debian `libxxhash0`, 0.8: its
XXH3_64bits is the same function as the `xxhash` package's
`xxh3_64_intdigest`, which wrote the checksums), by file name, so no
development package is needed.
"""

from __future__ import annotations

from cffi import FFI

CDEF = """
size_t laminar_verify(const unsigned char *payload, size_t size, const uint64_t *positions,
                      const uint32_t *lengths, const uint64_t *checksums, size_t count);
size_t laminar_fit(const unsigned char *entries, size_t available, uint64_t max_bytes,
                   int at_least_one, uint64_t *total);
void laminar_index_entries(const unsigned char *data, const uint32_t *lengths, size_t count,
                           uint64_t position, uint64_t term, int64_t timestamp_ms,
                           uint16_t flags, unsigned char *out);
void laminar_columns(const unsigned char *entries, size_t count, uint64_t *positions,
                     uint32_t *lengths, uint64_t *checksums, uint64_t *terms,
                     uint64_t *timestamps);
void laminar_fetch_table(uint64_t first_index, const uint64_t *timestamps,
                         const uint32_t *lengths, size_t count, unsigned char *out);
void laminar_gather(const unsigned char *buf, const int64_t *starts, const int64_t *ends,
                    size_t count, unsigned char *out);
int laminar_locate(const unsigned char *payload, size_t size, size_t count,
                   const unsigned char *stamp_prefix, size_t stamp_prefix_size,
                   size_t stamp_value_start, uint64_t *indexes, uint64_t *timestamps,
                   uint64_t *starts, uint64_t *ends, uint64_t *value_starts, size_t *at);
int laminar_kafka_split(const unsigned char *in, size_t size, size_t count,
                        const unsigned char *reserved, size_t reserved_size,
                        unsigned char *out, uint32_t *lengths, uint64_t *total, size_t *at);
uint32_t laminar_crc32c(const unsigned char *p, size_t n);
int64_t laminar_kafka_batch(uint64_t first_index, const uint64_t *timestamps,
                            const uint32_t *lengths, size_t count,
                            const unsigned char *payload, size_t size, int32_t leader_epoch,
                            const unsigned char *reserved, size_t reserved_size,
                            unsigned char *out, size_t *at);
"""

SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#include <string.h>

uint64_t XXH3_64bits(const void *data, size_t len);

/* The log's index entry (laminar.log.index.ENTRY, "<QIHHQQqIB3x", 48 bytes):
   position u64 @0, length u32 @8, flags u16 @12, reserved u16 @14,
   checksum u64 @16, term u64 @24, timestamp i64 @32, the entry's own
   checksum u32 @40 (xxh3 of bytes 0-39), marks u8 @44, 3 bytes of padding.
   Little-endian, as the host (segment.py checks). */
#define ENTRY_BYTES 48

static uint64_t u64_at(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t u32_at(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint32_t be32_at(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static void be32_put(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
}
static void be64_put(unsigned char *p, uint64_t v) {
    be32_put(p, v >> 32); be32_put(p + 4, (uint32_t)v);
}

/* How many records, from the first, sit where the index says (consecutive from
   positions[0]), fit in the payload and match their checksums. */
size_t laminar_verify(const unsigned char *payload, size_t size, const uint64_t *positions,
                      const uint32_t *lengths, const uint64_t *checksums, size_t count) {
    uint64_t at = 0;
    for (size_t k = 0; k < count; k++) {
        uint64_t length = lengths[k];
        if (positions[k] != positions[0] + at || length > size - at)
            return k;
        if (XXH3_64bits(payload + at, length) != checksums[k])
            return k;
        at += length;
    }
    return count;
}

/* How many of `available` consecutive entries fit in `max_bytes` of values
   (at least one if `at_least_one`); their value bytes in *total. */
size_t laminar_fit(const unsigned char *entries, size_t available, uint64_t max_bytes,
                   int at_least_one, uint64_t *total) {
    uint64_t sum = 0;
    size_t k = 0;
    for (; k < available; k++) {
        uint64_t length = u32_at(entries + k * ENTRY_BYTES + 8);
        if (sum + length > max_bytes) {
            if (k == 0 && at_least_one) { sum = length; k = 1; }
            break;
        }
        sum += length;
    }
    *total = sum;
    return k;
}

/* The index entries (laminar.log.index.encode_entry, marks clear) of `count`
   values laid end to end in `data`, the first stored at `position`. */
void laminar_index_entries(const unsigned char *data, const uint32_t *lengths, size_t count,
                           uint64_t position, uint64_t term, int64_t timestamp_ms,
                           uint16_t flags, unsigned char *out) {
    const uint16_t reserved = 0;
    for (size_t k = 0; k < count; k++) {
        unsigned char *e = out + k * ENTRY_BYTES;
        uint32_t length = lengths[k];
        uint64_t checksum = XXH3_64bits(data, length);
        memcpy(e, &position, 8);
        memcpy(e + 8, &length, 4);
        memcpy(e + 12, &flags, 2);
        memcpy(e + 14, &reserved, 2);
        memcpy(e + 16, &checksum, 8);
        memcpy(e + 24, &term, 8);
        memcpy(e + 32, &timestamp_ms, 8);
        uint32_t entry_checksum = (uint32_t)XXH3_64bits(e, 40);
        memcpy(e + 40, &entry_checksum, 4);
        memset(e + 44, 0, 4);
        position += length;
        data += length;
    }
}

/* The index fields of `count` consecutive entries, as columns. */
void laminar_columns(const unsigned char *entries, size_t count, uint64_t *positions,
                     uint32_t *lengths, uint64_t *checksums, uint64_t *terms,
                     uint64_t *timestamps) {
    for (size_t k = 0; k < count; k++) {
        const unsigned char *e = entries + k * ENTRY_BYTES;
        positions[k] = u64_at(e);
        lengths[k] = u32_at(e + 8);
        checksums[k] = u64_at(e + 16);
        terms[k] = u64_at(e + 24);
        timestamps[k] = u64_at(e + 32);
    }
}

/* A fetch answer's count and entry table (laminar.wire.records): u32 count,
   then per record five big-endian u32 words: index high, index low,
   timestamp high, timestamp low, blob length. `out` holds 4 + 20 * count. */
void laminar_fetch_table(uint64_t first_index, const uint64_t *timestamps,
                         const uint32_t *lengths, size_t count, unsigned char *out) {
    be32_put(out, (uint32_t)count);
    unsigned char *p = out + 4;
    for (size_t k = 0; k < count; k++, p += 20) {
        uint64_t index = first_index + k;
        be32_put(p, index >> 32);
        be32_put(p + 4, (uint32_t)index);
        be32_put(p + 8, timestamps[k] >> 32);
        be32_put(p + 12, (uint32_t)timestamps[k]);
        be32_put(p + 16, lengths[k]);
    }
}

/* The slices buf[starts[k]:ends[k]], one after another into `out` (an Arrow
   binary column's data; the caller checked each slice lies in `buf` and
   sized `out` to their total). */
void laminar_gather(const unsigned char *buf, const int64_t *starts, const int64_t *ends,
                    size_t count, unsigned char *out) {
    for (size_t k = 0; k < count; k++) {
        size_t length = (size_t)(ends[k] - starts[k]);
        memcpy(out, buf + starts[k], length);
        out += length;
    }
}

/* A fetch answer's records, located (the caller checked that the table fits):
   each blob's start and end, and where its value starts (after the attrs
   byte, a key and headers, or after a stamp-only prefix; a null value is
   empty, at the blob's end). Returns 0 if every blob is a bare value, perhaps
   stamped (nothing else to show), 1 if some have a key, other headers or a
   null value, or a negative reason with the record in *at:
   -1 the lengths do not add up to the payload, -2 an empty blob, -3 unknown
   attrs bits, -4 a blob ends inside a key or headers length, -5 a key or
   headers run past the blob's end. */
int laminar_locate(const unsigned char *payload, size_t size, size_t count,
                   const unsigned char *stamp_prefix, size_t stamp_prefix_size,
                   size_t stamp_value_start, uint64_t *indexes, uint64_t *timestamps,
                   uint64_t *starts, uint64_t *ends, uint64_t *value_starts, size_t *at) {
    const unsigned char *table = payload + 4;
    uint64_t pos = 4 + (uint64_t)20 * count;
    int simple = 1;
    for (size_t k = 0; k < count; k++) {
        const unsigned char *e = table + k * 20;
        indexes[k] = ((uint64_t)be32_at(e) << 32) | be32_at(e + 4);
        timestamps[k] = ((uint64_t)be32_at(e + 8) << 32) | be32_at(e + 12);
        uint64_t length = be32_at(e + 16);
        *at = k;
        if (length > size - pos) return -1;
        uint64_t start = pos, end = pos + length;
        starts[k] = start;
        ends[k] = end;
        pos = end;
        if (length == 0) return -2;
        unsigned char attrs = payload[start];
        if (attrs == 0) { value_starts[k] = start + 1; continue; }
        if (attrs & ~0x07) return -3;
        if (length >= stamp_value_start
            && memcmp(payload + start, stamp_prefix, stamp_prefix_size) == 0) {
            value_starts[k] = start + stamp_value_start;
            continue;
        }
        simple = 0;
        uint64_t v = start + 1;
        for (unsigned char flag = 0x01; flag <= 0x02; flag <<= 1) {
            if (!(attrs & flag)) continue;
            if (v + 4 > end) return -4;
            v += 4 + (uint64_t)be32_at(payload + v);
            if (v > end) return -5;
        }
        value_starts[k] = v;
    }
    *at = count;
    if (pos != size) return -1;
    return simple ? 0 : 1;
}

/* ---- The Kafka door (laminar.kafka.batches): RecordBatch v2 <-> record blobs ----
   Kafka's record: varint length | i8 attributes | varlong timestampDelta |
   varint offsetDelta | varint keyLength | key | varint valueLength | value |
   varint headerCount | headers (varint keyLength | key | varint valueLength |
   value); varints are zigzag, -1 is null. A laminar blob (laminar.wire.records):
   u8 attrs (1 key, 2 headers, 4 null value) | [be32 len | key] | [be32 len |
   msgpack map of str to bin or nil] | value. Both functions size when `out` is
   NULL and write when it is not, so the caller allocates once. */

#define KB_HAS_KEY 0x01
#define KB_HAS_HEADERS 0x02
#define KB_NULL_VALUE 0x04
#define KB_BATCH_HEADER 61

/* A zigzag varint of at most `max_bytes` bytes (5: int32, 10: int64). 0 on
   success, -1 if it runs past `end`, -2 if it is longer than its type. */
static int kb_varint(const unsigned char **p, const unsigned char *end, int max_bytes,
                     int64_t *value) {
    uint64_t raw = 0;
    for (int i = 0; i < max_bytes; i++) {
        if (*p >= end) return -1;
        unsigned char b = *(*p)++;
        raw |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (max_bytes == 5 && raw > 0xffffffffu) return -2;
            *value = (int64_t)(raw >> 1) ^ -(int64_t)(raw & 1);
            return 0;
        }
    }
    return -2;
}

static size_t kb_varint_size(int64_t value) {
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    size_t n = 1;
    while (raw >= 0x80) { raw >>= 7; n++; }
    return n;
}

static unsigned char *kb_varint_put(unsigned char *p, int64_t value) {
    uint64_t raw = ((uint64_t)value << 1) ^ (uint64_t)(value >> 63);
    while (raw >= 0x80) { *p++ = (unsigned char)(raw | 0x80); raw >>= 7; }
    *p++ = (unsigned char)raw;
    return p;
}

/* Whether s[0:n] is valid UTF-8 as Python decodes it (no overlong forms, no
   surrogates, nothing past U+10FFFF). */
static int kb_utf8(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char c = s[i];
        if (c < 0x80) { i++; continue; }
        size_t more;
        uint32_t cp, min;
        if ((c & 0xe0) == 0xc0) { more = 1; cp = c & 0x1f; min = 0x80; }
        else if ((c & 0xf0) == 0xe0) { more = 2; cp = c & 0x0f; min = 0x800; }
        else if ((c & 0xf8) == 0xf0) { more = 3; cp = c & 0x07; min = 0x10000; }
        else return 0;
        if (more > n - i - 1) return 0;
        for (size_t j = 1; j <= more; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return 0;
            cp = (cp << 6) | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
        i += more + 1;
    }
    return 1;
}

/* msgpack headers of a size (str or bin) and their byte counts. */
static size_t kb_mp_str_size(uint64_t n) { return n < 32 ? 1 : n < 256 ? 2 : n < 65536 ? 3 : 5; }
static size_t kb_mp_bin_size(uint64_t n) { return n < 256 ? 2 : n < 65536 ? 3 : 5; }
static size_t kb_mp_map_size(uint64_t n) { return n < 16 ? 1 : n < 65536 ? 3 : 5; }

static unsigned char *kb_mp_len(unsigned char *p, uint64_t n, unsigned char t8,
                                unsigned char t16, unsigned char t32) {
    if (n < 256 && t8) { *p++ = t8; *p++ = (unsigned char)n; }
    else if (n < 65536) { *p++ = t16; *p++ = (unsigned char)(n >> 8); *p++ = (unsigned char)n; }
    else { *p++ = t32; be32_put(p, (uint32_t)n); p += 4; }
    return p;
}

/* The records section of one RecordBatch v2 (`count` records, decompressed)
   as laminar blobs back to back in `out`, one length each in `lengths`
   (sizing only when `out` is NULL); the blobs' total in *total. Returns 0, or
   a negative reason with the record in *at: -1 a field runs past its record
   or the section, -2 a varint longer than its type, -3 a record's length
   differs from its fields, -4 bytes follow the last record, -5 a length or
   header count below -1 / 0, -6 attributes not 0, -7 offsetDelta not the
   record's position, -8 a null header key, -9 a header key not UTF-8, -10 the
   reserved header name. */
int laminar_kafka_split(const unsigned char *in, size_t size, size_t count,
                        const unsigned char *reserved, size_t reserved_size,
                        unsigned char *out, uint32_t *lengths, uint64_t *total, size_t *at) {
    const unsigned char *p = in, *end = in + size;
    uint64_t n = 0;
    int64_t v;
    int rc;
#define KB_READ(max) do { if ((rc = kb_varint(&p, rec_end, (max), &v)) != 0) return rc; } while (0)
#define KB_NEED(len) do { if ((uint64_t)(len) > (uint64_t)(rec_end - p)) return -1; } while (0)
    for (size_t k = 0; k < count; k++) {
        *at = k;
        const unsigned char *rec_end = end;
        KB_READ(5);
        if (v < 0) return -5;
        if ((uint64_t)v > (uint64_t)(end - p)) return -1;
        rec_end = p + v;
        if (p == rec_end) return -3;
        if (*p++ != 0) return -6;
        KB_READ(10);                                   /* timestampDelta: the log stamps */
        KB_READ(5);
        if (v != (int64_t)k) return -7;
        KB_READ(5);
        if (v < -1) return -5;
        const unsigned char *key = p;
        int64_t key_len = v;
        if (key_len > 0) { KB_NEED(key_len); p += key_len; }
        KB_READ(5);
        if (v < -1) return -5;
        const unsigned char *value = p;
        int64_t value_len = v;
        if (value_len > 0) { KB_NEED(value_len); p += value_len; }
        KB_READ(5);
        if (v < 0) return -5;
        uint64_t header_count = (uint64_t)v;
        unsigned char attrs = (key_len >= 0 ? KB_HAS_KEY : 0)
                              | (header_count ? KB_HAS_HEADERS : 0)
                              | (value_len < 0 ? KB_NULL_VALUE : 0);
        uint64_t start = n;
        if (out) out[n] = attrs;
        n += 1;
        if (key_len >= 0) {
            if (out) { be32_put(out + n, (uint32_t)key_len); memcpy(out + n + 4, key, key_len); }
            n += 4 + key_len;
        }
        if (header_count) {
            if (header_count > (uint64_t)(rec_end - p) / 2) return -1;
            uint64_t section = n;
            n += 4;
            if (out && header_count < 16) out[n] = 0x80 | (unsigned char)header_count;
            else if (out) kb_mp_len(out + n, header_count, 0, 0xde, 0xdf);
            n += kb_mp_map_size(header_count);
            for (uint64_t h = 0; h < header_count; h++) {
                KB_READ(5);
                if (v < -1) return -5;
                if (v < 0) return -8;
                KB_NEED(v);
                if (!kb_utf8(p, (size_t)v)) return -9;
                if ((size_t)v == reserved_size && memcmp(p, reserved, reserved_size) == 0)
                    return -10;
                if (out) {
                    if (v < 32) out[n] = 0xa0 | (unsigned char)v;
                    else kb_mp_len(out + n, (uint64_t)v, 0xd9, 0xda, 0xdb);
                    memcpy(out + n + kb_mp_str_size(v), p, v);
                }
                n += kb_mp_str_size(v) + v;
                p += v;
                KB_READ(5);
                if (v < -1) return -5;
                if (v < 0) {
                    if (out) out[n] = 0xc0;
                    n += 1;
                    continue;
                }
                KB_NEED(v);
                if (out) {
                    kb_mp_len(out + n, (uint64_t)v, 0xc4, 0xc5, 0xc6);
                    memcpy(out + n + kb_mp_bin_size(v), p, v);
                }
                n += kb_mp_bin_size(v) + v;
                p += v;
            }
            if (out) be32_put(out + section, (uint32_t)(n - section - 4));
        }
        if (p != rec_end) return -3;
        if (value_len > 0) {
            if (out) memcpy(out + n, value, value_len);
            n += value_len;
        }
        if (out) lengths[k] = (uint32_t)(n - start);
    }
#undef KB_READ
#undef KB_NEED
    *at = count;
    if (p != end) return -4;
    *total = n;
    return 0;
}

/* CRC-32C (Castagnoli), what RecordBatch v2 carries: the SSE4.2 instruction
   where the CPU has it, else a table. */
static uint32_t kb_crc_table[256];

static uint32_t kb_crc32c_table(uint32_t crc, const unsigned char *p, size_t n) {
    if (!kb_crc_table[1]) {                            /* benign race: same values */
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int j = 0; j < 8; j++) c = (c >> 1) ^ (0x82f63b78u & -(c & 1));
            kb_crc_table[i] = c;
        }
    }
    while (n--) crc = (crc >> 8) ^ kb_crc_table[(crc ^ *p++) & 0xff];
    return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t kb_crc32c_sse42(uint32_t crc, const unsigned char *p, size_t n) {
    uint64_t c = crc;
    for (; n >= 8; n -= 8, p += 8) c = __builtin_ia32_crc32di(c, u64_at(p));
    crc = (uint32_t)c;
    while (n--) crc = __builtin_ia32_crc32qi(crc, *p++);
    return crc;
}
#endif

uint32_t laminar_crc32c(const unsigned char *p, size_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("sse4.2")) return ~kb_crc32c_sse42(~0u, p, n);
#endif
    return ~kb_crc32c_table(~0u, p, n);
}

/* A msgpack str or bin length (types t8/t16/t32; fixstr when `fix`) at *p:
   0, or -1 if it does not fit before `end` or is another type. */
static int kb_mp_read_len(const unsigned char **p, const unsigned char *end, int fix,
                          unsigned char t8, unsigned char t16, unsigned char t32,
                          uint64_t *len) {
    if (*p >= end) return -1;
    unsigned char t = *(*p)++;
    size_t width;
    if (fix && (t & 0xe0) == 0xa0) { *len = t & 0x1f; width = 0; }
    else if (t == t8) width = 1;
    else if (t == t16) width = 2;
    else if (t == t32) width = 4;
    else return -1;
    if (width) {
        if ((size_t)(end - *p) < width) return -1;
        uint64_t n = 0;
        for (size_t i = 0; i < width; i++) n = (n << 8) | (*p)[i];
        *p += width;
        *len = n;
    }
    if (*len > (uint64_t)(end - *p)) return -1;
    return 0;
}

/* The Kafka headers of a blob's msgpack map (p..end, the subset laminar
   writes: a map of str to bin or nil, nothing after it), without the
   reserved name: their count in *kept, their bytes as Kafka writes them
   returned, and written at `out` unless it is NULL. -1 if the map is not that. */
static int64_t kb_headers(const unsigned char *p, const unsigned char *end,
                          const unsigned char *reserved, size_t reserved_size,
                          unsigned char *out, uint64_t *kept) {
    uint64_t entries, size = 0;
    if (p >= end) return -1;
    unsigned char t = *p++;
    if ((t & 0xf0) == 0x80) entries = t & 0x0f;
    else if (t == 0xde && end - p >= 2) { entries = ((uint64_t)p[0] << 8) | p[1]; p += 2; }
    else if (t == 0xdf && end - p >= 4) { entries = be32_at(p); p += 4; }
    else return -1;
    *kept = 0;
    for (uint64_t h = 0; h < entries; h++) {
        uint64_t key_len, value_len = 0;
        if (kb_mp_read_len(&p, end, 1, 0xd9, 0xda, 0xdb, &key_len)) return -1;
        const unsigned char *key = p;
        p += key_len;
        if (p >= end) return -1;
        int null = *p == 0xc0;
        if (null) p++;
        else if (kb_mp_read_len(&p, end, 0, 0xc4, 0xc5, 0xc6, &value_len)) return -1;
        const unsigned char *value = p;
        p += value_len;
        if (key_len == reserved_size && memcmp(key, reserved, reserved_size) == 0) continue;
        ++*kept;
        size += kb_varint_size((int64_t)key_len) + key_len
                + (null ? 1 : kb_varint_size((int64_t)value_len) + value_len);
        if (out) {
            out = kb_varint_put(out, (int64_t)key_len);
            memcpy(out, key, key_len);
            out += key_len;
            out = kb_varint_put(out, null ? -1 : (int64_t)value_len);
            memcpy(out, value, value_len);
            out += value_len;
        }
    }
    if (p != end) return -1;
    return (int64_t)size;
}

/* One RecordBatch v2 for `count` consecutive log records from `first_index`
   (their blobs back to back in `payload`; `count` >= 1): the batch's size is
   returned, and it is written at `out` unless that is NULL. A negative return
   is a blob that is not a record, with its position in *at: -1 the lengths do
   not add up to the payload, -2 a blob that does not parse (attrs, sections,
   headers map). Headers named `reserved` (the producer stamp) are left out. */
int64_t laminar_kafka_batch(uint64_t first_index, const uint64_t *timestamps,
                            const uint32_t *lengths, size_t count,
                            const unsigned char *payload, size_t size, int32_t leader_epoch,
                            const unsigned char *reserved, size_t reserved_size,
                            unsigned char *out, size_t *at) {
    uint64_t pos = 0, n = KB_BATCH_HEADER, max_timestamp = timestamps[0];
    for (size_t k = 0; k < count; k++) {
        *at = k;
        if (lengths[k] > size - pos) return -1;
        const unsigned char *blob = payload + pos, *blob_end = blob + lengths[k];
        pos += lengths[k];
        if (blob == blob_end) return -2;
        unsigned char attrs = *blob;
        const unsigned char *p = blob + 1, *key = NULL, *headers = NULL, *headers_end = NULL;
        int64_t key_len = -1;
        if (attrs & ~(KB_HAS_KEY | KB_HAS_HEADERS | KB_NULL_VALUE)) return -2;
        if (attrs & KB_HAS_KEY) {
            if (blob_end - p < 4 || be32_at(p) > (uint64_t)(blob_end - p - 4)) return -2;
            key_len = be32_at(p);
            key = p + 4;
            p = key + key_len;
        }
        if (attrs & KB_HAS_HEADERS) {
            if (blob_end - p < 4 || be32_at(p) > (uint64_t)(blob_end - p - 4)) return -2;
            headers = p + 4;
            headers_end = p = headers + be32_at(p);
        }
        int64_t value_len = blob_end - p;
        if (attrs & KB_NULL_VALUE) {
            if (value_len) return -2;
            value_len = -1;
        }
        uint64_t kept = 0;
        int64_t headers_size = 0;
        if (headers) {
            headers_size = kb_headers(headers, headers_end, reserved, reserved_size, NULL, &kept);
            if (headers_size < 0) return -2;
        }
        if (timestamps[k] > max_timestamp) max_timestamp = timestamps[k];
        int64_t delta = (int64_t)(timestamps[k] - timestamps[0]);
        uint64_t body = 1 + kb_varint_size(delta) + kb_varint_size((int64_t)k)
                        + kb_varint_size(key_len) + (key_len > 0 ? key_len : 0)
                        + kb_varint_size(value_len) + (value_len > 0 ? value_len : 0)
                        + kb_varint_size((int64_t)kept) + headers_size;
        if (out) {
            unsigned char *w = kb_varint_put(out + n, (int64_t)body);
            *w++ = 0;
            w = kb_varint_put(w, delta);
            w = kb_varint_put(w, (int64_t)k);
            w = kb_varint_put(w, key_len);
            if (key_len > 0) { memcpy(w, key, key_len); w += key_len; }
            w = kb_varint_put(w, value_len);
            if (value_len > 0) { memcpy(w, p, value_len); w += value_len; }
            w = kb_varint_put(w, (int64_t)kept);
            if (headers) kb_headers(headers, headers_end, reserved, reserved_size, w, &kept);
        }
        n += kb_varint_size((int64_t)body) + body;
    }
    *at = count;
    if (pos != size) return -1;
    if (out) {
        be64_put(out, first_index);
        be32_put(out + 8, (uint32_t)(n - 12));
        be32_put(out + 12, (uint32_t)leader_epoch);
        out[16] = 2;                                   /* magic */
        out[21] = out[22] = 0;                         /* attributes: none, CreateTime */
        be32_put(out + 23, (uint32_t)(count - 1));
        be64_put(out + 27, timestamps[0]);
        be64_put(out + 35, max_timestamp);
        be64_put(out + 43, UINT64_MAX);                /* producerId -1 */
        out[51] = out[52] = 0xff;                      /* producerEpoch -1 */
        be32_put(out + 53, UINT32_MAX);                /* baseSequence -1 */
        be32_put(out + 57, (uint32_t)count);
        be32_put(out + 17, laminar_crc32c(out + 21, n - 21));
    }
    return (int64_t)n;
}
"""

ffi = FFI()
ffi.cdef(CDEF)
ffi.set_source(
    "laminar._native",
    SOURCE,
    libraries=[":libxxhash.so.0"],
    extra_compile_args=["-O2"],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)
