//! What a failed model call's text says about why it failed: whether the provider
//! turned the credentials down (ECOSYSTEM §3, as yog tells it). The attention signals
//! (`refused`) and the transcript's wound both ask here, so they always agree.

/// Words in a failure's text that mean the provider turned the credentials down
/// (ECOSYSTEM §3), matched case-insensitively; each a prefix of a word, so
/// `authenticat` covers `authentication` and `authenticate`.
pub(crate) const AUTH_WORDS: [&str; 9] = [
    "401",
    "403",
    "unauthori",
    "forbidden",
    "credential",
    "authenticat",
    "authoriz",
    "authoris",
    "api key",
];

/// Whether a failure's text names an auth failure: one of [`AUTH_WORDS`] at the start
/// of a word (a number standing alone), or an error of kind `auth`.
pub(crate) fn refusal(text: &str) -> bool {
    let t = text.to_ascii_lowercase().replace(['_', '-'], " ");
    if t.starts_with("auth:") {
        return true;
    }
    AUTH_WORDS.iter().any(|w| {
        t.match_indices(w).any(|(at, _)| {
            let before = t[..at].chars().next_back();
            let after = t[at + w.len()..].chars().next();
            let starts = before.is_none_or(|c| !c.is_ascii_alphanumeric());
            let number = w.bytes().all(|b| b.is_ascii_digit());
            starts && !(number && after.is_some_and(|c| c.is_ascii_alphanumeric()))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auth_failures_are_told_by_their_words() {
        for yes in [
            "provider 401: 401 Unauthorized",
            "HTTP 403 Forbidden",
            "auth: no key",
            "invalid x-api-key",
            "Invalid API key provided",
            "missing credentials for anthropic",
            "Authentication failed",
            "not authorised",
            "invalid_api_key",
        ] {
            assert!(refusal(yes), "{yes}");
        }
        for no in [
            "provider 503: overloaded",
            "transport: connection reset",
            "read 14013 bytes",
            "4010 tokens",
            "co-author",
            "",
        ] {
            assert!(!refusal(no), "{no}");
        }
    }
}
