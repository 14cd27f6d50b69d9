// Sluice configuration: one YAML file parsed into an immutable `config`.
//
// Contract: load_file()/load_string() either return a fully validated snapshot or throw
// config_error whose what() is "FILE:LINE:COLUMN: key.path: reason". A snapshot is never
// modified after loading; share it as shared_ptr<const config> between threads.
#pragma once

#include "base/units.hpp"
#include "config/kind_spec.hpp"

#include <boost/asio/ip/address.hpp>

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace sluice::config {

using duration = std::chrono::milliseconds;

// A listen address. `host` is an IP literal without brackets ("0.0.0.0", "::1").
// Port 0 asks the kernel for a free port (tests use it; the chosen port is logged).
struct address {
    std::string host;
    std::uint16_t port = 0;
    std::string to_string() const;  // "127.0.0.1:8080" or "[::1]:8080"

    bool operator==(const address&) const = default;
};

// "http://host:port[/base-path]" or "https://...". `host` may be an IP literal or a DNS name.
struct upstream_url {
    std::string host;
    std::uint16_t port = 80;  // 80, or 443 for https, when the url has none
    std::string base_path;    // "" or "/api" (never ends with '/')
    std::string authority;    // host[:port] as written, for the Host header
    bool tls = false;         // https

    bool operator==(const upstream_url&) const = default;
};

// An IPv4 or IPv6 network, "10.0.0.0/8", "::1/128"; a bare address means a single host.
struct cidr {
    boost::asio::ip::address network;  // host bits zeroed
    unsigned prefix = 0;

    bool operator==(const cidr&) const = default;
};

// server.proxy_protocol: a connection from a `trusted` address must begin with a PROXY
// protocol header (v1 or v2), whose source becomes the connection's client address; any
// other connection is closed unanswered.
struct proxy_protocol_config {
    std::vector<cidr> trusted;  // non-empty
    duration header_timeout{};  // from accept to the header's last byte; unset: server.header_timeout

    bool operator==(const proxy_protocol_config&) const = default;
};

// One certificate of server.tls, read and checked at load: the PEM texts are what the TLS
// contexts are built from, so a file changed after the check is never half-used.
struct tls_certificate {
    std::string cert_file, key_file;  // as written
    std::string cert_pem, key_pem;    // the files' contents
    std::vector<std::string> names;   // DNS names and IP addresses it is for (SAN, else the CN), lower case
    std::int64_t not_after = 0;       // Unix seconds
    std::string at;                   // "FILE:LINE:COLUMN: server.tls.certificates[i]"

    bool operator==(const tls_certificate&) const = default;
};

// server.tls: the TLS listener.
struct tls_config {
    enum class client_certs { none, optional, required };
    address listen{"0.0.0.0", 8443};
    std::vector<tls_certificate> certificates;  // non-empty; the first is the default (no SNI, or no match)
    int min_version = 0x0303;                   // TLS1_2_VERSION or TLS1_3_VERSION
    std::vector<std::string> alpn{"http/1.1"};  // protocols offered, in preference order
    duration handshake_timeout{0};              // 0: server.header_timeout
    bool session_tickets = true;
    std::size_t max_handshakes = 256;  // handshakes under way per worker; more are closed at once
    std::string client_ca_file;        // "" = client certificates are not asked for
    std::string client_ca_pem;
    client_certs client_certificates = client_certs::none;

    bool operator==(const tls_config&) const = default;
};

struct server_config {
    address listen{"0.0.0.0", 8080};
    bool plain = true;     // false: `listen: off`, only the TLS listener (server.tls) serves
    unsigned threads = 0;  // 0 = hardware threads
    std::size_t max_connections = 10000;
    duration header_timeout = std::chrono::seconds(10);
    duration idle_timeout = std::chrono::seconds(60);
    duration drain_timeout = std::chrono::seconds(10);
    duration body_timeout = std::chrono::seconds(60);  // the request body, plus 1 s per body_min_rate bytes
    std::uint64_t body_min_rate = 64 * base::KiB;      // bytes per second that earn a body more time
    std::size_t max_header_bytes = 16384;
    std::uint64_t max_body_bytes = 10 * base::MiB;
    std::optional<proxy_protocol_config> proxy_protocol;  // unset: no PROXY header is read
    std::optional<tls_config> tls;                        // server.tls: unset = no TLS listener

    bool operator==(const server_config&) const = default;
};

struct admin_config {
    address listen{"127.0.0.1", 9090};
    // admin.token_file: "" = none (every admin request is answered, and the listener must be
    // on a loopback address). `token` is its content with surrounding blanks and line ends
    // trimmed, read at start and at every reload: a secret, never logged.
    std::string token_file;
    std::string token;
    // admin.open: the paths answered without the token (probes and scrapers send none).
    std::vector<std::string> open{"/healthz", "/readyz", "/metrics"};

    bool operator==(const admin_config&) const = default;
};

// upstream.tls: how an https upstream is verified, and the certificate offered to it. The
// files were readable at load; their contents are checked where the TLS context is built
// (tls::client_context), whose errors name the key by its position (the `*_at` fields).
struct upstream_tls_config {
    std::string ca_file;      // PEM CAs the upstream's certificate must chain to; "" = the system's
    std::string cert_file;    // client certificate chain (PEM); "" = none (then key_file is "" too)
    std::string key_file;     // its private key (PEM)
    std::string server_name;  // SNI and the name verified; "" = the url's host
    bool verify = true;       // false: any certificate is accepted (a warning is logged at start)
    std::string ca_file_at, cert_file_at, key_file_at;  // "FILE:LINE:COLUMN: upstream.tls.ca_file"

    bool operator==(const upstream_tls_config&) const = default;
};

// A set of response statuses: exact codes and whole classes ("5xx" is 500..599).
struct status_set {
    std::vector<std::pair<unsigned, unsigned>> ranges;  // inclusive [first, last]

    bool contains(unsigned status) const {
        for (const auto& [first, last] : ranges)
            if (status >= first && status <= last) return true;
        return false;
    }
    bool operator==(const status_set&) const = default;
};

// One server of a pool as written. A DNS name stands for every address it resolves to,
// each a server of the pool with this weight.
struct upstream_server_config {
    upstream_url url;
    unsigned weight = 1;  // 1..1000
    std::string at;       // "FILE:LINE:COLUMN: upstreams.api.servers[0]"

    bool operator==(const upstream_server_config&) const = default;
};

// upstreams.<name>.health: active checks (when `path` is set) and passive ejection.
struct upstream_health_config {
    std::string path;  // "" = no active checks; else a GET of this path on every server
    duration interval = std::chrono::seconds(5);
    duration timeout = std::chrono::seconds(1);
    unsigned healthy = 2;    // consecutive passes that bring a server back
    unsigned unhealthy = 3;  // consecutive failures that take it out
    status_set expect_status{{{200, 399}}};
    // passive: consecutive connect errors or 5xx answers that eject a server (0 = never)
    unsigned eject_after = 5;
    duration eject_for = std::chrono::seconds(30);  // doubled at each ejection in a row
    unsigned max_ejected_percent = 50;              // of the pool's servers, at most

    bool operator==(const upstream_health_config&) const = default;
};

enum class balance_kind { round_robin, least_request, hash };

// What a pool does when max_in_flight is reached: wait for a slot up to `timeout`, at
// most `size` requests per worker waiting (size 0: refuse at once with 503).
struct upstream_queue_config {
    std::size_t size = 0;
    duration timeout = std::chrono::seconds(1);

    bool operator==(const upstream_queue_config&) const = default;
};

// A pool of upstream servers: `upstreams.<name>`, or the `upstream:` block (the pool named
// "default", which routes that name none use).
struct upstream_config {
    std::string name;                             // "default" for the upstream: block
    std::vector<upstream_server_config> servers;  // non-empty (`url:` is a pool of one)
    upstream_url url;                             // servers[0].url: the Host and the announcement of a pool of one
    balance_kind balance = balance_kind::round_robin;
    duration resolve_every = std::chrono::seconds(30);  // DNS names are resolved again this often
    // The TCP connect, and then (https) the TLS handshake: a deadline each.
    duration connect_timeout = std::chrono::seconds(1);
    duration timeout = std::chrono::seconds(30);
    std::size_t max_idle_per_worker = 64;  // idle keep-alive connections per server and worker
    upstream_tls_config tls;               // used for https servers
    upstream_health_config health;
    duration slow_start{0};              // a server that comes back gets its full weight over this
    unsigned retries = 1;                // other servers tried after a failure that is safe to retry
    unsigned retry_budget_percent = 20;  // retries, as a share of the pool's requests over 10 s
    std::int64_t max_in_flight = 0;      // requests in flight to the pool, fleet-wide on Redis; 0 = no cap
    duration max_in_flight_lease = std::chrono::seconds(30);  // each slot's lease, as a concurrency tier's
    upstream_queue_config queue;
    std::string at;  // "FILE:LINE:COLUMN: upstreams.api"

    bool operator==(const upstream_config&) const = default;
};

// How request bodies travel: read whole into memory before the upstream is chosen (up to
// request_buffer_bytes: a slow client then holds no upstream connection), or streamed.
struct proxy_config {
    bool request_buffering = true;
    std::size_t request_buffer_bytes = 128 * base::KiB;

    bool operator==(const proxy_config&) const = default;
};

struct log_config {
    std::string level = "info";     // trace | debug | info | warn | error | off
    std::string access_path = "-";  // log.access.path: a file, "-" (stdout) or "off"

    bool operator==(const log_config&) const = default;
};

// "host:port" where host may be a DNS name or an IP literal ("[::1]:6379" for IPv6).
struct host_port {
    std::string host;
    std::uint16_t port = 0;

    bool operator==(const host_port&) const = default;
};

// store.redis.tls: TLS to Redis (and to the sentinels). The files were readable at load.
struct redis_tls_config {
    std::string ca_file;      // PEM CA bundle the server's certificate must chain to
    std::string cert_file;    // client certificate (PEM); "" = none (then key_file is "" too)
    std::string key_file;     // its private key (PEM)
    std::string server_name;  // SNI and the name verified; "" = the host connected to

    bool operator==(const redis_tls_config&) const = default;
};

// store.redis.sentinel: the primary's address comes from these sentinels.
struct redis_sentinel_config {
    std::string master;            // the name the sentinels monitor
    std::vector<host_port> nodes;  // the sentinels, asked in order (non-empty)

    bool operator==(const redis_sentinel_config&) const = default;
};

struct store_config {
    enum class kind { memory, redis, redis_cluster };
    enum class failure_mode { allow, deny, local };
    kind type = kind::memory;
    std::size_t memory_max_keys = 1'000'000;                  // store.memory.max_keys (>= 1)
    std::vector<host_port> redis_nodes{{"127.0.0.1", 6379}};  // store.redis.nodes (non-empty)
    std::string redis_password_env;                           // store.redis.password_env ("" = no AUTH)
    std::string redis_username;                               // store.redis.username ("" = default user)
    unsigned redis_database = 0;                              // store.redis.database (0..15)
    duration redis_timeout = std::chrono::milliseconds(50);   // store.redis.timeout (> 0)
    duration redis_start_timeout = std::chrono::seconds(5);   // store.redis.start_timeout: listen once ready, or then
    std::string redis_key_prefix = "sluice:";                 // store.redis.key_prefix
    std::optional<redis_tls_config> redis_tls;                // store.redis.tls (unset = plain TCP)
    std::optional<redis_sentinel_config> redis_sentinel;      // store.redis.sentinel (then nodes is unused)
    failure_mode on_error = failure_mode::allow;              // store.on_error: allow | deny | local
    std::uint32_t fleet_size = 1;                             // store.fleet_size (>= 1): on_error local divides by it
    std::string hash_secret_env = "SLUICE_HASH_SECRET";       // store.hash_secret_env

    bool operator==(const store_config&) const = default;
};

struct jwt_config {
    std::string header = "Authorization";        // value "Bearer <token>"
    std::vector<std::string> algorithms;         // non-empty, each HS256|HS384|HS512|RS256|ES256
    std::string secret_env;                      // required if any HS* algorithm is listed
    std::string public_key_file;                 // required if RS256 or ES256 is listed (PEM)
    std::string claim = "sub";                   // the claim that names the user
    std::string plan_claim;                      // the claim that names the user's plan ("" = none)
    duration leeway = std::chrono::seconds(30);  // for exp / nbf

    bool operator==(const jwt_config&) const = default;
};

// One key of the registry: who a key belongs to, by the SHA-256 of the key (no key is
// stored in clear).
struct api_key_entry {
    std::array<std::uint8_t, 32> sha256{};
    std::string user;     // the registry name: every key of one user shares its budget
    std::string plan;     // "" = none; else one of config::plans
    std::string plan_at;  // where `plan` was written ("FILE:LINE:COLUMN: [i].plan")

    bool operator==(const api_key_entry&) const = default;
};

// clients.user.api_keys: the registry, read from `file` (relative to the config file's
// directory) whenever the config is loaded, so a reload re-reads it.
struct api_keys_config {
    std::string file;            // as written in the config
    bool require_known = false;  // a request without a key of the registry is answered 401
    std::vector<api_key_entry> keys;

    bool operator==(const api_keys_config&) const = default;
};

struct clients_config {
    enum class forwarded_kind { x_forwarded_for, forwarded, none };
    std::vector<cidr> trusted_proxies;  // clients.trusted_proxies
    forwarded_kind forwarded_header = forwarded_kind::x_forwarded_for;
    unsigned ipv6_prefix = 64;                // 1..128
    std::string api_key_header;               // clients.user.api_key_header ("" = none)
    std::optional<jwt_config> jwt;            // clients.user.jwt
    std::optional<api_keys_config> api_keys;  // clients.user.api_keys
    std::vector<cidr> allow;                  // clients.allow: bypass every limit
    std::string default_plan;                 // clients.user.default_plan: one of config::plans ("" = none)
    std::string default_plan_at;              // where it was written ("FILE:LINE:COLUMN: PATH")
    // clients.user.certificate: which name of a verified client certificate names the user
    enum class certificate_name { none, subject_cn, san_dns, san_uri, san_email };
    certificate_name user_certificate = certificate_name::none;
    std::string user_certificate_at;  // where it was written ("FILE:LINE:COLUMN: PATH")

    bool operator==(const clients_config&) const = default;
};

struct response_config {
    enum class header_style { ietf, legacy, both, none };
    header_style headers = header_style::ietf;

    bool operator==(const response_config&) const = default;
};

enum class algorithm { fixed, sliding, gcra, log, concurrency };
std::string_view to_string(algorithm a);  // "fixed", "sliding", "gcra", "log", "concurrency"

// One limit. Validation guarantees: limit >= 1; per > 0; sliding: precision divides per
// and per / precision <= 120 (default precision: per / 10, which must then be a whole
// number of milliseconds); fixed: precision == per; gcra: burst >= 1 (default: limit);
// log: limit <= 1000; min_interval >= 0; month and window_offset: fixed only;
// concurrency (`{concurrency: N, lease: 30s}`): limit N, per the lease (3s to 1h), nothing else.
// One tier as configured, its defaults settled. Its id and header name are given by
// limit/policy (compile_policies).
struct tier_config {
    std::string kind;  // "ip", "user", or the canonical text of the kind (kind_spec::text)
    std::int64_t limit = 0;
    duration per{0};  // per: month: 31 days (the longest month), with `month` set; concurrency: the lease
    algorithm algo = algorithm::sliding;
    duration precision{0};   // fixed and sliding: the bucket size
    std::int64_t burst = 0;  // gcra
    duration min_interval{0};
    bool month = false;         // fixed: calendar months (UTC, shifted by window_offset)
    duration window_offset{0};  // fixed: windows follow the clock of UTC + offset; |offset| < min(per, 24h)

    bool operator==(const tier_config&) const = default;
};

// Two tiers of one policy that would count in one place (the same tier id in limit/policy):
// the same kind, algorithm, per and precision or burst (and calendar month and window
// offset); two concurrency tiers of one kind. A policy may not hold both.
inline bool shares_counter(const tier_config& a, const tier_config& b) {
    if (a.algo == algorithm::concurrency || b.algo == algorithm::concurrency)
        return a.kind == b.kind && a.algo == b.algo;
    return a.kind == b.kind && a.algo == b.algo && a.per == b.per && a.precision == b.precision && a.burst == b.burst &&
           a.month == b.month && a.window_offset == b.window_offset;
}

// What a request whose value of a kind is missing gets: skip leaves the kind's tiers out,
// refuse answers 400.
enum class on_missing { skip, refuse };

// A policy limits a request by at most this many identifiers (ip, user and other kinds
// together): one store request carries them all.
inline constexpr std::size_t max_policy_kinds = 8;
// policies.<name>.max_values.<kind>: its default and bounds.
inline constexpr std::uint64_t default_max_values = 10'000;
inline constexpr std::uint64_t min_max_values = 64;
inline constexpr std::uint64_t max_max_values = 100'000'000;

// A kind limited by its own values' number in the memory store (max_values): one whose
// values the caller chooses, every kind but ip, user and route (ip and user are bounded by
// store.memory.max_keys alone; route has one value per route).
inline bool bounded_kind(const kind_spec& k) {
    return k.composite() || (k.parts[0].what != part_kind::ip && k.parts[0].what != part_kind::user &&
                             k.parts[0].what != part_kind::route);
}

// policies.<name>.<kind>: the tiers of one kind other than ip and user.
struct kind_tiers_config {
    kind_spec spec;
    std::vector<tier_config> tiers;  // each with kind == spec.text; non-empty
    on_missing missing = on_missing::skip;
    std::uint64_t max_values = default_max_values;  // bounded_kind(spec) only
    std::string at;    // where its tiers were written: "FILE:LINE:COLUMN: policies.api.header:X-Tenant"
    std::string path;  // its key path: "policies.api.header:X-Tenant"

    bool operator==(const kind_tiers_config&) const = default;
};

struct policy_config {
    std::string name;
    bool shadow = false;
    std::vector<tier_config> ip, user;
    bool user_by_plan = false;             // `user: plan`: the user tiers are the caller's plan's (`user` is empty)
    std::string user_at;                   // where `user: plan` was written
    bool count_rejected = false;           // penalty mode: refused requests count too (no log tiers)
    std::vector<kind_tiers_config> kinds;  // every other kind, in file order
    on_missing user_missing = on_missing::skip;  // on_missing.user: a request without credentials

    bool operator==(const policy_config&) const = default;
};

// plans.<name>: the user tiers of a policy with `user: plan`, for the callers on this plan.
struct plan_config {
    std::string name;
    std::vector<tier_config> user;  // non-empty

    bool operator==(const plan_config&) const = default;
};

// routes[].charge: the outcomes a request is charged for, by its answer's status (the
// upstream's, or Sluice's own after the admission). A request is admitted at its cost as
// always; its charge is then settled: kept when charged(status), else given back.
struct charge_config {
    std::optional<status_set> on_status;  // charged only with these; unset: any status
    status_set refund_on;                 // never charged with these (empty: none)

    bool charged(unsigned status) const {
        return (!on_status || on_status->contains(status)) && !refund_on.contains(status);
    }
    bool operator==(const charge_config&) const = default;
};

struct route_config {
    std::string name;                     // metrics label; default: the path, or path_prefix + "*"
    std::string path;                     // exact match, or
    std::string path_prefix;              // prefix match (exactly one of the two is set)
    std::vector<std::string> methods;     // upper case; empty = any
    std::string host;                     // lower case, exact; "" = any
    bool case_insensitive = false;        // compare paths ASCII-lowercased (upstreams that ignore case)
    std::string policy;                   // a policy name, or "none" (unlimited)
    std::int64_t cost = 1;                // >= 1 and <= every tier's limit (and gcra burst) of the policy
    std::string cost_header;              // the upstream's response field reporting the request's cost ("" = none)
    std::int64_t max_cost = 0;            // with cost_header: the most charged (>= cost, fits like cost)
    std::optional<charge_config> charge;  // unset: every admitted request is charged
    std::string path_at;                  // "FILE:LINE:COLUMN: routes[i].match.path": for the router's errors
    std::string host_at;                  // "FILE:LINE:COLUMN: routes[i].match.host": for the TLS warning
    std::string upstream;                 // a pool of `upstreams` ("" = "default", the upstream: block)

    bool operator==(const route_config&) const = default;
};

// service.domains.<domain>.descriptors[i]: one entry of a rate-limit descriptor (Envoy's RLS:
// a list of key/value entries), matched in order down this tree: an entry matches the node of
// its key whose value it equals, else the node of its key without a value (any value). A
// descriptor is limited by the tiers of the node its last entry matched.
struct descriptor_config {
    std::string key;                             // letters, digits, '_', '-', '.'
    std::optional<std::string> value;            // unset: any value (each one counted on its own)
    std::vector<tier_config> tiers;              // any algorithm but concurrency; empty: not limited here
    std::vector<descriptor_config> descriptors;  // the entries that may follow this one
    bool shadow = false;                         // shadow_mode: its tiers counted, never refusing the call
    bool value_prefix = false;  // an envoyproxy/ratelimit value ending in '*': any value starting with the rest
    std::string at;             // "FILE:LINE:COLUMN: service.domains.api.descriptors[0]"
    // `tiers: plan`: the value is an API key of clients.user.api_keys, limited by its user's
    // plan (plans.<plan>.user); `tiers` is then empty.
    bool by_plan = false;
    std::string by_plan_at;  // where `tiers: plan` was written
    std::string kind;        // its kind's text, "descriptor:<path>" (set by the reader)
    // `policy`: with tiers: plan, the policy (with `user: plan`) whose user identifier and plan
    // tiers the descriptor shares with the gateway path; "" = a descriptor identifier of its own.
    std::string policy;
    std::string policy_at;

    bool operator==(const descriptor_config&) const = default;
};

// service.domains.<name>: the descriptor tree of one RLS domain.
struct service_domain_config {
    std::string name;
    std::vector<descriptor_config> descriptors;

    bool operator==(const service_domain_config&) const = default;
};

// service: Sluice as a rate-limit service for other proxies (src/service, and the check in
// src/server). Each key has a reader of its own in service.cpp.
struct service_config {
    std::optional<address> grpc_listen;          // Envoy's RLS v3 over gRPC; unset: off
    std::vector<service_domain_config> domains;  // in file order
    // service.max_concurrent_calls: the gRPC calls being decided at once, in the whole process;
    // one more is answered RESOURCE_EXHAUSTED at once.
    std::size_t max_concurrent_calls = 1000;
    // service.http_listen: the HTTP check (GET|POST /check), as nginx's auth_request and
    // Traefik's forwardAuth ask it; unset: off.
    std::optional<address> http_listen;
    // service.http_peers: the proxies that may ask /check. Their X-Original-URI, -Method and
    // X-Forwarded-For are believed; any other peer is answered 403.
    std::vector<cidr> http_peers{{boost::asio::ip::make_address("127.0.0.0"), 8},
                                 {boost::asio::ip::make_address("::1"), 128}};

    bool operator==(const service_config&) const = default;
};

struct config {
    std::string source;  // the file it came from
    server_config server;
    admin_config admin;
    // Every pool: the upstream: block first (named "default") when given, then upstreams in
    // file order; at least one. Every route's pool exists (a route naming none needs "default");
    // requests no route matches go to "default", or are answered 404 when there is none.
    std::vector<upstream_config> upstreams;
    proxy_config proxy;
    log_config log;
    store_config store;
    clients_config clients;
    response_config response;
    std::vector<plan_config> plans;       // in file order
    std::vector<policy_config> policies;  // in file order
    std::vector<route_config> routes;     // in file order; first match wins
    service_config service;
    // What is allowed but probably not meant ("FILE:LINE:COLUMN: PATH: why"), logged at
    // start and at every reload.
    std::vector<std::string> warnings;

    const policy_config* find_policy(std::string_view name) const;
    const plan_config* find_plan(std::string_view name) const;
    // A pool by name ("" = "default"); null when there is none.
    const upstream_config* find_upstream(std::string_view name) const;

    bool operator==(const config&) const = default;
};

class config_error : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The file and its key registry are read by read_stable_file() (stable_file.hpp): one being
// rewritten in place is waited for, up to a second, never loaded half-written.
std::shared_ptr<const config> load_file(const std::string& path);
std::shared_ptr<const config> load_string(std::string_view yaml, const std::string& name);

// The body of the admin API's PUT /overrides/<kind>/<value>, JSON read with the config's own
// readers (YAML reads JSON): {"policy": <name>, "tiers": [<tier as in the file>...]} or
// {"plan": <name>}, and "expires_in": <duration, at most 8784h>. Tiers are read for `kind`
// (their duplicates refused as in a policy). Throws config_error
// "SOURCE:LINE:COLUMN: key.path: reason" naming the field; the checks against a config (the
// policy exists and limits the kind, the plan exists, a route's cost fits) are the caller's.
struct override_config {
    std::string policy;  // with tiers
    std::vector<tier_config> tiers;
    std::string plan;  // instead of policy and tiers
    duration expires_in{0};
};
override_config read_override(const std::string& text, const std::string& source, const std::string& kind);
// A JSON list of tiers alone, as read_override reads "tiers".
std::vector<tier_config> read_override_tiers(const std::string& text, const std::string& source,
                                             const std::string& kind);

// Every key the file may hold, as dotted paths in the order the schema declares them: a
// list's items as "routes[].match.path", names the user chooses as "policies.<name>.shadow".
// (The key registry file is not in it.)
std::vector<std::string> schema_keys();

// A key whose value is taken only at start, as the schema declares it. keep() puts
// running's value back into next, and says whether next had another one.
struct restart_only_key {
    std::string key;
    bool (*keep)(config& next, const config& running);
};
// In schema order; built once, any thread.
const std::vector<restart_only_key>& restart_only_keys();

// Scalar parsers, exposed for unit tests. Each returns nullopt on any malformed input.
std::optional<duration> parse_duration(std::string_view s);   // "250ms" "1s" "5m" "1h"
std::optional<std::uint64_t> parse_size(std::string_view s);  // "16384" "64KiB" "10MiB" "1GiB"
std::optional<address> parse_address(std::string_view s);     // "0.0.0.0:8080" "[::1]:9090"
std::optional<upstream_url> parse_upstream_url(std::string_view s);
std::optional<cidr> parse_cidr(std::string_view s);            // "10.0.0.0/8" "::1" "2001:db8::/32"
std::optional<host_port> parse_host_port(std::string_view s);  // "redis:6379" "127.0.0.1:6379" "[::1]:6379"
std::string format_duration(duration d);                       // 1000ms -> "1s", 90s -> "90s", 3600s -> "1h"

}  // namespace sluice::config
