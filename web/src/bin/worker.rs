//! Worker entry point: runs scenarios posted by the page.

fn main() {
    servesim_web::client::worker_main();
}
