//! Non-blocking collectives: a started call owns its buffer until [`Pending::wait`] hands it
//! back completed. Owning the buffer (rather than borrowing the caller's) lets a backend move
//! it to a progress thread; the copy into and out of it is cheap next to a link's time.

/// A collective in flight. `wait` blocks until it is done and returns the buffer with the
/// result, bit-identical to the blocking call's; a failure panics with the same message the
/// blocking call gives (naming the call, the group and the failed rank).
pub trait Pending<Buf>: Send {
    fn wait(self: Box<Self>) -> Buf;
    /// Whether the call completed inside its start (nothing is left in flight), so a
    /// recorder counts it as a blocking call.
    fn done_at_start(&self) -> bool {
        false
    }
}

/// A call that completed when it was started (backends without a progress thread).
pub struct Ready<Buf>(pub Buf);

impl<Buf: Send> Pending<Buf> for Ready<Buf> {
    fn wait(self: Box<Self>) -> Buf {
        self.0
    }
    fn done_at_start(&self) -> bool {
        true
    }
}

/// A started call, borrowing the collective that started it.
pub type Handle<'a, Buf> = Box<dyn Pending<Buf> + 'a>;
