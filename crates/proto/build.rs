//! Compiles proto/sextant.proto with protox (a pure-Rust protobuf
//! compiler), so building needs no system `protoc`.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/sextant.proto");
    let fds = protox::compile(["sextant.proto"], ["proto"])?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // A hit's path is a slice of the engine's per-table path buffer
        // (`sextant_engine::search::SearchHit::path`): as `Bytes` it goes
        // into the reply without a copy of its own.
        .bytes(".sextant.v1.SearchHit.path")
        .compile_fds(fds)?;
    Ok(())
}
