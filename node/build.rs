//! Compiles the protos with protox (no system `protoc`): the cluster's gRPC services, and the
//! messages of Prometheus' remote write and read protocol.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(["proto/cluster.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Points are shared between a shard's check and its write, and retries, uncopied.
        .bytes(".ebb.cluster.v1.WritePointsRequest.points")
        .compile_fds(fds)?;
    let fds = protox::compile(["remote.proto"], ["proto/prometheus"])?;
    tonic_prost_build::configure().build_server(false).build_client(false).compile_fds(fds)?;
    Ok(())
}
