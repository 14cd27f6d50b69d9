// Keyed hashing of rate-limit identifiers (docs/design.md, "Limits and the data model").
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

struct evp_md_st;  // OpenSSL's EVP_MD

namespace sluice::identity {

// hash(kind, id) = HMAC-SHA-256(secret, kind + ":" + id) truncated to 16 bytes; with an
// empty secret, SHA-256(kind + ":" + id) truncated (an unkeyed hash of an IPv4 address is
// reversible by enumeration: callers warn at start).
//
// Contract: the constructor fetches SHA-256 once and precomputes the HMAC key pads
// (RFC 2104); it throws std::runtime_error only if OpenSSL has no SHA-256. hash() never
// throws (on an OpenSSL failure, which needs an out-of-memory, it returns all zeros).
// The shared state (the key pads and the fetched, immutable EVP_MD) is only read;
// each hash() uses a per-thread EVP_MD_CTX. Thread: construct anywhere; any number of
// threads may call hash() concurrently. Copyable and movable.
class hasher {
public:
    using digest = std::array<std::uint8_t, 16>;

    explicit hasher(std::string secret);
    hasher(const hasher& other);
    hasher(hasher&& other) noexcept;
    hasher& operator=(hasher other) noexcept;
    ~hasher();

    digest hash(std::string_view kind, std::string_view id) const;
    bool keyed() const { return keyed_; }

    static std::string to_hex(const digest& d);  // 32 lower-case hex digits

private:
    static constexpr std::size_t block_size = 64;  // SHA-256
    bool keyed_ = false;
    std::array<std::uint8_t, block_size> ipad_{};
    std::array<std::uint8_t, block_size> opad_{};
    evp_md_st* md_ = nullptr;
};

}  // namespace sluice::identity
