// The admission phase of a request: who is calling, and may they pass?
//
// prepare() resolves the client address (trusted proxies + forwarding header), the
// allow-list and the user (API key or JWT), and builds the store request with the keyed
// hashes of the identifiers. conclude() turns the store's answer into an outcome and the
// rate-limit response fields. Between them the caller asks the store, at once or after a
// round trip.
//
// Thread: one per session, on its worker's thread.
#pragma once

#include "http/message.hpp"
#include "http/snapshot.hpp"
#include "identity/hasher.hpp"
#include "limit/store.hpp"

#include <array>
#include <string>

namespace sluice::http {

struct outcome {
    enum class kind { pass, limited, unauthorized, store_down } what = kind::pass;
    std::string fields;             // rate-limit response fields ("Name: value\r\n" lines)
    std::int64_t retry_after_s = 0;  // limited
    std::string reason;             // unauthorized: why, safe to show the client
    const char* decision = "none";  // for the access log: none, bypass, allowed, limited,
                                    // shadow_limited, unauthorized, store_error
    char id_kind = 0;               // 'i' or 'u': the identifier named in the access log
    limit::digest id{};

    // Back to a pass, keeping the strings' capacity for the next request.
    void reset() {
        what = kind::pass;
        fields.clear();
        retry_after_s = 0;
        reason.clear();
        decision = "none";
        id_kind = 0;
    }
};

class admission {
public:
    // Returns true when the store must be asked (request() is then ready); false when the
    // outcome is already known (allow-listed, no identifier to limit, or 401).
    bool prepare(const snapshot& s, const limit::route& r, const message_head& req,
                 const boost::asio::ip::address& peer, const identity::hasher& h, outcome& out);
    const limit::check_request& request() const { return request_; }
    // The decision, given the store's answer. Records metrics.
    void conclude(const snapshot& s, const limit::route& r, const limit::check_result& result,
                  metrics::shard& m, outcome& out);

private:
    std::array<limit::store_key, 2> keys_;
    limit::check_request request_;
    // The last identifiers hashed on this connection, and the snapshot they were hashed for.
    const snapshot* cached_for_ = nullptr;
    boost::asio::ip::address cached_client_;
    limit::digest cached_ip_{};
    std::string cached_user_;
    limit::digest cached_user_hash_{};
};

}  // namespace sluice::http
