//! Buffers for large response frames, handed back when the last part of a frame is dropped and
//! used again for a later frame of the same size class. A fresh buffer costs the kernel a page
//! fault and the zeroing of every page as the socket's bytes land in it — measured at a quarter
//! to 40 % of the engine's CPU in a bulk copy of Fetch answers; a reused one costs neither.
//!
//! A frame is a [`Bytes`] owning its buffer ([`Bytes::from_owner`]): slices of it (the record
//! batches the engine keeps until they are written) share it, and when the last one goes the
//! buffer returns to its pool as the newest free one, the oldest free ones being freed as far as
//! the pool's bound of free bytes needs; once the pool (the connection's reader) is gone, it is
//! freed. So the memory a pool holds beyond what its frames' users hold is bounded at every
//! moment; the reader also empties its pool when a small frame arrives (the connection has gone
//! quiet), so an idle connection holds none. Sizes are powers of two (capped at the largest frame
//! the pool serves): a frame takes a free buffer of its own class only, never a much larger one
//! it would keep resident. When a frame is read into a buffer is `client::ResponseReader`'s
//! business.

use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

/// Free buffers of one connection's large frames.
pub(crate) struct FramePool {
    free: Mutex<Vec<Vec<u8>>>,
    /// Most bytes of free buffers kept (their capacities summed).
    max_free_bytes: usize,
    /// Largest size class (the largest frame this pool serves).
    max_class: usize,
}

impl FramePool {
    pub(crate) fn new(max_free_bytes: usize, max_class: usize) -> Arc<Self> {
        Arc::new(Self {
            free: Mutex::new(Vec::new()),
            max_free_bytes,
            max_class,
        })
    }

    fn class(&self, len: usize) -> usize {
        len.next_power_of_two().min(self.max_class).max(len)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Vec<u8>>> {
        self.free.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// An empty buffer for a frame of `len` bytes: a free one of its size class, or a new one.
    /// (The free list stays oldest first, as `give_back` releases from its front.)
    pub(crate) fn take(&self, len: usize) -> Vec<u8> {
        let class = self.class(len);
        let mut free = self.lock();
        match free.iter().position(|b| b.capacity() == class) {
            Some(i) => free.remove(i),
            None => Vec::with_capacity(class),
        }
    }

    /// `buf` (filled with one whole frame) as a frame that returns it here when its last part
    /// is dropped.
    pub(crate) fn frame(self: &Arc<Self>, buf: Vec<u8>) -> Bytes {
        Bytes::from_owner(Pooled {
            buf,
            pool: Arc::downgrade(self),
        })
    }

    /// Keeps `buf` as the newest free buffer, releasing the oldest ones if the bound needs it
    /// (a buffer of a size class no longer in use must not hold the room for ever).
    fn give_back(&self, mut buf: Vec<u8>) {
        if buf.capacity() != self.class(buf.capacity()) || buf.capacity() > self.max_free_bytes {
            return; // not one of ours (cannot happen: `take` sizes them), or larger than the bound
        }
        buf.clear();
        let released: Vec<Vec<u8>> = {
            let mut free = self.lock();
            let mut held: usize = free.iter().map(Vec::capacity).sum();
            let mut oldest = 0;
            while held + buf.capacity() > self.max_free_bytes {
                held -= free[oldest].capacity();
                oldest += 1;
            }
            let released = free.drain(..oldest).collect();
            free.push(buf);
            released
        };
        drop(released); // freed outside the lock
    }

    /// Frees every free buffer (the connection has gone quiet: it received a small frame).
    pub(crate) fn release_free(&self) {
        let released = std::mem::take(&mut *self.lock());
        drop(released);
    }

    /// Bytes of free buffers held now.
    #[cfg(test)]
    pub(crate) fn free_bytes(&self) -> usize {
        self.lock().iter().map(Vec::capacity).sum()
    }
}

/// A frame's buffer, owned by the frame's [`Bytes`] and its slices.
struct Pooled {
    buf: Vec<u8>,
    pool: Weak<FramePool>,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(pool) = self.pool.upgrade() {
            pool.give_back(std::mem::take(&mut self.buf));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    fn filled(pool: &Arc<FramePool>, len: usize, fill: u8) -> Bytes {
        let mut b = pool.take(len);
        b.resize(len, fill);
        pool.frame(b)
    }

    #[test]
    fn a_buffer_returns_when_the_last_slice_is_dropped_and_serves_its_size_class_only() {
        let pool = FramePool::new(64 * MIB, 64 * MIB);
        let frame = filled(&pool, 3 * MIB, 7);
        let at = frame.as_ptr();
        let part = frame.slice(10..20);
        drop(frame);
        assert_eq!(pool.free_bytes(), 0, "a slice still holds the buffer");
        assert_eq!(&part[..], &[7u8; 10]);
        drop(part);
        assert_eq!(pool.free_bytes(), 4 * MIB, "back in the pool, in its 4 MiB class");
        let small = pool.take(MIB + 1);
        assert_eq!(small.capacity(), 2 * MIB, "a smaller frame does not take the 4 MiB buffer");
        let again = pool.take(3 * MIB + 5);
        assert_eq!(again.as_ptr(), at, "a frame of the same class reuses it");
        assert!(again.is_empty());
    }

    #[test]
    fn free_buffers_never_exceed_the_bound_even_when_many_frames_go_at_once() {
        let pool = FramePool::new(8 * MIB, 64 * MIB);
        let frames: Vec<Bytes> = (0..10).map(|i| filled(&pool, 2 * MIB, i)).collect();
        drop(frames);
        assert_eq!(pool.free_bytes(), 8 * MIB, "four 2 MiB buffers kept, the other six freed");
    }

    #[test]
    fn a_returning_buffer_releases_the_oldest_free_ones_and_release_free_empties_the_pool() {
        let pool = FramePool::new(64 * MIB, 64 * MIB);
        drop(filled(&pool, 40 * MIB, 1)); // a 64 MiB buffer fills the bound
        assert_eq!(pool.free_bytes(), 64 * MIB);
        drop(filled(&pool, 3 * MIB, 2)); // a 4 MiB one comes back: the stale 64 MiB one goes
        assert_eq!(pool.free_bytes(), 4 * MIB, "the newest buffer is kept, the oldest released");
        assert_eq!(pool.take(3 * MIB + 1).capacity(), 4 * MIB);
        drop(filled(&pool, 3 * MIB, 3));
        pool.release_free();
        assert_eq!(pool.free_bytes(), 0, "release_free empties the pool");
    }

    #[test]
    fn taking_a_buffer_keeps_the_rest_oldest_first() {
        let pool = FramePool::new(16 * MIB, 64 * MIB);
        let (a, b, c) = (filled(&pool, 3 * MIB, 1), filled(&pool, 2 * MIB, 2), filled(&pool, 5 * MIB, 3));
        drop((a, b, c)); // free, oldest first: 4, 2, 8 MiB
        let taken = pool.take(3 * MIB); // the oldest, the 4 MiB one
        let other = filled(&pool, 3 * MIB, 4); // no free 4 MiB buffer left: a new one
        drop(pool.frame(taken)); // free: 2, 8, 4 MiB (14)
        drop(other); // another 4 MiB one: 18 > 16, so the oldest (2 MiB) goes
        assert_eq!(
            pool.free_bytes(),
            16 * MIB,
            "the 2 MiB buffer, the oldest left, was released, not the 8 MiB one"
        );
    }

    #[test]
    fn frames_outliving_their_pool_free_their_buffers() {
        let pool = FramePool::new(64 * MIB, 64 * MIB);
        let frame = filled(&pool, 2 * MIB, 1);
        drop(pool);
        assert_eq!(frame[0], 1);
        drop(frame); // the pool is gone: freed, no panic
    }

    #[test]
    fn the_largest_class_is_the_largest_frame() {
        let pool = FramePool::new(128 * MIB, 64 * MIB);
        assert_eq!(pool.take(33 * MIB).capacity(), 64 * MIB);
        assert_eq!(pool.take(64 * MIB).capacity(), 64 * MIB);
    }
}
