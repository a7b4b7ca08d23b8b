//! Compiles the Raft transport protos with protox (no system `protoc`).

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/raft.proto");
    let fds = protox::compile(["proto/raft.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        .bytes(".")
        .compile_fds(fds)?;
    Ok(())
}
