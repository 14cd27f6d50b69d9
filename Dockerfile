# Sluice container: built from debian:12 with the same dependency script CI runs.
#   docker build -t sluice .
#   docker run -p 8080:8080 -p 9090:9090 -v $PWD/conf:/etc/sluice sluice
FROM debian:12 AS build
WORKDIR /src
COPY scripts/install-deps.sh scripts/install-deps.sh
RUN bash scripts/install-deps.sh
COPY . .
RUN cmake -S . -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=OFF \
 && cmake --build build -j "$(nproc)" --target sluice

FROM debian:12
COPY scripts/install-deps.sh /tmp/install-deps.sh
RUN bash /tmp/install-deps.sh --runtime && rm -rf /var/lib/apt/lists/* /tmp/install-deps.sh \
 && useradd --system --no-create-home --shell /usr/sbin/nologin sluice
COPY --from=build /src/build/sluice /usr/local/bin/sluice
COPY conf/sluice.yaml /etc/sluice/sluice.yaml
COPY lua /usr/share/sluice/lua
USER sluice
EXPOSE 8080 9090
HEALTHCHECK --interval=10s --timeout=2s --retries=3 CMD curl -fsS http://127.0.0.1:9090/healthz || exit 1
ENTRYPOINT ["/usr/local/bin/sluice"]
CMD ["--config", "/etc/sluice/sluice.yaml"]
