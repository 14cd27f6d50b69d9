#include "identity/hasher.hpp"

#include "base/text.hpp"

#include <openssl/evp.h>

#include <memory>
#include <stdexcept>
#include <utility>

namespace sluice::identity {

namespace {

struct md_ctx_deleter {
    void operator()(EVP_MD_CTX* c) const { EVP_MD_CTX_free(c); }
};

// One reusable digest context per thread: never shared, so no locking.
EVP_MD_CTX* thread_ctx() {
    thread_local std::unique_ptr<EVP_MD_CTX, md_ctx_deleter> ctx{EVP_MD_CTX_new()};
    return ctx.get();
}

}  // namespace

hasher::hasher(std::string secret) : keyed_(!secret.empty()) {
    md_ = EVP_MD_fetch(nullptr, "SHA256", nullptr);
    if (md_ == nullptr) throw std::runtime_error("identity: OpenSSL has no SHA-256");
    if (!keyed_) return;

    std::array<std::uint8_t, block_size> key{};
    if (secret.size() > block_size) {  // RFC 2104: long keys are hashed first
        unsigned len = 0;
        if (EVP_Digest(secret.data(), secret.size(), key.data(), &len, md_, nullptr) != 1) {
            EVP_MD_free(md_);
            throw std::runtime_error("identity: cannot hash the hash secret");
        }
    } else {
        std::copy(secret.begin(), secret.end(), key.begin());
    }
    for (std::size_t i = 0; i < block_size; ++i) {
        ipad_[i] = static_cast<std::uint8_t>(key[i] ^ 0x36);
        opad_[i] = static_cast<std::uint8_t>(key[i] ^ 0x5c);
    }
    OPENSSL_cleanse(key.data(), key.size());
    OPENSSL_cleanse(secret.data(), secret.size());
}

hasher::hasher(const hasher& other) : keyed_(other.keyed_), ipad_(other.ipad_), opad_(other.opad_), md_(other.md_) {
    if (md_ != nullptr) EVP_MD_up_ref(md_);
}

hasher::hasher(hasher&& other) noexcept
    : keyed_(other.keyed_), ipad_(other.ipad_), opad_(other.opad_), md_(std::exchange(other.md_, nullptr)) {}

hasher& hasher::operator=(hasher other) noexcept {
    std::swap(keyed_, other.keyed_);
    std::swap(ipad_, other.ipad_);
    std::swap(opad_, other.opad_);
    std::swap(md_, other.md_);
    return *this;
}

hasher::~hasher() {
    OPENSSL_cleanse(ipad_.data(), ipad_.size());
    OPENSSL_cleanse(opad_.data(), opad_.size());
    if (md_ != nullptr) EVP_MD_free(md_);
}

hasher::digest hasher::hash(std::string_view kind, std::string_view id) const {
    digest out{};
    EVP_MD_CTX* c = thread_ctx();
    if (c == nullptr || md_ == nullptr) return out;
    unsigned char full[EVP_MAX_MD_SIZE];
    unsigned len = 0;
    bool ok = EVP_DigestInit_ex2(c, md_, nullptr) == 1;
    if (keyed_) ok = ok && EVP_DigestUpdate(c, ipad_.data(), ipad_.size()) == 1;
    ok = ok && EVP_DigestUpdate(c, kind.data(), kind.size()) == 1 && EVP_DigestUpdate(c, ":", 1) == 1 &&
         EVP_DigestUpdate(c, id.data(), id.size()) == 1 && EVP_DigestFinal_ex(c, full, &len) == 1;
    if (ok && keyed_) {
        unsigned char inner[EVP_MAX_MD_SIZE];
        const unsigned inner_len = len;
        std::copy(full, full + inner_len, inner);
        ok = EVP_DigestInit_ex2(c, md_, nullptr) == 1 && EVP_DigestUpdate(c, opad_.data(), opad_.size()) == 1 &&
             EVP_DigestUpdate(c, inner, inner_len) == 1 && EVP_DigestFinal_ex(c, full, &len) == 1;
    }
    if (!ok || len < out.size()) return digest{};
    std::copy(full, full + out.size(), out.begin());
    return out;
}

std::string hasher::to_hex(const digest& d) {
    std::string s;
    base::append_hex(s, std::span<const unsigned char>(d.data(), d.size()));
    return s;
}

}  // namespace sluice::identity
