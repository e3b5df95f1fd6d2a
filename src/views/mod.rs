//! The workspace at a glance: `status`, `status.json`, `events` and `events.ndjson` at
//! the mount root, made here without FUSE.
//!
//! | module | what it decides |
//! |---|---|
//! | [`model`] | the facts: agents, names, marks, locks, inboxes, each agent's newest step |
//! | [`status`] | the rows of `status` and their two renderings |
//! | [`event`] | one event and its two renderings |
//! | [`log`] | the bounded append-only log both events files read |
//! | [`history`] | what happened before the mount, from the records |
//! | [`follow`] | what happens while mounted, as differences between two models |
//!
//! [`Views`] ties them together. One thread, `litanyfs-events`, gathers the first
//! model, hands it to a second, `litanyfs-history`, to reconstruct the past at the lowest
//! CPU priority (so that it does not slow the requests it runs beside), and then
//! rescans whenever [`Views::poke`] is called (the watcher's change reports) and at
//! least every [`TICK`] while things happen, every [`IDLE_TICK`] once they stop
//! ([`idle_wait`]), so an event is seen within a second even in a directory nobody
//! watches. After each look it rests in proportion to what the look cost
//! ([`look_rest`]), so a burst of changes is answered by one look, not one per change. Live events found while history is still being reconstructed wait and are
//! appended after it, in order. Under `--agent ID` only what ID may see is logged.

pub(crate) mod event;
pub mod follow;
pub(crate) mod history;
pub(crate) mod log;
pub mod model;
pub(crate) mod pool;
pub(crate) mod prices;
pub(crate) mod signal;
pub(crate) mod starts;
pub mod status;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use crate::workspace::clock::now_secs;
use event::{Event, Kind};
use model::{Model, Scanner};

pub(crate) use log::{EventLog, Rendering};

/// The longest the follower sleeps between two looks at the workspace while things
/// happen.
pub(crate) const TICK: Duration = Duration::from_millis(250);

/// The longest it sleeps once looks find nothing and nobody pokes it ([`idle_wait`]): a
/// change in a directory no watch covers is still seen within a second, and an idle
/// mount of 2,000 agents pays a third of the looks.
pub(crate) const IDLE_TICK: Duration = Duration::from_millis(750);

/// How many scanners `status` and `attention` are gathered with, each keeping what it
/// parsed from one reading to the next. A reader who finds every one busy waits for one
/// rather than reading the workspace with a fresh scanner: at 130 agents that was 150 ms
/// of CPU against 7 ms, and under load the waits for a CPU it made ran past seconds.
/// Two, so that one slow reading (a streaming record being parsed) holds up no other.
pub(crate) const STATUS_SCANNERS: usize = 2;

/// How long the follower waits for a poke after `quiet` looks in a row that found
/// nothing and were not poked: [`TICK`], doubling with each, up to [`IDLE_TICK`].
pub(crate) fn idle_wait(quiet: u32) -> Duration {
    TICK.saturating_mul(1 << quiet.min(8)).min(IDLE_TICK)
}

/// How many times its own length the follower rests after a look before it looks again,
/// however often it is poked: a run of changes (a client depositing in a loop, a harness
/// streaming) then costs the follower at most a fifth of one CPU, instead of a full
/// rescan per change competing with the requests that make them.
pub(crate) const LOOK_REST_FACTOR: u32 = 4;

/// The shortest rest between two looks (see [`LOOK_REST_FACTOR`]).
pub(crate) const LOOK_REST_MIN: Duration = Duration::from_millis(10);

/// The rest after a look that took `took`: proportional to it, and never so long that a
/// change waits more than a [`TICK`] beyond its look.
pub(crate) fn look_rest(took: Duration) -> Duration {
    (took * LOOK_REST_FACTOR).clamp(LOOK_REST_MIN, TICK)
}

/// Lowers the calling thread to the lowest CPU priority (nice 19): the history is read
/// once, in the background, and must not slow the requests it competes with (a first
/// walk of the mount starts as the history does and reads the same directories).
fn background() {
    // SAFETY: gettid takes no argument; setpriority on the calling thread's own id.
    let r = unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, 19)
    };
    if r != 0 {
        ::log::debug!(
            "events: history keeps its priority ({})",
            std::io::Error::last_os_error()
        );
    }
}

/// A new agent branch that still points at its config commit is not there yet: litany
/// creates `refs/heads/agents/<id>` at the config commit and moves it to the dispatch
/// commit (which holds `goal.md` and the `name`) a moment later, so its creation is
/// reported once it is born, with its name.
fn hold_unborn_agents(scanner: &Scanner, old: &Model, next: &mut Model) {
    let unborn: Vec<String> = next
        .agents
        .iter()
        .filter(|(id, _)| !old.agents.contains_key(*id))
        .filter(|(_, a)| {
            // The tip alone: stop at its parent.
            let mut seen = 0;
            let log = scanner.refs().first_parent_log(a.tip, &mut |_| {
                seen += 1;
                seen > 1
            });
            log.is_ok_and(|(l, _)| {
                l.first()
                    .is_some_and(|c| crate::workspace::refs::subject::is_config(&c.summary))
            })
        })
        .map(|(id, _)| id.clone())
        .collect();
    for id in unborn {
        next.agents.remove(&id);
    }
}

/// How long a deposit reported by the hook is remembered for the follower to skip.
const REPORTED_KEEP: Duration = Duration::from_secs(60);

/// The view files at the root, by name.
pub(crate) const STATUS: &str = "status";
pub(crate) const STATUS_JSON: &str = "status.json";
pub(crate) const EVENTS: &str = "events";
pub(crate) const EVENTS_NDJSON: &str = "events.ndjson";
pub(crate) const ATTENTION: &str = "attention";
pub(crate) const ATTENTION_JSON: &str = "attention.json";

/// The longest an open of `events` waits for the history to be reconstructed, so that a
/// `cat` right after the mount reads it whole; past that it reads what there is (and the
/// daemon logs that it did).
pub(crate) const HISTORY_WAIT: Duration = Duration::from_secs(10);

/// The deposits made through this mount, so the follower neither races nor repeats
/// them.
#[derive(Default)]
struct Deposits {
    /// Recipients with a deposit under way: their inboxes are not diffed meanwhile.
    busy: crate::FastMap<String, usize>,
    /// (recipient, file, inode) already reported by the deposit hook, and when: kept
    /// [`REPORTED_KEEP`] at most (a deposit drained before the follower looked is never
    /// seen by it), so this stays small and a reused name is a new deposit.
    reported: crate::FastMap<(String, String, u64), Instant>,
    /// `woken` events of a recipient whose deposit is not reported yet: the wake runs on
    /// a thread of its own and may launch before the deposit's close returns.
    woken: Vec<Event>,
}

/// The views of one mount (module docs).
pub(crate) struct Views {
    root: std::path::PathBuf,
    confined: Option<String>,
    log: EventLog,
    /// `Some` while history is being reconstructed: the live events found meanwhile.
    waiting: Mutex<Option<Vec<Event>>>,
    poked: Mutex<bool>,
    wake: Condvar,
    deposits: Mutex<Deposits>,
    /// Conversations being started through this mount ([`starts`]).
    starts: Mutex<starts::Starts>,
    /// What `status` is gathered with ([`STATUS_SCANNERS`]), each made at its first use,
    /// and which one a reader who finds them all busy waits for.
    status_scanners: [Mutex<Option<Scanner>>; STATUS_SCANNERS],
    status_turn: std::sync::atomic::AtomicUsize,
    /// How many scanners were made: each reads the workspace from nothing.
    scanners_made: std::sync::atomic::AtomicUsize,
    /// The last names seen, for events the hooks make.
    names: Mutex<crate::FastMap<String, String>>,
    /// How many watches report every change to the refs ([`Views::refs_watched`]): a
    /// count, since a home's workspace may be closed and opened again, and the closing
    /// tree's watch may end after the new one's began.
    refs_watched: AtomicUsize,
    /// Whether a change to the refs was reported since the follower last read them.
    refs_moved: AtomicBool,
    /// Whether a home's pool watches every directory a ref moves in ([`pool`]): a move
    /// pokes as a tree's watch does, so a look need not read the refs unless told.
    refs_topped: AtomicBool,
    /// The length of the last `status`, `status.json`, `attention` and `attention.json`
    /// made: what a `stat` says before an open makes a new one (reads are direct, so a
    /// reader always gets all).
    status_lens: [AtomicU64; 4],
    /// On a home mount, the root's log, which shows every event of this workspace too.
    tee: Mutex<Option<Teed>>,
    /// On a home mount, the pool that follows these views ([`pool`]): a poke wakes it.
    pool: std::sync::OnceLock<Arc<pool::Wake>>,
    /// What the steps cost, shared by every scanner of these views ([`model::spend`]).
    ledger: Arc<Mutex<model::Ledger>>,
    /// The price table, when the mount has one (`--prices`).
    prices: std::sync::OnceLock<Arc<prices::Prices>>,
    /// Told when the history is logged ([`Views::wait_history`]).
    history_in: Condvar,
}

/// Where these views' events also go, and the workspace they are shown under there.
type Teed = (Arc<dyn Tee>, Arc<str>);

/// Where a workspace's events also go: a home's root log ([`crate::home`]).
pub(crate) trait Tee: Send + Sync {
    /// Events of workspace `ws`, shown as the root shows them; `history`: its
    /// reconstructed history, whole (it comes once).
    fn take(&self, ws: &str, events: Vec<Event>, history: bool);
}

impl Tee for EventLog {
    fn take(&self, _ws: &str, events: Vec<Event>, _history: bool) {
        self.append(&events);
    }
}

impl Views {
    /// The views of the workspace at `root`, as agent `confined` may see them.
    pub(crate) fn new(root: &Path, confined: Option<&str>) -> Arc<Self> {
        Arc::new(Self {
            root: root.to_path_buf(),
            confined: confined.map(str::to_string),
            log: EventLog::new(),
            waiting: Mutex::new(Some(Vec::new())),
            poked: Mutex::new(false),
            wake: Condvar::new(),
            deposits: Mutex::new(Deposits::default()),
            starts: Mutex::new(Default::default()),
            status_scanners: Default::default(),
            status_turn: Default::default(),
            scanners_made: Default::default(),
            names: Mutex::new(Default::default()),
            status_lens: Default::default(),
            refs_watched: AtomicUsize::new(0),
            refs_moved: AtomicBool::new(true),
            refs_topped: AtomicBool::new(false),
            tee: Mutex::new(None),
            pool: std::sync::OnceLock::new(),
            ledger: Arc::default(),
            prices: std::sync::OnceLock::new(),
            history_in: Condvar::new(),
        })
    }

    /// From now on tokens are priced with `prices`, when given (once; a second table is
    /// ignored).
    pub(crate) fn set_prices(&self, prices: Option<Arc<prices::Prices>>) {
        if let Some(p) = prices {
            let _ = self.prices.set(p);
        }
    }

    /// Waits until the history is logged, `limit` at most; whether it is.
    pub(crate) fn wait_history(&self, limit: Duration) -> bool {
        let deadline = Instant::now() + limit;
        let mut waiting = self.waiting.lock();
        while waiting.is_some() {
            if self
                .history_in
                .wait_until(&mut waiting, deadline)
                .timed_out()
            {
                return waiting.is_none();
            }
        }
        true
    }

    /// A scanner of this workspace that shares the views' ledger.
    fn new_scanner(&self) -> std::io::Result<Scanner> {
        self.scanners_made.fetch_add(1, Ordering::Relaxed);
        Scanner::with_ledger(&self.root, self.ledger.clone())
    }

    /// From now on every event logged here is also logged in `log` (a home mount's root
    /// log), as the root shows it: naming workspace `ws`, its path under `ws/`.
    pub(crate) fn tee_to(&self, log: Arc<dyn Tee>, ws: Arc<str>) {
        *self.tee.lock() = Some((log, ws));
    }

    /// Logs `events` here, and in the home's log when there is one; `history`: they
    /// are the workspace's reconstructed history, whole.
    fn append(&self, events: &[Event], history: bool) {
        self.log.append(events);
        if let Some((log, ws)) = &*self.tee.lock() {
            let shown: Vec<Event> = events.iter().map(|e| e.clone().in_workspace(ws)).collect();
            log.take(ws, shown, history);
        }
    }

    /// Shows only what agent `id` may see from now on.
    pub(crate) fn confine(&mut self, id: &str) {
        self.confined = Some(id.to_string());
    }

    pub(crate) fn log(&self) -> &EventLog {
        &self.log
    }

    /// Starts the follower (module docs). Returns at once.
    pub(crate) fn start(self: &Arc<Self>) {
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("litanyfs-events".into())
            .spawn(move || me.follow());
        if let Err(e) = started {
            ::log::error!("events: no follower thread ({e}); `events` stays empty");
        }
    }

    /// From now on every change to the refs is told ([`Views::refs_moved`]), so the
    /// follower need not read them at every look.
    pub(crate) fn refs_watched(&self) {
        self.refs_watched.fetch_add(1, Ordering::Relaxed);
    }

    /// A watch that reported every change to the refs has ended (its tree was closed):
    /// unless another still does, the follower reads the refs at each look again.
    pub(crate) fn refs_unwatched(&self) {
        let _ = self
            .refs_watched
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        self.refs_moved();
    }

    /// The first model of a follower: the refs read afresh, so that a change told before
    /// it (the flag starts set) costs no second reading at the next look. A scanner of
    /// views whose refs the pool watches trusts its reading for
    /// [`pool::TOPPED_REFS_TRUST`] from then on.
    pub(crate) fn first_scan(&self, scanner: &mut Scanner) -> Model {
        if self.refs_are_topped() {
            scanner.trust_refs_for(pool::TOPPED_REFS_TRUST);
        }
        self.refs_moved.store(false, Ordering::Relaxed);
        scanner.scan()
    }

    /// A home's pool watches every directory a ref moves in (see `refs_topped`).
    pub(crate) fn refs_topped(&self) {
        self.refs_topped.store(true, Ordering::Relaxed);
    }

    /// Whether a home's pool watches every directory a ref moves in.
    pub(crate) fn refs_are_topped(&self) -> bool {
        self.refs_topped.load(Ordering::Relaxed)
    }

    /// Whether some watch reports every change to the refs now.
    pub(crate) fn refs_are_watched(&self) -> bool {
        self.refs_watched.load(Ordering::Relaxed) > 0
    }

    /// The refs changed (or a watch overflowed): the next look reads them again.
    pub(crate) fn refs_moved(&self) {
        self.refs_moved.store(true, Ordering::Relaxed);
        self.poke();
    }

    /// Something changed: look again now rather than at the next tick.
    pub(crate) fn poke(&self) {
        *self.poked.lock() = true;
        self.wake.notify_one();
        if let Some(pool) = self.pool.get() {
            pool.poke();
        }
    }

    /// Whether the view may show `e` (module docs).
    fn visible(&self, e: &Event) -> bool {
        let Some(me) = &self.confined else {
            return true;
        };
        let from = e.field("from").and_then(|v| v.as_str());
        match e.kind {
            Kind::AgentCreated
            | Kind::AgentDeleted
            | Kind::MarkSet
            | Kind::MarkCleared
            | Kind::LogFull => true,
            // Written through this mount, whose sender a confined mount is.
            Kind::MessageDropped | Kind::MessageRefused | Kind::Control => true,
            Kind::MessageDeposited | Kind::MessageDelivered => {
                e.agent == *me || from == Some(me.as_str())
            }
            Kind::StepStarted
            | Kind::StepFinished
            | Kind::StepFailed
            | Kind::ToolStarted
            | Kind::ToolFinished
            | Kind::BadRecord
            | Kind::Woken => e.agent == *me,
            Kind::SignalRaised | Kind::SignalCleared => {
                let kind = e
                    .field("signal")
                    .and_then(|v| v.as_str())
                    .and_then(signal::SignalKind::parse);
                kind.is_some_and(|k| signal::visible(k, &e.agent, Some(me)))
            }
        }
    }

    /// Logs live events, or keeps them until history is in.
    fn emit(&self, events: Vec<Event>) {
        let events = self.starts.lock().pass(events);
        self.log_now(events);
    }

    /// [`Views::emit`], past the starts' hold.
    fn log_now(&self, events: Vec<Event>) {
        let events: Vec<Event> = events.into_iter().filter(|e| self.visible(e)).collect();
        if events.is_empty() {
            return;
        }
        let mut waiting = self.waiting.lock();
        match waiting.as_mut() {
            Some(w) => w.extend(events),
            None => self.append(&events, false),
        }
    }

    /// Logs the reconstructed history, then what waited for it.
    fn history_done(&self, history: Vec<Event>) {
        let history: Vec<Event> = history.into_iter().filter(|e| self.visible(e)).collect();
        let mut waiting = self.waiting.lock();
        self.append(&history, true);
        if let Some(w) = waiting.take() {
            self.append(&w, false);
        }
        self.history_in.notify_all();
        ::log::info!(
            "events: {} events reconstructed from the records",
            history.len()
        );
    }

    fn named(&self, e: Event) -> Event {
        let name = self.names.lock().get(&e.agent).cloned();
        e.named(name.as_deref())
    }

    /// A deposit to `recipient` through this mount is about to be published.
    pub(crate) fn depositing(&self, recipient: &str) {
        *self
            .deposits
            .lock()
            .busy
            .entry(recipient.to_string())
            .or_default() += 1;
    }

    /// The deposit [`Views::depositing`] announced is done: `(file, inode)` when it was
    /// published (from `sender`), `None` when it failed.
    pub(crate) fn deposited(&self, recipient: &str, sender: &str, published: Option<(&str, u64)>) {
        let mut events = Vec::new();
        if let Some((file, _)) = published {
            let e = Event::message_deposited(now_secs(), recipient, sender, file, true);
            events.push(self.named(e));
        }
        {
            let mut d = self.deposits.lock();
            if let Some((file, ino)) = published {
                let now = Instant::now();
                d.reported
                    .retain(|_, at| now.duration_since(*at) < REPORTED_KEEP);
                d.reported
                    .insert((recipient.to_string(), file.to_string(), ino), now);
            }
            if let Some(n) = d.busy.get_mut(recipient) {
                *n -= 1;
                if *n == 0 {
                    d.busy.remove(recipient);
                    let (mine, rest) = std::mem::take(&mut d.woken)
                        .into_iter()
                        .partition(|e| e.agent == recipient);
                    d.woken = rest;
                    events.extend::<Vec<Event>>(mine);
                }
            }
        }
        self.emit(events);
    }

    /// A message being written as `name` to `recipient` through this mount was dropped
    /// (see [`Event::message_dropped`]).
    pub(crate) fn dropped(
        &self,
        recipient: &str,
        name: &str,
        why: &str,
        killed: Option<(u32, i32)>,
    ) {
        let e = Event::message_dropped(now_secs(), recipient, name, why, killed);
        self.emit(vec![self.named(e)]);
    }

    /// A message written as `name` to `recipient` through this mount was refused, `why`
    /// (one word) and `reason` (in words).
    pub(crate) fn refused(&self, recipient: &str, name: &str, why: &str, reason: &str) {
        let e = Event::message_refused(now_secs(), recipient, name, why, reason);
        self.emit(vec![self.named(e)]);
    }

    /// A conversation is being started through this mount ([`starts`]).
    pub(crate) fn starting(&self) {
        self.starts.lock().begin();
    }

    /// The start [`Views::starting`] announced ended: with agent `id` started by
    /// `who`, or none.
    pub(crate) fn started(&self, started: Option<(&str, starts::Starter)>) {
        let events = self.starts.lock().end(started);
        self.log_now(events);
    }

    /// An act through the mount (see [`Event::control`]).
    pub(crate) fn control(
        &self,
        agent: &str,
        path: &str,
        command: &str,
        writer: (u32, u32, &str),
        result: &str,
        detail: &str,
    ) {
        let e = Event::control(now_secs(), agent, path, command, writer, result, detail);
        self.emit(vec![self.named(e)]);
    }

    /// litanyfs launched a driver (pid `pid`) for `agent`.
    pub(crate) fn woken(&self, agent: &str, pid: u32) {
        let e = self.named(Event::woken(now_secs(), agent, pid));
        {
            let mut d = self.deposits.lock();
            if d.busy.contains_key(agent) {
                d.woken.push(e);
                return;
            }
        }
        self.emit(vec![e]);
    }

    fn scanner(&self) -> Option<Scanner> {
        self.new_scanner()
            .map_err(|e| ::log::warn!("events: cannot read the workspace ({e})"))
            .ok()
    }

    fn follow(self: Arc<Self>) {
        // A workspace being made (`litany new` fills `repo.git` after creating it) is
        // not readable yet: try again at each idle tick, for as long as anyone holds the
        // views.
        let mut said = false;
        let mut scanner = loop {
            match self.new_scanner() {
                Ok(s) => break s,
                Err(e) if !said => {
                    ::log::info!("events: cannot read the workspace yet ({e}); trying again");
                    said = true;
                }
                Err(_) => {}
            }
            std::thread::sleep(IDLE_TICK);
            if Arc::strong_count(&self) == 1 {
                return;
            }
        };
        let mut model = self.first_scan(&mut scanner);
        self.remember_names(&model);
        let first = model.clone();
        let me = self.clone();
        let started = std::thread::Builder::new()
            .name("litanyfs-history".into())
            .spawn(move || {
                background();
                me.history(&first);
            });
        if let Err(e) = started {
            ::log::warn!("events: no history thread ({e}); only live events are shown");
            self.history_done(Vec::new());
        }
        let mut rest = Duration::ZERO;
        let mut quiet = 0;
        loop {
            // Pokes that come during the rest are kept and answered by one look after it.
            std::thread::sleep(rest);
            let poked = {
                let mut poked = self.poked.lock();
                if !*poked {
                    let wait = idle_wait(quiet).saturating_sub(rest);
                    self.wake.wait_for(&mut poked, wait);
                }
                std::mem::take(&mut *poked)
            };
            if Arc::strong_count(&self) == 1 {
                return;
            }
            let started = Instant::now();
            let (next, found) = self.look_guarded(&mut scanner, &model);
            rest = look_rest(started.elapsed());
            model = next;
            quiet = if poked || found > 0 {
                0
            } else {
                quiet.saturating_add(1)
            };
        }
    }

    /// Reconstructs what happened before `first` (the first model) and logs it, then
    /// the live events that waited for it.
    fn history(&self, first: &Model) {
        let t = std::time::Instant::now();
        let one_pass = Scanner::one_pass(&self.root, self.ledger.clone())
            .map_err(|e| ::log::warn!("events: cannot read the workspace ({e})"))
            .ok();
        let events = match one_pass {
            Some(mut s) => history::reconstruct(first, &mut s, history::HISTORY_MAX_EVENTS),
            None => Vec::new(),
        };
        ::log::debug!("events: history took {:?}", t.elapsed());
        self.history_done(events);
    }

    /// [`Views::look`], where a bug does not end the events: the look is abandoned,
    /// logged, and the next one starts from the workspace as it is then.
    fn look_guarded(&self, scanner: &mut Scanner, model: &Model) -> (Model, usize) {
        let looked =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.look(scanner, model)));
        match looked {
            Ok(looked) => looked,
            Err(_) => {
                ::log::error!("events: a rescan panicked; the changes it saw are not shown");
                (scanner.scan(), 0)
            }
        }
    }

    /// One look: the workspace now, and its differences from `model` logged (how many
    /// there were, before `--agent` hides any).
    fn look(&self, scanner: &mut Scanner, model: &Model) -> (Model, usize) {
        let told = self.refs_are_watched() || self.refs_are_topped();
        let moved = self.refs_moved.swap(false, Ordering::Relaxed) || !told;
        let mut next = scanner.scan_with(moved);
        self.hold_busy_inboxes(model, &mut next);
        hold_unborn_agents(scanner, model, &mut next);
        let events = {
            let mut skip = |recipient: &str, file: &str, ino: u64| {
                self.deposits
                    .lock()
                    .reported
                    .remove(&(recipient.to_string(), file.to_string(), ino))
                    .is_some()
            };
            follow::diff(model, &next, scanner, &mut skip)
        };
        self.remember_names(&next);
        let found = events.len();
        self.emit(events);
        (next, found)
    }

    /// An inbox with a deposit through this mount under way is taken as it was, so the
    /// new file is reported once, by the hook, and not by the diff first.
    fn hold_busy_inboxes(&self, old: &Model, next: &mut Model) {
        let d = self.deposits.lock();
        for id in d.busy.keys() {
            if let (Some(o), Some(n)) = (old.agents.get(id), next.agents.get_mut(id)) {
                n.pending.clone_from(&o.pending);
            }
        }
    }

    fn remember_names(&self, m: &Model) {
        let mut names = self.names.lock();
        names.clear();
        for (id, a) in &m.agents {
            if let Some(n) = &a.name {
                names.insert(id.clone(), n.clone());
            }
        }
    }

    /// The model now, for `status`: gathered with a free one of the views' scanners, or,
    /// when every one is busy, with the next to be free of them (module docs). A reading
    /// that takes [`crate::SLOW_REQUEST`] or more is logged with its parts: the wait
    /// for a scanner, and the thread's time on a CPU and waiting for one.
    fn model_now(&self) -> Model {
        let asked = Instant::now();
        let sched = crate::process::Sched::now();
        let mut slot = self
            .status_scanners
            .iter()
            .find_map(|m| m.try_lock())
            .unwrap_or_else(|| {
                let turn = self.status_turn.fetch_add(1, Ordering::Relaxed);
                self.status_scanners[turn % STATUS_SCANNERS].lock()
            });
        let waited = asked.elapsed();
        if slot.is_none() {
            *slot = self.scanner();
        }
        let model = slot
            .as_mut()
            .map(|s| s.scan_for_status())
            .unwrap_or_default();
        let took = asked.elapsed();
        if took >= crate::SLOW_REQUEST {
            let s = crate::process::Sched::now()
                .zip(sched)
                .map(|(now, then)| now.since(then))
                .unwrap_or_default();
            ::log::warn!(
                "status of {}: {} agents read in {} ms: {} ms waiting for a scanner, {} ms \
                 on a CPU in {} runs, {} ms waiting for one",
                self.root.display(),
                model.agents.len(),
                took.as_millis(),
                waited.as_millis(),
                s.on_cpu_ns / 1_000_000,
                s.runs,
                s.waiting_ns / 1_000_000
            );
        }
        model
    }

    /// The rows of `status` now.
    pub(crate) fn rows(&self) -> Vec<status::Row> {
        status::rows(
            &self.model_now(),
            self.confined.as_deref(),
            now_secs(),
            self.prices.get().map(|p| &**p),
        )
    }

    /// `attention` (`json: false`) or `attention.json` now.
    pub(crate) fn attention(&self, json: bool) -> Vec<u8> {
        let list = status::attention(&self.rows());
        let bytes = if json {
            status::attention_json(&list).into_bytes()
        } else {
            status::attention_text(&list).into_bytes()
        };
        self.status_lens[2 + usize::from(json)].store(bytes.len() as u64, Ordering::Relaxed);
        bytes
    }

    /// `status` (`json: false`) or `status.json` now.
    pub(crate) fn status(&self, json: bool) -> Vec<u8> {
        let rows = self.rows();
        let bytes = if json {
            status::json(&rows).into_bytes()
        } else {
            status::text(&rows).into_bytes()
        };
        self.status_lens[usize::from(json)].store(bytes.len() as u64, Ordering::Relaxed);
        bytes
    }

    /// The length of the last `status` (`json: false`) or `status.json` made.
    pub(crate) fn status_len(&self, json: bool) -> u64 {
        self.status_lens[usize::from(json)].load(Ordering::Relaxed)
    }

    /// The length of the last `attention` (`json: false`) or `attention.json` made.
    pub(crate) fn attention_len(&self, json: bool) -> u64 {
        self.status_lens[2 + usize::from(json)].load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixture::Fixture;
    use crate::workspace::refs::Flavour;

    fn lines(v: &Views) -> Vec<String> {
        let bytes = v.log().read(Rendering::Text, 0, u32::MAX).unwrap();
        String::from_utf8(bytes)
            .unwrap()
            .lines()
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn the_follower_slows_when_idle_but_never_past_a_second() {
        assert_eq!(idle_wait(0), TICK);
        let waits: Vec<Duration> = (0..40).map(idle_wait).collect();
        assert!(waits.windows(2).all(|w| w[0] <= w[1]), "{waits:?}");
        assert_eq!(waits.last(), Some(&IDLE_TICK));
        assert!(
            IDLE_TICK < Duration::from_secs(1),
            "a change is seen within a second"
        );
        assert_eq!(idle_wait(u32::MAX), IDLE_TICK);
    }

    #[test]
    fn concurrent_status_readers_share_the_views_scanners() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        for i in 0..60 {
            let id = format!("r{i}");
            f.agent(&id, None, &[]).unwrap();
            f.step(
                &id,
                1,
                &[("meta.json", br#"{"started_at":"2026-12-02T09:42:30Z"}"#)],
            )
            .unwrap();
        }
        let v = Views::new(f.root(), None);
        let readers: Vec<_> = (0..8)
            .map(|_| {
                let v = v.clone();
                std::thread::spawn(move || {
                    for _ in 0..25 {
                        assert!(String::from_utf8(v.status(false)).unwrap().contains("r59"));
                    }
                })
            })
            .collect();
        for r in readers {
            r.join().unwrap();
        }
        // 200 readings, mostly at once: each read with a scanner that had read before,
        // not with one made for it (150 ms of CPU each at 130 agents).
        let made = v.scanners_made.load(Ordering::Relaxed);
        assert!(
            (1..=STATUS_SCANNERS).contains(&made),
            "{made} scanners made"
        );
    }

    #[test]
    fn live_events_wait_for_history_and_wakes_for_their_deposit() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        f.agent("r1", Some("Alpha"), &[]).unwrap();
        let v = Views::new(f.root(), None);
        v.remember_names(&Scanner::new(f.root()).unwrap().scan());
        // Found while history is still being made: held back.
        v.depositing("r1");
        v.woken("r1", 42);
        assert!(v.log().is_empty());
        v.deposited("r1", "user", Some(("user-001.md", 7)));
        assert!(v.log().is_empty(), "history first");
        v.history_done(vec![Event::agent_created(1, "r1", None)]);
        let l = lines(&v);
        assert_eq!(l.len(), 3, "{l:?}");
        assert!(l[0].contains(" agent-created "), "{l:?}");
        assert!(
            l[1].contains(" message-deposited Alpha from=user "),
            "{l:?}"
        );
        assert!(l[1].contains("through_mount=true"), "{l:?}");
        assert!(l[2].contains(" woken Alpha pid=42 "), "{l:?}");
        // The follower skips what the hook reported, once.
        let mut d = v.deposits.lock();
        let key = ("r1".to_string(), "user-001.md".to_string(), 7);
        assert!(d.reported.remove(&key).is_some());
        assert!(d.busy.is_empty() && d.woken.is_empty());
    }

    #[test]
    fn a_wall_budget_shows_on_its_trees_root() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        let tree = f
            .tree(&[
                ("version", b"2\n"),
                ("workflow.yaml", b"budgets: {max_wall_seconds: 600}\n"),
            ])
            .unwrap();
        let flow = f
            .commit("refs/heads/config/default", tree, "config: edit")
            .unwrap();
        f.agent("r1", Some("Alpha"), &[]).unwrap();
        f.commit_mark("workflow", "r1", flow).unwrap();
        let meta = br#"{"started_at":"2026-12-02T09:42:30Z","ended_at":"2026-12-02T09:43:35Z"}"#;
        f.step("r1", 1, &[("meta.json", meta)]).unwrap();
        let v = Views::new(f.root(), None);
        let text = String::from_utf8(v.status(false)).unwrap();
        assert!(
            text.contains("wall budget of the tree: 1m05s of 10m00s spent"),
            "{text}"
        );
        let json: serde_json::Value = serde_json::from_slice(&v.status(true)).unwrap();
        let b = &json[0]["budget"];
        assert_eq!(
            (b["max_wall_seconds"].as_u64(), b["wall_left"].as_u64()),
            (Some(600), Some(535))
        );
    }

    #[test]
    fn an_open_of_the_events_waits_for_the_history_a_bounded_time() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        let v = Views::new(f.root(), None);
        assert!(!v.wait_history(Duration::from_millis(30)), "bounded");
        let later = v.clone();
        let done = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            later.history_done(vec![Event::agent_created(1, "r1", None)]);
        });
        let started = Instant::now();
        assert!(v.wait_history(HISTORY_WAIT));
        assert!(started.elapsed() >= Duration::from_millis(50));
        assert_eq!(lines(&v).len(), 1, "the history is in when the wait ends");
        done.join().unwrap();
        assert!(
            v.wait_history(Duration::ZERO),
            "and later opens do not wait"
        );
    }

    #[test]
    fn a_confined_view_logs_only_what_its_agent_may_see() {
        let t = tempfile::tempdir().unwrap();
        let f = Fixture::create(t.path(), Flavour::Litany).unwrap();
        let v = Views::new(f.root(), Some("me"));
        v.history_done(Vec::new());
        v.emit(vec![
            Event::step_started(1, "me", "001"),
            Event::step_started(1, "other", "001"),
            Event::tool_started(1, "other", "001", "t", "bash", "ls"),
            Event::message_deposited(1, "other", "me", "me-001.md", true),
            Event::message_deposited(1, "other", "user", "user-001.md", false),
            Event::message_deposited(1, "me", "other", "other-001.md", false),
            Event::message_delivered(1, "other", "user", "001-user.md"),
            Event::agent_created(1, "other", None),
            Event::mark_set(1, "other", "notify", None),
            Event::woken(1, "other", 9),
        ]);
        let l = lines(&v);
        let kinds: Vec<&str> = l.iter().map(|l| l.split(' ').nth(1).unwrap()).collect();
        assert_eq!(
            kinds,
            [
                "step-started",
                "message-deposited",
                "message-deposited",
                "agent-created",
                "mark-set"
            ],
            "{l:?}"
        );
        assert!(l[0].contains(" me "), "{l:?}");
        assert!(l[1].contains("from=me"), "{l:?}");
        assert!(l[2].contains("from=other to=me"), "{l:?}");
    }
}
