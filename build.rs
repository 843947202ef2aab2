//! NRI's protobufs (proto/nri/api.proto, see its PROVENANCE) compiled to Rust
//! with prost-build and the protoc shipped in protoc-bin-vendored, so a build
//! needs no system protobuf-compiler. An exported PROTOC wins.

fn main() {
    println!("cargo:rerun-if-changed=proto/nri/api.proto");
    let mut config = prost_build::Config::new();
    if std::env::var_os("PROTOC").is_none() {
        match protoc_bin_vendored::protoc_bin_path() {
            Ok(p) => {
                config.protoc_executable(p);
            }
            Err(e) => panic!("no vendored protoc for this platform ({e}); set PROTOC"),
        }
    }
    config
        .compile_protos(&["proto/nri/api.proto"], &["proto/nri"])
        .unwrap_or_else(|e| panic!("compiling proto/nri/api.proto: {e}"));
}
