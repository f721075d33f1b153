//! Generates the gRPC client and server of the controller service without protoc: every method
//! carries one opaque `Payload` message (JSON of the Raft and controller types in `rpc.rs`).

fn main() {
    let method = |name: &str, route: &str| {
        tonic_build::manual::Method::builder()
            .name(name)
            .route_name(route)
            .input_type("crate::rpc::Payload")
            .output_type("crate::rpc::Payload")
            .codec_path("tonic_prost::ProstCodec")
            .build()
    };
    let service = tonic_build::manual::Service::builder()
        .name("Quorum")
        .package("oxbow.meta")
        .method(method("append_entries", "AppendEntries"))
        .method(method("vote", "Vote"))
        .method(method("install_snapshot", "InstallSnapshot"))
        .method(method("command", "Command"))
        .method(method("fetch", "Fetch"))
        .method(method("quorum_admin", "QuorumAdmin"))
        .build();
    tonic_build::manual::Builder::new().compile(&[service]);
}
