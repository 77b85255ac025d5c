//! The sweep's problems on their way to the workers. One thread lists each problem's
//! candidates (for cuDNN an operation graph and its heuristics per problem) while the workers
//! measure those listed before it, at most a few problems ahead of them ([`Queue::new`]'s
//! `ahead`), so a sweep cut by its time limit lists only about what it measures; past the
//! limit no problem is handed out, and the one being measured finishes.

use std::collections::{HashSet, VecDeque};
use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use gconv_core::ConvProblem;

use super::Pending;

/// Candidates by solver id and config text.
pub type Candidates = Vec<(String, String)>;

/// How long a waiting reader sleeps before looking at the time limit again.
const RECHECK: Duration = Duration::from_millis(200);

pub struct Queue {
    state: Mutex<State>,
    changed: Condvar,
    deadline: Option<Instant>,
    /// Problems listed and not yet taken at which the lister waits.
    ahead: usize,
}

struct State {
    pending: VecDeque<Pending>,
    listed_all: bool,
    /// Set once no reader will take more: the builder ahead stops.
    closed: bool,
}

impl Queue {
    pub fn new(deadline: Option<Instant>, ahead: usize) -> Self {
        let state = State { pending: VecDeque::new(), listed_all: false, closed: false };
        Queue { state: Mutex::new(state), changed: Condvar::new(), deadline, ahead: ahead.max(1) }
    }

    /// A queue of these problems, all listed.
    #[cfg(test)]
    pub fn listed(pending: impl IntoIterator<Item = Pending>) -> Self {
        let queue = Queue::new(None, usize::MAX);
        for p in pending {
            queue.push(p);
        }
        queue.finish_listing();
        queue
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn past_deadline(&self) -> bool {
        self.deadline.is_some_and(|d| Instant::now() >= d)
    }

    /// Whether more listing is of no use: the time is up, or no worker takes problems any more.
    pub fn done_taking(&self) -> bool {
        self.past_deadline() || self.lock().closed
    }

    /// Queues a listed problem, first waiting while `ahead` problems wait for a worker; false
    /// (the problem dropped) where the time is up or no worker takes more.
    pub fn push(&self, p: Pending) -> bool {
        let mut state = self.lock();
        while state.pending.len() >= self.ahead {
            if self.past_deadline() || state.closed {
                return false;
            }
            state = self.changed.wait_timeout(state, RECHECK).unwrap_or_else(|p| p.into_inner()).0;
        }
        state.pending.push_back(p);
        self.changed.notify_all();
        true
    }

    pub fn finish_listing(&self) {
        self.lock().listed_all = true;
        self.changed.notify_all();
    }

    pub fn close(&self) {
        self.lock().closed = true;
        self.changed.notify_all();
    }

    /// Problems listed but never handed out.
    pub fn left(&self) -> usize {
        self.lock().pending.len()
    }

    /// Waits until `ready` finds something in the state, or nothing more can come.
    fn wait_for<T>(&self, mut ready: impl FnMut(&mut State) -> Option<T>) -> Option<T> {
        let mut state = self.lock();
        loop {
            if self.past_deadline() || state.closed {
                return None;
            }
            if let Some(found) = ready(&mut state) {
                return Some(found);
            }
            if state.listed_all {
                return None;
            }
            state = self.changed.wait_timeout(state, RECHECK).unwrap_or_else(|p| p.into_inner()).0;
        }
    }

    /// The next problem for a worker; `None` when every problem is taken or the time is up.
    pub fn take(&self) -> Option<Pending> {
        let taken = self.wait_for(|state| state.pending.pop_front());
        // The lister may be waiting for room.
        self.changed.notify_all();
        taken
    }

    /// The first queued problem not in `built` (its index, problem and candidates), for
    /// building its kernels ahead.
    pub fn next_unbuilt(&self, built: &HashSet<usize>) -> Option<(usize, ConvProblem, Candidates)> {
        self.wait_for(|state| {
            state.pending.iter().find(|p| !built.contains(&p.idx)).map(|p| (p.idx, p.problem.clone(), p.items.clone()))
        })
    }
}
