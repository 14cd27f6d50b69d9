// upstream.url https:// through the real binary, in front of a real nginx serving HTTPS
// with a private CA (tls_files): requests pass, a new upstream connection resumes the last
// session (nginx's $ssl_session_reused), a certificate of another CA or for another name
// is a 502 counted as kind tls unless verify is false, mTLS with and without a client
// certificate (and an openssl s_server that fails the handshake without one), a reload that
// changes upstream.tls, and a handshake that never ends.
#include "e2e.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>

#include <filesystem>

using namespace sluice::test;
using namespace std::string_literals;

namespace {

struct nginx_options {
    std::string protocols = "TLSv1.2 TLSv1.3";
    bool verify_client = false;  // demand a client certificate of the CA
};

// nginx on 127.0.0.1:port with the tls_files server certificate (127.0.0.1 and localhost).
// Each answer says whether its TLS session was resumed ("r") or not ("."), over which
// protocol, the SNI it got, and the client certificate's subject.
struct nginx_server {
    nginx_server(const tls_files& f, const nginx_options& o = {})
        : port(unused_port()), plain_port(unused_port()), dir(make_temp_dir()) {
        if (::system("command -v nginx >/dev/null 2>&1") != 0)
            FAIL("nginx is not installed: the https upstream tests need it (scripts/install-deps.sh installs it)");
        std::string conf = R"(daemon off;
master_process off;
pid DIR/nginx.pid;
error_log stderr;
events { worker_connections 64; }
http {
  access_log off;
  client_body_temp_path DIR/body;
  proxy_temp_path DIR/proxy;
  fastcgi_temp_path DIR/fastcgi;
  uwsgi_temp_path DIR/uwsgi;
  scgi_temp_path DIR/scgi;
  server {
    listen 127.0.0.1:PLAIN;
    location / { return 200 "body of $content_length bytes"; }
  }
  server {
    listen 127.0.0.1:PORT ssl;
    ssl_certificate CERTS/server.pem;
    ssl_certificate_key CERTS/server.key;
    ssl_protocols PROTOCOLS;
    CLIENT
    location /body {
      proxy_pass http://127.0.0.1:PLAIN;
    }
    location / {
      add_header X-Reused $ssl_session_reused always;
      add_header X-Protocol $ssl_protocol always;
      add_header X-Sni "[$ssl_server_name]" always;
      add_header X-Client "[$ssl_client_s_dn]" always;
      return 200 "hello over tls $request_uri";
    }
  }
}
)";
        const std::string client = o.verify_client ? "ssl_verify_client on; ssl_client_certificate CERTS/ca.pem;" : "";
        for (const auto& [from, to] :
             std::vector<std::pair<std::string, std::string>>{{"CLIENT", client},
                                                              {"DIR", dir},
                                                              {"CERTS", f.dir},
                                                              {"PORT", std::to_string(port)},
                                                              {"PLAIN", std::to_string(plain_port)},
                                                              {"PROTOCOLS", o.protocols}}) {
            for (auto at = conf.find(from); at != std::string::npos; at = conf.find(from, at + to.size()))
                conf.replace(at, from.size(), to);
        }
        write_file(dir + "/nginx.conf", conf);
        proc = std::make_unique<process>(std::vector<std::string>{"nginx", "-p", dir, "-c", dir + "/nginx.conf"});
        // Listening once a connection is accepted (bounded: eventually's 10 s).
        const bool up = eventually([&] { return accepts_connections(port); });
        if (!up) FAIL("nginx did not listen on port " << port << ":\n" << proc->output());
    }
    ~nginx_server() {
        proc.reset();
        if (!std::getenv("SLUICE_TEST_KEEP_TMP")) std::filesystem::remove_all(dir);
    }
    std::uint16_t port;
    std::uint16_t plain_port;  // /body on the TLS port reads the whole body, then asks this one
    std::string dir;
    std::unique_ptr<process> proc;
};

std::string quoted(const std::string& s) { return "\"" + s + "\""; }

// A gateway of one worker in front of `n` at `host`, with `tls` as upstream.tls (a flow
// mapping, "" for none) and no pooled connections unless asked: every request makes a new
// upstream connection.
std::unique_ptr<gateway> https_gateway(const nginx_server& n, const std::string& tls,
                                       const std::string& host = "127.0.0.1", const std::string& max_idle = "0") {
    yaml_overrides o{{"server.threads", "1"},
                     {"upstream.url", quoted("https://" + host + ":" + std::to_string(n.port))},
                     {"upstream.max_idle_per_worker", max_idle}};
    if (!tls.empty()) o.emplace_back("upstream.tls", tls);
    return start_gateway(gateway_yaml(n.port, o));
}

std::string ca_only(const tls_files& f, const std::string& ca = "ca.pem") {
    return "{ ca_file: " + quoted(f.file(ca)) + " }";
}

double tls_errors(const gateway& gw) {
    return metric_value(fetch(gw.admin_port, "GET", "/metrics").body, "sluice_upstream_errors_total{kind=\"tls\"}");
}

void check_tls_refused(const gateway& gw, double count) {
    const auto r = fetch(gw.port, "GET", "/x");
    CHECK(r.status == 502);
    CHECK(json_of(r).at("error").as_string() == "bad_gateway");
    CHECK(json_of(r).at("message").as_string() == "the upstream's TLS handshake failed");
    CHECK(tls_errors(gw) == count);
}

}  // namespace

TEST_CASE("https upstream: requests pass, and each new connection resumes the last session") {
    tls_files f;
    for (const std::string protocol : {"TLSv1.2", "TLSv1.3"}) {
        CAPTURE(protocol);
        nginx_server n(f, {protocol});
        auto gw = https_gateway(n, ca_only(f));
        const auto first = fetch(gw->port, "GET", "/a?b=1");
        CHECK(first.status == 200);
        CHECK(first.body == "hello over tls /a?b=1");
        CHECK(first.header("X-Protocol") == protocol);
        CHECK(first.header("X-Reused") == ".");
        CHECK(first.header("X-Sni") == "[]");  // no SNI for an address
        // max_idle_per_worker 0: each request a new connection, offered the last session.
        for (int i = 0; i < 3; ++i) {
            const auto again = fetch(gw->port, "GET", "/again");
            CHECK(again.status == 200);
            CHECK(again.header("X-Reused") == "r");
        }
        CHECK(tls_errors(*gw) == 0);
    }
}

TEST_CASE("https upstream: a pooled connection carries the next requests, a DNS name is sent as SNI") {
    tls_files f;
    nginx_server n(f);
    auto gw = https_gateway(n, ca_only(f), "localhost", "4");
    connection c("127.0.0.1", gw->port, 10s);
    for (int i = 0; i < 3; ++i) {
        c.send(make_request("GET", "/keep"));
        const auto r = c.read_response();
        CHECK(r.status == 200);
        CHECK(r.header("X-Sni") == "[localhost]");
    }
    CHECK(eventually_metric(gw->admin_port, "sluice_upstream_idle_connections", 1) == 1);
}

TEST_CASE("https upstream: a certificate of another CA or for another name is a 502, counted, unless verify is false") {
    tls_files f;
    nginx_server n(f);
    {
        auto gw = https_gateway(n, ca_only(f, "other.pem"));
        check_tls_refused(*gw, 1);
        check_tls_refused(*gw, 2);
        CHECK_NOTHROW(gw->proc->wait_for_line("upstream TLS handshake failed: certificate verification failed"));
    }
    {
        // The system's CAs do not know the private CA either.
        auto gw = https_gateway(n, "");
        check_tls_refused(*gw, 1);
    }
    {
        // Signed by the right CA, but not for this name (the certificate names 127.0.0.1 and localhost).
        auto gw = https_gateway(n, "{ ca_file: " + quoted(f.file("ca.pem")) + ", server_name: api.example.com }");
        check_tls_refused(*gw, 1);
        CHECK_NOTHROW(gw->proc->wait_for_line("certificate verification failed: [Hh]ostname mismatch"));
    }
    {
        // Nor for this address (an IP server_name is verified as one).
        auto gw = https_gateway(n, "{ ca_file: " + quoted(f.file("ca.pem")) + ", server_name: 127.0.0.2 }");
        check_tls_refused(*gw, 1);
        CHECK_NOTHROW(gw->proc->wait_for_line("certificate verification failed: IP address mismatch"));
    }
    {
        auto gw = https_gateway(n, "{ verify: false }");
        CHECK_NOTHROW(gw->proc->wait_for_line("upstream\\.tls\\.verify is false"));
        const auto r = fetch(gw->port, "GET", "/unverified");
        CHECK(r.status == 200);
        CHECK(r.body == "hello over tls /unverified");
        CHECK(tls_errors(*gw) == 0);
    }
}

TEST_CASE("https upstream: mTLS with cert_file and key_file, a 502 without them") {
    tls_files f;
    nginx_server n(f, {.verify_client = true});
    {
        auto gw =
            https_gateway(n, "{ ca_file: " + quoted(f.file("ca.pem")) + ", cert_file: " + quoted(f.file("client.pem")) +
                                 ", key_file: " + quoted(f.file("client.key")) + " }");
        const auto r = fetch(gw->port, "GET", "/mtls");
        CHECK(r.status == 200);
        CHECK(r.header("X-Client") == "[CN=sluice-gateway]");
        CHECK(fetch(gw->port, "GET", "/mtls").header("X-Reused") == "r");
    }
    {
        // nginx refuses a missing client certificate in HTTP, not in the handshake: its 400
        // is relayed (the handshake passed, so no tls error).
        auto gw = https_gateway(n, ca_only(f));
        const auto r = fetch(gw->port, "GET", "/mtls");
        CHECK(r.status == 400);
        CHECK(r.body.find("No required SSL certificate was sent") != std::string::npos);
        CHECK(tls_errors(*gw) == 0);
    }
}

TEST_CASE("https upstream: an upstream that refuses the handshake without a client certificate is a 502") {
    // openssl s_server -Verify fails a TLS 1.2 handshake that brings no certificate (nginx
    // would let it pass and answer 400, as above).
    tls_files f;
    const auto port = unused_port();
    process server({"openssl", "s_server", "-accept", "127.0.0.1:" + std::to_string(port), "-cert",
                    f.file("server.pem"), "-key", f.file("server.key"), "-CAfile", f.file("ca.pem"), "-Verify", "1",
                    "-tls1_2", "-www"});
    server.wait_for_line("ACCEPT");
    auto gw = start_gateway(gateway_yaml(port, {{"server.threads", "1"},
                                                {"upstream.url", quoted("https://127.0.0.1:" + std::to_string(port))},
                                                {"upstream.tls", ca_only(f)}}));
    const auto r = fetch(gw->port, "GET", "/");
    CHECK(r.status == 502);
    CHECK(json_of(r).at("message").as_string() == "the upstream's TLS handshake failed");
    CHECK(tls_errors(*gw) == 1);
}

TEST_CASE("https upstream: a reload that changes upstream.tls applies to new connections") {
    tls_files f;
    nginx_server n(f);
    auto gw = https_gateway(n, ca_only(f, "other.pem"));
    check_tls_refused(*gw, 1);
    std::string yaml = read_file(gw->config_path);
    const auto at = yaml.find(f.file("other.pem"));
    REQUIRE(at != std::string::npos);
    yaml.replace(at, f.file("other.pem").size(), f.file("ca.pem"));
    write_file(gw->config_path, yaml);
    gw->proc->signal(SIGHUP);
    gw->proc->wait_for_line("reloaded ");
    CHECK(fetch(gw->port, "GET", "/x").status == 200);
    CHECK(fetch(gw->port, "GET", "/x").header("X-Reused") == "r");

    // A file that is not PEM: the reload fails at the key, the running context stays.
    write_file(f.file("junk.pem"), "not a certificate\n");
    yaml.replace(yaml.find(f.file("ca.pem")), f.file("ca.pem").size(), f.file("junk.pem"));
    write_file(gw->config_path, yaml);
    gw->proc->signal(SIGHUP);
    CHECK_NOTHROW(
        gw->proc->wait_for_line("reload failed, keeping the running configuration: .*:[0-9]+:[0-9]+: "
                                "upstream\\.tls\\.ca_file: found no valid PEM certificate in "));
    CHECK(fetch(gw->port, "GET", "/x").status == 200);
}

TEST_CASE("https upstream: a ca_file that is not PEM stops the start, at its key") {
    tls_files f;
    write_file(f.file("junk.pem"), "not a certificate\n");
    auto gw = launch_gateway(gateway_yaml(
        unused_port(), {{"upstream.url", "\"https://127.0.0.1:1\""}, {"upstream.tls", ca_only(f, "junk.pem")}}));
    CHECK_NOTHROW(
        gw->proc->wait_for_line("sluice\\.yaml:[0-9]+:[0-9]+: upstream\\.tls\\.ca_file: found no valid PEM "
                                "certificate in "));
    CHECK(gw->proc->wait_exit(10s).value_or(0) != 0);
}

TEST_CASE("https upstream: a handshake the upstream never answers ends at connect_timeout") {
    // A listening socket that never accepts: the kernel completes the TCP connect, nobody speaks TLS.
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    REQUIRE(fd >= 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0);
    REQUIRE(::listen(fd, 16) == 0);
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    const auto port = ntohs(a.sin_port);
    auto gw = start_gateway(gateway_yaml(port, {{"server.threads", "1"},
                                                {"upstream.url", quoted("https://127.0.0.1:" + std::to_string(port))},
                                                {"upstream.connect_timeout", "300ms"},
                                                {"upstream.tls", "{ verify: false }"}}));
    const auto started = std::chrono::steady_clock::now();
    const auto r = fetch(gw->port, "GET", "/x");
    const auto took = std::chrono::steady_clock::now() - started;
    CHECK(r.status == 502);
    CHECK(json_of(r).at("message").as_string() == "connecting to the upstream timed out");
    CHECK(took >= 250ms);
    CHECK(took < 5s);
    CHECK(eventually_metric(gw->admin_port, "sluice_upstream_errors_total{kind=\"connect_timeout\"}", 1) == 1);
    ::close(fd);
}

TEST_CASE("https upstream: a streamed request body reaches a TLS 1.3 upstream whose session tickets come first") {
    // A TLS 1.3 server sends its tickets after the handshake: bytes on the upstream socket
    // before any answer. They must not be taken for an early answer (which stops sending
    // the body, and then waits for an answer the upstream cannot give without it).
    tls_files f;
    nginx_server n(f, {"TLSv1.3"});
    yaml_overrides o{{"server.threads", "1"},
                     {"upstream.url", quoted("https://127.0.0.1:" + std::to_string(n.port))},
                     {"upstream.tls", ca_only(f)},
                     {"upstream.timeout", "5s"},
                     {"proxy.request_buffering", "false"}};
    auto gw = start_gateway(gateway_yaml(n.port, o));
    const std::string body(300 * 1024, 'b');
    const auto r = fetch(gw->port, "POST", "/body", {{"Content-Type", "application/octet-stream"}}, body);
    CHECK(r.status == 200);
    CHECK(r.body == "body of " + std::to_string(body.size()) + " bytes");
}
