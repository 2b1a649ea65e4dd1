//! Compiles `src/alloc_options.c`, the mimalloc options the binary sets, against the header of
//! the mimalloc that `libmimalloc-sys` builds (it publishes its include directory to the crates
//! that depend on it).

fn main() {
    println!("cargo:rerun-if-changed=src/alloc_options.c");
    let Ok(include) = std::env::var("DEP_MIMALLOC_INCLUDE_DIR") else {
        // A build script's only way to fail with a message.
        println!("cargo:warning=libmimalloc-sys did not publish its include directory");
        std::process::exit(1);
    };
    cc::Build::new().file("src/alloc_options.c").include(include).compile("kerf_alloc_options");
}
