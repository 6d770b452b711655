//! The universe of an in-process run: its size and options, the first failure (the poison),
//! which ranks have returned, what each rank is doing, and the groups to wake.

use super::InProcessOptions;
use crate::call::Activity;
use crate::error::Failure;
use crate::lock::lock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

/// A group whose waiting ranks the universe wakes when a rank fails or returns.
pub(super) trait Wake: Send + Sync {
    fn wake(&self);
}

pub(super) struct Universe {
    pub(super) size: usize,
    pub(super) opts: InProcessOptions,
    pub(super) poisoned: AtomicBool,
    pub(super) failure: Mutex<Option<Failure>>,
    pub(super) exited: Box<[AtomicBool]>,
    pub(super) activity: Box<[Mutex<Activity>]>,
    pub(super) groups: Mutex<Vec<Weak<dyn Wake>>>,
    pub(super) handed_out: AtomicBool,
}

impl Universe {
    pub(super) fn failure(&self) -> Option<Failure> {
        if !self.poisoned.load(Ordering::Acquire) {
            return None;
        }
        lock(&self.failure).clone()
    }

    pub(super) fn poison(&self, rank: usize, message: String) -> bool {
        let first = {
            let mut f = lock(&self.failure);
            if f.is_some() {
                false
            } else {
                let during = self.activity.get(rank).and_then(|a| lock(a).describe());
                *f = Some(Failure { rank, during, message });
                self.poisoned.store(true, Ordering::Release);
                true
            }
        };
        if first {
            self.wake_all();
        }
        first
    }

    pub(super) fn mark_exited(&self, rank: usize) {
        self.exited[rank].store(true, Ordering::Release);
        self.wake_all();
    }

    pub(super) fn wake_all(&self) {
        let groups: Vec<Arc<dyn Wake>> = lock(&self.groups).iter().filter_map(Weak::upgrade).collect();
        for g in groups {
            g.wake();
        }
    }

    pub(super) fn register(&self, g: Arc<dyn Wake>) {
        let mut groups = lock(&self.groups);
        groups.retain(|w| w.strong_count() > 0);
        groups.push(Arc::downgrade(&g));
    }
}
