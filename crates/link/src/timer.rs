//! A precise sleep for the real-time driver.
//!
//! tokio's timer wheel has a 1 ms resolution: `sleep_until(t)` fires at the
//! first millisecond tick at or after `t`, so on average ~0.5–1 ms late. A link
//! with a 1 ms RTT crosses that timer twice per round trip, which alone would
//! make it look like a 2–3 ms link. The link model computes delivery times to
//! the nanosecond; this module lets the driver honour them to a few
//! microseconds.
//!
//! ```text
//!  driver task                          timer thread (one per process)
//!  -----------                          ------------------------------
//!  sleep_until(t, precise) ─register─▶  heap of (fire_at, seq, Weak<Entry>)
//!     Pending                           park_timeout(head.fire_at)  (hrtimer, 1 ns slack)
//!  ◀──────── Waker::wake ─────────────  at fire_at = t - lead (precise) or t
//!  poll: learn the wake-up latency,
//!        spin on the CPU until t (precise only, at most LEAD_MAX)
//! ```
//!
//! Two latencies stand between a deadline and the task running: the kernel
//! waking the timer thread (a few µs with a 1 ns timer slack, set with
//! `PR_SET_TIMERSLACK`; the default 50 µs slack would show at sub-ms RTTs),
//! and the timer thread waking a parked tokio worker (tens of µs: futex or
//! eventfd, then the scheduler). The second is measured on every wake-up and
//! kept as an moving average, the *lead*. A precise sleep fires `lead` early
//! and the task spins out the rest, so it resumes within a few µs of `t`. A
//! coarse sleep fires at `t` and costs no spinning: the driver uses it when
//! another delivery follows right behind (a bulk transfer), where lateness
//! costs no throughput, and the precise one for the last segment in flight,
//! which is what a request/response exchange waits for.
//!
//! Dropped sleeps leave a dead `Weak` in the heap, skipped without waking anyone.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Context, Poll, Waker};
use std::thread::{self, Thread};
use std::time::{Duration, Instant};

/// Upper bound of the lead, hence of the spin per precise wake-up. A wake-up
/// latency above this is an overloaded machine, not something to spin out.
const LEAD_MAX: Duration = Duration::from_micros(200);

/// Completes at `deadline`. `precise`: within a few µs (fires early and spins
/// the rest); otherwise typically tens of µs late, without spinning.
pub(crate) fn sleep_until(deadline: Instant, precise: bool) -> PreciseSleep {
    let fire_at = if precise {
        deadline.checked_sub(lead()).unwrap_or(deadline)
    } else {
        deadline
    };
    PreciseSleep {
        entry: Arc::new(Entry {
            deadline,
            fire_at,
            precise,
            fired: AtomicBool::new(false),
            waker: Mutex::new(None),
        }),
        registered: false,
    }
}

/// Future returned by [`sleep_until`].
pub(crate) struct PreciseSleep {
    entry: Arc<Entry>,
    registered: bool,
}

impl Future for PreciseSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let entry = &self.entry;
        if entry.fired.load(Ordering::Acquire) {
            entry.finish();
            return Poll::Ready(());
        }
        let now = Instant::now();
        if now >= entry.deadline {
            return Poll::Ready(());
        }
        if entry.precise && entry.deadline - now <= lead() {
            entry.spin_until_deadline();
            return Poll::Ready(());
        }
        *entry.waker.lock().expect("timer waker lock") = Some(cx.waker().clone());
        if !self.registered {
            self.registered = true;
            timer().register(&self.entry);
        }
        // The thread may have fired between the check and storing the waker.
        if self.entry.fired.load(Ordering::Acquire) {
            self.entry.finish();
            return Poll::Ready(());
        }
        Poll::Pending
    }
}

struct Entry {
    deadline: Instant,
    /// When the timer thread should wake the task: `deadline - lead` if precise.
    fire_at: Instant,
    precise: bool,
    fired: AtomicBool,
    waker: Mutex<Option<Waker>>,
}

impl Entry {
    /// Called by the task after the thread fired: learn, then spin if early.
    fn finish(&self) {
        // The whole latency from the planned wake-up to running again: the
        // timer thread's own oversleep plus waking the worker.
        learn_wake_latency(Instant::now().saturating_duration_since(self.fire_at));
        if self.precise {
            self.spin_until_deadline();
        }
    }

    fn spin_until_deadline(&self) {
        while Instant::now() < self.deadline {
            std::hint::spin_loop();
        }
    }
}

/// Moving average of the wake-up latency, in ns (the lead of precise sleeps).
static LEAD_NS: AtomicU64 = AtomicU64::new(20_000);

fn lead() -> Duration {
    Duration::from_nanos(LEAD_NS.load(Ordering::Relaxed))
}

/// EWMA with gain 1/8 (as in RFC 6298's SRTT): follows a change of load in a
/// few dozen wake-ups, ignores a single outlier. Samples are clamped to
/// `LEAD_MAX` so one descheduling does not make every sleep spin long.
fn learn_wake_latency(sample: Duration) {
    let sample = sample.min(LEAD_MAX).as_nanos() as u64;
    let old = LEAD_NS.load(Ordering::Relaxed);
    let new = old - old / 8 + sample / 8;
    LEAD_NS.store(new, Ordering::Relaxed);
}

struct Key {
    deadline: Instant,
    seq: u64,
    entry: Weak<Entry>,
}

impl PartialEq for Key {
    fn eq(&self, other: &Self) -> bool {
        (self.deadline, self.seq) == (other.deadline, other.seq)
    }
}
impl Eq for Key {}
impl PartialOrd for Key {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Key {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.deadline, self.seq).cmp(&(other.deadline, other.seq))
    }
}

struct Timer {
    shared: Arc<Shared>,
    thread: Thread,
}

struct Shared {
    heap: Mutex<BinaryHeap<Reverse<Key>>>,
    seq: AtomicU64,
}

fn timer() -> &'static Timer {
    static TIMER: OnceLock<Timer> = OnceLock::new();
    TIMER.get_or_init(|| {
        let shared = Arc::new(Shared {
            heap: Mutex::new(BinaryHeap::new()),
            seq: AtomicU64::new(0),
        });
        let for_thread = Arc::clone(&shared);
        let handle = thread::Builder::new()
            .name("sluice-link-timer".into())
            .spawn(move || run_timer_thread(&for_thread))
            .expect("spawn the link timer thread");
        Timer {
            shared,
            thread: handle.thread().clone(),
        }
    })
}

impl Timer {
    fn register(&self, entry: &Arc<Entry>) {
        let key = Key {
            deadline: entry.fire_at,
            seq: self.shared.seq.fetch_add(1, Ordering::Relaxed),
            entry: Arc::downgrade(entry),
        };
        let mut heap = self.shared.heap.lock().expect("timer heap lock");
        let earliest = heap
            .peek()
            .is_none_or(|head| key.deadline < head.0.deadline);
        heap.push(Reverse(key));
        drop(heap);
        if earliest {
            self.thread.unpark();
        }
    }
}

impl Shared {
    /// Fires everything due; returns the next live deadline.
    fn fire_due(&self) -> Option<Instant> {
        let mut due = Vec::new();
        let next = {
            let mut heap = self.heap.lock().expect("timer heap lock");
            let now = Instant::now();
            loop {
                let Some(head) = heap.peek() else { break None };
                if head.0.entry.strong_count() == 0 {
                    heap.pop();
                } else if head.0.deadline <= now {
                    due.extend(heap.pop().and_then(|k| k.0.entry.upgrade()));
                } else {
                    break Some(head.0.deadline);
                }
            }
        };
        for entry in due {
            entry.fired.store(true, Ordering::Release);
            if let Some(waker) = entry.waker.lock().expect("timer waker lock").take() {
                waker.wake();
            }
        }
        next
    }
}

fn run_timer_thread(shared: &Shared) {
    reduce_timer_slack();
    loop {
        let Some(next) = shared.fire_due() else {
            thread::park();
            continue;
        };
        let now = Instant::now();
        if next > now {
            thread::park_timeout(next - now);
        }
    }
}

#[cfg(target_os = "linux")]
fn reduce_timer_slack() {
    // SAFETY: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0);
    }
}

#[cfg(not(target_os = "linux"))]
fn reduce_timer_slack() {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Lateness of the precise sleep, as seen by a tokio task.
    #[test]
    fn precise_sleep_is_late_by_microseconds() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let late = rt.block_on(async {
            tokio::spawn(async {
                let mut late = Vec::new();
                for _ in 0..200 {
                    let deadline = Instant::now() + Duration::from_micros(500);
                    sleep_until(deadline, true).await;
                    late.push(Instant::now() - deadline);
                }
                late.sort();
                late
            })
            .await
            .unwrap()
        });
        eprintln!(
            "precise sleep lateness: median {:?}, p90 {:?}, lead {:?}",
            late[100],
            late[180],
            lead()
        );
        assert!(
            late[100] < Duration::from_micros(200),
            "median {:?}",
            late[100]
        );
    }
}
