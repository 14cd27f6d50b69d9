# Sluice container: built from debian:12 with the same dependency script CI runs.
#   docker build -t sluice .                       # the gateway (the last stage, "gateway")
#   docker build -t sluice-upstream --target demo-upstream .   # the demo upstream
#   docker compose up --build                      # gateway + Redis + demo upstream (compose.yaml;
#                                                  # Debian's docker-compose 1.29 works too)
# The default CMD runs /etc/sluice/container.yaml (memory store, upstream "http://upstream:3000",
# resolved at start; drains for 8 s, under docker's default stop timeout of 10 s). With
# another upstream, mount a config of your own:
#   docker run -p 8080:8080 -p 127.0.0.1:9090:9090 -v $PWD/my.yaml:/etc/sluice/my.yaml \
#     sluice --config /etc/sluice/my.yaml
# The samples' admin listener needs its bearer token (admin.token_file) mounted:
#   -v $PWD/admin.token:/run/secrets/sluice_admin_token:ro
# Only the sources the build reads are copied, so a local build/ tree never reaches the image.

# --- build: the gateway binary ---
FROM debian:12 AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY CMakeLists.txt CMakeLists.txt
COPY cmake cmake
COPY src src
COPY lua lua
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build build -j "$(nproc)" --target sluice

# --- demo-upstream-build: the test upstream (echoes each request as JSON), for compose ---
# Reconfigures the same build tree with the tests enabled, so sluice_core is not rebuilt.
FROM build AS demo-upstream-build
COPY tests tests
RUN cmake -S . -B build -DBUILD_TESTING=ON \
 && cmake --build build -j "$(nproc)" --target sluice_test_upstream

# --- runtime: the shared libraries and an unprivileged user, common to both images ---
# apt's lists and caches are removed in the RUN that fills them, whatever the base image's
# apt configuration would keep (debian:12's docker-clean hook, absent from other bases).
FROM debian:12 AS runtime
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime \
 && apt-get clean && rm -rf /var/lib/apt/lists/* /var/cache/apt/*.bin /tmp/install-deps.sh \
 && useradd --system --no-create-home --shell /usr/sbin/nologin sluice

# --- demo-upstream: docker build --target demo-upstream . ---
FROM runtime AS demo-upstream
COPY --from=demo-upstream-build /src/build/tests/sluice_test_upstream /usr/local/bin/sluice_test_upstream
USER sluice
EXPOSE 3000
HEALTHCHECK --interval=5s --timeout=2s --retries=3 CMD curl -fsS http://127.0.0.1:3000/stats || exit 1
ENTRYPOINT ["/usr/local/bin/sluice_test_upstream"]
CMD ["--listen", "0.0.0.0:3000"]

# --- gateway: the default image (keep this stage last) ---
FROM runtime AS gateway
COPY --from=build /src/build/sluice /usr/local/bin/sluice
COPY conf/container.yaml /etc/sluice/container.yaml
COPY conf/docker.yaml /etc/sluice/docker.yaml
COPY lua /usr/share/sluice/lua
USER sluice
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD curl -fsS http://127.0.0.1:9090/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["--config", "/etc/sluice/container.yaml"]
