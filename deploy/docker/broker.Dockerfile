# The oxbow-broker image for users: `docker build -f deploy/docker/broker.Dockerfile -t oxbow-broker .`
# from the repository root. It holds what tests/k8s/load-images puts in the test cluster's image
# (the release binary, the glibc, libgcc and libstdc++ it links, /var/lib/oxbow as the working and data
# directory, the same entrypoint and default arguments) on distroless's cc base instead of
# libraries copied from the build host. It runs as uid 65532: give the data volume an fsGroup.
FROM rust:1.95-bookworm AS build
# RocksDB (the metadata store) is compiled from source: bindgen needs libclang.
RUN apt-get update && apt-get install -y --no-install-recommends libclang-dev && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p oxbow-server && cp target/release/oxbow-broker /oxbow-broker

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /oxbow-broker /usr/local/bin/oxbow-broker
WORKDIR /var/lib/oxbow
EXPOSE 9092 9093
ENTRYPOINT ["/usr/local/bin/oxbow-broker"]
# Defaults for a container; Kubernetes `args` replace them. Set advertised.listeners to an
# address clients can reach (the pod IP or a DNS name): the broker refuses to advertise 0.0.0.0.
CMD ["--override", "log.dirs=/var/lib/oxbow/data", "--override", "listeners=PLAINTEXT://0.0.0.0:9092"]
