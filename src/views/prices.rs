//! What tokens cost, from a table the operator gives (`--prices FILE`): litany knows no
//! prices, so money is shown only with one, and tokens no rate covers are counted as
//! unpriced, never as free.
//!
//! The file is JSON, an array of rows:
//!
//! ```json
//! [
//!   {"provider": "anthropic", "model": "claude-sonnet-4*", "input": 3, "output": 15,
//!    "cache_read": 0.3, "cache_write": 3.75},
//!   {"provider": "*", "model": "*", "input": 1, "output": 4}
//! ]
//! ```
//!
//! Rates are US dollars per million tokens. `provider` is the provider row a step went
//! through (its `meta.json` `provider`; a step with no `meta.json` has none and only a
//! `*` row prices it); `model` the model its attempt's `message_start` names. Each is
//! exact, a prefix ending in `*`, or `*` alone; the most specific row wins (an exact
//! provider over `*`, then an exact model over the longest prefix over `*`). A row that
//! leaves a rate out prices none of those tokens: they are unpriced. The prompt side is
//! litany's (cached slices included, [`crate::records::Tokens`]): its uncached part is
//! priced at `input`, its cache reads at `cache_read`, its cache writes at
//! `cache_write`.

use std::path::Path;
use std::sync::Arc;

use super::model::spend::Payer;
use crate::records::Tokens;

/// One row of the table.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rate {
    pub(crate) provider: String,
    pub(crate) model: String,
    #[serde(default)]
    pub(crate) input: Option<f64>,
    #[serde(default)]
    pub(crate) output: Option<f64>,
    #[serde(default)]
    pub(crate) cache_read: Option<f64>,
    #[serde(default)]
    pub(crate) cache_write: Option<f64>,
}

/// The price table.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct Prices {
    rates: Vec<Rate>,
}

/// What some tokens cost: dollars for those a rate covers, and how many none did.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Cost {
    pub(crate) usd: f64,
    pub(crate) unpriced_tokens: u64,
}

impl Cost {
    pub(crate) fn add(&mut self, o: &Cost) {
        self.usd += o.usd;
        self.unpriced_tokens = self.unpriced_tokens.saturating_add(o.unpriced_tokens);
    }
}

/// How well `pattern` matches `value` (`None`: not at all); higher is more specific.
fn specificity(pattern: &str, value: Option<&str>) -> Option<usize> {
    if pattern == "*" {
        return Some(0);
    }
    let value = value?;
    match pattern.strip_suffix('*') {
        Some(prefix) => value.starts_with(prefix).then_some(1 + prefix.len()),
        None => (value == pattern).then_some(usize::MAX),
    }
}

/// The table `--prices` names, if it names one; the reason when it cannot be read.
pub(crate) fn for_mount(path: Option<&Path>) -> Result<Option<Arc<Prices>>, String> {
    path.map(|p| Prices::load(p).map(Arc::new))
        .transpose()
        .map_err(|e| format!("--prices: {e}"))
}

impl Prices {
    /// Reads the table at `path`; a clear reason when it cannot.
    pub(crate) fn load(path: &Path) -> Result<Prices, String> {
        let text = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub(crate) fn parse(text: &[u8]) -> Result<Prices, String> {
        let rates: Vec<Rate> = serde_json::from_slice(text).map_err(|e| {
            format!("not a price table ({e}); expected a JSON array of {{provider, model, input, output, cache_read, cache_write}}")
        })?;
        for r in &rates {
            let all = [r.input, r.output, r.cache_read, r.cache_write];
            if all.iter().flatten().any(|v| !v.is_finite() || *v < 0.0) {
                return Err(format!(
                    "the rates of {}/{} must be numbers of dollars per million tokens, 0 or more",
                    r.provider, r.model
                ));
            }
        }
        Ok(Prices { rates })
    }

    /// The row that prices what `payer` spent, if any.
    pub(crate) fn rate(&self, (provider, model): &Payer) -> Option<&Rate> {
        self.rates
            .iter()
            .filter_map(|r| {
                let p = specificity(&r.provider, provider.as_deref())?;
                let m = specificity(&r.model, model.as_deref())?;
                Some(((p, m), r))
            })
            .max_by_key(|(k, _)| *k)
            .map(|(_, r)| r)
    }

    /// What `t`, spent by `payer`, costs.
    pub(crate) fn cost(&self, payer: &Payer, t: &Tokens) -> Cost {
        let rate = self.rate(payer);
        let mut c = Cost::default();
        let parts = [
            (t.uncached(), rate.and_then(|r| r.input)),
            (t.cache_read, rate.and_then(|r| r.cache_read)),
            (t.cache_write, rate.and_then(|r| r.cache_write)),
            (t.output, rate.and_then(|r| r.output)),
        ];
        for (n, per_million) in parts {
            match per_million {
                Some(r) => c.usd += n as f64 * r / 1e6,
                None => c.unpriced_tokens = c.unpriced_tokens.saturating_add(n),
            }
        }
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn payer(p: Option<&str>, m: Option<&str>) -> Payer {
        (p.map(Arc::from), m.map(Arc::from))
    }

    #[test]
    fn the_most_specific_row_prices_and_no_rate_is_never_free() {
        let prices = Prices::parse(
            br#"[
              {"provider": "*", "model": "*", "input": 1, "output": 2},
              {"provider": "anthropic", "model": "*", "input": 3, "output": 15},
              {"provider": "anthropic", "model": "claude-sonnet-4*", "input": 3, "output": 15, "cache_read": 0.3, "cache_write": 3.75},
              {"provider": "anthropic", "model": "claude-sonnet-4-5", "input": 4, "output": 16, "cache_read": 0.4, "cache_write": 4}
            ]"#,
        )
        .unwrap();
        let t = Tokens {
            prompt: 1_000_000,
            output: 100_000,
            cache_read: 500_000,
            cache_write: 100_000,
        };
        let exact = prices.cost(&payer(Some("anthropic"), Some("claude-sonnet-4-5")), &t);
        assert!((exact.usd - (0.4 * 4.0 + 0.5 * 0.4 + 0.1 * 4.0 + 0.1 * 16.0)).abs() < 1e-9);
        assert_eq!(exact.unpriced_tokens, 0);
        let prefix = prices.cost(&payer(Some("anthropic"), Some("claude-sonnet-4-1")), &t);
        assert!((prefix.usd - (0.4 * 3.0 + 0.5 * 0.3 + 0.1 * 3.75 + 0.1 * 15.0)).abs() < 1e-9);
        // The provider's `*` row has no cache rates: those tokens are unpriced.
        let other = prices.cost(&payer(Some("anthropic"), Some("opus")), &t);
        assert_eq!(other.unpriced_tokens, 600_000);
        assert!((other.usd - (0.4 * 3.0 + 0.1 * 15.0)).abs() < 1e-9);
        // No provider known: only a `*` provider row applies.
        let unknown = prices.cost(&payer(None, Some("claude-sonnet-4-5")), &t);
        assert!((unknown.usd - (0.4 + 0.2)).abs() < 1e-9);
        let none = Prices::default().cost(&payer(None, None), &t);
        assert_eq!((none.usd, none.unpriced_tokens), (0.0, t.total()));
    }

    #[test]
    fn a_bad_table_is_refused_with_its_reason() {
        assert!(Prices::parse(b"{}").unwrap_err().contains("JSON array"));
        assert!(Prices::parse(br#"[{"provider":"a","model":"b","input":-1}]"#).is_err());
        assert!(Prices::parse(br#"[{"provider":"a","model":"b","inputs":1}]"#).is_err());
        assert_eq!(Prices::parse(b"[]").unwrap(), Prices::default());
    }
}
