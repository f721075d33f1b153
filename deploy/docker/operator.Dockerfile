# The oxbow-operator image for users: `docker build -f deploy/docker/operator.Dockerfile -t oxbow-operator .`
# from the repository root. The same content as the image tests/k8s/load-images builds for the
# test cluster (the release binary with the glibc and libgcc it links, run as uid 65532), on
# distroless's cc base.
FROM rust:1.95-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p oxbow-operator && cp target/release/oxbow-operator /oxbow-operator

FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /oxbow-operator /usr/local/bin/oxbow-operator
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/oxbow-operator"]
