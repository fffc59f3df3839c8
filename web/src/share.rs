//! Share links: the scenario YAML, deflated and base64url-encoded, in the URL fragment
//! (`#cfg=...`), so a link reproduces the run and nothing is sent to any server (browsers
//! never send the fragment).

use base64::Engine as _;

/// The fragment key.
pub const KEY: &str = "cfg=";

/// Largest scenario a link may carry once inflated (bytes): a guard against zip bombs.
const MAX_INFLATED: usize = 1 << 20;

/// Deflate level: the best ratio; scenarios are a few KB, so speed does not matter.
const LEVEL: u8 = 9;

/// The fragment (without `#`) that carries `yaml`.
#[must_use]
pub fn encode(yaml: &str) -> String {
    let packed = miniz_oxide::deflate::compress_to_vec(yaml.as_bytes(), LEVEL);
    format!("{KEY}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(packed))
}

/// The scenario in a fragment (with or without `#`): `None` when the fragment is not a share
/// link, an error when it is one that cannot be read.
///
/// # Errors
/// When the link is truncated or corrupt.
pub fn decode(fragment: &str) -> Option<Result<String, String>> {
    let body = fragment.strip_prefix('#').unwrap_or(fragment).strip_prefix(KEY)?;
    Some((|| {
        let packed = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(body.trim_end_matches('='))
            .map_err(|e| format!("the share link is damaged (not base64url: {e})"))?;
        let bytes = miniz_oxide::inflate::decompress_to_vec_with_limit(&packed, MAX_INFLATED)
            .map_err(|e| format!("the share link is damaged (cannot inflate: {:?})", e.status))?;
        String::from_utf8(bytes).map_err(|_| "the share link is damaged (not UTF-8 text)".to_string())
    })())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scenario_survives_the_round_trip_and_shrinks() {
        let yaml = servesim_scenario::DEFAULT_SCENARIO;
        let f = encode(yaml);
        assert!(f.len() < yaml.len(), "{} vs {}", f.len(), yaml.len());
        assert!(f.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_=".contains(&b)), "URL-safe");
        assert_eq!(decode(&format!("#{f}")), Some(Ok(yaml.to_string())));
    }

    #[test]
    fn other_fragments_are_ignored_and_damaged_links_are_errors() {
        assert_eq!(decode("#results"), None);
        assert_eq!(decode(""), None);
        let f = encode("engine: {}");
        let cut = &f[..f.len() - 3];
        assert!(decode(cut).unwrap().unwrap_err().contains("damaged"));
        assert!(decode("cfg=!!!").unwrap().unwrap_err().contains("base64"));
    }
}
