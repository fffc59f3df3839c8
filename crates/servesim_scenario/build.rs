//! Embeds the catalog files under `data/catalog` so the CLI and the browser app carry the
//! same data (and give the same numbers) without reading the filesystem at run time.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::{env, fs};

fn collect(dir: &Path, root: &Path, out: &mut Vec<(String, PathBuf)>) {
    let Ok(entries) = fs::read_dir(dir) else { return };
    let mut paths: Vec<PathBuf> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    for p in paths {
        if p.is_dir() {
            collect(&p, root, out);
        } else if p.extension().is_some_and(|e| e == "json") {
            let id =
                p.strip_prefix(root).unwrap_or(&p).with_extension("").to_string_lossy().replace('\\', "/");
            out.push((id, p));
        }
    }
}

fn main() {
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap_or_default());
    let data = manifest.join("../../data");
    let models_dir = data.join("catalog/models");
    println!("cargo:rerun-if-changed={}", data.join("catalog").display());
    let mut models = Vec::new();
    collect(&models_dir, &models_dir, &mut models);
    for (_, p) in &models {
        println!("cargo:rerun-if-changed={}", p.display());
    }
    let mut src = String::from(
        "/// Built-in model configs: (model id, config.json text).\npub const MODELS: &[(&str, &str)] = &[\n",
    );
    for (id, p) in &models {
        let _ = writeln!(
            src,
            "    ({id:?}, include_str!({:?})),",
            p.canonicalize().unwrap_or(p.clone()).display().to_string()
        );
    }
    src.push_str("];\n");
    let aliases = models_dir.join("aliases.yaml");
    println!("cargo:rerun-if-changed={}", aliases.display());
    let _ = writeln!(
        src,
        "/// Model id aliases (YAML).\npub const ALIASES: &str = include_str!({:?});",
        aliases.canonicalize().unwrap_or(aliases.clone()).display().to_string()
    );
    let hw = data.join("catalog/hardware.yaml");
    println!("cargo:rerun-if-changed={}", hw.display());
    let _ = writeln!(
        src,
        "/// Built-in hardware catalog (YAML).\npub const HARDWARE: &str = include_str!({:?});",
        hw.canonicalize().unwrap_or(hw.clone()).display().to_string()
    );
    let out = PathBuf::from(env::var("OUT_DIR").unwrap_or_default()).join("catalog_files.rs");
    if let Err(e) = fs::write(&out, src) {
        panic!("cannot write {}: {e}", out.display());
    }
}
