// SHA-256 (FIPS 180-4): the per-file checksums of checkpoint manifests.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct {
    uint32_t h[8];
    uint64_t bytes;          // message length so far
    unsigned char block[64];
    size_t used;             // bytes waiting in block
} sha256_ctx;

void sha256_init(sha256_ctx *c);
void sha256_update(sha256_ctx *c, const void *data, size_t n);
// Finishes and writes the digest as 64 lowercase hex digits and a NUL.
void sha256_final_hex(sha256_ctx *c, char hex[65]);
// The digest of a whole file; -1 with errno set when it cannot be read.
int sha256_file(const char *path, char hex[65]);
