"""Builds `laminar._native`: the per-record loops of the read path, in C (cffi
API mode; `setup.py` runs it at install).

Why C: serving a fetch of 500 records took ~460 us of a shard's CPU in
Python-level loops (index columns 120 us, checksums 88 us, the answer's
table 57 us), and parsing the answer ~0.4 us a record in the client; the C
loops cost a few microseconds each. Only loops over records live here, each
with one job and no policy; the callers (`laminar.log.segment`,
`laminar.wire.records`, `laminar.client.batch`) keep the rules and the errors.
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
void laminar_columns(const unsigned char *entries, size_t count, uint64_t *positions,
                     uint32_t *lengths, uint64_t *checksums, uint64_t *terms,
                     uint64_t *timestamps);
void laminar_fetch_table(uint64_t first_index, const uint64_t *timestamps,
                         const uint32_t *lengths, size_t count, unsigned char *out);
int laminar_locate(const unsigned char *payload, size_t size, size_t count,
                   const unsigned char *stamp_prefix, size_t stamp_prefix_size,
                   size_t stamp_value_start, uint64_t *indexes, uint64_t *timestamps,
                   uint64_t *starts, uint64_t *ends, uint64_t *value_starts, size_t *at);
"""

SOURCE = r"""
#include <stdint.h>
#include <stddef.h>
#include <string.h>

uint64_t XXH3_64bits(const void *data, size_t len);

/* The log's index entry (laminar.log.index.ENTRY, "<QIHHQQqIB3x", 48 bytes):
   position u64 @0, length u32 @8, checksum u64 @16, term u64 @24,
   timestamp u64 @32. Little-endian, as the host (segment.py checks). */
#define ENTRY_BYTES 48

static uint64_t u64_at(const unsigned char *p) { uint64_t v; memcpy(&v, p, 8); return v; }
static uint32_t u32_at(const unsigned char *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static uint32_t be32_at(const unsigned char *p) {
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}
static void be32_put(unsigned char *p, uint32_t v) {
    p[0] = v >> 24; p[1] = v >> 16; p[2] = v >> 8; p[3] = v;
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

/* A fetch answer's records, located (the caller checked that the table fits):
   each blob's start and end, and where its value starts (after the attrs
   byte, a key and headers, or after a stamp-only prefix). Returns 0 if every
   blob is a bare value, perhaps stamped (nothing else to show), 1 if some
   have a key or other headers, or a negative reason with the record in *at:
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
        if (attrs & ~0x03) return -3;
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
