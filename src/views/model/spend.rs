//! Spend: the tokens, wall time and steps of each agent's step records, kept in a
//! [`Ledger`] that reads each finished step once.
//!
//! **The rule is litany's** (`prompt/budget/derive.rs`, ECOSYSTEM §4): tokens are every
//! usage line of every attempt of every `response.json` ([`crate::records::Tally`]);
//! wall time is each step's `meta.json` `ended_at - started_at` (no `meta.json`, no
//! time); only step directories named by exactly three digits count, as litany counts
//! them (so steps 1000 and on, which litany's budget does not see, are not counted
//! either).
//!
//! **Incremental.** A step is *settled* once it has a `meta.json` or a later step
//! exists: its model call is over and its `response.json` never grows again. A settled
//! step is read once, and its cost is added to its agent's running totals; after that
//! only a change to the listing of `steps/<id>` (a step came or went) makes the ledger
//! look at the list again. The one unsettled step of an agent, its highest, is read
//! from where the last read stopped, only when its size moved. So the cost of a look
//! does not grow with the number of finished steps, and one appended line costs the
//! parse of that line.
//!
//! One ledger serves every scanner of a workspace's views (the follower, `status`, the
//! history), so each record is read once whoever asks first.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use super::steps::{Meta, Step, StepList, read_meta};
use crate::FastMap;
use crate::records::{Attempt, Tally, Tokens};
use crate::workspace::STEPS_DIR;
use crate::workspace::backing::Backing;
use crate::workspace::steps::{META_FILE, RESPONSE_FILE, STDERR_FILE};

/// How much of the end of a `stderr.log` is kept as a failure's text.
pub(crate) const STDERR_TAIL_BYTES: u64 = 2048;

/// Whether litany's budget counts the step directory named `name` (module docs).
pub(crate) fn counted(name: &str) -> bool {
    name.len() == 3 && name.bytes().all(|b| b.is_ascii_digit())
}

/// The provider (`meta.json`'s `provider`) and the model (the attempt's
/// `message_start`) that spent some tokens: what a price is looked up by.
pub(crate) type Payer = (Option<Arc<str>>, Option<Arc<str>>);

/// What some steps cost.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Spend {
    /// Tokens by litany's rule.
    pub(crate) tokens: u64,
    pub(crate) wall_seconds: u64,
    /// Step directories counted.
    pub(crate) steps: u64,
    /// The tokens by who spent them, for pricing.
    pub(crate) by_payer: Vec<(Payer, Tokens)>,
}

impl Spend {}

fn add_to<K: PartialEq + Clone>(v: &mut Vec<(K, Tokens)>, k: &K, t: &Tokens) {
    match v.iter_mut().find(|(p, _)| p == k) {
        Some((_, sum)) => sum.add(t),
        None => v.push((k.clone(), *t)),
    }
}

/// One settled step's cost and how its call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct StepCost {
    pub(crate) tokens: Tokens,
    pub(crate) wall_seconds: u64,
    /// Its last attempt's finish reason and output tokens (for `step-finished`).
    pub(crate) finish: Option<Arc<str>>,
    pub(crate) output_tokens: Option<u64>,
    payer: u32,
    counted: bool,
}

/// What an agent's steps say: its spend, and how its highest step's newest attempt
/// went (with the tail of that step's `stderr.log` when the attempt failed without an
/// `error` event).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Account {
    pub(crate) spend: Spend,
    /// The highest step's number, and its newest attempt (`None`: no attempt yet).
    pub(crate) last: Option<(u64, Option<Attempt>)>,
    pub(crate) stderr: Option<String>,
}

/// The highest step while its call may still be streaming.
#[derive(Debug, Clone)]
struct Open {
    n: u64,
    ino: u64,
    /// The size last read to, and the offset past the last complete line read.
    seen: u64,
    offset: u64,
    tally: Tally,
}

#[derive(Debug, Default)]
struct Dir {
    /// The listing last looked at (the same `Arc` while `steps/<id>` is unchanged).
    list: Option<StepList>,
    settled: BTreeMap<u64, StepCost>,
    /// Sums over the settled steps that count.
    by_payer: Vec<(u32, Tokens)>,
    wall: u64,
    counted_listed: u64,
    open: Option<Open>,
    /// The newest attempt of the highest settled step.
    last_settled: Option<(u64, Option<Attempt>)>,
    /// The last `stderr.log` tail read: its (ino, size), its text.
    stderr: Option<((u64, u64), String)>,
    account: Option<Arc<Account>>,
    /// The latest step `account` was made with.
    latest: Option<Arc<Step>>,
}

/// The spend of every agent of a workspace (module docs).
#[derive(Debug, Default)]
pub(crate) struct Ledger {
    dirs: FastMap<String, Dir>,
    payers: Vec<Payer>,
    payer_ids: FastMap<Payer, u32>,
    words: FastMap<String, Arc<str>>,
}

impl Ledger {
    fn word(&mut self, w: Option<&str>) -> Option<Arc<str>> {
        let w = w?;
        if let Some(a) = self.words.get(w) {
            return Some(a.clone());
        }
        let a: Arc<str> = w.into();
        self.words.insert(w.to_string(), a.clone());
        Some(a)
    }

    fn payer(&mut self, provider: Option<&str>, model: Option<&str>) -> u32 {
        let p = (self.word(provider), self.word(model));
        if let Some(i) = self.payer_ids.get(&p) {
            return *i;
        }
        let i = self.payers.len() as u32;
        self.payers.push(p.clone());
        self.payer_ids.insert(p, i);
        i
    }

    /// Forgets every agent `keep` says no.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&str) -> bool) {
        self.dirs.retain(|id, _| keep(id));
    }

    /// The cost of settled step `n` (directory `dir`, whose `meta.json` reads `meta`) of
    /// agent `id`: read now if it was not before, else as it was read.
    pub(crate) fn step(
        &mut self,
        backing: &Backing,
        id: &str,
        n: u64,
        dir: &str,
        meta: &Meta,
    ) -> StepCost {
        if let Some(c) = self.dirs.get(id).and_then(|d| d.settled.get(&n)) {
            return c.clone();
        }
        self.settle(backing, id, n, dir, Some(meta))
    }

    /// Reads step `n` whole (from where the open step was, if it is that one) and
    /// settles it.
    fn settle(
        &mut self,
        backing: &Backing,
        id: &str,
        n: u64,
        dir: &str,
        meta: Option<&Meta>,
    ) -> StepCost {
        let rel = Path::new(STEPS_DIR).join(id).join(dir);
        let read;
        let meta = match meta {
            Some(m) => m,
            None => {
                read = match backing.lstat(&rel.join(META_FILE)) {
                    Ok(_) => read_meta(backing, &rel.join(META_FILE)),
                    Err(_) => Meta::Missing,
                };
                &read
            }
        };
        let open = self
            .dirs
            .get_mut(id)
            .and_then(|d| d.open.take_if(|o| o.n == n));
        let mut tally = Tally::default();
        if let Ok((f, st)) = backing.open_file(&rel.join(RESPONSE_FILE)) {
            let from = match open {
                Some(o) if o.ino == st.ino => {
                    tally = o.tally;
                    o.offset
                }
                _ => 0,
            };
            if let Err(e) = tally.read(&f, from, true) {
                log::debug!("spend: {}: {e}", rel.join(RESPONSE_FILE).display());
            }
        }
        let (wall, provider) = match meta {
            Meta::Done {
                started,
                ended,
                provider,
                ..
            } => (wall(*started, *ended), provider.as_deref()),
            _ => (0, None),
        };
        let model = tally.last.as_ref().and_then(|a| a.model.clone());
        let payer = self.payer(provider, model.as_deref());
        let last = tally.last.clone();
        let cost = StepCost {
            tokens: tally.tokens,
            wall_seconds: wall,
            finish: self.word(last.as_ref().and_then(|a| a.finish.as_deref())),
            output_tokens: last.as_ref().and_then(|a| a.output_tokens),
            payer,
            counted: counted(dir),
        };
        let Some(d) = dir_of(&mut self.dirs, id) else {
            return cost;
        };
        if cost.counted {
            add_to(&mut d.by_payer, &payer, &cost.tokens);
            d.wall = d.wall.saturating_add(cost.wall_seconds);
        }
        if d.last_settled.as_ref().is_none_or(|(m, _)| *m <= n) {
            d.last_settled = Some((n, last));
        }
        d.settled.insert(n, cost.clone());
        d.account = None;
        cost
    }

    /// The account of agent `id`, whose step directories are `steps` and whose highest
    /// step, read now, is `latest` (module docs).
    pub(crate) fn account(
        &mut self,
        backing: &Backing,
        id: &str,
        steps: &StepList,
        latest: Option<&Arc<Step>>,
    ) -> Arc<Account> {
        // An idle agent: the same listing and the same latest step (both shared while
        // nothing under them moved) as when its account was made. One lookup, no copy.
        if let Some(d) = self.dirs.get(id)
            && let Some(a) = &d.account
            && d.list
                .as_ref()
                .is_some_and(|l| Arc::ptr_eq(l, steps) || (l.is_empty() && steps.is_empty()))
            && same(d.latest.as_ref(), latest)
        {
            return a.clone();
        }
        let account = self.account_afresh(backing, id, steps, latest.map(|l| &**l));
        if let Some(d) = self.dirs.get_mut(id) {
            d.latest = latest.cloned();
        }
        account
    }

    fn account_afresh(
        &mut self,
        backing: &Backing,
        id: &str,
        steps: &StepList,
        latest: Option<&Step>,
    ) -> Arc<Account> {
        let Some(d) = dir_of(&mut self.dirs, id) else {
            return Arc::default();
        };
        let highest = steps
            .iter()
            .next_back()
            .map(|(n, name)| (*n, name.get(*n).into_owned()));
        if d.list.as_ref().is_none_or(|l| !Arc::ptr_eq(l, steps)) {
            let gone: Vec<u64> = d
                .settled
                .keys()
                .filter(|n| !steps.contains_key(n))
                .copied()
                .collect();
            for n in gone {
                if let Some(c) = d.settled.remove(&n)
                    && c.counted
                {
                    if let Some((_, sum)) = d.by_payer.iter_mut().find(|(p, _)| *p == c.payer) {
                        sum.sub(&c.tokens);
                    }
                    d.wall = d.wall.saturating_sub(c.wall_seconds);
                }
            }
            if d.last_settled
                .as_ref()
                .is_some_and(|(n, _)| !steps.contains_key(n))
            {
                d.last_settled = None;
            }
            if d.open.as_ref().is_some_and(|o| !steps.contains_key(&o.n)) {
                d.open = None;
            }
            d.counted_listed = steps
                .iter()
                .filter(|(n, name)| counted(&name.get(**n)))
                .count() as u64;
            let below: Vec<(u64, String)> = steps
                .iter()
                .filter(|(n, _)| highest.as_ref().is_some_and(|(h, _)| *n < h))
                .filter(|(n, _)| !d.settled.contains_key(n))
                .map(|(n, name)| (*n, name.get(*n).into_owned()))
                .collect();
            d.list = Some(steps.clone());
            d.account = None;
            for (n, dir) in below {
                self.settle(backing, id, n, &dir, None);
            }
        }
        if let Some((h, dir)) = &highest {
            self.highest(backing, id, *h, dir, latest);
        }
        let Some(d) = dir_of(&mut self.dirs, id) else {
            return Arc::default();
        };
        if let Some(a) = &d.account {
            return a.clone();
        }
        let mut spend = Spend {
            wall_seconds: d.wall,
            steps: d.counted_listed,
            ..Spend::default()
        };
        for (p, t) in &d.by_payer {
            if let Some(payer) = self.payers.get(*p as usize) {
                add_to(&mut spend.by_payer, payer, t);
            }
        }
        let last = match (&d.open, &highest) {
            (Some(o), Some((h, _))) if o.n == *h => Some((o.n, o.tally.last.clone())),
            _ => d
                .last_settled
                .clone()
                .filter(|(n, _)| Some(*n) == highest.as_ref().map(|h| h.0)),
        };
        if let Some(o) = d.open.as_ref().filter(|o| counted(&step_name(steps, o.n))) {
            let model = o.tally.last.as_ref().and_then(|a| a.model.as_deref());
            let payer = (None, model.map(Arc::from));
            add_to(&mut spend.by_payer, &payer, &o.tally.tokens);
        }
        spend.tokens = spend
            .by_payer
            .iter()
            .map(|(_, t)| t.total())
            .fold(0, u64::saturating_add);
        let stderr = d
            .stderr
            .as_ref()
            .map(|(_, s)| s.clone())
            .filter(|s| !s.is_empty());
        let a = Arc::new(Account {
            spend,
            last,
            stderr,
        });
        d.account = Some(a.clone());
        a
    }

    /// Brings the highest step `h` (directory `dir`) up to date: settled once its
    /// `meta.json` is written, else read from where the last read stopped.
    fn highest(&mut self, backing: &Backing, id: &str, h: u64, dir: &str, latest: Option<&Step>) {
        let Some(s) = latest.filter(|s| s.number == h) else {
            return;
        };
        let settled = self
            .dirs
            .get(id)
            .is_some_and(|d| d.settled.contains_key(&h));
        if !settled {
            if !matches!(s.meta, Meta::Missing) {
                self.settle(backing, id, h, dir, Some(&s.meta));
            } else {
                self.stream(backing, id, h, dir, s);
            }
        }
        self.stderr_tail(backing, id, dir, s);
    }

    /// Reads what was appended to the open step `h`'s `response.json` since the last read.
    fn stream(&mut self, backing: &Backing, id: &str, h: u64, dir: &str, s: &Step) {
        let Some(d) = dir_of(&mut self.dirs, id) else {
            return;
        };
        let Some((ino, size)) = s.response else {
            if !d.open.as_ref().is_some_and(|o| o.n == h && o.ino == 0) {
                d.open = Some(Open {
                    n: h,
                    ino: 0,
                    seen: 0,
                    offset: 0,
                    tally: Tally::default(),
                });
                d.account = None;
            }
            return;
        };
        if let Some(o) = &d.open
            && o.n == h
            && o.ino == ino
            && o.seen == size
        {
            return;
        }
        let mut o = match d.open.take() {
            Some(o) if o.n == h && o.ino == ino && o.offset <= size => o,
            _ => Open {
                n: h,
                ino,
                seen: 0,
                offset: 0,
                tally: Tally::default(),
            },
        };
        let rel = Path::new(STEPS_DIR).join(id).join(dir).join(RESPONSE_FILE);
        match backing.open_file(&rel) {
            Ok((f, st)) if st.ino == ino => match o.tally.read(&f, o.offset, false) {
                Ok(end) => {
                    o.offset = end;
                    o.seen = size;
                }
                Err(e) => log::debug!("spend: {}: {e}", rel.display()),
            },
            Ok(_) => {}
            Err(e) => log::debug!("spend: {}: {e}", rel.display()),
        }
        d.open = Some(o);
        d.account = None;
    }

    /// Keeps the tail of the highest step's `stderr.log` while it has one: the failure's
    /// text when the newest attempt failed without an `error` event.
    fn stderr_tail(&mut self, backing: &Backing, id: &str, dir: &str, s: &Step) {
        let Some(d) = dir_of(&mut self.dirs, id) else {
            return;
        };
        let want = s.stderr.filter(|(_, size)| *size > 0);
        if d.stderr.as_ref().map(|(k, _)| *k) == want {
            return;
        }
        d.account = None;
        let Some((ino, size)) = want else {
            d.stderr = None;
            return;
        };
        let rel = Path::new(STEPS_DIR).join(id).join(dir).join(STDERR_FILE);
        let text = backing
            .open_file(&rel)
            .and_then(|(f, _)| {
                use std::os::unix::fs::FileExt;
                let from = size.saturating_sub(STDERR_TAIL_BYTES);
                let mut buf = vec![0u8; (size - from) as usize];
                let n = f.read_at(&mut buf, from)?;
                buf.truncate(n);
                Ok(String::from_utf8_lossy(&buf).trim().to_string())
            })
            .unwrap_or_default();
        d.stderr = Some(((ino, size), text));
    }
}

/// Agent `id`'s records in `dirs`, made empty if there are none, without allocating
/// when there are (this is on every look's path). `None` only if the map refused the
/// insert, which it cannot.
fn dir_of<'a>(dirs: &'a mut FastMap<String, Dir>, id: &str) -> Option<&'a mut Dir> {
    if !dirs.contains_key(id) {
        dirs.insert(id.to_string(), Dir::default());
    }
    dirs.get_mut(id)
}

/// Whether two latest steps are the same read (the scanner shares one while it stands).
fn same(a: Option<&Arc<Step>>, b: Option<&Arc<Step>>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => Arc::ptr_eq(a, b),
        (None, None) => true,
        _ => false,
    }
}

fn step_name(steps: &StepList, n: u64) -> String {
    steps
        .get(&n)
        .map(|s| s.get(n).into_owned())
        .unwrap_or_default()
}

/// A step's wall seconds as litany counts them: `ended - started`, never below 0; no
/// time without both.
pub(crate) fn wall(started: Option<i64>, ended: Option<i64>) -> u64 {
    match (started, ended) {
        (Some(s), Some(e)) => (e - s).max(0) as u64,
        _ => 0,
    }
}
