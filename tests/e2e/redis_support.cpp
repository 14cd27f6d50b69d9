#include "e2e.hpp"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>

namespace sluice::test {

std::uint16_t unused_port() {
    int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) throw std::runtime_error("bind failed");
    socklen_t len = sizeof a;
    ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

redis_server::redis_server(std::uint16_t p) : port(p) {
    proc = std::make_unique<process>(std::vector<std::string>{"redis-server", "--port", std::to_string(port), "--bind",
                                                              "127.0.0.1", "--save", "", "--appendonly", "no",
                                                              "--maxmemory-policy", "noeviction"});
    proc->wait_for_line("Ready to accept connections");
}

void redis_server::stop() {
    proc->signal(SIGTERM);
    proc->wait_exit(std::chrono::seconds(10));
}

tls_files::tls_files() : dir(make_temp_dir()) {
    const std::string script =
        "set -e; cd '" + dir +
        "'\n"
        "key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:P-256 -out \"$1\" 2>/dev/null; }\n"
        "key ca.key; key other.key; key server.key; key client.key\n"
        "openssl req -x509 -new -key ca.key -out ca.pem -days 2 -subj /CN=sluice-test-ca\n"
        "openssl req -x509 -new -key other.key -out other.pem -days 2 -subj /CN=sluice-other-ca\n"
        "printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\\n' > server.ext\n"
        "openssl req -new -key server.key -out server.csr -subj /CN=localhost\n"
        "openssl x509 -req -in server.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 "
        "-extfile server.ext -out server.pem 2>/dev/null\n"
        "openssl req -new -key client.key -out client.csr -subj /CN=sluice-gateway\n"
        "openssl x509 -req -in client.csr -CA ca.pem -CAkey ca.key -CAcreateserial -days 2 -out client.pem "
        "2>/dev/null\n";
    process openssl({"sh", "-c", script});
    auto status = openssl.wait_exit(std::chrono::seconds(30));
    INFO("openssl output:\n", openssl.output());
    REQUIRE(status == 0);
}

tls_files::~tls_files() {
    if (!std::getenv("SLUICE_TEST_KEEP_TMP")) std::filesystem::remove_all(dir);
}

}  // namespace sluice::test
