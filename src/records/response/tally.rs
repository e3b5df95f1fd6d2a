//! What a `response.json` says about its model call, for accounting: the tokens of
//! every usage line of every attempt, and how the newest attempt ended.
//!
//! Lines are read with the parser `response.md` folds ([`super::fold::Event`], brazen's
//! events as litany reads them), so the two never disagree on a line; the compact text
//! deltas that are nearly every line of a long answer take the fast path
//! ([`super::fast::fast_delta`]) and cost no event. [`Tally::feed_line`] takes one
//! complete line, so an appended line costs its own parse and no more.
//!
//! **Tokens, by litany's rule** (`prompt/budget/derive.rs`, ECOSYSTEM §4): each usage
//! line counts `input_total_tokens` when present, else `max(input_tokens,
//! cache_read_tokens + cache_write_tokens)`, plus `output_tokens`; an absent counter is
//! 0; a line that does not parse counts nothing; every attempt counts, failed ones too.
//!
//! **Attempts**, as the fold cuts them: a `message_start` opens one, `end` closes it, and
//! any other event after an `end` opens the next.

use super::fast::{Body, fast_delta, unescape};
use super::fold::{Event, UsageEvent, error_kind};

/// The tokens of one or more usage lines, by kind. `prompt` is litany's input side
/// (the call's whole prompt, cached slices included), so `prompt + output` is what
/// litany's budget counts ([`Tokens::total`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Tokens {
    pub(crate) prompt: u64,
    pub(crate) output: u64,
    pub(crate) cache_read: u64,
    pub(crate) cache_write: u64,
}

impl Tokens {
    /// What litany's budget counts: the prompt side plus the output.
    pub(crate) fn total(&self) -> u64 {
        self.prompt.saturating_add(self.output)
    }

    /// The prompt tokens read neither from nor into a cache.
    pub(crate) fn uncached(&self) -> u64 {
        self.prompt
            .saturating_sub(self.cache_read.saturating_add(self.cache_write))
    }

    pub(crate) fn add(&mut self, o: &Tokens) {
        self.prompt = self.prompt.saturating_add(o.prompt);
        self.output = self.output.saturating_add(o.output);
        self.cache_read = self.cache_read.saturating_add(o.cache_read);
        self.cache_write = self.cache_write.saturating_add(o.cache_write);
    }

    pub(crate) fn sub(&mut self, o: &Tokens) {
        self.prompt = self.prompt.saturating_sub(o.prompt);
        self.output = self.output.saturating_sub(o.output);
        self.cache_read = self.cache_read.saturating_sub(o.cache_read);
        self.cache_write = self.cache_write.saturating_sub(o.cache_write);
    }

    fn of(u: &UsageEvent) -> Tokens {
        let n = |v: Option<u32>| v.map_or(0, u64::from);
        let (cache_read, cache_write) = (n(u.cache_read_tokens), n(u.cache_write_tokens));
        let prompt = match u.input_total_tokens {
            Some(total) => u64::from(total),
            None => n(u.input_tokens).max(cache_read + cache_write),
        };
        Tokens {
            prompt,
            output: n(u.output_tokens),
            cache_read,
            cache_write,
        }
    }
}

/// How the newest attempt went, so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Attempt {
    /// The model its `message_start` named.
    pub(crate) model: Option<String>,
    /// Its last `finish` reason.
    pub(crate) finish: Option<String>,
    /// Its last `error` event, as `<kind>: <message>`.
    pub(crate) error: Option<String>,
    /// Its last usage line's `output_tokens`.
    pub(crate) output_tokens: Option<u64>,
    /// It ended with an `end` event.
    pub(crate) ended: bool,
}

impl Attempt {
    /// It ended cleanly: `end` after a `finish` with no error (litany then commits it).
    /// A finish `length` ends cleanly here too: whether that is at rest is the caller's.
    pub(crate) fn clean(&self) -> bool {
        self.ended && self.finish.is_some() && self.error.is_none()
    }
}

/// What the lines fed so far say (module docs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    /// Every usage line of every attempt.
    pub(crate) tokens: Tokens,
    /// Attempts opened.
    pub(crate) attempts: u32,
    /// The newest attempt; `None` before the first.
    pub(crate) last: Option<Attempt>,
    /// Whether an attempt is open (no `end` since it began).
    open: bool,
}

impl Tally {
    /// Folds one complete line (without its `\n`).
    pub(crate) fn feed_line(&mut self, line: &[u8]) {
        if line.is_empty() {
            return;
        }
        if let Some((_, body)) = fast_delta(line) {
            let parses = match body {
                Body::Plain(_) => true,
                Body::Escaped(text) => {
                    let mut scratch = Vec::new();
                    unescape(text, &mut scratch).is_some()
                }
            };
            if parses {
                self.attempt();
                return;
            }
        }
        let Ok(event) = serde_json::from_slice::<Event>(line) else {
            return;
        };
        match event {
            Event::MessageStart { model, .. } => {
                self.open = false;
                self.attempt().model = model;
            }
            Event::Usage(u) => {
                let t = Tokens::of(&u);
                self.tokens.add(&t);
                if let Some(o) = u.output_tokens {
                    self.attempt().output_tokens = Some(u64::from(o));
                } else {
                    self.attempt();
                }
            }
            Event::Finish { reason, .. } => self.attempt().finish = Some(reason),
            Event::Error { kind, message, .. } => {
                self.attempt().error = Some(format!("{}: {message}", error_kind(&kind)));
            }
            Event::End => {
                self.attempt().ended = true;
                self.open = false;
            }
            Event::ContentStart { .. } | Event::ContentDelta { .. } | Event::ContentStop { .. } => {
                self.attempt();
            }
            Event::Other => {}
        }
    }

    /// Folds every complete line of `bytes`; returns how many bytes that was (the rest
    /// is a line still being written).
    pub(crate) fn feed(&mut self, bytes: &[u8]) -> usize {
        let mut at = 0;
        for end in memchr::memchr_iter(b'\n', bytes) {
            self.feed_line(&bytes[at..end]);
            at = end + 1;
        }
        at
    }

    /// Folds the complete lines of `file` from `offset` to its end, and returns the
    /// offset just past the last (where to go on from once more is written). With
    /// `closed` (nobody appends any more), a last line without its `\n` is folded too,
    /// as litany's budget reads it, and the offset is the file's end.
    pub(crate) fn read(
        &mut self,
        file: &std::fs::File,
        offset: u64,
        closed: bool,
    ) -> std::io::Result<u64> {
        let end = super::each_lines(file, offset, u64::MAX, |lines, _| {
            // A line too long to hold is no usage, finish or error line: nothing to count.
            if let super::Lines::Complete(lines) = lines {
                self.feed(lines);
            }
            std::ops::ControlFlow::Continue(())
        })?;
        if !closed {
            return Ok(end);
        }
        let rest = super::read_exact_at(file, end, super::CHUNK)?;
        if rest.len() == super::CHUNK {
            // A last line longer than a chunk and never ended: no event is that long.
            return Ok(end);
        }
        self.feed_line(&rest);
        Ok(end + rest.len() as u64)
    }

    /// The open attempt, opened if there is none.
    fn attempt(&mut self) -> &mut Attempt {
        if !self.open {
            self.open = true;
            self.attempts += 1;
            self.last = Some(Attempt::default());
        }
        self.last.get_or_insert_with(Attempt::default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tally(text: &str) -> Tally {
        let mut t = Tally::default();
        let used = t.feed(text.as_bytes());
        assert_eq!(used, text.rfind('\n').map_or(0, |i| i + 1));
        t
    }

    #[test]
    fn tokens_follow_litanys_rule_over_every_attempt() {
        let t = tally(concat!(
            "{\"type\":\"message_start\",\"v\":1,\"model\":\"m1\",\"role\":\"assistant\"}\n",
            "{\"type\":\"content_start\",\"index\":0,\"kind\":{\"text\":{}}}\n",
            "{\"type\":\"content_delta\",\"index\":0,\"delta\":{\"text_delta\":\"a\\nb\"}}\n",
            // input_total wins over the parts.
            "{\"type\":\"usage\",\"input_tokens\":5,\"input_total_tokens\":100,\"cache_read_tokens\":90,\"output_tokens\":7}\n",
            "{\"type\":\"error\",\"kind\":\"transport\",\"message\":\"reset\"}\n",
            "{\"type\":\"end\"}\n",
            // No input_total: max(input, read + write).
            "{\"type\":\"message_start\",\"v\":1,\"model\":\"m2\",\"role\":\"assistant\"}\n",
            "{\"type\":\"usage\",\"input_tokens\":3,\"cache_read_tokens\":10,\"cache_write_tokens\":2,\"output_tokens\":4}\n",
            // Does not parse as litany reads it (a negative counter): counts nothing.
            "{\"type\":\"usage\",\"input_tokens\":-1,\"output_tokens\":1000}\n",
            "not json\n",
            "{\"type\":\"usage\",\"output_tokens\":1}\n",
            "{\"type\":\"finish\",\"reason\":\"stop\"}\n",
            "{\"type\":\"end\"}\n",
            "{\"type\":\"usage\",\"input_tokens\":1",
        ));
        assert_eq!(t.tokens.total(), 107 + 12 + 4 + 1);
        assert_eq!(t.tokens.cache_read, 100);
        // 100 - 90 read from the cache, then 12 - (10 + 2).
        assert_eq!(t.tokens.uncached(), 10);
        assert_eq!(t.attempts, 2);
        let last = t.last.clone().unwrap();
        assert_eq!(last.model.as_deref(), Some("m2"));
        assert_eq!(last.finish.as_deref(), Some("stop"));
        assert_eq!(last.output_tokens, Some(1));
        assert!(last.clean());
    }

    #[test]
    fn the_newest_attempt_says_how_the_call_ended() {
        let cut = tally(concat!(
            "{\"type\":\"message_start\",\"v\":1,\"role\":\"assistant\"}\n",
            "{\"type\":\"content_delta\",\"index\":0,\"delta\":{\"text_delta\":\"half\"}}\n",
        ));
        let last = cut.last.unwrap();
        assert!(!last.ended && last.error.is_none() && !last.clean());

        let refused = tally(concat!(
            "{\"type\":\"error\",\"kind\":{\"provider\":{\"status\":401}},\"message\":\"401 Unauthorized\"}\n",
            "{\"type\":\"end\"}\n",
        ));
        let last = refused.last.unwrap();
        assert_eq!(
            last.error.as_deref(),
            Some("provider 401: 401 Unauthorized")
        );
        assert!(last.ended && !last.clean());

        let long = tally(concat!(
            "{\"type\":\"finish\",\"reason\":\"length\"}\n",
            "{\"type\":\"end\"}\n",
            // After an end, any event opens the next attempt.
            "{\"type\":\"content_stop\",\"index\":0}\n",
        ));
        assert_eq!(long.attempts, 2);
        assert_eq!(long.last, Some(Attempt::default()));
        assert_eq!(Tally::default().last, None);
    }
}
