//! Embeds servesim's `data/perf` tables so the binary is self-contained and gives the same
//! numbers as the browser app, which fetches the same files.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

fn collect(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect(&p, out);
        } else if p.extension().is_some_and(|e| e == "parquet") {
            out.push(p);
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let data = manifest.join("../../data");
    let perf = data.join("perf");
    println!("cargo:rerun-if-changed={}", perf.display());
    let mut files = Vec::new();
    collect(&perf, &mut files);
    let mut src = String::from(
        "/// Embedded data files: (path under data/, bytes).\npub const DATA: &[(&str, &[u8])] = &[\n",
    );
    for p in &files {
        println!("cargo:rerun-if-changed={}", p.display());
        let rel = p.strip_prefix(&data).unwrap_or(p).to_string_lossy().replace('\\', "/");
        let abs = p.canonicalize().unwrap_or(p.clone());
        let _ = writeln!(src, "    ({rel:?}, include_bytes!({:?})),", abs.display().to_string());
    }
    src.push_str("];\n");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_default()).join("data_files.rs");
    if let Err(e) = fs::write(&out, src) {
        panic!("cannot write {}: {e}", out.display());
    }
}
