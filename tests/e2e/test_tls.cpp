// server.tls through the real binary, with real clients: curl, openssl s_client, Python's
// ssl module, HAProxy in TCP mode, and a small blocking OpenSSL client of our own (for what
// the others cannot do on demand: keep a connection open across a reload, renegotiate).
// The certificates come from tests/support/make_tls_files.sh, made once per run.
#include "e2e.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <sys/socket.h>
#include <unistd.h>
#include <boost/beast/http.hpp>

#include <array>
#include <csignal>
#include <filesystem>

using namespace sluice::test;
using namespace std::string_literals;
using namespace std::chrono;

namespace {

// The certificates and keys (see make_tls_files.sh), made once for the whole run.
struct pki_files {
    pki_files() : dir(make_temp_dir()) {
        process p({"sh", std::string(SLUICE_TEST_DIR) + "/support/make_tls_files.sh", dir});
        const auto status = p.wait_exit(60s);
        if (status != 0) throw std::runtime_error("make_tls_files.sh failed:\n" + p.output());
    }
    ~pki_files() {
        if (!std::getenv("SLUICE_TEST_KEEP_TMP")) std::filesystem::remove_all(dir);
    }
    std::string dir;
};

std::string pki(const std::string& name) {
    static pki_files files;
    return files.dir + "/" + name;
}

std::string cert_entry(const std::string& cert, const std::string& key = pki("server.key")) {
    return "{ cert_file: \"" + cert + "\", key_file: \"" + key + "\" }";
}

// server.tls in flow style: a.test (the default), b.test, *.w.test and cn-only.test, then `more`.
std::string tls_section(const std::string& more = "",
                        const std::string& certificates = cert_entry(pki("a.pem")) + ", " + cert_entry(pki("b.pem")) +
                                                          ", " + cert_entry(pki("wild.pem")) + ", " +
                                                          cert_entry(pki("cn-only.pem"))) {
    return "{ listen: \"127.0.0.1:0\", certificates: [ " + certificates + " ]" + (more.empty() ? "" : ", " + more) +
           " }";
}

// /limited: 2 a minute per user and per client address; the rest is free. An exact log, not
// a fixed window: a test's requests that straddle a minute of the clock must not start afresh.
const std::string limits_yaml = R"(
policies:
  per_user:
    user: [ {limit: 2, per: 1m, algorithm: log} ]
  per_ip:
    ip: [ {limit: 2, per: 1m, algorithm: log} ]
routes:
  - { match: { path_prefix: /limited }, policy: per_user }
  - { match: { path_prefix: /iplimited }, policy: per_ip }
  - { match: { path_prefix: / }, policy: none }
)";

struct tls_fixture {
    explicit tls_fixture(const std::string& tls_more = "", yaml_overrides overrides = {},
                         const std::string& extra = limits_yaml) {
        up = start_upstream();
        overrides.insert(overrides.begin(), {"server.tls", tls_section(tls_more)});
        gw = start_gateway(gateway_yaml(up->port, overrides, extra));
        REQUIRE(gw->tls_port != 0);
    }
    std::unique_ptr<upstream_server> up;
    std::unique_ptr<gateway> gw;
    std::string metrics() const { return fetch(gw->admin_port, "GET", "/metrics").body; }
};

// ---- Running the real clients

struct ran {
    int status = -1;  // exit status, -1 if it had to be killed
    std::string out;  // stdout and stderr
};

ran run(std::vector<std::string> argv, milliseconds limit = 20s) {
    process p(std::move(argv));
    const auto status = p.wait_exit(limit);
    return {status ? *status : -1, p.output()};
}

// curl against the gateway's TLS port, with a.test, b.test and x.w.test resolved to loopback.
ran curl(std::uint16_t port, std::vector<std::string> args) {
    const auto p = std::to_string(port);
    std::vector<std::string> argv{"curl",       "-sS",
                                  "--max-time", "10",
                                  "--cacert",   pki("ca.pem"),
                                  "--resolve",  "a.test:" + p + ":127.0.0.1",
                                  "--resolve",  "b.test:" + p + ":127.0.0.1"};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(std::move(argv));
}

std::string url(std::uint16_t port, const std::string& path, const std::string& host = "a.test") {
    return "https://" + host + ":" + std::to_string(port) + path;
}

// The status curl got for one request ("-w %{http_code}"; 0 when there was no answer).
int curl_status(std::uint16_t port, const std::string& path, std::vector<std::string> args = {}) {
    args.insert(args.end(), {"-o", "/dev/null", "-w", "status=%{http_code}\\n", url(port, path)});
    const auto r = curl(port, std::move(args));
    std::smatch m;
    if (!std::regex_search(r.out, m, std::regex("status=(\\d+)"))) return -1;
    return std::stoi(m[1]);
}

// openssl s_client to the TLS port with stdin at its end: it handshakes, prints, and leaves.
ran s_client(std::uint16_t port, std::vector<std::string> args) {
    std::vector<std::string> argv{"openssl", "s_client",   "-connect", "127.0.0.1:" + std::to_string(port),
                                  "-CAfile", pki("ca.pem")};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(std::move(argv));
}

// The subject line s_client prints for the server's certificate ("" if it got none).
std::string subject_served(std::uint16_t port, std::vector<std::string> args) {
    const auto r = s_client(port, std::move(args));
    std::smatch m;
    if (!std::regex_search(r.out, m, std::regex("\nsubject=([^\n]*)"))) return "";
    return m[1];
}

ran python(const std::string& script, std::vector<std::string> args) {
    std::vector<std::string> argv{"python3", "-c", script};
    argv.insert(argv.end(), args.begin(), args.end());
    return run(std::move(argv));
}

// Connections in a row with Python's ssl at one TLS version, the first one's session offered
// by every later one; prints "STATUS reused|full" per connection.
const std::string resumption_py = R"(
import socket, ssl, sys
port, ca, version, count = int(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
ctx = ssl.create_default_context(cafile=ca)
ctx.minimum_version = ctx.maximum_version = getattr(ssl.TLSVersion, version)
session = None
for i in range(count):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="a.test", session=session) as s:
            s.sendall(b"GET /echo HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ssl.SSLEOFError:
                    break
                if not chunk:
                    break
                data += chunk
            print(data.split(b" ", 2)[1].decode(), "reused" if s.session_reused else "full")
            if session is None:
                session = s.session
)";

// A PROXY header (v1 or v2) for source address SRC, then TLS over the same socket and one
// request for PATH; prints "STATUS X-FORWARDED-FOR-SEEN".
const std::string proxy_tls_py = R"(
import json, socket, ssl, struct, sys
port, ca, kind, src, path = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
if kind == "v1":
    header = ("PROXY TCP4 %s 127.0.0.1 40000 443\r\n" % src).encode()
else:
    header = b"\r\n\r\n\x00\r\nQUIT\n" + bytes([0x21, 0x11]) + struct.pack("!H", 12) + socket.inet_aton(src) \
        + socket.inet_aton("127.0.0.1") + struct.pack("!HH", 40000, 443)
ctx = ssl.create_default_context(cafile=ca)
with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
    raw.sendall(header)
    with ctx.wrap_socket(raw, server_hostname="a.test") as s:
        s.sendall(("GET %s HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n" % path).encode())
        data = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ssl.SSLEOFError:
                break
            if not chunk:
                break
            data += chunk
head, _, body = data.partition(b"\r\n\r\n")
status = head.split(b" ", 2)[1].decode()
seen = "-"
if status == "200":
    for name, value in json.loads(body)["headers"]:
        if name.lower() == "x-forwarded-for":
            seen = value
print(status, seen)
)";

// ---- A blocking OpenSSL client of our own

std::string openssl_errors() {
    std::string out;
    while (const unsigned long e = ERR_get_error()) {
        char buf[256];
        ERR_error_string_n(e, buf, sizeof buf);
        out += buf;
        out += "; ";
    }
    return out.empty() ? "(no OpenSSL error; errno " + std::to_string(errno) + ")" : out;
}

struct tls_options {
    std::string sni = "a.test";  // "" = none
    int max_version = 0;         // TLS1_2_VERSION... (0 = any)
    std::string cert, key;       // a client certificate
};

// TLS 1.2 at most, with a client certificate if given.
tls_options tls12(const std::string& cert = "", const std::string& key = "") {
    tls_options o;
    o.max_version = TLS1_2_VERSION;
    o.cert = cert;
    o.key = key;
    return o;
}

tls_options with_cert(const std::string& cert, const std::string& key) {
    tls_options o;
    o.cert = cert;
    o.key = key;
    return o;
}

// Connects and handshakes at construction (ok() says whether it worked); each wait is
// bounded by 10 s socket timeouts.
class tls_client {
public:
    explicit tls_client(std::uint16_t port, const tls_options& o = {}) {
        ctx_ = SSL_CTX_new(TLS_client_method());
        SSL_CTX_load_verify_locations(ctx_, pki("ca.pem").c_str(), nullptr);
        SSL_CTX_set_verify(ctx_, SSL_VERIFY_PEER, nullptr);
        if (o.max_version) SSL_CTX_set_max_proto_version(ctx_, o.max_version);
        if (!o.cert.empty()) {
            SSL_CTX_use_certificate_file(ctx_, o.cert.c_str(), SSL_FILETYPE_PEM);
            SSL_CTX_use_PrivateKey_file(ctx_, o.key.c_str(), SSL_FILETYPE_PEM);
        }
        fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
        timeval tv{10, 0};
        ::setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        ::setsockopt(fd_, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_port = htons(port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        if (::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
            error = "connect: " + std::string(std::strerror(errno));
            return;
        }
        ssl_ = SSL_new(ctx_);
        SSL_set_fd(ssl_, fd_);
        if (!o.sni.empty()) SSL_set_tlsext_host_name(ssl_, o.sni.c_str());
        ERR_clear_error();
        if (SSL_connect(ssl_) != 1) {
            error = "handshake: " + openssl_errors();
            return;
        }
        ok_ = true;
    }
    ~tls_client() {
        if (ssl_) SSL_free(ssl_);
        if (fd_ >= 0) ::close(fd_);
        SSL_CTX_free(ctx_);
    }
    tls_client(const tls_client&) = delete;
    tls_client& operator=(const tls_client&) = delete;

    bool ok() const { return ok_; }
    std::string error;

    // The server certificate's subject, one line ("CN=a.test").
    std::string subject() const {
        X509* peer = SSL_get0_peer_certificate(ssl_);
        if (!peer) return "";
        char buf[256];
        X509_NAME_oneline(X509_get_subject_name(peer), buf, sizeof buf);
        return buf;
    }

    // One request and its response, on this connection. Throws when the connection fails.
    response request(const std::string& raw) {
        std::size_t n = 0;
        ERR_clear_error();
        if (SSL_write_ex(ssl_, raw.data(), raw.size(), &n) != 1) throw std::runtime_error("write: " + openssl_errors());
        namespace bhttp = boost::beast::http;
        bhttp::response_parser<bhttp::string_body> p;
        p.body_limit(16 * 1024 * 1024);
        while (!p.is_done()) {
            char buf[16384];
            if (in_.empty()) {
                if (SSL_read_ex(ssl_, buf, sizeof buf, &n) != 1) throw std::runtime_error("read: " + openssl_errors());
                in_.append(buf, n);
            }
            boost::beast::error_code ec;
            const auto used = p.put(boost::asio::buffer(in_), ec);
            in_.erase(0, used);
            if (ec == bhttp::error::need_more) {
                if (SSL_read_ex(ssl_, buf, sizeof buf, &n) != 1) throw std::runtime_error("read: " + openssl_errors());
                in_.append(buf, n);
                continue;
            }
            if (ec) throw std::runtime_error("parse: " + ec.message());
        }
        response r;
        r.status = static_cast<int>(p.get().result_int());
        r.version = static_cast<int>(p.get().version());
        for (const auto& f : p.get()) r.headers.emplace_back(std::string(f.name_string()), std::string(f.value()));
        r.body = p.get().body();
        return r;
    }

    // What the first read gets before anything is sent: "" for data, else the failure (an
    // alert the server sent). Waits up to the 10 s socket timeout for a byte.
    std::string first_read_error() {
        char buf[1];
        std::size_t n = 0;
        ERR_clear_error();
        return SSL_peek_ex(ssl_, buf, 1, &n) == 1 ? "" : openssl_errors();
    }

    // A renegotiation the client asks for: "" when it completed, else OpenSSL's reason.
    std::string renegotiate() {
        ERR_clear_error();
        if (SSL_renegotiate(ssl_) != 1) return "SSL_renegotiate: " + openssl_errors();
        if (SSL_do_handshake(ssl_) != 1) return openssl_errors();
        // The client's side is done once its ClientHello is out; the answer comes with a read.
        char buf[1];
        std::size_t n = 0;
        SSL_peek_ex(ssl_, buf, 1, &n);
        return SSL_renegotiate_pending(ssl_) ? "still pending: " + openssl_errors() : "";
    }

private:
    SSL_CTX* ctx_ = nullptr;
    SSL* ssl_ = nullptr;
    int fd_ = -1;
    bool ok_ = false;
    std::string in_;
};

// On TLS 1.3 a client's certificate is judged after the client's side of the handshake is
// done: the refusal is the alert its first read gets. That alert.
std::string request_refused(tls_client&& c) {
    if (!c.ok()) return "(no handshake: " + c.error + ")";
    // Read first: a request written after the server closed could reset the connection
    // before the alert is read.
    return c.first_read_error();
}

// ---- Metrics

double handshakes(const std::string& metrics, const std::string& result, const std::string& version) {
    return metric_value(metrics, "sluice_tls_handshakes_total{result=\"" + result + "\",version=\"" + version + "\"}");
}

double eventually_handshakes(std::uint16_t admin_port, const std::string& result, const std::string& version,
                             double expected) {
    return eventually_metric(
        admin_port, "sluice_tls_handshakes_total{result=\"" + result + "\",version=\"" + version + "\"}", expected);
}

// Seconds from now to a PEM certificate's notAfter.
long seconds_to_expiry(const std::string& pem_file) {
    FILE* f = std::fopen(pem_file.c_str(), "r");
    REQUIRE(f);
    X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
    std::fclose(f);
    REQUIRE(x);
    int days = 0, secs = 0;
    ASN1_TIME_diff(&days, &secs, nullptr, X509_get0_notAfter(x));
    X509_free(x);
    return days * 86400L + secs;
}

// Replaces `path` by a copy of `from`, atomically (a reload reads the old or the new file).
void rename_into_place(const std::string& from, const std::string& path) {
    std::filesystem::copy_file(from, path + ".new", std::filesystem::copy_options::overwrite_existing);
    std::filesystem::rename(path + ".new", path);
}

}  // namespace

// ---- 1. HTTPS requests

TEST_CASE("tls: HTTPS requests pass, kept alive, with X-Forwarded-Proto https and tls_version and sni logged") {
    tls_fixture f;
    INFO("gateway output:\n", f.gw->proc->output());
    const auto dir = f.gw->dir;
    // Three requests in one curl run: one connection, one handshake.
    const auto r = curl(f.gw->tls_port, {"-w", "status=%{http_code} connects=%{num_connects}\\n", "-o", dir + "/1",
                                         url(f.gw->tls_port, "/echo"), "-o", dir + "/2", url(f.gw->tls_port, "/echo"),
                                         "-o", dir + "/3", url(f.gw->tls_port, "/echo?3")});
    INFO("curl: ", r.out);
    REQUIRE(r.status == 0);
    CHECK(r.out == "status=200 connects=1\nstatus=200 connects=0\nstatus=200 connects=0\n");
    const auto echo = json_of(response{200, 11, {}, read_file(dir + "/1")});
    CHECK(echoed(echo, "X-Forwarded-Proto") == "https");
    CHECK(echoed(echo, "Host") == "a.test:" + std::to_string(f.gw->tls_port));
    CHECK(json_of(response{200, 11, {}, read_file(dir + "/3")}).at("target").as_string() == "/echo?3");
    CHECK(eventually_handshakes(f.gw->admin_port, "ok", "TLSv1.3", 1) == 1);
    // Another name: another connection (curl reuses one per host).
    CHECK(curl_status(f.gw->tls_port, "/echo", {"-o", "/dev/null", url(f.gw->tls_port, "/echo", "b.test")}) == 200);

    // The plain port beside it: http, even when the client claims otherwise.
    const auto plain = fetch(f.gw->port, "GET", "/echo", {{"X-Forwarded-Proto", "https"}});
    CHECK(echoed(json_of(plain), "X-Forwarded-Proto") == "http");

    // The access log (stdout): the TLS requests carry the version and the name asked for,
    // the plain one neither.
    const auto lines_with = [&](const std::string& text) {
        std::size_t n = 0;
        std::istringstream lines(f.gw->proc->output());
        for (std::string line; std::getline(lines, line);)
            if (line.rfind(R"({"time":)", 0) == 0 && line.find(text) != std::string::npos) ++n;
        return n;
    };
    CHECK(eventually([&] { return lines_with(R"("path":"/echo")") == 6; }));
    CHECK(lines_with(R"("tls_version":"TLSv1.3","sni":"a.test"})") == 4);
    CHECK(lines_with(R"("tls_version":"TLSv1.3","sni":"b.test"})") == 1);
    CHECK(lines_with(R"("tls_version")") == 5);
    CHECK(lines_with(R"("sni")") == 5);
    CHECK(handshakes(f.metrics(), "ok", "TLSv1.3") == 3);
}

// ---- 2. SNI

TEST_CASE("tls: SNI chooses the certificate, the first for no name or an unknown one, a wildcard for one label") {
    tls_fixture f;
    const auto p = f.gw->tls_port;
    CHECK(subject_served(p, {"-servername", "a.test"}) == "CN = a.test");
    CHECK(subject_served(p, {"-servername", "b.test"}) == "CN = b.test");
    CHECK(subject_served(p, {"-servername", "B.Test"}) == "CN = b.test");  // names compare without case
    CHECK(subject_served(p, {"-servername", "x.w.test"}) == "CN = wild");
    CHECK(subject_served(p, {"-servername", "y.x.w.test"}) == "CN = a.test");  // a wildcard is one label
    CHECK(subject_served(p, {"-servername", "w.test"}) == "CN = a.test");
    CHECK(subject_served(p, {"-servername", "cn-only.test"}) == "CN = cn-only.test");  // no SAN: its CN
    CHECK(subject_served(p, {"-servername", "unknown.test"}) == "CN = a.test");
    CHECK(subject_served(p, {"-noservername"}) == "CN = a.test");
    // And a client that checks the name it asked for is satisfied.
    const auto port = std::to_string(p);
    const auto r = curl(p, {"--resolve", "x.w.test:" + port + ":127.0.0.1", "-o", "/dev/null", "-o", "/dev/null", "-w",
                            "%{http_code}\\n", url(p, "/echo", "x.w.test"), url(p, "/echo", "b.test")});
    CHECK(r.out == "200\n200\n");
}

// ---- 3. Protocols and suites; metrics by version

TEST_CASE("tls: TLS 1.2 and 1.3 served, 1.0 and 1.1 refused, only ECDHE with AEAD on 1.2, no renegotiation") {
    tls_fixture f;
    INFO("gateway output:\n", f.gw->proc->output());
    const auto p = f.gw->tls_port;
    const std::regex agreed("New, (TLSv1\\.[0-3]), Cipher is (\\S+)");
    const auto agreement = [&](std::vector<std::string> args) {
        const auto r = s_client(p, std::move(args));
        std::smatch m;
        if (r.status != 0 || !std::regex_search(r.out, m, agreed)) return "refused: " + r.out;
        return m[1].str() + " " + m[2].str();
    };
    // The client's own floor is lowered (SECLEVEL=0), so that the refusal is the server's.
    for (const char* old : {"-tls1", "-tls1_1"}) {
        CAPTURE(old);
        const auto r = s_client(p, {old, "-cipher", "DEFAULT@SECLEVEL=0"});
        CHECK(r.status != 0);
        CHECK(r.out.find("alert protocol version") != std::string::npos);
    }
    CHECK(agreement({"-tls1_2"}) == "TLSv1.2 ECDHE-RSA-AES128-GCM-SHA256");  // the server's order
    CHECK(agreement({"-tls1_3"}) == "TLSv1.3 TLS_AES_256_GCM_SHA384");
    CHECK(agreement({"-tls1_3", "-ciphersuites", "TLS_CHACHA20_POLY1305_SHA256"}) ==
          "TLSv1.3 TLS_CHACHA20_POLY1305_SHA256");
    for (const char* ok : {"ECDHE-RSA-AES128-GCM-SHA256", "ECDHE-RSA-CHACHA20-POLY1305"}) {
        CAPTURE(ok);
        CHECK(agreement({"-tls1_2", "-cipher", ok}) == "TLSv1.2 "s + ok);
    }
    // Without forward secrecy (RSA or DHE key exchange) or without AEAD (CBC): refused,
    // though the RSA certificate could serve every one of them.
    for (const char* bad : {"AES128-GCM-SHA256", "AES256-GCM-SHA384", "AES128-SHA", "AES256-SHA256",
                            "ECDHE-RSA-AES128-SHA", "ECDHE-RSA-AES256-SHA384", "DHE-RSA-AES128-GCM-SHA256"}) {
        CAPTURE(bad);
        const auto r = s_client(p, {"-tls1_2", "-cipher", bad});
        CHECK(r.status != 0);
        CHECK(r.out.find("alert handshake failure") != std::string::npos);
    }
    // A renegotiation the client asks for (TLS 1.2) is declined; the connection it was
    // asked on stays usable for nothing more, and the gateway serves the next one.
    {
        tls_client c(p, tls12());
        REQUIRE_MESSAGE(c.ok(), c.error);
        CHECK(c.request(make_request("GET", "/echo")).status == 200);
        CHECK(c.renegotiate().find("no renegotiation") != std::string::npos);
    }
    tls_client after(p, tls12());
    REQUIRE_MESSAGE(after.ok(), after.error);
    CHECK(after.request(make_request("GET", "/echo")).status == 200);

    // 1.2: 1 + 2 suites + 2 clients; 1.3: 2; failed: 2 versions + 7 suites.
    CHECK(eventually_handshakes(f.gw->admin_port, "ok", "TLSv1.2", 5) == 5);
    const auto m = f.metrics();
    CHECK(handshakes(m, "ok", "TLSv1.3") == 2);
    CHECK(handshakes(m, "failed", "none") == 9);
    CHECK(handshakes(m, "timeout", "none") == 0);
    CHECK(handshakes(m, "refused", "none") == 0);
}

TEST_CASE("tls: min_version 1.3 refuses TLS 1.2") {
    tls_fixture f(R"(min_version: "1.3")");
    const auto p = f.gw->tls_port;
    auto r = s_client(p, {"-tls1_2"});
    CHECK(r.status != 0);
    CHECK(r.out.find("alert protocol version") != std::string::npos);
    r = s_client(p, {"-tls1_3"});
    CHECK(r.status == 0);
    CHECK(r.out.find("New, TLSv1.3, Cipher is TLS_AES_256_GCM_SHA384") != std::string::npos);
    CHECK(curl_status(p, "/echo", {"--tlsv1.2", "--tls-max", "1.2"}) == 0);
    CHECK(curl_status(p, "/echo", {"--tlsv1.3"}) == 200);
    CHECK(eventually_handshakes(f.gw->admin_port, "failed", "none", 2) == 2);
    CHECK(handshakes(f.metrics(), "ok", "TLSv1.3") == 2);
}

// ---- 4. Resumption

TEST_CASE("tls: a session ticket from one connection resumes on the next ones, whichever worker accepts them") {
    tls_fixture f("", {{"server.threads", "3"}});
    for (const char* version : {"TLSv1_3", "TLSv1_2"}) {
        CAPTURE(version);
        const auto r = python(resumption_py, {std::to_string(f.gw->tls_port), pki("ca.pem"), version, "8"});
        CHECK(r.out == "200 full\n" + [] {
            std::string s;
            for (int i = 0; i < 7; ++i) s += "200 reused\n";
            return s;
        }());
    }
}

TEST_CASE("tls: session_tickets false: nothing resumes") {
    tls_fixture f("session_tickets: false");
    for (const char* version : {"TLSv1_3", "TLSv1_2"}) {
        CAPTURE(version);
        const auto r = python(resumption_py, {std::to_string(f.gw->tls_port), pki("ca.pem"), version, "3"});
        CHECK(r.out == "200 full\n200 full\n200 full\n");
    }
}

// ---- 5. Reload

TEST_CASE("tls: a reload serves new certificates to new handshakes, open connections go on, a bad file keeps the old") {
    auto up = start_upstream();
    const auto dir = make_temp_dir();
    const auto cert = dir + "/cert.pem", key = dir + "/key.pem";
    std::filesystem::copy_file(pki("a.pem"), cert);
    std::filesystem::copy_file(pki("server.key"), key);
    auto gw = start_gateway(gateway_yaml(up->port, {{"server.tls", tls_section("", cert_entry(cert, key))}}));
    INFO("gateway output:\n", gw->proc->output());
    const auto served = [&] {
        tls_client c(gw->tls_port);
        if (!c.ok()) return "(no handshake: " + c.error + ")";
        return c.subject() + " " + std::to_string(c.request(make_request("GET", "/echo")).status);
    };

    tls_client before(gw->tls_port);
    REQUIRE_MESSAGE(before.ok(), before.error);
    CHECK(before.subject() == "/CN=a.test");
    CHECK(before.request(make_request("GET", "/echo")).status == 200);

    // POST /reload: the renewed certificate for new handshakes; the open connection goes on.
    rename_into_place(pki("a2.pem"), cert);
    auto r = fetch(gw->admin_port, "POST", "/reload");
    CHECK(r.status == 200);
    CHECK(served() == "/O=second/CN=a.test 200");
    CHECK(before.request(make_request("GET", "/echo")).status == 200);

    // SIGHUP: read again too.
    rename_into_place(pki("a.pem"), cert);
    gw->proc->signal(SIGHUP);
    CHECK(eventually([&] { return served() == "/CN=a.test 200"; }));

    // A key that is not the certificate's: 422 with the reason, the running one stays.
    rename_into_place(pki("a2.pem"), cert);
    rename_into_place(pki("alice.key"), key);
    r = fetch(gw->admin_port, "POST", "/reload");
    CHECK(r.status == 422);
    const auto body = json_of(r);
    CHECK(body.at("error").as_string() == "invalid_config");
    const std::string message(body.at("message").as_string());
    CHECK(message.find("server.tls.certificates[0].key_file: the key in " + key +
                       " does not match the certificate in " + cert) != std::string::npos);
    CHECK(served() == "/CN=a.test 200");

    // An expired certificate: the same.
    rename_into_place(pki("server.key"), key);
    rename_into_place(pki("expired.pem"), cert);
    r = fetch(gw->admin_port, "POST", "/reload");
    CHECK(r.status == 422);
    CHECK(r.body.find("server.tls.certificates[0].cert_file: the certificate in " + cert +
                      " expired on 2020-01-02 00:00:00 UTC") != std::string::npos);
    CHECK(served() == "/CN=a.test 200");
    CHECK(before.request(make_request("GET", "/echo")).status == 200);
    std::filesystem::remove_all(dir);
}

// ---- 6. Client certificates

TEST_CASE("tls: optional client certificates: a verified one names the user, one of another CA is refused") {
    const auto alice = std::vector<std::string>{"--cert", pki("alice.pem"), "--key", pki("alice.key")};
    const auto bob = std::vector<std::string>{"--cert", pki("bob.pem"), "--key", pki("bob.key")};
    const std::array<const char*, 3> choices[] = {{"subject_cn", "alice", "bob"},
                                                  {"san_email", "alice@example.test", "bob@example.test"},
                                                  {"san_uri", "spiffe://test/alice", "spiffe://test/bob"}};
    for (const auto& [choice, alice_name, bob_name] : choices) {
        CAPTURE(choice);
        tls_fixture f("client_ca_file: \"" + pki("ca.pem") + "\"", {{"clients.user.certificate", choice}});
        INFO("gateway output:\n", f.gw->proc->output());
        const auto p = f.gw->tls_port;
        // 2 a minute per user: each certificate its own budget.
        for (const auto& who : {alice, bob}) {
            std::vector<int> got;
            for (int i = 0; i < 3; ++i) got.push_back(curl_status(p, "/limited", who));
            CHECK(got == std::vector<int>{200, 200, 429});
        }
        // No certificate: no user, so no per-user limit.
        for (int i = 0; i < 3; ++i) CHECK(curl_status(p, "/limited") == 200);
        const auto top = boost::json::parse(fetch(f.gw->admin_port, "GET", "/top").body);
        std::vector<std::string> identities;
        for (const auto& o : top.at("offenders").as_array())
            identities.push_back(std::string(o.at("kind").as_string()) + " " +
                                 std::string(o.at("identity").as_string()));
        std::sort(identities.begin(), identities.end());
        CAPTURE(top);
        CHECK(identities == std::vector<std::string>{"user cert:"s + alice_name, "user cert:"s + bob_name});
        if (std::string(choice) != "subject_cn") continue;
        // The server asks for a certificate of its CA.
        CHECK(s_client(p, {}).out.find("Acceptable client certificate CA names\nCN = sluice-test-ca\n") !=
              std::string::npos);
        // Signed by another CA: refused at the handshake (on TLS 1.3 the client hears of it
        // after its side is done, at its first read).
        CHECK(curl_status(p, "/echo", {"--cert", pki("mallory.pem"), "--key", pki("mallory.key")}) == 0);
        CHECK(request_refused(tls_client(p, with_cert(pki("mallory.pem"), pki("mallory.key"))))
                  .find("alert unknown ca") != std::string::npos);
        tls_client c12(p, tls12(pki("mallory.pem"), pki("mallory.key")));
        CHECK_FALSE(c12.ok());
        CHECK(c12.error.find("alert unknown ca") != std::string::npos);
        CHECK(eventually_handshakes(f.gw->admin_port, "failed", "none", 3) == 3);
    }
}

TEST_CASE("tls: client_certificates required: a handshake without one fails") {
    tls_fixture f("client_ca_file: \"" + pki("ca.pem") + "\", client_certificates: required",
                  {{"clients.user.certificate", "subject_cn"}});
    const auto p = f.gw->tls_port;
    CHECK(curl_status(p, "/echo") == 0);
    const auto refused = request_refused(tls_client(p));
    CAPTURE(refused);
    CHECK(refused.find("alert certificate required") != std::string::npos);
    tls_client c12(p, tls12());
    CHECK_FALSE(c12.ok());
    CHECK(c12.error.find("alert handshake failure") != std::string::npos);
    CHECK(curl_status(p, "/limited", {"--cert", pki("alice.pem"), "--key", pki("alice.key")}) == 200);
    CHECK(eventually_handshakes(f.gw->admin_port, "failed", "none", 3) == 3);
    CHECK(handshakes(f.metrics(), "ok", "TLSv1.3") == 1);
}

TEST_CASE("tls: client_certificates none with a client_ca_file: no certificate is asked for") {
    tls_fixture f("client_ca_file: \"" + pki("ca.pem") + "\", client_certificates: none");
    const auto p = f.gw->tls_port;
    for (const char* version : {"-tls1_2", "-tls1_3"}) {
        CAPTURE(version);
        const auto r = s_client(p, {version});
        CHECK(r.status == 0);
        CHECK(r.out.find("No client certificate CA names sent") != std::string::npos);
    }
    // A certificate no CA of ours signed is not asked for, so not refused.
    tls_client c12(p, tls12(pki("mallory.pem"), pki("mallory.key")));
    REQUIRE_MESSAGE(c12.ok(), c12.error);
    CHECK(c12.request(make_request("GET", "/echo")).status == 200);
}

// Python's ssl: two connections with a client certificate, the second resuming the first's
// session; once the test sends SIGUSR1 (after a reload), a third that offers the session.
// Prints "NAME STATUS reused|full" per connection, or "after refused".
const std::string resume_without_cert_py = R"(
import signal, socket, ssl, sys
signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])
port, ca, cert, key = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
def one(name, ctx, session):
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, server_hostname="a.test", session=session) as s:
            s.sendall(b"GET /limited HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                try:
                    chunk = s.recv(65536)
                except ssl.SSLEOFError:
                    break
                if not chunk:
                    break
                data += chunk
            print(name, data.split(b" ", 2)[1].decode(), "reused" if s.session_reused else "full", flush=True)
            return s.session
with_cert = ssl.create_default_context(cafile=ca)
with_cert.minimum_version = with_cert.maximum_version = ssl.TLSVersion.TLSv1_3
with_cert.load_cert_chain(cert, key)
session = one("first", with_cert, None)
session = one("second", with_cert, session)
signal.sigwait([signal.SIGUSR1])
try:
    one("after", with_cert, session)
except (ssl.SSLError, ConnectionError):
    print("after refused", flush=True)
)";

TEST_CASE("tls: a reload that changes client_ca_file ends the resumption of sessions made under the old CA") {
    const auto dir = make_temp_dir();
    const auto ca = dir + "/client-ca.pem";
    rename_into_place(pki("ca.pem"), ca);
    tls_fixture f("client_ca_file: \"" + ca + "\"", {{"clients.user.certificate", "subject_cn"}});
    INFO("gateway output:\n", f.gw->proc->output());
    process py({"python3", "-c", resume_without_cert_py, std::to_string(f.gw->tls_port), pki("ca.pem"),
                pki("alice.pem"), pki("alice.key")});
    // alice's two requests (her budget of 2 spent), the second resumed with her certificate.
    REQUIRE(py.wait_for_line("first 200 full").size() == 1);
    REQUIRE(py.wait_for_line("second 200 reused").size() == 1);
    rename_into_place(pki("other-ca.pem"), ca);
    CHECK(fetch(f.gw->admin_port, "POST", "/reload").status == 200);
    py.signal(SIGUSR1);
    // The old session is not resumed: a full handshake, where the new CA refuses alice's
    // certificate. (Resumed, alice would still be named, and out of budget: "429 reused".)
    CHECK(py.wait_for_line("after (.*)").at(1) == "refused");
    CHECK(py.wait_exit(10s) == 0);
    if (!std::getenv("SLUICE_TEST_KEEP_TMP")) std::filesystem::remove_all(dir);
}

TEST_CASE("tls: require_known with optional client certificates: an API key or a certificate, else 401") {
    auto keys_dir = make_temp_dir();
    const auto keys = keys_dir + "/keys.yaml";
    write_file(keys, read_file(std::string(SLUICE_TEST_DIR) + "/config/fixtures/keys/good.keys.yaml"));
    tls_fixture f("client_ca_file: \"" + pki("ca.pem") + "\"", {},
                  limits_yaml +
                      "plans:\n  pro: { user: [ {limit: 1000, per: 1d} ] }\nclients:\n  user:\n    api_key_header: "
                      "X-API-Key\n    api_keys: { file: \"" +
                      keys + "\", require_known: true }\n    certificate: subject_cn\n");
    const auto p = f.gw->tls_port;
    const auto body = keys_dir + "/body";
    auto r = curl(p, {"-o", body, "-w", "%{http_code}", url(p, "/limited")});
    CHECK(r.out == "401");
    const auto refusal = boost::json::parse(read_file(body)).as_object();
    CHECK(refusal.at("error").as_string() == "unauthorized");
    CHECK(read_file(body).find("an API key or a verified client certificate is required") != std::string::npos);
    CHECK(curl_status(p, "/limited", {"--cert", pki("alice.pem"), "--key", pki("alice.key")}) == 200);
    CHECK(curl_status(p, "/limited", {"-H", "X-API-Key: acme-key-one-0001"}) == 200);
    // A key, when given, decides: an unknown one is refused even with a certificate.
    CHECK(curl_status(p, "/limited",
                      {"-H", "X-API-Key: acme-key-one-0009", "--cert", pki("alice.pem"), "--key", pki("alice.key")}) ==
          401);
    std::filesystem::remove_all(keys_dir);
}

// ---- 7. Bounds

TEST_CASE("tls: handshake_timeout closes a silent connection, garbage is closed unanswered, max_handshakes refuses") {
    tls_fixture f("handshake_timeout: 400ms, max_handshakes: 1", {{"server.threads", "1"}});
    INFO("gateway output:\n", f.gw->proc->output());
    const auto p = f.gw->tls_port;
    const auto since = [](steady_clock::time_point t) { return duration_cast<milliseconds>(steady_clock::now() - t); };

    {  // silent: closed by the handshake timeout
        connection c("127.0.0.1", p);
        const auto start = steady_clock::now();
        const auto e = read_to_close(c, 5s);
        CHECK(e.closed);
        CHECK(e.bytes.empty());
        CHECK(since(start) >= 350ms);
        CHECK(since(start) < 3s);
        CHECK(eventually_handshakes(f.gw->admin_port, "timeout", "none", 1) == 1);
    }
    {  // plain HTTP on the TLS port: closed at once, no HTTP answer
        connection c("127.0.0.1", p);
        const auto start = steady_clock::now();
        c.send(make_request("GET", "/echo"));
        const auto e = read_to_close(c, 5s);
        CHECK(e.closed);
        CHECK(e.bytes.find("HTTP/") == std::string::npos);
        CHECK(since(start) < 350ms);
        CHECK(eventually_handshakes(f.gw->admin_port, "failed", "none", 1) == 1);
    }
    {  // one handshake stalled: the next connection is closed at once, counted refused
        // A handshake counts from its first byte: each sends a record header that promises
        // 80 bytes of a ClientHello and no more.
        const std::string record_head("\x16\x03\x01\x00\x50", 5);
        connection stalled("127.0.0.1", p);
        stalled.send(record_head);
        connection next("127.0.0.1", p);
        next.send(record_head);
        const auto start = steady_clock::now();
        const auto e = read_to_close(next, 5s);
        CHECK(e.closed);
        CHECK(e.bytes.empty());
        CHECK(since(start) < 350ms);
        CHECK(eventually_handshakes(f.gw->admin_port, "refused", "none", 1) == 1);
        CHECK(read_to_close(stalled, 5s).closed);
        CHECK(eventually_handshakes(f.gw->admin_port, "timeout", "none", 2) == 2);
    }
    {  // connections that say nothing hold no slot: a handshake beside them goes through
        connection silent1("127.0.0.1", p), silent2("127.0.0.1", p);
        CHECK(curl_status(p, "/echo") == 200);
    }
    // The slot is free again.
    CHECK(curl_status(p, "/echo") == 200);
    CHECK(eventually_handshakes(f.gw->admin_port, "ok", "TLSv1.3", 2) == 2);
}

TEST_CASE("tls: without handshake_timeout the handshake has server.header_timeout") {
    tls_fixture f("", {{"server.threads", "1"}, {"server.header_timeout", "400ms"}});
    connection c("127.0.0.1", f.gw->tls_port);
    const auto start = steady_clock::now();
    const auto e = read_to_close(c, 5s);
    CHECK(e.closed);
    CHECK(e.bytes.empty());
    CHECK(steady_clock::now() - start >= 350ms);
    CHECK(steady_clock::now() - start < 3s);
    CHECK(eventually_handshakes(f.gw->admin_port, "timeout", "none", 1) == 1);
}

TEST_CASE("tls: server.max_connections bounds TLS connections too") {
    tls_fixture f("", {{"server.threads", "1"}, {"server.max_connections", "1"}});
    const auto p = f.gw->tls_port;
    tls_client held(p);
    REQUIRE_MESSAGE(held.ok(), held.error);
    CHECK(held.request(make_request("GET", "/echo")).status == 200);
    connection c("127.0.0.1", p);
    const auto e = read_to_close(c, 5s);
    CHECK(e.closed);
    CHECK(e.bytes.empty());
    CHECK(eventually_metric(f.gw->admin_port, "sluice_client_connections_rejected_total", 1) == 1);
    CHECK(held.request(make_request("GET", "/echo")).status == 200);
}

// ---- 8. PROXY protocol, then TLS

TEST_CASE("tls: a PROXY header before the handshake, raw (v1, v2) and from HAProxy send-proxy-v2 in TCP mode") {
    tls_fixture f("", {{"server.threads", "1"}, {"server.proxy_protocol", R"({ trusted: ["127.0.0.1"] })"}});
    INFO("gateway output:\n", f.gw->proc->output());
    const auto p = std::to_string(f.gw->tls_port);
    const auto seen = [&](const char* kind, const char* source, const char* path) {
        const auto r = python(proxy_tls_py, {p, pki("ca.pem"), kind, source, path});
        return r.status == 0 ? r.out : "(failed: " + r.out + ")";
    };
    CHECK(seen("v2", "203.0.113.9", "/echo") == "200 203.0.113.9\n");
    CHECK(seen("v1", "198.51.100.7", "/echo") == "200 198.51.100.7\n");
    // The per-ip limit counts the header's source.
    CHECK(seen("v2", "203.0.113.1", "/iplimited") == "200 203.0.113.1\n");
    CHECK(seen("v2", "203.0.113.1", "/iplimited") == "200 203.0.113.1\n");
    CHECK(seen("v2", "203.0.113.1", "/iplimited") == "429 -\n");
    CHECK(seen("v1", "203.0.113.2", "/iplimited") == "200 203.0.113.2\n");

    haproxy lb(f.gw->tls_port, "send-proxy-v2");
    INFO("haproxy output:\n", lb.proc->output());
    auto r = curl(lb.port, {"--interface", "127.0.0.2", "-w", "\\n%{http_code}", url(lb.port, "/echo")});
    const auto split = r.out.rfind('\n');
    REQUIRE(split != std::string::npos);
    CHECK(r.out.substr(split + 1) == "200");
    CHECK(echoed(json_of(response{200, 11, {}, r.out.substr(0, split)}), "X-Forwarded-For") == "127.0.0.2");
    std::vector<int> got;
    for (int i = 0; i < 3; ++i) got.push_back(curl_status(lb.port, "/iplimited", {"--interface", "127.0.0.3"}));
    CHECK(got == std::vector<int>{200, 200, 429});
    CHECK(metric_value(f.metrics(), "sluice_proxy_protocol_refused_total{reason=\"malformed\"}") == 0);
}

// ---- 9. Metrics

TEST_CASE("tls: sluice_tls_certificate_expiry_seconds for each certificate, counters start at zero") {
    tls_fixture f;
    const auto m = f.metrics();
    const std::pair<const char*, const char*> certs[] = {
        {"a.test", "a.pem"}, {"b.test", "b.pem"}, {"*.w.test", "wild.pem"}, {"cn-only.test", "cn-only.pem"}};
    for (const auto& [name, file] : certs) {
        CAPTURE(name);
        const double v = metric_value(m, "sluice_tls_certificate_expiry_seconds{name=\""s + name + "\"}");
        CHECK(v > 0);
        CHECK(std::abs(v - static_cast<double>(seconds_to_expiry(pki(file)))) <= 60);
    }
    for (const char* result : {"ok", "failed", "timeout", "refused"})
        for (const char* version : {"TLSv1.2", "TLSv1.3", "none"}) {
            CAPTURE(result);
            CAPTURE(version);
            CHECK(handshakes(m, result, version) == 0);
        }
}
