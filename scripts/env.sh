# Sourced by the scripts: tool paths and settings shared by build, serve and test.
# npm's wasm-opt (binaryen 132) must win over any Debian one; cargo-installed tools live in
# $CARGO_HOME/bin.
export PATH="$PWD/node_modules/.bin:${CARGO_HOME:-$HOME/.cargo}/bin:$PATH"
export CHROMEDRIVER=/usr/bin/chromedriver
export TRUNK_SKIP_VERSION_CHECK=true
