//! The engine's loop, a thin driver around [`Negotiator`]: every cycle it
//! gathers this rank's new submissions, exchanges one message per rank with
//! every other rank, and runs what the round decided.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use autotune::SampleRecord;
use collectives::{Communicator, FusedPhases, GroupCollectives, Hierarchy, Host, Transport};
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use super::Planes;
use super::autotune::{AutotuneSetup, Autotuner, layout};
use super::config::{EngineConfig, starting_tuning};
use super::error::{EngineError, Internal, Invalid};
use super::exec;
use super::fusion::{FusionPolicy, fused_bytes};
use super::fusion_buffer::FusionBuffer;
use super::gpu_exec::GpuSide;
use super::messages::{
    Decision, Location, RankMsg, Ready, Request, Tuning, decode_round, round_config,
};
use super::negotiate::Negotiator;
use super::tensor::Submission;
use super::timeline::{Phase, Timeline};

/// Longest cycle time the engine sleeps (an hour): longer would stall the
/// job, and an unbounded one could overflow the clock.
const MAX_CYCLE_US: u64 = 3_600_000_000;
/// Largest segment a retune may set.
const MAX_SEGMENT_BYTES: u64 = 1 << 30;

/// What the API sends the engine.
#[derive(Debug)]
pub(crate) enum Command {
    Submit(Submission),
    /// Leave once every rank has asked to.
    Shutdown,
    /// This rank has no more data: answer with the last rank to join once
    /// every rank has.
    Join(oneshot::Sender<Result<usize, EngineError>>),
    /// Switch every rank to these settings (honoured from rank 0 only).
    Retune(Tuning),
    /// Answer once the engine sleeps with no timer: see [`super::Engine::parked`].
    WhenParked(std::sync::mpsc::Sender<()>),
}

/// Counters, for tests and benchmarks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EngineStats {
    pub rounds: u64,
    pub cache_hits: u64,
    /// Collectives run, and tensors they carried (more tensors than
    /// collectives: fusion at work).
    pub collectives: u64,
    pub tensors: u64,
    /// Switches of settings, and the last one with the round after which
    /// it applied.
    pub retunes: u64,
    pub last_retune: Option<(u64, Tuning)>,
    /// Times the fusion buffer was allocated or grown: it is kept across
    /// cycles, so this stays small in a steady state.
    pub fusion_buffer_growths: u64,
}

struct State<D, H> {
    comm: D,
    /// The per-cycle messages travel here, never on `comm`.
    negotiation: Communicator<H>,
    neg: Negotiator,
    rank: usize,
    /// Submitted here, not yet finished.
    waiting: HashMap<String, Submission>,
    /// Submissions of a name already waiting, in submission order: each
    /// goes to the negotiation once the one before it has finished, so
    /// that every rank runs them in the same order whatever its timing.
    queued: HashMap<String, std::collections::VecDeque<Submission>>,
    /// Submitted since the last round, in order.
    fresh: Vec<Request>,
    /// How many submissions the last round that carried any took: a step
    /// submits the same tensors each time, so a burst that reaches it is
    /// complete.
    last_burst: usize,
    /// Rounds in a row that ran nothing of this rank's.
    idle_rounds: u32,
    /// Whether the negotiation's transport says when another rank has
    /// started a round ([`Communicator::arrival`]).
    hears_arrivals: bool,
    shutdown: bool,
    /// `shutdown` is new: the next round starts at once to say so.
    shutdown_news: bool,
    /// `join` was called and the next message says so; then the reply
    /// waits for every rank to join.
    join_news: bool,
    join_reply: Option<oneshot::Sender<Result<usize, EngineError>>>,
    /// Ranks that had joined when the current round decided.
    joined: Vec<usize>,
    stats: EngineStats,
    timeline: Timeline,
    /// Settings to announce in the next message (rank 0).
    retune: Option<Tuning>,
    cycle_time: Duration,
    /// How long a burst with work in it must bring nothing new before it is
    /// complete: yields alone end a burst early when the submitting thread
    /// is briefly off its core (a loaded machine split three tensors
    /// submitted together into two rounds); but where the program's own
    /// threads keep every core busy, this busy-wait is taken from them.
    settle_quiet: Duration,
    /// Rank 0 of an autotuned job.
    autotuner: Option<Autotuner>,
    /// The sample to announce in the next message (rank 0).
    sample: Option<SampleRecord>,
    /// Every rank of an autotuned job.
    autotune: Option<AutotuneSetup>,
    hierarchy: Option<Arc<Hierarchy>>,
    /// Where fused groups are packed, kept across cycles.
    fusion: FusionBuffer,
    /// GPU tensors' communicator and fusion buffers.
    gpu: GpuSide,
    /// Waiting for the engine to sleep with no timer ([`Command::WhenParked`]).
    parked: Vec<std::sync::mpsc::Sender<()>>,
    /// What this rank's collectives moved and waited for (the heartbeats').
    traffic: Arc<super::config::Traffic>,
}

/// Runs the engine until every rank has shut down or the data plane fails;
/// returns the communicator (to shut its transport down) and the counters.
pub(super) async fn run<D: GroupCollectives<Host>, H: Transport>(
    planes: Planes<D, H>,
    cfg: EngineConfig,
    mut rx: mpsc::UnboundedReceiver<Command>,
) -> (Planes<D, H>, EngineStats) {
    let mut st = State::new(planes, &cfg);
    let mut next = Instant::now();
    let mut open = true;
    loop {
        wait_for_round(&mut rx, &mut st, &mut open, next).await;
        settle(&mut rx, &mut st).await;
        next = Instant::now() + st.cycle_time;
        match st.round().await {
            Ok(false) => {}
            Ok(true) => break,
            Err(e) => {
                if e.is_generation_ended() {
                    // Its owner ended the generation (this worker rejoins, or
                    // the coordinator reset the job): news, not an error.
                    tracing::info!(%e, "engine stopped");
                } else {
                    tracing::error!(%e, "engine stopped");
                }
                st.fail_all(&e);
                drain_after_failure(&mut rx, &e).await;
                break;
            }
        }
    }
    st.stats.cache_hits = st.neg.cache_hits();
    st.stats.fusion_buffer_growths = st.fusion.growths();
    st.timeline.close();
    let planes = Planes {
        data: st.comm,
        negotiation: st.negotiation,
    };
    (planes, st.stats)
}

/// Why an engine waiting for its next round woke.
#[allow(
    clippy::large_enum_variant,
    reason = "a value on the stack for one match, moved once: boxing would allocate per submission"
)]
enum Wake {
    Command(Option<Command>),
    Round,
    /// Another rank started one.
    Arrival,
}

/// Longest an engine with nothing of its own defers joining a round another
/// rank started (see [`wait_for_round`]); less where the cycle is shorter.
const JOIN_DEFER_MAX: Duration = Duration::from_millis(5);

/// Waits for the next round, taking commands as they come (`open`: the API
/// side still holds the queue). An engine with new work starts a round at
/// once ([`State::eager`]); one with news still to agree on sleeps out the
/// cycle until `next` ([`State::timed`]). A round another rank starts is
/// joined at once by an engine waiting on tensors (it may complete them);
/// one with nothing at all waits up to a cycle for submissions of its own
/// first: the other rank is usually a little ahead with the same tensors,
/// and a round joined empty would decide nothing and cost another.
async fn wait_for_round(
    rx: &mut mpsc::UnboundedReceiver<Command>,
    st: &mut State<impl GroupCollectives<Host>, impl Transport>,
    open: &mut bool,
    next: Instant,
) {
    let mut join_by: Option<Instant> = None;
    while !st.eager() {
        let listen = st.hears_arrivals && join_by.is_none();
        let due = match (st.timed(), join_by) {
            (true, Some(j)) => Some(j.min(next)),
            (true, None) => Some(next),
            (false, j) => j,
        };
        if due.is_none() {
            // Asleep with no timer: only a command or another rank's round
            // wakes it now.
            for tx in st.parked.drain(..) {
                let _ = tx.send(());
            }
        }
        let wake = tokio::select! {
            c = rx.recv(), if *open => Wake::Command(c),
            () = tokio::time::sleep_until(due.unwrap_or(next)), if due.is_some() => Wake::Round,
            () = arrival(&st.negotiation), if listen => Wake::Arrival,
            else => Wake::Round,
        };
        match wake {
            Wake::Command(Some(c)) => st.take(c),
            // Every Worker handle is gone: leave as if asked.
            Wake::Command(None) => {
                st.leave();
                *open = false;
            }
            Wake::Arrival if st.waiting.is_empty() => {
                join_by = Some(Instant::now() + st.cycle_time.min(JOIN_DEFER_MAX));
            }
            Wake::Round | Wake::Arrival => return,
        }
    }
}

/// Resolves when another rank has started a round (never, where the
/// transport cannot tell: such an engine is always [`State::timed`]).
/// A round starts when some rank has something new for it (a submission,
/// a join): the rank whose submission completes a tensor is always one, so
/// the other ranks need not start rounds for tensors they wait on.
async fn arrival<H: Transport>(negotiation: &Communicator<H>) {
    match negotiation.arrival() {
        Some(news) => news.await,
        None => std::future::pending().await,
    }
}

/// Rounds in a row that may run nothing of a rank's waiting tensors before
/// its engine stops starting rounds at once for them.
const EAGER_IDLE_ROUNDS: u32 = 3;

/// How many times in a row the engine yields and finds no new submission
/// before it takes a burst of them as complete.
const SETTLE_YIELDS: u32 = 3;

/// Bursts of at least this many submissions end as soon as a burst reaches
/// the size of the last one; smaller ones (a gradient at a time while the
/// backward pass computes) wait out [`EngineConfig::settle_quiet`].
const MIN_KNOWN_BURST: usize = 8;

/// Takes every submission of the burst in progress: the engine yields to
/// the threads submitting and drains its queue until a few yields in a row,
/// and (when there is work) [`EngineConfig::settle_quiet`], bring nothing, so that the
/// tensors a step submits together meet in one round (and one fused
/// collective) without a timer, whose millisecond granularity cost more
/// than the whole collective. A burst as large as the last one (a training
/// step submits the same tensors every time) is complete at once.
async fn settle(
    rx: &mut mpsc::UnboundedReceiver<Command>,
    st: &mut State<impl GroupCollectives<Host>, impl Transport>,
) {
    let mut last = std::time::Instant::now();
    let mut quiet = 0;
    loop {
        let mut got = false;
        while let Ok(c) = rx.try_recv() {
            st.take(c);
            got = true;
        }
        if got {
            last = std::time::Instant::now();
            quiet = 0;
        } else {
            quiet += 1;
        }
        let idle = st.fresh.is_empty() && !st.join_news;
        if st.last_burst >= MIN_KNOWN_BURST && st.fresh.len() >= st.last_burst {
            return;
        }
        if quiet >= SETTLE_YIELDS && (idle || last.elapsed() >= st.settle_quiet) {
            return;
        }
        tokio::task::yield_now().await;
    }
}

/// After a fatal error, answers every later submission with it until the
/// API shuts the engine down.
async fn drain_after_failure(rx: &mut mpsc::UnboundedReceiver<Command>, e: &EngineError) {
    while let Some(c) = rx.recv().await {
        match c {
            Command::Submit(l) => l.fail(e.clone()),
            Command::Join(reply) => {
                let _ = reply.send(Err(e.clone()));
            }
            Command::Shutdown => return,
            // Dropped: the engine will not sleep again.
            Command::Retune(_) | Command::WhenParked(_) => {}
        }
    }
}

impl<D: GroupCollectives<Host>, H: Transport> State<D, H> {
    /// The state an engine starts in; rank 0 of an autotuned job starts
    /// (or resumes) tuning.
    fn new(planes: Planes<D, H>, cfg: &EngineConfig) -> Self {
        let Planes {
            data: comm,
            negotiation,
        } = planes;
        let fusion = FusionPolicy {
            threshold_bytes: cfg.fusion_threshold_bytes,
            small_bytes: comm.options().small_message_bytes,
        };
        let neg = Negotiator::new(comm.size(), cfg.cache_capacity, fusion);
        let rank = comm.rank();
        let hears_arrivals = negotiation.arrival().is_some();
        let timeline = match &cfg.timeline {
            Some(t) if rank == 0 => Timeline::open(t),
            _ => Timeline::disabled(),
        };
        let mut st = State {
            comm,
            negotiation,
            neg,
            rank,
            waiting: HashMap::new(),
            queued: HashMap::new(),
            fresh: Vec::new(),
            last_burst: 0,
            idle_rounds: 0,
            hears_arrivals,
            shutdown: false,
            shutdown_news: false,
            join_news: false,
            join_reply: None,
            joined: Vec::new(),
            stats: EngineStats::default(),
            timeline,
            retune: None,
            cycle_time: cfg.cycle_time.min(Duration::from_micros(MAX_CYCLE_US)),
            settle_quiet: cfg.settle_quiet,
            autotuner: None,
            sample: None,
            autotune: cfg.autotune.clone(),
            hierarchy: cfg.hierarchy.clone(),
            fusion: FusionBuffer::default(),
            gpu: GpuSide::new(cfg.device_timeout),
            parked: Vec::new(),
            traffic: Arc::clone(&cfg.traffic),
        };
        if let Some(setup) = cfg.autotune.as_ref().filter(|_| rank == 0) {
            st.start_autotuner(setup, cfg);
        }
        st
    }

    /// Rank 0: starts (or, for a world size tuned before, resumes) tuning;
    /// a resumed size's best point so far goes out with the first message.
    fn start_autotuner(&mut self, setup: &AutotuneSetup, cfg: &EngineConfig) {
        let start = starting_tuning(cfg, &self.comm);
        let layout = layout(self.hierarchy.as_deref());
        match Autotuner::new(setup, start, layout, self.comm.size()) {
            Ok(a) => {
                if a.current() != start {
                    self.retune = Some(a.current());
                }
                self.autotuner = Some(a);
            }
            Err(e) => tracing::warn!(%e, "autotuning is off"),
        }
    }

    /// Switches this rank to `t` after the round rank 0 announced it in; a
    /// hierarchical switch the layout cannot serve stays flat.
    fn apply(&mut self, mut t: Tuning) -> Tuning {
        let grid = self.hierarchy.clone();
        t.hierarchical_allreduce &= grid.is_some();
        t.hierarchical_allgather &= grid.is_some();
        let o = self.comm.options_mut();
        o.hierarchical_allreduce = grid.clone().filter(|_| t.hierarchical_allreduce);
        o.hierarchical_allgather = grid.filter(|_| t.hierarchical_allgather);
        // Bounded, whatever arrives: a sleep must not overflow the clock.
        t.segment_bytes = t.segment_bytes.clamp(1, MAX_SEGMENT_BYTES);
        t.cycle_time_us = t.cycle_time_us.min(MAX_CYCLE_US);
        o.segment_bytes = usize::try_from(t.segment_bytes).unwrap_or(usize::MAX);
        self.cycle_time = Duration::from_micros(t.cycle_time_us);
        t
    }

    /// This rank leaves: the next round says so at once, and every later one.
    fn leave(&mut self) {
        self.shutdown_news |= !self.shutdown;
        self.shutdown = true;
    }

    fn take(&mut self, c: Command) {
        match c {
            Command::Shutdown => self.leave(),
            Command::Retune(t) => self.retune = Some(t),
            Command::WhenParked(tx) => self.parked.push(tx),
            Command::Join(reply) if self.join_reply.is_some() || self.shutdown => {
                let _ = reply.send(Err(Invalid::Join.into()));
            }
            Command::Join(reply) => {
                self.join_news = true;
                self.join_reply = Some(reply);
            }
            Command::Submit(l) if self.shutdown => l.fail(EngineError::ShutDown),
            Command::Submit(l) if self.waiting.contains_key(&l.req.name) => {
                let name = l.req.name.clone();
                self.queued.entry(name).or_default().push_back(l);
            }
            Command::Submit(l) => self.wait_on(l),
        }
    }

    /// Takes `l` into the next round's negotiation.
    fn wait_on(&mut self, l: Submission) {
        self.fresh.push(l.req.clone());
        self.waiting.insert(l.req.name.clone(), l);
    }

    /// `name` has finished here: the next submission of that name, if one
    /// is queued, goes to the negotiation now.
    fn next_of(&mut self, name: &str) {
        let Some(q) = self.queued.get_mut(name) else {
            return;
        };
        let next = q.pop_front();
        if q.is_empty() {
            self.queued.remove(name);
        }
        if let Some(l) = next {
            self.wait_on(l);
        }
    }

    /// Whether this engine, when not eager, still starts a round every
    /// cycle: while it is leaving or joining, or (rank 0) has settings or an
    /// autotune sample to announce, and always where the transport cannot
    /// say that another rank started one. Otherwise it starts none for the
    /// tensors it waits on: it joins the round of the rank that submits
    /// them last, so ranks that compute (a forward pass, a rank ahead of
    /// the others) run no rounds of nothing.
    fn timed(&self) -> bool {
        !self.hears_arrivals
            || self.shutdown
            || self.join_reply.is_some()
            || self.retune.is_some()
            || self.sample.is_some()
    }

    /// Whether the next round should start now rather than at the end of
    /// the cycle: there are new submissions or news to announce, or (where
    /// the transport cannot say that another rank started a round) this
    /// rank still waits on tensors the last few rounds did not run (the
    /// others may have announced theirs a round later, and wait for this
    /// rank in the next one). Work that stays stuck (a tensor the others
    /// never submit) falls back to the cycle after [`EAGER_IDLE_ROUNDS`].
    fn eager(&self) -> bool {
        !self.fresh.is_empty()
            || self.join_news
            || self.shutdown_news
            || (!self.hears_arrivals
                && !self.waiting.is_empty()
                && self.idle_rounds < EAGER_IDLE_ROUNDS)
    }

    fn message(&mut self) -> RankMsg {
        self.shutdown_news = false;
        let mut m = RankMsg {
            shutdown: self.shutdown,
            joined: std::mem::take(&mut self.join_news),
            retune: if self.rank == 0 {
                self.retune.take()
            } else {
                None
            },
            sample: self.sample.take(),
            ..RankMsg::default()
        };
        if !self.fresh.is_empty() {
            self.last_burst = self.fresh.len();
        }
        for r in self.fresh.drain(..) {
            match self.neg.cached_bit(self.rank, &r) {
                Some(bit) => m.set_bit(bit),
                None => m.new.push(r),
            }
        }
        m
    }

    /// One negotiation round and what it decided; `true` when the engine is done.
    async fn round(&mut self) -> Result<bool, EngineError> {
        self.timeline.cycle(std::time::Instant::now());
        let mine = bincode::serde::encode_to_vec(self.message(), round_config())
            .map_err(|e| Internal::Encode { why: e.to_string() })?;
        let negotiation = (self.negotiation.rank(), self.negotiation.size());
        let data = (self.rank, self.comm.size());
        if negotiation != data {
            return Err(Internal::Planes { negotiation, data }.into());
        }
        let (all, counts) = self
            .negotiation
            .allgather(&mine)
            .await
            .map_err(|e| EngineError::Collective(Arc::new(e)))?;
        let msgs = decode_round(&all, &counts).map_err(|e| Internal::Decode {
            rank: e.rank(),
            why: e.to_string(),
        })?;
        self.stats.rounds += 1;
        let outcome = self
            .neg
            .round(&msgs)
            .map_err(|e| Internal::Negotiation { why: e.to_string() })?;
        let decided = std::time::Instant::now();
        self.joined = outcome.joined;
        let mut bytes = 0u64;
        let mut ran = false;
        for d in outcome.decisions {
            ran |= matches!(d, Decision::Run(_));
            if let Decision::Run(group) = &d {
                bytes += group.iter().map(|t| fused_bytes(t) as u64).sum::<u64>();
            }
            self.decide(d, decided).await?;
        }
        self.idle_rounds = if ran {
            0
        } else {
            self.idle_rounds.saturating_add(1)
        };
        if let (Some(a), true) = (self.autotuner.as_mut(), bytes > 0)
            && let Some(step) = a.round(bytes, std::time::Instant::now())
        {
            self.retune = step.retune.or(self.retune);
            self.sample = Some(step.sample);
        }
        if let (Some(setup), Some(s)) = (&self.autotune, msgs.first().and_then(|m| m.sample)) {
            setup.memory.record(self.comm.size(), s);
        }
        if let Some(t) = outcome.retuned {
            let t = self.apply(t);
            self.stats.retunes += 1;
            self.stats.last_retune = Some((self.stats.rounds, t));
        }
        if let Some(last) = outcome.join_done
            && let Some(reply) = self.join_reply.take()
        {
            let _ = reply.send(Ok(last));
        }
        self.timeline.flush();
        Ok(outcome.finished)
    }

    async fn decide(
        &mut self,
        d: Decision,
        decided: std::time::Instant,
    ) -> Result<(), EngineError> {
        match d {
            Decision::Fail { name, why } => {
                if let Some(l) = self.waiting.remove(&name) {
                    l.fail(why.into());
                    self.next_of(&name);
                }
                Ok(())
            }
            Decision::Run(group) => self.run_group(group, decided).await,
        }
    }

    /// Runs one negotiated group (several tensors: fused) and records its
    /// phases on the timeline.
    async fn run_group(
        &mut self,
        group: Vec<Ready>,
        decided: std::time::Instant,
    ) -> Result<(), EngineError> {
        let mut locals = Vec::with_capacity(group.len());
        for t in &group {
            if self.joined.contains(&self.rank) && !self.waiting.contains_key(t.name()) {
                locals.push(Submission::stand_in(&t.per_rank[self.rank]));
                continue;
            }
            let l = self
                .waiting
                .remove(t.name())
                .ok_or_else(|| Internal::NotSubmitted {
                    name: t.name().to_owned(),
                })?;
            locals.push(l);
        }
        for t in &group {
            self.next_of(t.name());
        }
        self.stats.collectives += 1;
        self.stats.tensors += group.len() as u64;
        let submitted: Vec<std::time::Instant> = locals.iter().map(|l| l.submitted).collect();
        let bytes: usize = locals
            .iter()
            .map(|l| l.req.elements().saturating_mul(l.req.dtype.size()))
            .sum();
        let start = std::time::Instant::now();
        let mut marks = FusedPhases::default();
        let active = self.comm.size() - self.joined.len();
        let result = if group[0].place() == Location::Gpu {
            let gpu = &mut self.gpu;
            gpu.run(&self.comm, &group, locals, &mut marks, active)
                .await
        } else {
            let mut room = exec::HostRoom {
                comm: &self.comm,
                fusion: &mut self.fusion,
            };
            exec::run(&mut room, &group, locals, &mut marks, active).await
        };
        let done = std::time::Instant::now();
        if let Some(last) = submitted.iter().max() {
            self.traffic
                .add(bytes as u64, done.saturating_duration_since(*last));
        }
        if self.timeline.enabled() {
            let at = Span {
                submitted: &submitted,
                decided,
                start,
                marks,
                done,
            };
            record(&mut self.timeline, &group, at);
        }
        result.map_err(|(e, left)| {
            left.into_iter().for_each(|l| l.fail(e.clone()));
            e
        })
    }

    fn fail_all(&mut self, e: &EngineError) {
        if let Some(reply) = self.join_reply.take() {
            let _ = reply.send(Err(e.clone()));
        }
        for (_, l) in self.waiting.drain() {
            l.fail(e.clone());
        }
        for l in self.queued.drain().flat_map(|(_, q)| q) {
            l.fail(e.clone());
        }
    }
}

/// When a group's phases began and ended.
struct Span<'a> {
    submitted: &'a [std::time::Instant],
    decided: std::time::Instant,
    start: std::time::Instant,
    marks: FusedPhases,
    done: std::time::Instant,
}

fn record(tl: &mut Timeline, group: &[Ready], at: Span<'_>) {
    let kind = group[0].kind().name();
    let fused = group.len();
    for (t, &submitted) in group.iter().zip(at.submitted) {
        let name = t.name();
        let bytes = super::fusion::fused_bytes(t);
        let args = serde_json::json!({"dtype": format!("{:?}", t.dtype()), "shape": t.per_rank[0].shape, "bytes": bytes, "fused_tensors": fused});
        tl.phase(
            name,
            Phase::Negotiate,
            submitted,
            at.decided,
            serde_json::json!({}),
        );
        tl.phase(
            name,
            Phase::Queue,
            at.decided,
            at.start,
            serde_json::json!({}),
        );
        match (at.marks.packed, at.marks.reduced) {
            (Some(packed), Some(reduced)) => {
                tl.phase(
                    name,
                    Phase::MemcpyIn,
                    at.start,
                    packed,
                    serde_json::json!({}),
                );
                tl.phase(name, Phase::Collective(kind), packed, reduced, args);
                tl.phase(
                    name,
                    Phase::MemcpyOut,
                    reduced,
                    at.done,
                    serde_json::json!({}),
                );
            }
            _ => tl.phase(name, Phase::Collective(kind), at.start, at.done, args),
        }
    }
}
