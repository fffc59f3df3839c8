//! Page entry point: mounts the app and registers its service worker (offline use).

fn main() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(servesim_web::app::App);
    servesim_web::client::register_service_worker();
}
