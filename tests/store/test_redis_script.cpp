// The Redis script against its oracle: lua/rate_limit.lua on a real redis-server versus
// limit::decide() on in-memory states, request by request on random traces; plus unit
// tests of the EVALSHA encoder and the reply parser.
//
// The differential test starts its own redis-server (SLUICE_REDIS_SERVER, default
// redis-server on PATH) on a free loopback port and stops it at the end of each case.
// Seed: SLUICE_TEST_SEED, else random (printed).
#include "limit/decide.hpp"
#include "limit/store.hpp"
#include "store/redis_pipeline.hpp"
#include "store/redis_script.hpp"
#include "store/redis_store.hpp"

#include <doctest/doctest.h>

#include <hiredis/hiredis.h>
#include <algorithm>
#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {

using namespace sluice;
using config::algorithm;
using limit::usec;
namespace rs = store::redis_script;

constexpr usec MS = 1000;
constexpr usec SEC = 1'000'000;
constexpr usec HOUR = 3600 * SEC;

// ---------------------------------------------------------------------------------------
// Tiers and keys

const char* algo_name(algorithm a) {
    switch (a) {
        case algorithm::fixed: return "fixed";
        case algorithm::sliding: return "sliding";
        case algorithm::gcra: return "gcra";
        case algorithm::log: return "log";
        case algorithm::concurrency: return "concurrency";
    }
    return "?";
}

// param: sliding precision (ms), gcra burst; unused otherwise.
limit::tier make_tier(algorithm algo, std::int64_t limit, std::int64_t per_ms, std::int64_t param,
                      std::int64_t min_interval_ms = 0, const std::string& policy = "p", const std::string& kind = "ip",
                      const std::string& suffix = "") {
    config::tier_config c;
    c.kind = kind;
    c.limit = limit;
    c.per = config::duration{per_ms};
    c.algo = algo;
    c.precision = config::duration{algo == algorithm::fixed ? per_ms : algo == algorithm::sliding ? param : 0};
    c.burst = algo == algorithm::gcra ? param : 0;
    c.min_interval = config::duration{min_interval_ms};
    std::string id = policy + "/" + kind + "/" + algo_name(algo) + "/" + std::to_string(per_ms) + "ms/" +
                     std::to_string(param) + suffix;
    std::string name = kind + "-" + std::to_string(per_ms) + "ms";
    return limit::tier::from(c, id, name);
}

limit::digest digest_of(unsigned n) {
    limit::digest d{};
    for (std::size_t i = 0; i < d.size(); ++i) d[i] = static_cast<std::uint8_t>(n * 37 + i * 11);
    return d;
}

// ---------------------------------------------------------------------------------------
// hiredis helpers

struct reply_free {
    void operator()(redisReply* r) const { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_free>;
struct context_free {
    void operator()(redisContext* c) const { redisFree(c); }
};
using context_ptr = std::unique_ptr<redisContext, context_free>;

reply_ptr command(redisContext* c, const std::vector<std::string>& args) {
    std::vector<const char*> ptrs;
    std::vector<size_t> lens;
    for (const auto& a : args) {
        ptrs.push_back(a.data());
        lens.push_back(a.size());
    }
    return reply_ptr(
        static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(args.size()), ptrs.data(), lens.data())));
}

// Several commands in one round trip.
std::vector<reply_ptr> pipeline(redisContext* c, const std::vector<std::vector<std::string>>& cmds) {
    for (const auto& args : cmds) {
        std::vector<const char*> ptrs;
        std::vector<size_t> lens;
        for (const auto& a : args) {
            ptrs.push_back(a.data());
            lens.push_back(a.size());
        }
        redisAppendCommandArgv(c, static_cast<int>(args.size()), ptrs.data(), lens.data());
    }
    std::vector<reply_ptr> out;
    for (std::size_t i = 0; i < cmds.size(); ++i) {
        void* r = nullptr;
        if (redisGetReply(c, &r) != REDIS_OK) break;
        out.emplace_back(static_cast<redisReply*>(r));
    }
    return out;
}

std::string str(const redisReply* r) {
    if (!r) return "<null>";
    switch (r->type) {
        case REDIS_REPLY_STRING:
        case REDIS_REPLY_STATUS:
        case REDIS_REPLY_ERROR: return std::string(r->str, r->len);
        case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
        case REDIS_REPLY_NIL: return "<nil>";
        case REDIS_REPLY_ARRAY: {
            std::string s = "[";
            for (std::size_t i = 0; i < r->elements; ++i) s += (i ? "," : "") + str(r->element[i]);
            return s + "]";
        }
    }
    return "<?>";
}

// A redis-server of our own on a free loopback port; with `cluster`, a one-node Redis
// Cluster serving every slot (its cluster bus on port + 10000).
class redis_server {
public:
    explicit redis_server(bool cluster = false) : cluster_(cluster) {
        for (int attempt = 0; attempt < 3 && !ctx_; ++attempt) start();
        REQUIRE_MESSAGE(ctx_, "could not start redis-server");
    }
    ~redis_server() { stop(); }
    redis_server(const redis_server&) = delete;
    redis_server& operator=(const redis_server&) = delete;

    redisContext* ctx() const { return ctx_.get(); }
    reply_ptr cmd(const std::vector<std::string>& args) const { return command(ctx_.get(), args); }
    int port() const { return port_; }

private:
    static int free_port() {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0) return 0;
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = 0;
        socklen_t len = sizeof a;
        int port = 0;
        if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0)
            port = ntohs(a.sin_port);
        ::close(fd);
        return port;
    }

    void start() {
        port_ = free_port();
        for (int i = 0; cluster_ && i < 100 && (port_ == 0 || port_ > 55535 || !bindable(port_ + 10000)); ++i)
            port_ = free_port();
        if (port_ == 0) return;
        const char* bin = std::getenv("SLUICE_REDIS_SERVER");
        std::string exe = bin && *bin ? bin : "redis-server";
        std::string port = std::to_string(port_);
        pid_ = ::fork();
        if (pid_ == 0) {
            int devnull = ::open("/dev/null", O_WRONLY);
            if (devnull >= 0) {
                ::dup2(devnull, 1);
                ::close(devnull);
            }
            std::vector<std::string> args{exe,      "--port",     port,           "--bind", "127.0.0.1",
                                          "--save", "",           "--appendonly", "no",     "--dir",
                                          "/tmp",   "--loglevel", "warning"};
            if (cluster_) args.insert(args.end(), {"--cluster-enabled", "yes", "--cluster-config-file", conf_file()});
            std::vector<char*> argv;
            for (auto& a : args) argv.push_back(a.data());
            argv.push_back(nullptr);
            ::execvp(exe.c_str(), argv.data());
            std::_Exit(127);
        }
        if (pid_ < 0) return;
        for (int i = 0; i < 300; ++i) {  // up to ~3 s
            int status = 0;
            if (::waitpid(pid_, &status, WNOHANG) == pid_) {
                pid_ = -1;
                return;
            }
            timeval tv{0, 200'000};
            context_ptr c(redisConnectWithTimeout("127.0.0.1", port_, tv));
            if (c && !c->err) {
                auto r = command(c.get(), {"PING"});
                if (r && str(r.get()) == "PONG") {
                    ctx_ = std::move(c);
                    if (cluster_ && !serve_every_slot()) stop();
                    return;
                }
            }
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        stop();
    }

    void stop() {
        ctx_.reset();
        if (pid_ > 0) {
            ::kill(pid_, SIGTERM);
            int status = 0;
            ::waitpid(pid_, &status, 0);
            pid_ = -1;
            if (cluster_) std::remove(conf_file().c_str());
        }
    }

    static bool bindable(int port) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        a.sin_port = htons(static_cast<std::uint16_t>(port));
        const bool ok = fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
        if (fd >= 0) ::close(fd);
        return ok;
    }

    std::string conf_file() const { return "/tmp/sluice-test-nodes-" + std::to_string(port_) + ".conf"; }

    bool serve_every_slot() {
        auto added = command(ctx_.get(), {"CLUSTER", "ADDSLOTSRANGE", "0", "16383"});
        if (!added || str(added.get()) != "OK") return false;
        for (int i = 0; i < 500; ++i) {  // up to ~5 s
            if (str(command(ctx_.get(), {"CLUSTER", "INFO"}).get()).find("cluster_state:ok") != std::string::npos)
                return true;
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
        }
        return false;
    }

    bool cluster_ = false;
    int port_ = 0;
    pid_t pid_ = -1;
    context_ptr ctx_;
};

std::string load_script(const redis_server& srv) {
    auto r = srv.cmd({"SCRIPT", "LOAD", store::rate_limit_lua});
    REQUIRE(r);
    REQUIRE_MESSAGE(r->type == REDIS_REPLY_STRING, str(r.get()));
    return str(r.get());
}

std::uint64_t test_seed() {
    if (const char* s = std::getenv("SLUICE_TEST_SEED"); s && *s) return std::strtoull(s, nullptr, 10);
    return (static_cast<std::uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
}

// A time a day ahead of the wall clock, aligned to the hour: every bucket edge is a round
// number, and keys written at it never expire while the test runs (TTLs cover the
// distance to the clock too).
usec future_t0() {
    const auto wall =
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count();
    return (wall / HOUR + 24) * HOUR;
}

// ---------------------------------------------------------------------------------------
// Running both sides

struct harness {
    harness(const redis_server& s, std::string script_sha) : srv(s), sha(std::move(script_sha)) {}

    const redis_server& srv;
    std::string sha;
    std::string prefix = "t:";
    // One EVALSHA per identifier, a denial taking back the others' commits, as the
    // store does on a Redis Cluster (where one script cannot span two slots).
    bool split = false;
    std::map<std::string, limit::key_state> states;  // decide()'s side, by key name
    std::map<std::string, long long> expire_at;      // last PEXPIRETIME seen per key
    std::size_t requests = 0, denials = 0, log_entries = 0, undos = 0, receipts = 0, take_backs = 0;
    limit::receipt taken;  // the last step's receipt (an admission with want_receipt)

    std::vector<std::string> key_names(const limit::check_request& r) const {
        std::vector<std::string> names;
        for (const auto& k : r.keys) {
            names.push_back(rs::key_name(prefix, k));
            for (const auto& t : k.tiers)
                if (t.algo == algorithm::log) names.push_back(rs::log_key_name(prefix, k, t));
        }
        return names;
    }

    // Contents and expiry of every key of a request. Not DUMP: a read alone can advance
    // the incremental rehash of a hashtable-encoded HASH, which reorders its fields.
    std::string snapshot(const limit::check_request& r) const {
        std::vector<std::vector<std::string>> cmds;
        const auto names = key_names(r);
        for (const auto& n : names) {
            if (n.find(":log:") != std::string::npos)
                cmds.push_back({"ZRANGE", n, "0", "-1", "WITHSCORES"});
            else
                cmds.push_back({"HGETALL", n});
            cmds.push_back({"PEXPIRETIME", n});
        }
        std::string out;
        std::size_t i = 0;
        for (const auto& rep : pipeline(srv.ctx(), cmds)) {
            const redisReply* x = rep.get();
            if (i % 2 == 0 && x && x->type == REDIS_REPLY_ARRAY && names[i / 2].find(":log:") == std::string::npos) {
                std::vector<std::string> pairs;
                for (std::size_t e = 0; e + 1 < x->elements; e += 2)
                    pairs.push_back(str(x->element[e]) + "=" + str(x->element[e + 1]));
                std::sort(pairs.begin(), pairs.end());
                for (const auto& p : pairs) out += p + ";";
                out += "\n";
            } else {
                out += str(x) + "\n";
            }
            ++i;
        }
        return out;
    }

    limit::decision oracle(const limit::check_request& r, usec now, limit::receipt* rc = nullptr) {
        if (split && r.keys.size() > 1 && !r.count_rejected) return oracle_split(r, now, rc);
        std::vector<limit::key_request> reqs;
        for (const auto& k : r.keys) reqs.push_back({&states[rs::key_name(prefix, k)], k.tiers});
        return limit::decide(reqs, now, r.cost, r.count_rejected, r.lease, rc);
    }

    // decide() per identifier, and on a denial the admitting ones taken back (take_back) and
    // their leases released, as the store does on a Cluster; its decision is the one decide()
    // makes of the whole request (checked here on copies).
    limit::decision oracle_split(const limit::check_request& r, usec now, limit::receipt* rc) {
        std::vector<limit::key_state> copies;
        for (const auto& k : r.keys) copies.push_back(states[rs::key_name(prefix, k)]);
        std::vector<limit::key_request> whole_reqs;
        for (std::size_t i = 0; i < r.keys.size(); ++i) whole_reqs.push_back({&copies[i], r.keys[i].tiers});
        const auto whole = limit::decide(whole_reqs, now, r.cost, false, r.lease);

        limit::decision merged;
        std::vector<limit::receipt> parts(r.keys.size());
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
            const limit::key_request one{&states[rs::key_name(prefix, r.keys[i])], r.keys[i].tiers};
            auto d = limit::decide(std::span(&one, 1), now, r.cost, false, r.lease, &parts[i]);
            merged.allowed = merged.allowed && d.allowed;
            merged.retry_after = std::max(merged.retry_after, d.retry_after);
            for (auto t : d.tiers) {
                t.key_index = i;
                merged.tiers.push_back(t);
            }
        }
        limit::check_result as_result;
        as_result.verdict = merged;
        const auto differs = compare(whole, as_result);
        REQUIRE_MESSAGE(differs.empty(), "split vs whole: " << differs);
        if (merged.allowed) {
            if (rc)
                for (const auto& p : parts) rc->at.push_back(p.at.at(0));
            return merged;
        }
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
            if (parts[i].at.empty()) continue;
            const limit::key_request one{&states[rs::key_name(prefix, r.keys[i])], r.keys[i].tiers};
            limit::take_back(std::span(&one, 1), now, r.cost, parts[i], true);
            limit::release_lease(std::span(&one, 1), r.lease);
        }
        return merged;
    }

    // Takes back `amount` of the admission of `r` with receipt `rc` on both sides (on a
    // cluster: one call per identifier, as the store does).
    void take_back(const limit::check_request& r, const limit::receipt& rc, std::int64_t amount, usec now) {
        ++take_backs;
        std::vector<limit::key_request> reqs;
        for (const auto& k : r.keys) reqs.push_back({&states[rs::key_name(prefix, k)], k.tiers});
        limit::take_back(reqs, now, amount, rc, amount >= r.cost);
        const auto send = [&](const limit::check_request& part, const limit::receipt& part_rc) {
            std::vector<std::string> argv;
            rs::build_take_back(argv, sha, prefix, part, part_rc, amount, now);
            REQUIRE(rs::format_take_back(sha, prefix, part, part_rc, amount, now) == store::format_command(argv));
            auto reply = srv.cmd(argv);
            REQUIRE_MESSAGE(reply->type == REDIS_REPLY_INTEGER, str(reply.get()));
        };
        if (!split) return send(r, rc);
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
            limit::receipt one;
            one.at.push_back(rc.at.at(i));
            send({r.keys.subspan(i, 1), r.cost, false, r.lease}, one);
        }
    }

    // A lease released or renewed on both sides (as redis_store::change_lease: on a cluster,
    // one call per identifier).
    void change_lease(const limit::check_request& r, limit::lease_change c, usec now) {
        std::vector<limit::key_request> reqs;
        for (const auto& k : r.keys) reqs.push_back({&states[rs::key_name(prefix, k)], k.tiers});
        if (c == limit::lease_change::release)
            limit::release_lease(reqs, r.lease);
        else
            limit::renew_lease(reqs, now, r.lease);
        auto send = [&](const limit::check_request& part) {
            std::vector<std::string> argv;
            if (!rs::build_lease(argv, sha, prefix, part, c, now)) return;
            auto reply = srv.cmd(argv);
            REQUIRE_MESSAGE(reply->type == REDIS_REPLY_INTEGER, str(reply.get()));
        };
        if (!split) return send(r);
        for (std::size_t i = 0; i < r.keys.size(); ++i) send({r.keys.subspan(i, 1), r.cost, false, r.lease});
    }

    limit::check_result script(const limit::check_request& r, std::optional<usec> now) {
        if (split && r.keys.size() > 1) return split_script(r, now);
        // The RESP the Redis store sends, as it writes it (format_call).
        const std::string command = rs::format_call(sha, prefix, r, now);
        REQUIRE(redisAppendFormattedCommand(srv.ctx(), command.data(), command.size()) == REDIS_OK);
        void* raw = nullptr;
        REQUIRE(redisGetReply(srv.ctx(), &raw) == REDIS_OK);
        reply_ptr reply(static_cast<redisReply*>(raw));
        return rs::parse_reply(reply.get(), r);
    }

    // As cluster_split's decide_split: each identifier with its receipt; a count_rejected
    // request commits everywhere, and after a denial the identifiers that admitted are checked
    // again; else they are taken back.
    limit::check_result split_script(const limit::check_request& r, std::optional<usec> now) {
        std::vector<limit::check_result> parts;
        auto call = [&](std::size_t i, rs::call_flag flag) {
            limit::check_request one{r.keys.subspan(i, 1), r.cost, r.count_rejected, r.lease};
            one.want_receipt = flag == rs::call_flag::none && (!r.count_rejected || r.want_receipt);
            std::vector<std::string> argv;
            rs::build_call(argv, sha, prefix, one, now, flag);
            auto reply = srv.cmd(argv);
            return rs::parse_reply(reply.get(), one);
        };
        bool denied = false;
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
            parts.push_back(call(i, rs::call_flag::none));
            if (parts.back().state != limit::check_result::status::ok) return parts.back();
            denied = denied || !parts.back().verdict.allowed;
        }
        if (denied && r.count_rejected) {
            if (r.lease != 0) release_parts(r, now);
            for (std::size_t i = 0; i < r.keys.size(); ++i)
                if (parts[i].verdict.allowed) parts[i] = call(i, rs::call_flag::query);
        }
        limit::check_result out;
        for (std::size_t i = 0; i < parts.size(); ++i) {
            const auto& p = parts[i];
            if (p.state != limit::check_result::status::ok) return p;
            out.verdict.allowed = out.verdict.allowed && p.verdict.allowed;
            out.verdict.retry_after = std::max(out.verdict.retry_after, p.verdict.retry_after);
            for (auto t : p.verdict.tiers) {
                t.key_index = i;
                out.verdict.tiers.push_back(t);
            }
        }
        if (out.verdict.allowed && r.want_receipt)
            for (const auto& p : parts) out.taken.at.push_back(p.taken.at.at(0));
        if (!out.verdict.allowed && !r.count_rejected)
            for (std::size_t i = 0; i < r.keys.size(); ++i) {
                if (!parts[i].verdict.allowed) continue;
                std::vector<std::string> argv;
                const limit::check_request one{r.keys.subspan(i, 1), r.cost, false, r.lease};
                rs::build_take_back(argv, sha, prefix, one, parts[i].taken, r.cost, now);
                auto reply = srv.cmd(argv);
                REQUIRE_MESSAGE(reply->type == REDIS_REPLY_INTEGER, str(reply.get()));
                ++undos;
            }
        // As the store does after taking back: the slots the admitting identifiers took are given back.
        if (!out.verdict.allowed && !r.count_rejected && r.lease != 0) release_parts(r, now);
        return out;
    }

    void release_parts(const limit::check_request& r, std::optional<usec> now) {
        for (std::size_t i = 0; i < r.keys.size(); ++i) {
            std::vector<std::string> argv;
            if (!rs::build_lease(argv, sha, prefix, {r.keys.subspan(i, 1), r.cost, false, r.lease},
                                 limit::lease_change::release, now))
                continue;
            auto reply = srv.cmd(argv);
            REQUIRE_MESSAGE(reply->type == REDIS_REPLY_INTEGER, str(reply.get()));
        }
    }

    static std::string compare(const limit::decision& want, const limit::check_result& got) {
        std::ostringstream o;
        if (got.state != limit::check_result::status::ok) return "script error: " + got.error;
        const auto& v = got.verdict;
        if (v.allowed != want.allowed) o << "allowed " << v.allowed << " want " << want.allowed << "; ";
        if (v.retry_after != want.retry_after)
            o << "retry_after " << v.retry_after << " want " << want.retry_after << "; ";
        if (v.tiers.size() != want.tiers.size()) {
            o << "tier count " << v.tiers.size() << " want " << want.tiers.size();
            return o.str();
        }
        for (std::size_t i = 0; i < v.tiers.size(); ++i) {
            const auto& g = v.tiers[i];
            const auto& w = want.tiers[i];
            if (g.t != w.t || g.key_index != w.key_index) o << "tier " << i << " identity differs; ";
            if (g.remaining != w.remaining || g.reset != w.reset || g.admitted != w.admitted)
                o << "tier " << i << " (" << w.t->id << ") remaining/reset/admitted " << g.remaining << "/" << g.reset
                  << "/" << g.admitted << " want " << w.remaining << "/" << w.reset << "/" << w.admitted << "; ";
        }
        return o.str();
    }

    std::string describe(const limit::check_request& r, usec now) {
        std::ostringstream o;
        o << "request #" << requests << " now=" << now << " cost=" << r.cost;
        for (const auto& k : r.keys) {
            auto name = rs::key_name(prefix, k);
            o << "\n  key " << name << " tiers:";
            for (const auto& t : k.tiers) o << " " << t.id << "(limit " << t.limit << ", mi " << t.min_interval << ")";
            const auto& s = states[name];
            o << "\n    oracle state before: last_time=" << s.last_time;
            for (const auto& ts : s.tiers) {
                o << " | " << ts.key << " last=" << ts.last << " [";
                for (std::size_t i = 0; i < ts.data.size(); ++i) o << (i ? "," : "") << ts.data[i];
                o << "]";
            }
        }
        return o.str();
    }

    // Runs one request on both sides and checks everything; returns the oracle's decision.
    limit::decision step(const limit::check_request& r, usec now) {
        ++requests;
        const std::string context = describe(r, now);
        limit::receipt want_rc;
        auto want = oracle(r, now, r.want_receipt ? &want_rc : nullptr);
        // (On a cluster a denial commits and takes back: the decisions after it tell.)
        const bool split_call = split && r.keys.size() > 1;
        const bool writes = want.allowed || r.count_rejected;
        const std::string before = writes || split_call ? std::string() : snapshot(r);
        auto got = script(r, now);
        const std::string problem = compare(want, got);
        INFO(context);
        INFO("script state after: " << (problem.empty() ? std::string() : snapshot(r)));
        REQUIRE_MESSAGE(problem.empty(), problem);
        if (!want.allowed) ++denials;
        // An admission's receipt: per identifier the instant its commit used, as decide()'s.
        REQUIRE(got.taken.at == want_rc.at);
        REQUIRE_FALSE(got.taken.local);
        taken = std::move(got.taken);
        receipts += !taken.at.empty();
        if (!writes) {
            // A denial writes nothing: not a field, not a log entry, not a TTL.
            if (!split_call) REQUIRE_EQ(snapshot(r), before);
            return want;
        }
        // Every written key has a TTL that covers its state and never shrinks.
        std::vector<std::vector<std::string>> cmds;
        std::vector<std::pair<std::string, usec>> need;  // key, expiry the oracle needs (µs)
        for (const auto& k : r.keys) {
            const auto name = rs::key_name(prefix, k);
            const auto& ks = states[name];
            cmds.push_back({"PEXPIRETIME", name});
            need.emplace_back(name, ks.expires);
            for (const auto& t : k.tiers)
                if (t.algo == algorithm::log) {
                    const auto lname = rs::log_key_name(prefix, k, t);
                    cmds.push_back({"PEXPIRETIME", lname});
                    need.emplace_back(lname, ks.last_time + t.horizon);
                    log_entries += static_cast<std::size_t>(r.cost);
                }
        }
        auto replies = pipeline(srv.ctx(), cmds);
        REQUIRE_EQ(replies.size(), cmds.size());
        for (std::size_t i = 0; i < replies.size(); ++i) {
            INFO("key " << need[i].first);
            REQUIRE(replies[i]->type == REDIS_REPLY_INTEGER);
            const long long at_ms = replies[i]->integer;
            REQUIRE(at_ms > 0);  // exists, with a TTL
            CHECK(at_ms * MS + 2 * MS >= need[i].second);
            auto& seen = expire_at[need[i].first];
            REQUIRE(at_ms >= seen);
            seen = at_ms;
        }
        return want;
    }
};

// ---------------------------------------------------------------------------------------
// Random traces

struct policy {
    std::vector<limit::tier> ip, user;
};

struct mix {
    const char* name;
    std::vector<algorithm> algos;
    int min_interval_percent;
    bool count_rejected = false;  // penalty mode on every request
};

limit::tier random_tier(std::mt19937_64& rng, algorithm algo, int mi_percent, const std::string& policy_name,
                        const std::string& kind, std::size_t index, std::int64_t limit_factor = 1) {
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    static constexpr std::int64_t pers[] = {7, 10, 20, 30, 50, 100, 250};
    std::int64_t per = pers[pick(0, std::size(pers) - 1)];
    std::int64_t limit = pick(1, 8) * limit_factor;
    std::int64_t param = 0;
    switch (algo) {
        case algorithm::fixed: break;
        case algorithm::sliding: {
            static constexpr std::int64_t precisions[] = {1, 2, 3, 5, 10, 20};
            param = precisions[pick(0, std::size(precisions) - 1)];
            per = param * pick(1, 12);
            break;
        }
        case algorithm::gcra: param = pick(1, limit + 3); break;
        case algorithm::log: limit = pick(1, 12) * limit_factor; break;
        case algorithm::concurrency: limit = pick(1, 4) * limit_factor; break;  // per: the lease
    }
    std::int64_t mi = pick(1, 100) <= mi_percent ? pick(1, per * 2) : 0;
    if (algo == algorithm::concurrency) mi = 0;  // the config refuses min_interval there
    std::string suffix(1, '/');                  // not "/" + to_string(): GCC 12 -O2 warns falsely (-Wrestrict)
    suffix += std::to_string(index);
    return make_tier(algo, limit, per, param, mi, policy_name, kind, suffix);
}

void run_trace(harness& h, std::mt19937_64& rng, const mix& m, std::size_t count) {
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    auto algo = [&] {
        return m.algos[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(m.algos.size()) - 1))];
    };

    // Two policies; the second may share a tier (same id: same state) with the first.
    std::vector<policy> policies(2);
    for (std::size_t p = 0; p < policies.size(); ++p) {
        const std::string pname = std::string(m.name) + "-p" + std::to_string(p);
        for (std::int64_t i = 0, n = pick(1, 3); i < n; ++i)
            policies[p].ip.push_back(
                random_tier(rng, algo(), m.min_interval_percent, pname, "ip", static_cast<std::size_t>(i)));
        for (std::int64_t i = 0, n = pick(0, 2); i < n; ++i)
            policies[p].user.push_back(
                random_tier(rng, algo(), m.min_interval_percent, pname, "user", static_cast<std::size_t>(i)));
    }
    if (pick(0, 1)) policies[1].ip.push_back(policies[0].ip[0]);
    std::vector<const limit::tier*> all;
    for (const auto& p : policies) {
        for (const auto& t : p.ip) all.push_back(&t);
        for (const auto& t : p.user) all.push_back(&t);
    }
    // The largest cost every tier of the policy admits on an empty state.
    auto max_cost = [](const policy& p) {
        std::int64_t c = 1'000'000;
        for (const auto* v : {&p.ip, &p.user})
            for (const auto& t : *v) {
                if (t.algo == algorithm::concurrency) continue;  // one slot, whatever the cost
                c = std::min(c, t.algo == algorithm::gcra ? std::min(t.limit, t.burst) : t.limit);
            }
        return c;
    };

    usec t = future_t0() + pick(0, 3) * 7 * MS;
    usec mean_per = 0;
    for (const auto* tp : all) mean_per += tp->per;
    mean_per /= static_cast<usec>(all.size());

    std::vector<limit::store_key> keys;
    std::int64_t cost = 1;
    usec now = t;
    bool retry_pending = false;
    usec retry_at = 0;
    const bool leased =
        std::any_of(all.begin(), all.end(), [](auto* tp) { return tp->algo == algorithm::concurrency; });
    std::uint64_t lease = 0;
    // The admitted requests holding a lease ("in flight"): some end, some are renewed.
    std::vector<std::pair<std::vector<limit::store_key>, std::uint64_t>> in_flight;
    // Admissions with a receipt, some of which are taken back later (in part or whole),
    // whatever ran in between.
    struct receipted {
        std::vector<limit::store_key> keys;
        std::int64_t cost;
        std::uint64_t lease;
        limit::receipt rc;
    };
    std::vector<receipted> charged;
    for (std::size_t n = 0; n < count; ++n) {
        if (!charged.empty() && pick(1, 100) <= 12) {
            const auto i = static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(charged.size()) - 1));
            const auto& c = charged[i];
            t += pick(0, mean_per / 4);
            const usec at = pick(1, 100) <= 10 ? t - pick(0, mean_per) : t;  // an earlier clock too
            h.take_back({c.keys, c.cost, m.count_rejected, c.lease}, c.rc,
                        pick(1, 100) <= 70 ? c.cost : pick(1, c.cost), at);
            charged.erase(charged.begin() + static_cast<std::ptrdiff_t>(i));
            continue;
        }
        if (!in_flight.empty() && pick(1, 100) <= 30) {
            const auto i = static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(in_flight.size()) - 1));
            const limit::check_request held{in_flight[i].first, 1, false, in_flight[i].second};
            t += pick(0, mean_per / 4);
            if (pick(1, 100) <= 60) {
                h.change_lease(held, limit::lease_change::release, t);
                in_flight.erase(in_flight.begin() + static_cast<std::ptrdiff_t>(i));
            } else {
                h.change_lease(held, limit::lease_change::renew, t);
            }
            continue;
        }
        const bool repeat = retry_pending && pick(1, 100) <= 40;
        if (repeat) {
            // The same request again at exactly now + retry_after (or 1 µs before).
            now = retry_at - pick(0, 1);
            t = std::max(t, now);
        } else {
            const auto& p = policies[static_cast<std::size_t>(pick(0, 1))];
            keys.clear();
            keys.push_back({sluice::identity::kind::ip, digest_of(static_cast<unsigned>(pick(0, 2))), p.ip});
            if (!p.user.empty() && pick(1, 100) <= 70)
                keys.push_back({sluice::identity::kind::user, digest_of(static_cast<unsigned>(pick(0, 1))), p.user});
            if (pick(1, 100) <= 15) {
                const auto other = (keys[0].id[0] == digest_of(0)[0]) ? digest_of(1) : digest_of(0);
                keys.push_back({sluice::identity::kind::ip, other, p.ip});
            }
            // Identifiers of other kinds: their own keys, even with a digest an ip key has.
            if (pick(1, 100) <= 25)
                keys.push_back({sluice::identity::kind_of("header:x-tenant"),
                                digest_of(static_cast<unsigned>(pick(0, 1))), p.user.empty() ? p.ip : p.user});
            if (pick(1, 100) <= 15)
                keys.push_back({sluice::identity::kind_of("header:x-tenant+ip"),
                                digest_of(static_cast<unsigned>(pick(0, 2))), p.ip});
            const std::int64_t mc = max_cost(p);
            cost = pick(1, 100) <= 60 ? 1 : pick(1, mc);
            cost = std::min(cost, mc);
            const auto r = pick(1, 100);
            if (r <= 15) {
                // Same timestamp as before.
            } else if (r <= 35) {
                // Exactly on an edge of some tier (or 1 µs either side).
                const auto* tp = all[static_cast<std::size_t>(pick(0, static_cast<std::int64_t>(all.size()) - 1))];
                const usec unit = tp->algo == algorithm::gcra                                        ? tp->interval
                                  : tp->algo == algorithm::log || tp->algo == algorithm::concurrency ? tp->per
                                                                                                     : tp->bucket;
                t = (t / unit + 1) * unit + (pick(0, 2) - 1);
            } else {
                t += pick(1, std::max<usec>(2, mean_per / 3));
            }
            now = t;
            if (pick(1, 100) <= 5) now = t - pick(0, mean_per);  // an earlier clock: clamped per key
        }
        if (!repeat) lease = leased ? static_cast<std::uint64_t>(pick(1, (std::int64_t{1} << 53) - 1)) : 0;
        limit::check_request req{keys, cost, m.count_rejected, lease};
        req.want_receipt = pick(1, 100) <= 50;
        auto d = h.step(req, now);
        retry_pending = !d.allowed;
        retry_at = now + d.retry_after;
        if (d.allowed && lease != 0) in_flight.emplace_back(keys, lease);
        if (d.allowed && req.want_receipt) charged.push_back({keys, cost, lease, h.taken});
    }
}

}  // namespace

// =======================================================================================
// Encoder and parser

TEST_CASE("redis_script: key names carry the cluster hash tag") {
    limit::store_key ip{sluice::identity::kind::ip, {}, {}};
    for (std::size_t i = 0; i < ip.id.size(); ++i) ip.id[i] = static_cast<std::uint8_t>(i * 17);
    CHECK(rs::key_name("sluice:", ip) == "sluice:{ip:00112233445566778899aabbccddeeff}");
    limit::store_key user{sluice::identity::kind::user, ip.id, {}};
    CHECK(rs::key_name("", user) == "{user:00112233445566778899aabbccddeeff}");
    auto lt = make_tier(algorithm::log, 5, 1000, 0);
    CHECK(rs::log_key_name("s:", ip, lt) == "s:{ip:00112233445566778899aabbccddeeff}:log:" + lt.id);
    // Another kind by its canonical text: no brace in it, so the tag is still the identifier.
    limit::store_key tenant{sluice::identity::kind_of("header:x-tenant+ip"), ip.id, {}};
    CHECK(rs::key_name("s:", tenant) == "s:{header:x-tenant+ip:00112233445566778899aabbccddeeff}");
    CHECK(rs::log_key_name("s:", tenant, lt) == "s:{header:x-tenant+ip:00112233445566778899aabbccddeeff}:log:" + lt.id);
}

TEST_CASE("redis_script: build_call lays out KEYS and ARGV") {
    std::vector<limit::tier> ip_tiers{make_tier(algorithm::sliding, 10, 1000, 100, 0, "api"),
                                      make_tier(algorithm::log, 5, 2000, 0, 300, "api")};
    std::vector<limit::tier> user_tiers{make_tier(algorithm::gcra, 3, 1000, 2, 0, "api", "user")};
    limit::digest a{}, b{};
    a.fill(0xab);
    b.fill(0x01);
    std::vector<limit::store_key> keys{{sluice::identity::kind::ip, a, ip_tiers},
                                       {sluice::identity::kind::user, b, user_tiers}};
    limit::check_request r{keys, 2};

    std::string hex_a, hex_b;
    for (int i = 0; i < 16; ++i) {
        hex_a += "ab";
        hex_b += "01";
    }
    const std::string ip_hash = "x:{ip:" + hex_a + "}";
    const std::string user_hash = "x:{user:" + hex_b + "}";
    const auto& s = ip_tiers[0];
    const auto& l = ip_tiers[1];
    const auto& g = user_tiers[0];

    std::vector<std::string> want{
        "EVALSHA", "deadbeef", "3",       ip_hash,   ip_hash + ":log:" + l.id,
        user_hash, "",         "2",       "2",       "2",
        "s",       "10",       "1000000", "100000",  "10",
        "0",       "0",        "0",       "0",       "1000000",
        s.id,      "l",        "5",       "2000000", "0",
        "1",       "0",        "0",       "0",       "300000",
        "2000000", l.id,       "1",       "g",       "3",
        "1000000", "0",        "1",       "2",       "333334",
        "666668",  "0",        "1000000", g.id,
    };

    SUBCASE("production: the time argument is empty, the script reads TIME") {
        std::vector<std::string> argv;
        rs::build_call(argv, "deadbeef", "x:", r);
        CHECK(argv == want);
        CHECK(argv[3 + 3] == "");  // ARGV[1] follows the 3 keys
    }
    SUBCASE("tests: the override is ARGV[1]") {
        std::vector<std::string> argv;
        rs::build_call(argv, "deadbeef", "x:", r, usec{1'700'000'000'123'456});
        want[6] = "1700000000123456";
        CHECK(argv == want);
    }
    SUBCASE("appends to what is there") {
        std::vector<std::string> argv{"keep"};
        rs::build_call(argv, "deadbeef", "x:", r);
        REQUIRE(argv.size() == want.size() + 1);
        CHECK(argv[0] == "keep");
        CHECK(argv[1] == "EVALSHA");
    }
    SUBCASE("format_call writes the RESP that hiredis makes of build_call's argv") {
        std::vector<limit::tier> more{make_tier(algorithm::fixed, 7, 60000, 0, 0, "api"),
                                      make_tier(algorithm::concurrency, 2, 30000, 0, 0, "api")};
        std::vector<limit::store_key> three{keys[0], keys[1], {sluice::identity::kind::user, b, more}};
        for (const bool penalty : {false, true}) {
            for (const bool receipt : {false, true}) {
                for (const auto flag : {rs::call_flag::none, rs::call_flag::query}) {
                    for (const auto now : {std::optional<usec>{}, std::optional<usec>{usec{-5}}}) {
                        limit::check_request q{three, 1'000'000'000'000, penalty, 0xfffffffffffffULL};
                        q.want_receipt = receipt;
                        std::vector<std::string> argv;
                        rs::build_call(argv, "deadbeef", "x:", q, now, flag);
                        CHECK(rs::format_call("deadbeef", "x:", q, now, flag) == sluice::store::format_command(argv));
                        const char* want_flag = flag == rs::call_flag::query ? "q"
                                                : receipt                    ? (penalty ? "U" : "u")
                                                : penalty                    ? "p"
                                                                             : nullptr;
                        if (want_flag) CHECK(argv.back() == want_flag);
                        if (!want_flag) CHECK(argv.back() == more[1].id);
                    }
                }
            }
        }
        CHECK(rs::format_call("deadbeef", "x:", r) == sluice::store::format_command(want));
    }
    SUBCASE(
        "a take-back: the check's KEYS, then mode undo, amount, whole, and per identifier its receipt's "
        "instant and tiers") {
        limit::receipt rc;
        rc.at = {1'700'000'000'000'001, 1'700'000'000'000'002};
        std::vector<std::string> argv;
        rs::build_take_back(argv, "deadbeef", "x:", r, rc, 2, usec{7});
        std::vector<std::string> expect(want.begin(), want.begin() + 6);  // EVALSHA, sha, numkeys, 3 KEYS
        for (const char* a : {"7", "undo", "2", "1", "2", "1700000000000001"}) expect.push_back(a);
        expect.insert(expect.end(), want.begin() + 9, want.begin() + 9 + 1 + 22);  // ip: tier count, 2 tiers
        expect.push_back("1700000000000002");
        expect.insert(expect.end(), want.begin() + 9 + 23, want.end());  // user: tier count, its tier
        CHECK(argv == expect);
        CHECK(rs::format_take_back("deadbeef", "x:", r, rc, 2, usec{7}) == sluice::store::format_command(argv));
        argv.clear();
        rs::build_take_back(argv, "deadbeef", "x:", r, rc, 1);
        CHECK(argv[6] == "");
        CHECK(argv[9] == "0");  // 1 of 2: not whole
    }
}

namespace {
// A hand-made reply tree.
struct fake_reply {
    std::vector<redisReply> nodes;
    std::vector<redisReply*> ptrs;
    redisReply root{};
    std::string text;

    static fake_reply array(const std::vector<long long>& ints) {
        fake_reply f;
        f.nodes.resize(ints.size());
        for (std::size_t i = 0; i < ints.size(); ++i) {
            f.nodes[i] = redisReply{};
            f.nodes[i].type = REDIS_REPLY_INTEGER;
            f.nodes[i].integer = ints[i];
        }
        for (auto& n : f.nodes) f.ptrs.push_back(&n);
        f.root.type = REDIS_REPLY_ARRAY;
        f.root.elements = f.ptrs.size();
        f.root.element = f.ptrs.data();
        return f;
    }
    static fake_reply of(int type, std::string s) {
        fake_reply f;
        f.text = std::move(s);
        f.root.type = type;
        f.root.str = f.text.data();
        f.root.len = f.text.size();
        return f;
    }
    fake_reply() = default;
    fake_reply(fake_reply&& o) noexcept : nodes(std::move(o.nodes)), root(o.root), text(std::move(o.text)) {
        for (auto& n : nodes) ptrs.push_back(&n);
        root.element = ptrs.empty() ? nullptr : ptrs.data();
        if (root.str) root.str = text.data();
    }
};
}  // namespace

TEST_CASE("redis_script: parse_reply") {
    std::vector<limit::tier> ip_tiers{make_tier(algorithm::fixed, 10, 1000, 0), make_tier(algorithm::log, 5, 1000, 0)};
    std::vector<limit::tier> user_tiers{make_tier(algorithm::gcra, 3, 1000, 3, 0, "p", "user")};
    std::vector<limit::store_key> keys{{sluice::identity::kind::ip, digest_of(1), ip_tiers},
                                       {sluice::identity::kind::user, digest_of(2), user_tiers}};
    limit::check_request r{keys, 1};
    using status = limit::check_result::status;

    SUBCASE("a decision") {
        auto f = fake_reply::array({0, 250'000, 9, 1'000'000, 1, -1, 400, 0, 2, 333'334, 1});
        auto res = rs::parse_reply(&f.root, r);
        REQUIRE(res.state == status::ok);
        CHECK_FALSE(res.verdict.allowed);
        CHECK(res.verdict.retry_after == 250'000);
        REQUIRE(res.verdict.tiers.size() == 3);
        CHECK(res.verdict.tiers[0].t == &ip_tiers[0]);
        CHECK(res.verdict.tiers[0].key_index == 0);
        CHECK(res.verdict.tiers[0].remaining == 9);
        CHECK(res.verdict.tiers[0].reset == 1'000'000);
        CHECK(res.verdict.tiers[0].admitted);
        CHECK(res.verdict.tiers[1].t == &ip_tiers[1]);
        CHECK(res.verdict.tiers[1].remaining == -1);
        CHECK_FALSE(res.verdict.tiers[1].admitted);
        CHECK(res.verdict.tiers[2].t == &user_tiers[0]);
        CHECK(res.verdict.tiers[2].key_index == 1);
        CHECK(res.verdict.tiers[2].reset == 333'334);
    }
    SUBCASE("a receipt, with want_receipt and an admission only") {
        auto f = fake_reply::array({1, 0, 9, 1'000'000, 1, 4, 400, 1, 2, 333'334, 1, 1'700'000'000'000'001, 17});
        auto res = rs::parse_reply(&f.root, r);
        CHECK(res.state == status::error);  // not asked for
        limit::check_request with = r;
        with.want_receipt = true;
        res = rs::parse_reply(&f.root, with);
        REQUIRE(res.state == status::ok);
        CHECK(res.verdict.allowed);
        CHECK(res.taken.at == std::vector<usec>{1'700'000'000'000'001, 17});
        CHECK_FALSE(res.taken.local);
        auto denied = fake_reply::array({0, 5, 9, 1'000'000, 1, -1, 400, 0, 2, 333'334, 1});
        res = rs::parse_reply(&denied.root, with);
        REQUIRE(res.state == status::ok);
        CHECK(res.taken.at.empty());
        auto missing = fake_reply::array({1, 0, 9, 1'000'000, 1, 4, 400, 1, 2, 333'334, 1, 5});
        CHECK(rs::parse_reply(&missing.root, with).state == status::error);
        f.nodes[12].type = REDIS_REPLY_STRING;
        CHECK(rs::parse_reply(&f.root, with).state == status::error);
    }
    SUBCASE("an error reply") {
        auto f = fake_reply::of(REDIS_REPLY_ERROR, "ERR something broke");
        auto res = rs::parse_reply(&f.root, r);
        CHECK(res.state == status::error);
        CHECK(res.error == "ERR something broke");
        CHECK_FALSE(sluice::store::is_noscript_reply(&f.root));
    }
    SUBCASE("NOSCRIPT") {
        auto f = fake_reply::of(REDIS_REPLY_ERROR, "NOSCRIPT No matching script. Please use EVAL.");
        CHECK(sluice::store::is_noscript_reply(&f.root));
        CHECK(rs::parse_reply(&f.root, r).state == status::error);
        auto s = fake_reply::of(REDIS_REPLY_STRING, "NOSCRIPT");
        CHECK_FALSE(sluice::store::is_noscript_reply(&s.root));
        CHECK_FALSE(sluice::store::is_noscript_reply(nullptr));
    }
    SUBCASE("malformed replies") {
        CHECK(rs::parse_reply(nullptr, r).state == status::error);
        auto s = fake_reply::of(REDIS_REPLY_STRING, "OK");
        CHECK(rs::parse_reply(&s.root, r).state == status::error);
        auto short_ = fake_reply::array({1, 0, 9, 0, 1});
        CHECK(rs::parse_reply(&short_.root, r).state == status::error);
        auto bad_flag = fake_reply::array({2, 0, 9, 0, 1, 4, 0, 1, 2, 0, 1});
        CHECK(rs::parse_reply(&bad_flag.root, r).state == status::error);
        auto bad_tier_flag = fake_reply::array({1, 0, 9, 0, 1, 4, 0, 7, 2, 0, 1});
        CHECK(rs::parse_reply(&bad_tier_flag.root, r).state == status::error);
        auto not_int = fake_reply::array({1, 0, 9, 0, 1, 4, 0, 1, 2, 0, 1});
        not_int.nodes[3].type = REDIS_REPLY_STRING;
        CHECK(rs::parse_reply(&not_int.root, r).state == status::error);
    }
}

// =======================================================================================
// Against a real redis-server

// Runs `traces` random traces per mix on `srv` (fresh state each), `split` as harness.split;
// the seed comes from test_seed() and is printed under `label`.
harness run_mixes(const redis_server& srv, const char* label, const std::vector<mix>& mixes, int traces, bool split) {
    const auto seed = test_seed();
    std::printf("%s: seed %llu (SLUICE_TEST_SEED to repeat)\n", label, static_cast<unsigned long long>(seed));
    std::fflush(stdout);
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    harness h{srv, load_script(srv)};
    h.split = split;
    for (const auto& m : mixes) {
        INFO("mix " << std::string(m.name));
        // Several short traces per mix: each with its own random tiers, fresh state.
        for (int trace = 0; trace < traces; ++trace) {
            REQUIRE(str(srv.cmd({"FLUSHALL"}).get()) == "OK");
            h.states.clear();
            h.expire_at.clear();
            run_trace(h, rng, m, 250);
        }
    }
    std::printf("%s: %zu requests, %zu denials, %zu log entries, %zu receipts, %zu take-backs, %zu undos\n", label,
                h.requests, h.denials, h.log_entries, h.receipts, h.take_backs, h.undos);
    return h;
}

const mix every_algorithm{"all", {algorithm::fixed, algorithm::sliding, algorithm::gcra, algorithm::log}, 35};
const mix min_interval_heavy{
    "min-interval", {algorithm::fixed, algorithm::sliding, algorithm::gcra, algorithm::log}, 100};
// Penalty mode: no log tiers (the config refuses them with count_rejected).
const mix penalty{"penalty", {algorithm::fixed, algorithm::sliding, algorithm::gcra}, 25, true};
// Concurrency tiers beside others: leases taken, released, renewed and lapsing.
const mix concurrency{
    "concurrency", {algorithm::concurrency, algorithm::fixed, algorithm::sliding, algorithm::gcra, algorithm::log}, 10};
const mix concurrency_penalty{
    "concurrency-penalty", {algorithm::concurrency, algorithm::sliding, algorithm::gcra}, 10, true};

TEST_CASE("redis_script: the script matches decide() on random traces") {
    redis_server srv;
    const std::vector<mix> mixes{
        {"fixed", {algorithm::fixed}, 20},
        {"sliding", {algorithm::sliding}, 20},
        {"gcra", {algorithm::gcra}, 20},
        {"log", {algorithm::log}, 20},
        every_algorithm,
        min_interval_heavy,
        concurrency,
    };
    const auto h = run_mixes(srv, "test_redis_script", mixes, 8, false);
    CHECK(h.denials > h.requests / 10);
    CHECK(h.denials < h.requests * 9 / 10);
    CHECK(h.take_backs > h.requests / 20);
}

TEST_CASE("redis_script: count_rejected (refusals counted, then checked again) matches decide()") {
    redis_server srv;
    const std::vector<mix> mixes{penalty, {"penalty-min-interval", penalty.algos, 100, true}, concurrency_penalty};
    const auto h = run_mixes(srv, "test_redis_script (count_rejected)", mixes, 6, false);
    CHECK(h.denials > h.requests / 10);
    CHECK(h.denials < h.requests * 9 / 10);
}

TEST_CASE("redis_script: a batch decides its requests in turn, as decide() does one after the other") {
    redis_server srv;
    harness h{srv, load_script(srv)};
    // The same requests, each its own call: after each batch, every key it touched must hold
    // what they left (fields, log entries, expiry).
    harness single{srv, h.sha};
    single.prefix = "s:";
    const auto seed = test_seed();
    INFO("seed " << seed);
    std::printf("test_redis_script (batch): seed %llu (SLUICE_TEST_SEED to repeat)\n",
                static_cast<unsigned long long>(seed));
    std::mt19937_64 rng(seed);
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    const std::vector<algorithm> algos{algorithm::fixed, algorithm::sliding, algorithm::gcra, algorithm::log,
                                       algorithm::concurrency};
    std::size_t requests = 0, denials = 0, batches = 0, repeats = 0, relayouts = 0, loose_requests = 0,
                loose_admitted = 0, receipts = 0;
    std::uint64_t next_lease = 1;
    usec t = future_t0();
    for (int trace = 0; trace < 8; ++trace) {
        // Half the traces tight (most requests refused), half loose (most admitted: a request
        // then reads what the ones before it in its batch committed).
        const bool loose = trace % 2 == 1;
        const int mi_percent = loose ? 0 : 20;
        const std::int64_t factor = loose ? 3 : 1;
        std::vector<policy> policies(2);
        for (std::size_t p = 0; p < policies.size(); ++p) {
            const std::string pname = "batch" + std::to_string(trace) + "-p" + std::to_string(p);
            for (std::int64_t i = 0, n = pick(1, 3); i < n; ++i)
                policies[p].ip.push_back(random_tier(rng, algos[static_cast<std::size_t>(pick(0, 4))], mi_percent,
                                                     pname, "ip", static_cast<std::size_t>(i), factor));
            for (std::int64_t i = 0, n = pick(0, 2); i < n; ++i)
                policies[p].user.push_back(random_tier(rng, algos[static_cast<std::size_t>(pick(0, 4))], mi_percent,
                                                       pname, "user", static_cast<std::size_t>(i), factor));
        }
        t += 1000 * MS;  // after the trace before (the keys are the same, and keep their clock)
        for (int round = 0; round < 150; ++round) {
            // Now and then the clock is behind a key's last time (another gateway's): the key's
            // own clock is used.
            if (round > 0 && pick(1, 100) <= 10)
                t -= pick(0, 100 * MS);
            else
                t += pick(0, 150 * MS);
            // Requests of one batch share few identifiers, so that one sees another's commit;
            // some are the one before again (a client's burst: sent as "="), some another
            // client under the same policy (sent as "~").
            const auto m = static_cast<std::size_t>(pick(1, 6));
            std::vector<std::vector<limit::store_key>> keys(m);
            std::vector<limit::check_request> rq;
            rq.reserve(m);
            for (std::size_t i = 0; i < m; ++i) {
                if (i > 0 && rq.back().lease == 0 && pick(1, 100) <= 30) {
                    rq.push_back(rq.back());
                    continue;
                }
                if (i > 0 && rq.back().lease == 0 && pick(1, 100) <= 30) {
                    keys[i].assign(rq.back().keys.begin(), rq.back().keys.end());
                    const auto before = keys[i][0].id;
                    while (keys[i][0].id == before) keys[i][0].id = digest_of(static_cast<unsigned>(pick(0, 2)));
                    rq.push_back({keys[i], rq.back().cost, rq.back().count_rejected, 0});
                    continue;
                }
                const auto& p = policies[static_cast<std::size_t>(pick(0, 1))];
                keys[i].push_back({sluice::identity::kind::ip, digest_of(static_cast<unsigned>(pick(0, 1))), p.ip});
                if (!p.user.empty() && pick(0, 1))
                    keys[i].push_back({sluice::identity::kind::user, digest_of(0), p.user});
                const bool leased = std::any_of(keys[i].begin(), keys[i].end(), [](const limit::store_key& k) {
                    return std::any_of(k.tiers.begin(), k.tiers.end(),
                                       [](const limit::tier& x) { return x.algo == algorithm::concurrency; });
                });
                rq.push_back(
                    {keys[i], pick(1, 100) <= 70 ? 1 : pick(1, 3), pick(1, 100) <= 15, leased ? next_lease++ : 0});
                rq.back().want_receipt = pick(1, 100) <= 30;
            }
            std::vector<const limit::check_request*> ptrs;
            std::vector<limit::decision> want;
            std::vector<limit::receipt> want_rc(m);
            for (std::size_t i = 0; i < m; ++i) {
                ptrs.push_back(&rq[i]);
                want.push_back(h.oracle(rq[i], t, rq[i].want_receipt ? &want_rc[i] : nullptr));
            }
            const std::string command = rs::format_batch(h.sha, h.prefix, ptrs, t);
            std::vector<std::string> argv;
            rs::build_batch(argv, h.sha, h.prefix, ptrs, t);
            REQUIRE(command == sluice::store::format_command(argv));
            repeats += static_cast<std::size_t>(std::count(argv.begin(), argv.end(), "="));
            relayouts += static_cast<std::size_t>(std::count(argv.begin(), argv.end(), "~"));
            REQUIRE(redisAppendFormattedCommand(srv.ctx(), command.data(), command.size()) == REDIS_OK);
            void* raw = nullptr;
            REQUIRE(redisGetReply(srv.ctx(), &raw) == REDIS_OK);
            reply_ptr reply(static_cast<redisReply*>(raw));
            std::vector<limit::check_result> got;
            rs::parse_batch_reply(reply.get(), ptrs, got);
            REQUIRE(got.size() == m);
            for (std::size_t i = 0; i < m; ++i) {
                INFO("trace " << trace << " round " << round << " request " << i << " of " << m);
                const auto problem = harness::compare(want[i], got[i]);
                REQUIRE_MESSAGE(problem.empty(), problem);
                if (!want[i].allowed) ++denials;
                if (loose) {
                    ++loose_requests;
                    loose_admitted += want[i].allowed ? 1 : 0;
                }
                REQUIRE(got[i].taken.at == want_rc[i].at);
                receipts += !want_rc[i].at.empty();
                const auto alone = single.script(rq[i], t);
                REQUIRE(harness::compare(want[i], alone).empty());
                REQUIRE(alone.taken.at == want_rc[i].at);
            }
            for (std::size_t i = 0; i < m; ++i) {
                INFO("trace " << trace << " round " << round << " request " << i << " of " << m);
                REQUIRE(h.snapshot(rq[i]) == single.snapshot(rq[i]));
            }
            // Some admissions are taken back, in part or whole (the next batches read what that left).
            for (std::size_t i = 0; i < m; ++i)
                if (!want_rc[i].at.empty() && pick(1, 100) <= 40) {
                    const auto amount = pick(1, rq[i].cost);
                    h.take_back(rq[i], want_rc[i], amount, t);
                    single.take_back(rq[i], want_rc[i], amount, t);
                }
            // Most requests holding a slot end soon after (the rest keep it until it lapses).
            for (std::size_t i = 0; i < m; ++i)
                if (rq[i].lease != 0 && want[i].allowed && pick(1, 100) <= 80) {
                    h.change_lease(rq[i], limit::lease_change::release, t);
                    single.change_lease(rq[i], limit::lease_change::release, t);
                }
            requests += m;
            ++batches;
        }
    }
    std::printf(
        "test_redis_script (batch): %zu requests in %zu batches, %zu denials, %zu sent as \"=\" and %zu as \"~\"; "
        "loose traces: %zu of %zu admitted; %zu receipts, %zu taken back\n",
        requests, batches, denials, repeats, relayouts, loose_admitted, loose_requests, receipts, h.take_backs);
    CHECK(h.take_backs > requests / 20);
    CHECK(denials > requests / 10);
    CHECK(loose_admitted > loose_requests / 2);
    CHECK(repeats > requests / 20);  // a request like the one before it is sent as "="
    CHECK(repeats < requests / 2);
    CHECK(relayouts > requests / 40);  // another client under the policy before it: "~"
    CHECK(relayouts < requests / 2);
    CHECK(denials < requests * 9 / 10);

    // The script refuses a batch laid out wrong as a whole, before the first request writes:
    // every request gets the error, and nothing is written.
    const std::vector<limit::tier> good{make_tier(algorithm::fixed, 5, 1'000, 0, 0, "malformed")};
    const std::vector<limit::store_key> first{{sluice::identity::kind::ip, digest_of(7), good}},
        second{{sluice::identity::kind::ip, digest_of(8), good}};
    const limit::check_request one{first, 1, false, 0}, other{second, 2, false, 0};  // (another cost: in full)
    const std::vector<const limit::check_request*> two{&one, &other};
    std::vector<std::string> bad;
    rs::build_batch(bad, h.sha, h.prefix, two, future_t0());
    bad[bad.size() - 11] = "x";  // the second request's tier: an unknown algorithm
    auto reply = srv.cmd(bad);
    std::vector<limit::check_result> got;
    rs::parse_batch_reply(reply.get(), two, got);
    REQUIRE(got.size() == 2);
    for (const auto& g : got) {
        CHECK(g.state == limit::check_result::status::error);
        CHECK(g.error.find("bad algorithm") != std::string::npos);
    }
    CHECK(srv.cmd({"EXISTS", rs::key_name(h.prefix, first[0])})->integer == 0);

    // So is a repeat ("=") with no request before it, or one whose request's keys are missing.
    for (const char* form : {"=", "~"}) {
        CAPTURE(form);
        auto repeat_first = srv.cmd({"EVALSHA", h.sha, "0", std::to_string(future_t0()), "batch", "1", form});
        REQUIRE(repeat_first->type == REDIS_REPLY_ERROR);
        CHECK(str(repeat_first.get()).find("a repeat with no request before it") != std::string::npos);
    }
    // A batch of `requests`, the last sent as `last_form`, with its last key taken out.
    const auto without_last_key = [&](const std::vector<const limit::check_request*>& requests, const char* last_form) {
        std::vector<std::string> argv;
        rs::build_batch(argv, h.sha, h.prefix, requests, future_t0());
        REQUIRE(argv.back() == last_form);
        const auto numkeys = std::stoul(argv[2]);
        REQUIRE(numkeys >= 1);
        argv.erase(argv.begin() + static_cast<std::ptrdiff_t>(2 + numkeys));
        argv[2] = std::to_string(numkeys - 1);
        return srv.cmd(argv);
    };
    const limit::check_request next_client{second, 1, false, 0};  // laid out as `one`: "~"
    // "=" brings no key: taking `one`'s leaves the repeat with none to reread.
    for (const auto& [requests, form] :
         {std::pair{std::vector<const limit::check_request*>{&one, &one}, "="},
          std::pair{std::vector<const limit::check_request*>{&one, &next_client}, "~"}}) {
        CAPTURE(form);
        auto missing = without_last_key(requests, form);
        REQUIRE(missing->type == REDIS_REPLY_ERROR);
        CHECK(str(missing.get()).find("argument count mismatch") != std::string::npos);
    }
    CHECK(srv.cmd({"EXISTS", rs::key_name(h.prefix, first[0])})->integer == 0);

    // Two clients, a burst of two each: each HASH is read once and written once.
    const std::vector<const limit::check_request*> bursts{&one, &one, &next_client, &next_client};
    std::vector<std::string> compact;
    rs::build_batch(compact, h.sha, h.prefix, bursts, future_t0());
    CHECK(std::count(compact.begin(), compact.end(), "=") == 2);
    CHECK(std::count(compact.begin(), compact.end(), "~") == 1);
    REQUIRE(srv.cmd({"CONFIG", "RESETSTAT"})->type == REDIS_REPLY_STATUS);
    auto four = srv.cmd(compact);
    std::vector<limit::check_result> results;
    rs::parse_batch_reply(four.get(), bursts, results);
    REQUIRE(results.size() == 4);
    for (std::size_t i = 0; i < 4; ++i) {
        CAPTURE(i);
        REQUIRE(results[i].state == limit::check_result::status::ok);
        CHECK(results[i].verdict.allowed);
        REQUIRE(results[i].verdict.tiers.size() == 1);
        CHECK(results[i].verdict.tiers[0].remaining == (i % 2 == 0 ? 4 : 3));
    }
    const std::string stats = str(srv.cmd({"INFO", "commandstats"}).get());
    CHECK(stats.find("cmdstat_hmget:calls=2,") != std::string::npos);
    CHECK(stats.find("cmdstat_hset:calls=2,") != std::string::npos);
}

namespace {

// A fixed tier over calendar months (per_ms 0) or `per_ms` windows, shifted by `offset_ms`.
limit::tier calendar_tier(std::int64_t limit, std::int64_t per_ms, std::int64_t offset_ms, const std::string& id) {
    config::tier_config c;
    c.kind = "ip";
    c.limit = limit;
    c.algo = algorithm::fixed;
    c.month = per_ms == 0;
    c.per = config::duration{c.month ? 31 * 24 * 3'600'000LL : per_ms};
    c.precision = c.per;
    c.window_offset = config::duration{offset_ms};
    return limit::tier::from(c, id, id);
}

}  // namespace

TEST_CASE("redis_script: calendar months and offset windows match decide() across month and day edges") {
    redis_server srv;
    harness h{srv, load_script(srv)};
    const auto seed = test_seed();
    INFO("seed " << seed);
    std::mt19937_64 rng(seed);
    auto pick = [&](std::int64_t lo, std::int64_t hi) {
        return std::uniform_int_distribution<std::int64_t>(lo, hi)(rng);
    };
    const std::vector<limit::tier> month_tiers{calendar_tier(5, 0, 0, "p/ip/fixed/month/month"),
                                               calendar_tier(4, 0, -5 * 3'600'000, "p/ip/fixed/month/month/-5h")};
    const std::vector<limit::tier> day_tiers{calendar_tier(3, 24 * 3'600'000, -5 * 3'600'000, "p/ip/fixed/24h/24h/-5h"),
                                             calendar_tier(2, 3'600'000, 30 * 60'000, "p/ip/fixed/1h/1h/+30m"),
                                             calendar_tier(6, 0, 14 * 3'600'000, "p/ip/fixed/month/month/+14h")};
    // From a month ahead of the clock, through some 30 months: every month length, a leap
    // February, and each edge hit exactly, 1 µs before and 1 µs after.
    usec t = limit::month_start(limit::month_of(future_t0()) + 1) - 3 * HOUR;
    usec retry_at = 0;
    std::vector<limit::store_key> keys;
    constexpr usec DAY = 24 * HOUR;
    for (int n = 0; n < 800; ++n) {
        keys.clear();
        const auto who = digest_of(static_cast<unsigned>(pick(0, 1)));
        if (pick(0, 2) > 0) keys.push_back({sluice::identity::kind::ip, who, month_tiers});
        if (keys.empty() || pick(0, 1)) keys.push_back({sluice::identity::kind::user, who, day_tiers});
        const auto r = pick(1, 100);
        usec now = t;
        if (r <= 25 && retry_at > t) {
            now = retry_at - pick(0, 1);
        } else if (r <= 29) {
            // The next month's edge in one of the tiers' zones (offsets 0, -5h, +14h).
            const usec shift = pick(0, 2) == 0 ? 0 : pick(0, 1) ? -5 * HOUR : 14 * HOUR;
            now = limit::month_start(limit::month_of(t + shift) + 1) - shift + pick(-1, 1);
        } else if (r <= 45) {
            now = ((t - 5 * HOUR) / DAY + 1) * DAY + 5 * HOUR + pick(-1, 1);  // the next day at 00:00 UTC-5
        } else if (r <= 60) {
            now = t + pick(0, 30) * HOUR / 2 + pick(-1, 1);
        } else {
            now = t + pick(0, 20 * 60) * SEC;
        }
        t = std::max(t, now);
        const limit::check_request req{keys, pick(1, 2)};
        auto d = h.step(req, now);
        retry_at = d.allowed ? 0 : now + d.retry_after;
    }
    CHECK(h.denials > h.requests / 10);
    CHECK(limit::month_of(t) - limit::month_of(future_t0()) > 12);
}

TEST_CASE("redis_script: on a cluster node, one call per identifier and its exact take-back match decide()") {
    redis_server srv(true);
    const auto h = run_mixes(srv, "test_redis_script (cluster)",
                             {every_algorithm, min_interval_heavy, penalty, concurrency, concurrency_penalty}, 6, true);
    CHECK(h.undos > 0);  // denials by one identifier after the other admitted happened, and were taken back
    CHECK(h.take_backs > h.requests / 20);
}

TEST_CASE(
    "redis_script: redis_store on a Cluster - a split check's receipt per identifier, and take_back takes "
    "each back") {
    redis_server srv(true);
    boost::asio::io_context ioc;
    config::store_config cfg;
    cfg.type = config::store_config::kind::redis_cluster;
    cfg.redis_nodes = {{"127.0.0.1", static_cast<std::uint16_t>(srv.port())}};
    cfg.redis_timeout = std::chrono::milliseconds(500);
    store::redis_store st(cfg);
    std::vector<limit::tier> ip{make_tier(algorithm::log, 3, 3'600'000, 0)},
        user{make_tier(algorithm::log, 5, 3'600'000, 0, 0, "p", "user")};
    std::vector<limit::store_key> keys{{sluice::identity::kind::ip, digest_of(31), ip},
                                       {sluice::identity::kind::user, digest_of(32), user}};
    limit::check_request req{keys, 2};
    req.want_receipt = true;
    const limit::check_request one{keys, 1};
    st.start(ioc.get_executor());
    std::exception_ptr failure;
    bool finished = false;
    boost::asio::co_spawn(
        ioc,
        [&]() -> boost::asio::awaitable<void> {
            boost::asio::steady_timer wait(ioc);
            for (int i = 0; i < 500 && !st.ready(); ++i) {
                wait.expires_after(std::chrono::milliseconds(10));
                co_await wait.async_wait(boost::asio::use_awaitable);
            }
            REQUIRE(st.ready());
            auto first = co_await st.check(req);  // one call per identifier: the Cluster's split
            REQUIRE(first.state == limit::check_result::status::ok);
            REQUIRE(first.verdict.allowed);
            REQUIRE(first.taken.at.size() == 2);
            auto second = co_await st.check(one);
            REQUIRE(second.verdict.allowed);
            const bool done = co_await st.take_back(req, first.taken, 2);
            CHECK(done);
            auto third = co_await st.check(one);
            REQUIRE(third.verdict.allowed);
            CHECK(third.verdict.tiers.at(0).remaining == 1);  // 3 - the second's - this one's
            CHECK(third.verdict.tiers.at(1).remaining == 3);
            // A denial by the address takes back what the user's node committed.
            auto denied = co_await st.check(req);
            REQUIRE(denied.state == limit::check_result::status::ok);
            CHECK_FALSE(denied.verdict.allowed);
            CHECK(denied.taken.at.empty());
            CHECK(st.counters().undos.get() == 1);
            CHECK(srv.cmd({"ZCARD", rs::log_key_name("sluice:", keys[1], user[0])})->integer == 2);
            st.stop();
        },
        [&](std::exception_ptr e) {
            failure = std::move(e);
            finished = true;
        });
    ioc.run_for(std::chrono::seconds(30));
    REQUIRE(finished);
    if (failure) std::rethrow_exception(failure);
}

TEST_CASE("redis_script: the clock never goes back before the key's last time") {
    redis_server srv;
    harness h{srv, load_script(srv)};
    const usec t0 = future_t0();
    std::vector<limit::tier> tiers{make_tier(algorithm::fixed, 2, 1000, 0)};
    std::vector<limit::store_key> keys{{sluice::identity::kind::ip, digest_of(7), tiers}};
    limit::check_request r{keys, 1};
    const auto hash = rs::key_name(h.prefix, keys[0]);

    auto d = h.step(r, t0 + 999 * MS);
    CHECK(d.allowed);
    CHECK(d.tiers[0].remaining == 1);
    CHECK(d.tiers[0].reset == 1 * MS);
    // 900 ms earlier: decided at t0 + 999 ms, still in the first bucket.
    d = h.step(r, t0 + 99 * MS);
    CHECK(d.allowed);
    CHECK(d.tiers[0].remaining == 0);
    CHECK(d.tiers[0].reset == 901 * MS);  // from the caller's clock
    CHECK(str(srv.cmd({"HGET", hash, "@t"}).get()) == std::to_string(t0 + 999 * MS));
    // Decided at t0 + 999 ms; retry_after counts from the caller's clock.
    d = h.step(r, t0 + 500 * MS);
    CHECK_FALSE(d.allowed);
    CHECK(d.retry_after == 500 * MS);
    CHECK(d.tiers[0].reset == 500 * MS);

    // In production the script reads TIME, a day behind the key's last time: clamped too.
    auto got = h.script(r, std::nullopt);
    REQUIRE(got.state == limit::check_result::status::ok);
    CHECK_FALSE(got.verdict.allowed);
    CHECK(got.verdict.retry_after > 20 * HOUR);
    CHECK(got.verdict.retry_after <= 25 * HOUR);
    CHECK(got.verdict.tiers[0].reset == got.verdict.retry_after);

    // At t0 + 1 s the next bucket opens.
    d = h.step(r, t0 + 1000 * MS);
    CHECK(d.allowed);
    // The TTL covers the distance from the clock to the key's time (a day) plus the window.
    auto pttl = srv.cmd({"PTTL", hash});
    REQUIRE(pttl->type == REDIS_REPLY_INTEGER);
    CHECK(pttl->integer > 1000 * 3600);
}

TEST_CASE("redis_script: production clock, denials write nothing, TTLs only grow") {
    redis_server srv;
    harness h{srv, load_script(srv)};
    std::vector<limit::tier> tiers{make_tier(algorithm::sliding, 3, 60'000, 6'000),
                                   make_tier(algorithm::log, 3, 30'000, 0)};
    std::vector<limit::tier> short_tiers{make_tier(algorithm::fixed, 100, 1'000, 0, 0, "q")};
    std::vector<limit::store_key> keys{{sluice::identity::kind::ip, digest_of(3), tiers}};
    std::vector<limit::store_key> short_keys{{sluice::identity::kind::ip, digest_of(3), short_tiers}};
    limit::check_request r{keys, 1};
    limit::check_request short_r{short_keys, 1};
    const auto hash = rs::key_name(h.prefix, keys[0]);
    const auto zset = rs::log_key_name(h.prefix, keys[0], tiers[1]);

    for (int i = 0; i < 3; ++i) {
        auto got = h.script(r, std::nullopt);
        REQUIRE(got.state == limit::check_result::status::ok);
        CHECK(got.verdict.allowed);
        CHECK(got.verdict.tiers[0].remaining == 2 - i);
        CHECK(got.verdict.tiers[0].reset > 0);
        CHECK(got.verdict.tiers[0].reset <= 60 * SEC);
        CHECK(got.verdict.tiers[1].remaining == 2 - i);
    }
    auto pttl = srv.cmd({"PTTL", hash})->integer;
    CHECK(pttl > 55'000);
    // The window, at most horizon / 8 of slack, and the absolute expiry rounded up to the ms.
    CHECK(pttl <= 60'000 + 60'000 / 8 + 1);
    CHECK(srv.cmd({"PTTL", zset})->integer > 25'000);
    CHECK(srv.cmd({"ZCARD", zset})->integer == 3);

    const std::string before = h.snapshot(r);
    auto got = h.script(r, std::nullopt);
    REQUIRE(got.state == limit::check_result::status::ok);
    CHECK_FALSE(got.verdict.allowed);
    CHECK(got.verdict.retry_after > 0);
    CHECK(h.snapshot(r) == before);

    // A tier with a shorter horizon on the same key does not shorten its TTL.
    const auto exp_before = srv.cmd({"PEXPIRETIME", hash})->integer;
    got = h.script(short_r, std::nullopt);
    REQUIRE(got.state == limit::check_result::status::ok);
    CHECK(got.verdict.allowed);
    CHECK(srv.cmd({"PEXPIRETIME", hash})->integer == exp_before);
    CHECK(srv.cmd({"HLEN", hash})->integer == 5);  // @t, @e and three tiers
    CHECK(str(srv.cmd({"HGET", hash, "@e"}).get()) == std::to_string(exp_before));
}

TEST_CASE("redis_script: a take-back is exact whatever ran since, as decide()'s") {
    redis_server srv;
    harness h{srv, load_script(srv)};
    std::vector<limit::tier> tiers{
        make_tier(algorithm::sliding, 6, 60'000, 6'000), make_tier(algorithm::fixed, 9, 10'000, 0, 0, "f"),
        make_tier(algorithm::gcra, 5, 1'000, 3, 0, "g"), make_tier(algorithm::log, 6, 30'000, 0, 200, "l")};
    std::vector<limit::store_key> keys{{sluice::identity::kind::user, digest_of(21), tiers}};
    limit::check_request r{keys, 1};
    r.want_receipt = true;
    const usec t0 = future_t0();
    const auto hash = rs::key_name(h.prefix, keys[0]);
    const auto log_key = rs::log_key_name(h.prefix, keys[0], tiers[3]);
    const auto ms = [&](usec m) { return std::to_string(t0 + m * MS); };

    REQUIRE(h.step(r, t0).allowed);
    const limit::receipt a = h.taken;
    CHECK(a.at == std::vector<usec>{t0});
    limit::check_request two = r;
    two.cost = 2;
    REQUIRE(h.step(two, t0 + 300 * MS).allowed);
    const limit::receipt b = h.taken;
    // The first taken back after the second: the second's charge stays, in every tier.
    h.take_back(r, a, 1, t0 + 400 * MS);
    CHECK(str(srv.cmd({"ZRANGE", log_key, "0", "-1"}).get()) == "[" + ms(300) + ":1," + ms(300) + ":2]");
    REQUIRE(h.step(r, t0 + 600 * MS).allowed);  // decided as decide() does on what is left
    const limit::receipt c = h.taken;

    // min_interval (the log tier's 200 ms): a mark taken back whole is void; a commit that
    // passes by it marks again.
    CHECK_FALSE(h.step(r, t0 + 700 * MS).allowed);
    h.take_back(r, c, 1, t0 + 700 * MS);
    CHECK(str(srv.cmd({"HGET", hash, tiers[3].id + "|m"}).get()) == ms(600));
    REQUIRE(h.step(r, t0 + 700 * MS).allowed);
    CHECK(str(srv.cmd({"HGET", hash, tiers[3].id + "|m"}).get()).empty());
    CHECK_FALSE(h.step(r, t0 + 800 * MS).allowed);
    // In part: the admission stands, its mark too.
    h.take_back(two, b, 1, t0 + 800 * MS);
    CHECK_FALSE(h.step(r, t0 + 850 * MS).allowed);
    REQUIRE(h.step(r, t0 + 900 * MS).allowed);

    // Entries at one instant: a take-back removes as many, the numbers stay gapless, and a
    // later commit at that instant numbers on from them.
    std::vector<limit::tier> plain{make_tier(algorithm::log, 9, 30'000, 0, 0, "plain")};
    std::vector<limit::store_key> pkeys{{sluice::identity::kind::ip, digest_of(22), plain}};
    limit::check_request p{pkeys, 2};
    p.want_receipt = true;
    const auto plain_log = rs::log_key_name(h.prefix, pkeys[0], plain[0]);
    REQUIRE(h.step(p, t0).allowed);
    const limit::receipt x = h.taken;
    REQUIRE(h.step(p, t0).allowed);
    h.take_back(p, x, 2, t0 + MS);
    CHECK(str(srv.cmd({"ZRANGE", plain_log, "0", "-1"}).get()) == "[" + ms(0) + ":1," + ms(0) + ":2]");
    p.cost = 3;
    REQUIRE(h.step(p, t0 - MS).allowed);  // clamped to the key's clock: t0
    CHECK(srv.cmd({"ZCARD", plain_log})->integer == 5);
    CHECK(str(srv.cmd({"ZRANGE", plain_log, "-1", "-1"}).get()) == "[" + ms(0) + ":5]");

    // A denial carries no receipt; a key gone has nothing to give back.
    p.cost = 9;
    CHECK_FALSE(h.step(p, t0 + MS).allowed);
    CHECK(h.taken.at.empty());
    REQUIRE(str(srv.cmd({"FLUSHALL"}).get()) == "OK");
    h.states.clear();
    h.take_back(r, a, 1, t0 + SEC);
    CHECK(srv.cmd({"DBSIZE"})->integer == 0);
}

TEST_CASE("redis_script: a bucket tier's older buckets have their own field, written when they change") {
    redis_server srv;
    harness h{srv, load_script(srv)};
    std::vector<limit::tier> tiers{make_tier(algorithm::sliding, 100, 60'000, 6'000)};
    std::vector<limit::store_key> keys{{sluice::identity::kind::user, digest_of(22), tiers}};
    limit::check_request r{keys, 1};
    r.want_receipt = true;
    const auto hash = rs::key_name(h.prefix, keys[0]);
    const auto head = [&] { return str(srv.cmd({"HGET", hash, tiers[0].id}).get()); };
    const auto older = [&] { return str(srv.cmd({"HGET", hash, tiers[0].id + "|o"}).get()); };
    const usec t0 = (future_t0() / (6 * SEC)) * 6 * SEC;  // a 6 s bucket's start
    const usec b0 = t0 / (6 * SEC);
    const auto at = [&](usec s) { return std::to_string(t0 + s * SEC); };
    const auto bucket = [&](usec i) { return std::to_string(b0 + i); };

    REQUIRE(h.step(r, t0).allowed);
    const limit::receipt first = h.taken;
    CHECK(head() == at(0) + ";|1|");  // no older bucket
    for (int i = 1; i < 3; ++i) REQUIRE(h.step(r, t0 + i * 6 * SEC).allowed);
    CHECK(head() == at(12) + ";3|1/" + bucket(0));
    CHECK(older() == bucket(0) + ":1," + bucket(1) + ":1,");
    // In the newest bucket: the head alone changes.
    REQUIRE(h.step(r, t0 + 13 * SEC).allowed);
    const limit::receipt in_2 = h.taken;
    CHECK(head() == at(13) + ";4|2/" + bucket(0));
    CHECK(older() == bucket(0) + ":1," + bucket(1) + ":1,");

    // A commit into a new bucket, then taken back: its bucket stays as count 0 (no bucket),
    // the older ones as they are.
    REQUIRE(h.step(r, t0 + 20 * SEC).allowed);
    const limit::receipt in_3 = h.taken;
    CHECK(head() == at(20) + ";5|1/" + bucket(0));
    CHECK(older() == bucket(0) + ":1," + bucket(1) + ":1," + bucket(2) + ":2,");
    h.take_back(r, in_3, 1, t0 + 20 * SEC);
    CHECK(head() == at(20) + ";4|0/" + bucket(0));
    // An older bucket: its count in the list; emptied, it leaves the list (and the head's
    // first follows).
    h.take_back(r, in_2, 1, t0 + 21 * SEC);
    CHECK(head() == at(20) + ";3|0/" + bucket(0));
    CHECK(older() == bucket(0) + ":1," + bucket(1) + ":1," + bucket(2) + ":1,");
    h.take_back(r, first, 1, t0 + 21 * SEC);
    CHECK(head() == at(20) + ";2|0/" + bucket(1));
    CHECK(older() == bucket(1) + ":1," + bucket(2) + ":1,");
    REQUIRE(h.step(r, t0 + 21 * SEC).allowed);
    CHECK(head() == at(21) + ";3|1/" + bucket(1));
    // The windows move on as decide()'s (h.step compares every reply).
    for (const usec s : {55, 61, 67, 73, 80}) REQUIRE(h.step(r, t0 + s * SEC).allowed);
    CHECK(h.step(r, t0 + 140 * SEC).tiers.at(0).remaining == 99);
}

TEST_CASE("redis_script: NOSCRIPT after SCRIPT FLUSH, then reload") {
    redis_server srv;
    const auto sha = load_script(srv);
    std::vector<limit::tier> tiers{make_tier(algorithm::gcra, 5, 1000, 5)};
    std::vector<limit::store_key> keys{{sluice::identity::kind::user, digest_of(9), tiers}};
    limit::check_request r{keys, 1};
    std::vector<std::string> argv;
    rs::build_call(argv, sha, "n:", r);

    auto ok = srv.cmd(argv);
    CHECK_FALSE(sluice::store::is_noscript_reply(ok.get()));
    CHECK(rs::parse_reply(ok.get(), r).state == limit::check_result::status::ok);

    REQUIRE(str(srv.cmd({"SCRIPT", "FLUSH"}).get()) == "OK");
    auto gone = srv.cmd(argv);
    CHECK(sluice::store::is_noscript_reply(gone.get()));
    CHECK(rs::parse_reply(gone.get(), r).state == limit::check_result::status::error);

    CHECK(load_script(srv) == sha);
    auto again = srv.cmd(argv);
    auto res = rs::parse_reply(again.get(), r);
    REQUIRE(res.state == limit::check_result::status::ok);
    CHECK(res.verdict.allowed);
    CHECK(res.verdict.tiers[0].remaining == 3);
}

TEST_CASE("redis_script: bad arguments are an error reply, not a crash") {
    redis_server srv;
    const auto sha = load_script(srv);
    std::vector<limit::tier> tiers{make_tier(algorithm::log, 5, 1000, 0)};
    std::vector<limit::store_key> keys{{sluice::identity::kind::ip, digest_of(1), tiers}};
    limit::check_request r{keys, 1};
    std::vector<std::string> argv;
    rs::build_call(argv, sha, "b:", r);
    argv.pop_back();  // drop the tier id
    auto res = rs::parse_reply(srv.cmd(argv).get(), r);
    CHECK(res.state == limit::check_result::status::error);
    CHECK(res.error.find("sluice") != std::string::npos);

    // A take-back laid out wrong writes nothing.
    REQUIRE(rs::parse_reply(srv.cmd([&] {
                                   std::vector<std::string> a;
                                   rs::build_call(a, sha, "b:", r);
                                   return a;
                               }())
                                .get(),
                            r)
                .verdict.allowed);
    const auto zset = rs::log_key_name("b:", keys[0], tiers[0]);
    limit::receipt rc;
    rc.at = {0};
    // (index, value): the amount 0, the receipt's instant, the algorithm; and no tier id
    const std::vector<std::pair<std::size_t, std::string>> breaks{{7, "0"}, {10, "x"}, {12, "q"}, {0, ""}};
    for (const auto& [index, value] : breaks) {
        CAPTURE(index);
        std::vector<std::string> undo;
        rs::build_take_back(undo, sha, "b:", r, rc, 1);
        if (index == 0)
            undo.pop_back();
        else
            undo[index] = value;
        auto reply = srv.cmd(undo);
        CHECK(reply->type == REDIS_REPLY_ERROR);
        CHECK(str(reply.get()).find("sluice") != std::string::npos);
        CHECK(srv.cmd({"ZCARD", zset})->integer == 1);
    }
}
